"""What a job's real state means for its request: `decide`, a pure function of the ledger record.

on_job_event (a log line hinted at a change), reconcile (polling every active request) and submit
(a job found after the fact) read the job from Vertex, wrap it in an `Observation` and hand it to
`shared.deciding.applying.apply_observation`, which runs `decide` under the ledger's compare-and-swap (so it
may run more than once) and carries out the effects afterwards. `decide` returns the new record
plus the effects that belong to it (log lines, alerts, the re-queue and prune request); every
decision marks the record, so a duplicated, concurrent or reordered delivery finds it made and
decides nothing again. What must reach Pub/Sub is written pending into the record with the
decision and published by the outbox (`shared.deciding.outbox`).

Decisions, on the job's state as Vertex reports it (never on the log text):

- SUCCEEDED: the request succeeds; one prune request goes to the maintenance topic. Unless the
  trainer kit's lines show the job's last run preempted and never finished (a process that exits
  0 after SIGTERM, as Lightning 2.6 does): then the attempt is re-queued like a preempted one (the
  next resumes from its checkpoints) with one `incomplete_success` alert. A job whose kit spoke
  but whose last run has not said `run_finished` yet is decided once it does, or once
  `kit_lines_settle_seconds` passed after the job's end (the last lines may still be on their way).
- FAILED by preemption/stockout (error code RESOURCE_EXHAUSTED, or its message matches the
  configured stockout/preemption patterns): attempt n+1 is re-queued (fallback strategy and
  failover location from `shared.requests.envelope.plan_attempt`), or, when `max_attempts` is reached, the
  request GAVE_UP with an `attempts_exhausted` alert (a request with a deadline goes on to
  STANDARD instead: docs/deadlines.md).
- FAILED or EXPIRED at the job's `scheduling.timeout`: after committed progress, the next attempt
  continues it, not counted against `max_attempts`; else the request FAILED
  (`shared.deciding.continuations`), once `kit_lines_settle_seconds` passed after the job's end
  without a commit (the kit's lines, even its first, may still be on their way) and the
  checkpoint folder shows none either (`shared.deciding.folder_progress`: lines can be later
  still).
- FAILED otherwise, EXPIRED: the request FAILED with a `job_failed` alert; nothing is re-queued.
  A FAILED job whose error is not published yet (Vertex sets it about a minute after the end)
  is not classified until the error appears or `ERROR_SETTLE_SECONDS` pass.
- CANCELLED: the request is CANCELLED; a cancel spotjobs never asked for (by hand at Vertex) is
  recorded as the request's cancel (`shared.ledger.cancelling`). Once a request's cancel is
  recorded, its job's end, however it ended but a success, is a CANCELLED attempt, and the request
  ends CANCELLED when none of its jobs is live.
- Only the latest attempt of a request that is not finished decides the request's status; an
  older attempt's late events update that attempt alone.

- A request with a `max_cost_usd`: every observation asks `shared.deciding.budget_watch.watch_budget`,
  which stops it (as a cancel) once its spend reached the budget, with one `budget_reached` alert,
  or once the deployed price table cannot price its spend, with one `budget_unpriced` alert.
- A request with a `deadline`: every observation of its latest attempt that is not ended asks
  the deadline rule (`shared.deciding.deadline_watch.watch_deadline`), which may switch it to
  on-demand (or back to Spot) and raise `deadline_at_risk` / `deadline_missed` once each; while
  a hand-over waits for the job it cancelled to end, the rule decides nothing and that job's
  observation raises `deadline_missed` once the deadline passed (its successor cannot start).

Preemptions are counted by `shared.deciding.preemptions.count_preemptions`.

It is over 450 lines because it is one table, what each state of a job means for its request: its
rows (success, preemption, re-queue, deadline switch, cancel, stray) read the same record, share its
invariants and write the same effects; split, each part would re-check what the others assume. The
parts with a life of their own are modules of their own: counting preemptions (`preemptions`), the
deadline rule (`deadline_watch`), whether a read is fresh and what it says of the job's waits
(`waits`), when a job is stuck (`stuck`), applying under compare-and-swap (`applying`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from spotjobs_kit.lines import PREEMPTED, KitRecord

from shared.alerts import AlertKind
from shared.clock import iso, parse_iso, parse_rfc3339
from shared.deciding.budget_watch import budget_refuses, watch_budget
from shared.deciding.continuations import (
    continue_or_fail,
    counted_attempts,
    job_timeout_seconds,
    made_progress,
    timed_out,
)
from shared.deciding.deadline_watch import (
    FleetView,
    alert_if_finished_late,
    alert_if_missed_while_ending,
    note_progress,
    watch_deadline,
)
from shared.deciding.effects import Effects, LogLine, attempt_alert, event_fields
from shared.deciding.events import Signal, SignalPatterns, patterns_from
from shared.deciding.folder_progress import FolderProgress
from shared.deciding.preemptions import (
    KIT_TIMEOUT_KEY,
    count_preemptions,
    discount_cancel_stop,
    discount_timeout_stop,
    kit_runs,
    last_run_ended_by_preemption,
    last_run_unfinished,
    note_kit_line,
    preempted_in_last_run,
    preemption_ended_last_run,
    preemptions_text,
)
from shared.deciding.stuck import flag_ended_wait, flag_stuck, wait_ended_by
from shared.deciding.waits import is_fresh, take_read
from shared.errors import Violation
from shared.jobs import FLEX_START, JobSnapshot, JobState
from shared.ledger.cancelling import settle_cancel, vertex_cancel
from shared.ledger.records import Attempt, RequestRecord, Requeue, alert_marker, evidence_marker
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.requests.attempts import ON_DEMAND, SPOT, plan_attempt
from shared.requests.policy import check_strategy
from shared.settings import DEFAULT_MAX_RUNTIME_SECONDS, Settings

# google.rpc RESOURCE_EXHAUSTED: capacity ran out (Spot stockout, regional shortage).
CAPACITY_ERROR_CODES = frozenset({8})
# How long a FAILED job may go without its error before it is classified as an ordinary failure.
ERROR_SETTLE_SECONDS = 600.0
INCOMPLETE_SUCCESS_REASON = "ended SUCCEEDED, but the trainer kit saw its last run preempted and never finish"


@dataclass(frozen=True)
class Observation:
    """What was learnt about attempt `attempt`'s job: the job as read just now from Vertex, or a
    trainer kit line about one of its runs (then no read: `job` is None, `job_name` says which)."""

    attempt: int
    job: JobSnapshot | None
    signal: Signal | None = None  # the log line's hint; None when reconcile polled
    preemption_evidence: str | None = None  # insertId of a service preemption line
    kit: KitRecord | None = None
    job_name: str | None = None  # the job a kit line came from, when `job` is None
    # When the read of `job` was sent (a reconcile pass's listing that answered it: when the
    # listing was, not the pass): the job held the state it shows from its update time until then
    # at least (what a wait after a run is known to have lasted); None vouches for nothing.
    read_at: datetime | None = None
    # When its answer was back: the job was in the state it shows by then (a change it counts, a
    # preemption, happened by then; not by `read_at`, before Vertex took the answer: seed 10119).
    answered_at: datetime | None = None

    @property
    def about_job(self) -> str | None:
        return self.job.name if self.job is not None else self.job_name

    def seen_at(self, now: datetime) -> datetime:
        """When it saw the job: a kit line's own time (never past `now`), a read's start; `now` for
        a line without its time, or a read that did not say when it began (an adopted job's is
        decided in the call that took it)."""
        if self.job is None and self.kit is not None:
            return min(now, parse_rfc3339(self.kit.time) or now)
        return self.read_at or now

    def happened_by(self, now: datetime) -> datetime:
        """When what it shows had happened by: a read's answer; else as `seen_at`."""
        return self.answered_at or self.seen_at(now)


