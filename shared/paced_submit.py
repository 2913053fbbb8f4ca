"""submit_job's side of pacing (shared/pacing.py): when to wait in line, how to wait, and how the
drainer creates a waiting attempt when its turn comes.

The steps of the claim protocol are submit's own (`shared.submit`), passed in as `SubmitSteps`,
so a waiting attempt is created exactly as any other: claimed under compare-and-swap (taken over
from the wait), the create noted before it is sent, recorded after.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared.clock import parse_iso
from shared.deciding.outbox import alert_corrupt_record
from shared.ledger.claims import Claim, ClaimInProgress, release_claim
from shared.ledger.records import Attempt, CorruptRecord, RequestRecord
from shared.log import Logger
from shared.pacing import (
    Pacer,
    Waiting,
    generation_time,
    hold_for_quota,
    is_rate_limited,
    is_resource_quota,
    is_settled,
    pacer_for,
    priority_of,
    waiting_entry,
)
from shared.pacing_drainer import BUSY, IN_DOUBT, QUOTA, SETTLED, TURNED_AWAY, drain
from shared.wiring import Ports

# The result of a delivery (and of the drainer's create) whose attempt waits in line.
WAITING_RESULT = "waiting"


@dataclass(frozen=True)
class SubmitSteps:
    """submit's claim and create, for the drainer: `claim(envelope, n, log, ports)` and
    `ensure_job(record, attempt, taken_over, log, ports, paced=True)` (a SubmitOutcome)."""

    claim: Callable[[dict[str, Any], int, Logger, Ports], Claim]
    ensure_job: Callable[..., Any]


def pacing_on(ports: Ports) -> bool:
    return ports.settings.vertex_creates_per_minute > 0


def waits_for(exc: BaseException, ports: Ports) -> bool:
    """Whether a failed create waits in line: Vertex refused it for the rate, and pacing is on."""
    return pacing_on(ports) and is_rate_limited(exc)


def may_create_now(ports: Ports, location: str) -> bool:
    """Whether an arriving create may go at once: nobody waits in its region (it would pass them)
    and this moment's slot is free (now it is this create's)."""
    if not pacing_on(ports):
        return True
    pacer = pacer_for(ports)
    return not pacer.anyone_waiting(location) and pacer.take_slot(location)


def in_line(ports: Ports, record: RequestRecord, attempt: Attempt) -> bool:
    """Whether attempt `attempt` waits in its region's line (noted in the record, and its entry
    there): reconcile leaves it to the drainer. One that fell out of line, or waits in a line no
    drainer serves any more (pacing turned off), is settled like any stale claim (re-published:
    submit puts it back, or creates it). A cancelled request's never is: the line creates nothing
    for it, and reconcile's lookup settles a create it sent (seed 828)."""
    if not pacing_on(ports) or not attempt.waiting_since or attempt.job or attempt.outcome:
        return False
    if record.cancel is not None:
        return False
    entry = waiting_entry(attempt.location, priority_of(record), record.request_id, attempt.n)
    return pacer_for(ports).has_entry(entry)


def turned_away(ports: Ports, record: RequestRecord, attempt: Attempt) -> bool:
    """Whether a delivery finds attempt `attempt` turned away by the line (the drainer met a
    resource-quota refusal for it, noted as its last create error: it left the line unsettled)
    and not re-published by reconcile since. Such a delivery is a hand-over or a redelivery sent
    before it was turned away: putting it back in line would try it again at the line's pace,
    not reconcile's backoff (two of them would turn each other away every run, for ever)."""
    refused_at = (attempt.last_create_error or {}).get("at")
    if not pacing_on(ports) or not attempt.waiting_since or not refused_at:
        return False
    if attempt.republished_at and parse_iso(attempt.republished_at) >= parse_iso(refused_at):
        return False
    entry = waiting_entry(attempt.location, priority_of(record), record.request_id, attempt.n)
    return not pacer_for(ports).has_entry(entry)


def stay_out_of_line(record: RequestRecord, attempt: Attempt, log: Logger, ports: Ports, steps: SubmitSteps) -> None:
    """A turned-away attempt's delivery (see `turned_away`): hand its claim back, as after the
    refusal, for reconcile to re-publish with backoff, and carry the line on for the others (a
    hand-over's delivery is the line's drainer)."""
    ports.ledger.update(
        record.request_id,
        lambda current: release_claim(
            current,
            n=attempt.n,
            claimed_at=attempt.claimed_at,
            now=ports.clock(),
            lease_seconds=ports.settings.claim_lease_seconds,
        ),
    )
    log.info(
        "this attempt was turned away for a resource quota; it waits for reconcile's re-publish",
        event="quota_turned_away",
        location=attempt.location,
        last_create_error=attempt.last_create_error,
    )
    drain_line(attempt.location, log, ports, steps)


def left_to_reconcile(exc: BaseException, *, paced: bool) -> bool:
    """Whether a create Vertex refused for now is acknowledged, its claim released, for reconcile's
    re-publish with backoff rather than redelivered: a resource quota (GPUs, CPUs) is not a rate,
    so redeliveries seconds apart meet it still spent, and five per re-publish of hundreds of such
    requests crowd every other request's message out of submit_job's subscription (simulator seed
    1887). The line's drainer (`paced`) judges its own refusals (`TURNED_AWAY`)."""
    return not paced and is_resource_quota(exc)


