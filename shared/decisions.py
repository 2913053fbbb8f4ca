"""What a job's real state means for its request: decisions as ledger transitions, then effects.

on_job_event (a log line hinted at a change) and reconcile (polling every active request) both
read the job from Vertex, wrap it in an `Observation` and call `apply_observation`. The decision,
`decide`, is a pure function of the current ledger record; it runs under the ledger's
compare-and-swap (so it may run more than once) and returns the new record plus the effects that
belong to it (log lines, alerts, the re-queue and prune publishes). Effects run only after the
write that decided them succeeded, and every decision marks the record, so a duplicated,
concurrent or reordered delivery finds it made and decides nothing again. What must reach Pub/Sub
survives a failed publish or a lost write reply: the re-queue is confirmed in the record once
published (`settle_requeue`), and alerts and the prune request are written as pending with the
decision and cleared once published (`publish_pending`). Whoever finds them pending publishes
them, which the delivery that decided them does at once and anyone else once that delivery is
presumed dead (the claim lease): at least once, and once unless a publisher crashes mid-way.

Decisions, on the job's state as Vertex reports it (never on the log text):

- SUCCEEDED: the request succeeds; one prune request goes to the maintenance topic.
- FAILED by preemption/stockout (error code RESOURCE_EXHAUSTED, or its message matches the
  configured stockout/preemption patterns): attempt n+1 is re-queued (fallback strategy and
  failover location from `shared.request.plan_attempt`), or, when `max_attempts` is reached, the
  request GAVE_UP with an `attempts_exhausted` alert.
- FAILED otherwise, EXPIRED: the request FAILED with a `job_failed` alert; nothing is re-queued.
  A FAILED job whose error is not published yet (Vertex sets it about a minute after the end)
  is not classified until the error appears or `ERROR_SETTLE_SECONDS` pass.
- CANCELLED: the request is CANCELLED.
- Only the latest attempt of a request that is not finished decides the request's status; an
  older attempt's late events update that attempt alone.

Preemption counting rule. Two kinds of evidence exist, and neither is complete:
  * a preemption line from Vertex's service task (configured patterns), counted once per
    LogEntry `insertId` (container lines are hints only: a trainer logging "preempted" while it
    checkpoints must not count the same preemption twice);
  * a RUNNING attempt observed back in QUEUED/PENDING, counted once per observed transition.
The same preemption usually produces both, and either can be missing (a lost event, a restart
faster than a poll). The attempt's count is the larger of the two tallies, so one preemption seen
both ways counts once; the count never exceeds the preemptions that happened and is exact when
the log sink delivers. The evidence keys live in `record.markers` beside the alert keys, written
in the same compare-and-swap as the count.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from shared.alerts import PUBLISH_TIMEOUT_SECONDS, Alert, AlertPublisher
from shared.attempts import plan_attempt
from shared.clock import iso, parse_iso, utcnow
from shared.delivery import Message
from shared.errors import TransientError
from shared.events import (
    IgnoredEntry,
    Signal,
    SignalPatterns,
    classify,
    parse_log_entry,
    patterns_from,
)
from shared.ledger import (
    Attempt,
    LedgerStore,
    RequestRecord,
    Requeue,
    Status,
)
from shared.log import Logger
from shared.request import REQUEUE_ATTRIBUTES
from shared.settings import Settings
from shared.vertex import JobState, get_job, job_error, state_name

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import CustomJob, JobServiceClient
    from google.cloud.pubsub_v1 import PublisherClient

PREEMPTION_LINE_KEY = "preemption-line"
PREEMPTION_STATE_KEY = "preemption-state"
WAITING_STATES = frozenset({JobState.QUEUED, JobState.PENDING})
# A job can sit in these for too long; RUNNING is not among them: training legitimately runs
# for days, bounded by the job's own timeout.
STUCK_STATES = frozenset(
    {JobState.QUEUED, JobState.PENDING, JobState.CANCELLING, JobState.UPDATING, JobState.PAUSED}
)
# google.rpc RESOURCE_EXHAUSTED: capacity ran out (Spot stockout, regional shortage).
CAPACITY_ERROR_CODES = frozenset({8})
# How long a FAILED job may go without its error before it is classified as an ordinary failure.
ERROR_SETTLE_SECONDS = 600.0


def _vertex_time(moment: datetime | None) -> str | None:
    # Microseconds, unlike the ledger's own times: freshness compares a job's update times,
    # which can be less than a millisecond apart.
    return None if moment is None else iso(moment, timespec="microseconds")


# The inputs.


@dataclass(frozen=True)
class JobSnapshot:
    """A CustomJob as Vertex returned it, reduced to what decisions read."""

    name: str
    state: str
    error: dict[str, Any] | None = None
    create_time: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    update_time: str | None = None

    @classmethod
    def of(cls, job: CustomJob) -> JobSnapshot:
        return cls(
            name=job.name,
            state=state_name(job.state),
            error=job_error(job),
            create_time=_vertex_time(job.create_time),
            start_time=_vertex_time(job.start_time),
            end_time=_vertex_time(job.end_time),
            update_time=_vertex_time(job.update_time),
        )

    @property
    def is_terminal(self) -> bool:
        return self.state in JobState.TERMINAL


@dataclass(frozen=True)
class Observation:
    """Attempt `attempt`'s job as read just now, and what prompted the read."""

    attempt: int
    job: JobSnapshot
    signal: Signal | None = None  # the log line's hint; None when reconcile polled
    preemption_evidence: str | None = None  # insertId of a service preemption line


