"""A request's cancel (shared/ledger/cancelling.py) in the pure moves: recorded once, and from then
on every move that would create an attempt refuses (a new or redelivered message, a re-queue, the
create's send, a deadline switch, a preemption's re-queue), while a job found late is cancelled."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta

from shared.clock import iso
from shared.deciding.decisions import Observation, decide
from shared.jobs import JobState
from shared.ledger.cancelling import CancelResult, cancel_request, end_unsent_claim
from shared.ledger.claims import claim_attempt, fail_attempt, mark_create_sent, record_job
from shared.ledger.records import Attempt, RequestRecord, Requeue
from shared.ledger.states import AttemptOutcome, RequestStatus, check_transition
from tests.support.decide import DEADLINE_POLICY, JOB1, NOW, POLICY, at, job, make_record

STOCKOUT = {"code": 8, "message": "Job failed with STOCKOUT: the Spot VM was preempted 7 times."}


def deadline(slack: float) -> dict[str, object]:
    """Due `slack` seconds after what on-demand from NOW needs (1 s a step, one 60 s changeover)."""
    return {
        "deadline": iso(NOW + timedelta(seconds=1000 + 60 + slack)),
        "total_steps": 1000,
        "expected_step_seconds": 1.0,
        "changeover_seconds": 60.0,
    }


def cancelled(record: RequestRecord, reason: str | None = "wrong data") -> RequestRecord:
    """`record` after `spotjobs cancel`, checked against the state machine as the ledger does."""
    decided = cancel_request(copy.deepcopy(record), by="ana@example.com", reason=reason, now=NOW)
    assert decided.decision is CancelResult.RECORDED
    check_transition(record, decided.value)
    return decided.value


def claimed(*, create_sent: bool = False) -> RequestRecord:
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at=at(0), create_sent_at=at(1) if create_sent else None)
    return make_record(status=RequestStatus.CLAIMED, attempts=[attempt])


def test_the_intent_is_recorded_once_with_who_when_and_why() -> None:
    record = cancelled(make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING))
    assert (record.cancel.by, record.cancel.at, record.cancel.reason) == ("ana@example.com", iso(NOW), "wrong data")
    assert record.status is RequestStatus.RUNNING  # its job still runs: CANCELLED once Vertex ends it
    assert record.attempts[0].cancel_pending and record.attempts[0].outcome is None
    again = cancel_request(copy.deepcopy(record), by="bo@example.com", reason=None, now=NOW)
    assert again.value is None and again.decision is CancelResult.ALREADY
    assert RequestRecord.from_json(record.to_json()) == record  # the intent survives the ledger's JSON


def test_a_finished_or_unknown_request_is_not_cancelled() -> None:
    done = make_record(status=RequestStatus.SUCCEEDED, state=JobState.SUCCEEDED)
    assert cancel_request(done, by="a", reason=None, now=NOW).decision is CancelResult.FINISHED
    assert cancel_request(None, by="a", reason=None, now=NOW).decision is CancelResult.UNKNOWN


def test_a_claim_that_never_sent_its_create_ends_cancelled_at_once_and_sends_none() -> None:
    before = claimed()
    record = cancelled(before)
    assert record.status is RequestStatus.CANCELLED and record.attempts[0].outcome is AttemptOutcome.CANCELLED
    # The claim's holder notes its send under compare-and-swap before sending: refused now.
    assert mark_create_sent(copy.deepcopy(record), n=1, claimed_at=at(0), now=NOW) is None


def test_a_claim_whose_create_was_sent_waits_for_its_job_and_that_job_is_cancelled() -> None:
    record = cancelled(claimed(create_sent=True))
    assert record.status is RequestStatus.CLAIMED and record.attempts[0].outcome is None
    found = record_job(copy.deepcopy(record), n=1, job_name=JOB1, state=JobState.QUEUED, created_at=at(2))
    assert found.attempts[0].job == JOB1 and found.attempts[0].cancel_pending
    ended = decide(found, Observation(1, job(JobState.CANCELLED)), POLICY, NOW).record
    assert ended.status is RequestStatus.CANCELLED and ended.attempts[0].outcome is AttemptOutcome.CANCELLED
    # Reconcile's lookup after the lease found no job instead: the attempt ends, the request too.
    unsent = end_unsent_claim(copy.deepcopy(record), n=1, claimed_at=at(0), now=NOW)
    assert unsent.status is RequestStatus.CANCELLED and unsent.attempts[0].outcome is AttemptOutcome.CANCELLED


def test_a_create_refused_after_the_cancel_ends_the_request_cancelled_without_an_alert() -> None:
    record = cancelled(claimed(create_sent=True))
    refused = fail_attempt(copy.deepcopy(record), n=1, error={"code": 3, "message": "no"}, now=NOW, reason="refused")
    assert refused.status is RequestStatus.CANCELLED and refused.pending_alerts == []
    assert refused.attempts[0].outcome is AttemptOutcome.FAILED


def test_no_message_claims_an_attempt_of_a_cancelled_request() -> None:
    record = cancelled(claimed())
    for n, requeued in ((1, False), (2, True)):  # a redelivered or new message, a re-queue
        claim = claim_attempt(
            copy.deepcopy(record), envelope=record.request, n=n, now=NOW, lease_seconds=0, output_dir="x",
            requeued=requeued,
        )  # fmt: skip
        assert claim.kind == "cancelled" and not claim.writes


def test_a_requeue_in_flight_is_dropped_and_its_message_claims_nothing() -> None:
    preempted = make_record(status=RequestStatus.REQUEUED, state=JobState.FAILED)
    preempted.attempts[0].outcome = AttemptOutcome.REQUEUED
    preempted.requeue = Requeue(2, "us-central1", "SPOT", "preemption", at(50), message_id="m-2")
    record = cancelled(preempted)
    assert record.requeue is None and record.status is RequestStatus.CANCELLED
    claim = claim_attempt(
        copy.deepcopy(record), envelope=record.request, n=2, now=NOW, lease_seconds=0, output_dir="x", requeued=True
    )
    assert claim.kind == "cancelled"


def test_a_preemption_after_the_cancel_ends_it_cancelled_never_requeued() -> None:
    record = cancelled(make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING))
    decision = decide(record, Observation(1, job(JobState.FAILED, error=STOCKOUT)), POLICY, NOW)
    assert decision.record.requeue is None and not decision.effects.requeue_decided
    assert decision.record.status is RequestStatus.CANCELLED
    assert decision.record.attempts[0].outcome is AttemptOutcome.CANCELLED


def test_a_cancelled_request_is_never_switched_for_its_deadline() -> None:
    record = cancelled(make_record(request=deadline(100)))  # waiting with too little slack
    decision = decide(record, Observation(1, job(JobState.QUEUED)), DEADLINE_POLICY, NOW)
    assert decision.record.requeue is None and not decision.effects.requeue_decided
    assert decision.record.attempts[0].outcome is None


def test_a_cancel_during_a_deadline_switch_drops_the_next_attempt_and_ends_with_the_old_job() -> None:
    switching = decide(make_record(request=deadline(100)), Observation(1, job(JobState.QUEUED)), DEADLINE_POLICY, NOW)
    assert switching.record.requeue is not None and switching.record.attempts[0].ending
    record = cancelled(switching.record)
    assert record.requeue is None and record.status is RequestStatus.REQUEUED  # the old job still ends
    later = NOW + timedelta(seconds=30)
    ended = decide(record, Observation(1, job(JobState.CANCELLED, update=700)), DEADLINE_POLICY, later)
    assert ended.record.status is RequestStatus.CANCELLED and not ended.effects.requeue_decided
    assert ended.record.attempts[0].outcome is AttemptOutcome.SWITCHED_TO_ON_DEMAND  # set once


def test_a_job_cancelled_by_hand_at_vertex_is_the_requests_cancel() -> None:
    record = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    decision = decide(record, Observation(1, job(JobState.CANCELLED)), POLICY, NOW)
    assert decision.record.status is RequestStatus.CANCELLED
    assert decision.record.cancel is not None and decision.record.cancel.source == "vertex"
    claim = claim_attempt(decision.record, envelope=record.request, n=1, now=NOW, lease_seconds=0, output_dir="x")
    assert claim.kind == "cancelled"


def test_a_switch_cancel_spotjobs_sent_is_not_taken_for_a_hand_cancel() -> None:
    switching = decide(make_record(request=deadline(100)), Observation(1, job(JobState.QUEUED)), DEADLINE_POLICY, NOW)
    ended = decide(switching.record, Observation(1, job(JobState.CANCELLED, update=700)), DEADLINE_POLICY, NOW)
    assert ended.record.cancel is None and ended.effects.requeue_decided


def test_status_shows_who_cancelled_when_and_why() -> None:
    from spotjobs.cli.status import format_request

    text = format_request(cancelled(claimed()), now=NOW)
    assert f"cancelled   by ana@example.com at {iso(NOW)}: wrong data" in text


def test_states_allow_cancelling_a_claimed_or_requeued_request() -> None:
    for status in (RequestStatus.CLAIMED, RequestStatus.REQUEUED):
        before = replace(make_record(status=status), attempts=[])
        check_transition(before, replace(before, status=RequestStatus.CANCELLED))
