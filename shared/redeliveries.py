"""What a delivery does besides creating a job: an attempt already handled (publish what its
handling left pending), the same request id with another body (tell the publisher), a replay whose
ledger document was lost (look before claiming), an id only the system derives (refuse it), an
invalid request (acknowledge and alert).

Split from shared/submit.py, which runs these from `submit_request`; every alert goes through the
outbox (docs/ARCHITECTURE.md, "The outbox").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.adapters.vertex import find_jobs, parent_path, request_labels
from shared.alerts import Alert, AlertKind
from shared.clock import iso, parse_iso, parse_rfc3339, within_publish_range
from shared.deciding.notices import telling_changes
from shared.deciding.outbox import Mine, alerts_of, decide_alert, decided_alert, flush, publish_alert
from shared.delivery import Message
from shared.errors import TransientError, Violation
from shared.jobs import RESERVED_ID_PREFIXES, TRIGGER_ID_PREFIX, created_before, is_terminal, kit_key_of
from shared.ledger.claims import fail_invalid_requeue, invalid_request_alert
from shared.ledger.records import RequestRecord, alert_marker
from shared.ledger.run_lock import ledger_bucket
from shared.ledger.store import INDEX_GRACE_SECONDS
from shared.log import Logger
from shared.requests.envelope import ORIGINAL_PUBLISH_TIME_ATTRIBUTE, InvalidJobRequest, JobRequest
from shared.swap import Swapped
from shared.triggers.publishing import published_by_window
from shared.triggers.store import TriggerStore
from shared.wiring import Ports

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import CustomJob


def publish_what_is_pending(
    record: RequestRecord | None,
    log: Logger,
    ports: Ports,
    *,
    mine: Mine = Mine.NONE,
    own_alerts: list[dict[str, Any]] | None = None,
) -> None:
    """Acknowledge an attempt already handled, once what its handling left pending is sent: an
    alert whose first publish failed goes out on this redelivery (or, later, by reconcile).
    `mine`, `own_alerts`: what this call's own write decided (`flush`)."""
    if record is not None and record.has_pending_effects:
        _, waiting = flush(ports, record, log, mine=mine, own_alerts=own_alerts)
        if waiting:
            raise TransientError(waiting)


# Distinct other bodies alerted per request id: each is a marker and an alert in that request's
# ledger document, and whoever publishes under a taken id must not grow it without end.
MAX_CONFLICT_ALERTS = 5


def record_conflict(
    record: RequestRecord, envelope: dict[str, Any], ports: Ports, log: Logger
) -> Swapped[RequestRecord]:
    """The same request id published with another body: the first is kept, and the publisher is
    told once per distinct body (an alert naming both bodies' digests), through the outbox, up to
    MAX_CONFLICT_ALERTS bodies; any further one is only logged.
    Returns the alert's compare-and-swap (`wrote`: this delivery decided it)."""
    kept, refused = body_digest(record.request), body_digest(envelope)
    now = ports.clock()
    prefix = alert_marker(AlertKind.REQUEST_ID_CONFLICT, 1, "")

    def conflict_alert(current: RequestRecord) -> Alert | None:
        if current.count_marks(prefix) >= MAX_CONFLICT_ALERTS:
            log.warning(
                "a request id published again with yet another body: logged, not alerted",
                event="request_id_conflict_not_alerted",
                refused_digest=refused,
                alerted_bodies=MAX_CONFLICT_ALERTS,
            )
            return None
        return Alert.of(
            AlertKind.REQUEST_ID_CONFLICT,
            (
                f"request {current.request_id} was published again with a different body "
                f"(digest {refused}); the first (digest {kept}) is kept and nothing was "
                "created for the second: publish it under a new request id"
            ),
            request_id=current.request_id,
            details={"kept_digest": kept, "refused_digest": refused},
            time=iso(now),
        )

    marker = alert_marker(AlertKind.REQUEST_ID_CONFLICT, 1, refused)
    return decide_alert(ports, record.request_id, marker, conflict_alert)


def body_digest(envelope: dict[str, Any]) -> str:
    """A short digest of a canonical request body, to name it in an alert."""
    canonical = json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()[:16]


