"""Issue 45 item 2, the rule at small slack: a Spot attempt preempted often lately is placed again at
once when it waits, as if the outage were long (`shared.deciding.deadline.preempted_often`), in
production's move (`shared.deciding.moves.consider_move`) and in the placement bench's mirror of it,
from the preemption times the attempt keeps (`Attempt.preempted_at`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import shared.deciding.deadline as deadline
from bench import bench_placement as bench
from shared.clock import iso, parse_iso
from shared.deciding.deadline import (
    Placement,
    Situation,
    Work,
    decide_deadline,
    longest_unasked_seconds,
    preempted_often,
    safety_net_seconds,
)
from shared.deciding.deadline_watch import deadline_situation
from shared.deciding.decision_policy import DecisionPolicy
from shared.deciding.effects import Effects
from shared.deciding.moves import consider_move
from shared.deciding.preemptions import count_preemptions, discount_timeout_stop
from shared.fleet.estimate import SpotOutlook
from shared.fleet.placing import LocationChoice
from shared.jobs import JobSnapshot
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome
from shared.settings import Settings

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
HOUR = 3600.0
D = 600.0  # changeover
M = 300.0  # review interval
NET = 2 * D + M


def waiting_after(preempted_hours_ago: list[float], *, slack_beyond_net: float) -> tuple[Situation, list[datetime]]:
    """A 10 h job, 5 h done at 9 h into its deadline, waiting for Spot since a preemption a minute
    ago, with this slack beyond the safety net; and its attempt's preemptions that long ago."""
    now = T0 + timedelta(hours=9)
    situation = Situation(
        now=now,
        deadline=now + timedelta(seconds=5 * HOUR + D + NET + slack_beyond_net),
        started=T0,
        work=Work.in_seconds(int(10 * HOUR), int(5 * HOUR)),
        placement=Placement.WAITING_FOR_SPOT,
        placed_at=now - timedelta(minutes=1),
        changeover_seconds=D,
        review_seconds=M,
    )
    return situation, [now - timedelta(hours=h) for h in preempted_hours_ago]


def test_one_preemption_within_four_hours_at_small_slack_is_enough() -> None:
    # Production moves only while the rule spares the move's changeover (`spares_a_move`): at this
    # slack the outage and restart after a first preemption spend that, so the first is the last
    # chance to move (docs/placement.md, "Robust placement", fourth pass).
    assert (deadline.QUICK_PREEMPTIONS, deadline.QUICK_PREEMPTION_HOURS) == (1, 4.0)
    situation, times = waiting_after([3.9, 0.02], slack_beyond_net=4 * D)
    assert preempted_often(situation, times)
    assert preempted_often(situation, times[1:])
    # None, or one more than 4 h ago, is not.
    assert not preempted_often(situation, [])
    assert not preempted_often(situation, [situation.now - timedelta(hours=4.1)])


def test_larger_slack_pays_for_short_outages_and_nothing_but_a_wait_is_placed_again() -> None:
    assert deadline.QUICK_SLACK_CHANGEOVERS == 4.0
    situation, times = waiting_after([1.0, 0.02], slack_beyond_net=4 * D + 1)
    assert not preempted_often(situation, times)
    tight, times = waiting_after([1.0, 0.02], slack_beyond_net=D)
    assert preempted_often(tight, times)
    assert not preempted_often(replace(tight, placement=Placement.ON_SPOT), times)
    assert not preempted_often(replace(tight, placement=Placement.ON_DEMAND), times)


# Production's move: the attempt's preemptions, as counted, keep their times.

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/1"
PENDING = "JOB_STATE_PENDING"
POLICY = DecisionPolicy.from_settings(Settings())


@dataclass
class ElsewherePlacer:
    """Places the next attempt in us-east4 and remembers how it was asked."""

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
        self.leaving.append(leaving)
        return LocationChoice("us-east4", "cheaper to finish there")

    def spot_outlook(self, request: dict[str, Any], location: str) -> SpotOutlook | None:
        return self.outlook


# The net there: 2 changeovers of a minute and the review interval (the longest a waiting job goes
# unasked by reconcile, and the checkpoint interval: the prior's, as none was seen).
NET_HERE = 2 * 60.0 + longest_unasked_seconds(POLICY.reconcile_interval_seconds) + POLICY.checkpoint_prior_seconds


def preempted(slack_seconds: float, preempted_hours_ago: list[float], **request: Any) -> RequestRecord:
    """A deadline request (a minute's changeover, half its 1,000 one-second steps committed, 2 h
    in) whose Spot attempt waits again since a preemption 30 s ago, where the claim's outlook
    expects long outages (behind the line, the rule holds the wait for a move)."""
    envelope = {
        "location": "us-central1",
        "locations": ["us-central1", "us-east4"],
        "max_attempts": 3,
        "deadline": iso(NOW + timedelta(seconds=500 + 60 + slack_seconds)),
        "total_steps": 1000,
        "expected_step_seconds": 1.0,
        "changeover_seconds": 60.0,
        **request,
    }
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at=iso(NOW - timedelta(hours=5)), job=JOB)
    attempt.created_at, attempt.started_at = iso(NOW - timedelta(hours=5)), iso(NOW - timedelta(hours=5))
    attempt.state, attempt.state_changed_at = PENDING, iso(NOW - timedelta(seconds=30))
    attempt.last_checkpoint = [len(preempted_hours_ago), 500]
    attempt.preemptions = len(preempted_hours_ago)
    attempt.preempted_at = [iso(NOW - timedelta(hours=h)) for h in preempted_hours_ago]
    attempt.spot_outlook = SpotOutlook(0.5, 3 * HOUR).to_json()
    record = RequestRecord("r1", envelope, "gs://b/r1/", attempts=[attempt])
    record.created_at = iso(NOW - timedelta(hours=2))
    return record