@dataclass(frozen=True)
class DecisionPolicy:
    patterns: SignalPatterns
    storm_threshold: int
    requeue_delay_seconds: float
    default_max_attempts: int
    stuck_after_seconds: float
    kit_lines_settle_seconds: float
    changeover_prior_seconds: float
    reconcile_interval_seconds: float
    checkpoint_prior_seconds: float
    # What capacity other than Spot an attempt may be planned on (shared.requests.policy.check_strategy).
    allowed_fallback_strategies: tuple[str, ...]
    min_spot_attempts: int
    # What bounds continuations after the job timeout when a request names no smaller max_runtime.
    max_runtime_seconds: float = DEFAULT_MAX_RUNTIME_SECONDS

    @classmethod
    def from_settings(cls, settings: Settings) -> DecisionPolicy:
        return cls(
            patterns=patterns_from(settings),
            storm_threshold=settings.preemption_storm_threshold,
            requeue_delay_seconds=settings.requeue_delay_seconds,
            default_max_attempts=settings.default_max_attempts,
            stuck_after_seconds=settings.stuck_after_seconds,
            kit_lines_settle_seconds=settings.kit_lines_settle_seconds,
            changeover_prior_seconds=settings.changeover_prior_seconds,
            reconcile_interval_seconds=settings.reconcile_interval_seconds,
            checkpoint_prior_seconds=settings.checkpoint_prior_seconds,
            allowed_fallback_strategies=settings.allowed_fallback_strategies,
            min_spot_attempts=settings.min_spot_attempts,
            max_runtime_seconds=settings.max_runtime_seconds,
        )

    def refuses(self, strategy: str, record: RequestRecord, n: int) -> Violation | None:
        """Why attempt `n` of `record` may not run on `strategy` in this deployment, if it may not."""
        return check_strategy(
            strategy,
            record.spot_attempts_before(n),
            allowed_fallbacks=self.allowed_fallback_strategies,
            min_spot_attempts=self.min_spot_attempts,
        )


