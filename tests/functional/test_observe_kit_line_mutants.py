"""on_job_event (shared/observe.py) at two more edges its mutants found: a kit line of a job not
indexed yet that names no attempt is foreign, never kept for an adoption; a signed kit line of a job
whose record cannot be read moves nothing and raises nothing (a Vertex read of the job, a service
line's or reconcile's, is what alerts the corrupt record)."""

from __future__ import annotations

import json

import pytest
from spotjobs_kit.lines import format_line

from shared.delivery import Message
from shared.ledger.store import LedgerStore
from shared.observe import EventOutcome, handle_job_event
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, log_entry, make_settings

RUNNING = 3


@pytest.fixture
def world(gcs_bucket) -> World:
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))


def kit_line(job: str, fields: dict, key: str | None) -> bytes:
    payload = json.loads(format_line("run_started", fields, key=key))
    return json.dumps({**json.loads(log_entry(job, "", task="workerpool0-0")), "jsonPayload": payload}).encode()


def deliver(world: World, line: bytes) -> EventOutcome:
    return handle_job_event(
        Message(line, "m-1"), CapturedLog().logger, settings=world.settings, ports=lambda: world.ports
    )


def test_a_kit_line_naming_no_attempt_of_a_job_not_indexed_is_foreign_and_not_kept(world: World) -> None:
    world.submitted(state=RUNNING)
    job = world.vertex.add("req-1", 2, state=RUNNING)  # not indexed

    outcome = deliver(world, kit_line(job, {"request_id": "req-1", "run": 0}, world.kit_key()))

    assert outcome == EventOutcome.FOREIGN
    assert world.ledger.parked_kit_lines(job.rsplit("/", 1)[-1]) == {}


def test_a_signed_kit_line_whose_record_cannot_be_read_moves_nothing_and_raises_nothing(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    key = world.kit_key()
    world.ledger._bucket.blob("requests/req-1.json").upload_from_string(b"{not a record")  # noqa: SLF001

    outcome = deliver(world, kit_line(job, {"request_id": "req-1", "attempt": 1, "run": 0}, key))

    assert outcome == EventOutcome.UNTRUSTED
    assert world.publisher.on("ops-alerts") == []
