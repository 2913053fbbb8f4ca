"""A request's cancel (shared/ledger/cancelling.py), attempt by attempt: a cancel is made pending
only for a job still live, an attempt that never sent its create ends at once, an outcome already
set stays (the state machine's rule), an attempt's end time stays the one observed, and what
`end_unsent_claim` and `vertex_cancel` refuse to touch. tests/unit/test_cancel.py drives the
cancel through the decisions."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest

from shared.clock import iso
from shared.jobs import JobState
from shared.ledger.cancelling import (
    OPERATOR,
    VERTEX,
    CancelResult,
    cancel_request,
    end_unsent_claim,
    is_live,
    settle_cancel,
    vertex_cancel,
)
from shared.ledger.claims import fail_attempt
from shared.ledger.records import Attempt, CancelIntent, RequestRecord
from shared.ledger.states import AttemptOutcome, RequestStatus, check_transition
from tests.support.decide import NOW, at

JOB1 = "projects/p/locations/us-central1/customJobs/1"
JOB2 = "projects/p/locations/us-central1/customJobs/2"


def record_of(status: RequestStatus, *attempts: Attempt) -> RequestRecord:
    return RequestRecord("req-1", {"request_id": "req-1"}, "gs://b/req-1/", status=status, attempts=list(attempts))


def cancel(record: RequestRecord) -> RequestRecord:
    """`record` after an operator's cancel, checked against the state machine as the ledger does."""
    decided = cancel_request(copy.deepcopy(record), by="ana", reason="wrong data", now=NOW)
    assert decided.decision is CancelResult.RECORDED
    check_transition(record, decided.value)
    return decided.value


def preempted_then_running() -> RequestRecord:
    """Attempt 1's job ended by preemption (re-queued); attempt 2's job runs."""
    first = Attempt(
        1, "l", "SPOT", at(0), job=JOB1, state=JobState.FAILED, outcome=AttemptOutcome.REQUEUED, ended_at=at(50)
    )
    second = Attempt(2, "l", "SPOT", at(60), job=JOB2, state=JobState.RUNNING)
    return record_of(RequestStatus.RUNNING, first, second)


def test_only_a_live_job_gets_its_cancel_pending() -> None:
    record = cancel(preempted_then_running())
    first, second = record.attempts
    assert first.cancel_decided_at is None and not first.cancel_pending  # its job ended long ago
    assert second.cancel_decided_at == iso(NOW) and second.cancel_pending
    assert first.outcome is AttemptOutcome.REQUEUED and first.ended_at == at(50)
    assert record.status is RequestStatus.RUNNING  # until Vertex ends attempt 2's job


def test_a_cancel_already_pending_for_a_deadline_switch_keeps_its_time() -> None:
    record = preempted_then_running()
    record.attempts[1].cancel_decided_at = at(70)
    assert cancel(record).attempts[1].cancel_decided_at == at(70)


def test_a_claim_that_never_sent_its_create_has_no_job_to_cancel_and_ends_at_once() -> None:
    record = cancel(record_of(RequestStatus.CLAIMED, Attempt(1, "l", "SPOT", at(0))))
    (attempt,) = record.attempts
    assert attempt.cancel_decided_at is None
    assert attempt.outcome is AttemptOutcome.CANCELLED and attempt.ended_at == iso(NOW)
    assert record.status is RequestStatus.CANCELLED and record.finished_at == iso(NOW)


def test_an_earlier_attempt_that_ended_without_a_job_keeps_its_outcome() -> None:
    # Attempt 1 was refused at its create (no job) and re-queued; attempt 2's claim has not sent its create.
    refused = Attempt(1, "l", "SPOT", at(0), outcome=AttemptOutcome.REQUEUED, ended_at=at(5))
    record = cancel(record_of(RequestStatus.CLAIMED, refused, Attempt(2, "l", "SPOT", at(10))))
    first, second = record.attempts
    assert (first.outcome, first.ended_at) == (AttemptOutcome.REQUEUED, at(5))
    assert second.outcome is AttemptOutcome.CANCELLED and record.status is RequestStatus.CANCELLED


def test_a_job_seen_to_end_before_its_outcome_was_decided_ends_cancelled_at_the_time_observed() -> None:
    ended = Attempt(1, "l", "SPOT", at(0), job=JOB1, state=JobState.SUCCEEDED, ended_at=at(90))
    record = cancel(record_of(RequestStatus.RUNNING, ended))
    (attempt,) = record.attempts
    assert attempt.outcome is AttemptOutcome.CANCELLED and attempt.ended_at == at(90)
    assert attempt.cancel_decided_at is None
    assert record.status is RequestStatus.CANCELLED and record.finished_at == iso(NOW)


def test_a_create_refused_after_the_cancel_keeps_its_failed_outcome_and_ends_the_request_cancelled() -> None:
    sent = Attempt(1, "l", "SPOT", at(0), create_sent_at=at(1))
    record = cancel(record_of(RequestStatus.CLAIMED, sent))
    assert record.status is RequestStatus.CLAIMED and record.attempts[0].outcome is None  # its create may land
    refused = fail_attempt(copy.deepcopy(record), n=1, error={"code": 3, "message": "no"}, now=NOW, reason="refused")
    check_transition(record, refused)
    assert refused.attempts[0].outcome is AttemptOutcome.FAILED and refused.attempts[0].ended_at == iso(NOW)
    assert refused.status is RequestStatus.CANCELLED and refused.pending_alerts == []