def move(record: RequestRecord, placer: ElsewherePlacer) -> bool:
    consider_move(record, JobSnapshot(JOB, PENDING), placer, POLICY, NOW, Effects())
    return record.attempt(1).outcome is AttemptOutcome.MOVED


def test_a_deadline_request_preempted_often_is_placed_again_within_its_changeover_as_leaving() -> None:
    # 180 s (3 changeovers) beyond the net: behind the line, the rule holds the wait for a move.
    record = preempted(NET_HERE + 180, [3.0, 0.01])
    situation = deadline_situation(
        record,
        NOW,
        prior_seconds=POLICY.changeover_prior_seconds,
        review_seconds=POLICY.reconcile_interval_seconds,
        checkpoint_prior_seconds=POLICY.checkpoint_prior_seconds,
    )
    assert situation is not None and safety_net_seconds(situation) == NET_HERE
    assert decide_deadline(situation).held_for_move
    placer = ElsewherePlacer()
    assert move(record, placer)
    assert placer.leaving == [True]  # staying is costed as the rest on on-demand
    # One preemption is enough; with none lately, or more slack, it waits a changeover first.
    placer = ElsewherePlacer()
    assert move(preempted(NET_HERE + 180, [0.01]), placer) and placer.leaving == [True]
    for record in (preempted(NET_HERE + 180, [4.1]), preempted(NET_HERE + 300, [3.0, 0.01])):
        placer = ElsewherePlacer()
        assert not move(record, placer) and placer.leaving == []


def test_preempted_often_weighs_a_move_even_where_the_fleet_expects_the_outage_short() -> None:
    placer = ElsewherePlacer(outlook=SpotOutlook(0.99, 20 * 99))  # 20 s expected: `sits_out` would stay
    assert move(preempted(NET_HERE + 180, [3.0, 0.01]), placer)


def test_a_request_with_capacity_alternatives_is_not_moved_within_its_changeover() -> None:
    record = preempted(NET_HERE + 180, [3.0, 0.01], capacity=[{"machine": "a3-highgpu-8g", "strategies": ["SPOT"]}])
    assert not move(record, ElsewherePlacer())


def test_each_preemption_counted_keeps_when_it_was_counted() -> None:
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at=iso(NOW - timedelta(hours=1)), job=JOB)
    record = RequestRecord("r1", {"location": "us-central1"}, "gs://b/r1/", attempts=[attempt])
    for k, line in enumerate(("p-1", "p-2")):
        count_preemptions(
            record,
            attempt,
            None,
            line,
            fresh=False,
            storm_threshold=99,
            now=NOW + timedelta(minutes=k),
            seen_at=NOW + timedelta(minutes=k),
            effects=Effects(),
        )
    assert attempt.preemptions == 2
    assert [parse_iso(t) for t in attempt.preempted_at] == [NOW, NOW + timedelta(minutes=1)]
    copy = RequestRecord.from_json(record.to_json()).attempt(1)
    assert copy.preempted_at == attempt.preempted_at
    discount_timeout_stop(record, attempt)  # a count lowered keeps as many times
    assert len(attempt.preempted_at) == attempt.preemptions


def test_an_attempt_keeps_only_its_newest_preemption_times() -> None:
    """The record stays small however many a job of many replicas counts; a count the timeout
    lowers drops the newest, which was the timeout's stop."""
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at=iso(NOW - timedelta(hours=1)), job=JOB)
    record = RequestRecord("r1", {"location": "us-central1"}, "gs://b/r1/", attempts=[attempt])
    for k in range(6):
        count_preemptions(
            record,
            attempt,
            None,
            f"p-{k}",
            fresh=False,
            storm_threshold=99,
            now=NOW + timedelta(minutes=k),
            seen_at=NOW + timedelta(minutes=k),
            effects=Effects(),
        )
    assert attempt.preemptions == 6
    assert [parse_iso(t) for t in attempt.preempted_at] == [NOW + timedelta(minutes=k) for k in (2, 3, 4, 5)]


# The placement bench decides the same way (its `Spotjobs.waiting_move`).


def test_the_bench_places_a_job_preempted_often_again_at_once() -> None:
    regions = tuple(bench.Region(name, spot, 80.0, (True,) * 400) for name, spot in (("a", 10.0), ("b", 11.0)))
    setup = bench.Setup(regions, 600, work_ticks=144, deadline_ticks=164, changeover_ticks=2, checkpoint_gb=0.0)
    policy = bench.Spotjobs(setup, bench.Fleet())
    # Waiting since its preemption at tick 100, 90 ticks done: 3 ticks (1.5 changeovers) beyond the net.
    job = bench.Attempt(start=0, region=0, ran=True, done=90, placed=100, preempted=[90, 100])
    assert policy.waiting_move(job, 100) == 1  # staying costs on-demand: Spot in b is cheaper
    job.preempted = [100]
    assert policy.waiting_move(job, 100) == 1  # one preemption is enough
    job.preempted = [70]
    assert policy.waiting_move(job, 100) is None  # none within 4 h: within its changeover it waits first