# The output.


@dataclass(frozen=True)
class Decision:
    record: RequestRecord
    effects: Effects
    # Set when the observation cannot be decided yet; the event path retries, reconcile comes back.
    waiting: str | None = None


@dataclass(frozen=True)
class FailureCause:
    capacity: bool  # preemption or stockout: worth another attempt
    stockout: bool  # capacity ran out where it ran: worth another location
    reason: str


def classify_failure(job: JobSnapshot, patterns: SignalPatterns, *, kit_saw_preemption: bool = False) -> FailureCause:
    """Why a FAILED/EXPIRED job failed: from its error message (Vertex documents a STOCKOUT error
    once a Spot job's restarts run out), its code where one says so, or the trainer kit's word
    that the last run was preempted and never finished (docs/signals.md)."""
    if job.state == JobState.EXPIRED:
        return FailureCause(False, False, "the job ran past its timeout")
    code = int((job.error or {}).get("code") or 0)
    message = str((job.error or {}).get("message") or "")
    stockout = code in CAPACITY_ERROR_CODES or patterns.is_stockout(message)
    capacity = stockout or patterns.is_preemption(message) or kit_saw_preemption
    reason = message or (f"error code {code}" if code else "no error reported")
    if kit_saw_preemption and not (stockout or patterns.is_preemption(message)):
        reason = f"{reason}; the trainer kit saw its last run preempted"
    return FailureCause(capacity, stockout, reason)


# The decision.


def decide(
    record: RequestRecord,
    observation: Observation,
    policy: DecisionPolicy,
    now: datetime,
    *,
    fleet: FleetView | None = None,
    folder: FolderProgress | None = None,
) -> Decision:
    """The record after `observation`, and the effects of the change. Pure: the record is a copy
    the ledger handed over, and effects are only described, never carried out. The alerts and the
    prune request decided are also written into the record as pending, for `shared.deciding.outbox`.
    `fleet`: what the deadline rule may ask of the fleet's observations
    (`shared.deciding.deadline_watch.watch_deadline`); without it, nothing is known of them.
    `folder`: what a timeout without a commit heard may ask of the attempt's checkpoint folder
    (`shared.deciding.folder_progress`); without it, only the kit's lines tell progress."""
    decision = _decide(record, observation, policy, now, fleet, folder)
    watch_budget(decision.record, now, decision.effects)
    settled = settle_cancel(decision.record, now)
    for attempt in decision.record.attempts:  # a cancel this decision asked or settled: marked with it
        if _stopped_by_cancel(attempt, None):
            discount_cancel_stop(decision.record, attempt)
    if settled:  # the last live job of a cancelled request ended
        latest = decision.record.latest
        decision.effects.lines.append(
            LogLine(
                "INFO",
                f"{record.request_id} is cancelled: none of its jobs runs",
                event_fields(decision.record, latest, "request_cancelled") if latest else {},
            )
        )
    decision.record.pending_alerts.extend(alert.to_json() for alert in decision.effects.alerts)
    if decision.effects.prune_requested:
        decision.record.prune_pending = True
    return decision


