"""An observation that changes nothing (reconcile's pass over a job still running as recorded):
`apply_observation` (shared/deciding/applying.py) writes nothing, and reads the record's fleet facts
once for what was there and once for what is there, not a third time for the same record."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest

from shared.deciding.applying import apply_observation
from shared.deciding.decisions import Observation
from shared.fleet import recording
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.log import Logger
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decisions import FakePublisher, make_settings

NOW = datetime(2026, 12, 6, 15, 0, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/5000000000000000034"


def test_an_observation_that_changes_nothing_reads_the_fleet_facts_of_its_record_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = MemoryStorage(clock=lambda: NOW).client()
    settings = make_settings("state")
    ledger = LedgerStore(client.bucket(settings.state_bucket))
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-06T12:00:00Z", job=JOB, state=JobState.RUNNING)
    request = {"request_id": "req-1", "custom_job": {"displayName": "train"}, "location": "us-central1"}
    record = RequestRecord("req-1", request, "gs://b/req-1/", status=RequestStatus.RUNNING, attempts=[attempt])
    ledger.restore(record)
    ports = Ports(settings, ledger, FakePublisher, None, storage=lambda: client, clock=lambda: NOW)  # type: ignore[arg-type]
    log = Logger(stream=io.StringIO(), min_severity="WARNING")
    running = JobSnapshot(
        name=JOB,
        state=JobState.RUNNING,
        create_time="2026-12-06T12:00:01Z",
        start_time="2026-12-06T12:05:00Z",
        update_time="2026-12-06T12:05:00Z",
    )
    first = apply_observation(ports, "req-1", Observation(1, running), log)  # records the start
    assert first.record is not None and first.record.latest is not None and first.record.latest.started_at
    generation = ledger.read("req-1")[1]
    read: list[str] = []
    counted = recording.observations_of
    monkeypatch.setattr(
        recording, "observations_of", lambda r, reading: read.append(r.request_id) or counted(r, reading)
    )
    again = apply_observation(ports, "req-1", Observation(1, running), log)
    assert again.record == first.record and ledger.read("req-1") == (first.record, generation)
    assert read == ["req-1", "req-1"]  # before the decision, and after it: the same record, not read again
