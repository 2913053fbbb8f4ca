"""The alerts log (shared/deciding/alert_log.py): every alert the outbox publishes is kept in the
state bucket first, one object per alert under `alerts/<day>/`, the same alert again at the same
name; a failed log write publishes nothing (the alert stays pending); the dashboard reads the
newest first. On the simulator's in-memory Cloud Storage, whose io hook fails what a test asks."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions

from shared.alerts import Alert, AlertKind
from shared.clock import iso
from shared.deciding.alert_log import ALERTS_PREFIX, entry_name, recent_alerts
from shared.deciding.outbox import publish_pending
from shared.ledger.records import RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decisions import FakePublisher, make_settings

NOW = datetime(2026, 12, 6, 9, 30, tzinfo=UTC)


class Failing:
    """The storage io hook: fails the writes under `alerts/` while `on` (a 503, as GCS would)."""

    def __init__(self) -> None:
        self.on = False

    def __call__(self, service: str, operation: str, perform: Callable[[], Any]) -> Any:
        if self.on and operation == "write":
            raise exceptions.ServiceUnavailable("injected")
        return perform()


@pytest.fixture
def failing() -> Failing:
    return Failing()


@pytest.fixture
def bucket(failing: Failing) -> Any:
    return MemoryStorage(clock=lambda: NOW, io=failing).client().bucket("state")


@pytest.fixture
def publisher() -> FakePublisher:
    return FakePublisher()


@pytest.fixture
def ports(bucket: Any, publisher: FakePublisher) -> Ports:
    return Ports(make_settings("state"), LedgerStore(bucket), lambda: publisher, None, clock=lambda: NOW)  # type: ignore[arg-type]


def alert(message: str = "attempt 1 failed", *, at: datetime = NOW, kind: AlertKind = AlertKind.JOB_FAILED) -> Alert:
    return Alert.of(kind, message, request_id="req-1", attempt=1, time=iso(at))


def with_pending(ports: Ports, *alerts: Alert) -> RequestRecord:
    record = RequestRecord(
        "req-1",
        {"request_id": "req-1", "custom_job": {"displayName": "train"}},
        "gs://out/req-1",
        status=RequestStatus.FAILED,
        pending_alerts=[a.to_json() for a in alerts],
    )
    ports.ledger.restore(record)
    stored = ports.ledger.get("req-1")
    assert stored is not None
    return stored


def logged(bucket: Any) -> dict[str, dict[str, Any]]:
    return {
        blob.name: json.loads(blob.download_as_bytes())
        for blob in bucket.client.list_blobs(bucket, prefix=ALERTS_PREFIX)
    }


def test_an_alert_the_outbox_publishes_is_in_the_log_under_its_day(
    ports: Ports, bucket: Any, publisher: FakePublisher
) -> None:
    failed = alert()
    publish_pending(ports, with_pending(ports, failed), ours=True, now=NOW)

    assert [m.data for m in publisher.on("ops-alerts")] == [failed.to_json()]
    assert logged(bucket) == {entry_name(failed): failed.to_json()}
    assert entry_name(failed).startswith("alerts/2026-12-06/093000.000000-")


def test_a_failed_publish_leaves_it_logged_and_pending_and_the_retry_rewrites_the_same_entry(
    ports: Ports, bucket: Any, publisher: FakePublisher
) -> None:
    failed = alert()
    publisher.fail_next = 1
    with pytest.raises(exceptions.ServiceUnavailable):
        publish_pending(ports, with_pending(ports, failed), ours=True, now=NOW)
    assert ports.ledger.get("req-1").pending_alerts == [failed.to_json()]

    publish_pending(ports, ports.ledger.get("req-1"), ours=True, now=NOW)

    assert len(publisher.on("ops-alerts")) == 1
    assert list(logged(bucket)) == [entry_name(failed)]  # one entry: the same alert, the same name


def test_an_alert_that_cannot_be_logged_is_not_published_and_stays_pending(
    ports: Ports, bucket: Any, publisher: FakePublisher, failing: Failing
) -> None:
    failed = alert()
    record = with_pending(ports, failed)
    failing.on = True
    with pytest.raises(exceptions.ServiceUnavailable):
        publish_pending(ports, record, ours=True, now=NOW)
    failing.on = False

    assert publisher.on("ops-alerts") == []
    assert ports.ledger.get("req-1").pending_alerts == [failed.to_json()]


def test_two_alerts_of_one_instant_are_two_entries() -> None:
    assert entry_name(alert("one")) != entry_name(alert("two"))
    assert entry_name(alert("one")) == entry_name(alert("one"))


def test_the_recent_alerts_are_the_newest_first_across_days_up_to_the_limit(ports: Ports, bucket: Any) -> None:
    times = [NOW - timedelta(days=2), NOW - timedelta(days=1, hours=3), NOW - timedelta(minutes=5), NOW]
    alerts = [alert(f"alert {n}", at=at) for n, at in enumerate(times)]
    publish_pending(ports, with_pending(ports, *alerts), ours=True, now=NOW)
    bucket.blob(f"{ALERTS_PREFIX}2026-12-06/000000.000000-hand-edit.json").upload_from_string(b"not json")
    bucket.blob(f"{ALERTS_PREFIX}2026-11-20/000000.000000-old.json").upload_from_string(b"{}")  # out of the window

    assert [a["message"] for a in recent_alerts(bucket, NOW, limit=2)] == ["alert 3", "alert 2"]
    assert [a["message"] for a in recent_alerts(bucket, NOW, limit=10)] == [f"alert {n}" for n in (3, 2, 1, 0)]
    assert recent_alerts(bucket, NOW - timedelta(days=30), limit=10) == []
