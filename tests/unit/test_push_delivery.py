"""The push shell (shared/delivery.py: handle_push) with the exact body a push subscription sends
for a message with attributes and no data, which Pub/Sub allows.

functions-framework's CloudEvent conversion answers that body 400 before any code of ours runs
(pinned below, so a functions-framework that fixes it shows up here); our HTTP entry points read
the body themselves and hand the handler a message with empty data."""

from __future__ import annotations

import io
import json
import textwrap
import types
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared.delivery import Message, handle_push, message_from_push
from shared.errors import TransientError
from shared.log import Logger

REPO = Path(__file__).resolve().parents[2]

# Exactly what a push subscription posts for `gcloud pubsub topics publish job-requests
# --attribute=request_id=r-1` (no --message): no `data` key at all.
ATTRIBUTES_ONLY = {
    "message": {
        "attributes": {"request_id": "r-1"},
        "messageId": "1234567890",
        "message_id": "1234567890",
        "publishTime": "2026-03-01T12:00:00.123Z",
        "publish_time": "2026-03-01T12:00:00.123Z",
    },
    "subscription": "projects/p/subscriptions/submit-job-push",
}


def _request(body: object) -> types.SimpleNamespace:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return types.SimpleNamespace(get_data=lambda: raw)


def _run(body: object, handler) -> tuple[tuple[str, int], list[dict]]:
    stream = io.StringIO()
    response = handle_push(
        _request(body),
        handler,
        function="f",
        max_age_seconds=float("inf"),
        log=Logger(stream=stream, min_severity="DEBUG"),
    )
    return response, [json.loads(line) for line in stream.getvalue().splitlines()]


def test_an_attributes_only_push_decodes_into_a_message_with_empty_data() -> None:
    assert message_from_push(ATTRIBUTES_ONLY) == Message(
        b"", "1234567890", {"request_id": "r-1"}, datetime(2026, 3, 1, 12, 0, 0, 123000, UTC)
    )


def test_an_attributes_only_push_reaches_the_handler_and_is_acknowledged() -> None:
    seen: list[Message] = []
    (body, status), lines = _run(ATTRIBUTES_ONLY, lambda message, log: seen.append(message))
    assert 200 <= status < 300
    assert [(m.data, m.attributes, m.message_id) for m in seen] == [(b"", {"request_id": "r-1"}, "1234567890")]
    assert lines == []


def test_a_body_that_is_not_a_push_is_refused_with_400_and_a_line() -> None:
    for body in ({}, b"not json", {"message": "x"}, b""):
        called: list[Message] = []
        (_, status), lines = _run(body, lambda message, log, called=called: called.append(message))
        assert status == 400 and called == []
        assert [(line["severity"], line["event"]) for line in lines] == [("ERROR", "undecodable")]


def test_a_transient_failure_raises_for_redelivery() -> None:
    def fail(message: Message, log: Logger) -> None:
        raise TransientError("later")

    with pytest.raises(TransientError):
        _run(ATTRIBUTES_ONLY, fail)


def test_functions_frameworks_cloudevent_conversion_refuses_it_and_our_entry_point_does_not(tmp_path: Path) -> None:
    import functions_framework

    source = tmp_path / "main.py"
    source.write_text(
        textwrap.dedent("""
        import functions_framework

        @functions_framework.cloud_event
        def as_cloudevent(event):
            pass
    """)
    )
    path = "/projects/p/topics/job-requests"
    cloudevent = functions_framework.create_app("as_cloudevent", str(source), "cloudevent").test_client()
    assert cloudevent.post(path, json=ATTRIBUTES_ONLY).status_code == 400  # why the entry points are HTTP

    # The real entry point (reconcile: an empty maintenance message is ignored without a client).
    ours = functions_framework.create_app("reconcile", str(REPO / "functions" / "main.py"), "http").test_client()
    response = ours.post(path, json={**ATTRIBUTES_ONLY, "message": {**ATTRIBUTES_ONLY["message"], "publishTime": None}})
    assert 200 <= response.status_code < 300, response.data
    assert ours.post(path, json={}).status_code == 400