def refuse_reserved_id(request: JobRequest, data: bytes, ports: Ports) -> None:
    """Raise InvalidJobRequest for a request its publisher named with a prefix spotjobs derives ids
    with: computed in advance, it would claim a trigger window's (or a bare body's) id first, and
    the system's own request would be a duplicate that never runs. A re-queue is the ledger's to
    confirm (claim_attempt); a trigger window's request is the one its window document names."""
    request_id = request.request_id
    if request.attempt is not None or request.content_digest is not None or request_id is None:
        return  # a re-queue, or a bare body the system named
    if not request_id.startswith(RESERVED_ID_PREFIXES):
        return
    if request_id.startswith(TRIGGER_ID_PREFIX) and request.shape == "envelope":
        store = TriggerStore(ledger_bucket(ports.ledger))
        if published_by_window(store, request_id, json.loads(data)):
            return
    path = "request_id" if request.shape == "envelope" else "attributes.request_id"
    raise InvalidJobRequest(
        [
            Violation(
                path,
                f"is {request_id!r}; ids starting with {' or '.join(map(repr, RESERVED_ID_PREFIXES))} are "
                "reserved for the ids spotjobs derives (bare bodies, trigger windows): choose another",
            )
        ],
        request_id=request_id,
    )


def _age_since_first_publish(message: Message, now: datetime) -> float | None:
    """Seconds since `message` was first published: the time a redrive carries
    (`spotjobs_original_publish_time`) when it lies within the range a publisher's time may have
    (shared.clock) and before the message's own publish time, else that publish time."""
    published = message.publish_time
    if published is None:
        return None
    first = parse_rfc3339(message.attributes.get(ORIGINAL_PUBLISH_TIME_ATTRIBUTE))
    if first is not None and within_publish_range(first, published):
        published = min(first, published)
    return (now - published).total_seconds()


class DeletedRecordsJobLive(TransientError):
    """A message of an id whose record a person deleted while its job still lives (seed 10182):
    claimed now, the id would have two live jobs, training and billing into one checkpoint folder.
    Nothing will manage that job (the stray sweep cancels it); submit cancels it at once, and the
    message is redelivered until it has ended, then claims the id afresh."""

    def __init__(self, request_id: str, jobs: list[CustomJob]) -> None:
        names = ", ".join(job.name for job in jobs)
        super().__init__(f"request {request_id} waits for the job(s) of its deleted record to end: {names}")
        self.request_id = request_id
        self.jobs = jobs


def _named_locations(named: list[str]) -> list[str]:
    return named


