"""`came_back` and `track_wait`'s `returned` at their edges (the twelfth mutation pass): a job that
ran, then waited QUEUED and PENDING (one wait, from the QUEUED read), read again in that PENDING
with the same update time (a redelivery) came back from nowhere: its wait still counts from the
QUEUED read, not from the PENDING one."""

from __future__ import annotations

import copy
from datetime import datetime

from shared.clock import parse_iso
from shared.deciding.decisions import Observation, decide
from shared.deciding.waits import track_wait
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import RequestRecord
from tests.support.decide import JOB1, POLICY, at, make_record


def snapshot(state: str, update: float) -> JobSnapshot:
    return JobSnapshot(JOB1, state, create_time=at(1), start_time=at(10), update_time=at(update))


PENDING_AFTER_QUEUED = snapshot(JobState.PENDING, 200)


def observe(record: RequestRecord, job: JobSnapshot, read_at: float) -> RequestRecord:
    now: datetime = parse_iso(at(read_at))
    return decide(copy.deepcopy(record), Observation(1, job), POLICY, now).record


def ran_then_queued_then_pending() -> RequestRecord:
    record = make_record(state=None)
    for job, read_at in [
        (snapshot(JobState.RUNNING, 10), 20),
        (snapshot(JobState.QUEUED, 100), 110),
        (PENDING_AFTER_QUEUED, 210),
    ]:
        record = observe(record, job, read_at)
    attempt = record.attempts[0]
    assert (attempt.state_changed_at, attempt.wait_began_at) == (at(200), at(100))
    return record


def test_a_read_of_the_same_update_again_is_no_return_and_keeps_the_wait_from_its_first_state() -> None:
    again = observe(ran_then_queued_then_pending(), PENDING_AFTER_QUEUED, 400).attempts[0]
    assert (again.state_changed_at, again.wait_began_at) == (at(200), at(100))
    # Updated since, in the same state: it ran and came back, a wait of its own.
    later = observe(ran_then_queued_then_pending(), snapshot(JobState.PENDING, 300), 400).attempts[0]
    assert (later.state_changed_at, later.wait_began_at) == (at(300), at(300))


def test_a_caller_that_does_not_say_the_job_came_back_keeps_its_wait() -> None:
    attempt = ran_then_queued_then_pending().attempts[0]
    track_wait(attempt, PENDING_AFTER_QUEUED, JobState.PENDING)
    assert attempt.wait_began_at == at(100)


def test_a_run_no_read_saw_is_a_return_even_before_the_record_knows_the_job_started() -> None:
    """The record holds a wait of a job never seen started; a read of that wait, updated since,
    shows a start time: it ran and came back, so the state is new from that update, and a late
    read of the run (updated before it) is stale news."""
    record = make_record(state=None)
    never_started = JobSnapshot(JOB1, JobState.PENDING, create_time=at(1), update_time=at(5))
    record = observe(record, never_started, 8)
    record = observe(record, snapshot(JobState.PENDING, 100), 110)
    assert (record.attempts[0].state_changed_at, record.attempts[0].wait_began_at) == (at(100), at(100))
    late_run = observe(record, snapshot(JobState.RUNNING, 10), 120)
    assert late_run.attempts[0].state == JobState.PENDING
