"""The create's place in the claim's lease (shared/submit.py sends it).

A claim holder may send its create only while the create, its timeout and a margin, still ends
inside the lease: past it a redelivery may take the claim over, find no job yet and create a
second. The send is recorded in the ledger before it happens (so a lagging job list that hides it
is waited out, not answered with a second create), and the timeout is what is left of the lease.
See docs/ARCHITECTURE.md, "Exactly once, and what breaks it".
"""

from __future__ import annotations

from shared.clock import parse_iso
from shared.ledger.claims import ClaimInProgress, mark_create_sent
from shared.ledger.records import Attempt, RequestRecord
from shared.log import Logger
from shared.settings import CREATE_MARGIN_FRACTION
from shared.wiring import Ports


def wait_for_the_list(attempt: Attempt, log: Logger, ports: Ports) -> None:
    """A create sent by an earlier holder of the claim may be missing from a list that lags it:
    raise ClaimInProgress until `list_lag_seconds` after that send, then create."""
    if not attempt.create_sent_at:
        return
    since = (ports.clock() - parse_iso(attempt.create_sent_at)).total_seconds()
    if since >= ports.settings.list_lag_seconds:
        return
    log.info(
        "no job found yet for a create sent moments ago; waiting for the list to catch up",
        event="list_lag_wait",
        create_sent_at=attempt.create_sent_at,
        list_lag_seconds=ports.settings.list_lag_seconds,
    )
    raise ClaimInProgress(f"attempt {attempt.n}'s create was sent {since:.0f}s ago; the list may not show it yet")


def note_create_sent(record: RequestRecord, attempt: Attempt, log: Logger, ports: Ports) -> None:
    """Record the send before it happens; refuse to send if the claim is no longer ours."""
    stored = ports.ledger.update(
        record.request_id,
        lambda current: mark_create_sent(current, n=attempt.n, claimed_at=attempt.claimed_at, now=ports.clock()),
    )
    ours = stored.attempt(attempt.n) if stored else None
    if stored is not None and stored.cancel is not None:
        log.warning("the request was cancelled before the create; not sending it", event="claim_lost")
        raise ClaimInProgress(f"{record.request_id} was cancelled before attempt {attempt.n}'s create")
    if ours is None or ours.claimed_at != attempt.claimed_at or ours.job is not None or ours.outcome is not None:
        log.warning("the claim changed hands before the create; not sending it", event="claim_lost")
        raise ClaimInProgress(f"attempt {attempt.n} of {record.request_id} is no longer ours")


def create_timeout(attempt: Attempt, log: Logger, ports: Ports) -> float:
    """The create's timeout, from what is left of the claim's lease at the moment of the call:
    the create must end (margin included) before the lease does, or a redelivery could take the
    claim over, find no job yet and create a second one. Raises ClaimInProgress when the claim is
    too old to send a create at all (slow ledger writes, a cold client or the takeover lookup
    can eat the lease)."""
    settings = ports.settings
    held_for = (ports.clock() - parse_iso(attempt.claimed_at)).total_seconds()
    if held_for < settings.create_deadline_seconds:
        margin = settings.create_timeout_seconds * CREATE_MARGIN_FRACTION
        return min(settings.create_timeout_seconds, settings.claim_lease_seconds - held_for - margin)
    log.warning(
        "the claim is too old to create within its lease; a redelivery takes it over",
        event="claim_expiring",
        held_seconds=round(held_for, 1),
        deadline_seconds=settings.create_deadline_seconds,
    )
    raise ClaimInProgress(
        f"attempt {attempt.n} was claimed {held_for:.0f}s ago; a create must be sent within "
        f"{settings.create_deadline_seconds:.0f}s of the claim to end inside its lease"
    )
