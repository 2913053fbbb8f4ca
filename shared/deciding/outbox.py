"""The outbox: every message a decision sends is kept in the ledger until its publish is confirmed.

One rule for every function: a decision that must publish something (an alert, the re-queue of
attempt n+1, a prune request) writes it into the request's record as pending, in the same
compare-and-swap as the decision itself. After the write, `flush` publishes what is pending and
clears (or confirms) each message once Pub/Sub has accepted it. Whoever finds a message still
pending later (a redelivery, on_job_event, reconcile, which lists records with pending effects)
publishes it. So every message is sent at least once; a crash between a publish and its
confirmation can repeat it, never lose it.

Concurrent deliveries of one event must not each send the alert: the delivery whose write made a
message pending publishes it at once; anyone else only once that delivery is presumed dead (the
message is older than the claim lease). A function publishes only to topics it may
(`Ports.may_publish`); anything else stays pending for the function that owns the topic.

A request's cancel (shared/ledger/cancelling.py) keeps its live job's cancel pending the same way,
sent by whoever sees it first. A deadline switch (shared/deciding/deadline_watch.py) also keeps a cancel pending: the Spot
attempt's job is cancelled (`send_cancels`), and the re-queue of its on-demand successor is
published only once Vertex reports that job ended (`Attempt.ending`; a cancel is asynchronous,
https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs/cancel),
by the observation that sees the end (an event, or reconcile when the event is lost), so the two
never train into the request's checkpoints at once.

The re-queue is both a message and a state: `record.requeue` is the decision submit's claim is
checked against; `message_id` confirms its publish. A re-queue published but never claimed (its
message dead-lettered) is published again after `unclaimed_requeue_seconds`; submit's claim
absorbs the copies.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from shared.alerts import Alert, AlertKind
from shared.clock import iso, parse_iso
from shared.deciding.alert_log import publish_alert
from shared.deciding.notices import publish_notices
from shared.ledger.records import CorruptRecord, RequestRecord, private_copy
from shared.log import Logger
from shared.requests.envelope import requeue_message
from shared.swap import Decided, Swapped
from shared.wiring import Ports


class Mine(enum.Flag):
    """Which of a record's pending messages this call's own write decided: `flush` publishes those
    at once, and any other only once its decider is presumed dead (older than the claim lease)."""

    NONE = 0
    EFFECTS = enum.auto()  # the alerts and the prune request
    REQUEUE = enum.auto()  # the re-queue of the next attempt

    @classmethod
    def written(cls, swapped: Swapped[RequestRecord]) -> Mine:
        """What a write that decided alerts (or nothing else) made pending: its effects if it landed."""
        return cls.EFFECTS if swapped.wrote else cls.NONE


def flush(
    ports: Ports,
    record: RequestRecord,
    log: Logger,
    *,
    mine: Mine = Mine.NONE,
    own_alerts: Sequence[Mapping[str, Any]] | None = None,
) -> tuple[str | None, str | None]:
    """Publish whatever `record` holds pending, re-queue included; every publish is tried even if
    an earlier one fails, then the first failure is raised (what failed stays pending).
    `own_alerts`: the alerts this call's write decided, when it knows them: with `Mine.EFFECTS`
    only those are its to publish at once, not one another delivery's write made pending just
    before (that delivery publishes it; anyone once it is presumed dead).

    Returns (message id of a re-queue published now, reason to look again), the reason set when a
    message is left to the delivery that decided it."""
    if record.requeue is None and not record.has_pending_effects and not any(a.cancel_pending for a in record.attempts):
        return None, None  # nothing to send (most observations): no step would do anything
    now = ports.clock()
    settled: tuple[str | None, str | None] = (None, None)
    waiting: str | None = None
    cancel_waiting: str | None = None

    def cancels() -> None:
        nonlocal cancel_waiting
        cancel_waiting = send_cancels(ports, record, log, ours=Mine.REQUEUE in mine, now=now)

    def requeue() -> None:
        nonlocal settled
        if record.latest is not None and record.latest.ending:
            return  # the next attempt starts once Vertex reports the job it replaces ended (never both)
        settled = settle_requeue(ports, record, log, ours=Mine.REQUEUE in mine, now=now)

    def pending() -> None:
        nonlocal waiting
        waiting = publish_pending(ports, record, ours=Mine.EFFECTS in mine, now=now, own_alerts=own_alerts, log=log)

    run_all([cancels, requeue, pending])
    message_id, in_flight = settled
    return message_id, in_flight or cancel_waiting or waiting


def decide_alert(
    ports: Ports,
    request_id: str,
    marker: str,
    alert_for: Callable[[RequestRecord], Alert | None],
) -> Swapped[RequestRecord]:
    """Decide an alert once per `marker`: in one ledger update, mark it and keep the alert
    `alert_for` makes from the current record pending (None: nothing to say). Returns the
    compare-and-swap's outcome: `wrote` says this call decided it (`Mine.written`), `decided` is
    the alert (`decided_alert`). A marker already set decides nothing again: a redelivery or a
    concurrent call finds it and leaves the alert to whoever wrote it."""

    def alert_once(current: RequestRecord | None) -> Decided[RequestRecord] | None:
        if current is None or marker in current.markers:
            return None
        alert = alert_for(current)
        if alert is None:
            return None
        current.mark(marker)
        current.pending_alerts.append(alert.to_json())
        return Decided(current, alert.to_json())

    return ports.ledger.swap(request_id, alert_once)


def decided_alert(swapped: Swapped[RequestRecord]) -> list[dict[str, Any]]:
    """The alert a `decide_alert` write made pending, as `flush`'s `own_alerts`: the only one its
    caller publishes at once. Another alert pending beside it is another delivery's to publish (or
    a taker's, once that one is presumed dead): publishing it too sent it twice (seed 872)."""
    return [swapped.decided] if swapped.wrote and swapped.decided is not None else []


