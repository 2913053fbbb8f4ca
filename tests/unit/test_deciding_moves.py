"""consider_move (shared/deciding/moves.py) at its edges: how long a Spot job waits before it moves,
measured from when, against which changeover, and the requests it never moves. The placement is a
stand-in that names where the attempt would go, so only the decision to move is under test."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.clock import iso
from shared.deciding.deadline import Action, decide_deadline
from shared.deciding.deadline_watch import deadline_situation
from shared.deciding.decision_policy import DecisionPolicy
from shared.deciding.decisions import Observation, decide
from shared.deciding.effects import Effects
from shared.deciding.moves import consider_move
from shared.fleet.estimate import SpotOutlook
from shared.fleet.placing import LocationChoice
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt, CancelIntent, RequestRecord, Requeue
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.settings import Settings

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/1"
PENDING = "JOB_STATE_PENDING"
POLICY = DecisionPolicy.from_settings(Settings())  # changeover prior 1200 s, 3 attempts by default
PRIOR = POLICY.changeover_prior_seconds


@dataclass
class ElsewherePlacer:
    """Places the next attempt in `location`, and remembers that it was asked; `outlook` is the
    fleet's outlook of Spot where the attempt waits (none by default)."""

    location: str = "us-east4"
    asked: list[int] = field(default_factory=list)
    waiting: list[bool] = field(default_factory=list)
    leaving: list[bool] = field(default_factory=list)
    outlook: SpotOutlook | None = None

    def place(
        self,
        request: dict[str, Any],
        attempt: Attempt,
        attempts: list[Attempt],
        waiting: bool = False,
        leaving: bool = False,
    ) -> LocationChoice:
        self.asked.append(attempt.n)
        self.waiting.append(waiting)
        self.leaving.append(leaving)
        return LocationChoice(self.location, "cheaper to finish there")

    def spot_outlook(self, request: dict[str, Any], location: str) -> SpotOutlook | None:
        return self.outlook


def waiting(seconds: float, **request: Any) -> RequestRecord:
    """Attempt 1 on Spot in us-central1, created `seconds` ago and PENDING since."""
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at=iso(NOW - timedelta(seconds=seconds)), job=JOB)
    attempt.created_at, attempt.state = iso(NOW - timedelta(seconds=seconds)), PENDING
    envelope = {"location": "us-central1", "locations": ["us-central1", "us-east4"], "max_attempts": 3, **request}
    return RequestRecord("r1", envelope, "gs://b/r1/", attempts=[attempt])


def move(record: RequestRecord, placer: ElsewherePlacer | None = None, state: str = PENDING) -> Effects:
    effects = Effects()
    consider_move(record, JobSnapshot(JOB, state), placer or ElsewherePlacer(), POLICY, NOW, effects)
    return effects


def moved(record: RequestRecord) -> bool:
    return record.requeue is not None and record.attempt(1).outcome is AttemptOutcome.MOVED


def test_a_job_waiting_exactly_its_changeover_stays_and_one_second_more_moves() -> None:
    at_the_bound = waiting(PRIOR)
    move(at_the_bound)
    assert not moved(at_the_bound) and at_the_bound.status is not RequestStatus.REQUEUED

    past = waiting(PRIOR + 1)
    effects = move(past)
    assert moved(past) and past.status is RequestStatus.REQUEUED
    [line] = effects.lines
    assert line.severity == "WARNING"
    assert line.fields["waited_seconds"] == PRIOR + 1 and line.fields["changeover_seconds"] == PRIOR
    assert (line.fields["next_attempt"], line.fields["next_location"]) == (2, "us-east4")
    assert f"waited {PRIOR + 1:.0f} s for Spot in us-central1" in line.message


def test_a_move_is_placed_as_a_job_with_no_capacity_where_it_waits() -> None:
    placer = ElsewherePlacer()
    move(waiting(PRIOR + 1), placer)
    assert placer.asked == [1] and placer.waiting == [True]  # its own location pays an outage first


def test_the_requests_own_changeover_outranks_the_prior() -> None:
    record = waiting(PRIOR + 1, changeover_seconds=PRIOR + 60)
    move(record)
    assert not moved(record)
    record = waiting(PRIOR + 61, changeover_seconds=PRIOR + 60)
    assert move(record).lines[0].fields["changeover_seconds"] == PRIOR + 60 and moved(record)


def test_a_job_that_ran_is_measured_from_its_last_change_of_state_not_its_creation() -> None:
    # A record written before `wait_began_at` (None here): its wait from its current state's start.
    record = waiting(3 * PRIOR)
    attempt = record.attempt(1)
    attempt.started_at = iso(NOW - timedelta(seconds=2 * PRIOR))
    attempt.state_changed_at = iso(NOW - timedelta(seconds=PRIOR / 2))  # pending again since
    move(record)
    assert not moved(record)
    attempt.state_changed_at = iso(NOW - timedelta(seconds=PRIOR + 1))
    move(record)
    assert moved(record)


