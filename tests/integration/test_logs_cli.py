"""`spotjobs logs` through the embedded stack: a request preempted three times, followed from
while it runs until it ends, then read again whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from devstack.processes import REPO_ROOT
from shared.ledger.states import RequestStatus
from tests.support.stack_events import new_request_id, submit

pytestmark = pytest.mark.stack

FOLLOW_TIMEOUT = 240.0


def spotjobs_logs(stack: Any, request_id: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spotjobs.cli", "logs", request_id, "--json", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **stack.env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_logs_of_a_request_preempted_three_times_has_every_run_in_order_and_follow_ends_with_it(stack) -> None:
    request_id = new_request_id("logs")
    submit(stack, request_id, preemptions=3, after_checkpoints=1, steps=500)
    ledger = stack.ledger()
    stack.wait_for(lambda: ledger.get(request_id), 60, f"{request_id} in the ledger")

    followed = spotjobs_logs(stack, request_id, "--follow", "--interval", "0.5", timeout=FOLLOW_TIMEOUT)

    assert followed.returncode == 0, followed.stderr
    record = ledger.get(request_id)
    assert record.status == RequestStatus.SUCCEEDED  # it ended only once the request had
    lines = [json.loads(raw) for raw in followed.stdout.splitlines()]
    [attempt] = record.attempts
    assert {(line["attempt"], line["job_id"]) for line in lines} == {(1, attempt.job_id)}
    # Every line the job printed, once each, in the order it printed them.
    printed = stack.vertex_control("GET", f"/emulator/v1/{attempt.job}")["output"]
    assert len(lines) == len(printed) > 0
    assert [line["time"] for line in lines] == [item["time"] for item in printed]
    # Four runs, each announced, the first three preempted, the last finished; runs only go forward.
    events = [
        (line["event"], line["run"]) for line in lines if line["event"] in ("run_started", "preempted", "run_finished")
    ]
    assert events == [
        ("run_started", 0),
        ("preempted", 0),
        ("run_started", 1),
        ("preempted", 1),
        ("run_started", 2),
        ("preempted", 2),
        ("run_started", 3),
        ("run_finished", 3),
    ]
    runs = [line["run"] for line in lines if line["run"] is not None]
    assert runs == sorted(runs) and set(runs) == {0, 1, 2, 3}
    # The trainer's own lines are there too, marked with their run.
    assert any(line["event"] is None and line["run"] == 3 for line in lines)

    # Read again after the end: the same lines in the same order.
    again = spotjobs_logs(stack, request_id)
    assert again.returncode == 0, again.stderr
    assert [json.loads(raw) for raw in again.stdout.splitlines()] == lines
