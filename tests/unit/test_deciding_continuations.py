"""Continuations after a job timeout at their edges (shared/deciding/continuations.py): the timeout
as read from the request (a zero, a fraction, a word), a FAILED job Vertex gave no run times, one
checkpoint as progress, a `max_runtime` no longer than one timeout, what the continuation's line
says and what `spotjobs status` counts right after it is decided, and the attempt number
`max_attempts` counts for an attempt that itself continued."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest

from shared.alerts import AlertKind
from shared.clock import iso
from shared.deciding.continuations import (
    continuations_text,
    counted_attempts,
    job_timeout_seconds,
    max_continuations,
    timed_out,
)
from shared.deciding.decisions import Decision, Observation, decide
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.requests.job_policy import VERTEX_DEFAULT_TIMEOUT_SECONDS
from tests.support.decide import JOB1, NOW, POLICY, at, make_record

HOUR = 3600.0
JOB2 = "projects/p/locations/us-central1/customJobs/222"
ONE_HOUR_JOB = {"displayName": "train", "jobSpec": {"scheduling": {"timeout": "3600s"}}}
DEADLINE_EXCEEDED = {"code": 4, "message": "The job ran past its scheduling.timeout of 3600 s."}


def timed_out_job(name: str = JOB1) -> JobSnapshot:
    start = NOW - timedelta(seconds=HOUR + 60)
    return JobSnapshot(
        name=name,
        state=JobState.FAILED,
        error=DEADLINE_EXCEEDED,
        create_time=at(0),
        start_time=iso(start),
        end_time=iso(start + timedelta(seconds=HOUR)),
        update_time=iso(start + timedelta(seconds=HOUR)),
    )


def attempt(n: int, job: str = JOB1, *, checkpoints: int = 2, **fields: object) -> Attempt:
    return Attempt(
        n,
        "us-central1",
        "SPOT",
        claimed_at=at(0),
        job=job,
        state=JobState.RUNNING,
        created_at=at(1),
        checkpoints_committed=checkpoints,
        last_checkpoint=[1, 100 * checkpoints] if checkpoints else None,
        **fields,  # type: ignore[arg-type]
    )


def record_of(*attempts: Attempt, **request: object) -> RequestRecord:
    return make_record(
        status=RequestStatus.RUNNING,
        request={"max_attempts": 1, "custom_job": ONE_HOUR_JOB, **request},
        attempts=list(attempts),
    )


def observe(record: RequestRecord, n: int = 1) -> Decision:
    job = timed_out_job(JOB1 if n == 1 else JOB2)
    return decide(copy.deepcopy(record), Observation(n, job), POLICY, NOW)


@pytest.mark.parametrize(
    ("timeout", "seconds"),
    [
        ("0s", VERTEX_DEFAULT_TIMEOUT_SECONDS),  # no timeout is none at all: Vertex's default
        ("-0.5s", VERTEX_DEFAULT_TIMEOUT_SECONDS),
        ("1s", 1.0),
        ("0.5s", 0.5),
        ("soon", VERTEX_DEFAULT_TIMEOUT_SECONDS),  # not a duration: Vertex's default
    ],
)
def test_the_job_timeout_as_read_from_the_request(timeout: str, seconds: float) -> None:
    assert job_timeout_seconds({"jobSpec": {"scheduling": {"timeout": timeout}}}) == seconds


@pytest.mark.parametrize(
    ("start", "end"),
    [(None, None), (iso(NOW - timedelta(hours=2)), None), (None, iso(NOW))],
    ids=["none", "start", "end"],
)
def test_a_failed_job_without_both_run_times_and_no_timeout_code_did_not_time_out(
    start: str | None, end: str | None
) -> None:
    job = JobSnapshot(
        name=JOB1,
        state=JobState.FAILED,
        error={"code": 13, "message": "Internal error"},
        create_time=at(0),
        start_time=start,
        end_time=end,
        update_time=iso(NOW),
    )
    assert timed_out(job, HOUR) is False


def test_one_committed_checkpoint_is_progress_enough_to_continue() -> None:
    decision = observe(record_of(attempt(1, checkpoints=1), max_runtime=2 * HOUR))
    assert decision.record.requeue is not None and decision.record.requeue.reason == "timeout"


def test_a_max_runtime_of_one_timeout_allows_no_continuation() -> None:
    record = record_of(attempt(1), max_runtime=HOUR)
    assert max_continuations(record, POLICY.max_runtime_seconds) == 0

    decision = observe(record)

    assert decision.record.status == RequestStatus.FAILED and decision.record.requeue is None
    assert [a.kind for a in decision.effects.alerts] == [AlertKind.JOB_FAILED]
    assert "its 0 continuation(s) of 0 used up its max_runtime of 3600 s" in decision.effects.alerts[0].message


def test_each_continuations_line_counts_it_against_the_bound() -> None:
    first = observe(record_of(attempt(1), max_runtime=3 * HOUR))
    [line] = first.effects.lines
    assert line.message.endswith("attempt 2 continues it (continued after timeout, 1 of 2)")
    assert (line.fields["continuation"], line.fields["max_continuations"], line.fields["next_attempt"]) == (1, 2, 2)

    continued = attempt(1, continued_after_timeout=True, outcome=AttemptOutcome.REQUEUED)
    second = observe(record_of(continued, attempt(2, JOB2), max_runtime=3 * HOUR), n=2)
    [line] = second.effects.lines
    assert line.message.endswith("attempt 3 continues it (continued after timeout, 2 of 2)")
    assert (line.fields["continuation"], line.fields["next_attempt"]) == (2, 3)


def test_status_counts_a_continuation_as_soon_as_it_is_decided() -> None:
    """Before the next attempt is claimed, the latest attempt is the one that continued."""
    decided = observe(record_of(attempt(1), max_runtime=3 * HOUR)).record
    assert decided.latest is not None and decided.latest.n == 1
    assert continuations_text(decided, POLICY.max_runtime_seconds) == "continued after timeout, 1 of 2"


def test_an_attempt_that_itself_continued_counts_only_the_continuations_before_it() -> None:
    first = attempt(1, continued_after_timeout=True, outcome=AttemptOutcome.REQUEUED)
    second = attempt(2, JOB2, continued_after_timeout=True, outcome=AttemptOutcome.REQUEUED)
    record = record_of(first, second)
    assert counted_attempts(record, 1) == 1
    assert counted_attempts(record, 2) == 1
    assert counted_attempts(record, 3) == 1
