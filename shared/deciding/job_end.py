"""What a job's end means for its request: `conclude`, which `shared.deciding.decisions.decide` asks
on a fresh read of an ended job whose attempt has no outcome yet. It sets the attempt's outcome
and, when the attempt owns the request's status (`owns_status`: the latest attempt of a request
that is not finished), the request's, with the log lines and alerts that go with it.

On the job's state as Vertex reports it (never on the log text):

- SUCCEEDED: the request succeeds; one prune request goes to the maintenance topic. Unless the
  trainer kit's lines show the job's last run preempted and never finished (a process that exits
  0 after SIGTERM, as Lightning 2.6 does): then the attempt is re-queued like a preempted one (the
  next resumes from its checkpoints) with one `incomplete_success` alert. A job whose kit spoke
  but whose last run has not said `run_finished` yet is decided once it does, or once
  `kit_lines_settle_seconds` passed after the job's end (the last lines may still be on their way).
- FAILED by preemption/stockout (error code RESOURCE_EXHAUSTED, or its message matches the
  configured stockout/preemption patterns): attempt n+1 is re-queued (fallback strategy and
  failover location from `shared.requests.attempts.plan_attempt`), or, when `max_attempts` is reached, the
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

Whether a job ran into its timeout (`ended_at_timeout`) is asked by `decide` too, of a job whose
attempt a cancel settled before its end was concluded.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.alerts import AlertKind
from shared.clock import iso, parse_iso
from shared.deciding.continuations import (
    continue_or_fail,
    counted_attempts,
    job_timeout_seconds,
    made_progress,
    timed_out,
)
from shared.deciding.deadline_watch import alert_if_finished_late
from shared.deciding.decision_policy import DecisionPolicy
from shared.deciding.effects import Effects, LogLine, attempt_alert, event_fields
from shared.deciding.events import SignalPatterns
from shared.deciding.folder_progress import FolderProgress
from shared.deciding.preemptions import (
    KIT_TIMEOUT_KEY,
    count_preemptions,
    discount_timeout_stop,
    kit_runs,
    last_run_ended_by_preemption,
    last_run_unfinished,
    preempted_in_last_run,
    preemption_ended_last_run,
    preemptions_text,
)
from shared.jobs import FLEX_START, JobSnapshot, JobState
from shared.ledger.cancelling import settle_cancel, vertex_cancel
from shared.ledger.records import Attempt, RequestRecord, Requeue, alert_marker, evidence_marker
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.requests.attempts import ON_DEMAND, SPOT, plan_attempt

# google.rpc RESOURCE_EXHAUSTED: capacity ran out (Spot stockout, regional shortage).
CAPACITY_ERROR_CODES = frozenset({8})
# How long a FAILED job may go without its error before it is classified as an ordinary failure.
ERROR_SETTLE_SECONDS = 600.0
INCOMPLETE_SUCCESS_REASON = "ended SUCCEEDED, but the trainer kit saw its last run preempted and never finish"


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


def conclude(
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
    """The outcome of `attempt` from its ended `job` (and the request's, when `owns_status`), with
    its effects; or, returned, why it cannot be decided yet (an error, a kit line, still to come)."""
    if job.state == JobState.FAILED and job.error is None and not _settled(job, now, ERROR_SETTLE_SECONDS):
        return f"job {job.name} failed and its error is not published yet"
    # Vertex's SUCCEEDED says the process exited 0, not that training finished (docs/signals.md):
    # with the kit in the job, its last run's lines (run_finished, or preempted) settle it.
    succeeded = job.state == JobState.SUCCEEDED
    if succeeded and last_run_unfinished(record, attempt.n) and not _settled(job, now, policy.kit_lines_settle_seconds):
        return f"job {job.name} succeeded; waiting for its last run's kit lines (run_finished or preempted)"
    incomplete = succeeded and preempted_in_last_run(record, attempt.n)
    timeout = ended_at_timeout(record, attempt, job, policy)
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


def ended_at_timeout(record: RequestRecord, attempt: Attempt, job: JobSnapshot, policy: DecisionPolicy) -> bool:
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