@dataclass(frozen=True)
class DecisionPolicy:
    patterns: SignalPatterns
    storm_threshold: int
    requeue_delay_seconds: float
    default_max_attempts: int
    stuck_after_seconds: float

    @classmethod
    def from_settings(cls, settings: Settings) -> DecisionPolicy:
        return cls(
            patterns=patterns_from(settings),
            storm_threshold=settings.preemption_storm_threshold,
            requeue_delay_seconds=settings.requeue_delay_seconds,
            default_max_attempts=settings.default_max_attempts,
            stuck_after_seconds=settings.stuck_after_seconds,
        )


# The outputs.


@dataclass(frozen=True)
class LogLine:
    severity: str
    message: str
    fields: dict[str, Any]

    @property
    def event(self) -> str:
        return str(self.fields.get("event", ""))


@dataclass
class Effects:
    """What a transition decided beyond the record itself; carried out after it is written."""

    lines: list[LogLine] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    requeue_decided: bool = False
    prune_requested: bool = False

    @property
    def events(self) -> tuple[str, ...]:
        return tuple(line.event for line in self.lines)


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


def classify_failure(job: JobSnapshot, patterns: SignalPatterns) -> FailureCause:
    """Why a FAILED/EXPIRED job failed, from its error code and message."""
    if job.state == JobState.EXPIRED:
        return FailureCause(False, False, "the job ran past its timeout")
    code = int((job.error or {}).get("code") or 0)
    message = str((job.error or {}).get("message") or "")
    stockout = code in CAPACITY_ERROR_CODES or patterns.is_stockout(message)
    capacity = stockout or patterns.is_preemption(message)
    reason = message or (f"error code {code}" if code else "no error reported")
    return FailureCause(capacity, stockout, reason)


# The decision.


def decide(
    record: RequestRecord, observation: Observation, policy: DecisionPolicy, now: datetime
) -> Decision:
    """The record after `observation`, and the effects of the change. Pure: the record is a copy
    the ledger handed over, and effects are only described, never carried out. The alerts and the
    prune request decided are also written into the record as pending (see `publish_pending`)."""
    decision = _decide(record, observation, policy, now)
    decision.record.pending_alerts.extend(alert.to_json() for alert in decision.effects.alerts)
    if decision.effects.prune_requested:
        decision.record.prune_pending = True
    return decision


def _decide(
    record: RequestRecord, observation: Observation, policy: DecisionPolicy, now: datetime
) -> Decision:
    effects = Effects()
    attempt = record.attempt(observation.attempt)
    if attempt is None or attempt.job is None:
        # The index is written before the record names the job: submit is between the two.
        return Decision(record, effects, f"attempt {observation.attempt} has no job recorded yet")
    if attempt.job != observation.job.name:
        return Decision(record, effects)  # a stray second job of the attempt: not the one it runs
    job = observation.job
    latest = record.latest
    owns_status = latest is not None and latest.n == attempt.n and not record.is_terminal
    fresh = _is_fresh(attempt, job)
    _count_preemptions(record, attempt, observation, fresh, policy, now, effects)
    if not fresh:
        return Decision(record, effects)
    _track_state(record, attempt, job, owns_status, now)
    if job.is_terminal and attempt.outcome is None:
        waiting = _conclude(record, attempt, job, owns_status, policy, now, effects)
        return Decision(record, effects, waiting)
    if owns_status:
        _flag_stuck(record, attempt, job, policy, now, effects)
    return Decision(record, effects)


