"""Log-entry parsing and classification (shared.deciding.events), over canned sink payloads."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.deciding.events import (
    IgnoredEntry,
    JobLogEntry,
    Signal,
    SignalPatterns,
    classify,
    parse_log_entry,
    patterns_from,
)
from shared.errors import ConfigurationError
from shared.settings import Settings
from tests.conftest import load_event

DEFAULT_PATTERNS = patterns_from(Settings())


def entry_file(name: str) -> bytes:
    return load_event(f"log_entries/{name}")


@pytest.mark.parametrize(
    ("name", "signal"),
    [
        ("service_preparing.json", Signal.PENDING),
        ("service_provisioning.json", Signal.PENDING),
        ("service_running.json", Signal.RUNNING),
        ("service_text_running.json", Signal.RUNNING),
        ("service_preempted.json", Signal.PREEMPTION),
        ("service_stockout.json", Signal.PREEMPTION),  # "... was preempted 7 times": the 7th counts
        ("service_insufficient_resources.json", Signal.STOCKOUT),
        ("service_nonzero_exit.json", Signal.FAILED),
        ("service_teardown.json", Signal.IRRELEVANT),
        ("service_succeeded.json", Signal.SUCCEEDED),
        ("service_failed.json", Signal.FAILED),
        ("service_cancelled.json", Signal.CANCELLED),
        ("container_stdout.json", Signal.IRRELEVANT),
        ("container_stderr.json", Signal.IRRELEVANT),  # a trainer's stderr is ERROR, and noise
        ("container_structured.json", Signal.IRRELEVANT),
        ("container_sigterm_preempted.json", Signal.PREEMPTION),  # a hint; never counted itself
    ],
)
def test_canned_entries_classify(name: str, signal: Signal) -> None:
    assert classify(parse_log_entry(entry_file(name)), DEFAULT_PATTERNS) is signal


def test_parse_reads_every_field() -> None:
    entry = parse_log_entry(entry_file("service_preempted.json"))
    assert entry == JobLogEntry(
        job_id="4512345678901234567",
        task_name="service",
        text="The Spot VM of replica workerpool0-0 was preempted. Restarting the job (restart 1 of 6).",
        severity="WARNING",
        timestamp=datetime(2026, 11, 29, 17, 0, 0, 123456, tzinfo=UTC),
        insert_id="a4",
    )
    assert entry.is_service_line and entry.identity == "a4"


def test_text_payload_and_json_payload_both_read() -> None:
    assert parse_log_entry(entry_file("container_stdout.json")).text == "step 400 loss 0.123"
    assert parse_log_entry(entry_file("container_structured.json")).text == "saved checkpoint step-000400"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'"Job failed."', "not a JSON object"),
        (entry_file("foreign_gce_instance.json"), "not ml_job"),
        (entry_file("foreign_audit_log.json"), "not ml_job"),
        (json.dumps({"resource": {"type": "ml_job", "labels": {}}}).encode(), "job_id"),
        (
            json.dumps({"resource": {"type": "ml_job", "labels": {"job_id": "../../requests/x"}}}).encode(),
            "job_id",
        ),
        (
            json.dumps({"resource": {"type": "ml_job", "labels": {"job_id": 12345}}}).encode(),
            "job_id",
        ),
    ],
)
def test_non_job_entries_are_ignored_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(IgnoredEntry, match=reason):
        parse_log_entry(data)


def test_timestamp_with_nanoseconds_and_garbage() -> None:
    body = json.loads(entry_file("service_running.json"))
    body["timestamp"] = "2026-11-29T17:00:00.123456789Z"
    assert parse_log_entry(json.dumps(body).encode()).timestamp == datetime(2026, 11, 29, 17, 0, 0, 123456, tzinfo=UTC)
    body["timestamp"] = "yesterday"
    assert parse_log_entry(json.dumps(body).encode()).timestamp is None


def test_identity_without_insert_id_is_stable_and_text_specific() -> None:
    body = json.loads(entry_file("service_preempted.json"))
    del body["insertId"]
    first = parse_log_entry(json.dumps(body).encode())
    assert first.identity == parse_log_entry(json.dumps(body).encode()).identity
    body["jsonPayload"]["message"] = body["jsonPayload"]["message"].replace("restart 1", "restart 2")
    assert parse_log_entry(json.dumps(body).encode()).identity != first.identity


def test_age_from_the_entry_timestamp() -> None:
    entry = parse_log_entry(entry_file("service_running.json"))
    now = datetime(2026, 11, 29, 18, 0, 0, 123456, tzinfo=UTC)
    assert entry.age_seconds(now) == 3600.0


def test_patterns_come_from_configuration() -> None:
    running = parse_log_entry(entry_file("service_running.json"))
    custom = SignalPatterns.compile(preemption=[r"job is running"], stockout=[])
    assert classify(running, custom) is Signal.PREEMPTION
    preempted = parse_log_entry(entry_file("service_preempted.json"))
    none = patterns_from(Settings.from_env({"SPOTJOBS_PREEMPTION_PATTERNS": "", "SPOTJOBS_STOCKOUT_PATTERNS": ""}))
    assert classify(preempted, none) is Signal.IRRELEVANT


def test_bad_pattern_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="preemption pattern"):
        SignalPatterns.compile(preemption=["(unclosed"], stockout=[])


def test_error_severity_counts_only_on_service_lines() -> None:
    body = json.loads(entry_file("service_teardown.json"))
    body["severity"] = "ERROR"
    assert classify(parse_log_entry(json.dumps(body).encode()), DEFAULT_PATTERNS) is Signal.FAILED


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
entry_like = st.fixed_dictionaries(
    {},
    optional={
        "resource": st.fixed_dictionaries(
            {},
            optional={
                "type": st.sampled_from(["ml_job", "gce_instance"]) | json_values,
                "labels": st.fixed_dictionaries(
                    {},
                    optional={
                        "job_id": st.from_regex(r"[0-9]{1,20}", fullmatch=True) | json_values,
                        "task_name": st.sampled_from(["service", "workerpool0-0"]) | json_values,
                    },
                )
                | json_values,
            },
        ),
        "textPayload": json_values,
        "jsonPayload": st.fixed_dictionaries({}, optional={"message": json_values}) | json_values,
        "severity": json_values,
        "timestamp": json_values,
        "insertId": json_values,
    },
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | entry_like.map(lambda e: json.dumps(e).encode()))
def test_parser_only_ever_raises_ignored_entry(data: bytes) -> None:
    try:
        entry = parse_log_entry(data)
    except IgnoredEntry:
        return
    assert isinstance(classify(entry, DEFAULT_PATTERNS), Signal)