def replayed_without_a_record(
    message: Message,
    envelope: dict[str, Any],
    log: Logger,
    ports: Ports,
    *,
    where: Callable[[list[str]], Iterable[str]] = _named_locations,
) -> bool:
    """A message whose request has no ledger document, though one may have been kept: if the
    document was lost (deleted by an operator or a lifecycle rule), jobs with the request's labels
    exist, and claiming afresh would start another. Look them up first; if any, create nothing and
    say so once per message.

    A message old enough to be a replay (a topic seek, a republish after an outage) is looked up
    whenever its request has no document; a redriven message counts from its first publish (seed
    1771: a redrive an hour after a person deleted the record created a second job). A fresher one
    only when the request's active marker is there (one read): every claim writes it before its
    record, and it is removed no sooner than `INDEX_GRACE_SECONDS` after, so without it no claim,
    and no create, came since the message was first published (seed 5085: a person deleted the
    record a minute after the publish, and a redelivery created a second job). Only jobs created
    since the first publish count, whatever the message's age: an earlier one is no claim's of this
    message but an earlier record's of the id (seed 3667), as is a later one carrying an earlier
    one's kit key, a person's console re-run of it (seed 10268); one still live raises
    `DeletedRecordsJobLive`: claimed now, the id would have two live jobs (seed 10182). A message
    that outlived a lease, or its deliveries and then came back redriven, while that job took its
    time to end, waits for it the same way and then claims the id afresh (seed 10182's gap).

    `where`: the locations to look in, given the message's own; submit's are every one the stray
    sweep lists, since the deleted record's job ran where that record's body said, which another
    body of the id need not name (seed 10267)."""
    age = _age_since_first_publish(message, ports.clock())
    if age is None:
        return False
    request_id = envelope["request_id"]
    fresh = age < min(ports.settings.claim_lease_seconds, INDEX_GRACE_SECONDS)
    if fresh and ports.ledger.active_entry(request_id) is None:
        return False  # never claimed since its first publish: no record means no job
    if ports.ledger.get(request_id) is not None:
        return False
    labels = request_labels(request_id, ports.settings.deployment_label)
    first_published = iso(ports.clock() - timedelta(seconds=age))
    found: list[str] = []
    earlier_live: list[CustomJob] = []  # a deleted record's jobs, not ended
    for location in where(envelope.get("locations") or [envelope["location"]]):
        parent = parent_path(ports.settings.project, location)
        jobs = find_jobs(
            ports.job_service(location), parent, labels, timeout=ports.settings.vertex_call_timeout_seconds
        )
        earlier_keys = {kit_key_of(job) for job in jobs if created_before(job, first_published)} - {None}
        for job in jobs:
            if not created_before(job, first_published) and kit_key_of(job) not in earlier_keys:
                found.append(job.name)
            elif not is_terminal(job.state):  # an earlier record's job, or a person's copy of it (seed 10268)
                earlier_live.append(job)
    if not found or ports.ledger.get(request_id) is not None:
        if earlier_live:
            raise DeletedRecordsJobLive(request_id, earlier_live)
        return False  # a concurrent delivery's claim, not a lost record: the claim settles it
    log.error(
        "a replayed request has jobs but no ledger document; nothing created",
        event="ledger_missing",
        jobs=found,
    )
    alert_once(  # Pub/Sub may deliver the message again after its ack (seed 3179)
        ports,
        Alert.of(
            AlertKind.LEDGER_MISSING,
            (
                f"request {request_id} was delivered again ({age:.0f} s after it was published) "
                f"and has {len(found)} job(s) but no ledger document: nothing was created; "
                "restore the document or resubmit under a new request id"
            ),
            request_id=request_id,
            details={"jobs": found, "message_id": message.message_id},
            time=iso(ports.clock()),
        ),
        f"{LEDGER_MISSING_NOTES}{message.message_id}",
    )
    return True


# Notes of the messages whose rejection was alerted (a lifecycle rule removes them once Pub/Sub can
# no longer deliver the message: 31 days at most), and of the record-less strays alerted
# (`shared.found_jobs`: the same rule lets a job whose cancel failed for a month be alerted again).
REJECTION_NOTES = "rejections/"
# The note that a replayed message's `ledger_missing` is out (`alert_once`), one per message.
LEDGER_MISSING_NOTES = f"{REJECTION_NOTES}ledger-missing-"


def alert_rejection_once(ports: Ports, alert: Alert) -> None:
    """Publish a rejection's alert once per message, however often Pub/Sub delivers it, even to two
    instances at once (`alert_once`, a note per message id)."""
    message_id = alert.details.get("message_id")
    if not message_id:
        publish_alert(ports, alert)
        return
    alert_once(ports, alert, f"{REJECTION_NOTES}{message_id}")


def alert_once(ports: Ports, alert: Alert, note_name: str) -> None:
    """Publish an alert no record holds once per `note_name`. The note is created once
    (`if_generation_match=0`) as a claim before the publish, marked sent after it. A caller that
    finds a fresh claim of another gets a TransientError (to be retried) until it is sent or its
    holder is presumed dead (older than the claim lease), then takes it over at its generation; a
    crash between the publish and the mark repeats the alert once, never loses it."""
    note = ledger_bucket(ports.ledger).blob(note_name)
    generation = _claim_rejection_note(note, ports)
    if generation is None:
        return  # sent by an earlier delivery
    try:
        publish_alert(ports, alert)
    except Exception:
        _release(note, generation)  # the redelivery claims it at once, not after the lease
        raise
    note.upload_from_string(json.dumps({"sent": True}), content_type="application/json", if_generation_match=generation)


def _release(note: Any, generation: int) -> None:
    from google.api_core.exceptions import GoogleAPICallError

    try:
        note.delete(if_generation_match=generation)
    except GoogleAPICallError:
        pass  # then the claim lapses after the lease