def _is_fresh(attempt: Attempt, job: JobSnapshot) -> bool:
    """False for a read older than what the ledger already holds (concurrent deliveries may write
    in any order; a job never leaves a terminal state)."""
    if attempt.outcome is not None and not job.is_terminal:
        return False
    if attempt.state in (None, job.state) or not job.update_time or not attempt.state_changed_at:
        return True
    return parse_iso(job.update_time) >= parse_iso(attempt.state_changed_at)


def _track_state(
    record: RequestRecord, attempt: Attempt, job: JobSnapshot, owns_status: bool, now: datetime
) -> None:
    if attempt.state != job.state or attempt.state_changed_at is None:
        attempt.state = job.state
        attempt.state_changed_at = job.update_time or iso(now)
    if job.start_time and not attempt.started_at:
        attempt.started_at = job.start_time
    started = job.state == JobState.RUNNING
    if owns_status and started and record.status in (Status.CLAIMED, Status.SUBMITTED):
        record.status = Status.RUNNING


def _evidence(record: RequestRecord, kind: str, n: int) -> int:
    prefix = f"{kind}:{n}:"
    return sum(1 for key in record.markers if key.startswith(prefix))


def _count_preemptions(
    record: RequestRecord,
    attempt: Attempt,
    observation: Observation,
    fresh: bool,
    policy: DecisionPolicy,
    now: datetime,
    effects: Effects,
) -> None:
    n = attempt.n
    if observation.preemption_evidence:
        key = f"{PREEMPTION_LINE_KEY}:{n}:{observation.preemption_evidence}"
        if key not in record.markers:
            record.markers.append(key)
    job = observation.job
    if fresh and attempt.state == JobState.RUNNING and job.state in WAITING_STATES:
        seen = _evidence(record, PREEMPTION_STATE_KEY, n)
        record.markers.append(f"{PREEMPTION_STATE_KEY}:{n}:{seen + 1}")
    by_line = _evidence(record, PREEMPTION_LINE_KEY, n)
    by_state = _evidence(record, PREEMPTION_STATE_KEY, n)
    counted = max(by_line, by_state)
    if counted <= attempt.preemptions:
        return
    attempt.preemptions = counted
    effects.lines.append(
        LogLine(
            "WARNING",
            f"attempt {n} of {record.request_id} was preempted ({counted} so far)",
            _fields(
                record,
                attempt,
                "preemption",
                preemptions=counted,
                source="log" if by_line >= by_state else "state",
            ),
        )
    )
    storm_key = f"preemption_storm:{n}"
    if counted > policy.storm_threshold and storm_key not in record.markers:
        record.markers.append(storm_key)
        effects.alerts.append(
            _alert(
                record,
                attempt,
                "preemption_storm",
                "WARNING",
                now,
                f"attempt {n} of {record.request_id} was preempted {counted} times "
                f"(threshold {policy.storm_threshold})",
                preemptions=counted,
                threshold=policy.storm_threshold,
            )
        )


def _conclude(
    record: RequestRecord,
    attempt: Attempt,
    job: JobSnapshot,
    owns_status: bool,
    policy: DecisionPolicy,
    now: datetime,
    effects: Effects,
) -> str | None:
    if job.state == JobState.FAILED and job.error is None and not _settled(job, now):
        return f"job {job.name} failed and its error is not published yet"
    attempt.ended_at = job.end_time or iso(now)
    attempt.error = job.error
    if job.state == JobState.SUCCEEDED:
        _succeed(record, attempt, owns_status, now, effects)
    elif job.state == JobState.CANCELLED:
        _cancel(record, attempt, owns_status, now, effects)
    else:
        cause = classify_failure(job, policy.patterns)
        if not owns_status:
            later = record.latest is not None and record.latest.n > attempt.n
            attempt.outcome = "requeued" if cause.capacity and later else "failed"
        elif cause.capacity:
            _requeue_or_give_up(record, attempt, cause, policy, now, effects)
        else:
            _fail(record, attempt, cause, now, effects)
    return None