def _decide(
    record: RequestRecord,
    observation: Observation,
    policy: DecisionPolicy,
    now: datetime,
    fleet: FleetView | None,
    folder: FolderProgress | None = None,
) -> Decision:
    effects = Effects()
    attempt = record.attempt(observation.attempt)
    if attempt is None or attempt.job is None:
        # The index is written before the record names the job: submit is between the two.
        return Decision(record, effects, f"attempt {observation.attempt} has no job recorded yet")
    if attempt.job != observation.about_job:
        return Decision(record, effects)  # a stray second job of the attempt: not the one it runs
    job = observation.job
    if job is not None and job.is_terminal and attempt.outcome is not None:
        # Settled without a conclusion: a cancel ended it while its job's end was recorded but not
        # yet decided (seed 2369). A stop at the timeout, read now, is no preemption either.
        _ended_at_timeout(record, attempt, job, policy)
    if _stopped_by_cancel(attempt, job):
        discount_cancel_stop(record, attempt)  # before a line of the stop is counted
    if observation.kit is not None and note_kit_line(record, attempt, observation.kit, now, effects):
        note_progress(attempt, observation.kit.total_steps, observation.kit.steps_per_second)
    fresh = job is not None and is_fresh(attempt, job)
    # When the observation saw the job: a kit line's own time, a read's (an event may be decided
    # long after its read: a redelivery, a crash).
    seen_at = observation.seen_at(now)
    count_preemptions(
        record,
        attempt,
        job,
        observation.preemption_evidence,
        fresh=fresh,
        storm_threshold=policy.storm_threshold,
        now=now,
        seen_at=observation.happened_by(now),
        effects=effects,
    )
    if job is None and observation.kit is not None:
        # A kit line: the job runs (or just did) when it was written; no Vertex read to track.
        running = observation.kit.event != PREEMPTED
        _watch_deadline(record, attempt, policy, now, effects, fleet, running=running, seen_at=seen_at)
    if job is not None and not fresh and attempt.ending:
        flag_stuck(record, attempt, job, policy.stuck_after_seconds, now, effects, seen_at)  # cancelled, not ended yet
        _watch_deadline(record, attempt, policy, now, effects, fleet, read_at_vertex=True, seen_at=seen_at)
    if job is None or not fresh:
        return Decision(record, effects)
    latest = record.latest
    owns_status = latest is not None and latest.n == attempt.n and not record.is_terminal
    was_ending = attempt.ending
    ended_wait = wait_ended_by(attempt, job, seen_at)
    take_read(attempt, job, now, observation.read_at)
    if owns_status and job.state == JobState.RUNNING and record.status == RequestStatus.SUBMITTED:
        record.status = RequestStatus.RUNNING
    if was_ending and not attempt.ending:
        _release_successor(record, attempt, job, now, effects)
    if job.is_terminal and attempt.outcome is None:
        waiting = _conclude(record, attempt, job, owns_status, policy, now, seen_at, effects, folder)
        return Decision(record, effects, waiting)
    if owns_status:
        flag_ended_wait(record, attempt, job, policy.stuck_after_seconds, now, effects, ended_wait)
        flag_stuck(record, attempt, job, policy.stuck_after_seconds, now, effects, seen_at)
        _watch_deadline(record, attempt, policy, now, effects, fleet, read_at_vertex=True, seen_at=seen_at)
    return Decision(record, effects)


def _watch_deadline(
    record: RequestRecord,
    attempt: Attempt,
    policy: DecisionPolicy,
    now: datetime,
    effects: Effects,
    fleet: FleetView | None,
    seen_at: datetime,
    running: bool = False,
    read_at_vertex: bool = False,
) -> None:
    """`seen_at`: when the observation saw the job (a read's time, a kit line's own)."""
    if attempt.ending:
        alert_if_missed_while_ending(record, attempt, now, effects, seen_at)  # the rule decides nothing meanwhile
        return
    watch_deadline(
        record,
        attempt,
        now,
        effects,
        prior_seconds=policy.changeover_prior_seconds,
        review_seconds=policy.reconcile_interval_seconds,
        refuses=lambda strategy: (
            policy.refuses(strategy, record, attempt.n + 1) or budget_refuses(record, attempt, strategy, now)
        ),
        checkpoint_prior_seconds=policy.checkpoint_prior_seconds,
        running=running,
        read_at_vertex=read_at_vertex,
        seen_at=seen_at,
        fleet=fleet,
    )


