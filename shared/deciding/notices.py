"""Requester notifications: the events a request's own topic (`notify.topic`) receives.

A notification is decided in the compare-and-swap that makes the change it tells of, written
pending into the record (`RequestRecord.pending_notices`, in order), and published after the
write by the outbox (`shared.deciding.outbox.publish_pending`), at least once, as alerts are. One
event, version 1:

    {"version": 1, "event_id": str, "request_id": str, "attempt": int, "kind": a NoticeKind,
     "seq": int,               # its place among the request's notifications (1, 2, ...)
     "at": RFC 3339 UTC,        # when it was decided
     "cost_usd": float | null,  # spent so far: list prices x run time (null: a machine unpriced)
     ...kind-specific fields}   # started: location, strategy; requeued/moved/switched: the next
                                # attempt's; failed/gave_up: error; budget_reached: the caller's

`event_id` is a digest of (request, attempt, kind, n): a decision run again (a redelivery, a
concurrent delivery, a lost compare-and-swap) decides the same id, and a marker per id in the
record decides it once. Subscribers de-duplicate by `event_id` and order by `seq`.

Most notifications follow from the record itself (`note_changes`): whatever a write made true
(an attempt claimed, started, preempted, followed by the next, the request ended) that no
notification told yet is told, so every path that writes those states (decide, submit's claim
and refusals, a cancel) tells it by calling one function in its transition. A decision whose
news the record does not show by itself (`budget_reached`) calls `notify_pending`.

A publish that fails for now stays pending, in order, for the next flush (reconcile comes back
for every record with pending effects); it never blocks or fails a decision. A topic that refuses
for good (NotFound, PermissionDenied, or one the policy no longer allows) drops the request's
pending notifications and stops its notifications, with one `notify_refused` alert.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from shared.alerts import Alert, AlertKind
from shared.clock import iso
from shared.deciding.alert_log import publish_alert
from shared.deciding.preemptions import unconfirmed_kit_preemptions
from shared.fleet.spend import request_spend
from shared.ledger.records import Attempt, RequestRecord, alert_marker
from shared.ledger.states import RequestStatus
from shared.log import Logger
from shared.requests.policy import check_notify_topic
from shared.swap import Decided
from shared.wiring import Ports

NOTICE_SCHEMA_VERSION = 1
NOTICE_MARKER = "notice"  # notice:<kind>:<attempt>:<n>, one per notification decided
REFUSED_MARKER = alert_marker(AlertKind.NOTIFY_REFUSED, 0)

_Doc = TypeVar("_Doc", RequestRecord, Decided[RequestRecord], None)


class NoticeKind(enum.StrEnum):
    ACCEPTED = "accepted"  # attempt 1 claimed: the request is in the ledger
    STARTED = "started"  # an attempt's job runs (location, strategy)
    PREEMPTED = "preempted"  # an attempt's VM was reclaimed (once per preemption counted and confirmed)
    REQUEUED = "requeued"  # the next attempt, same location and strategy
    MOVED = "moved"  # the next attempt, in another location
    SWITCHED = "switched"  # the next attempt, on another strategy (a fallback, a deadline switch)
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    GAVE_UP = "gave_up"
    CANCELLED = "cancelled"
    BUDGET_REACHED = "budget_reached"  # decided by the budget stop through `notify_pending`
    BUDGET_UNPRICED = "budget_unpriced"  # the budget stop's, when the deployed price table cannot price the spend


ENDINGS = {
    RequestStatus.SUCCEEDED: NoticeKind.SUCCEEDED,
    RequestStatus.FAILED: NoticeKind.FAILED,
    RequestStatus.GAVE_UP: NoticeKind.GAVE_UP,
    RequestStatus.CANCELLED: NoticeKind.CANCELLED,
}


def notify_topic(record: RequestRecord) -> str | None:
    """The topic the request's notifications go to, if it named one."""
    notify = record.request.get("notify")
    topic = notify.get("topic") if isinstance(notify, dict) else None
    return topic if isinstance(topic, str) else None


def _ending_told(record: RequestRecord) -> bool:
    """Whether the request's ending notification was decided: nothing is told after it."""
    endings = tuple(f"{NOTICE_MARKER}:{kind}:" for kind in ENDINGS.values())
    return any(marker.startswith(endings) for marker in record.markers)