def _settled(job: JobSnapshot, now: datetime) -> bool:
    ended = job.end_time or job.update_time
    return ended is not None and (now - parse_iso(ended)).total_seconds() >= ERROR_SETTLE_SECONDS


def _finish(record: RequestRecord, status: str, now: datetime) -> None:
    record.status = status
    record.finished_at = iso(now)


def _succeed(
    record: RequestRecord, attempt: Attempt, owns_status: bool, now: datetime, effects: Effects
) -> None:
    attempt.outcome = "succeeded"
    if not owns_status:
        return
    _finish(record, Status.SUCCEEDED, now)
    if record.prune_requested_at is None:
        record.prune_requested_at = iso(now)
        effects.prune_requested = True
    effects.lines.append(
        LogLine(
            "INFO",
            f"{record.request_id} succeeded on attempt {attempt.n}",
            _fields(record, attempt, "job_succeeded", preemptions=attempt.preemptions),
        )
    )


def _cancel(
    record: RequestRecord, attempt: Attempt, owns_status: bool, now: datetime, effects: Effects
) -> None:
    attempt.outcome = "cancelled"
    if not owns_status:
        return
    _finish(record, Status.CANCELLED, now)
    effects.lines.append(
        LogLine(
            "INFO",
            f"attempt {attempt.n} of {record.request_id} was cancelled; not re-queued",
            _fields(record, attempt, "job_cancelled"),
        )
    )


def _fail(
    record: RequestRecord, attempt: Attempt, cause: FailureCause, now: datetime, effects: Effects
) -> None:
    attempt.outcome = "failed"
    _finish(record, Status.FAILED, now)
    message = f"attempt {attempt.n} of {record.request_id} failed: {cause.reason}"
    effects.lines.append(
        LogLine("ERROR", message, _fields(record, attempt, "job_failed", error=attempt.error))
    )
    key = f"job_failed:{attempt.n}"
    if key not in record.markers:
        record.markers.append(key)
        effects.alerts.append(
            _alert(record, attempt, "job_failed", "ERROR", now, message, error=attempt.error)
        )


