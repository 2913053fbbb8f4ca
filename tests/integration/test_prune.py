"""prune_checkpoints through the embedded stack: maintenance messages pushed by the Pub/Sub
emulator, checkpoints in fake-gcs-server, reports on ops-alerts."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from shared.ledger.states import RequestStatus
from tests.support.reconcile_passes import TICK_TIMEOUT
from tests.support.stack_checkpoints import checkpoint_children, checkpoint_steps

pytestmark = pytest.mark.stack

TIMEOUT = 60.0


def write_checkpoints(stack, request_id: str, steps: list[int]) -> None:
    base = f"{stack.settings.output_dir_for(request_id)}checkpoints/".split("/", 3)[3]
    bucket = stack.storage().bucket(stack.settings.checkpoint_bucket)
    for step in steps:
        for leaf in ("shard-0.json", "shard-1.json", "COMMITTED"):
            bucket.blob(f"{base}step-{step:06d}/{leaf}").upload_from_string(b"{}")


def prune_alerts(stack, request_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and not found:
        found = [
            a
            for a in stack.pull_alerts(timeout=1.0)
            if a["kind"] == "prune_report" and any(r["request_id"] == request_id for r in a["details"]["requests"])
        ]
    return found


def summaries(stack) -> list[dict[str, Any]]:
    return [line for line in stack.function_logs("prune_checkpoints") if line.get("event") == "prune_summary"]


def test_a_prune_task_for_one_request_prunes_it_and_reports(stack) -> None:
    request_id = f"prune-{uuid.uuid4().hex[:8]}"
    write_checkpoints(stack, request_id, [100, 200, 300, 400, 500])
    before = len(summaries(stack))

    stack.publish("maintenance", json.dumps({"task": "prune", "request_id": request_id}).encode(), task="prune")

    stack.wait_for(
        lambda: checkpoint_steps(stack, request_id) == {"step-000400", "step-000500"},
        TIMEOUT,
        "three checkpoints pruned",
    )
    [alert] = prune_alerts(stack, request_id)
    assert (alert["severity"], alert["request_id"]) == ("INFO", request_id)
    assert alert["details"]["checkpoints_deleted"] == 3 and alert["details"]["objects_deleted"] == 9
    summary = stack.wait_for(lambda: summaries(stack)[before:], 30, "the prune summary line")[-1]
    assert summary["requests_scanned"] == 1 and summary["request_id"] == request_id


def test_reconcile_tasks_never_reach_prune_checkpoints(stack) -> None:
    """The subscription filter routes by the `task` attribute: a reconcile tick is delivered to
    reconcile and never to prune_checkpoints (Pub/Sub, or the stack's push filter, acknowledges it
    for prune's subscription), so a long prune run cannot make it fail there."""
    message_id = stack.publish("maintenance", json.dumps({"task": "reconcile"}).encode(), task="reconcile")
    stack.wait_for(
        lambda: [line for line in stack.function_logs("reconcile") if line.get("message_id") == message_id],
        TICK_TIMEOUT,  # Pub/Sub's delivery, behind whatever an earlier test left queued
        "reconcile to get the reconcile task",
    )
    time.sleep(2)  # time enough for a push to prune_checkpoints, were there one
    assert [line for line in stack.function_logs("prune_checkpoints") if line.get("message_id") == message_id] == []


def test_a_succeeded_training_run_is_pruned_to_keep_last(stack) -> None:
    from tests.support.stack_events import new_request_id, submit, wait_for_status

    request_id = new_request_id("prunerun")
    submit(stack, request_id, steps=200)  # a checkpoint every 20 steps: ten of them
    wait_for_status(stack, request_id, RequestStatus.SUCCEEDED)

    kept = stack.wait_for(
        lambda: steps if len(steps := checkpoint_steps(stack, request_id)) == 2 else None,
        TIMEOUT,
        "the succeeded request's checkpoints pruned to keep_last=2",
    )
    assert kept == {"step-000180", "step-000200"}
    # The demo trainer's kit counted its starts there; no step number, so never pruned.
    assert "_spotjobs_runs" in checkpoint_children(stack, request_id)
    assert prune_alerts(stack, request_id)
