"""A deadline judged on the moment a read at Vertex was taken, not on when it is decided (issue
43): a reconcile pass answers its gets from a listing taken at its start, and an event may be
decided long after its read (a redelivery, a crash). A read taken before the deadline that finds
the job running says nothing of the deadline: the job may have ended in time since (its end
judges it: `alert_if_finished_late`)."""

from __future__ import annotations

import copy
from datetime import timedelta

from spotjobs_kit.lines import KitRecord

from shared.clock import iso
from shared.deciding.decisions import Observation, decide
from shared.jobs import JobState
from shared.ledger.states import RequestStatus
from tests.support.decide import (
    DEADLINE,
    DEADLINE_POLICY,
    DEADLINE_STEPS,
    JOB1,
    NOW,
    POLICY,
    job,
    make_record,
    running_toward_deadline,
)

LATE = DEADLINE + timedelta(minutes=10)  # when the decision is taken


def seconds_after_job_times(moment) -> float:
    """`job(update=...)` for a job updated (or ended) at `moment`."""
    return (moment - NOW).total_seconds() + 600


def test_a_read_taken_before_the_deadline_and_decided_after_it_says_nothing_of_the_deadline() -> None:
    read_before = Observation(1, job(JobState.RUNNING), read_at=DEADLINE - timedelta(seconds=60))
    decision = decide(running_toward_deadline(DEADLINE_STEPS), read_before, DEADLINE_POLICY, LATE)
    assert [alert.kind for alert in decision.effects.alerts] == []

    # The job in truth ended in time: its end, read next, says nothing either.
    ended_in_time = job(JobState.SUCCEEDED, update=seconds_after_job_times(DEADLINE - timedelta(seconds=30)))
    ended = decide(decision.record, Observation(1, ended_in_time, read_at=LATE), DEADLINE_POLICY, LATE)
    assert ended.record.status == RequestStatus.SUCCEEDED
    assert [alert.kind for alert in ended.effects.alerts] == []


def test_a_read_taken_after_the_deadline_that_finds_the_job_not_ended_says_it_is_missed() -> None:
    read_after = Observation(1, job(JobState.RUNNING), read_at=DEADLINE + timedelta(seconds=1))
    decision = decide(running_toward_deadline(DEADLINE_STEPS), read_after, DEADLINE_POLICY, LATE)
    assert [alert.kind for alert in decision.effects.alerts] == ["deadline_missed"]


def test_a_switched_job_read_cancelling_before_the_deadline_says_nothing_of_it_when_decided_after() -> None:
    """`alert_if_missed_while_ending`: the job a switch cancelled, read not ended before the
    deadline, may have ended in time since; one read not ended after it held the successor back."""
    record = running_toward_deadline(DEADLINE_STEPS)
    record.attempts[0].cancel_decided_at = iso(NOW)
    record.attempts[0].cancel_sent_at = iso(NOW)
    cancelling = job(JobState.CANCELLING, update=seconds_after_job_times(NOW))

    def kinds(read_at) -> list[str]:
        decision = decide(copy.deepcopy(record), Observation(1, cancelling, read_at=read_at), DEADLINE_POLICY, LATE)
        return [alert.kind for alert in decision.effects.alerts]

    assert kinds(DEADLINE - timedelta(seconds=60)) == []
    assert kinds(DEADLINE) == ["deadline_missed"]


def test_a_wait_read_before_the_stuck_bound_and_decided_after_it_is_not_stuck() -> None:
    """The job is known to have waited until the read, not until the decision: it may have started
    since. A read taken past the bound that finds it waiting says it is stuck."""
    stuck_after = timedelta(seconds=DEADLINE_POLICY.stuck_after_seconds)
    record = make_record(state=JobState.PENDING)
    record.attempts[0].state_changed_at = record.attempts[0].wait_began_at = iso(NOW)
    pending = job(JobState.PENDING, update=seconds_after_job_times(NOW))

    def kinds(read_at) -> list[str]:
        decision = decide(
            copy.deepcopy(record), Observation(1, pending, read_at=read_at), POLICY, NOW + 2 * stuck_after
        )
        return [alert.kind for alert in decision.effects.alerts]

    assert kinds(NOW + stuck_after - timedelta(seconds=1)) == []
    assert kinds(NOW + stuck_after) == ["job_stuck"]


def test_a_cancel_read_not_carried_out_before_the_stuck_bound_is_not_stuck_when_decided_after() -> None:
    stuck_after = timedelta(seconds=DEADLINE_POLICY.stuck_after_seconds)
    record = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    record.attempts[0].cancel_decided_at = record.attempts[0].cancel_sent_at = iso(NOW)
    running = job(JobState.RUNNING, update=seconds_after_job_times(NOW))

    def kinds(read_at) -> list[str]:
        decision = decide(
            copy.deepcopy(record), Observation(1, running, read_at=read_at), POLICY, NOW + 2 * stuck_after
        )
        return [alert.kind for alert in decision.effects.alerts]

    assert kinds(NOW + stuck_after - timedelta(seconds=1)) == []
    assert kinds(NOW + stuck_after) == ["job_stuck"]


def test_work_left_read_before_the_deadline_and_decided_after_it_is_neither_missed_nor_at_risk() -> None:
    """The read says where the work stood before the deadline; the job may have ended in time
    since. The next read, taken past the deadline, says it is missed."""
    record = running_toward_deadline(DEADLINE_STEPS // 2)

    def kinds(read_at) -> list[str]:
        decision = decide(copy.deepcopy(record), Observation(1, job(JobState.RUNNING), read_at=read_at), POLICY, LATE)
        return [alert.kind for alert in decision.effects.alerts]

    assert kinds(DEADLINE - timedelta(seconds=60)) == []
    assert kinds(DEADLINE) == ["deadline_missed"]


def test_a_kit_line_written_before_the_deadline_and_decided_after_it_says_nothing_of_the_deadline() -> None:
    """A kit line is judged at the moment it was written (its `time`): the job ran then; its last
    commits may come after it, its end in time with them. One written past the deadline with work
    left says it is missed."""
    record = running_toward_deadline(DEADLINE_STEPS // 2)

    def kinds(written) -> list[str]:
        line = KitRecord("progress", request_id="req-1", attempt=1, run=0, step=DEADLINE_STEPS // 2, time=iso(written))
        decision = decide(copy.deepcopy(record), Observation(1, None, kit=line, job_name=JOB1), POLICY, LATE)
        return [alert.kind for alert in decision.effects.alerts]

    assert kinds(DEADLINE - timedelta(seconds=60)) == []
    assert kinds(DEADLINE) == ["deadline_missed"]
