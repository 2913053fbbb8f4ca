"""The wait of a finished request's Spot attempt is closed in the fleet store when reconcile
retires the request from the active index (shared/reconcile_index.py): the last decision a request
gets may have written the record and lost every fact of its attempt's end, and nothing decides on
a finished request again, so its open `waiting` would say "no capacity" for the estimate's week."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared.clock import utcnow
from shared.fleet import store
from shared.fleet.estimate import estimate
from shared.fleet.observations import FleetFact, Kind, MachineClass, attempt_key
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.ledger.store import ACTIVE_PREFIX, INDEX_GRACE_SECONDS, LedgerStore
from shared.reconcile_index import ReconcileSummary, requests_to_reconcile
from sim.gcs import MemoryStorage
from tests.support.decisions import CapturedLog
from tests.support.interleave import Clock

H100 = MachineClass("a3-highgpu-8g", "NVIDIA_H100_80GB", 8)
JOB = {
    "custom_job": {
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {
                        "machineType": "a3-highgpu-8g",
                        "acceleratorType": "NVIDIA_H100_80GB",
                        "acceleratorCount": 8,
                    }
                }
            ]
        }
    }
}


@pytest.fixture(autouse=True)
def _no_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)  # MemoryStorage checks a delete's generation


class Refusing:
    """The storage's io hook: fails every fleet fact's upload while `down`."""

    def __init__(self) -> None:
        self.down = False

    def __call__(self, _service: str, operation: str, perform: Any) -> Any:
        from google.api_core.exceptions import ServiceUnavailable

        if self.down and operation == "write":
            raise ServiceUnavailable("the fleet's upload")
        return perform()


def finished_after_its_run(ledger: LedgerStore, clock: Clock) -> RequestRecord:
    """A Spot attempt that waited 10 min, ran an hour and succeeded; the fleet told only its wait."""
    created = clock.now
    ledger.update("r1", lambda current: RequestRecord("r1", JOB, "gs://c/r1", status=RequestStatus.CLAIMED))
    bucket: Any = ledger._bucket  # noqa: SLF001 - the state bucket the fleet's facts share
    waiting = FleetFact(Kind.WAITING, "us-east4", created, attempt_key=attempt_key("r1", 1))
    store.write_facts(bucket, H100, [waiting])

    def succeed(current: RequestRecord | None) -> RequestRecord:
        assert current is not None
        current.attempts = [
            Attempt(
                1,
                "us-east4",
                "SPOT",
                claimed_at=created.isoformat(),
                job="j1",
                created_at=created.isoformat(),
                started_at=(created + timedelta(minutes=10)).isoformat(),
                ended_at=(created + timedelta(minutes=70)).isoformat(),
                outcome=AttemptOutcome.SUCCEEDED,
            )
        ]
        current.status = RequestStatus.SUCCEEDED
        current.finished_at = current.attempts[0].ended_at
        return current

    def to(status: RequestStatus) -> Any:
        def move(current: RequestRecord | None) -> RequestRecord:
            assert current is not None
            current.status = status
            return current

        return move

    clock.advance(70 * 60)
    ledger.update("r1", to(RequestStatus.SUBMITTED))
    ledger.update("r1", to(RequestStatus.RUNNING))
    finished = ledger.update("r1", succeed)  # the last decision: its facts lost (not written here)
    assert finished is not None
    clock.advance(INDEX_GRACE_SECONDS)
    return finished


def recent_clock() -> Clock:
    """Two hours ago: the pass's grace and the retention sweep count on the real clock, and a
    record finished longer ago than the ledger's retention would be retired by the sweep."""
    return Clock(utcnow() - timedelta(hours=2))


def open_waits(bucket: Any, clock: Clock) -> int:
    return estimate(store.read(bucket, H100, clock.now), "us-east4", clock.now).open_waits


def reconcile_pass(ledger: LedgerStore, log: CapturedLog) -> list[str]:
    return requests_to_reconcile(ledger, ReconcileSummary(), log.logger, page_size=10, limit=10)


def markers(bucket: Any) -> list[str]:
    return [blob.name for blob in bucket.client.list_blobs(bucket, prefix=ACTIVE_PREFIX)]


def test_the_pass_that_retires_a_finished_request_closes_its_spot_attempts_waits() -> None:
    clock = recent_clock()
    bucket: Any = MemoryStorage(clock=clock).client().bucket("state")
    ledger = LedgerStore(bucket)
    ledger.mark_index_built()
    finished_after_its_run(ledger, clock)
    assert open_waits(bucket, clock) == 1

    assert reconcile_pass(ledger, CapturedLog()) == []

    assert markers(bucket) == []  # retired
    assert open_waits(bucket, clock) == 0
    [wait] = [o for o in store.read(bucket, H100, clock.now) if o.kind is Kind.WAIT]
    assert wait.seconds == 600.0  # the record's own times: the fact the last decision lost


def test_a_failed_close_keeps_the_marker_for_the_next_pass() -> None:
    clock, refusing = recent_clock(), Refusing()
    bucket: Any = MemoryStorage(clock=clock, io=refusing).client().bucket("state")
    ledger = LedgerStore(bucket)
    ledger.mark_index_built()
    finished_after_its_run(ledger, clock)
    log = CapturedLog()

    refusing.down = True
    reconcile_pass(ledger, log)
    assert markers(bucket) == [f"{ACTIVE_PREFIX}r1"]  # kept: it is the one way back to the request
    [line] = log.events("fleet_waits_not_closed")
    assert (line["request_id"], line["severity"]) == ("r1", "WARNING")  # a 503: the next pass may mend it

    refusing.down = False
    reconcile_pass(ledger, log)
    assert markers(bucket) == []
    assert open_waits(bucket, clock) == 0
