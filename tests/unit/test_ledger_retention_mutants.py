"""The ledger sweep's removal budget by number, as docs/performance.md states it ("at most 5 list
calls and 500 removals to a pass"): test_ledger_retention.py sets the budget to 2 to drive the
turns, so a changed constant went unseen (issue 43, a mutant it left)."""

from __future__ import annotations

from datetime import timedelta

from shared.clock import iso
from shared.ledger.records import RequestRecord
from shared.ledger.retention import SWEEP_STATE, sweep_step
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from sim.gcs import MemoryStorage
from tests.support.decisions import CapturedLog, make_settings
from tests.support.interleave import Clock

RETENTION = 90 * 86400.0  # the default `ledger_retention_seconds`, above every floor


def test_a_pass_removes_at_most_five_hundred_records() -> None:
    clock = Clock()
    ledger = LedgerStore(MemoryStorage(clock=clock).client().bucket("state"))
    request_ids = [f"r{n:04d}" for n in range(501)]
    for request_id in request_ids:
        ledger.restore(
            RequestRecord(
                request_id,
                {"request_id": request_id},
                f"gs://b/{request_id}/",
                RequestStatus.SUCCEEDED,
                finished_at=iso(clock.now),
            )
        )
    now = clock.now + timedelta(seconds=RETENTION)
    settings = make_settings("state")

    first = sweep_step(ledger, CapturedLog().logger, settings=settings, now=now)
    assert (first.listed, first.removed, first.finished_round) == (500, 500, False)
    assert ledger.maintenance_state(SWEEP_STATE) == {"position": "r0500", "finished_at": None}
    second = sweep_step(ledger, CapturedLog().logger, settings=settings, now=now)
    assert (second.listed, second.removed, second.finished_round) == (1, 1, True)
