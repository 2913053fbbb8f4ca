"""Settings, structured logging, topology and delivery decoding: the pieces every function uses."""

from __future__ import annotations

import base64
import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from shared.delivery import Message, handle_delivery, message_from_push
from shared.errors import ConfigurationError, InvalidRequest, TransientError, Violation
from shared.log import Logger
from shared.settings import Settings
from shared.topology import TOPOLOGY


def test_settings_come_from_the_environment_with_typed_conversion() -> None:
    settings = Settings.from_env(
        {
            "GOOGLE_CLOUD_PROJECT": "p",
            "SPOTJOBS_ALLOWED_MACHINE_FAMILIES": "a2, a3 ,g2",
            "SPOTJOBS_KEEP_LAST": "5",
            "SPOTJOBS_KEEP_FINAL_CHECKPOINT": "false",
            "SPOTJOBS_MAX_EVENT_AGE_SECONDS": "60.5",
            "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": "",
        }
    )
    assert settings.project == "p"
    assert settings.allowed_machine_families == ("a2", "a3", "g2")
    assert settings.keep_last == 5
    assert settings.keep_final_checkpoint is False
    assert settings.max_event_age_seconds == 60.5
    assert settings.allowed_image_prefixes == ()
    assert Settings.from_env({}).allowed_machine_families == ("a2", "a3")


def test_settings_are_frozen_and_round_trip_through_their_environment() -> None:
    settings = Settings.from_env({"SPOTJOBS_PREEMPTION_PATTERNS": "a,b"})
    with pytest.raises(AttributeError):
        settings.project = "other"  # type: ignore[misc]
    assert Settings.from_env(settings.as_env()) == settings


@pytest.mark.parametrize(
    "variable, value",
    [
        ("SPOTJOBS_KEEP_LAST", "two"),
        ("SPOTJOBS_KEEP_FINAL_CHECKPOINT", "maybe"),
        ("SPOTJOBS_MAX_EVENT_AGE_SECONDS", "x"),
    ],
)
def test_a_malformed_setting_is_a_configuration_error_naming_it(variable: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=variable):
        Settings.from_env({variable: value})


def test_an_empty_commit_marker_list_is_refused_not_read_two_ways() -> None:
    # The kit reads an empty SPOTJOBS_COMMIT_MARKERS as "its defaults", the pruner would read "none".
    with pytest.raises(ConfigurationError, match="SPOTJOBS_COMMIT_MARKERS"):
        Settings.from_env({"SPOTJOBS_COMMIT_MARKERS": " "})
    assert Settings.from_env({"SPOTJOBS_COMMIT_MARKERS": "a, b"}).commit_markers == ("a", "b")


def test_the_create_timeout_is_a_setting_the_claim_lease_must_cover_twice() -> None:
    settings = Settings.from_env({"SPOTJOBS_CLAIM_LEASE_SECONDS": "5", "SPOTJOBS_CREATE_TIMEOUT_SECONDS": "2"})
    assert settings.create_timeout_seconds == 2.0
    # A create may be sent while it and a margin (half the timeout) still fit in the lease.
    assert settings.create_deadline_seconds == 5 - 2 - 1
    assert Settings.from_env({}).create_deadline_seconds == 120 - 30 - 15


def test_an_unset_create_timeout_is_30_seconds_or_half_a_shorter_lease() -> None:
    assert Settings.from_env({}).create_timeout_seconds == 30.0
    assert Settings.from_env({"SPOTJOBS_CLAIM_LEASE_SECONDS": "5"}).create_timeout_seconds == 2.5
    settings = Settings.from_env({"SPOTJOBS_CLAIM_LEASE_SECONDS": "15"})
    assert Settings.from_env(settings.as_env()) == settings


@pytest.mark.parametrize(
    "lease, create_timeout",
    [("59", "30"), ("120", "61"), ("5", "3"), ("0", None), ("0", "1"), ("10", "0"), ("10", "-1")],
)
def test_a_lease_that_cannot_cover_a_create_is_a_configuration_error(lease: str, create_timeout: str | None) -> None:
    environ = {"SPOTJOBS_CLAIM_LEASE_SECONDS": lease}
    if create_timeout is not None:
        environ["SPOTJOBS_CREATE_TIMEOUT_SECONDS"] = create_timeout
    with pytest.raises(ConfigurationError, match="SPOTJOBS_CREATE_TIMEOUT_SECONDS"):
        Settings.from_env(environ)


def test_output_dir_is_stable_per_request() -> None:
    settings = Settings.from_env({"SPOTJOBS_CHECKPOINT_BUCKET": "ckpt", "SPOTJOBS_CHECKPOINT_PREFIX": "/runs/"})
    assert settings.output_dir_for("r-1") == "gs://ckpt/runs/r-1/"