def test_a_restarted_job_queued_then_pending_has_waited_since_its_run_ended() -> None:
    """Issue 43: Vertex restarts a job QUEUED ("resumed"), then PENDING ("preparing to run"): one
    wait, from the end of its RUNNING (`Attempt.wait_began_at`), not from PENDING's start."""
    ran, back, pending = (NOW - timedelta(seconds=s) for s in (3 * PRIOR, PRIOR + 1, PRIOR / 2))
    record = waiting(4 * PRIOR)
    read = JobSnapshot(JOB, JobState.RUNNING, create_time=record.attempt(1).created_at, start_time=iso(ran))
    for state, since in ((JobState.RUNNING, ran), (JobState.QUEUED, back), (JobState.PENDING, pending)):
        observed = Observation(1, replace(read, state=state, update_time=iso(since)))
        record = decide(record, observed, POLICY, since).record
    attempt = record.attempt(1)
    assert (attempt.wait_began_at, attempt.state_changed_at) == (iso(back), iso(pending))  # PENDING: half a changeover
    effects = move(record)
    assert moved(record) and effects.lines[0].fields["waited_seconds"] == PRIOR + 1


def test_a_move_keeps_one_attempt_for_a_requeue_after_a_preemption() -> None:
    last_but_one = waiting(2 * PRIOR, max_attempts=2)  # attempt 2 would be the last
    move(last_but_one)
    assert not moved(last_but_one)
    room_left = waiting(2 * PRIOR, max_attempts=3)
    move(room_left)
    assert moved(room_left) and room_left.requeue.attempt == 2


def test_without_its_own_max_attempts_the_deployments_default_counts() -> None:
    record = waiting(2 * PRIOR)
    del record.request["max_attempts"]  # the default, 3: attempt 2 leaves one
    move(record)
    assert moved(record)


@pytest.mark.parametrize("locations", [[], ["us-central1"]])
def test_a_request_with_one_location_never_moves(locations: list[str]) -> None:
    placer = ElsewherePlacer()
    record = waiting(2 * PRIOR, locations=locations)
    move(record, placer)
    assert not moved(record) and placer.asked == []


def test_a_placement_that_keeps_the_location_is_no_move() -> None:
    record = waiting(2 * PRIOR)
    effects = move(record, ElsewherePlacer("us-central1"))
    assert not moved(record) and effects.lines == [] and not effects.requeue_decided


def test_the_move_is_decided_on_a_read_of_its_own_job_only() -> None:
    record = waiting(2 * PRIOR)
    effects = Effects()
    consider_move(record, None, ElsewherePlacer(), POLICY, NOW, effects)
    consider_move(record, JobSnapshot(JOB + "0", PENDING), ElsewherePlacer(), POLICY, NOW, effects)
    assert not moved(record)
    move(record, state="JOB_STATE_RUNNING")  # the ledger still says PENDING: a read newer than it
    assert not moved(record)


def blocked_by_the_record(record: RequestRecord) -> None:
    record.cancel = CancelIntent(by="someone", at=iso(NOW), reason="by hand")


def blocked_by_a_requeue(record: RequestRecord) -> None:
    record.requeue = Requeue(
        attempt=2, location="us-central1", strategy="SPOT", reason="preempted", decided_at=iso(NOW)
    )


def blocked_by_an_outcome(record: RequestRecord) -> None:
    record.attempt(1).outcome = AttemptOutcome.FAILED


def blocked_by_a_cancel(record: RequestRecord) -> None:
    record.attempt(1).cancel_decided_at = iso(NOW)


def blocked_by_on_demand(record: RequestRecord) -> None:
    record.attempt(1).strategy = "STANDARD"


def blocked_by_the_end(record: RequestRecord) -> None:
    record.status = RequestStatus.SUCCEEDED


def blocked_by_a_fallback(record: RequestRecord) -> None:
    record.request["fallback"] = {"after_spot_attempts": 1, "strategy": "STANDARD"}


@pytest.mark.parametrize(
    "block",
    [
        blocked_by_the_record,
        blocked_by_a_requeue,
        blocked_by_an_outcome,
        blocked_by_a_cancel,
        blocked_by_on_demand,
        blocked_by_the_end,
        blocked_by_a_fallback,
    ],
)
def test_what_is_never_moved(block: Any) -> None:
    record = waiting(2 * PRIOR)
    block(record)
    requeue_before = record.requeue
    effects = move(record)
    assert record.attempt(1).outcome is not AttemptOutcome.MOVED and record.requeue is requeue_before
    assert effects.lines == [] and not effects.requeue_decided


def with_deadline(slack_seconds: float, **request: Any) -> RequestRecord:
    """Waiting 2 changeover priors, half its 1,000 one-second steps committed, a deadline leaving
    `slack_seconds` once on-demand did the rest; its own changeover is a minute."""
    at = NOW + timedelta(seconds=500 + 60 + slack_seconds)
    envelope = {"deadline": iso(at), "total_steps": 1000, "expected_step_seconds": 1.0, "changeover_seconds": 60.0}
    record = waiting(2 * PRIOR, **{**envelope, **request})
    record.created_at = iso(NOW - timedelta(hours=2))
    record.attempt(1).last_checkpoint = [0, 500]
    return record


