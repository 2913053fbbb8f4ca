"""What a job's real state means for its request: `decide`, a pure function of the ledger record.

on_job_event (a log line hinted at a change), reconcile (polling every active request) and submit
(a job found after the fact) read the job from Vertex, wrap it in an `Observation` and hand it to
`shared.deciding.applying.apply_observation`, which runs `decide` under the ledger's compare-and-swap (so it
may run more than once) and carries out the effects afterwards. `decide` returns the new record
plus the effects that belong to it (log lines, alerts, the re-queue and prune request); every
decision marks the record, so a duplicated, concurrent or reordered delivery finds it made and
decides nothing again. What must reach Pub/Sub is written pending into the record with the
decision and published by the outbox (`shared.deciding.outbox`).

What an observation is decided on, the job's state as Vertex reports it (never on the log text):

- An ended job whose attempt has no outcome yet: what its end means for the request (a success,
  a re-queue after a preemption or a stockout, a give-up, a failure, a continuation after the job
  timeout, a cancel) is `shared.deciding.job_end.conclude`.
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

The parts with a life of their own are modules of their own: the job's end (`job_end`), what the
deployment's settings say of decisions (`decision_policy`), counting preemptions (`preemptions`),
the deadline rule (`deadline_watch`), whether a read is fresh and what it says of the job's waits
(`waits`), when a job is stuck (`stuck`), applying under compare-and-swap (`applying`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from spotjobs_kit.lines import PREEMPTED, KitRecord

from shared.clock import iso, parse_rfc3339
from shared.deciding.budget_watch import budget_refuses, watch_budget
from shared.deciding.deadline_watch import FleetView, alert_if_missed_while_ending, note_progress, watch_deadline
from shared.deciding.decision_policy import DecisionPolicy
from shared.deciding.effects import Effects, LogLine, event_fields
from shared.deciding.events import Signal
from shared.deciding.folder_progress import FolderProgress
from shared.deciding.job_end import conclude, ended_at_timeout
from shared.deciding.preemptions import count_preemptions, discount_cancel_stop, note_kit_line
from shared.deciding.stuck import flag_ended_wait, flag_stuck, wait_ended_by
from shared.deciding.waits import is_fresh, take_read, take_wait_read, takes_wait_read
from shared.jobs import JobSnapshot, JobState
from shared.ledger.cancelling import settle_cancel
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome, RequestStatus


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


# The output.


@dataclass(frozen=True)
class Decision:
    record: RequestRecord
    effects: Effects
    # Set when the observation cannot be decided yet; the event path retries, reconcile comes back.
    waiting: str | None = None


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
        ended_at_timeout(record, attempt, job, policy)
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
    latest = record.latest
    owns_status = latest is not None and latest.n == attempt.n and not record.is_terminal
    if job is not None and not fresh and attempt.ending:
        if takes_wait_read(attempt, job):  # a switched or moved attempt's job, not ended: its waits alone
            ended_wait = wait_ended_by(attempt, job, seen_at)
            take_wait_read(attempt, job, now)
            if owns_status:
                flag_ended_wait(record, attempt, job, policy.stuck_after_seconds, now, effects, ended_wait)
        flag_stuck(record, attempt, job, policy.stuck_after_seconds, now, effects, seen_at)  # cancelled, not ended yet
        _watch_deadline(record, attempt, policy, now, effects, fleet, read_at_vertex=True, seen_at=seen_at)
    if job is None or not fresh:
        return Decision(record, effects)
    was_ending = attempt.ending
    ended_wait = wait_ended_by(attempt, job, seen_at)
    take_read(attempt, job, now, observation.read_at)
    if owns_status and job.state == JobState.RUNNING and record.status == RequestStatus.SUBMITTED:
        record.status = RequestStatus.RUNNING
    if was_ending and not attempt.ending:
        _release_successor(record, attempt, job, now, effects)
    if job.is_terminal and attempt.outcome is None:
        waiting = conclude(record, attempt, job, owns_status, policy, now, seen_at, effects, folder)
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