def event_id(request_id: str, attempt: int, kind: str, n: int = 0) -> str:
    """The notification's id, the same whoever decides it and however often."""
    return hashlib.sha256(f"{request_id}/{attempt}/{kind}/{n}".encode()).hexdigest()[:32]


def notify_pending(
    record: RequestRecord, kind: NoticeKind, now: datetime, *, attempt: int | None = None, n: int = 0, **fields: Any
) -> bool:
    """Decide notification `kind` of `attempt` (the latest by default), its `n`th, once: in the
    caller's compare-and-swap, mark it and keep it pending. False when the request names no
    topic, its topic refused, it was decided before, or the request's ending was: the ending is
    the last event (a preemption a late kit line counts, a budget reached, stay in the record)."""
    if notify_topic(record) is None or REFUSED_MARKER in record.markers or _ending_told(record):
        return False
    attempt = attempt if attempt is not None else (record.latest.n if record.latest else 1)
    if not record.mark(f"{NOTICE_MARKER}:{kind}:{attempt}:{n}"):
        return False
    record.pending_notices.append(
        {
            "version": NOTICE_SCHEMA_VERSION,
            "event_id": event_id(record.request_id, attempt, kind, n),
            "request_id": record.request_id,
            "attempt": attempt,
            "kind": str(kind),
            "seq": record.count_marks(f"{NOTICE_MARKER}:"),
            "at": iso(now),
            "cost_usd": cost_so_far(record, now),
            **fields,
        }
    )
    return True


def note_changes(record: RequestRecord, now: datetime) -> RequestRecord:
    """Decide every notification the record's state calls for and none told yet, in the order
    things happen: accepted; per attempt started, preempted, followed by the next; the end."""
    if notify_topic(record) is None:
        return record
    if record.attempts:
        notify_pending(record, NoticeKind.ACCEPTED, now, attempt=1)
    for attempt in record.attempts:
        if attempt.started_at or attempt.state == "JOB_STATE_RUNNING":
            notify_pending(
                record,
                NoticeKind.STARTED,
                now,
                attempt=attempt.n,
                location=attempt.location,
                strategy=attempt.strategy,
            )
        # A kit `preempted` line alone may be Vertex's stop at the job timeout: told once a restart
        # or the job's end confirms it (a notification cannot be taken back).
        confirmed = attempt.preemptions - unconfirmed_kit_preemptions(record, attempt)
        preemptions = max(confirmed, 1 if attempt.preemptions_unknown else 0)
        for n in range(preemptions):
            notify_pending(record, NoticeKind.PREEMPTED, now, attempt=attempt.n, n=n, preemptions=n + 1)
        _note_successor(record, attempt, now)
    ending = ENDINGS.get(record.status)
    latest = record.latest
    if ending is not None and latest is not None:
        error = (latest.error or {}).get("message") if ending in (NoticeKind.FAILED, NoticeKind.GAVE_UP) else None
        notify_pending(record, ending, now, attempt=latest.n, **({"error": error} if error else {}))
    return record


def _note_successor(record: RequestRecord, attempt: Attempt, now: datetime) -> None:
    following = record.attempt(attempt.n + 1)
    requeue = record.requeue if record.requeue and record.requeue.attempt == attempt.n + 1 else None
    if following is None and requeue is None:
        return
    location = following.location if following else requeue.location  # type: ignore[union-attr]
    strategy = following.strategy if following else requeue.strategy  # type: ignore[union-attr]
    kind = NoticeKind.REQUEUED
    if strategy != attempt.strategy:
        kind = NoticeKind.SWITCHED
    elif location != attempt.location:
        kind = NoticeKind.MOVED
    fields: dict[str, Any] = {"next_attempt": attempt.n + 1, "location": location, "strategy": strategy}
    if requeue is not None:
        fields["reason"] = requeue.reason
    notify_pending(record, kind, now, attempt=attempt.n, **fields)


def telling_changes(
    transition: Callable[[RequestRecord | None], _Doc], clock: Callable[[], datetime]
) -> Callable[[RequestRecord | None], _Doc]:
    """`transition`, then `note_changes` on what it writes: in the same compare-and-swap."""

    def told(current: RequestRecord | None) -> _Doc:
        result = transition(current)
        written = result.value if isinstance(result, Decided) else result
        if written is not None:
            note_changes(written, clock())
        return result

    return told