def _release_successor(
    record: RequestRecord, attempt: Attempt, job: JobSnapshot, now: datetime, effects: Effects
) -> None:
    """The job a switch cancelled is seen ended: the next attempt, held until now, is published
    by this observation (a cancel only starts one: CANCELLING comes first)."""
    attempt.ended_at = attempt.ended_at or job.end_time or iso(now)
    if record.latest is not attempt or record.requeue is None or record.requeue.message_id:
        return  # its successor was published already (a record from before the hold)
    effects.requeue_decided = True
    effects.lines.append(
        LogLine(
            "INFO",
            f"the job of attempt {attempt.n} of {record.request_id} ended ({job.state}); "
            f"attempt {record.requeue.attempt} is published",
            event_fields(record, attempt, "switched_job_ended", state=job.state, next_attempt=record.requeue.attempt),
        )
    )


def _conclude(
    record: RequestRecord,
    attempt: Attempt,
    job: JobSnapshot,
    owns_status: bool,
    policy: DecisionPolicy,
    now: datetime,
    seen_at: datetime,
    effects: Effects,
    folder: FolderProgress | None = None,
) -> str | None:
    if job.state == JobState.FAILED and job.error is None and not _settled(job, now, ERROR_SETTLE_SECONDS):
        return f"job {job.name} failed and its error is not published yet"
    # Vertex's SUCCEEDED says the process exited 0, not that training finished (docs/signals.md):
    # with the kit in the job, its last run's lines (run_finished, or preempted) settle it.
    succeeded = job.state == JobState.SUCCEEDED
    if succeeded and last_run_unfinished(record, attempt.n) and not _settled(job, now, policy.kit_lines_settle_seconds):
        return f"job {job.name} succeeded; waiting for its last run's kit lines (run_finished or preempted)"
    incomplete = succeeded and preempted_in_last_run(record, attempt.n)
    timeout = _ended_at_timeout(record, attempt, job, policy)
    # Nothing committed yet: the kit's lines may still be on their way, even its first (a job's
    # lines arrive in any order), so a job without the kit fails only once they settled too.
    kit_late = timeout and not made_progress(attempt)
    if kit_late and not _settled(job, now, policy.kit_lines_settle_seconds):
        return f"job {job.name} ran into its timeout; waiting for its kit lines (checkpoint_committed)"
    attempt.ended_at = job.end_time or iso(now)
    attempt.error = job.error
    if job.state == JobState.SUCCEEDED and not incomplete:
        _succeed(record, attempt, owns_status, now, effects)
    elif job.state == JobState.CANCELLED or record.cancel is not None:
        # Asked to stop: however its job ended (a preemption during the cancel too), nothing follows.
        _cancel(record, attempt, job, owns_status, now, effects)
    else:
        if incomplete:
            cause = FailureCause(True, False, INCOMPLETE_SUCCESS_REASON)
            if owns_status:
                _flag_incomplete_success(record, attempt, now, effects)
        else:
            # At a timeout Vertex stops the job as a preemption would: the kit's word is no evidence.
            # Nor is it at a cancel (a job a person deleted was cancelled first).
            kit_saw_preemption = preemption_ended_last_run(record, attempt.n) and not timeout
            cause = classify_failure(job, policy.patterns, kit_saw_preemption=kit_saw_preemption)
        if cause.capacity:
            # The job ended by preemption: so did its last run, said so or not.
            last_run_ended_by_preemption(record, attempt.n)
            count_preemptions(
                record,
                attempt,
                None,
                None,
                fresh=False,
                storm_threshold=policy.storm_threshold,
                now=now,
                seen_at=seen_at,
                effects=effects,
            )
        # Ended by preemption: at least one, however many. Not a FLEX_START job: it is never
        # preempted, and its capacity error is a wait for capacity that ran out (docs/local.md).
        if cause.capacity and attempt.preemptions == 0 and attempt.strategy != FLEX_START:
            attempt.preemptions_unknown = True
        if not owns_status:
            later = record.latest is not None and record.latest.n > attempt.n
            attempt.outcome = AttemptOutcome.REQUEUED if cause.capacity and later else AttemptOutcome.FAILED
        elif cause.capacity:
            _requeue_or_give_up(record, attempt, cause, policy, now, effects)
        elif timeout:
            # No commit heard by the settle: the lines can be later still (a backlog), the folder not.
            found = folder(record, attempt) if folder is not None and not made_progress(attempt) else None
            continue_or_fail(
                record,
                attempt,
                cause.reason,
                ceiling_seconds=policy.max_runtime_seconds,
                now=now,
                effects=effects,
                found_in_folder=found,
            )
        else:
            _fail(record, attempt, cause, now, effects)
    return None


