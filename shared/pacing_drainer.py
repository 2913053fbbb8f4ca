"""The drainer's run over the line of creates waiting for Vertex AI's submission quota, on the
objects `shared.pacing` lays out under `pacing/` (docs/ARCHITECTURE.md, "Pacing creates to the
quota").

One delivery at a time holds a region's drainer lease and, for its run (`drainer_run_seconds`), takes each
slot, lists the whole line after the slot is ours and creates its head through the claim
protocol (`drain`; submit's create is `shared.paced_submit`'s); on leaving it releases the lease,
lists the line again and publishes the message of the first attempt still waiting, whose delivery
carries the line on (`hand_over`). In that order no entry committed before a create was chosen is
passed by one committed after it, and no one waits without a drainer: a line whose drainer
crashed, or whose hand-over was lost, is handed over again by reconcile once its lease ran out
(`restart_stalled`). The first run that finds a line longer than `quota_alert_after_seconds` to
drain sends the burst's one `quota_limited` alert.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shared.alerts import Alert, AlertKind
from shared.log import Logger
from shared.pacing import Pacer, Waiting, is_settled, pacer_for

if TYPE_CHECKING:
    from shared.settings import Settings
    from shared.wiring import Ports

# Slots a busy head is waited for before the drainer passes it for the rest of its run; at a slow
# pace at most all of a run's slots but one (`busy_patience`).
BUSY_PATIENCE = 5
# How often a drainer renews its lease (GCS sustains about one write a second to one object).
RENEW_EVERY_SECONDS = 10.0
# What a drainer's attempt to create one waiting entry came to.
SETTLED = "settled"  # created, found, or nothing left to create: the entry goes
QUOTA = "quota"  # Vertex refused it for the rate anyway: it keeps its place
BUSY = "busy"  # another delivery holds a fresh claim on it, or the create failed for now
# A create of it is in flight or of unknown outcome: its claim is held for a lease (minutes), so
# waiting a few slots cannot help; it is passed at once for the rest of the run.
IN_DOUBT = "in_doubt"
# Vertex refused it for a resource quota (GPUs, CPUs): not a rate, so the line cannot help; it
# leaves the line, its claim released, and reconcile re-publishes it with backoff like any claim
# Vertex turns away for now (`claim_stalled` once), so it never holds back the others behind it.
TURNED_AWAY = "turned_away"


@dataclass(frozen=True)
class Drained:
    held: bool  # whether this call held the lease
    created: int = 0  # entries settled (created or found settled)
    rate_limited: int = 0  # creates Vertex still refused for the rate
    handed_over: str | None = None  # the request whose message carries the drain on


def drain(ports: Ports, location: str, create_one: Callable[[Waiting], str], log: Logger, pacer: Pacer) -> Drained:
    """Create waiting attempts in turn, one per slot, while this delivery holds the drainer lease
    and its run lasts; then hand over to the head of what is left. Once it holds the lease it never
    raises: whatever failed, the lease is released and the line handed over (or left to
    reconcile's restart), since a redelivery of this message may find its own attempt settled and
    carry nothing on."""
    lease = pacer.acquire(location)
    if lease is None:
        return Drained(held=False)
    settled = rate_limited = 0
    passed: set[str] = set()  # heads that stayed busy or are in doubt: passed for the rest of this run
    busy_turns = 0
    patience = busy_patience(pacer, ports.settings)
    burst_seen = False  # looked at once a run, not every slot (one object, ~1 write/s)
    # From the delivery's start, not the lease's: what the delivery did before (its own claim and
    # entry) is spent of the function's timeout too, and the run's tail needs the room left.
    begun = pacer.now() if ports.started_at is None else min(pacer.now(), ports.started_at)
    deadline = begun + drainer_run_seconds(ports.settings)
    renewed_at = pacer.now()
    try:
        while lease is not None and pacer.wait_for_slot(location, deadline):
            # The whole line, listed after the slot is ours: whoever is first now goes.
            line = pacer.waiting(location)
            entries = [entry for entry in line if entry.key not in passed]
            if not entries:
                break  # the hand-over below ends the burst of an empty line
            if not burst_seen and len(line) * pacer.slot_seconds > ports.settings.quota_alert_after_seconds:
                burst_seen = True
                _alert_quota_limited(ports, pacer, location, len(line), log)
            if pacer.now() > deadline:
                break  # the listing was slow: a create begun now could outlast the delivery
            head = entries[0]
            outcome = create_one(head)
            if outcome in (SETTLED, TURNED_AWAY):
                # A failed delete leaves it first in line: the next slot finds it settled again.
                left = _leave_line(pacer, head, log)
                settled += int(left and outcome == SETTLED)
            elif outcome == QUOTA:
                rate_limited += 1  # it keeps its place: the next slot tries it again
            # BUSY: the delivery that just put it in line is about to hand its claim over, or the
            # create failed for now: the line waits for it, and passes it only after a while.
            busy_turns = busy_turns + 1 if outcome == BUSY else 0
            if busy_turns >= patience or outcome == IN_DOUBT:
                passed.add(head.key)
                busy_turns = 0
            if pacer.now() - renewed_at >= RENEW_EVERY_SECONDS:  # not every slot: one object, ~1 write/s
                lease, renewed_at = pacer.renew(location, lease), pacer.now()
    except Exception as exc:  # noqa: BLE001 - the run ends; the hand-over (or reconcile) carries the line on
        log.warning("the drainer's run ended early", event="quota_drain_failed", error=f"{type(exc).__name__}: {exc}")
    finally:
        if lease is not None:
            _release(pacer, location, lease, log)
    # Anyone left, passed heads included: the next run waits for them again (a busy head is a
    # fresh claim or a create failing for now; a corrupt record leaves the line, see paced_submit).
    handed_over = _hand_over_or_leave_to_reconcile(ports, pacer, location, log, passed)
    log.info(
        "drained the line of creates waiting for the quota",
        event="quota_drain",
        location=location,
        created=settled,
        rate_limited=rate_limited,
        handed_over_to=handed_over,
    )
    return Drained(True, settled, rate_limited, handed_over)


def drainer_run_seconds(settings: Settings) -> float:
    """How long after its delivery began a drainer may still begin a create: `pacer_run_seconds`,
    but no later than its create timeout before submit_job's function timeout. The calls around the
    create itself (the claim before it, the adoption after it) and the hand-over that ends the run
    are given that time too: with slow calls a create begun 34 s into a 60 s delivery took 25 s,
    its hand-over 5 s more, and the function's timeout killed it (seed 12243). A hang's wait is not
    covered: it excuses a push delivery (`sim.durations`)."""
    return min(settings.pacer_run_seconds, settings.submit_timeout_seconds - settings.create_timeout_seconds)


def busy_patience(pacer: Pacer, settings: Settings) -> int:
    """Slots a busy head is waited for: `BUSY_PATIENCE`, but at most all of the slots a run is
    sure to have but one (a run of R seconds takes at least R // slot of them). Busy turns are
    counted within a run, and the hand-over goes to a head not passed: a head waited for every
    slot of each run (6 creates a minute, runs of 30 s: 3 slots) would be handed the line again and
    again, and the requests behind it wait for as long as it stays busy."""
    sure = int(drainer_run_seconds(settings) // pacer.slot_seconds)
    return max(1, min(BUSY_PATIENCE, sure - 1))


def _leave_line(pacer: Pacer, entry: Waiting, log: Logger) -> bool:
    try:
        pacer.remove(entry)
    except Exception as exc:  # noqa: BLE001 - it stays first in line, settled: whoever sees it next removes it
        log.warning(
            "could not remove a settled entry from the line; it is removed when next seen",
            event="quota_leave_failed",
            request_id=entry.request_id,
            attempt=entry.attempt,
            error=f"{type(exc).__name__}: {exc}",
        )
        return False
    return True


def _release(pacer: Pacer, location: str, lease: int, log: Logger) -> None:
    try:
        pacer.release(location, lease)
    except Exception as exc:  # noqa: BLE001 - the lease expires; reconcile restarts the line then
        log.warning("could not release the drainer lease", event="quota_release_failed", error=str(exc))


def _hand_over_or_leave_to_reconcile(
    ports: Ports, pacer: Pacer, location: str, log: Logger, passed: Collection[str]
) -> str | None:
    try:
        return hand_over(ports, pacer, location, log, passed)
    except Exception as exc:  # noqa: BLE001 - reconcile restarts a stalled line
        log.warning(
            "could not hand the waiting line over; reconcile restarts it",
            event="quota_handover_failed",
            location=location,
            error=f"{type(exc).__name__}: {exc}",
        )
        return None


def hand_over(
    ports: Ports,
    pacer: Pacer,
    location: str,
    log: Logger,
    passed: Collection[str] = (),
    *,
    read_refused: Callable[[], bool] = lambda: False,
) -> str | None:
    """If anyone still waits, publish the message of the first attempt in line that needs a create
    (one this run did not pass first: a passed one may be held by a fresh claim, whose delivery
    would be redelivered, not drain): its delivery drains on. Settled heads (and unreadable ones,
    alerted) leave the line on the way; an empty line ends the burst. Returns the request id
    handed to. A publish that fails raises: reconcile restarts the line (`restart_stalled`).
    `read_refused`: whether no more head's record may be read now (reconcile's window); then the
    line is left as it is, for the next look."""
    from shared.deciding.outbox import alert_corrupt_record, publish_request_attempt
    from shared.ledger.records import CorruptRecord

    for head in sorted(pacer.waiting(location), key=lambda entry: entry.key in passed):  # stable: in turn
        if read_refused():
            return None
        try:
            record = ports.ledger.get(head.request_id)
        except CorruptRecord as exc:
            alert_corrupt_record(ports, exc, log)  # once repaired, reconcile re-publishes it
            pacer.remove(head)
            continue
        if is_settled(record, head.attempt):
            pacer.remove(head)
            log.info(
                "a settled attempt left the line",
                event="quota_settled_left",
                request_id=head.request_id,
                attempt=head.attempt,
            )
            continue
        if not ports.may_publish(ports.settings.job_requests_topic):
            return None
        assert record is not None  # not settled
        publish_request_attempt(ports, record, head.attempt, location)
        return record.request_id
    pacer.end_burst(location)
    return None


def restart_stalled(ports: Ports, log: Logger, *, read_refused: Callable[[], bool] = lambda: False) -> list[str]:
    """Reconcile's part, in every region with anything under `pacing/`: a line with no live
    drainer (it crashed, or its hand-over was lost) is handed to its head again, and an empty
    one's burst ends. Returns the locations restarted. `read_refused`: whether no more read may be
    begun now (the pass's window, `CallWindow.restart_read_refused`): what is left waits for the
    next pass, whose function timeout would otherwise kill this one with its run lease held. It is
    asked only with a line left to look at: the one listing of `pacing/` is the pass's closing work
    (as its cursor and summary are), so a pass with no line is never taken for one cut short."""
    pacer = pacer_for(ports)
    restarted: list[str] = []
    for location in pacer.line_locations():
        if read_refused():
            break
        try:
            if not pacer.anyone_waiting(location):
                pacer.end_burst(location)  # its drainer may have died before it could
            elif pacer.lease_free(location) and hand_over(ports, pacer, location, log, read_refused=read_refused):
                restarted.append(location)
        except Exception as exc:  # noqa: BLE001 - the next pass looks again
            log.warning(
                "could not check the line waiting for the quota",
                event="quota_restart_failed",
                location=location,
                error=f"{type(exc).__name__}: {exc}",
            )
    return restarted


def _alert_quota_limited(ports: Ports, pacer: Pacer, location: str, count: int, log: Logger) -> None:
    """The burst's one alert. Its burst document is created first, so a second drainer never
    sends another, and noted sent after: a drainer that died or failed to publish in between
    leaves it unsent, and the next run that finds the line long sends it (at least once)."""
    from shared.deciding.outbox import publish_alert

    generation = pacer.burst_alert_due(location, count)
    if generation is None:
        return
    drain_seconds = round(count * pacer.slot_seconds)
    alert = Alert.of(
        AlertKind.QUOTA_LIMITED,
        (
            f"{count} job requests in {location} wait for Vertex AI's "
            f"submission quota; they are created in turn at {ports.settings.vertex_creates_per_minute} "
            f"a minute, about {drain_seconds} s to drain"
        ),
        details={
            "location": location,
            "waiting": count,
            "expected_drain_seconds": drain_seconds,
            "creates_per_minute": ports.settings.vertex_creates_per_minute,
        },
    )
    try:
        publish_alert(ports, alert)
    except Exception as exc:  # noqa: BLE001 - the next run sends it
        log.warning("could not publish the quota_limited alert", event="quota_alert_failed", error=str(exc))
        return
    pacer.burst_alerted(location, generation)
    log.warning(alert.message, event="quota_limited", **alert.details)
