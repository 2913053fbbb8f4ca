"""The maintenance topic through the embedded stack: each task reaches its own function only
(the topology's subscription filters on the `task` attribute), and a tick that arrives while a
run is in progress ends quietly, acknowledged, instead of failing towards the dead-letter topic."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

from shared.clock import iso, utcnow
from shared.ledger.run_lock import lock_path
from shared.topology import TOPOLOGY
from tests.support.reconcile_passes import TICK_TIMEOUT

pytestmark = pytest.mark.stack

# A message's wait for its push is Pub/Sub's delivery, bounded by TICK_TIMEOUT, not what a quiet
# machine takes: the stack's emulator pushes two messages of a subscription at a time, in order,
# so a tick waits behind whatever an earlier test left queued.


def _lines(stack, function: str, message_id: str) -> list[dict]:
    return [line for line in stack.function_logs(function) if line.get("message_id") == message_id]


def test_the_trigger_subscriptions_carry_the_topology_filters(stack) -> None:
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    for wiring in TOPOLOGY.functions.values():
        subscription = subscriber.get_subscription(subscription=stack.subscription_path(wiring["subscription"]))
        assert subscription.filter == (wiring["filter"] or ""), wiring


@pytest.mark.parametrize(
    ("task", "receiver", "other"),
    [("reconcile", "reconcile", "prune_checkpoints"), ("prune", "prune_checkpoints", "reconcile")],
)
def test_each_maintenance_task_reaches_its_own_function_only(stack, task, receiver, other) -> None:
    message_id = stack.publish("maintenance", json.dumps({"task": task}).encode(), task=task)
    stack.wait_for(lambda: _lines(stack, receiver, message_id), TICK_TIMEOUT, f"{receiver} to get the {task} task")
    time.sleep(2)  # time enough for a push to the other function, were there one
    assert _lines(stack, other, message_id) == []


def test_a_maintenance_message_without_the_task_attribute_reaches_neither(stack) -> None:
    message_id = stack.publish("maintenance", json.dumps({"task": "reconcile"}).encode())
    time.sleep(4)
    assert _lines(stack, "reconcile", message_id) == []
    assert _lines(stack, "prune_checkpoints", message_id) == []


@pytest.mark.parametrize(("task", "function"), [("reconcile", "reconcile"), ("prune", "prune_checkpoints")])
def test_a_tick_during_a_run_is_acknowledged_with_one_info_line(stack, task, function) -> None:
    """Another instance's run holds the lease (written here as that run would have written it);
    the tick ends at once with one INFO line and is not redelivered (a failed delivery comes back
    after about a second here, so it would within the wait)."""
    bucket = stack.storage().bucket(stack.settings.state_bucket)
    lease = bucket.blob(lock_path(task))
    now = utcnow()
    lease.upload_from_string(
        json.dumps(
            {
                "task": task,
                "holder": "another-instance",
                "acquired_at": iso(now),
                "expires_at": iso(now + timedelta(minutes=5)),
            }
        ),
        if_generation_match=0,
    )
    try:
        message_id = stack.publish("maintenance", json.dumps({"task": task}).encode(), task=task)
        stack.wait_for(lambda: _lines(stack, function, message_id), TICK_TIMEOUT, f"{function} to get the tick")
        time.sleep(4)
        lines = _lines(stack, function, message_id)
    finally:
        lease.delete()
    assert [(line["severity"], line["event"], line["holder"]) for line in lines] == [
        ("INFO", "run_in_progress", "another-instance")
    ], lines


def test_two_ticks_at_once_make_one_run(stack) -> None:
    """Two reconcile ticks pushed together: at most one pass runs at a time, each tick is
    acknowledged, and none is redelivered."""
    first = stack.publish("maintenance", json.dumps({"task": "reconcile"}).encode(), task="reconcile")
    second = stack.publish("maintenance", json.dumps({"task": "reconcile"}).encode(), task="reconcile")
    stack.wait_for(
        lambda: _lines(stack, "reconcile", first) and _lines(stack, "reconcile", second),
        TICK_TIMEOUT,
        "both ticks handled",
    )
    time.sleep(3)
    events = [
        [
            line["event"]
            for line in _lines(stack, "reconcile", message_id)
            if line.get("event") in ("reconcile_summary", "run_in_progress", "retry", "permanent_failure")
        ]
        for message_id in (first, second)
    ]
    # Each tick ends once, either by running or by finding the other's run.
    assert all(len(per_tick) == 1 for per_tick in events), events
    assert {e for per_tick in events for e in per_tick} <= {"reconcile_summary", "run_in_progress"}
    # Released once the run ends (a tick an earlier test left queued may start one meanwhile).
    stack.wait_for(lambda: bucket_has_no_lease(stack, "reconcile"), TICK_TIMEOUT, "the run lease released")


def bucket_has_no_lease(stack, task: str) -> bool:
    return stack.storage().bucket(stack.settings.state_bucket).get_blob(lock_path(task)) is None