def leave_line_unlooked(record: RequestRecord, attempt: Attempt, log: Logger, ports: Ports) -> None:
    """A waiting attempt whose job cannot be looked up for good (its create was sent, its claim
    taken over, the look-up refused: a permission, a region) leaves the line: every hand-over would
    go to it and meet the same refusal, and the attempts behind it would wait for good (seed 1617).
    Out of line, reconcile settles its claim as any stale one: it looks it up every pass, and
    re-publishes it (back in line) only once the look-up finds no job. Its entry decides, not its
    record: a delivery that died between writing the entry and noting the wait left one whose
    record never said it waited (seed 1874)."""
    if not pacing_on(ports):
        return
    pacer = pacer_for(ports)
    entry = waiting_entry(attempt.location, priority_of(record), record.request_id, attempt.n)
    if not pacer.has_entry(entry):  # out of line already (reconcile's look-ups are of such claims)
        return
    pacer.remove(entry)
    log.warning(
        "this attempt's job cannot be looked up; it left the line, and reconcile looks it up again",
        event="quota_left_unlooked",
        location=attempt.location,
    )


def never_sent(attempt: Attempt) -> bool:
    """A waiting attempt whose claim sent no create since it last waited: a takeover of it needs
    no lookup by labels (nothing can exist for it)."""
    return bool(attempt.waiting_since) and not attempt.create_sent_at


def wait_in_line(
    record: RequestRecord, attempt: Attempt, log: Logger, ports: Ports, steps: SubmitSteps, *, paced: bool
) -> bool:
    """Put attempt `attempt` in its region's line (the entry first, then the record: a crash in
    between leaves an entry whose claim a redelivery takes over), then, unless the drainer itself
    is calling, try to drain the line from this delivery. True when it already waited: this
    delivery (a duplicate, a redelivery, a hand-over) only handed its claim back."""
    already = bool(attempt.waiting_since)
    pacer = pacer_for(ports)
    entry = waiting_entry(attempt.location, priority_of(record), record.request_id, attempt.n)
    since = generation_time(pacer.enqueue(entry))
    stored = ports.ledger.update(
        record.request_id,
        lambda current: hold_for_quota(
            current,
            n=attempt.n,
            claimed_at=attempt.claimed_at,
            now=ports.clock(),
            lease_seconds=ports.settings.claim_lease_seconds,
            waiting_since=since,
        ),
    )
    held = stored.attempt(attempt.n) if stored else None
    log.info(
        "duplicate delivery: this attempt already waits in line; nothing created"
        if already and not paced
        else "waiting in line for Vertex AI's submission quota",
        event="duplicate" if already and not paced else "quota_wait",
        location=attempt.location,
        priority=priority_of(record),
        waiting_since=held.waiting_since if held else since,
    )
    if not paced:
        drain_line(attempt.location, log, ports, steps, pacer)
    return already


def drain_line(location: str, log: Logger, ports: Ports, steps: SubmitSteps, pacer: Pacer | None = None) -> None:
    drain(ports, location, lambda entry: create_waiting(entry, log, ports, steps), log, pacer or pacer_for(ports))


def create_waiting(entry: Waiting, log: Logger, ports: Ports, steps: SubmitSteps) -> str:
    """The drainer's create of one waiting attempt: SETTLED (created, found, or nothing left to
    create), QUOTA (Vertex still refused it for the rate), TURNED_AWAY (refused for a resource
    quota: it leaves the line), IN_DOUBT (a create of it is in flight or of unknown outcome) or
    BUSY (a delivery holds a fresh claim on it, or the create failed for now). Never raises: one
    entry must not stop the drain."""
    log = log.bind(request_id=entry.request_id, attempt=entry.attempt)
    lease_bound = False  # whether a ClaimInProgress can only clear once a claim lease ran out
    try:
        record = ports.ledger.get(entry.request_id)
        if is_settled(record, entry.attempt):
            return SETTLED
        assert record is not None  # not settled
        # A create may be out (a claim handed back to the line has none noted).
        lease_bound = bool(record.attempt(entry.attempt).create_sent_at)
        claim = steps.claim(record.request, entry.attempt, log, ports)
        if not claim.writes or claim.attempt is None:  # handled before, or the request cancelled
            return SETTLED
        waited_for = _seconds_since(ports, claim.attempt.waiting_since)
        lease_bound = True  # the claim is ours now: its own create (or lookup) is in doubt
        outcome = steps.ensure_job(claim.record, claim.attempt, claim.kind == "taken_over", log, ports, paced=True)
    except ClaimInProgress:
        return IN_DOUBT if lease_bound else BUSY
    except CorruptRecord as exc:
        # Nothing can be decided on it: alerted once, out of line; once repaired, reconcile finds it
        # waiting with no entry and re-publishes it, which puts it back in line.
        alert_corrupt_record(ports, exc, log)
        return SETTLED
    except Exception as exc:  # noqa: BLE001 - one entry must not stop the drain
        if is_resource_quota(exc):  # its claim was released with the error: reconcile's to re-publish
            log.warning(
                "Vertex refused a waiting attempt for a resource quota; it leaves the line and is "
                "re-published with backoff",
                event="quota_resource_refused",
                error=f"{type(exc).__name__}: {exc}",
            )
            return TURNED_AWAY
        log.warning(
            "could not create a waiting attempt; it keeps its place in line",
            event="quota_create_failed",
            error=f"{type(exc).__name__}: {exc}",
        )
        return BUSY
    if outcome.result == WAITING_RESULT:
        return QUOTA
    log.info("created a waiting attempt in its turn", event="quota_turn", waited_seconds=waited_for)
    return SETTLED


def _seconds_since(ports: Ports, moment: str | None) -> float | None:
    return round((ports.clock() - parse_iso(moment)).total_seconds(), 1) if moment else None
