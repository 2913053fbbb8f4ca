"""A SUCCEEDED job is not always a success, through the embedded stack: the demo trainer exits 0
after its SIGTERM checkpoint (`--exit-zero-after-sigterm`, as Lightning 2.6 does) and the Vertex
emulator, under a plan that opts in (`exit_zero_succeeds`, invented), records the job SUCCEEDED.
The kit's lines say the last run was preempted and never finished, so spotjobs re-queues."""

from __future__ import annotations

import sys

import pytest

from devstack.samples import job_request
from shared.jobs import LABEL_ATTEMPT, LABEL_REQUEST_ID
from shared.ledger.states import RequestStatus
from tests.support.stack_events import alerts_for, new_request_id, runs_of, wait_for_status

pytestmark = pytest.mark.stack

STEPS = 1500  # 15 s at least: the test preempts the first run long before it could finish


def test_a_job_that_exits_0_after_its_preemption_is_requeued_once_with_one_alert(stack) -> None:
    request_id = new_request_id("incomplete")
    # Bound to attempt 1's job; it fires only when the test asks (`:preempt`), after a checkpoint.
    stack.vertex_control(
        "POST",
        "/emulator/v1/preemption-plans",
        {
            "labels": {LABEL_REQUEST_ID: request_id, LABEL_ATTEMPT: "1"},
            "delays": [3600],
            # Compute Engine's 30 s for a Spot VM: the SIGTERM save finishes however busy the
            # machine (the stack's default 0.5 s could SIGKILL it, a restart, not this case).
            "grace_seconds": 30,
            "exit_zero_succeeds": True,
        },
    )
    command = [sys.executable, "-m", "devstack.trainer", "--steps", str(STEPS), "--checkpoint-every", "20"]
    command += ["--step-seconds", "0.01", "--exit-zero-after-sigterm"]
    stack.publish("job_requests", job_request(request_id, command))
    ledger = stack.ledger()
    job = stack.wait_for(
        lambda: (record := ledger.get(request_id)) and record.attempts and record.attempts[0].job,
        60,
        "attempt 1's job",
    )
    # Keyed to progress, not time: preempted once spotjobs counted the first run's first
    # checkpoint (so the kit has been heard from: without kit lines a SUCCEEDED is a success).
    stack.wait_for(lambda: ledger.get(request_id).attempts[0].checkpoints_committed, 120, "a first checkpoint")
    stack.vertex_control("POST", f"/emulator/v1/{job}:preempt")

    record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED, timeout=240)

    first, second = record.attempts
    emulated = stack.vertex_control("GET", f"/emulator/v1/{job}")
    assert emulated["state"] == "JOB_STATE_SUCCEEDED" and emulated["exit_statuses"] == [0]
    assert first.state == "JOB_STATE_SUCCEEDED" and first.outcome == "requeued" and first.preemptions == 1
    [alert] = alerts_for(stack, request_id, "incomplete_success")
    assert (alert["severity"], alert["attempt"], alert["job"]) == ("WARNING", 1, first.job)
    # Attempt 2 resumed from what attempt 1 committed on its SIGTERM, and trained to the end.
    [stopped] = runs_of(stack, first.job)
    [resumed] = runs_of(stack, second.job)
    assert not stopped.finished and resumed.finished
    assert resumed.start_step == max(step for step, _ in stopped.checkpoints.values()) > 0
    assert resumed.end_step == STEPS and second.outcome == "succeeded"
    decided = [
        line
        for name in ("on_job_event", "reconcile")
        for line in stack.function_logs(name)
        if line.get("request_id") == request_id and line.get("event") in ("incomplete_success", "requeue")
    ]
    assert sorted(line["event"] for line in decided) == ["incomplete_success", "requeue"]