def alerts_of(record: RequestRecord, kind: AlertKind, attempt: int) -> list[dict[str, Any]]:
    """The pending alerts of `kind` about `attempt`, as `flush`'s `own_alerts`, for a write that
    decided that one alert (under its once-only marker) beside others another delivery may be
    publishing."""
    return [a for a in record.pending_alerts if a.get("kind") == kind and a.get("attempt") == attempt]


def decide_and_flush_alert(
    ports: Ports,
    request_id: str,
    marker: str,
    alert_for: Callable[[RequestRecord], Alert | None],
    log: Logger,
) -> None:
    """`decide_alert`, then publish whatever the record holds pending."""
    swapped = decide_alert(ports, request_id, marker, alert_for)
    if swapped.value is not None and swapped.value.has_pending_effects:
        flush(ports, swapped.value, log, mine=Mine.written(swapped), own_alerts=decided_alert(swapped))


def run_all(steps: list[Callable[[], object]]) -> None:
    """Run every step even if an earlier one fails (an alert must not stop a re-queue), then
    raise the first failure so the delivery is retried or reported."""
    failure: Exception | None = None
    for step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - re-raised below once every step was tried
            failure = failure or exc
    if failure is not None:
        raise failure


def alert_corrupt_record(ports: Ports, error: CorruptRecord, log: Logger) -> None:
    """Tell the operators, once, that a request's ledger document cannot be read. No record can
    hold this alert, so it is published first and noted after: at least once."""
    log.error(
        "a ledger document cannot be read; nothing is decided on it until it is repaired",
        event="ledger_corrupt",
        request_id=error.request_id,
        error=str(error),
    )
    if ports.ledger.is_noted_corrupt(error.request_id):
        return
    publish_alert(
        ports,
        Alert.of(
            AlertKind.LEDGER_CORRUPT,
            f"{error}; repair or restore it (spotjobs status shows it once it reads)",
            request_id=error.request_id,
            time=iso(ports.clock()),
        ),
    )
    ports.ledger.note_corrupt(error.request_id)


