"""A Pub/Sub message with attributes and no data (allowed by Pub/Sub) sent to job-requests, through
the real functions-framework process of the embedded stack: one `invalid_request` alert, and the
delivery is acknowledged (2xx), not retried towards the dead-letter topic."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid

import pytest

pytestmark = pytest.mark.stack


def _alerts_for(stack, message_id: str, timeout: float = 30) -> list[dict]:
    found: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found += [
            a
            for a in stack.pull_alerts(timeout=1.0)
            if a["kind"] == "invalid_request" and a["details"]["message_id"] == message_id
        ]
        if found:
            time.sleep(2)  # a second alert (a redelivery) would arrive within this
            found += [
                a
                for a in stack.pull_alerts(timeout=1.0)
                if a["kind"] == "invalid_request" and a["details"]["message_id"] == message_id
            ]
            return found
    return found


def test_the_exact_push_body_without_data_is_alerted_and_acknowledged(stack) -> None:
    message_id = f"attrs-{uuid.uuid4().hex[:8]}"
    body = json.dumps(
        {
            "message": {
                "attributes": {"request_id": "no-data"},
                "messageId": message_id,
                "message_id": message_id,
                "publishTime": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
                "publish_time": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            },
            "subscription": stack.subscription_path("submit-job-push"),
        }
    ).encode()
    url = f"{stack.function_urls['submit_job']}/{stack.topic_path('job_requests')}"
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert 200 <= response.status < 300

    [alert] = _alerts_for(stack, message_id)
    assert alert["severity"] == "ERROR"
    lines = [line for line in stack.function_logs("submit_job") if line.get("message_id") == message_id]
    assert [line["event"] for line in lines] == ["invalid_request"]


def test_a_published_message_with_attributes_only_is_alerted_once(stack) -> None:
    message_id = stack.publish("job_requests", b"", request_id=f"attrs-{uuid.uuid4().hex[:8]}")
    [alert] = _alerts_for(stack, message_id)
    assert alert["kind"] == "invalid_request"
    time.sleep(2)  # a nacked delivery is back after about a second here
    lines = [line for line in stack.function_logs("submit_job") if line.get("message_id") == message_id]
    assert [line["event"] for line in lines] == ["invalid_request"]