def _claim_rejection_note(note: Any, ports: Ports) -> int | None:
    """The generation of this delivery's claim on `note`, or None when its alert was sent."""
    from google.api_core.exceptions import NotFound, PreconditionFailed

    claim = json.dumps({"sent": False, "claimed_at": iso(ports.clock())})
    try:
        note.upload_from_string(claim, content_type="application/json", if_generation_match=0)
        return int(note.generation)
    except PreconditionFailed:
        pass
    try:
        data = note.download_as_bytes()
    except NotFound:  # removed since (its lifecycle rule): the claim starts again on redelivery
        raise TransientError(f"the rejection note of message {note.name} vanished while read") from None
    seen = _rejection_note(data)
    if seen.get("sent") is True:
        return None
    claimed_at = seen.get("claimed_at")
    held_for = (ports.clock() - parse_iso(claimed_at)).total_seconds() if isinstance(claimed_at, str) else None
    if held_for is not None and held_for < ports.settings.claim_lease_seconds:
        raise TransientError(f"another delivery is alerting the rejection of {note.name}")
    try:  # its holder is presumed dead (or the note cannot be read): take it over
        note.upload_from_string(claim, content_type="application/json", if_generation_match=int(note.generation))
    except PreconditionFailed:
        raise TransientError(f"another delivery took over the rejection note {note.name}") from None
    return int(note.generation)


def _rejection_note(data: bytes) -> dict[str, Any]:
    """A note's state; an older version's empty note meant sent, one of another shape is taken over."""
    if not data:
        return {"sent": True}
    try:
        parsed = json.loads(data)
    except ValueError:
        return {"sent": False}
    return parsed if isinstance(parsed, dict) else {"sent": False}


def reject(exc: InvalidJobRequest, message: Message, log: Logger, ports: Ports) -> None:
    """Acknowledge an invalid request with one ERROR line and one `invalid_request` alert; a
    rejected re-queue the ledger holds also fails its request (else reconcile would resend it,
    forever); a forged one leaves the record alone."""
    violations = [str(v) for v in exc.violations]
    log.error(
        "rejected an invalid job request",
        event="invalid_request",
        request_id=exc.request_id,
        attempt=exc.attempt,
        violations=violations,
    )
    request_id, n = exc.request_id, exc.attempt
    if request_id is None or n is None or n == 1:
        alert_rejection_once(ports, invalid_request_alert(request_id, n, violations, message.message_id, ports.clock()))
        return
    # A rejected re-queue fails its request (else reconcile would resend it, to be rejected
    # again, forever), with its alert pending in the record.
    swapped = ports.ledger.swap(
        request_id,
        telling_changes(
            lambda current: fail_invalid_requeue(
                current,
                n=n,
                now=ports.clock(),
                violations=violations,
                message_id=message.message_id,
                data=message.data,
            ),
            ports.clock,
        ),
    )
    stored = swapped.value
    if not swapped.wrote and (stored is None or alert_marker(AlertKind.INVALID_REQUEST, n) not in stored.markers):
        # Not a re-queue the ledger holds (a publisher set `attempt`, or forged the marker on a
        # body that is not the pending re-queue's): nothing to fail, alert now.
        alert_rejection_once(ports, invalid_request_alert(request_id, n, violations, message.message_id, ports.clock()))
    elif stored is not None and stored.has_pending_effects:
        own = alerts_of(stored, AlertKind.INVALID_REQUEST, n)
        _, waiting = flush(ports, stored, log, mine=Mine.written(swapped), own_alerts=own)
        if waiting:
            raise TransientError(waiting)


def settle_taken_id(
    record: RequestRecord, envelope: dict[str, Any], request: JobRequest, log: Logger, ports: Ports
) -> None:
    """A message whose id is taken creates nothing: send what the record has pending, and tell
    of another body published under the id (`request_id_conflict`), whatever became of the
    request, cancelled ones included (a second body was dropped unheard: simulator seed 257)."""
    if record.request != envelope and request.attempt is None:
        conflict = record_conflict(record, envelope, ports, log)
        publish_what_is_pending(
            conflict.value or record, log, ports, mine=Mine.written(conflict), own_alerts=decided_alert(conflict)
        )
    else:
        publish_what_is_pending(record, log, ports)
