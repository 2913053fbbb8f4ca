"""A request's cancel: the intent recorded once, and the request ended once nothing of it runs.

`cancel_request` is the transition `spotjobs cancel` (and `spotjobs.cancel`) hands to
`LedgerStore.swap`: under the record's compare-and-swap it records who asked, when and why
(`RequestRecord.cancel`), drops a decided re-queue, marks the cancel of every job still live
pending for the outbox (`Attempt.cancel_decided_at`, as a deadline switch does), and ends an
attempt that has no job and never sent its create (one that did is settled when its job is
recorded, or by reconcile's lookup after the claim's lease: `end_unsent_claim`). Every path that creates an attempt checks the intent in its own
compare-and-swap (the claim, the create's send, the job's record), so a claim that races the cancel
either lands first and sees its create refused, or reads the intent and claims nothing.

`settle_cancel` ends the request CANCELLED once no job of it is live (at once when none was);
`decide` calls it on every observation, so the end Vertex reports settles it whoever sees it.
A job cancelled at Vertex by hand is the same intent (`vertex_cancel`), with the same guarantees.
"""

from __future__ import annotations

import enum
from datetime import datetime

from shared.clock import iso
from shared.jobs import JobState
from shared.ledger.records import Attempt, CancelIntent, RequestRecord
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.swap import Decided

OPERATOR = "operator"
VERTEX = "vertex"


class CancelResult(enum.StrEnum):
    """What `cancel_request` found."""

    RECORDED = "recorded"  # this call recorded the intent
    ALREADY = "already_cancelled"  # the intent was recorded before (a no-op)
    FINISHED = "finished"  # the request ended before anyone asked (nothing to cancel)
    UNKNOWN = "unknown"  # the ledger holds no such request


def cancel_request(
    current: RequestRecord | None, *, by: str, reason: str | None, now: datetime, source: str = OPERATOR
) -> Decided[RequestRecord]:
    """The record with the cancel recorded (once), and what was found (`CancelResult`)."""
    if current is None:
        return Decided(None, CancelResult.UNKNOWN)
    if current.cancel is not None:
        return Decided(None, CancelResult.ALREADY)
    if current.is_terminal:
        return Decided(None, CancelResult.FINISHED)
    note_intent(current, CancelIntent(by=by, at=iso(now), reason=reason, source=source), now)
    return Decided(current, CancelResult.RECORDED)


def note_intent(record: RequestRecord, intent: CancelIntent, now: datetime) -> None:
    """Record `intent` and act on it in the same write: no next attempt, every live job's cancel
    pending, an attempt without a job ended (its claim can no longer send a create)."""
    record.cancel = intent
    record.requeue = None
    for attempt in record.attempts:
        if attempt.job is not None and is_live(attempt) and attempt.cancel_decided_at is None:
            attempt.cancel_decided_at = iso(now)
        elif not is_live(attempt) and attempt.job is None and attempt.outcome is None:
            attempt.outcome = AttemptOutcome.CANCELLED
            attempt.ended_at = iso(now)
    settle_cancel(record, now)


def is_live(attempt: Attempt) -> bool:
    """Its job is recorded and has not been seen to end, or its create was sent and its job not
    recorded yet (the create may land: submit records it, or reconcile's lookup settles it)."""
    if attempt.job is None:
        return attempt.outcome is None and attempt.create_sent_at is not None
    return attempt.state not in JobState.TERMINAL


def end_unsent_claim(current: RequestRecord | None, *, n: int, claimed_at: str, now: datetime) -> RequestRecord | None:
    """Reconcile found no job for attempt n of a cancelled request after its claim's lease: its
    create never landed. The attempt ends CANCELLED (a job that turns up later is a stray, and
    is cancelled as one). None writes nothing: not cancelled, or settled meanwhile."""
    attempt = current.attempt(n) if current else None
    if current is None or current.cancel is None or attempt is None:
        return None
    if attempt.job is not None or attempt.outcome is not None or attempt.claimed_at != claimed_at:
        return None
    attempt.outcome = AttemptOutcome.CANCELLED
    attempt.ended_at = iso(now)
    settle_cancel(current, now)
    return current


def settle_cancel(record: RequestRecord, now: datetime) -> bool:
    """End a cancelled request CANCELLED once none of its jobs is live; True when this call did."""
    if record.cancel is None or record.is_terminal or any(is_live(a) for a in record.attempts):
        return False
    latest = record.latest
    if latest is not None and latest.outcome is None:
        latest.outcome = AttemptOutcome.CANCELLED
        # A job seen ended (its end's decision waiting) ended when Vertex last updated it, not now.
        ended = latest.state_changed_at if latest.state in JobState.TERMINAL else None
        latest.ended_at = latest.ended_at or ended or iso(now)
    record.status = RequestStatus.CANCELLED
    record.finished_at = iso(now)
    return True


def vertex_cancel(record: RequestRecord, attempt: Attempt, ended_at: str | None, now: datetime) -> None:
    """Attempt's job was cancelled at Vertex and spotjobs never asked: someone meant the request to
    stop. Recorded as a cancel of the request (once), so no path runs it again."""
    if record.cancel is not None or attempt.cancel_decided_at is not None:
        return  # asked by spotjobs: a deadline switch's, or the request's own cancel
    intent = CancelIntent(
        by="Vertex AI (not asked by spotjobs)",
        at=ended_at or iso(now),
        reason=f"the job of attempt {attempt.n} was cancelled at Vertex",
        source=VERTEX,
    )
    note_intent(record, intent, now)
