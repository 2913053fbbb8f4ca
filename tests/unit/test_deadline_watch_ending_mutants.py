"""`deadline_missed` said by an attempt whose cancelled job has not ended
(shared/deciding/deadline_watch.py `alert_if_missed_while_ending`, seed 707) only while no one else
owes it: not once a successor attempt is recorded (its own watch says it), nor for a request that
already finished. The mutation pass found both untested."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.alerts import AlertKind
from shared.clock import iso
from shared.deciding.deadline_watch import alert_if_missed_while_ending
from shared.deciding.effects import Effects
from shared.jobs import JobState
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from tests.support.decide import NOW, make_record


def ending_past_its_deadline(status: str = RequestStatus.RUNNING) -> RequestRecord:
    """Attempt 1 switched away (its cancel decided), its job still running, the deadline an hour ago."""
    record = make_record(request={"deadline": iso(NOW - timedelta(hours=1))}, state=JobState.RUNNING, status=status)
    record.attempts[0].cancel_decided_at = iso(NOW - timedelta(hours=2))
    assert record.attempts[0].ending
    return record


def said(record: RequestRecord) -> list[str]:
    effects = Effects()
    alert_if_missed_while_ending(record, record.attempts[0], NOW, effects, NOW)
    return [alert.kind for alert in effects.alerts]


def test_the_ending_latest_attempt_of_a_running_request_says_it_once() -> None:
    record = ending_past_its_deadline()
    assert said(record) == [AlertKind.DEADLINE_MISSED]
    assert said(record) == []


def test_a_successor_recorded_says_it_itself() -> None:
    record = ending_past_its_deadline()
    record.attempts.append(Attempt(2, "us-central1", "STANDARD", claimed_at=iso(NOW)))
    assert said(record) == []


@pytest.mark.parametrize("status", [RequestStatus.FAILED, RequestStatus.SUCCEEDED])
def test_a_request_that_finished_owes_no_deadline(status: str) -> None:
    assert said(ending_past_its_deadline(status)) == []