def publish_pending(
    ports: Ports,
    record: RequestRecord,
    *,
    ours: bool,
    now: datetime,
    own_alerts: Sequence[Mapping[str, Any]] | None = None,
    log: Logger | None = None,
) -> str | None:
    """Publish the record's pending notifications (shared/deciding/notices.py), alerts and prune
    request, then clear the ones published.

    `ours`: this call's write made them pending; with `own_alerts`, only those alerts (`flush`).
    Returns a reason to look again when they are left to the delivery that decided them. Raises
    the first failed publish after trying them all; what failed stays pending.
    """
    settings = ports.settings
    # Notifications first, by whoever flushes (a copy is harmless: subscribers de-duplicate by
    # event_id); a topic that refuses for good leaves its one alert pending, sent below.
    record = publish_notices(ports, record, log or Logger())
    if not record.has_pending_effects:
        return None
    own = {_alert_key(a) for a in own_alerts or ()}
    others = [a for a in record.pending_alerts if _alert_key(a) not in own] if ours and own_alerts is not None else []
    if others:
        # Another delivery's write made these pending: they stay for it (or a later taker).
        record = private_copy(record)
        record.pending_alerts = [a for a in record.pending_alerts if a not in others]
    if not ours:
        taken = _take_over_effects(ports, record, now)
        if taken is None:
            return f"effects decided for {record.request_id} are being published by another delivery"
        record = taken
    published_alerts: list[dict[str, Any]] = []
    prune_published = False

    def prune() -> None:
        nonlocal prune_published
        ports.publish(
            settings.maintenance_topic,
            {"task": "prune", "request_id": record.request_id},
            task="prune",
        )
        prune_published = True

    def alert(payload: dict[str, Any]) -> None:
        publish_alert(ports, Alert(**payload))
        published_alerts.append(payload)

    steps: list[Callable[[], object]] = []
    if record.prune_pending and ports.may_publish(settings.maintenance_topic):
        steps.append(prune)
    if ports.may_publish(settings.ops_alerts_topic):
        steps.extend(functools.partial(alert, payload) for payload in record.pending_alerts)

    def clear(current: RequestRecord | None) -> RequestRecord | None:
        if current is None:
            return None
        current.pending_alerts = [a for a in current.pending_alerts if a not in published_alerts]
        current.prune_pending = current.prune_pending and not prune_published
        if not current.has_pending_effects:
            current.effects_taken_at = None
        return current

    try:
        run_all(steps)
    finally:
        if published_alerts or prune_published:
            ports.ledger.update(record.request_id, clear)
    if others:
        return f"effects decided for {record.request_id} are being published by another delivery"
    return None


def _alert_key(alert: Mapping[str, Any]) -> str:
    """An alert as stored (JSON: a tuple comes back a list), to tell one decision's from another's."""
    return json.dumps(alert, sort_keys=True, default=str)


def _pending_since(record: RequestRecord) -> datetime:
    """When the youngest pending effect was decided, or last taken over."""
    moments = [parse_iso(alert["time"]) for alert in record.pending_alerts]
    moments += [parse_iso(notice["at"]) for notice in record.pending_notices]
    if record.prune_pending and record.prune_requested_at:
        moments.append(parse_iso(record.prune_requested_at))
    if record.effects_taken_at:
        moments.append(parse_iso(record.effects_taken_at))
    return max(moments, default=datetime.min.replace(tzinfo=UTC))


def _take_over_effects(ports: Ports, record: RequestRecord, now: datetime) -> RequestRecord | None:
    """The record as this delivery took over its pending effects, or None while their decider (or
    an earlier taker) may still publish them. The takeover is a compare-and-swap, so of two
    deliveries that find the decider presumed dead at once, one publishes (Pub/Sub may push one
    message to two instances; both used to publish)."""
    lease = ports.settings.claim_lease_seconds

    def take(current: RequestRecord | None) -> RequestRecord | None:
        if current is None or not current.has_pending_effects:
            return None
        if (now - _pending_since(current)).total_seconds() < lease:
            return None
        current.effects_taken_at = iso(now)
        return current

    if (now - _pending_since(record)).total_seconds() < lease:
        return None  # no write while the decider may be alive
    swapped = ports.ledger.swap(record.request_id, take)
    return swapped.value if swapped.wrote else None


def publish_request_attempt(ports: Ports, record: RequestRecord, attempt: int, location: str) -> str:
    """Publish attempt `attempt` to job-requests (submit's claim absorbs duplicates)."""
    body, attributes = requeue_message(record.request, attempt, location)
    return ports.publish(ports.settings.job_requests_topic, body, **attributes)


