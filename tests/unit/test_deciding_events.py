"""Job log entries (shared/deciding/events.py) at the edges tests/unit/test_events.py leaves: a kit
line in either payload, an entry's identity when the sink strips its insertId (two lines of the
same text at two instants are two pieces of evidence), and which signals are worth a read."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from spotjobs_kit.lines import RUN_STARTED, format_line

from shared.deciding.events import IgnoredEntry, Signal, parse_log_entry


def entry(payload_key: str, payload: object, *, timestamp: str | None = "2026-11-29T17:00:00Z") -> bytes:
    body: dict[str, object] = {
        "resource": {"type": "ml_job", "labels": {"job_id": "111", "task_name": "workerpool0-0"}},
        payload_key: payload,
    }
    if timestamp is not None:
        body["timestamp"] = timestamp
    return json.dumps(body).encode()


def test_a_kit_line_is_read_from_either_payload() -> None:
    text = format_line(RUN_STARTED, {"request_id": "req-1", "attempt": 1, "run": 2})
    as_text = parse_log_entry(entry("textPayload", text))
    assert as_text.kit is not None and (as_text.kit.event, as_text.kit.run) == (RUN_STARTED, 2)
    as_json = parse_log_entry(entry("jsonPayload", json.loads(text[text.index("{") :])))
    assert as_json.kit is not None and (as_json.kit.event, as_json.kit.run) == (RUN_STARTED, 2)
    plain = parse_log_entry(entry("jsonPayload", {"message": "epoch 3 done"}))
    assert plain.kit is None and plain.text == "epoch 3 done"


def test_without_an_insert_id_the_same_text_at_two_instants_is_two_entries() -> None:
    first = parse_log_entry(entry("textPayload", "Spot VM preempted", timestamp="2026-11-29T17:00:00Z"))
    later = parse_log_entry(entry("textPayload", "Spot VM preempted", timestamp="2026-11-29T17:05:00Z"))
    assert first.timestamp == datetime(2026, 11, 29, 17, 0, tzinfo=UTC)
    assert first.identity != later.identity
    assert first.identity.startswith("2026-11-29T17:00:00+00:00|")
    undated = parse_log_entry(entry("textPayload", "Spot VM preempted", timestamp=None))
    assert undated.identity.startswith("|") and undated.identity != first.identity


def test_every_signal_but_irrelevant_is_worth_a_read() -> None:
    assert [signal for signal in Signal if not signal.is_relevant] == [Signal.IRRELEVANT]


def test_an_insert_id_that_is_not_a_string_is_no_insert_id() -> None:
    body = json.loads(entry("textPayload", "Spot VM preempted"))
    for odd in (42, "", None, ["a"]):
        body["insertId"] = odd
        parsed = parse_log_entry(json.dumps(body).encode())
        assert parsed.insert_id is None
        assert parsed.identity.startswith("2026-11-29T17:00:00+00:00|")
    body["insertId"] = "abc"
    assert parse_log_entry(json.dumps(body).encode()).identity == "abc"


def test_message_data_nested_past_the_recursion_limit_is_ignored_not_a_crash() -> None:
    # Valid JSON as deep as anyone may send: the parser gives up with RecursionError, which must
    # ack the message as not JSON like any other unreadable data, not crash the delivery.
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(IgnoredEntry, match="message data is not JSON"):
        parse_log_entry(deep)
