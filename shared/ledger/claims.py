"""The ledger transitions of an attempt's life before its job runs: claim, record, release, fail.

Each is pure: it takes the current record (a private copy the ledger handed over) and returns the
record to write, or None to write nothing, so `LedgerStore.update` can run it again when
deliveries race. submit_job and reconcile use the same functions: a job found by reconcile is
recorded exactly as submit records one it created, and a request fails the same way whether
Vertex refused its create or it was never created at all. Every alert they decide is written
pending, for the outbox.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from shared.alerts import Alert, AlertKind
from shared.clock import iso, now_iso, parse_iso
from shared.errors import TransientError, Violation
from shared.ledger.cancelling import is_live, settle_cancel
from shared.ledger.records import Attempt, RequestRecord, alert_marker
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.requests.attempts import plan_attempt
from shared.requests.envelope import InvalidJobRequest, is_requeue_of


class ClaimInProgress(TransientError):
    """Another delivery holds a fresh claim on this attempt, a create's outcome is still unknown, or
    this delivery's claim is too old for a create to end inside its lease."""


@dataclass(frozen=True)
class Claim:
    """The result of `claim_attempt`: what to do and the record to write (when kind says so)."""

    kind: str  # "claimed" | "taken_over" | "duplicate" | "cancelled" | "superseded"
    record: RequestRecord
    attempt: Attempt | None

    @property
    def writes(self) -> bool:
        return self.kind not in ("duplicate", "cancelled", "superseded")


def new_kit_key() -> str:
    """A fresh attempt's signing key: 32 random bytes, drawn when the attempt is claimed, so every
    create of that attempt (a retry, a takeover) carries the same one."""
    return secrets.token_hex(32)


def claim_attempt(
    current: RequestRecord | None,
    *,
    envelope: dict[str, Any],
    n: int,
    now: datetime,
    lease_seconds: float,
    output_dir: str,
    requeued: bool = False,
    published_at: datetime | None = None,
) -> Claim:
    """Decide what a delivery of attempt `n` does, from the current record alone.

    Raises ClaimInProgress when another delivery's fresh claim is pending, and InvalidJobRequest
    for an attempt the ledger does not expect (only the system sets `attempt`, on re-queue). A
    message `requeued` (marked as the system's re-queue) is never a new request: the marker is
    anyone's to set, so without a record it would skip the checks only a new request gets.
    `published_at`: when the delivered message was published (None for the line's drainer,
    which delivers none); a copy published a lease or more before the claim's last re-publish is
    superseded (see `superseded`).
    """
    request_id = envelope["request_id"]
    if current is None:
        if n != 1 or requeued:
            raise _unexpected_attempt(request_id, n, "the request has no record")
        location, strategy = plan_attempt(envelope, 1, None, after_stockout=False)
        attempt = Attempt(1, location, strategy, claimed_at=iso(now), kit_key=new_kit_key())
        record = RequestRecord(
            request_id,
            request=envelope,
            output_dir=output_dir,
            status=RequestStatus.CLAIMED,
            attempts=[attempt],
        )
        return Claim("claimed", record, attempt)
    if current.cancel is not None:  # whatever message this is (new, redelivered, a re-queue)
        return Claim("cancelled", current, current.attempt(n) or current.latest)
    existing = current.attempt(n)
    if existing is None:
        if n == 1 or current.is_terminal:
            return Claim("duplicate", current, current.latest)
        requeue = current.requeue
        if requeue is None or requeue.attempt != n:
            expected = f"attempt {requeue.attempt} is queued" if requeue else "no re-queue is pending"
            raise _unexpected_attempt(request_id, n, expected)
        attempt = Attempt(
            n, requeue.location, requeue.strategy, claimed_at=iso(now), machine=requeue.machine, kit_key=new_kit_key()
        )
        current.attempts.append(attempt)
        current.requeue = None
        current.status = RequestStatus.CLAIMED
        return Claim("claimed", current, attempt)
    if existing.job or existing.outcome or current.is_terminal:
        return Claim("duplicate", current, existing)
    if _without_location(envelope) != _without_location(current.request):
        # Another body under this id (a publisher's mistake, or another publisher, with the
        # re-queue marker or without) is a conflict, never a redelivery of this request: it must
        # not take its claim over. The line's own hand-over of attempt 1, and a re-queue of a
        # later attempt, carry the stored body, with the location the attempt was placed in.
        return Claim("duplicate", current, existing)
    if superseded(existing, published_at, lease_seconds):
        return Claim("superseded", current, existing)
    age = (now - parse_iso(existing.claimed_at)).total_seconds()
    if age < lease_seconds:
        raise ClaimInProgress(
            f"attempt {n} of {request_id} was claimed {age:.0f}s ago and has no job yet; "
            f"re-checking after the {lease_seconds:.0f}s lease"
        )
    existing.claimed_at = iso(now)
    return Claim("taken_over", current, existing)


def superseded(attempt: Attempt, published_at: datetime | None, lease_seconds: float) -> bool:
    """Whether a message of a claim that never got a job was published a lease or more before
    reconcile's last re-publish of it: that re-publish carries the claim on, so an earlier copy
    still queued (the first message, an older re-publish, a hand-over) takes nothing over. Each
    such copy would otherwise retry the claim once more per interval, defeating its backoff: with
    a backlog, the copies multiply and their creates fill the pace (seed 1733). The lease spares
    the re-publish itself, whose publish follows its count, from any clock skew between them."""
    if published_at is None or attempt.republished_at is None:
        return False
    return published_at <= parse_iso(attempt.republished_at) - timedelta(seconds=lease_seconds)


def _without_location(envelope: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in envelope.items() if key != "location"}


