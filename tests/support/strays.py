"""A request's record, the Vertex jobs labelled with it and the ledger the stray tests decide on
(shared/deciding/strays.py), on the simulator's in-memory Cloud Storage."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from google.cloud.aiplatform_v1 import CustomJob

from shared.jobs import LABEL_ATTEMPT
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decisions import FakePublisher, make_settings

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
RECORDED = "projects/p/locations/us-central1/customJobs/111"  # the job attempt 1 records
OTHER = "projects/p/locations/us-central1/customJobs/222"  # one it does not
RUNNING, SUCCEEDED = 3, 4  # google.cloud.aiplatform_v1.JobState numbers


def vertex_job(name: str = OTHER, *, attempt: str | None = "1", state: int = RUNNING) -> CustomJob:
    """A job at Vertex labelled with attempt `attempt` of req-1 (None: no attempt label)."""
    labels = {} if attempt is None else {LABEL_ATTEMPT: attempt}
    return CustomJob(name=name, state=state, labels=labels)


def running_record(*attempts: Attempt) -> RequestRecord:
    """req-1 RUNNING with `attempts`, by default one SPOT attempt that records `RECORDED`."""
    first = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-01T11:00:00Z", job=RECORDED)
    return RequestRecord(
        "req-1",
        {"request_id": "req-1", "custom_job": {"displayName": "train"}},
        "gs://ckpt/requests/req-1/",
        status=RequestStatus.RUNNING,
        attempts=list(attempts) or [first],
    )


def memory_ports(
    publisher: Callable[[], Any] = FakePublisher, job_service: Callable[[str], Any] | None = None
) -> Ports:
    """Ports on an empty in-memory ledger whose clock stands at NOW."""
    bucket = MemoryStorage(clock=lambda: NOW).client().bucket("state")
    return Ports(make_settings("state"), LedgerStore(bucket), publisher, job_service, clock=lambda: NOW)  # type: ignore[arg-type]
