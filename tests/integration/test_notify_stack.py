"""A requester's notifications through the embedded stack (docs/requests.md, "Notifications"): a
request that names a topic of the stack's own project (its policy allows them) is preempted
until its attempt ends (the Vertex emulator's STOCKOUT after seven), re-queued, and succeeds; its
topic receives the events in order, each event_id once after de-duplication, and `spotjobs watch`
prints them as they come."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from devstack.processes import REPO_ROOT
from shared.ledger.states import RequestStatus
from tests.support.stack_events import new_request_id, submit, wait_for_status

pytestmark = pytest.mark.stack


def received_events(stack: Any, subscription: str, request_id: str) -> list[dict[str, Any]]:
    """Everything the subscription holds for the request until its `succeeded`, in arrival order."""
    events: list[dict[str, Any]] = []

    def until_succeeded() -> bool:
        messages = stack.pull(subscription, timeout=2.0)
        events.extend(json.loads(m.data) for m in messages if m.attributes.get("request_id") == request_id)
        return any(event["kind"] == "succeeded" for event in events)

    stack.wait_for(until_succeeded, 120, "the succeeded notification")
    return events


def test_a_preempted_request_notifies_its_topic_in_order_once_each(stack) -> None:
    from google.cloud import pubsub_v1

    request_id = new_request_id("notify")
    topic = f"projects/{stack.options.project}/topics/notify-{request_id}"
    pubsub_v1.PublisherClient().create_topic(name=topic)
    subscription = f"notify-{request_id}-reader"
    pubsub_v1.SubscriberClient().create_subscription(
        request={"name": stack.subscription_path(subscription), "topic": topic, "ack_deadline_seconds": 60}
    )

    submit(stack, request_id, preemptions=7, after_checkpoints=1, steps=1500, notify={"topic": topic})
    ledger = stack.ledger()
    stack.wait_for(lambda: (record := ledger.get(request_id)) and record.attempts, 60, "the claim")
    watch = subprocess.Popen(
        [sys.executable, "-m", "spotjobs.cli", "watch", request_id, "--json", "--timeout", "300"],
        cwd=REPO_ROOT,
        env={**os.environ, **stack.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED)
    events = received_events(stack, subscription, request_id)

    # At least once: copies may come; de-duplicated by event_id, the first copies are in order.
    unique: dict[str, dict[str, Any]] = {}
    for event in events:
        unique.setdefault(event["event_id"], event)
    told = list(unique.values())
    assert [event["seq"] for event in told] == list(range(1, len(told) + 1))
    first, second = record.attempts
    assert [(event["kind"], event["attempt"]) for event in told] == [
        ("accepted", 1),
        ("started", 1),
        *[("preempted", 1)] * first.preemptions,
        ("requeued", 1),
        ("started", 2),
        ("succeeded", 2),
    ]
    assert all(event["version"] == 1 and event["request_id"] == request_id for event in told)
    started = [event for event in told if event["kind"] == "started"]
    assert [(e["location"], e["strategy"]) for e in started] == [(first.location, "SPOT"), (second.location, "SPOT")]
    costs = [event["cost_usd"] for event in told]
    assert all(cost is not None for cost in costs) and costs == sorted(costs) and costs[-1] > 0
    stored = ledger.get(request_id)
    assert stored.pending_notices == [] and not stored.has_pending_effects

    out, err = watch.communicate(timeout=120)
    assert watch.returncode == 0, err
    watched = [json.loads(line) for line in out.splitlines()]
    assert [event["event_id"] for event in watched] == list(unique)
