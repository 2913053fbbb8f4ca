"""shared/found_jobs.py's `adopt_job` at an edge its mutants found (the ninth mutation pass): a job
created for an earlier record of the id, which a person deleted, is refused with an ERROR line that
says so, not the line of a second job of the attempt."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.found_jobs import adopt_job
from shared.ledger.records import RequestRecord
from shared.ledger.store import LedgerStore
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, make_settings

RUNNING = 3


@pytest.fixture
def world(gcs_bucket) -> World:
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))


def test_a_job_of_the_id_s_earlier_record_is_refused_with_a_line_that_names_the_earlier_record(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.vertex.jobs[job].create_time = datetime.now(UTC) - timedelta(hours=1)  # before this record

    def claimed_again(current: RequestRecord) -> None:
        """This record's claim has no job yet; the job (with no kit key) was created before it."""
        current.attempts[0].job = None

    world.rewrite("req-1", claimed_again)
    log = CapturedLog()

    adopt_job(world.ports, "req-1", 1, "us-central1", world.vertex.get_custom_job(name=job), log.logger)

    [line] = log.events("job_of_another_record")
    assert "earlier record of the id" in line["message"]
    assert log.events("duplicate_job") == [] and world.ledger.get("req-1").attempt(1).job is None