def _stopped_by_cancel(attempt: Attempt, job: JobSnapshot | None) -> bool:
    """Whether a cancel stops, or stopped, the attempt's job, so its last run's SIGTERM is the
    cancel's: spotjobs asked it (a request's cancel, a budget stop, a deadline switch, a move), the
    job reads (or was recorded) CANCELLING or CANCELLED (a cancel by hand), or a cancel settled the
    attempt, its job's end never decided (what ended that job, a read might tell; until one does, and
    none may come for a request that ended, its last run's stop is no preemption: the 2369 variant)."""
    cancelled = (JobState.CANCELLING, JobState.CANCELLED)
    return (
        attempt.cancel_decided_at is not None
        or attempt.outcome == AttemptOutcome.CANCELLED
        or attempt.state in cancelled
        or (job is not None and job.state in cancelled)
    )


def _ended_at_timeout(record: RequestRecord, attempt: Attempt, job: JobSnapshot, policy: DecisionPolicy) -> bool:
    """Whether the attempt's ended job ran into its timeout. Once seen, a timeout stays one: a job
    deleted while its end waits reads NOT_FOUND after. Vertex stops a job at its timeout as it stops
    a preempted one: the kit's `preempted` line of that stop is no preemption, however the attempt
    ends (a wait for late lines, a cancel, one that settled it before its end was decided)."""
    timeout = timed_out(job, job_timeout_seconds(record.request.get("custom_job") or {})) or (
        evidence_marker(KIT_TIMEOUT_KEY, attempt.n) in record.markers
    )
    if timeout and not classify_failure(job, policy.patterns).capacity:
        discount_timeout_stop(record, attempt)
    return timeout


def _settled(job: JobSnapshot, now: datetime, seconds: float) -> bool:
    ended = job.end_time or job.update_time
    return ended is not None and (now - parse_iso(ended)).total_seconds() >= seconds


def _flag_incomplete_success(record: RequestRecord, attempt: Attempt, now: datetime, effects: Effects) -> None:
    message = f"attempt {attempt.n} of {record.request_id} {INCOMPLETE_SUCCESS_REASON}; not accepted as a success"
    last_run = max(kit_runs(record, attempt.n))
    effects.lines.append(
        LogLine("WARNING", message, event_fields(record, attempt, "incomplete_success", last_run=last_run))
    )
    if record.mark(alert_marker(AlertKind.INCOMPLETE_SUCCESS, attempt.n)):
        effects.alerts.append(
            attempt_alert(record, attempt, AlertKind.INCOMPLETE_SUCCESS, now, message, last_run=last_run)
        )


def _finish(record: RequestRecord, status: RequestStatus, now: datetime) -> None:
    record.status = status
    record.finished_at = iso(now)


def _succeed(record: RequestRecord, attempt: Attempt, owns_status: bool, now: datetime, effects: Effects) -> None:
    attempt.outcome = AttemptOutcome.SUCCEEDED
    if not owns_status:
        return
    _finish(record, RequestStatus.SUCCEEDED, now)
    alert_if_finished_late(record, attempt, now, effects)
    if record.prune_requested_at is None:
        record.prune_requested_at = iso(now)
        effects.prune_requested = True
    effects.lines.append(
        LogLine(
            "INFO",
            f"{record.request_id} succeeded on attempt {attempt.n}",
            event_fields(record, attempt, "job_succeeded", preemptions=attempt.preemptions),
        )
    )


def _cancel(
    record: RequestRecord, attempt: Attempt, job: JobSnapshot, owns_status: bool, now: datetime, effects: Effects
) -> None:
    attempt.outcome = AttemptOutcome.CANCELLED
    if job.state == JobState.CANCELLED:
        vertex_cancel(record, attempt, job.end_time, now)  # by hand at Vertex: the request's cancel
    if not owns_status:
        return
    if record.cancel is None:
        _finish(record, RequestStatus.CANCELLED, now)
    elif not settle_cancel(record, now) and not record.is_terminal:
        return  # another job of the request still runs: its end settles it
    effects.lines.append(
        LogLine(
            "INFO",
            f"attempt {attempt.n} of {record.request_id} was cancelled; not re-queued",
            event_fields(record, attempt, "job_cancelled"),
        )
    )


