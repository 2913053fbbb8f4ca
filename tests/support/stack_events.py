"""Driving the embedded stack's event path: submit a request, feed the log sink, wait for a status."""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from devstack.samples import job_request
from shared.adapters.vertex import label_filter, parent_path
from shared.jobs import LABEL_ATTEMPT, LABEL_REQUEST_ID
from shared.ledger.records import RequestRecord

SETTLE_TIMEOUT = 120.0


def new_request_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def training_request(request_id: str, *, steps: int = 200, fail_at_step: int | None = None, **envelope: Any) -> bytes:
    """An envelope whose job runs the demo trainer (resuming from AIP_CHECKPOINT_DIR)."""
    command = [
        sys.executable,
        "-m",
        "devstack.trainer",
        "--steps",
        str(steps),
        "--checkpoint-every",
        "20",
        "--step-seconds",
        "0.01",
    ]
    if fail_at_step is not None:
        command += ["--fail-at-step", str(fail_at_step)]
    return job_request(request_id, command, **envelope)


def submit(
    stack,
    request_id: str,
    *,
    preemptions: int = 0,
    after_seconds: float | None = None,
    after_checkpoints: int | None = None,
    **request: Any,
) -> None:
    """Schedule attempt 1's preemptions (after so many seconds, or after so many committed
    checkpoints of each run), then publish the request."""
    if preemptions:
        when = {"after_checkpoints": after_checkpoints} if after_checkpoints else {"after_seconds": after_seconds}
        stack.vertex_control(
            "POST",
            "/emulator/v1/preemption-plans",
            {"labels": {LABEL_REQUEST_ID: request_id, LABEL_ATTEMPT: "1"}, "preemptions": preemptions, **when},
        )
    stack.publish("job_requests", training_request(request_id, **request))


def wait_for_status(stack, request_id: str, *statuses: str, timeout: float = SETTLE_TIMEOUT) -> RequestRecord:
    ledger = stack.ledger()

    def reached() -> RequestRecord | None:
        record = ledger.get(request_id)
        return record if record is not None and record.status in statuses else None

    return stack.wait_for(reached, timeout, f"{request_id} to reach {statuses}")


def jobs_of(stack, request_id: str, location: str, attempt: int | None = None) -> list[Any]:
    labels = {LABEL_REQUEST_ID: request_id}
    if attempt is not None:
        labels[LABEL_ATTEMPT] = str(attempt)
    parent = parent_path(stack.settings.project, location)
    return list(stack.job_service().list_custom_jobs(request={"parent": parent, "filter": label_filter(labels)}))


def log_entry(job_name: str, text: str, insert_id: str, severity: str = "INFO") -> bytes:
    """A service line for `job_name`, as the sink would publish it."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return json.dumps(
        {
            "insertId": insert_id,
            "resource": {
                "type": "ml_job",
                "labels": {"job_id": job_name.rsplit("/", 1)[-1], "task_name": "service"},
            },
            "severity": severity,
            "timestamp": now,
            "jsonPayload": {"message": text},
        }
    ).encode()


def set_log_sink(stack, enabled: bool) -> None:
    stack.vertex_control("POST", "/emulator/v1/log-sink", {"enabled": enabled})


def runs_of(stack, job: str) -> list:
    from devstack.demo.traces import runs_from_output

    return runs_from_output(stack.vertex_control("GET", f"/emulator/v1/{job}")["output"])


def alerts_for(stack, request_id: str, kind: str, *, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Every alert of `kind` for the request: waits for the first, then drains a little longer so a
    duplicate would be seen too."""
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not found:
        found += [a for a in stack.pull_alerts(timeout=1.0) if a["request_id"] == request_id and a["kind"] == kind]
    found += [a for a in stack.pull_alerts(timeout=3.0) if a["request_id"] == request_id and a["kind"] == kind]
    return found


@contextmanager
def spot_capacity(
    stack,
    data: list[int],
    tick_seconds: float,
    location: str | None = None,
    *,
    kind: str = "spot",
    machine_type: str | None = None,
) -> Iterator[None]:
    """The trace for the test (of one location, or every one), and the scheduler's reconcile
    every second; both end with it. `kind="flex"`: FLEX_START's trace instead (of one machine
    type, or every one: devstack/vertex/flex.py)."""
    stop = threading.Event()

    def scheduler() -> None:
        while not stop.wait(1.0):
            stack.publish("maintenance", json.dumps({"task": "reconcile"}).encode(), task="reconcile")

    where = {"location": location} if location else {}
    if machine_type:
        where["machine_type"] = machine_type
    path = f"/emulator/v1/{kind}-capacity"
    stack.vertex_control("POST", path, {"data": data, "tick_seconds": tick_seconds, **where})
    thread = threading.Thread(target=scheduler, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        stack.vertex_control("POST", path, {"data": [], **where})
