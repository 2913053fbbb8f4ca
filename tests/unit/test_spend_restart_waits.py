"""The spend leaves out what a Spot job waited after a preemption (shared/fleet/spend.py,
`Attempt.rewaited_seconds`): Vertex restarts the job and, while no machine runs it, bills none.
Only a wait the reads at Vertex saw (a QUEUED or PENDING after RUNNING) is left out, from the update
time of its first waiting read to that of the state that ended it; a wait no read saw stays in the
run time (an upper bound, never zero), and so does a run no read saw between two waiting reads."""

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


def read(record: RequestRecord, state: str, update: float, *, end: float | None = None) -> RequestRecord:
    """The job read at Vertex `update` seconds into the story, in `state` since then; it first ran at 10."""
    job = JobSnapshot(
        JOB1,
        state,
        {"code": 13, "message": "The job failed with a STOCKOUT error."} if state == JobState.FAILED else None,
        create_time=at(1),
        start_time=at(10) if update >= 10 else None,
        end_time=at(end) if end is not None else None,
        update_time=at(update),
    )
    return decide(copy.deepcopy(record), Observation(1, job), POLICY, NOW).record


def run_seconds(record: RequestRecord, now: float) -> float:
    return request_spend(record, NOW - timedelta(seconds=600) + timedelta(seconds=now)).run_seconds


def test_a_restart_wait_a_read_saw_is_no_run_time() -> None:
    record = read(make_record(request={"custom_job": A100}), JobState.RUNNING, 10)
    record = read(record, JobState.PENDING, 100)  # preempted at 100: Vertex waits for a machine
    assert run_seconds(record, 150) == 90  # waiting now: the spend stands still
    record = read(record, JobState.RUNNING, 400)  # a machine again at 400
    assert run_seconds(record, 500) == 490 - 300
    assert record.attempts[0].rewaited_seconds == 300
    later = NOW - timedelta(seconds=100)
    [row] = bill([record.to_json()], later)["requests"]  # the report reads the record as the ledger shows it
    assert row["run_seconds"] == request_spend(record, later).run_seconds == 190


def test_a_wait_the_job_ended_in_is_no_run_time_either() -> None:
    record = read(make_record(request={"custom_job": A100}), JobState.RUNNING, 10)
    record = read(record, JobState.QUEUED, 100)
    record = read(record, JobState.FAILED, 460, end=400)  # its restarts ran out while it waited
    assert run_seconds(record, 500) == 390 - 300


def test_a_run_no_read_saw_between_two_waiting_reads_stays_run_time() -> None:
    record = read(make_record(request={"custom_job": A100}), JobState.RUNNING, 10)
    record = read(record, JobState.PENDING, 100)
    record = read(record, JobState.PENDING, 250)  # updated since: it may have run in between
    record = read(record, JobState.RUNNING, 400)
    assert run_seconds(record, 500) == 490 - 150  # only the wait from 250 is left out


def test_the_wait_before_the_first_run_was_never_run_time() -> None:
    record = read(make_record(request={"custom_job": A100}, state=None), JobState.PENDING, 5)
    record = read(record, JobState.RUNNING, 10)
    assert run_seconds(record, 500) == 490 and record.attempts[0].rewaited_seconds == 0