def _fail(record: RequestRecord, attempt: Attempt, cause: FailureCause, now: datetime, effects: Effects) -> None:
    attempt.outcome = AttemptOutcome.FAILED
    _finish(record, RequestStatus.FAILED, now)
    message = f"attempt {attempt.n} of {record.request_id} failed: {cause.reason}"
    effects.lines.append(LogLine("ERROR", message, event_fields(record, attempt, "job_failed", error=attempt.error)))
    if record.mark(alert_marker(AlertKind.JOB_FAILED, attempt.n)):
        effects.alerts.append(attempt_alert(record, attempt, AlertKind.JOB_FAILED, now, message, error=attempt.error))


def _requeue_or_give_up(
    record: RequestRecord,
    attempt: Attempt,
    cause: FailureCause,
    policy: DecisionPolicy,
    now: datetime,
    effects: Effects,
) -> None:
    max_attempts = int(record.request.get("max_attempts") or policy.default_max_attempts)
    counted = counted_attempts(record, attempt.n)  # continuations after a timeout are not counted
    # A deadline outranks max_attempts: its Spot attempts ran out, on-demand finishes the work
    # (a deadline's switches use attempts too; an on-demand attempt is not preempted).
    # Never before the deployment's minimum of Spot attempts, nor where it allows no STANDARD.
    on_demand_next = (
        counted >= max_attempts
        and bool(record.request.get("deadline"))
        and attempt.strategy == SPOT
        and policy.refuses(ON_DEMAND, record, attempt.n + 1) is None
    )
    if counted >= max_attempts and not on_demand_next:
        attempt.outcome = AttemptOutcome.GAVE_UP
        _finish(record, RequestStatus.GAVE_UP, now)
        message = (
            f"{record.request_id} gave up: attempt {counted} of {max_attempts} {_ended_how(attempt)} ({cause.reason})"
        )
        effects.lines.append(
            LogLine(
                "ERROR",
                message,
                event_fields(
                    record,
                    attempt,
                    "attempts_exhausted",
                    max_attempts=max_attempts,
                    error=attempt.error,
                ),
            )
        )
        if record.mark(alert_marker(AlertKind.ATTEMPTS_EXHAUSTED, attempt.n)):
            effects.alerts.append(
                attempt_alert(
                    record,
                    attempt,
                    AlertKind.ATTEMPTS_EXHAUSTED,
                    now,
                    message,
                    max_attempts=max_attempts,
                    error=attempt.error,
                    # per attempt, as people read them: a count, or "≥1" (never 0) when an
                    # attempt ended by preemption and no evidence said how often
                    preemptions=[preemptions_text(a) for a in record.attempts],
                )
            )
        return
    following = attempt.n + 1
    location, strategy = plan_attempt(record.request, following, attempt, cause.stockout)
    # With capacity alternatives a stockout leaves the machine to the next claim, which chooses
    # again without this one (shared/fleet/capacity.py); a preemption stays on it, as it ran.
    again = bool(record.request.get("capacity")) and cause.stockout and not on_demand_next
    if record.request.get("capacity") and not again:
        strategy = attempt.strategy
    if on_demand_next:
        strategy = ON_DEMAND
    delay = policy.requeue_delay_seconds
    attempt.outcome = AttemptOutcome.REQUEUED
    record.status = RequestStatus.REQUEUED
    record.requeue = Requeue(
        attempt=following,
        location=location,
        strategy=strategy,
        reason="stockout" if cause.stockout else "preemption",
        machine=None if again else attempt.machine,
        decided_at=iso(now),
        not_before=iso(now + timedelta(seconds=delay)) if delay > 0 else None,
    )
    effects.requeue_decided = True
    effects.lines.append(
        LogLine(
            "WARNING",
            f"attempt {attempt.n} of {record.request_id} {_ended_how(attempt)}; "
            f"re-queued as attempt {following} ({strategy} in {location})",
            event_fields(
                record,
                attempt,
                "requeue",
                next_attempt=following,
                next_location=location,
                next_strategy=strategy,
                failover=location != attempt.location,
                fallback=strategy != attempt.strategy,
                not_before=record.requeue.not_before,
                reason=cause.reason,
            ),
        )
    )


def _ended_how(attempt: Attempt) -> str:
    # A FLEX_START job is never preempted: its capacity error is its maxWaitDuration running out.
    return "ended: its FLEX_START wait ran out" if attempt.strategy == FLEX_START else "ended by preemption"
