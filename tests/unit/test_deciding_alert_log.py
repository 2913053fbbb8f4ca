"""The alerts log's reading side at its edges (shared/deciding/alert_log.py, `recent_alerts`): the
window of days it reads, and that it lists no older day once the newer ones fill the limit (the
dashboard reads it on every refresh). On the simulator's in-memory Cloud Storage, whose io hook
counts the listings."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.alerts import Alert, AlertKind
from shared.clock import iso
from shared.deciding.alert_log import entry_name, recent_alerts
from sim.gcs import MemoryStorage

NOW = datetime(2026, 12, 6, 9, 30, tzinfo=UTC)


class Listings:
    """The storage io hook: counts the listings served."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, service: str, operation: str, perform: Callable[[], Any]) -> Any:
        if operation == "list":
            self.count += 1
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
