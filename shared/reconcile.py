"""reconcile: the safety net under on_job_event. A lost, unrecognised or filtered-out job event delays
a decision until the next run; it never loses it.

For every request whose status is not terminal or that has effects still to publish (read from
the listing's metadata, paged by `settings.reconcile_page_size`, at most `settings.reconcile_requests_per_run`
per run; a run that stops short, or whose CRUD budget or call window deferred some, saves where the next one starts, in the ledger's
cursor, so every request gets its turn):

- alerts and a prune request decided but not published are published once their decider is
  presumed dead (`shared.deciding.outbox`);
- a re-queue decided but not confirmed is published once due and abandoned by its decider;
- a claim without a job older than the claim lease (a submit that crashed, its message lost) is
  settled: its job, looked up by labels, is recorded (index, then record) and decided on; absent,
  the attempt is re-published to job-requests for submit to take over, at a growing interval and
  never given up on (no lookup while it backs off, nor for a claim the line handed back with no
  create sent since: a burst costs no Vertex call; one `claim_stalled` past `max_claim_republishes`);
- an attempt whose job a deadline switch cancelled is read until Vertex reports it ended, and
  the observation that sees the end publishes the next attempt (held until then, so a lost event
  cannot stall it);
- otherwise the latest attempt's job is read (from the pass's one listing per location, a get only for a
  job missing from it: `shared.reconcile_vertex`) and `shared.deciding.applying.apply_observation` decides,
  exactly as for a log event: terminal states, re-queues, jobs stuck in a waiting state; a job Vertex answers NotFound for (deleted
  out of band) is an answer for good, decided as a job that FAILED with a NOT_FOUND error
  (`shared.reconcile_vertex.vanished_job`): the request fails with one `job_failed` alert
  naming it, or ends CANCELLED if its cancel was asked; a lookup of either kind that fails for
  our own reasons (a permission, a region) is alerted once (`lookup_failed`), the request kept;
- an attempt waiting in line for Vertex's submission quota is left to the line's drainer, and a line left without one is restarted (`shared.pacing_drainer`);
- a deadline that passed while the request waits for a create (a claim in line or re-published, a
  re-queue not yet claimed or held for a job no read can see end), is said once (`deadline_missed`).

Then the pass sweeps for strays (`shared.found_jobs.sweep_strays`; the call window keeps a call
timeout for it that the requests may not use: `shared.reconcile_vertex.CallWindow`): one list per
location of this deployment's jobs that have not ended, and every one the ledger does not record
is cancelled, whether its request is active or long finished; a sweep cut short three passes in a
row is alerted (`stray_sweep_cut_short`), as is a location whose Vertex API answered none of the
pass's calls three passes in a row (`location_unanswering`: `shared.unanswering`). Every change goes through the ledger's
compare-and-swap, so runs may overlap each other and on_job_event freely.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from itertools import compress

from shared.adapters.vertex import parent_path
from shared.alerts import Alert, AlertKind
from shared.attempt_lookup import alert_lookup_failed, find_claim_job
from shared.clock import iso, now_iso, parse_iso, utcnow
from shared.deciding.applying import apply_observation
from shared.deciding.deadline_watch import missed_waiting_for_a_create
from shared.deciding.decisions import Observation
from shared.deciding.effects import attempt_alert
from shared.deciding.notices import telling_changes
from shared.deciding.outbox import (
    Mine,
    alert_corrupt_record,
    alerts_of,
    decide_and_flush_alert,
    flush,
    publish_request_attempt,
)
from shared.errors import is_retryable
from shared.found_jobs import adopt_found_job, sweep_strays
from shared.job_locations import sweep_locations
from shared.ledger.cancelling import end_unsent_claim
from shared.ledger.records import Attempt, CorruptRecord, RequestRecord, alert_marker
from shared.ledger.run_lock import ledger_bucket, run_lock
from shared.ledger.store import ActiveEntry
from shared.log import Logger
from shared.paced_submit import in_line, never_sent
from shared.pacing_drainer import restart_stalled
from shared.reconcile_index import (
    RECONCILE_TASK,
    ReconcileSummary,
    remove_recordless_markers,
    requests_to_reconcile,
    resume_at_deferred,
)
from shared.reconcile_vertex import CallDeferred, CallWindow, LocationStalled, VertexPass, read_attempt_job
from shared.redeliveries import REJECTION_NOTES, alert_once
from shared.settings import Settings
from shared.swap import backoff_seconds
from shared.unanswering import count_unanswering_locations
from shared.wiring import Ports

# Requests reconciled at once: each is a few GCS and Vertex round trips, mostly waiting.
RECONCILE_WORKERS = 8
# Passes in a row whose stray sweep was cut short before `stray_sweep_cut_short` is alerted: one
# pass in a burst (a listing failed and its gets spent the budget, a region stalled a minute) may
# be, and two in a row too (ten minutes at the default interval); a third says it is how this
# deployment's passes run, and a stray would live on uncancelled.
SWEEP_CUT_SHORT_PASSES = 3
CUT_SHORT_STATE = "reconcile-sweep"  # maintenance/reconcile-sweep.json: the run of passes cut short
SWEEP_CUT_SHORT_NOTES = f"{REJECTION_NOTES}sweep-cut-short-"  # one note a run (`alert_once`)


@dataclass(frozen=True)
class RequestResult:
    # observed | requeue_published | effects_published | claim_adopted | claim_republished |
    # waiting | waiting_for_quota | cancelled | idle | deferred | error
    outcome: str
    decisions: tuple[str, ...] = ()
    locations: tuple[str, ...] = ()  # where the request's attempts ran: the stray sweep lists them
    # Deferred for its own call's failure (its region stalled, a transient error), not for the
    # pass's budget or time: the next pass does not start at it (`resume_at_deferred`).
    own_failure: bool = False


def run_reconcile(ports: Ports, log: Logger, *, limit: int | None = None) -> ReconcileSummary:
    """One reconcile pass over the active requests. Logs one summary line and returns it. A pass
    already running elsewhere makes this one end at once (`shared.ledger.run_lock`: one INFO line)."""
    started = ports.clock()  # the function's timeout runs from here: the pass's calls fit in it
    with run_lock(ledger_bucket(ports.ledger), RECONCILE_TASK, log, clock=ports.clock) as held:
        return _run_reconcile(ports, log, limit=limit, started=started) if held else ReconcileSummary()


def _run_reconcile(ports: Ports, log: Logger, *, limit: int | None, started: datetime) -> ReconcileSummary:
    settings = ports.settings
    summary = ReconcileSummary()
    # One listing per location; gets only where it cannot answer; no call (a cancel included) past
    # its budget or its window.
    vertex_pass = VertexPass(ports, log, started=started)
    ports = vertex_pass.ports
    recordless: list[ActiveEntry] = []  # removed after the sweep, if it saw no job of theirs live
    request_ids = requests_to_reconcile(
        ports.ledger,
        summary,
        log,
        page_size=settings.reconcile_page_size,
        limit=settings.reconcile_requests_per_run if limit is None else limit,
        on_corrupt=lambda error: alert_corrupt_record(ports, error, log),
        recordless=recordless,
    )
    locations = {settings.location}

    def reconcile_in_time(request_id: str) -> RequestResult:
        # Past the requests' window, a request waits for the next pass: the rest is the sweep's.
        closed = vertex_pass.window.requests_closed()
        return RequestResult("deferred") if closed else reconcile_request(ports, request_id, log)

    with ThreadPoolExecutor(RECONCILE_WORKERS, thread_name_prefix="reconcile") as pool:
        results = list(pool.map(reconcile_in_time, request_ids))
    for result in results:
        summary.outcomes[result.outcome] += 1
        summary.decisions.update(result.decisions)
        locations.update(result.locations)
    resumable = (r.outcome == "deferred" and not r.own_failure for r in results)
    resume_at_deferred(ports.ledger, RECONCILE_TASK, compress(request_ids, resumable), log)
    swept_locations = sweep_locations(ports, locations)
    listed: dict[str, set[str]] = {}
    with vertex_pass.sweeping():
        swept = sweep_strays(ports, swept_locations, log, window=vertex_pass.window, listed=listed)
        restarted = restart_stalled(ports, log, read_refused=vertex_pass.window.restart_read_refused)
    remove_recordless_markers(ports.ledger, recordless, listed, swept_locations)
    summary.decisions.update(["stray_job_cancelled"] * len(swept))
    summary.decisions.update(["quota_line_restarted"] * len(restarted))
    _count_cut_short_sweeps(ports, vertex_pass, log)
    count_unanswering_locations(ports, vertex_pass.window, log)
    summary.vertex = vertex_pass.usage()
    log.info("reconcile finished", event="reconcile_summary", **summary.to_json())
    return summary


def _count_cut_short_sweeps(ports: Ports, vertex_pass: VertexPass, log: Logger) -> None:
    """Count the passes in a row whose sweep was cut short (`stray_sweep_deferred`), in the state
    bucket (`CUT_SHORT_STATE`: the passes hold the run lease in turn, so one writes at a time), and
    alert once a run of them reaches `SWEEP_CUT_SHORT_PASSES`: a WARNING line tells nobody, and a
    deployment whose every pass runs out of its window before its sweep is done would never cancel
    a stray. Once per run (`alert_once`, its note named by the run's first pass): a pass killed
    before its alert leaves it to the next one cut short. Never raises: the next pass counts on."""
    window = vertex_pass.window
    cut_short = bool(window.sweep_deferred or window.sweep_unread or window.restart_deferred)
    try:
        state = ports.ledger.maintenance_state(CUT_SHORT_STATE)
        counted = state.get("cut_short_passes")
        passes = counted if isinstance(counted, int) and not isinstance(counted, bool) else 0
        if not cut_short:
            if passes:
                ports.ledger.save_maintenance_state(CUT_SHORT_STATE, {})  # the run of them ended
            return
        since = state.get("since") if passes and isinstance(state.get("since"), str) else iso(ports.clock())
        passes += 1
        ports.ledger.save_maintenance_state(CUT_SHORT_STATE, {"cut_short_passes": passes, "since": since})
        if passes >= SWEEP_CUT_SHORT_PASSES:
            alert_once(ports, _cut_short_alert(ports, window, passes, since), f"{SWEEP_CUT_SHORT_NOTES}{since}")
    except Exception as exc:  # noqa: BLE001 - the next pass counts again; the alert waits for it
        log.warning(
            "could not count or alert the passes whose stray sweep was cut short",
            event="stray_sweep_count_failed",
            error=f"{type(exc).__name__}: {exc}",
        )


def _cut_short_alert(ports: Ports, window: CallWindow, passes: int, since: str) -> Alert:
    stalled = sorted(window.stalled)
    return Alert.of(
        AlertKind.STRAY_SWEEP_CUT_SHORT,
        f"reconcile's stray sweep was cut short {passes} passes in a row (since {since}): strays it could not "
        "list, check or cancel run uncancelled. "
        + (
            f"Vertex AI calls in {', '.join(stalled)} run out their timeout"
            if stalled
            else "The pass runs out of its CRUD budget or its function's timeout: raise SPOTJOBS_RECONCILE_CRUD_SHARE, "
            "or reconcile's timeout (function_config.reconcile in Terraform)"
        ),
        details={
            "passes": passes,
            "since": since,
            "calls_deferred": window.sweep_deferred,
            "records_unread": window.sweep_unread,
            "quota_restart_deferred": window.restart_deferred,
            "stalled_locations": stalled,
            "out_of_time": window.out_of_time,
        },
        time=iso(ports.clock()),
    )


def reconcile_request(ports: Ports, request_id: str, log: Logger) -> RequestResult:
    """Bring one request up to date with its job. Never raises: a failure is logged and counted,
    and the next run tries again."""
    from google.api_core.exceptions import DeadlineExceeded

    log = log.bind(request_id=request_id)
    try:
        record = ports.ledger.get(request_id)
        if record is None:
            return RequestResult("idle")
        result = _reconcile(ports, record, log)
        return replace(result, locations=tuple({a.location for a in record.attempts}))
    except CorruptRecord as exc:
        alert_corrupt_record(ports, exc, log)
        return RequestResult("error")
    except LocationStalled:
        return RequestResult("deferred", own_failure=True)  # the region stalls: its turn comes round again
    except CallDeferred:
        return RequestResult("deferred")  # the next pass has its own share of the quota and its own time
    except DeadlineExceeded as exc:
        # A Vertex call of it ran out its timeout: the window closes the location, as to the calls
        # it then refuses, whose requests are deferred; so is this one (the region stalls, not it).
        log.warning(
            "a Vertex call ran out its timeout; the request waits for the next pass",
            event="reconcile_call_timed_out",
            error=f"{type(exc).__name__}: {exc}",
        )
        return RequestResult("deferred", own_failure=True)
    except Exception as exc:  # noqa: BLE001 - one request must not stop the pass; logged here
        error = f"{type(exc).__name__}: {exc}"
        if is_retryable(exc):  # a busy dependency (a 503, a lost reply): nothing is broken
            log.warning(
                "a call for one request failed for now; the request waits for the next pass",
                event="reconcile_request_deferred",
                error=error,
            )
            return RequestResult("deferred", own_failure=True)  # its own failure: see `own_failure`
        log.error("reconcile failed for one request; the next run retries it", event="reconcile_error", error=error)
        return RequestResult("error")


def _reconcile(ports: Ports, record: RequestRecord, log: Logger) -> RequestResult:
    latest = record.latest
    if latest is not None and latest.ending and latest.job:
        # A switch's next attempt waits for this job's end, which a lost event would never report.
        observed = _observe(ports, record, latest, log)
        _say_deadline_missed(ports, record, log)  # a read refused for good says nothing of it (seed 167)
        return observed
    if record.has_pending_effects or record.requeue is not None:
        message_id, waiting = flush(ports, record, log)
        if record.is_terminal or record.requeue is not None:
            _say_deadline_missed(ports, record, log)
            if message_id:
                return RequestResult("requeue_published")
            if waiting:
                return RequestResult("waiting")
            return RequestResult("effects_published" if record.has_pending_effects else "idle")
    if record.is_terminal:
        return RequestResult("idle")
    if latest is None or latest.outcome is not None:
        return RequestResult("idle")
    if latest.job is None:
        if in_line(ports, record, latest):
            _say_deadline_missed(ports, record, log)
            return RequestResult("waiting_for_quota")  # the line's drainer creates it (shared/pacing_drainer.py)
        settled = _settle_claim(ports, record, latest, log)
        _say_deadline_missed(ports, record, log)
        return settled
    return _observe(ports, record, latest, log)


def _say_deadline_missed(ports: Ports, record: RequestRecord, log: Logger) -> None:
    """A deadline that passed while the request waits for a create, with no job to read: said once
    (`missed_waiting_for_a_create`, decided on the current record). No call while it holds not."""
    now = ports.clock()
    if missed_waiting_for_a_create(record, now) is not None:
        marker = str(AlertKind.DEADLINE_MISSED)
        decide_and_flush_alert(
            ports, record.request_id, marker, lambda current: missed_waiting_for_a_create(current, now), log
        )


def _observe(ports: Ports, record: RequestRecord, attempt: Attempt, log: Logger) -> RequestResult:
    try:
        snapshot, times = read_attempt_job(ports, attempt, log)
    except Exception as exc:
        if is_retryable(exc):
            raise
        alert_lookup_failed(ports, record, attempt, exc, log)  # as for a claim: said once, the request stays
        return RequestResult("error")
    observation = Observation(attempt.n, snapshot, read_at=times.sent, answered_at=times.answered)
    applied = apply_observation(ports, record.request_id, observation, log)
    return RequestResult("waiting" if applied.waiting else "observed", applied.events)


def _republish(ports: Ports, record: RequestRecord, claim: Attempt, log: Logger, held_for: float) -> RequestResult:
    """Re-publish a claim that never got a job, counted in the ledger first (so two reconcile runs
    cannot both count one), at a growing interval. A request is never failed here: "Vertex said
    no" fails it in submit_job (a verdict on the create); a claim that only ever met a busy
    Vertex (429, 503) or no submit at all ("we could not ask") waits, and after
    `max_claim_republishes` re-publishes one `claim_stalled` alert says which it is."""
    settings = ports.settings

    def count(current: RequestRecord | None) -> RequestRecord | None:
        attempt = current.attempt(claim.n) if current else None
        if current is None or attempt is None or attempt.job is not None:
            return None
        if attempt.claimed_at != claim.claimed_at or current.is_terminal:
            return None  # submit took the claim over meanwhile: its own lease runs again
        if _backing_off(settings, attempt):
            return None  # the last re-publish has not had its turn yet
        attempt.republished += 1
        attempt.republished_at = now_iso()
        if attempt.republished > settings.max_claim_republishes:
            _decide_stalled_alert(current, attempt, ports)
        return current

    swapped = ports.ledger.swap(record.request_id, count)
    stored = swapped.value
    if stored is None or not swapped.wrote:
        return RequestResult("idle")
    message_id = publish_request_attempt(ports, record, claim.n, claim.location)
    attempt = stored.attempt(claim.n)
    log.warning(
        f"attempt {claim.n} was claimed {held_for:.0f} s ago and never created; re-published",
        event="claim_republished",
        attempt=claim.n,
        location=claim.location,
        republished=attempt.republished if attempt else None,
        last_create_error=attempt.last_create_error if attempt else None,
        published_message_id=message_id,
    )
    if stored.has_pending_effects:  # only the stalled alert this write decided is its own
        flush(ports, stored, log, mine=Mine.EFFECTS, own_alerts=alerts_of(stored, AlertKind.CLAIM_STALLED, claim.n))
    return RequestResult("claim_republished")


def _backing_off(settings: Settings, claim: Attempt) -> bool:
    """The claim's last re-publish has not had its turn yet: submit may still take it over."""
    return bool(claim.republished_at) and _seconds_since(claim.republished_at) < _backoff(
        settings.claim_lease_seconds, claim.republished
    )


def _backoff(lease: float, republished: int) -> float:
    """Seconds between re-publishes: a lease at first, doubling, at most an hour (a busy Vertex
    gets room; a long outage is retried hourly, never given up on)."""
    return backoff_seconds(lease, republished, max(lease, 3600.0))


def _decide_stalled_alert(record: RequestRecord, attempt: Attempt, ports: Ports) -> None:
    if not record.mark(alert_marker(AlertKind.CLAIM_STALLED, attempt.n)):
        return
    error = attempt.last_create_error
    if error:
        why = f"Vertex keeps turning the create away for now ({error.get('message')})"
    else:
        why = "no create was ever attempted: check that submit_job runs and can reach Vertex"
    record.pending_alerts.append(
        attempt_alert(
            record,
            attempt,
            AlertKind.CLAIM_STALLED,
            ports.clock(),
            f"attempt {attempt.n} of {record.request_id} has no job after {attempt.republished - 1} "
            f"re-publishes: {why}; it keeps being retried",
            republished=attempt.republished - 1,
            last_create_error=error,
        ).to_json()
    )


def _seconds_since(moment: str) -> float:
    return (utcnow() - parse_iso(moment)).total_seconds()


def _settle_claim(ports: Ports, record: RequestRecord, claim: Attempt, log: Logger) -> RequestResult:
    """A claim without a job: leave a young one to its submit; settle an abandoned one."""
    held_for = (ports.clock() - parse_iso(claim.claimed_at)).total_seconds()
    if held_for < ports.settings.claim_lease_seconds:
        return RequestResult("idle")
    if record.cancel is None and _backing_off(ports.settings, claim):
        # Nothing to ask Vertex yet: a lookup's answer would only be thrown away, and a burst of
        # such claims would spend the pass's CRUD budget before the requests that need it.
        return RequestResult("idle")
    if record.cancel is None and never_sent(claim):  # handed back by the line, no create sent since: no job to find
        return _republish(ports, record, claim, log, held_for)
    client = ports.job_service(claim.location)
    parent = parent_path(ports.settings.project, claim.location)
    try:
        job = find_claim_job(ports, record, claim, client, parent, log)
    except Exception as exc:
        if is_retryable(exc):
            raise
        # A permission missing, a mistyped region: no pass will do better. Said once (by
        # find_claim_job); the claim stays (the request is not failed for what is wrong on our side).
        return RequestResult("error")
    if job is None and record.cancel is not None:
        # Its create never landed: nothing to wait for (a job that turns up later is a stray).
        end = partial(end_unsent_claim, n=claim.n, claimed_at=claim.claimed_at, now=ports.clock())
        ports.ledger.update(record.request_id, telling_changes(end, ports.clock))  # `cancelled` told
        return RequestResult("cancelled")
    if job is None:
        return _republish(ports, record, claim, log, held_for)
    adoption, events = adopt_found_job(
        ports, record.request_id, claim.n, claim.location, job, log, left="was created but never recorded"
    )
    return RequestResult("claim_adopted" if adoption.wrote else "observed", events)
