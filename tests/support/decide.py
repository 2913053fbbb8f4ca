"""Records, jobs and the policy the pure `decide` tests build on."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.clock import iso
from shared.deciding.decision_policy import DecisionPolicy
from shared.deciding.preemptions import KIT_PREEMPTED_KEY, KIT_RUN_KEY
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt, CancelIntent, RequestRecord, evidence_marker
from shared.ledger.states import RequestStatus
from shared.settings import Settings

NOW = datetime(2026, 11, 29, 18, 0, 0, tzinfo=UTC)


POLICY = DecisionPolicy.from_settings(Settings())
# A deadline is accepted only where STANDARD is an allowed fallback (shared/requests/policy.py).
DEADLINE_POLICY = replace(POLICY, allowed_fallback_strategies=("STANDARD",))


JOB1 = "projects/p/locations/us-central1/customJobs/111"


USER_ERROR = {"code": 3, "message": "The replica workerpool0-0 exited with a non-zero status of 1."}


def at(seconds: float) -> str:
    return iso(NOW - timedelta(seconds=600) + timedelta(seconds=seconds))


def make_record(
    *,
    status: str = RequestStatus.SUBMITTED,
    state: str | None = JobState.QUEUED,
    request: dict[str, Any] | None = None,
    attempts: list[Attempt] | None = None,
) -> RequestRecord:
    envelope = {
        "schema_version": 1,
        "request_id": "req-1",
        "custom_job": {"displayName": "train"},
        "location": "us-central1",
        "locations": [],
        "max_attempts": 3,
        "fallback": None,
        "checkpoints": None,
        **(request or {}),
    }
    first = Attempt(1, "us-central1", "SPOT", claimed_at=at(0), job=JOB1, state=state, created_at=at(1))
    return RequestRecord("req-1", envelope, "gs://ckpt/requests/req-1/", status=status, attempts=attempts or [first])


def job(state: str, *, update: float = 100, name: str = JOB1, error: dict[str, Any] | None = None) -> JobSnapshot:
    terminal = state in JobState.TERMINAL
    return JobSnapshot(
        name=name,
        state=state,
        error=error,
        create_time=at(1),
        start_time=at(10) if state != JobState.QUEUED else None,
        end_time=at(update) if terminal else None,
        update_time=at(update),
    )


# A request due an hour after NOW, of 1,000 one-second steps and a minute's changeover.
DEADLINE = NOW + timedelta(hours=1)
DEADLINE_STEPS, DEADLINE_CHANGEOVER = 1000, 60.0


def running_toward_deadline(committed: int) -> RequestRecord:
    """A RUNNING request due at DEADLINE, its job running since just over a changeover before NOW,
    `committed` of its DEADLINE_STEPS committed."""
    request = {
        "deadline": iso(DEADLINE),
        "total_steps": DEADLINE_STEPS,
        "expected_step_seconds": 1.0,
        "changeover_seconds": DEADLINE_CHANGEOVER,
    }
    record = make_record(request=request, status=RequestStatus.RUNNING, state=JobState.RUNNING)
    record.attempts[0].started_at = iso(NOW - timedelta(seconds=DEADLINE_CHANGEOVER + 1))
    record.attempts[0].last_checkpoint = [0, committed]
    return record


def ended_then_cancelled(record: RequestRecord, snapshot: JobSnapshot) -> RequestRecord:
    """Seed 2369's record: reconcile recorded attempt 1's ended job (`snapshot`) with the kit's
    kept `run_started` and `preempted` lines and died before deciding its end; an operator's cancel
    then settled the attempt with no conclusion."""
    from shared.ledger.cancelling import note_intent
    from shared.ledger.claims import record_job

    recorded = record_job(
        record,
        n=1,
        job_name=snapshot.name,
        state=snapshot.state,
        created_at=snapshot.create_time,
        started_at=snapshot.start_time,
        ended_at=snapshot.end_time,
    )
    assert recorded is not None
    recorded.mark(evidence_marker(KIT_RUN_KEY, 1, "0"))  # the kit's lines kept while the job was not indexed
    recorded.mark(evidence_marker(KIT_PREEMPTED_KEY, 1, "0"))
    note_intent(recorded, CancelIntent(by="operator", at=iso(NOW)), NOW)
    return recorded
