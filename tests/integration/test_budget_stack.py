"""A request's `max_cost_usd` through the embedded stack (issue 46): a request with a small budget
is stopped at it, with one `budget_reached` alert and a `budget_reached` notification on its own topic. Reconcile runs every second, as Cloud
Scheduler would every interval; the job's run time is the emulator's own startTime and endTime.

What is asserted is what the design guarantees (docs/requests.md): the request ends CANCELLED by
its budget, no job of it is left alive, its spend reached the budget and passed it by no more than
the job's price for the time a pass and the cancel may take, and the alert came once."""

from __future__ import annotations

import json

import pytest

from shared.clock import utcnow
from shared.fleet.spend import attempt_hourly, request_spend
from shared.jobs import JobState
from shared.ledger.states import RequestStatus
from tests.support.stack_events import alerts_for, new_request_id, spot_capacity, training_request, wait_for_status

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

BUDGET = 0.005  # about 9 s of a2-highgpu-1g on Spot in us-central1 (shared/price_table.json)
# A pass every second, the emulator's cancel and a loaded machine: what the stop may lag here.
LAG_SECONDS = 30.0


def test_a_request_with_a_small_budget_is_stopped_at_it_with_one_alert_and_its_notification(stack) -> None:
    from google.cloud import pubsub_v1

    request_id = new_request_id("budget")
    topic = f"projects/{stack.options.project}/topics/notify-{request_id}"
    pubsub_v1.PublisherClient().create_topic(name=topic)
    subscription = f"notify-{request_id}-reader"
    pubsub_v1.SubscriberClient().create_subscription(
        request={"name": stack.subscription_path(subscription), "topic": topic, "ack_deadline_seconds": 60}
    )
    with spot_capacity(stack, [1], tick_seconds=3600):  # capacity throughout, and reconcile every second
        body = training_request(request_id, steps=1_000_000, max_cost_usd=BUDGET, notify={"topic": topic})
        stack.publish("job_requests", body)
        record = wait_for_status(
            stack, request_id, RequestStatus.CANCELLED, RequestStatus.SUCCEEDED, RequestStatus.FAILED, timeout=300
        )

    assert record.status is RequestStatus.CANCELLED
    assert record.cancel is not None and record.cancel.source == "budget"
    [attempt] = record.attempts
    assert attempt.state == JobState.CANCELLED and attempt.cancel_sent_at is not None
    spend = request_spend(record, utcnow())
    rate = (attempt_hourly(record.request, attempt) or (0.0, 0.0))[0]
    assert spend.usd is not None and BUDGET <= spend.usd <= BUDGET + rate * LAG_SECONDS / 3600
    alerts = alerts_for(stack, request_id, "budget_reached")
    assert len(alerts) == 1 and alerts[0]["details"]["stopped"] is True

    told: list[dict] = []

    def until_cancelled_is_told() -> bool:
        told.extend(json.loads(m.data) for m in stack.pull(subscription, timeout=2.0))
        return any(event["kind"] == "cancelled" for event in told)

    stack.wait_for(until_cancelled_is_told, 120, "the cancelled notification")
    budget_told = {event["event_id"]: event for event in told if event["kind"] == "budget_reached"}
    assert len(budget_told) == 1  # once, after de-duplication by event_id
    [event] = budget_told.values()
    assert event["max_cost_usd"] == BUDGET and event["stopped"] is True and event["spent_usd"] >= BUDGET
