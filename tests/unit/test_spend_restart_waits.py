"""The spend leaves out what a Spot job waited after a preemption, as far as reads vouch for it
(shared/fleet/spend.py, `Attempt.rewaited_seconds`): Vertex restarts the job and, while no machine
runs it, bills none. A read that finds the job QUEUED or PENDING once it ran vouches that it waited
from that state's update time until the read began; what came after the last such read stays run
time (a run no read saw may hide there: an upper bound, never less than what ran)."""

from __future__ import annotations

import copy
from datetime import timedelta

from shared.deciding.decisions import Observation, decide
from shared.fleet.spend import request_spend
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import RequestRecord
from spotjobs.reporting.bill import bill
from tests.support.decide import JOB1, NOW, POLICY, at, make_record

A100 = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "a2-highgpu-1g"}, "replicaCount": 1}]}}
STOCKOUT = {"code": 13, "message": "The job failed with a STOCKOUT error."}


def read(
    record: RequestRecord, state: str, update: float, read_at: float | None, *, end: float | None = None
) -> RequestRecord:
    """The job as a read begun at `read_at` (None: a read that says not when) finds it, `update`
    seconds into the story, in `state` since then; it first ran at 10."""
    job = JobSnapshot(
        JOB1,
        state,
        STOCKOUT if state == JobState.FAILED else None,
        create_time=at(1),
        start_time=at(10) if update >= 10 else None,
        end_time=at(end) if end is not None else None,
        update_time=at(update),
    )
    began = None if read_at is None else NOW - timedelta(seconds=600) + timedelta(seconds=read_at)
    return decide(copy.deepcopy(record), Observation(1, job, read_at=began), POLICY, NOW).record


def run_seconds(record: RequestRecord, now: float) -> float:
    return request_spend(record, NOW - timedelta(seconds=600) + timedelta(seconds=now)).run_seconds


def running() -> RequestRecord:
    return read(make_record(request={"custom_job": A100}), JobState.RUNNING, 10, 20)


def test_a_restart_wait_is_no_run_time_as_far_as_reads_vouch_for_it() -> None:
    record = read(running(), JobState.PENDING, 100, 150)  # preempted at 100: Vertex waits for a machine
    assert run_seconds(record, 150) == 90  # at the read the spend stands where the run ended
    record = read(record, JobState.PENDING, 100, 250)  # still waiting at 250
    record = read(record, JobState.RUNNING, 400, 410)  # a machine again at 400
    assert run_seconds(record, 500) == 490 - 150  # 100 to 250 vouched for; 250 to 400 unknown
    assert record.attempts[0].rewaited_seconds == 150
    later = NOW - timedelta(seconds=100)
    [row] = bill([record.to_json()], later)["requests"]  # the report reads the record as the ledger shows it
    assert row["run_seconds"] == request_spend(record, later).run_seconds == 340


def test_a_wait_the_job_ended_in_is_no_run_time_as_far_as_seen() -> None:
    record = read(running(), JobState.QUEUED, 100, 150)
    record = read(record, JobState.FAILED, 460, 470, end=400)  # its restarts ran out: a run may hide after 150
    assert run_seconds(record, 500) == 390 - 50


def test_a_new_waiting_state_ends_what_the_last_one_vouched_for() -> None:
    record = read(running(), JobState.PENDING, 100, 150)
    record = read(record, JobState.PENDING, 250, 300)  # updated since: it may have run in between
    record = read(record, JobState.RUNNING, 400, 410)
    assert run_seconds(record, 500) == 490 - 50 - 50


def test_a_read_begun_before_one_already_applied_takes_nothing_back() -> None:
    record = read(running(), JobState.PENDING, 100, 250)
    record = read(record, JobState.PENDING, 100, 150)  # a slower read, begun earlier, decided after
    record = read(record, JobState.RUNNING, 400, 410)
    assert run_seconds(record, 500) == 490 - 150


def test_the_spend_at_a_moment_before_the_wait_began_is_the_run_up_to_it() -> None:
    record = read(running(), JobState.PENDING, 100, 150)
    assert run_seconds(record, 99.5) == 89.5  # the wait it is in began after: nothing of it counts
    assert run_seconds(record, 100) == 90


def test_a_read_that_says_not_when_it_began_vouches_for_nothing() -> None:
    record = read(running(), JobState.PENDING, 100, None)
    record = read(record, JobState.RUNNING, 400, None)
    assert run_seconds(record, 500) == 490


def test_the_wait_before_the_first_run_was_never_run_time() -> None:
    record = read(make_record(request={"custom_job": A100}, state=None), JobState.PENDING, 5, 8)
    record = read(record, JobState.RUNNING, 10, 20)
    assert run_seconds(record, 500) == 490 and record.attempts[0].rewaited_seconds == 0


def test_a_read_of_a_wait_the_record_has_moved_past_vouches_for_nothing_again() -> None:
    # Seed 7338: a reconcile pass begun in the first wait decided after the job had run again and
    # waited anew; its read reopened the first wait, already counted, and the bill fell below the run.
    record = read(running(), JobState.PENDING, 100, 190)
    record = read(record, JobState.RUNNING, 200, 210)
    record = read(record, JobState.PENDING, 220, 230)
    record = read(record, JobState.PENDING, 100, 195)  # the pass's read, begun at 195
    record = read(record, JobState.RUNNING, 400, 410)
    assert run_seconds(record, 500) == 490 - 90 - 10


def test_a_late_read_of_the_wait_before_the_first_run_is_no_restart_wait() -> None:
    # Seed 7338: the same, of the wait before the job's first start, which is not in its span at all.
    record = read(make_record(request={"custom_job": A100}, state=None), JobState.PENDING, 5, 8)
    record = read(record, JobState.RUNNING, 10, 20)
    record = read(record, JobState.PENDING, 100, 110)
    record = read(record, JobState.PENDING, 5, 9)  # a pass begun before the first run, decided now
    record = read(record, JobState.RUNNING, 200, 210)
    assert run_seconds(record, 500) == 490 - 10