def send_cancels(ports: Ports, record: RequestRecord, log: Logger, *, ours: bool, now: datetime) -> str | None:
    """Send the cancels the record holds pending (a deadline switch's, the request's cancel), then confirm each in the
    ledger. The delivery that decided one sends it at once; anyone else once its decider is
    presumed dead. A job already ended or gone needs no cancel. Returns a reason to look again
    when a cancel is left to its decider."""
    from google.api_core import exceptions

    cancel = ports.cancel_job
    for attempt in record.attempts:
        if not attempt.cancel_pending or attempt.job is None or attempt.cancel_decided_at is None:
            continue
        decided_for = (now - parse_iso(attempt.cancel_decided_at)).total_seconds()
        # The request's own cancel is anyone's to send at once: its decider (`spotjobs cancel`)
        # may not call Vertex, and a second cancel of a job is harmless.
        if not ours and record.cancel is None and decided_for < ports.settings.claim_lease_seconds:
            return f"the cancel of attempt {attempt.n} is being sent by another delivery"
        if cancel is None:
            return f"the cancel of attempt {attempt.n} is left to on_job_event and reconcile"
        try:
            cancel(attempt.location, attempt.job)
        except (exceptions.NotFound, exceptions.FailedPrecondition) as exc:
            log.info("no cancel needed: the job ended", event="cancel_not_needed", job=attempt.job, error=str(exc))
        sent_at = iso(now)
        attempt.cancel_sent_at = sent_at

        def confirm(current: RequestRecord | None, n: int = attempt.n, at: str = sent_at) -> RequestRecord | None:
            pending = current.attempt(n) if current else None
            if current is None or pending is None or not pending.cancel_pending:
                return None
            pending.cancel_sent_at = at
            return current

        ports.ledger.update(record.request_id, confirm)
        log.info(
            f"cancelled attempt {attempt.n} of {record.request_id}: {attempt.outcome}",
            event="attempt_cancel_sent",
            request_id=record.request_id,
            attempt=attempt.n,
            job=attempt.job,
            outcome=attempt.outcome,
        )
    return None


def settle_requeue(
    ports: Ports, record: RequestRecord, log: Logger, *, ours: bool, now: datetime
) -> tuple[str | None, str | None]:
    """Publish a decided, unconfirmed re-queue, then confirm it in the ledger.

    Returns (message id if published now, reason to look again if it is left for later). The
    delivery that decided a re-queue (`ours`) publishes it at once (unless delayed). Anyone else publishes
    it only once it is due and its decider is presumed dead (decided longer than the claim lease
    ago), so ten concurrent deliveries of one terminal event publish it once; a delayed re-queue
    is published by reconcile once `not_before` has passed.
    """
    requeue = record.requeue
    if requeue is None or not ports.may_publish(ports.settings.job_requests_topic):
        return None, None
    if requeue.message_id:
        # Published, yet not claimed: if that lasts, the message was lost (dead-lettered after
        # its deliveries ran out). Publish it again; submit's claim absorbs a duplicate.
        published_at = parse_iso(requeue.published_at or requeue.decided_at)
        unclaimed_for = (now - published_at).total_seconds()
        if ours or unclaimed_for < ports.settings.unclaimed_requeue_seconds:
            return None, None
    elif requeue.not_before and parse_iso(requeue.not_before) > now:
        return None, None
    else:
        decided_for = (now - parse_iso(requeue.decided_at)).total_seconds()
        abandoned = decided_for >= ports.settings.claim_lease_seconds
        if not (ours or requeue.not_before or abandoned):
            return None, f"attempt {requeue.attempt} is being re-queued by another delivery"
    message_id = publish_request_attempt(ports, record, requeue.attempt, requeue.location)

    def confirm(current: RequestRecord | None) -> RequestRecord | None:
        pending = current.requeue if current else None
        if pending is None or pending.attempt != requeue.attempt:
            return None  # submit already claimed it
        if pending.message_id != requeue.message_id:
            return None  # another publish was confirmed first
        pending.message_id = message_id
        pending.published_at = iso(now)
        return current

    ports.ledger.update(record.request_id, confirm)
    log.info(
        f"published attempt {requeue.attempt} of {record.request_id} to job-requests",
        event="requeue_published",
        request_id=record.request_id,
        attempt=requeue.attempt,
        location=requeue.location,
        strategy=requeue.strategy,
        published_message_id=message_id,
    )
    return message_id, None
