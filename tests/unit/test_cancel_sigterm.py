"""A cancel's SIGTERM is no preemption (shared/deciding/decisions.py `_stopped_by_cancel`,
shared/deciding/preemptions.py `discount_cancel_stop`): a cancel stops a job's containers as a
preemption does, so the kit's SIGTERM handler writes `preempted` for the run the cancel ended. That
line counts no preemption, so the request's count (`spotjobs status`), its `preempted` notices and
the fleet's `preempt` facts stay within what Vertex did (issue 43, defect 9), whoever cancelled."""

from __future__ import annotations

import copy
from datetime import timedelta

from spotjobs_kit.lines import PREEMPTED, RUN_STARTED, KitRecord

from shared.clock import iso
from shared.deciding.decisions import Decision, Observation, decide
from shared.deciding.events import Signal
from shared.deciding.notices import NoticeKind, note_changes
from shared.deciding.preemptions import kit_runs, unconfirmed_kit_preemptions
from shared.fleet.observations import Kind, Reading, observations_of
from shared.jobs import JobSnapshot, JobState
from shared.ledger.cancelling import note_intent
from shared.ledger.claims import record_job
from shared.ledger.records import Attempt, CancelIntent, RequestRecord
from shared.ledger.states import AttemptOutcome, RequestStatus
from tests.support.decide import JOB1, NOW, POLICY, at, ended_then_cancelled, job, make_record

READING = Reading(runs_started=kit_runs, unconfirmed_preemptions=unconfirmed_kit_preemptions)
NOTIFY = {"notify": {"topic": "projects/p/topics/notify-req-1"}}


def kit(event: str, run: int) -> KitRecord:
    return KitRecord(event=event, request_id="req-1", attempt=1, run=run, job_id="111")


def line(record: RequestRecord, event: str, run: int) -> Decision:
    return decide(
        copy.deepcopy(record), Observation(1, None, Signal.KIT, kit=kit(event, run), job_name=JOB1), POLICY, NOW
    )


def read(record: RequestRecord, state: str) -> Decision:
    return decide(copy.deepcopy(record), Observation(1, job(state)), POLICY, NOW)


def running(*runs: int) -> RequestRecord:
    """A job that runs (read RUNNING), the kit's `run_started` of each of `runs` heard."""
    record = read(make_record(request=NOTIFY), JobState.RUNNING).record
    for run in runs:
        record = line(record, RUN_STARTED, run).record
    return record


def preempt_facts(record: RequestRecord) -> list[object]:
    return [fact for fact in observations_of(record, READING) if fact.kind is Kind.PREEMPT]


def preempted_notices(record: RequestRecord) -> list[dict[str, object]]:
    note_changes(record, NOW)
    return [notice for notice in record.pending_notices if notice["kind"] == NoticeKind.PREEMPTED]


def assert_no_preemption(record: RequestRecord) -> None:
    assert record.attempts[0].preemptions == 0
    assert not preempt_facts(record)
    assert not preempted_notices(record)


def test_the_preempted_line_of_a_run_an_operators_cancel_stopped_counts_nothing() -> None:
    record = running(0)
    note_intent(record, CancelIntent(by="operator", at=iso(NOW)), NOW)  # spotjobs cancel: the job's cancel pending
    record = line(record, PREEMPTED, 0).record  # Vertex stopped it: the kit's SIGTERM handler
    assert_no_preemption(record)
    record = read(record, JobState.CANCELLED).record
    assert record.status == RequestStatus.CANCELLED
    assert_no_preemption(record)


def test_the_preempted_line_of_a_run_a_deadline_switch_stopped_counts_nothing() -> None:
    record = running(0)
    record.attempts[0].cancel_decided_at = iso(NOW)  # a switch (or a move) decided the job's cancel
    assert_no_preemption(line(record, PREEMPTED, 0).record)


def test_a_cancel_by_hand_read_after_its_line_takes_the_count_back_before_any_fact() -> None:
    record = line(running(0), PREEMPTED, 0).record  # the stop's line, before anyone read the cancel
    assert record.attempts[0].preemptions == 1
    assert not preempt_facts(record)  # the kit's word alone: the fleet waits for a confirmation
    record = read(record, JobState.CANCELLING).record
    assert record.attempts[0].preemptions == 0 and not preempt_facts(record)
    record = read(record, JobState.CANCELLED).record
    assert record.status == RequestStatus.CANCELLED
    assert record.attempts[0].preemptions == 0 and not preempt_facts(record)