def _requeue_or_give_up(
    record: RequestRecord,
    attempt: Attempt,
    cause: FailureCause,
    policy: DecisionPolicy,
    now: datetime,
    effects: Effects,
) -> None:
    max_attempts = int(record.request.get("max_attempts") or policy.default_max_attempts)
    if attempt.n >= max_attempts:
        attempt.outcome = "gave_up"
        _finish(record, Status.GAVE_UP, now)
        message = (
            f"{record.request_id} gave up: attempt {attempt.n} of {max_attempts} ended by "
            f"preemption ({cause.reason})"
        )
        effects.lines.append(
            LogLine(
                "ERROR",
                message,
                _fields(
                    record,
                    attempt,
                    "attempts_exhausted",
                    max_attempts=max_attempts,
                    error=attempt.error,
                ),
            )
        )
        key = f"attempts_exhausted:{attempt.n}"
        if key not in record.markers:
            record.markers.append(key)
            effects.alerts.append(
                _alert(
                    record,
                    attempt,
                    "attempts_exhausted",
                    "ERROR",
                    now,
                    message,
                    max_attempts=max_attempts,
                    error=attempt.error,
                    preemptions=[a.preemptions for a in record.attempts],
                )
            )
        return
    following = attempt.n + 1
    location, strategy = plan_attempt(record.request, following, attempt, cause.stockout)
    delay = policy.requeue_delay_seconds
    attempt.outcome = "requeued"
    record.status = Status.REQUEUED
    record.requeue = Requeue(
        attempt=following,
        location=location,
        strategy=strategy,
        reason="stockout" if cause.stockout else "preemption",
        decided_at=iso(now),
        not_before=iso(now + timedelta(seconds=delay)) if delay > 0 else None,
    )
    effects.requeue_decided = True
    effects.lines.append(
        LogLine(
            "WARNING",
            f"attempt {attempt.n} of {record.request_id} ended by preemption; "
            f"re-queued as attempt {following} ({strategy} in {location})",
            _fields(
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


def _flag_stuck(
    record: RequestRecord,
    attempt: Attempt,
    job: JobSnapshot,
    policy: DecisionPolicy,
    now: datetime,
    effects: Effects,
) -> None:
    if job.state not in STUCK_STATES or not attempt.state_changed_at:
        return
    stuck_for = (now - parse_iso(attempt.state_changed_at)).total_seconds()
    key = f"job_stuck:{attempt.n}:{job.state}"
    if stuck_for < policy.stuck_after_seconds or key in record.markers:
        return
    record.markers.append(key)
    message = (
        f"attempt {attempt.n} of {record.request_id} has been {job.state} for {stuck_for:.0f} s"
    )
    effects.lines.append(
        LogLine(
            "WARNING",
            message,
            _fields(record, attempt, "job_stuck", state=job.state, stuck_seconds=round(stuck_for)),
        )
    )
    effects.alerts.append(
        _alert(
            record,
            attempt,
            "job_stuck",
            "WARNING",
            now,
            message,
            state=job.state,
            stuck_seconds=round(stuck_for),
        )
    )


def _fields(record: RequestRecord, attempt: Attempt, event: str, **extra: Any) -> dict[str, Any]:
    return {
        "event": event,
        "request_id": record.request_id,
        "attempt": attempt.n,
        "job": attempt.job,
        "location": attempt.location,
        **extra,
    }


def _alert(
    record: RequestRecord,
    attempt: Attempt,
    kind: str,
    severity: str,
    now: datetime,
    message: str,
    **details: Any,
) -> Alert:
    return Alert(
        kind=kind,
        severity=severity,
        message=message,
        request_id=record.request_id,
        attempt=attempt.n,
        job=attempt.job,
        details={"location": attempt.location, "strategy": attempt.strategy, **details},
        time=iso(now),
    )


# Carrying decisions out.


@dataclass(frozen=True)
class Ports:
    """The clients decisions need, passed in. Heavy ones are factories, called on first use."""

    settings: Settings
    ledger: LedgerStore
    publisher: Callable[[], PublisherClient]
    job_service: Callable[[str], JobServiceClient]

    def topic_path(self, topic: str) -> str:
        return f"projects/{self.settings.project}/topics/{topic}"

    def read_job(self, location: str, name: str) -> JobSnapshot:
        return JobSnapshot.of(get_job(self.job_service(location), name))

    def publish(self, topic: str, payload: dict[str, Any], **attributes: str) -> str:
        future = self.publisher().publish(
            self.topic_path(topic),
            json.dumps(payload, separators=(",", ":")).encode(),
            **attributes,
        )
        return future.result(timeout=PUBLISH_TIMEOUT_SECONDS)


def default_ports() -> Ports:
    """Ports on the process-wide clients (the deployed functions' wiring)."""
    from shared import clients
    from shared.settings import get_settings

    settings = get_settings()
    return Ports(
        settings=settings,
        ledger=LedgerStore(clients.storage_client().bucket(settings.state_bucket)),
        publisher=clients.publisher,
        job_service=clients.job_service,
    )


@dataclass(frozen=True)
class Applied:
    """What one observation did to its request."""

    record: RequestRecord | None
    events: tuple[str, ...] = ()  # the decisions this call took (event names of their log lines)
    waiting: str | None = None  # why the observation, or a re-queue, must be looked at again
    requeue_message_id: str | None = None


def apply_observation(
    ports: Ports, request_id: str, observation: Observation, log: Logger
) -> Applied:
    """Decide under compare-and-swap, then carry out what this call decided, and what earlier
    decisions left pending once their deciders are presumed dead."""
    policy = DecisionPolicy.from_settings(ports.settings)
    last: Decision | None = None

    def transition(record: RequestRecord | None) -> RequestRecord | None:
        nonlocal last
        last = None if record is None else decide(record, observation, policy, utcnow())
        return last.record if last else None

    stored = ports.ledger.update(request_id, transition)
    if last is None or stored is None:
        return Applied(None)
    # Not the record this call proposed: another delivery decided (or our own write landed
    # before its reply was lost), so only what is still pending in the record is carried out.
    decided_here = stored is last.record
    effects = last.effects if decided_here else Effects()
    for line in effects.lines:
        log.log(line.severity, line.message, **line.fields)
    settled: tuple[str | None, str | None] = (None, None)
    pending_wait: str | None = None

    def requeue() -> None:
        nonlocal settled
        settled = settle_requeue(
            ports, stored, log, decided_here=effects.requeue_decided, now=utcnow()
        )

    def pending() -> None:
        nonlocal pending_wait
        # Ours to publish at once only if this call's own write made them pending.
        made_pending = bool(effects.alerts or effects.prune_requested)
        pending_wait = publish_pending(ports, stored, decided_here=made_pending, now=utcnow())

    _run_all([requeue, pending])
    message_id, in_flight = settled
    return Applied(stored, effects.events, last.waiting or in_flight or pending_wait, message_id)


def _run_all(steps: list[Callable[[], object]]) -> None:
    """Run every effect even if an earlier one fails (an alert must not stop a re-queue), then
    raise the first failure so the delivery is retried or reported."""
    failure: Exception | None = None
    for step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - re-raised below once every effect was tried
            failure = failure or exc
    if failure is not None:
        raise failure


def publish_pending(
    ports: Ports, record: RequestRecord, *, decided_here: bool, now: datetime
) -> str | None:
    """Publish the record's pending alerts and prune request, then clear the ones published.

    Returns a reason to look again when they are left to the delivery that decided them: anyone
    else publishes them only once that one is presumed dead (decided longer than the claim lease
    ago), so concurrent deliveries of one event do not each send the alert. Raises the first
    failed publish after trying them all; what failed stays pending.
    """
    if not record.has_pending_effects:
        return None
    decided_for = (now - _pending_since(record)).total_seconds()
    if not decided_here and decided_for < ports.settings.claim_lease_seconds:
        return f"effects decided for {record.request_id} are being published by another delivery"
    published_alerts: list[dict[str, Any]] = []
    prune_published = False

    def prune() -> None:
        nonlocal prune_published
        ports.publish(
            ports.settings.maintenance_topic, {"task": "prune", "request_id": record.request_id}
        )
        prune_published = True

    alerts = AlertPublisher(ports.publisher(), ports.topic_path(ports.settings.ops_alerts_topic))

    def alert(payload: dict[str, Any]) -> None:
        alerts.publish(Alert(**payload))
        published_alerts.append(payload)

    steps: list[Callable[[], object]] = [prune] if record.prune_pending else []
    steps.extend(functools.partial(alert, payload) for payload in record.pending_alerts)

    def clear(current: RequestRecord | None) -> RequestRecord | None:
        if current is None:
            return None
        current.pending_alerts = [a for a in current.pending_alerts if a not in published_alerts]
        current.prune_pending = current.prune_pending and not prune_published
        return current

    try:
        _run_all(steps)
    finally:
        if published_alerts or prune_published:
            ports.ledger.update(record.request_id, clear)
    return None


def _pending_since(record: RequestRecord) -> datetime:
    """When the youngest pending effect was decided."""
    moments = [parse_iso(alert["time"]) for alert in record.pending_alerts]
    if record.prune_pending and record.prune_requested_at:
        moments.append(parse_iso(record.prune_requested_at))
    return max(moments, default=datetime.min.replace(tzinfo=timezone.utc))


def attempt_envelope(request: dict[str, Any], attempt: int, location: str) -> dict[str, Any]:
    """The canonical envelope as re-published for `attempt` in `location`.

    Optional fields that are empty are left out, as a publisher would write them: absent means
    the same to the reader, which rejects an empty `locations` list.
    """
    present = {key: value for key, value in request.items() if value is not None and value != []}
    return {**present, "attempt": attempt, "location": location}


def publish_request_attempt(
    ports: Ports, record: RequestRecord, attempt: int, location: str
) -> str:
    """Publish attempt `attempt` to job-requests (submit's claim absorbs duplicates)."""
    envelope = attempt_envelope(record.request, attempt, location)
    return ports.publish(
        ports.settings.job_requests_topic,
        envelope,
        request_id=record.request_id,
        **REQUEUE_ATTRIBUTES,  # marks the system's own message: submit reads its `attempt`
    )


def settle_requeue(
    ports: Ports, record: RequestRecord, log: Logger, *, decided_here: bool, now: datetime
) -> tuple[str | None, str | None]:
    """Publish a decided, unconfirmed re-queue, then confirm it in the ledger.

    Returns (message id if published now, reason to look again if it is left for later). The
    delivery that decided a re-queue publishes it at once (unless delayed). Anyone else publishes
    it only once it is due and its decider is presumed dead (decided longer than the claim lease
    ago), so ten concurrent deliveries of one terminal event publish it once; a delayed re-queue
    is published by reconcile once `not_before` has passed.
    """
    requeue = record.requeue
    if requeue is None:
        return None, None
    if requeue.message_id:
        # Published, yet not claimed: if that lasts, the message was lost (dead-lettered after
        # its deliveries ran out). Publish it again; submit's claim absorbs a duplicate.
        published_at = parse_iso(requeue.published_at or requeue.decided_at)
        unclaimed_for = (now - published_at).total_seconds()
        if decided_here or unclaimed_for < ports.settings.unclaimed_requeue_seconds:
            return None, None
    elif requeue.not_before and parse_iso(requeue.not_before) > now:
        return None, None
    else:
        decided_for = (now - parse_iso(requeue.decided_at)).total_seconds()
        abandoned = decided_for >= ports.settings.claim_lease_seconds
        if not (decided_here or requeue.not_before or abandoned):
            return None, f"attempt {requeue.attempt} is being re-queued by another delivery"
    message_id = publish_request_attempt(ports, record, requeue.attempt, requeue.location)

    def confirm(current: RequestRecord | None) -> RequestRecord | None:
        pending = current.requeue if current else None
        if pending is None or pending.attempt != requeue.attempt:
            return None  # submit already claimed it
        if pending.message_id != requeue.message_id:
            return None  # another publish was confirmed first
        pending.message_id = message_id
        pending.published_at = iso(now)
        return current

    ports.ledger.update(record.request_id, confirm)
    log.info(
        f"published attempt {requeue.attempt} of {record.request_id} to job-requests",
        event="requeue_published",
        request_id=record.request_id,
        attempt=requeue.attempt,
        location=requeue.location,
        strategy=requeue.strategy,
        published_message_id=message_id,
    )
    return message_id, None


# The event path (on_job_event).


class EventOutcome(enum.Enum):
    IGNORED = "ignored"  # not a job log entry at all
    IRRELEVANT = "irrelevant"  # a job's line that says nothing about its state
    STALE = "stale"  # older than the maximum event age
    FOREIGN = "foreign"  # a job spotjobs did not create
    OBSERVED = "observed"  # the job was read from Vertex and decided on


def handle_job_event(
    message: Message,
    log: Logger,
    *,
    settings: Settings,
    ports: Callable[[], Ports],
    now: datetime | None = None,
) -> EventOutcome:
    """One job-events message. Returns what it was; raises TransientError to be redelivered.

    Only a relevant line of a job in the index costs a Vertex call; anything else is acknowledged
    with one DEBUG/INFO line. `ports` is called only for a relevant line, so a cold instance that
    sees container chatter never creates a client.
    """
    try:
        entry = parse_log_entry(message.data)
    except IgnoredEntry as exc:
        log.debug(
            "ignored a message that is not a job log entry", event="ignored_event", reason=str(exc)
        )
        return EventOutcome.IGNORED
    signal = classify(entry, patterns_from(settings))
    log = log.bind(job_id=entry.job_id, insert_id=entry.insert_id)
    if not signal.is_relevant:
        log.debug(
            "ignored a job log line that says nothing about its state",
            event="irrelevant_event",
            task_name=entry.task_name,
        )
        return EventOutcome.IRRELEVANT
    age = entry.age_seconds(now or utcnow())
    if age is not None and age > settings.max_event_age_seconds:
        log.warning(
            "dropped a job log entry older than the maximum event age",
            event="stale_event",
            age_seconds=round(age, 1),
            max_age_seconds=settings.max_event_age_seconds,
        )
        return EventOutcome.STALE
    wired = ports()
    index = wired.ledger.find_job(entry.job_id)
    if index is None:
        log.info(
            "ignored a log entry of a job spotjobs did not create",
            event="foreign_job",
            signal=signal.value,
        )
        return EventOutcome.FOREIGN
    counted = signal is Signal.PREEMPTION and entry.is_service_line
    observation = Observation(
        attempt=index.attempt,
        job=wired.read_job(index.location, index.job),
        signal=signal,
        preemption_evidence=entry.identity if counted else None,
    )
    applied = apply_observation(
        wired, index.request_id, observation, log.bind(request_id=index.request_id)
    )
    if applied.waiting:
        raise TransientError(applied.waiting)
    return EventOutcome.OBSERVED
