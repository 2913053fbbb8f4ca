"""A request of two worker pools through the embedded stack (issue 44, item 3): the primary runs
the demo trainer, pool 1 a plain-Python worker that waits for its SIGTERM. Both VMs are reclaimed
at once after the primary's first checkpoint; the job restarts whole, resumes and succeeds, and
spotjobs counts one preemption per reclaimed VM (the emulator's `rich` profile writes a service
line per reclaimed replica, naming it: an invented signal, docs/signals.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from devstack.processes import REPO_ROOT
from devstack.samples import SAMPLE_IMAGE, custom_job
from shared.jobs import LABEL_ATTEMPT, LABEL_REQUEST_ID
from shared.ledger.states import RequestStatus
from tests.conftest import vertex_signals
from tests.support.stack_events import new_request_id, runs_of, wait_for_status

pytestmark = pytest.mark.stack

STEPS = 600
# A worker replica with nothing to train: it waits, and leaves when it is told to.
WORKER = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "print('worker ready', flush=True)\n"
    "time.sleep(3600)\n"
)


def two_pool_request(request_id: str) -> bytes:
    trainer = [sys.executable, "-m", "devstack.trainer", "--steps", str(STEPS), "--checkpoint-every", "20"]
    job = custom_job(request_id, [*trainer, "--step-seconds", "0.01"])
    job["jobSpec"]["workerPoolSpecs"].append(
        {
            "machineSpec": {"machineType": "a2-highgpu-1g"},
            "replicaCount": "1",
            "containerSpec": {"imageUri": SAMPLE_IMAGE, "command": [sys.executable, "-c", WORKER]},
        }
    )
    return json.dumps({"request_id": request_id, "custom_job": job}).encode()


def test_every_replica_reclaimed_at_once_counts_each_vm_and_the_job_resumes(stack) -> None:
    request_id = new_request_id("two-pools")
    stack.vertex_control(
        "POST",
        "/emulator/v1/preemption-plans",
        {
            "labels": {LABEL_REQUEST_ID: request_id, LABEL_ATTEMPT: "1"},
            "replica": "all",
            "preemptions": 1,
            "after_checkpoints": 1,
            "grace_seconds": 30,  # Compute Engine's notice: the primary's SIGTERM save finishes
        },
    )
    with vertex_signals(stack, "rich"):
        stack.publish("job_requests", two_pool_request(request_id))
        record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED, timeout=240)

    [attempt] = record.attempts
    emulated = stack.vertex_control("GET", f"/emulator/v1/{attempt.job}")
    assert emulated["preemptions"] == 2  # two VMs reclaimed
    assert {name: r["preemptions"] for name, r in emulated["replicas"].items()} == {
        "workerpool0-0": 1,
        "workerpool1-0": 1,
    }
    assert attempt.preemptions == 2 and attempt.outcome == "succeeded"
    stopped, resumed = runs_of(stack, attempt.job)
    assert not stopped.finished and resumed.finished and resumed.end_step == STEPS
    assert resumed.start_step == max(step for step, _ in stopped.checkpoints.values()) > 0

    # `spotjobs logs` tells the replicas apart: the worker's two starts are its own, and the
    # primary's lines carry the primary's runs.
    shown = subprocess.run(
        [sys.executable, "-m", "spotjobs.cli", "logs", request_id, "--json"],
        cwd=REPO_ROOT,
        env={**os.environ, **stack.env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    lines = [json.loads(raw) for raw in shown.stdout.splitlines()]
    worker = [line for line in lines if line["replica"] == "workerpool1-0"]
    assert [line["text"] for line in worker] == ["worker ready", "worker ready"]
    primary_runs = {line["run"] for line in lines if line["replica"] == "workerpool0-0" and line["run"] is not None}
    assert primary_runs == {0, 1}


def test_a_worker_reclaimed_alone_is_counted_from_the_service_line_naming_it(stack) -> None:
    # The emulator's default reading: the reclaimed replica restarts alone, the primary trains on
    # (no kit line marks it); the rich profile's service line names workerpool1-0.
    request_id = new_request_id("one-worker")
    stack.vertex_control(
        "POST",
        "/emulator/v1/preemption-plans",
        {
            "labels": {LABEL_REQUEST_ID: request_id, LABEL_ATTEMPT: "1"},
            "replica": "workerpool1-0",
            "preemptions": 1,
            "after_checkpoints": 1,
        },
    )
    with vertex_signals(stack, "rich"):
        stack.publish("job_requests", two_pool_request(request_id))
        record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED, timeout=240)

    [attempt] = record.attempts
    emulated = stack.vertex_control("GET", f"/emulator/v1/{attempt.job}")
    assert {name: r["preemptions"] for name, r in emulated["replicas"].items()} == {
        "workerpool0-0": 0,
        "workerpool1-0": 1,
    }
    assert attempt.preemptions == 1 and attempt.outcome == "succeeded"
    [run] = runs_of(stack, attempt.job)  # the primary's one run, to the end
    assert run.finished and run.end_step == STEPS
