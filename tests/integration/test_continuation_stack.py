"""A run longer than its job's `scheduling.timeout`, through the embedded stack: the Vertex emulator
ends each job at its short timeout (FAILED, DEADLINE_EXCEEDED: `timeout_end`'s default), the
trainer has committed checkpoints by then, and spotjobs continues it as the next attempt in the
same folder, resuming from the newest complete checkpoint, until it succeeds, with
`max_attempts: 1` (a continuation is not an attempt that counts)."""

from __future__ import annotations

import json
import sys

import pytest

from devstack.samples import custom_job
from shared.ledger.states import AttemptOutcome, RequestStatus
from spotjobs.cli.status import format_request
from tests.support.stack_events import new_request_id, runs_of, wait_for_status

pytestmark = pytest.mark.stack

STEPS = 900  # 9 s of steps at least: more than one 5-second job can train
TIMEOUT = "5s"


def test_an_attempt_that_hits_a_short_timeout_continues_and_succeeds_with_max_attempts_one(stack) -> None:
    request_id = new_request_id("continued")
    command = [sys.executable, "-m", "devstack.trainer", "--steps", str(STEPS), "--checkpoint-every", "20"]
    command += ["--step-seconds", "0.01"]
    job = custom_job(request_id, command, scheduling={"timeout": TIMEOUT})
    envelope = {"request_id": request_id, "custom_job": job, "max_attempts": 1, "max_runtime": "600s"}
    stack.publish("job_requests", json.dumps(envelope).encode())

    record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED, RequestStatus.FAILED, timeout=300)

    assert record.status == RequestStatus.SUCCEEDED, format_request(record)
    *continued, last = record.attempts
    assert continued, "the run never reached its timeout: nothing was continued"
    for attempt in continued:
        assert attempt.state == "JOB_STATE_FAILED" and (attempt.error or {}).get("code") == 4
        assert attempt.continued_after_timeout and attempt.outcome == AttemptOutcome.REQUEUED
        assert attempt.checkpoints_committed > 0
        assert attempt.preemptions == 0  # the kit's `preempted` at the timeout was the stop, no preemption
    assert last.outcome == AttemptOutcome.SUCCEEDED and not last.continued_after_timeout
    # Each continuation resumed where the attempt before it committed last, in the same folder.
    runs = [runs_of(stack, attempt.job)[-1] for attempt in record.attempts]
    for before, after in zip(runs, runs[1:], strict=False):
        assert after.start_step == max(step for step, _ in before.checkpoints.values()) > 0
    assert runs[-1].finished and runs[-1].end_step == STEPS
    assert f"continued after timeout, {len(continued)} of 119" in format_request(record)
    decided = [
        line["event"]
        for name in ("on_job_event", "reconcile")
        for line in stack.function_logs(name)
        if line.get("request_id") == request_id
        and line.get("event") in ("continued_after_timeout", "attempts_exhausted", "job_failed")
    ]
    assert decided == ["continued_after_timeout"] * len(continued)