def test_the_preempted_line_of_a_job_recorded_cancelling_counts_nothing() -> None:
    # Reconcile's look-up found the job its create's lost answer left unrecorded, a person already
    # cancelling it: recorded with its state, no decision made. Then the stop's line comes.
    unrecorded = Attempt(1, "us-central1", "SPOT", claimed_at=at(0), create_sent_at=at(0))
    record = record_job(
        make_record(status=RequestStatus.SUBMITTED, request=NOTIFY, attempts=[unrecorded]),
        n=1,
        job_name=JOB1,
        state=JobState.CANCELLING,
        created_at=at(0),
        started_at=at(1),
    )
    assert record is not None
    record = line(line(record, RUN_STARTED, 0).record, PREEMPTED, 0).record
    assert_no_preemption(record)


def test_a_preemption_before_the_cancel_still_counts_once() -> None:
    record = line(running(0), PREEMPTED, 0).record
    record = line(record, RUN_STARTED, 1).record  # Vertex restarted it: run 0 was preempted
    note_intent(record, CancelIntent(by="operator", at=iso(NOW)), NOW)
    record = line(record, PREEMPTED, 1).record  # the cancel's stop of run 1
    record = read(record, JobState.CANCELLED).record
    assert record.attempts[0].preemptions == 1
    assert len(preempt_facts(record)) == 1


def test_a_redelivered_line_first_after_a_cancel_settled_an_undecided_end_counts_nothing() -> None:
    # The 2369 variant: reconcile recorded the attempt's job ended (at its timeout) with the kit's
    # kept lines and died before deciding; a cancel settled the attempt with no conclusion. The first
    # decision after is a redelivered `preempted` line, not a read of the job's end.
    start = NOW - timedelta(hours=2)
    snapshot = JobSnapshot(
        name=JOB1,
        state=JobState.FAILED,
        error={"code": 4, "message": "The job ran past its scheduling.timeout."},
        create_time=at(0),
        start_time=iso(start),
        end_time=iso(start + timedelta(hours=1)),
        update_time=iso(start + timedelta(hours=1)),
    )
    unrecorded = Attempt(1, "us-central1", "SPOT", claimed_at=at(0), create_sent_at=at(0))
    record = ended_then_cancelled(
        make_record(status=RequestStatus.SUBMITTED, request=NOTIFY, attempts=[unrecorded]), snapshot
    )
    assert record.attempts[0].outcome == AttemptOutcome.CANCELLED

    assert_no_preemption(line(record, PREEMPTED, 0).record)


def test_a_job_seen_cancelling_then_deleted_is_no_preemption_whatever_its_kit_said() -> None:
    # A person deleted the live job in the console: Vertex cancelled it first (its containers
    # stopped, the kit's `preempted` line), then it was gone. Its end is unknown, not a preemption.
    from shared.alerts import AlertKind
    from shared.reconcile_vertex import vanished_job

    record = read(running(0), JobState.CANCELLING).record
    record = line(record, PREEMPTED, 0).record
    decided = decide(copy.deepcopy(record), Observation(1, vanished_job(record.attempts[0], NOW)), POLICY, NOW)
    assert decided.record.requeue is None
    assert [alert.kind for alert in decided.effects.alerts] == [AlertKind.JOB_FAILED]
    assert_no_preemption(decided.record)


def test_a_job_that_exits_0_after_its_cancels_sigterm_is_still_no_success() -> None:
    # "whether the job completed despite cancellation" (CancelCustomJob): a trainer that exits 0 at
    # SIGTERM (Lightning 2.6) leaves its training unfinished, whoever sent the signal.
    record = running(0)
    note_intent(record, CancelIntent(by="operator", at=iso(NOW)), NOW)
    record = line(record, PREEMPTED, 0).record
    decided = read(record, JobState.SUCCEEDED).record
    assert decided.status == RequestStatus.CANCELLED
    assert_no_preemption(decided)
