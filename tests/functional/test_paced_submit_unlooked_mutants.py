"""`leave_line_unlooked`: a waiting attempt whose job cannot be looked up for good leaves its
region's line (seed 1617), only while pacing is on: with pacing off no drainer serves the line
(`in_line` says so) and its entry is left as it stands, unsaid, for when pacing is on again."""

from __future__ import annotations

import pytest

from shared.clock import iso
from shared.ledger.records import RequestRecord
from shared.ledger.run_lock import ledger_bucket
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.paced_submit import leave_line_unlooked
from shared.pacing import Pacer, Waiting, priority_of, waiting_entry
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, make_settings


def _world(gcs_bucket, creates_per_minute: int) -> World:
    settings = make_settings(gcs_bucket.name, SPOTJOBS_VERTEX_CREATES_PER_MINUTE=str(creates_per_minute))
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), settings)


def _waiting_in_line(world: World) -> RequestRecord:
    """req-1's attempt 1, claimed with its create sent and no job recorded, waiting in line."""
    world.submitted()

    def waiting(current: RequestRecord) -> None:
        attempt = current.attempts[0]
        attempt.job, attempt.state, attempt.waiting_since = None, None, iso(world.ports.clock())
        current.status = RequestStatus.CLAIMED

    world.rewrite("req-1", waiting)
    record = world.ledger.get("req-1")
    Pacer(ledger_bucket(world.ledger), world.settings).enqueue(_entry(record))
    return record


def _entry(record: RequestRecord) -> Waiting:
    return waiting_entry(record.attempts[0].location, priority_of(record), record.request_id, 1)


@pytest.mark.parametrize(("creates_per_minute", "leaves"), [(58, True), (0, False)], ids=["paced", "unpaced"])
def test_an_unlooked_attempt_leaves_the_line_only_while_pacing_is_on(
    gcs_bucket, creates_per_minute: int, leaves: bool
) -> None:
    world = _world(gcs_bucket, creates_per_minute)
    record = _waiting_in_line(world)
    log = CapturedLog()

    leave_line_unlooked(record, record.attempts[0], log.logger, world.ports)

    assert Pacer(ledger_bucket(world.ledger), world.settings).has_entry(_entry(record)) is not leaves
    assert len(log.events("quota_left_unlooked")) == int(leaves)
