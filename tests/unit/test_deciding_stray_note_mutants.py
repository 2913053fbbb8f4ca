"""`decide_stray` at its edge (the twelfth mutation pass): a stray of a request a person cancelled
raises no alert (the cancel asked it to stop; the budget's stop alerts), but Vertex billed what it
ran: it is noted on the request's bill all the same, once."""

from __future__ import annotations

import pytest

from shared.deciding.strays import decide_stray
from shared.ledger.records import Attempt, CancelIntent
from shared.log import Logger
from shared.wiring import Ports
from tests.support.strays import NOW, OTHER, RECORDED, memory_ports, running_record, vertex_job

SECOND = "projects/p/locations/us-central1/customJobs/333"


@pytest.fixture
def ports() -> Ports:
    return memory_ports()


def test_a_stray_of_a_cancelled_request_is_on_its_bill_without_an_alert(ports: Ports) -> None:
    stored = running_record()
    stored.cancel = CancelIntent("someone@example.com", "2026-12-01T11:30:00Z", "no longer needed")
    ports.ledger.restore(stored)
    first = decide_stray(ports, stored, vertex_job(OTHER), NOW, Logger())
    assert first.wrote and first.value is not None
    assert [stray.job for stray in first.value.strays] == [OTHER] and first.value.pending_alerts == []
    assert not decide_stray(ports, stored, vertex_job(OTHER), NOW, Logger()).wrote  # the next sweep notes nothing again


@pytest.mark.parametrize(("label", "alerted_on"), [("1", (1, RECORDED)), (None, (2, SECOND))])
def test_a_stray_is_alerted_on_the_attempt_it_names_else_on_the_latest(
    ports: Ports, label: str | None, alerted_on: tuple[int, str]
) -> None:
    first = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-01T10:00:00Z", job=RECORDED)
    second = Attempt(2, "us-central1", "STANDARD", claimed_at="2026-12-01T11:00:00Z", job=SECOND)
    stored = running_record(first, second)
    ports.ledger.restore(stored)
    swapped = decide_stray(ports, stored, vertex_job(OTHER, attempt=label), NOW, Logger())
    assert swapped.value is not None
    [alert] = swapped.value.pending_alerts
    assert (alert["attempt"], alert["job"]) == alerted_on
    assert f"carries the labels of attempt {label or 0} of req-1" in alert["message"]  # as labelled: 0 for none


def test_a_stray_of_a_request_its_budget_stopped_is_alerted(ports: Ports) -> None:
    """Simulator seed 10994: the budget stopped r0-fallback, and a person's console copy of its job
    was found by the sweep and cancelled with no word to that person. docs/operations.md's catalogue
    owes `stray_job` for every stray cancelled; only a person's own cancel of the request (spotjobs
    cancel, or its job's cancel at Vertex) asked its late jobs to stop, and the budget's
    `budget_reached` names only the job its attempt records."""
    from shared.alerts import AlertKind
    from shared.deciding.budget_watch import BUDGET_SOURCE, BUDGET_STOPPER

    stored = running_record()
    stored.cancel = CancelIntent(BUDGET_STOPPER, "2026-12-01T11:30:00Z", "max_cost_usd reached", source=BUDGET_SOURCE)
    ports.ledger.restore(stored)
    swapped = decide_stray(ports, stored, vertex_job(OTHER), NOW, Logger())
    assert swapped.value is not None
    assert [alert["kind"] for alert in swapped.value.pending_alerts] == [AlertKind.STRAY_JOB.value]
