"""The outbox through the real wiring: an alert whose first publish fails is not lost.

The ops-alerts topic is deleted while submit_job fails a request (Vertex refuses its create), so
the alert's publish fails (404 from Pub/Sub). The alert waits in the ledger; once the topic is
back, the next delivery or reconcile publishes it. Its own stack: deleting a topic detaches the
shared stack's alert subscription for good.
"""

from __future__ import annotations

import json
import sys
import uuid
from typing import Any

import pytest

from devstack.samples import job_request
from shared.ledger.states import RequestStatus
from tests.conftest import isolated_stack
from tests.support.reconcile_passes import passes_until

pytestmark = pytest.mark.stack


def test_a_submit_failed_alert_whose_first_publish_fails_is_published_later() -> None:
    from google.cloud import pubsub_v1

    with isolated_stack() as stack:
        publisher = pubsub_v1.PublisherClient()
        subscriber = pubsub_v1.SubscriberClient()
        alerts_topic = stack.topic_path("ops_alerts")
        publisher.delete_topic(topic=alerts_topic)
        stack.vertex_control(
            "POST",
            "/emulator/v1/faults",
            {"method": "create", "status": 400, "count": 1, "message": "machine type refused"},
        )
        request_id = f"outbox-{uuid.uuid4().hex[:8]}"
        stack.publish("job_requests", job_request(request_id, [sys.executable, "-c", "pass"]))

        def failed_with_alert_pending() -> Any:
            record = stack.ledger().get(request_id)
            ready = record and record.status == RequestStatus.FAILED and record.pending_alerts
            return record if ready else None

        record = stack.wait_for(failed_with_alert_pending, 60, "the failed request, alert pending")
        assert [a["kind"] for a in record.pending_alerts] == ["submit_failed"]

        def publish_failed() -> list[dict[str, Any]]:
            return [
                line
                for line in stack.function_logs("submit_job")
                if line.get("request_id") == request_id and line.get("event") == "submit_blocked"
            ]

        blocked = stack.wait_for(publish_failed, 30, "the failed publish in submit_job's log")
        assert "NotFound" in blocked[0]["error"]  # the first publish did fail

        publisher.create_topic(name=alerts_topic)
        reader = stack.subscription_path(f"outbox-reader-{uuid.uuid4().hex[:6]}")
        subscriber.create_subscription(name=reader, topic=alerts_topic)

        received: list[dict[str, Any]] = []

        def alert_arrived() -> bool:
            response = subscriber.pull(request={"subscription": reader, "max_messages": 10})
            if response.received_messages:
                subscriber.acknowledge(
                    request={
                        "subscription": reader,
                        "ack_ids": [m.ack_id for m in response.received_messages],
                    }
                )
            received.extend(json.loads(m.message.data) for m in response.received_messages)
            return any(a["request_id"] == request_id for a in received)

        # A pass publishes it once its decider is presumed dead (a claim lease after the decision):
        # a single tick could run before then, so passes, one at a time, until it arrives.
        passes_until(stack, alert_arrived, "the submit_failed alert after the topic came back", timeout=90)
        ours = [a for a in received if a["request_id"] == request_id]
        assert [(a["kind"], a["attempt"]) for a in ours] == [("submit_failed", 1)]
        assert "machine type refused" in ours[0]["message"]
        cleared = stack.wait_for(lambda: not stack.ledger().get(request_id).pending_alerts, 30, "the alert cleared")
        assert cleared
