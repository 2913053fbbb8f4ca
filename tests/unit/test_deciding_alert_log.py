"""The alerts log at its edges (shared/deciding/alert_log.py): an entry's name is the alert's, whatever
order its details were written in; entries live `LOG_DAYS`; `recent_alerts` reads the window of
days it says, lists no older day once the newer ones fill the limit (the dashboard reads it on
every refresh), and leaves out an entry gone since listed or unreadable. On the simulator's
in-memory Cloud Storage, whose io hook counts the listings or fails a read."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions

from shared.alerts import Alert, AlertKind
from shared.clock import iso
from shared.deciding.alert_log import ALERTS_PREFIX, LOG_DAYS, entry_name, recent_alerts
from sim.gcs import MemoryStorage
from tests.support.lifecycle import deleted_by_lifecycle

NOW = datetime(2026, 12, 6, 9, 30, tzinfo=UTC)


class Listings:
    """The storage io hook: counts the listings served; `gone` reads find nothing, as an entry the
    lifecycle rule deleted after it was listed."""

    def __init__(self) -> None:
        self.count = 0
        self.gone = 0

    def __call__(self, service: str, operation: str, perform: Callable[[], Any]) -> Any:
        if operation == "list":
            self.count += 1
        if operation == "read" and self.gone:
            self.gone -= 1
            raise exceptions.NotFound("deleted since listed")
        return perform()


@pytest.fixture
def listings() -> Listings:
    return Listings()


@pytest.fixture
def bucket(listings: Listings) -> Any:
    return MemoryStorage(clock=lambda: NOW, io=listings).client().bucket("state")


def log(bucket: Any, message: str, at: datetime) -> None:
    alert = Alert.of(AlertKind.JOB_FAILED, message, request_id="req-1", attempt=1, time=iso(at))
    bucket.blob(entry_name(alert)).upload_from_string(b'{"message": "%s"}' % message.encode())


def test_the_window_reaches_back_exactly_its_days(bucket: Any) -> None:
    log(bucket, "today", NOW)
    log(bucket, "six days back", NOW - timedelta(days=6))
    log(bucket, "seven days back", NOW - timedelta(days=7))
    log(bucket, "eight days back", NOW - timedelta(days=8))

    shown = [a["message"] for a in recent_alerts(bucket, NOW, limit=10)]

    assert shown == ["today", "six days back", "seven days back"]
    assert [a["message"] for a in recent_alerts(bucket, NOW, limit=10, days=1)] == ["today"]


def test_no_older_day_is_listed_once_the_newer_days_fill_the_limit(bucket: Any, listings: Listings) -> None:
    log(bucket, "first", NOW - timedelta(minutes=2))
    log(bucket, "second", NOW - timedelta(minutes=1))
    log(bucket, "yesterday", NOW - timedelta(days=1))

    shown = [a["message"] for a in recent_alerts(bucket, NOW, limit=2)]

    assert shown == ["second", "first"]
    assert listings.count == 1  # today's listing filled the limit: yesterday was never listed


def test_a_day_short_of_the_limit_lists_the_day_before(bucket: Any, listings: Listings) -> None:
    log(bucket, "today", NOW)
    log(bucket, "yesterday", NOW - timedelta(days=1))

    assert [a["message"] for a in recent_alerts(bucket, NOW, limit=2)] == ["today", "yesterday"]
    assert listings.count == 2


def test_equal_alerts_are_one_entry_whatever_order_their_details_were_written_in() -> None:
    """A pending alert is re-read from the record to be published again: another writer may have
    kept its details in another order, and it must still rewrite the same entry."""

    def failed(details: dict[str, Any]) -> Alert:
        return Alert.of(AlertKind.JOB_FAILED, "failed", request_id="req-1", attempt=1, details=details, time=iso(NOW))

    one, other = (
        failed({"location": "us-central1", "strategy": "SPOT"}),
        failed({"strategy": "SPOT", "location": "us-central1"}),
    )
    assert one == other
    assert entry_name(one) == entry_name(other)


def test_an_entry_lives_its_log_days_and_is_deleted_the_day_after() -> None:
    name = entry_name(Alert.of(AlertKind.JOB_FAILED, "failed", time=iso(NOW)))
    assert name.startswith(ALERTS_PREFIX)

    def deleted(after: timedelta) -> bool:
        return deleted_by_lifecycle(name, created=NOW, custom_time=None, now=NOW + after)

    assert not deleted(timedelta(days=LOG_DAYS))
    assert deleted(timedelta(days=LOG_DAYS + 1))


def test_an_entry_gone_since_it_was_listed_is_left_out(bucket: Any, listings: Listings) -> None:
    log(bucket, "first", NOW - timedelta(minutes=1))
    log(bucket, "second", NOW)
    listings.gone = 1

    assert len(recent_alerts(bucket, NOW, limit=10)) == 1


def test_an_entry_nested_past_the_recursion_limit_is_left_out(bucket: Any) -> None:
    log(bucket, "kept", NOW)
    bucket.blob(f"{ALERTS_PREFIX}2026-12-06/000000.000000-nested.json").upload_from_string(b"[" * 100_000)

    assert [a["message"] for a in recent_alerts(bucket, NOW, limit=10)] == ["kept"]
