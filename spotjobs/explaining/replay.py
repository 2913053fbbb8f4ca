"""The decision replayed offline: `shared.deciding.decisions.decide` on a ledger record made up for a job.

Request and attempt come from the job's `spotjobs-request-id` / `spotjobs-attempt` labels, earlier
attempts re-queued, max_attempts the deployment's default. The job's kit lines are fed first, in
order (and the insertId of any per-preemption service line), then the job as described.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spotjobs_kit.lines import KitRecord

    from shared.settings import Settings
    from spotjobs.explaining.reading import DescribedJob, ParsedEntry


@dataclass
class Replay:
    """The decision on a made-up ledger record for the job of --job."""

    job: str
    request_id: str
    attempt: int
    location: str
    strategy: str
    state: str
    error: dict[str, Any] | None
    max_attempts: int
    kit_lines_fed: int
    preemption_lines_fed: int
    status: str
    outcome: str | None
    preemptions: str
    requeue: dict[str, Any] | None
    alerts: list[str]
    events: list[str]
    prune_requested: bool
    waiting: str | None
    notes: list[str] = field(default_factory=list)


def replay_decision(
    ordered: list[ParsedEntry],
    patterns: Any,
    settings: Settings,
    described: DescribedJob,
    now: datetime | None,
) -> Replay:
    from shared.clock import utcnow
    from shared.deciding.decision_policy import DecisionPolicy
    from shared.deciding.decisions import Observation, decide
    from shared.deciding.events import Signal, classify
    from shared.deciding.preemptions import preemptions_text
    from shared.jobs import LABEL_ATTEMPT, LABEL_REQUEST_ID, JobState
    from shared.ledger.records import Attempt, RequestRecord
    from shared.ledger.states import AttemptOutcome, RequestStatus

    now = now or utcnow()
    snapshot, labels, strategy = described.snapshot, described.labels, described.strategy
    notes: list[str] = []
    request_id = labels.get(LABEL_REQUEST_ID) or ""
    if not request_id:
        notes.append(
            f"the job has no {LABEL_REQUEST_ID} label: spotjobs did not create it, and on_job_event "
            "would ignore its entries (foreign_job); replayed as if it had"
        )
        request_id = "(unlabelled)"
    raw_attempt = labels.get(LABEL_ATTEMPT) or ""
    n = int(raw_attempt) if raw_attempt.isdigit() and int(raw_attempt) > 0 else 1
    if str(n) != raw_attempt:
        notes.append(f"the job's {LABEL_ATTEMPT} label is {raw_attempt or 'missing'}: taken as attempt {n}")
    location = _location(snapshot.name)
    created = snapshot.create_time or now.isoformat()
    attempts = [Attempt(k, location, "SPOT", claimed_at=created, outcome=AttemptOutcome.REQUEUED) for k in range(1, n)]
    attempts.append(
        Attempt(
            n,
            location,
            strategy,
            claimed_at=created,
            job=snapshot.name,
            state=JobState.QUEUED,
            created_at=snapshot.create_time,
        )
    )
    envelope = {
        "schema_version": 1,
        "request_id": request_id,
        "location": location,
        "locations": [],
        "fallback": None,
        "checkpoints": None,
    }
    record = RequestRecord(request_id, envelope, "", status=RequestStatus.SUBMITTED, attempts=attempts)
    policy = DecisionPolicy.from_settings(settings)
    events: list[str] = []
    alerts: list[str] = []
    kit_fed = lines_fed = other_jobs = untrusted = 0
    job_id = _job_id(snapshot.name)
    for item in ordered:
        entry = item.entry
        if entry is None:
            continue
        if entry.job_id != job_id:
            other_jobs += 1
            continue
        signal = classify(entry, patterns)
        if entry.kit is not None:
            if unsigned_by(described, entry.kit):
                untrusted += 1
                continue
            observation = Observation(n, None, Signal.KIT, kit=entry.kit, job_name=snapshot.name)
            kit_fed += 1
        elif signal is Signal.PREEMPTION and entry.is_service_line:
            observation = Observation(n, None, signal, preemption_evidence=entry.identity, job_name=snapshot.name)
            lines_fed += 1
        else:
            continue
        decision = decide(record, observation, policy, now)
        record = decision.record
        events += decision.effects.events
        alerts += [a.kind for a in decision.effects.alerts]
    decision = decide(record, Observation(n, snapshot), policy, now)
    record = decision.record
    events += decision.effects.events
    alerts += [a.kind for a in decision.effects.alerts]
    if untrusted:
        notes.append(
            f"{untrusted} kit line(s) of the job were not fed: unsigned, signed with another key, or naming "
            f"another request or attempt than its own (request {request_id}, attempt {n}); on_job_event "
            "ignores them (docs/security.md). An old kit signs nothing: check SPOTJOBS_REQUEST_ID/"
            "SPOTJOBS_ATTEMPT in the container and the kit's version"
        )
    if other_jobs:
        notes.append(f"{other_jobs} entries of other jobs were not fed to this job's decision")
    attempt = record.attempt(n)
    assert attempt is not None
    requeue = None
    if record.requeue is not None and record.requeue.attempt == n + 1:
        requeue = {
            "attempt": record.requeue.attempt,
            "location": record.requeue.location,
            "strategy": record.requeue.strategy,
            "reason": record.requeue.reason,
        }
    return Replay(
        job=snapshot.name,
        request_id=request_id,
        attempt=n,
        location=location,
        strategy=strategy,
        state=snapshot.state,
        error=snapshot.error,
        max_attempts=policy.default_max_attempts,
        kit_lines_fed=kit_fed,
        preemption_lines_fed=lines_fed,
        status=str(record.status),
        outcome=str(attempt.outcome) if attempt.outcome else None,
        preemptions=preemptions_text(attempt),
        requeue=requeue,
        alerts=alerts,
        events=events,
        prune_requested=decision.effects.prune_requested,
        waiting=decision.waiting,
        notes=notes,
    )


def unsigned_by(described: DescribedJob, kit: KitRecord) -> bool:
    """What on_job_event would not count (shared/observe.py): a line that does not name the job's
    own request and attempt (its labels), or is not signed with the key in its env."""
    from spotjobs_kit.lines import is_signed_with

    from shared.jobs import LABEL_ATTEMPT, LABEL_REQUEST_ID

    named = kit.request_id == described.labels.get(LABEL_REQUEST_ID) and str(kit.attempt) == described.labels.get(
        LABEL_ATTEMPT
    )
    return not named or not is_signed_with(kit, described.kit_key)


def _job_id(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _location(name: str) -> str:
    parts = name.split("/")
    return parts[parts.index("locations") + 1] if "locations" in parts[:-1] else ""
