"""Requester notifications (shared/deciding/notices.py): `notify` read and judged by the policy
(fails closed, never a URL), the events a request's changes decide (in order, once, with ids
that a decision run again decides the same), and their publish from the outbox: at least once,
in order, a failure for now left pending, a topic that refuses for good dropped with one alert."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions

from shared.alerts import AlertKind
from shared.clock import iso
from shared.deciding.decisions import Observation, decide
from shared.deciding.notices import (
    REFUSED_MARKER,
    NoticeKind,
    event_id,
    note_changes,
    notify_pending,
    publish_notices,
    telling_changes,
)
from shared.deciding.outbox import publish_pending
from shared.jobs import JobState
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.requests.envelope import canonical_envelope
from shared.requests.policy import InvalidJobRequest, validate_request
from shared.settings import Settings
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decide import NOW, POLICY, job, make_record
from tests.support.decisions import CapturedLog, FakePublisher, make_settings

TOPIC = "projects/team-proj/topics/train-events"
NOTIFY = {"notify": {"topic": TOPIC}}
ALLOWED = {"SPOTJOBS_ALLOWED_NOTIFY_TOPICS": "projects/team-proj/topics/"}
BODY = {
    "request_id": "req-1",
    "custom_job": {
        "displayName": "train",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "a2-highgpu-1g"},
                    "replicaCount": 1,
                    "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/train:1"},
                }
            ]
        },
    },
}


def settings(**env: str) -> Settings:
    return make_settings("state", **env)


def validate(body: dict[str, Any], **env: str) -> Any:
    return validate_request(json.dumps(body).encode(), attributes={}, settings=settings(**env))


def violations(body: dict[str, Any], **env: str) -> list[str]:
    with pytest.raises(InvalidJobRequest) as refused:
        validate(body, **env)
    return [str(v) for v in refused.value.violations]


# Reading and the policy.


def test_an_allowed_topic_is_kept_in_the_canonical_envelope() -> None:
    request = validate({**BODY, **NOTIFY}, **ALLOWED)
    assert request.notify_topic == TOPIC
    stored = canonical_envelope(request, default_location="us-central1", default_max_attempts=3)
    assert stored["notify"] == {"topic": TOPIC}
    plain = canonical_envelope(validate(BODY), default_location="us-central1", default_max_attempts=3)
    assert "notify" not in plain  # a request without it keeps the form it always had


def test_no_allowlist_refuses_any_topic_with_one_clear_error() -> None:
    assert violations({**BODY, **NOTIFY}) == [
        f"notify.topic: is {TOPIC}; allowed topics: none: this deployment sends no notifications "
        "(SPOTJOBS_ALLOWED_NOTIFY_TOPICS)"
    ]


def test_a_topic_outside_the_allowed_prefixes_is_refused() -> None:
    other = {"notify": {"topic": "projects/other-proj/topics/t-1"}}
    assert violations({**BODY, **other}, **ALLOWED) == [
        "notify.topic: is projects/other-proj/topics/t-1; allowed topics: projects/team-proj/topics/"
    ]


@pytest.mark.parametrize(
    "notify",
    [
        {"topic": "https://hooks.slack.com/services/T/B/X"},
        {"topic": "http://169.254.169.254/computeMetadata/v1/"},
        {"topic": "projects/team-proj/topics/goog-internal"},
        {"topic": "projects/team-proj/subscriptions/s-1"},
        {"topic": 7},
        {"url": "https://example.com"},
        "projects/team-proj/topics/train-events",
    ],
)
def test_a_url_or_anything_not_a_topic_path_is_refused(notify: Any) -> None:
    found = violations({**BODY, "notify": notify}, SPOTJOBS_ALLOWED_NOTIFY_TOPICS="projects/,https://,http://")
    assert found and all(v.startswith("notify") for v in found)


def test_a_requeue_is_not_failed_for_a_topic_the_policy_no_longer_allows() -> None:
    from shared.requests.envelope import REQUEUE_ATTRIBUTES

    body = {**BODY, **NOTIFY, "attempt": 2}
    request = validate_request(json.dumps(body).encode(), attributes=REQUEUE_ATTRIBUTES, settings=settings())
    assert request.attempt == 2 and request.notify_topic == TOPIC  # the outbox refuses it, once


def test_an_unknown_notify_field_is_named() -> None:
    found = violations({**BODY, "notify": {"topic": TOPIC, "email": "a@b.c"}}, **ALLOWED)
    assert found == ["notify.email: unknown field; expected topic"]


# The events a record's changes decide.


def noticed(record: RequestRecord) -> list[tuple[str, int]]:
    return [(n["kind"], n["attempt"]) for n in record.pending_notices]


def run_decide(record: RequestRecord, state: str, now: datetime = NOW, **job_fields: Any) -> RequestRecord:
    decision = decide(
        record, Observation(1 if record.latest is None else record.latest.n, job(state, **job_fields)), POLICY, now
    )
    return note_changes(decision.record, now)


def test_a_preempted_request_tells_started_preempted_requeued_in_order() -> None:
    record = note_changes(make_record(request=NOTIFY), NOW)
    assert noticed(record) == [("accepted", 1)]
    record = run_decide(record, JobState.RUNNING)
    preempted = {"code": 8, "message": "The job was preempted"}  # RESOURCE_EXHAUSTED: capacity ran out
    record = run_decide(record, JobState.FAILED, update=200, error=preempted)
    assert noticed(record) == [("accepted", 1), ("started", 1), ("preempted", 1), ("requeued", 1)]
    assert [n["seq"] for n in record.pending_notices] == [1, 2, 3, 4]
    started, requeued = record.pending_notices[1], record.pending_notices[3]
    assert (started["location"], started["strategy"]) == ("us-central1", "SPOT")
    assert requeued["next_attempt"] == 2 and requeued["reason"] == "stockout"


def test_every_event_has_the_versioned_fields() -> None:
    record = run_decide(note_changes(make_record(request=NOTIFY), NOW), JobState.RUNNING)
    started = record.pending_notices[-1]
    assert set(started) >= {"version", "event_id", "request_id", "attempt", "kind", "seq", "at", "cost_usd"}
    assert started["version"] == 1 and started["at"] == iso(NOW)
    assert started["event_id"] == event_id("req-1", 1, "started", 0)


def test_a_decision_run_again_decides_nothing_new() -> None:
    record = run_decide(note_changes(make_record(request=NOTIFY), NOW), JobState.RUNNING)
    first = list(record.pending_notices)
    again = note_changes(run_decide(record, JobState.RUNNING), NOW + timedelta(seconds=5))
    assert again.pending_notices == first


def test_event_ids_are_deterministic_and_distinct() -> None:
    assert event_id("req-1", 2, "preempted", 0) == event_id("req-1", 2, "preempted", 0)
    ids = {event_id("req-1", a, k, n) for a in (1, 2) for k in ("started", "preempted") for n in (0, 1)}
    assert len(ids) == 8


def test_a_request_without_notify_decides_no_notification() -> None:
    record = run_decide(note_changes(make_record(), NOW), JobState.RUNNING)
    assert record.pending_notices == [] and not any(m.startswith("notice:") for m in record.markers)


def test_the_end_is_told_once_with_the_error_of_a_failure() -> None:
    record = run_decide(make_record(request=NOTIFY, status=RequestStatus.RUNNING), JobState.RUNNING)
    error = {"code": 3, "message": "exited with status 1"}
    record = run_decide(record, JobState.FAILED, update=200, error=error)
    assert noticed(record)[-1] == ("failed", 1)
    assert record.pending_notices[-1]["error"] == "exited with status 1"


def test_a_switch_and_a_move_are_told_as_such() -> None:
    record = make_record(request=NOTIFY)
    record.attempts.append(Attempt(2, "us-central1", "STANDARD", claimed_at=iso(NOW)))
    record.attempts.append(Attempt(3, "europe-west4", "STANDARD", claimed_at=iso(NOW)))
    kinds = [n["kind"] for n in note_changes(record, NOW).pending_notices]
    assert kinds == ["accepted", "switched", "moved"]


def test_budget_reached_is_decided_by_the_caller_once() -> None:
    record = make_record(request=NOTIFY)
    assert notify_pending(record, NoticeKind.BUDGET_REACHED, NOW, max_cost_usd=10.0)
    assert not notify_pending(record, NoticeKind.BUDGET_REACHED, NOW, max_cost_usd=10.0)
    assert record.pending_notices[-1]["max_cost_usd"] == 10.0


def test_cost_is_unknown_for_an_unpriced_machine_and_rises_while_it_runs() -> None:
    record = make_record(request={**NOTIFY, "custom_job": BODY["custom_job"]}, state=JobState.RUNNING)
    record.attempts[0].started_at = iso(NOW)
    early = notify_pending(record, NoticeKind.STARTED, NOW + timedelta(hours=1), n=0)
    late = notify_pending(record, NoticeKind.STARTED, NOW + timedelta(hours=2), n=1)
    assert early and late
    first, second = (n["cost_usd"] for n in record.pending_notices)
    assert first is not None and second > first > 0
    unpriced = make_record(request=NOTIFY, state=JobState.RUNNING)  # no machine type at all
    unpriced.attempts[0].started_at = iso(NOW)
    notify_pending(unpriced, NoticeKind.STARTED, NOW + timedelta(hours=1))
    assert unpriced.pending_notices[0]["cost_usd"] is None


def test_telling_changes_notes_in_the_transitions_write() -> None:
    record = make_record(request=NOTIFY)
    assert noticed(telling_changes(lambda current: current, lambda: NOW)(record)) == [("accepted", 1)]
    assert telling_changes(lambda current: None, lambda: NOW)(record) is None


# Publishing them from the outbox.

START = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


class RefusingPublisher(FakePublisher):
    """Refuses every publish to `topic` with `error`, as Pub/Sub would for good."""

    def __init__(self, topic: str, error: Exception) -> None:
        super().__init__()
        self.refused_topic, self.error = topic, error

    def publish(self, topic: str, data: bytes, **attributes: str) -> Any:
        if topic == self.refused_topic:
            raise self.error
        return super().publish(topic, data, **attributes)


@dataclass
class Box:
    ledger: LedgerStore
    publisher: FakePublisher
    log: CapturedLog
    settings: Settings

    def ports(self, *, notifies: bool = True) -> Ports:
        return Ports(
            self.settings,
            self.ledger,
            lambda: self.publisher,
            None,  # type: ignore[arg-type]
            clock=lambda: START,
            notifies=notifies,
        )

    def restore(self, record: RequestRecord) -> RequestRecord:
        self.ledger.restore(record)
        stored = self.ledger.get(record.request_id)
        assert stored is not None
        return stored

    def sent(self) -> list[dict[str, Any]]:
        return [m.data for m in self.publisher.messages if m.topic == TOPIC]


def box(publisher: FakePublisher | None = None) -> Box:
    bucket = MemoryStorage(clock=lambda: START).client().bucket("state")
    return Box(LedgerStore(bucket), publisher or FakePublisher(), CapturedLog(), settings(**ALLOWED))


def pending_record() -> RequestRecord:
    record = make_record(request=NOTIFY, state=JobState.RUNNING)
    record.attempts[0].started_at = iso(NOW)
    return note_changes(record, NOW)  # accepted, started


def test_the_outbox_publishes_them_in_order_and_clears_them() -> None:
    b = box()
    record = b.restore(pending_record())
    assert publish_pending(b.ports(), record, ours=True, now=START, log=b.log.logger) is None
    assert [m["kind"] for m in b.sent()] == ["accepted", "started"]
    attributes = [m.attributes for m in b.publisher.messages]
    assert attributes[0] == {"request_id": "req-1", "kind": "accepted", "event_id": b.sent()[0]["event_id"]}
    stored = b.ledger.get("req-1")
    assert stored is not None and stored.pending_notices == [] and not stored.has_pending_effects


def test_a_failed_publish_stays_pending_in_order_and_never_raises() -> None:
    publisher = FakePublisher(fail_next=1)
    b = box(publisher)
    record = b.restore(pending_record())
    publish_notices(b.ports(), record, b.log.logger)  # no exception: a decision is never blocked
    stored = b.ledger.get("req-1")
    assert stored is not None and [n["kind"] for n in stored.pending_notices] == ["accepted", "started"]
    assert b.sent() == []
    publish_notices(b.ports(), stored, b.log.logger)
    assert [m["kind"] for m in b.sent()] == ["accepted", "started"]


def test_a_function_that_does_not_notify_leaves_them_pending() -> None:
    b = box()
    record = b.restore(pending_record())
    assert publish_notices(b.ports(notifies=False), record, b.log.logger).pending_notices == record.pending_notices
    assert b.sent() == []


@pytest.mark.parametrize("error", [exceptions.NotFound("no topic"), exceptions.PermissionDenied("no grant")])
def test_a_topic_that_refuses_for_good_drops_them_with_one_alert(error: Exception) -> None:
    b = box(RefusingPublisher(TOPIC, error))
    record = b.restore(pending_record())
    publish_pending(b.ports(), record, ours=True, now=START, log=b.log.logger)
    stored = b.ledger.get("req-1")
    assert stored is not None and stored.pending_notices == [] and REFUSED_MARKER in stored.markers
    assert not stored.has_pending_effects  # its alert was published by the same flush
    refusals = [m.data for m in b.publisher.on("ops-alerts") if m.data["kind"] == AlertKind.NOTIFY_REFUSED]
    assert len(refusals) == 1 and refusals[0]["details"]["dropped"] == 2
    # No more are decided for it, so nothing is retried forever and no second alert comes.
    assert note_changes(stored, START).pending_notices == []
    assert not notify_pending(stored, NoticeKind.BUDGET_REACHED, START)


def test_a_topic_the_policy_no_longer_allows_is_a_refusal() -> None:
    b = box()
    b.settings = settings()  # the allowlist emptied since the request was accepted
    record = b.restore(pending_record())
    publish_pending(b.ports(), record, ours=True, now=START, log=b.log.logger)
    stored = b.ledger.get("req-1")
    assert b.sent() == [] and stored is not None and stored.pending_notices == []
    assert [m.data["kind"] for m in b.publisher.on("ops-alerts")] == [AlertKind.NOTIFY_REFUSED]


def refused_alerts(b: Box) -> list[dict[str, Any]]:
    return [m.data for m in b.publisher.on("ops-alerts") if m.data["kind"] == AlertKind.NOTIFY_REFUSED]


def test_a_flush_whose_own_write_decided_no_alert_still_publishes_the_refusal_it_decides() -> None:
    # An observation that only told a change (no alert of its own: `ours` False) finds the topic
    # refusing: the refusal's alert is its own write's, so it goes out at once, not after a lease
    # while every other delivery of the request is nacked "being published by another delivery"
    # (simulator seed 1505: a hostile message's delivery published it, minutes later).
    b = box(RefusingPublisher(TOPIC, exceptions.NotFound("no topic")))
    record = b.restore(pending_record())
    assert publish_pending(b.ports(), record, ours=False, now=START, log=b.log.logger) is None
    stored = b.ledger.get("req-1")
    assert len(refused_alerts(b)) == 1
    assert stored is not None and not stored.has_pending_effects


def test_the_refusal_found_before_a_create_is_published_by_the_delivery_that_found_it() -> None:
    # submit publishes `accepted` right after its claim, before the create; what that write
    # decides is the delivery's own to send, whatever its later flush was given as its own.
    b = box(RefusingPublisher(TOPIC, exceptions.PermissionDenied("no grant")))
    record = b.restore(pending_record())
    returned = publish_notices(b.ports(), record, b.log.logger)
    stored = b.ledger.get("req-1")
    assert len(refused_alerts(b)) == 1
    assert stored is not None and not stored.has_pending_effects and returned.pending_alerts == []