def rule(record: RequestRecord) -> tuple[Action, float | None]:
    situation = deadline_situation(
        record,
        NOW,
        prior_seconds=POLICY.changeover_prior_seconds,
        review_seconds=POLICY.reconcile_interval_seconds,
        checkpoint_prior_seconds=POLICY.checkpoint_prior_seconds,
    )
    assert situation is not None
    decision = decide_deadline(situation)
    return decision.action, decision.holds_seconds


def test_a_deadline_request_moves_only_while_the_rule_holds_its_wait_by_more_than_a_changeover() -> None:
    at_the_bound = with_deadline(6760)
    assert rule(at_the_bound) == (Action.STAY, 60.0)  # holds the wait exactly one changeover more
    move(at_the_bound)
    assert not moved(at_the_bound)

    past = with_deadline(6762)
    assert rule(past) == (Action.STAY, 61.0)
    assert move(past).lines[0].fields["changeover_seconds"] == 60 and moved(past)

    switching = with_deadline(5000)
    assert rule(switching) == (Action.SWITCH_TO_ON_DEMAND, None)
    move(switching)
    assert not moved(switching)


def test_a_deadline_request_whose_work_is_not_known_yet_never_moves() -> None:
    record = with_deadline(36000, total_steps=None, expected_step_seconds=None)
    move(record)
    assert not moved(record)


def test_a_deadline_request_whose_work_is_all_committed_is_not_moved() -> None:
    done = with_deadline(36000)
    done.attempt(1).last_checkpoint = [0, 1000]
    assert rule(done) == (Action.STAY, None)  # done: nothing is held for, so no move is spared
    move(done)
    assert not moved(done)


def test_a_deadline_request_sits_out_an_outage_the_fleet_expects_short_until_it_outlasts_it() -> None:
    # Ahead of the line with 10 h of slack: the rule holds the wait; its changeover is a minute.
    short = SpotOutlook(0.99, 110 * 99)  # the fleet's outages where it waits: 110 s expected
    placer = ElsewherePlacer(outlook=short)
    record = with_deadline(36000)
    record.attempt(1).created_at = iso(NOW - timedelta(seconds=100))
    move(record, placer)
    assert not moved(record) and placer.asked == []  # 100 s of a 110 s outage: sit it out
    record.attempt(1).created_at = iso(NOW - timedelta(seconds=111))
    move(record, placer)
    assert moved(record) and placer.asked == [1]  # longer than expected: placement weighs a move
    # An outage expected longer than 3 changeovers (2 with less than 24 changeovers of slack beyond
    # the net; here 10 h of it), or none known: a move is weighed at once.
    for outlook in (SpotOutlook(0.99, 181 * 99), None):
        record = with_deadline(36000)
        record.attempt(1).created_at = iso(NOW - timedelta(seconds=100))
        move(record, ElsewherePlacer(outlook=outlook))
        assert moved(record)


def test_a_sit_out_ends_at_the_last_pass_that_still_spares_a_move() -> None:
    # Behind the line 6 h in, with 3,600 s of slack beyond the net and a 1,200 s changeover: the
    # claim's outlook expects long outages, so the rule holds the wait 3 changeovers for a move;
    # the fleet's outlook now expects a 2,300 s outage, short enough to sit out. A sit-out past the
    # hold's last pass (reconcile every 300 s) would end on on-demand, not in the move it promises.
    short = SpotOutlook(0.99, 2300 * 99)

    def waited_for(seconds: float) -> RequestRecord:
        record = with_deadline(12000, changeover_seconds=1200.0)
        record.created_at = iso(NOW - timedelta(hours=6))
        record.attempt(1).created_at = iso(NOW - timedelta(seconds=seconds))
        record.attempt(1).spot_outlook = SpotOutlook(0.5, 3 * 3600).to_json()
        return record

    early = waited_for(2000)
    assert rule(early) == (Action.STAY, 1600.0)  # the next pass is held 1,300 s: a move is still spared
    placer = ElsewherePlacer(outlook=short)
    move(early, placer)
    assert not moved(early) and placer.asked == []  # 2,000 s of a 2,300 s outage: sit it out
    last = waited_for(2200)
    assert rule(last) == (Action.STAY, 1400.0)  # the next pass is held 1,100 s: no move is spared then
    placer = ElsewherePlacer(outlook=short)
    move(last, placer)
    assert moved(last) and placer.asked == [1] and placer.leaving == [True]


def test_a_wait_the_rule_holds_only_for_a_move_is_placed_as_leaving_it() -> None:
    # Behind the line 70 s ago (half done, 2 h in, a deadline 6,500 s of slack away), where the
    # claim's outlook expects long outages: the rule holds the wait for a move, so placement
    # weighs staying as the rest on on-demand.
    record = with_deadline(6500)
    record.attempt(1).spot_outlook = SpotOutlook(0.5, 3 * 3600).to_json()
    assert rule(record)[0] is Action.STAY
    placer = ElsewherePlacer()
    move(record, placer)
    assert placer.leaving == [True] and moved(record)
    ahead = with_deadline(36000)  # ahead of the line: the rule waits, no hold
    placer = ElsewherePlacer()
    move(ahead, placer)
    assert placer.leaving == [False]
