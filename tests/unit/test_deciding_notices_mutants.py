"""The refusal's alert a notification publish decides is published at once and cleared
(shared/deciding/notices.py `_publish_refusal`), at the edges the mutation pass found untested:
a publish of it that fails, another effect still pending beside it, and the record removed
meanwhile."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from google.api_core import exceptions

from shared.alerts import Alert, AlertKind
from shared.clock import iso
from shared.deciding.notices import note_changes, publish_notices
from shared.jobs import JobState
from shared.ledger.records import RequestRecord
from shared.ledger.store import LedgerStore
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decide import NOW, make_record
from tests.support.decisions import CapturedLog, FakePublisher, make_settings

TOPIC = "projects/team-proj/topics/train-events"
TAKEN_AT = iso(NOW)


class RefusingTopic(FakePublisher):
    """Refuses the request's notification topic for good; `on_alert` runs before an ops alert's
    publish and may make it fail (ServiceUnavailable) by returning True."""

    def __init__(self, on_alert: Callable[[], bool] = lambda: False) -> None:
        super().__init__()
        self.on_alert = on_alert

    def publish(self, topic: str, data: bytes, **attributes: str) -> Future[str]:
        if topic == TOPIC:
            raise exceptions.NotFound("no topic")
        if self.on_alert():
            failed: Future[str] = Future()
            failed.set_exception(exceptions.ServiceUnavailable("publish failed"))
            return failed
        return super().publish(topic, data, **attributes)


def ports_of(publisher: FakePublisher) -> Ports:
    bucket = MemoryStorage(clock=lambda: NOW).client().bucket("state")
    settings = make_settings("state", SPOTJOBS_ALLOWED_NOTIFY_TOPICS="projects/team-proj/topics/")
    return Ports(settings, LedgerStore(bucket), lambda: publisher, None, clock=lambda: NOW)  # type: ignore[arg-type]


def stored(ports: Ports, *, other_alert: bool = False) -> RequestRecord:
    """A running request with two notifications pending, taken by a flush (`effects_taken_at`),
    and with `other_alert` an alert of another delivery's pending beside them."""
    record = make_record(request={"notify": {"topic": TOPIC}}, state=JobState.RUNNING)
    record.attempts[0].started_at = iso(NOW)
    record = note_changes(record, NOW)
    record.effects_taken_at = TAKEN_AT
    if other_alert:
        record.pending_alerts.append(other().to_json())
    ports.ledger.restore(record)
    got = ports.ledger.get("req-1")
    assert got is not None
    return got


def other() -> Alert:
    return Alert.of(AlertKind.JOB_FAILED, "attempt 1 failed", request_id="req-1", attempt=1, time=TAKEN_AT)


def refusals(publisher: FakePublisher) -> list[dict[str, Any]]:
    return [m.data for m in publisher.messages if m.data.get("kind") == AlertKind.NOTIFY_REFUSED]


def test_a_refusal_whose_alert_cannot_be_published_keeps_it_pending_and_says_so() -> None:
    publisher, log = RefusingTopic(on_alert=lambda: True), CapturedLog()
    ports = ports_of(publisher)
    returned = publish_notices(ports, stored(ports), log.logger)  # never raises: a decision is never blocked
    after = ports.ledger.get("req-1")
    assert after is not None and [a["kind"] for a in after.pending_alerts] == [AlertKind.NOTIFY_REFUSED]
    assert returned.pending_alerts == after.pending_alerts and refusals(publisher) == []
    assert [(w["severity"], w["request_id"]) for w in log.events("alert_publish_failed")] == [("WARNING", "req-1")]


def test_the_cleared_refusal_releases_the_flush_only_when_nothing_else_is_pending() -> None:
    for other_alert, taken_at in ((False, None), (True, TAKEN_AT)):
        publisher = RefusingTopic()
        ports = ports_of(publisher)
        publish_notices(ports, stored(ports, other_alert=other_alert), CapturedLog().logger)
        after = ports.ledger.get("req-1")
        assert len(refusals(publisher)) == 1 and after is not None
        assert after.pending_alerts == ([other().to_json()] if other_alert else [])
        assert after.effects_taken_at == taken_at, f"another alert pending: {other_alert}"


def test_a_record_removed_while_its_refusal_went_out_leaves_nothing_to_clear() -> None:
    # Removed by hand (an operator's purge) between the settle and the clear: the call still
    # returns, with the record as its settle stored it.
    def removed() -> bool:
        ports.ledger.remove_record("req-1", ports.ledger.read("req-1")[1])
        return False

    publisher = RefusingTopic(on_alert=removed)
    ports = ports_of(publisher)
    returned = publish_notices(ports, stored(ports), CapturedLog().logger)
    assert len(refusals(publisher)) == 1 and ports.ledger.get("req-1") is None
    assert [a["kind"] for a in returned.pending_alerts] == [AlertKind.NOTIFY_REFUSED]