def cost_so_far(record: RequestRecord, now: datetime) -> float | None:
    """What the request spent so far (`shared.fleet.spend.request_spend`: Vertex's run time x the
    list price of every replica, Vertex's training fee not included); None when a machine type or
    region has no price: unknown, never zero."""
    spent = request_spend(record, now).usd
    return None if spent is None else round(spent, 4)


def publish_notices(ports: Ports, record: RequestRecord, log: Logger) -> RequestRecord:
    """Publish the record's pending notifications in order, stopping at the first that fails
    for now (it and those after stay pending, in order). Returns the record as stored after
    clearing what was published, or after dropping everything when the topic refused for good
    (then with the one `notify_refused` alert pending)."""
    from google.api_core import exceptions

    if not record.pending_notices or not ports.notifies:
        return record
    topic = notify_topic(record)
    refusal = None if topic is None else "; ".join(map(str, check_notify_topic(topic, ports.settings))) or None
    published: list[str] = []
    for notice in [] if refusal or topic is None else record.pending_notices:
        attributes = {"request_id": record.request_id, "kind": str(notice["kind"]), "event_id": str(notice["event_id"])}
        try:
            ports.publish_to(topic, notice, **attributes)
        except (exceptions.NotFound, exceptions.PermissionDenied) as exc:
            refusal = f"{type(exc).__name__}: {exc}"
            break
        except Exception as exc:  # noqa: BLE001 - a notification never fails the decision; retried later
            log.warning(
                "a notification could not be published; it stays pending",
                event="notice_publish_failed",
                request_id=record.request_id,
                topic=topic,
                error=f"{type(exc).__name__}: {exc}",
            )
            break
        published.append(str(notice["event_id"]))
    if topic is None:
        refusal = "the request names no notification topic"
    if not published and refusal is None:
        return record
    now = ports.clock()
    decided: list[Alert] = []  # the refusal's alert, if this call's write is the one that decided it

    def settle(current: RequestRecord | None) -> RequestRecord | None:
        decided.clear()  # a compare-and-swap retry runs this again
        if current is None:
            return None
        if refusal is None:
            current.pending_notices = [n for n in current.pending_notices if n["event_id"] not in published]
            return current
        dropped = len(current.pending_notices)
        current.pending_notices = []
        if current.mark(REFUSED_MARKER):
            decided.append(
                Alert.of(
                    AlertKind.NOTIFY_REFUSED,
                    f"the notification topic of {record.request_id} refused ({refusal}); "
                    f"{dropped} pending notifications dropped, no more are sent",
                    request_id=record.request_id,
                    details={"topic": topic, "error": refusal, "dropped": dropped},
                    time=iso(now),
                )
            )
            current.pending_alerts.append(decided[0].to_json())
        return current

    stored = ports.ledger.update(record.request_id, settle)
    if stored is not None and decided:
        stored = _publish_refusal(ports, stored, decided[0], log)
    if refusal is not None:
        log.warning(
            "the request's notification topic refused for good; its notifications stop",
            event="notify_refused",
            request_id=record.request_id,
            topic=topic,
            error=refusal,
        )
    return stored or record


def _publish_refusal(ports: Ports, stored: RequestRecord, alert: Alert, log: Logger) -> RequestRecord:
    """Publish at once the refusal's alert this call's write decided, then clear it: the outbox
    leaves a pending alert to the delivery whose write decided it, and the caller's flush counts
    only the caller's own decision as its own (simulator seed 1505: the alert waited out a lease,
    every other delivery of the request nacked meanwhile). A publish that fails leaves it pending
    for whoever finds it once this delivery is presumed dead; a decision is never blocked."""
    if not ports.may_publish(ports.settings.ops_alerts_topic):
        return stored  # the outbox of a function that may publishes it
    payload = alert.to_json()
    try:
        publish_alert(ports, alert)
    except Exception as exc:  # noqa: BLE001 - it stays pending, published by a later flush
        log.warning(
            "the notify_refused alert could not be published; it stays pending",
            event="alert_publish_failed",
            request_id=stored.request_id,
            error=f"{type(exc).__name__}: {exc}",
        )
        return stored

    def clear(current: RequestRecord | None) -> RequestRecord | None:
        if current is None or payload not in current.pending_alerts:
            return None
        current.pending_alerts = [a for a in current.pending_alerts if a != payload]
        if not current.has_pending_effects:
            current.effects_taken_at = None
        return current

    return ports.ledger.update(stored.request_id, clear) or stored