def test_the_intent_names_who_when_why_and_its_source() -> None:
    decided = cancel_request(
        record_of(RequestStatus.RUNNING, Attempt(1, "l", "SPOT", at(0), job=JOB1, state=JobState.RUNNING)),
        by="ana",
        reason=None,
        now=NOW,
    )
    assert decided.value.cancel == CancelIntent(by="ana", at=iso(NOW), reason=None, source=OPERATOR)
    assert decided.value.requeue is None


@pytest.mark.parametrize(
    "attempt, live",
    [
        (Attempt(1, "l", "SPOT", "t"), False),  # claimed, create not sent
        (Attempt(1, "l", "SPOT", "t", create_sent_at="t"), True),  # its create may land
        (Attempt(1, "l", "SPOT", "t", create_sent_at="t", outcome=AttemptOutcome.FAILED), False),
        (Attempt(1, "l", "SPOT", "t", job=JOB1, state=JobState.RUNNING), True),
        (Attempt(1, "l", "SPOT", "t", job=JOB1, state=None), True),  # recorded, not yet observed
        (Attempt(1, "l", "SPOT", "t", job=JOB1, state=JobState.CANCELLED), False),
    ],
)
def test_an_attempt_is_live_while_its_job_may_run(attempt: Attempt, live: bool) -> None:
    assert is_live(attempt) is live


def test_settling_waits_for_every_live_job_and_ends_the_request_once() -> None:
    record = cancel(preempted_then_running())
    assert not settle_cancel(record, NOW)
    record.attempts[1].state = JobState.CANCELLED
    later = NOW + timedelta(seconds=30)
    assert settle_cancel(record, later)
    assert record.status is RequestStatus.CANCELLED and record.finished_at == iso(later)
    assert record.attempts[1].outcome is AttemptOutcome.CANCELLED and record.attempts[1].ended_at == iso(later)
    assert not settle_cancel(record, later + timedelta(seconds=1))  # ended already
    assert record.finished_at == iso(later)


def test_a_request_nobody_cancelled_is_never_settled_as_cancelled() -> None:
    record = record_of(RequestStatus.RUNNING, Attempt(1, "l", "SPOT", at(0), job=JOB1, state=JobState.SUCCEEDED))
    assert not settle_cancel(record, NOW)
    assert record.status is RequestStatus.RUNNING and record.attempts[0].outcome is None


def test_a_cancelled_record_without_attempts_settles_without_one() -> None:
    record = record_of(RequestStatus.REQUEUED)
    record.cancel = CancelIntent(by="ana", at=iso(NOW))
    assert settle_cancel(record, NOW)
    assert record.status is RequestStatus.CANCELLED and record.attempts == []


def test_an_unsent_claim_is_ended_only_for_the_claim_reconcile_looked_at() -> None:
    sent = Attempt(1, "l", "SPOT", at(0), create_sent_at=at(1))
    record = cancel(record_of(RequestStatus.CLAIMED, sent))
    assert end_unsent_claim(copy.deepcopy(record), n=1, claimed_at=at(99), now=NOW) is None  # taken over since
    assert end_unsent_claim(copy.deepcopy(record), n=2, claimed_at=at(0), now=NOW) is None
    assert end_unsent_claim(None, n=1, claimed_at=at(0), now=NOW) is None
    with_job = copy.deepcopy(record)
    with_job.attempts[0].job = JOB1
    assert end_unsent_claim(with_job, n=1, claimed_at=at(0), now=NOW) is None
    ended = copy.deepcopy(record)
    ended.attempts[0].outcome = AttemptOutcome.FAILED
    assert end_unsent_claim(ended, n=1, claimed_at=at(0), now=NOW) is None
    not_cancelled = record_of(RequestStatus.CLAIMED, Attempt(1, "l", "SPOT", at(0), create_sent_at=at(1)))
    assert end_unsent_claim(not_cancelled, n=1, claimed_at=at(0), now=NOW) is None
    done = end_unsent_claim(copy.deepcopy(record), n=1, claimed_at=at(0), now=NOW)
    assert done.attempts[0].outcome is AttemptOutcome.CANCELLED and done.attempts[0].ended_at == iso(NOW)
    assert done.status is RequestStatus.CANCELLED


def test_a_hand_cancel_at_vertex_is_recorded_once_at_the_jobs_end() -> None:
    record = record_of(RequestStatus.RUNNING, Attempt(1, "l", "SPOT", at(0), job=JOB1, state=JobState.CANCELLED))
    vertex_cancel(record, record.attempts[0], at(40), NOW)
    assert record.cancel.source == VERTEX and record.cancel.at == at(40)
    assert record.cancel.reason == "the job of attempt 1 was cancelled at Vertex"
    assert record.status is RequestStatus.CANCELLED
    first = copy.deepcopy(record.cancel)
    vertex_cancel(record, record.attempts[0], at(80), NOW)
    assert record.cancel == first


def test_a_hand_cancel_without_an_end_time_is_dated_now() -> None:
    record = record_of(RequestStatus.RUNNING, Attempt(1, "l", "SPOT", at(0), job=JOB1, state=JobState.CANCELLED))
    vertex_cancel(record, record.attempts[0], None, NOW)
    assert record.cancel.at == iso(NOW)


def test_a_cancel_spotjobs_decided_is_not_taken_for_a_hand_cancel() -> None:
    attempt = Attempt(1, "l", "SPOT", at(0), job=JOB1, state=JobState.CANCELLED, cancel_decided_at=at(30))
    record = record_of(RequestStatus.RUNNING, attempt)
    vertex_cancel(record, record.attempts[0], at(40), NOW)
    assert record.cancel is None and record.status is RequestStatus.RUNNING
