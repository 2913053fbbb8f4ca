"""A late read in the state the record holds (issue 43, after seed 7338): a reconcile pass lists
a job in one wait and reaches its record only after the job ran and waits anew. The read shows
the state the record holds, with an update time from before the wait the record is in: it vouches
for nothing of that wait (Vertex's updateTime only moves forward for one job), so it decides
nothing: no stuck alert, no deadline switch, no move, the record as it was."""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.clock import parse_iso
from shared.deciding.decision_policy import DecisionPolicy
from shared.deciding.decisions import Decision, Observation, decide
from shared.deciding.effects import Effects
from shared.deciding.moves import consider_move
from shared.fleet.estimate import SpotOutlook
from shared.fleet.placing import LocationChoice
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome
from tests.support.decide import JOB1, NOW, POLICY, at, make_record

STUCK_AFTER = timedelta(seconds=POLICY.stuck_after_seconds)


def snapshot(state: str, update: float, *, started: bool = True) -> JobSnapshot:
    """The job as Vertex shows it `update` seconds into the story, in `state` since then."""
    return JobSnapshot(JOB1, state, create_time=at(1), start_time=at(10) if started else None, update_time=at(update))


# Listed while the job waited for its first machine, reached the record later.
LATE = snapshot(JobState.PENDING, 5, started=False)
SECOND_WAIT = snapshot(JobState.PENDING, 100)


def observe(record: RequestRecord, job: JobSnapshot, now: datetime, policy: DecisionPolicy = POLICY) -> Decision:
    return decide(copy.deepcopy(record), Observation(1, job), policy, now)


def ran_and_waits_again(request: dict[str, Any] | None = None, *, run_seen: bool = True) -> RequestRecord:
    """PENDING from 5 s (its first wait), RUNNING at 10, PENDING again at 100 (its second wait);
    `run_seen` False: no read saw the run, the second wait is told apart by the job's start time."""
    record = make_record(request=request, state=None)
    reads = [(LATE, 8)]
    if run_seen:
        reads.append((snapshot(JobState.RUNNING, 10), 20))
    reads.append((SECOND_WAIT, 110))
    for job, read_at in reads:
        record = observe(record, job, parse_iso(at(read_at)), policy=POLICY).record
    attempt = record.attempts[0]
    assert (attempt.state, attempt.wait_began_at, attempt.started_at) == (JobState.PENDING, at(100), at(10))
    return record


@pytest.mark.parametrize("run_seen", [True, False])
def test_a_read_of_an_earlier_wait_raises_no_stuck_alert_for_the_wait_the_record_is_in(run_seen: bool) -> None:
    record = ran_and_waits_again(run_seen=run_seen)
    stuck_long_since = parse_iso(at(100)) + STUCK_AFTER + timedelta(seconds=1)
    late = observe(record, LATE, stuck_long_since)
    assert late.effects.alerts == [] and late.effects.lines == []
    assert late.record == record
    # A read of the wait it is in would say so.
    [alert] = observe(record, SECOND_WAIT, stuck_long_since).effects.alerts
    assert alert.kind == "job_stuck" and alert.details["wait_began_at"] == at(100)


def test_a_read_of_an_earlier_wait_switches_no_deadline_request_to_on_demand() -> None:
    policy = replace(POLICY, allowed_fallback_strategies=("STANDARD",))
    request = {
        "deadline": at(100 + 1200),
        "total_steps": 1000,
        "expected_step_seconds": 1.0,
        "changeover_seconds": 60.0,
    }
    record = ran_and_waits_again(request)
    assert record.attempts[0].outcome is None and record.requeue is None
    late = observe(record, LATE, NOW, policy)
    assert late.record.attempts[0].outcome is None and late.record.requeue is None
    assert late.record == record
    switched = observe(record, SECOND_WAIT, NOW, policy).record.attempts[0]  # a read of the wait it is in
    assert switched.outcome is AttemptOutcome.SWITCHED_TO_ON_DEMAND


@dataclass
class Elsewhere:
    """Places the next attempt in another region; no outlook of Spot where it waits."""

    def place(
        self, request: dict[str, Any], attempt: Attempt, attempts: list[Attempt], waiting: bool, leaving: bool
    ) -> LocationChoice:
        return LocationChoice("us-east4", "cheaper to finish there")

    def spot_outlook(self, request: dict[str, Any], location: str) -> SpotOutlook | None:
        return None


def test_a_read_of_an_earlier_wait_moves_no_job() -> None:
    request = {"locations": ["us-central1", "us-east4"], "changeover_seconds": 60.0}
    record = ran_and_waits_again(request)  # 500 s into its second wait at NOW: past a changeover

    def moved(job: JobSnapshot) -> bool:
        decided = observe(record, job, NOW).record
        consider_move(decided, job, Elsewhere(), POLICY, NOW, Effects())  # as apply_observation does
        return decided.attempts[0].outcome is AttemptOutcome.MOVED

    assert not moved(LATE)
    assert moved(SECOND_WAIT)


def test_a_read_of_the_same_moment_or_a_later_update_in_the_same_state_is_fresh() -> None:
    record = ran_and_waits_again()
    stuck_long_since = parse_iso(at(100)) + STUCK_AFTER + timedelta(seconds=1)
    assert observe(record, SECOND_WAIT, stuck_long_since).effects.alerts  # the same update time
    # Vertex updated the job since (a restart no read saw): a newer read of the same state.
    later = replace(SECOND_WAIT, update_time=at(300))
    assert observe(record, later, stuck_long_since).record.attempts[0].vertex_updated_at == at(300)


def test_a_state_stamped_by_the_ledgers_clock_takes_a_read_with_an_older_update_time() -> None:
    # A read that said not when the job changed is stamped with the ledger's clock, which is not
    # Vertex's: the next read of that state, updated before it, still counts.
    record = make_record(state=JobState.RUNNING)
    record = observe(record, replace(SECOND_WAIT, update_time=None), NOW).record
    assert record.attempts[0].state_changed_at == at(600)
    stuck_long_since = NOW + STUCK_AFTER
    [alert] = observe(record, SECOND_WAIT, stuck_long_since).effects.alerts
    assert alert.kind == "job_stuck"