def record_job(
    current: RequestRecord | None,
    *,
    n: int,
    job_name: str,
    state: str,
    created_at: str | None,
    started_at: str | None = None,
    ended_at: str | None = None,
) -> RequestRecord | None:
    """Record attempt n's job, whoever created or found it (once); None when there is nothing to
    write (no such attempt, or a job already recorded: the caller compares the names). A job of a
    cancelled request (its create was in flight when the cancel landed) is recorded with its
    cancel pending, for the outbox. A job found already running or ended keeps Vertex's times: a
    cancel may settle the request before any decision reads the job again."""
    attempt = current.attempt(n) if current else None
    if current is None or attempt is None or attempt.job is not None:
        return None
    attempt.job = job_name
    attempt.created_at = created_at
    attempt.state = attempt.state or state
    attempt.started_at = attempt.started_at or started_at
    attempt.ended_at = attempt.ended_at or ended_at
    if current.cancel is not None and is_live(attempt):
        attempt.cancel_decided_at = now_iso()
    if current.status == RequestStatus.CLAIMED and current.latest is attempt:
        current.status = RequestStatus.SUBMITTED
    return current


def mark_create_sent(current: RequestRecord | None, *, n: int, claimed_at: str, now: datetime) -> RequestRecord | None:
    """Note that the create of attempt n is being sent now, by the holder of the claim made at
    `claimed_at`; None (write nothing) if the claim was taken over, the job recorded, the attempt
    ended or the request cancelled meanwhile (a cancel ends an attempt that has not sent its
    create, and leaves open one whose earlier holder noted a send: that create may land, no second).
    A delivery that later takes the claim over and finds no job by its labels knows a create may
    be hidden by a lagging list."""
    attempt = current.attempt(n) if current else None
    if current is None or current.cancel is not None or attempt is None or attempt.job is not None or attempt.outcome:
        return None
    if attempt.claimed_at != claimed_at:
        return None
    attempt.create_sent_at = iso(now)
    return current


def release_claim(
    current: RequestRecord | None,
    *,
    n: int,
    claimed_at: str,
    now: datetime,
    lease_seconds: float,
    error: dict[str, Any] | None = None,
) -> RequestRecord | None:
    """Vertex refused the create before doing anything: backdate our claim by one lease so the
    redelivery may take it over at once instead of waiting the lease out, and forget the send
    (nothing was created for a list to lag behind). Only our own claim."""
    attempt = current.attempt(n) if current else None
    if current is None or attempt is None or attempt.job is not None or attempt.claimed_at != claimed_at:
        return None
    attempt.claimed_at = iso(now - timedelta(seconds=lease_seconds))
    attempt.create_sent_at = None
    if error is not None:
        attempt.last_create_error = {**error, "at": iso(now)}  # evidence for reconcile's alert
    return current


def fail_attempt(
    current: RequestRecord | None,
    *,
    n: int,
    error: dict[str, Any],
    now: datetime,
    reason: str,
    **details: Any,
) -> RequestRecord | None:
    """Attempt n will never have a job (Vertex refused it, or it was never created): the request
    FAILED, with one `submit_failed` alert pending. None if the attempt was settled meanwhile."""
    attempt = current.attempt(n) if current else None
    if current is None or attempt is None or attempt.job is not None or attempt.outcome:
        return None
    attempt.outcome = AttemptOutcome.FAILED
    attempt.error = error
    attempt.ended_at = iso(now)
    if settle_cancel(current, now):  # cancelled while its create was on its way: nothing to alert
        return current
    current.status = RequestStatus.FAILED
    current.finished_at = iso(now)
    if current.mark(alert_marker(AlertKind.SUBMIT_FAILED, n)):
        current.pending_alerts.append(
            Alert.of(
                AlertKind.SUBMIT_FAILED,
                f"{current.request_id}: {reason}",
                request_id=current.request_id,
                attempt=n,
                details={"error": error, "location": attempt.location, **details},
                time=iso(now),
            ).to_json()
        )
    return current


def fail_invalid_requeue(
    current: RequestRecord | None, *, n: int, now: datetime, violations: list[str], message_id: str, data: bytes
) -> RequestRecord | None:
    """Re-queued attempt n was rejected by validation (the policy changed since attempt 1): the
    request FAILED, its re-queue dropped so reconcile stops resending it, one alert pending.
    Only for the message the system publishes for that re-queue (`data` is its body): a forged
    one naming the attempt leaves the record alone, and its real re-queue still runs."""
    if current is None or current.is_terminal:
        return None
    requeue = current.requeue
    if requeue is None or requeue.attempt != n or not is_requeue_of(data, current.request, n, requeue.location):
        return None
    current.requeue = None
    current.status = RequestStatus.FAILED
    current.finished_at = iso(now)
    if current.mark(alert_marker(AlertKind.INVALID_REQUEST, n)):
        current.pending_alerts.append(
            invalid_request_alert(current.request_id, n, violations, message_id, now).to_json()
        )
    return current


def invalid_request_alert(
    request_id: str | None, n: int | None, violations: list[str], message_id: str, now: datetime
) -> Alert:
    return Alert.of(
        AlertKind.INVALID_REQUEST,
        f"Job request {request_id or '(unnamed)'} rejected: " + "; ".join(violations),
        request_id=request_id,
        attempt=n,
        details={"violations": violations, "message_id": message_id},
        time=iso(now),
    )


def _unexpected_attempt(request_id: str, n: int, why: str) -> InvalidJobRequest:
    return InvalidJobRequest(
        [
            Violation(
                "attempt",
                f"is {n} but the ledger does not expect it ({why}); attempt is set by the system",
            )
        ],
        request_id=request_id,
        attempt=n,
    )
