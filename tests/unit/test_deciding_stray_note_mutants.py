"""`decide_stray` at its edge (the twelfth mutation pass): a stray of a request whose cancel was
asked raises no alert (the cancel asked it to stop), but Vertex billed what it ran: it is noted on
the request's bill all the same, once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from google.cloud.aiplatform_v1 import CustomJob

from shared.deciding.strays import decide_stray
from shared.jobs import LABEL_ATTEMPT
from shared.ledger.records import Attempt, CancelIntent, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decisions import FakePublisher, make_settings

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
RECORDED = "projects/p/locations/us-central1/customJobs/111"
OTHER = "projects/p/locations/us-central1/customJobs/222"
SECOND = "projects/p/locations/us-central1/customJobs/333"
RUNNING = 3  # google.cloud.aiplatform_v1.JobState.JOB_STATE_RUNNING


def vertex_job(name: str, *, attempt: str | None = "1") -> CustomJob:
    return CustomJob(name=name, state=RUNNING, labels={} if attempt is None else {LABEL_ATTEMPT: attempt})


def record(*attempts: Attempt) -> RequestRecord:
    first = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-01T11:00:00Z", job=RECORDED)
    return RequestRecord(
        "req-1",
        {"request_id": "req-1", "custom_job": {"displayName": "train"}},
        "gs://ckpt/requests/req-1/",
        status=RequestStatus.RUNNING,
        attempts=list(attempts) or [first],
    )


@pytest.fixture
def ports() -> Ports:
    bucket = MemoryStorage(clock=lambda: NOW).client().bucket("state")
    return Ports(make_settings("state"), LedgerStore(bucket), FakePublisher, None, clock=lambda: NOW)  # type: ignore[arg-type]


def test_a_stray_of_a_cancelled_request_is_on_its_bill_without_an_alert(ports: Ports) -> None:
    stored = record()
    stored.cancel = CancelIntent("someone@example.com", "2026-12-01T11:30:00Z", "no longer needed")
    ports.ledger.restore(stored)
    first = decide_stray(ports, stored, vertex_job(OTHER), NOW)
    assert first.wrote and first.value is not None
    assert [stray.job for stray in first.value.strays] == [OTHER] and first.value.pending_alerts == []
    assert not decide_stray(ports, stored, vertex_job(OTHER), NOW).wrote  # the next sweep notes nothing again


@pytest.mark.parametrize(("label", "alerted_on"), [("1", (1, RECORDED)), (None, (2, SECOND))])
def test_a_stray_is_alerted_on_the_attempt_it_names_else_on_the_latest(
    ports: Ports, label: str | None, alerted_on: tuple[int, str]
) -> None:
    first = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-01T10:00:00Z", job=RECORDED)
    second = Attempt(2, "us-central1", "STANDARD", claimed_at="2026-12-01T11:00:00Z", job=SECOND)
    stored = record(first, second)
    ports.ledger.restore(stored)
    swapped = decide_stray(ports, stored, vertex_job(OTHER, attempt=label), NOW)
    assert swapped.value is not None
    [alert] = swapped.value.pending_alerts
    assert (alert["attempt"], alert["job"]) == alerted_on
    assert f"carries the labels of attempt {label or 0} of req-1" in alert["message"]  # as labelled: 0 for none
