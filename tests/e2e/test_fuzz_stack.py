"""Fuzzing through the real wiring: garbage published to the topics is acknowledged, never retried.

The parsers have their own property-based tests (tests/unit); here generated payloads travel the
production path (Pub/Sub emulator push → functions-framework → entry point), and the test checks
what an operator would see: every bad job request yields exactly one `invalid_request` alert, no
delivery of any of them is retried or dead-lettered, and no job or ledger record appears.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.stack

# JSON that is structured but wrong: right keys with wrong types, and random documents.
_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_wrong_requests = st.fixed_dictionaries(
    {"request_id": _scalars, "custom_job": _json},
    optional={"locations": _json, "max_attempts": _scalars, "fallback": _json, "attempt": _scalars},
)
_payloads = st.one_of(
    st.binary(max_size=200),
    _json.map(lambda value: json.dumps(value).encode()),
    _wrong_requests.map(lambda value: json.dumps(value).encode()),
)


def _collect_payloads(count: int) -> list[bytes]:
    collected: list[bytes] = []

    @settings(max_examples=count, database=None, suppress_health_check=list(HealthCheck), deadline=None)
    @given(_payloads)
    def gather(payload: bytes) -> None:
        collected.append(payload)

    gather()
    return list(dict.fromkeys(collected))  # hypothesis may repeat an example


def test_garbage_job_requests_are_acknowledged_with_one_alert_each(stack) -> None:
    stack.pull_alerts(timeout=1)  # start from an empty alert subscription
    payloads = _collect_payloads(25)
    # An attribute makes an empty body publishable (Pub/Sub refuses a message with neither).
    message_ids = {stack.publish("job_requests", payload, fuzz="1") for payload in payloads}

    alerts: list[dict] = []

    def every_message_alerted() -> bool:
        alerts.extend(a for a in stack.pull_alerts(timeout=1) if a["kind"] == "invalid_request")
        return message_ids <= {a["details"].get("message_id") for a in alerts}

    stack.wait_for(every_message_alerted, timeout=90, message="an invalid_request alert per payload")
    per_message = [a["details"]["message_id"] for a in alerts if a["details"].get("message_id") in message_ids]
    assert sorted(per_message) == sorted(message_ids), "one alert per message, never two"

    lines = [line for line in stack.function_logs("submit_job") if line.get("message_id") in message_ids]
    assert not [line for line in lines if line.get("event") in ("retry", "permanent_failure")], lines
    assert {line["message_id"] for line in lines if line.get("event") == "invalid_request"} == message_ids
    dead = [m.message_id for m in stack.pull("dead-letter-reader", timeout=1)]
    assert not message_ids & set(dead)


def test_garbage_job_events_are_acknowledged_without_touching_the_ledger(stack) -> None:
    # Other tests' jobs may still be finishing, so compare which requests exist, not their status.
    before = {request_id for request_id, _ in stack.ledger().iter_statuses()}
    payloads = _collect_payloads(25)
    message_ids = {stack.publish("job_events", payload, fuzz="1") for payload in payloads}

    def every_message_handled() -> list[dict]:
        lines = [l for l in stack.function_logs("on_job_event") if l.get("message_id") in message_ids]
        return lines if {l["message_id"] for l in lines} == message_ids else []

    lines = stack.wait_for(every_message_handled, timeout=90, message="on_job_event to see each payload")
    assert not [line for line in lines if line["severity"] in ("ERROR", "CRITICAL")], lines
    assert not [line for line in lines if line.get("event") == "retry"], lines
    assert {request_id for request_id, _ in stack.ledger().iter_statuses()} == before