def test_log_lines_are_single_json_objects_with_sticky_context() -> None:
    stream = io.StringIO()
    log = Logger(stream=stream, min_severity="INFO").bind(request_id="r1", job=None)

    log.warning("preempted", event="preemption", count=2)
    log.debug("hidden")

    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["severity"] == "WARNING" and entry["message"] == "preempted"
    assert entry["request_id"] == "r1" and entry["event"] == "preemption" and entry["count"] == 2
    assert "job" not in entry  # None context values are not written


def test_topology_names_every_function_topic_and_subscription() -> None:
    topics = set(TOPOLOGY.topic_keys)
    assert {"job_requests", "job_events", "ops_alerts", "maintenance", "dead_letter"} <= topics
    for wiring in TOPOLOGY.functions.values():
        assert wiring["topic"] in topics
    assert TOPOLOGY.trigger_subscription["dead_letter_topic"] in topics
    assert all(len(TOPOLOGY.topic_name(key)) >= 3 for key in topics)


def _push_event(data: bytes, **message_fields: object) -> dict:
    message = {"data": base64.b64encode(data).decode(), "messageId": "m-1", **message_fields}
    return {"message": message, "subscription": "s"}


def test_a_push_event_decodes_into_a_message_with_its_publish_time() -> None:
    published = "2026-11-29T10:00:00.123Z"
    message = message_from_push(_push_event(b"{}", attributes={"request_id": "r"}, publishTime=published))
    assert message == Message(b"{}", "m-1", {"request_id": "r"}, datetime(2026, 11, 29, 10, 0, 0, 123000, UTC))


def _run(event: dict, handler, max_age: float = 3600) -> list[dict]:
    stream = io.StringIO()
    handle_delivery(
        event, handler, function="f", max_age_seconds=max_age, log=Logger(stream=stream, min_severity="DEBUG")
    )
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_message_older_than_the_maximum_age_is_dropped_without_running_the_handler() -> None:
    old = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    calls: list[Message] = []
    lines = _run(_push_event(b"x", publishTime=old), lambda m, log: calls.append(m), max_age=3600)
    assert calls == []
    assert lines[0]["event"] == "stale_message" and lines[0]["severity"] == "WARNING"


def test_transient_failures_raise_for_redelivery_and_permanent_ones_are_acknowledged() -> None:
    def transient(message, log):
        raise TransientError("try later")

    def permanent(message, log):
        raise InvalidRequest([Violation("custom_job", "missing")])

    with pytest.raises(TransientError):
        _run(_push_event(b"x"), transient)
    lines = _run(_push_event(b"x"), permanent)
    assert lines[-1]["event"] == "permanent_failure" and lines[-1]["severity"] == "ERROR"


@pytest.mark.parametrize(
    "event",
    [{}, {"data": None}, {"data": {"message": "nope"}}, {"data": {"message": {"data": "%%%not base64"}}}],
)
def test_undecodable_deliveries_are_acknowledged_with_an_error_line(event: dict) -> None:
    lines = _run(event, lambda m, log: pytest.fail("handler must not run"))
    assert lines[0]["event"] == "undecodable"


def test_rfc3339_times_parse_to_aware_datetimes_and_garbage_to_none() -> None:
    from shared.clock import parse_rfc3339

    utc = UTC
    exact = datetime(2026, 1, 2, 3, 4, 5, 123456, utc)
    assert parse_rfc3339("2026-01-02T03:04:05.123456Z") == exact
    assert parse_rfc3339("2026-01-02T03:04:05") == datetime(2026, 1, 2, 3, 4, 5, tzinfo=utc)
    assert parse_rfc3339("2026-01-02T05:04:05+02:00") == datetime(2026, 1, 2, 3, 4, 5, tzinfo=utc)
    for garbage in ("", "yesterday", None, 12):
        assert parse_rfc3339(garbage) is None


@pytest.mark.parametrize("variable", ["SPOTJOBS_PREEMPTION_PATTERNS", "SPOTJOBS_STOCKOUT_PATTERNS"])
def test_a_pattern_that_is_not_a_regular_expression_is_refused_when_settings_are_read(variable: str) -> None:
    with pytest.raises(ConfigurationError, match=variable):
        Settings.from_env({variable: "preempt,([unclosed"})


def test_the_storage_session_reads_the_environment_once_unless_a_proxy_is_set(monkeypatch) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from shared.adapters.clients import read_environment_once

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    client = storage.Client(project="p", credentials=AnonymousCredentials())
    read_environment_once(client)
    assert client._http.trust_env is False  # noqa: SLF001

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    proxied = storage.Client(project="p", credentials=AnonymousCredentials())
    read_environment_once(proxied)
    assert proxied._http.trust_env is True  # noqa: SLF001 - a proxy: requests keeps NO_PROXY rules
