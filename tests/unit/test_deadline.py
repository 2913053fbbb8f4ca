"""The deadline policy (shared/deciding/deadline.py): its rules one by one, the promise that no deadline
on-demand could still meet is missed (on synthetic traces, through the simulator), and that the
simulator runs the production function itself."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bench.bench_deadline as bench
import shared.deciding.deadline as deadline
from bench.deadline_sim import Job, Trace, omniscient_costs, simulate
from shared.deciding.deadline import (
    Action,
    Placement,
    Rule,
    Situation,
    Work,
    changeover_estimate,
    decide_deadline,
)
from shared.fleet.estimate import SpotOutlook

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
HOUR = 3600.0
D = 600.0  # changeover
M = 300.0  # review interval


def situation(
    *,
    elapsed_h: float,
    done_h: float,
    placement: Placement,
    total_h: float = 10.0,
    span_h: float = 20.0,
    placed_h: float | None = None,
    **changes: object,
) -> Situation:
    """A 10 h job with a deadline 20 h after it started, `elapsed_h` in, `done_h` of it done."""
    now = T0 + timedelta(hours=elapsed_h)
    base = Situation(
        now=now,
        deadline=T0 + timedelta(hours=span_h),
        started=T0,
        work=Work.in_seconds(int(total_h * HOUR), int(done_h * HOUR)),
        placement=placement,
        placed_at=now - timedelta(hours=1) if placed_h is None else T0 + timedelta(hours=placed_h),
        changeover_seconds=D,
        review_seconds=M,
    )
    return replace(base, **changes)


def slack_seconds(s: Situation) -> float:
    return decide_deadline(s).slack_seconds


# --- the rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", list(Rule))
def test_done_means_stay_whatever_the_time(rule: Rule) -> None:
    s = situation(elapsed_h=19.9, done_h=10.0, placement=Placement.WAITING_FOR_SPOT)
    assert decide_deadline(s, rule).action is Action.STAY
    assert decide_deadline(s, rule).reason == "done"


@pytest.mark.parametrize("rule", list(Rule))
def test_safety_net_waiting_with_slack_below_2d_plus_m_goes_on_demand(rule: Rule) -> None:
    # 10 h - 5 h left, waiting: slack = to deadline - work left - d.
    elapsed = 20.0 - 5.0 - (D + 2 * D + M - 1) / HOUR
    s = situation(elapsed_h=elapsed, done_h=5.0, placement=Placement.WAITING_FOR_SPOT)
    assert slack_seconds(s) == pytest.approx(2 * D + M - 1, abs=1)
    decision = decide_deadline(s, rule)
    assert decision.action is Action.SWITCH_TO_ON_DEMAND
    assert decision.reason.startswith("safety net")


def test_greedy_waits_while_slack_is_above_the_net_and_says_for_how_long() -> None:
    s = situation(elapsed_h=8.0, done_h=5.0, placement=Placement.WAITING_FOR_SPOT)
    decision = decide_deadline(s, Rule.GREEDY)
    assert decision.action is Action.STAY
    assert decision.holds_seconds == pytest.approx(decision.slack_seconds - (2 * D + M))
    later = replace(s, now=s.now + timedelta(seconds=decision.holds_seconds + 1))
    assert decide_deadline(later, Rule.GREEDY).action is Action.SWITCH_TO_ON_DEMAND
    sooner = replace(s, now=s.now + timedelta(seconds=decision.holds_seconds - 1))
    assert decide_deadline(sooner, Rule.GREEDY).action is Action.STAY


@pytest.mark.parametrize("rule", list(Rule))
def test_exploitation_on_spot_stays_even_with_almost_no_slack(rule: Rule) -> None:
    # Past its changeover, 30 s of slack: a preemption now would still leave on-demand time.
    s = situation(elapsed_h=20.0 - 5.0 - (D + 30) / HOUR, done_h=5.0, placement=Placement.ON_SPOT)
    assert 0 < slack_seconds(s) < D
    assert decide_deadline(s, rule).action is Action.STAY


@pytest.mark.parametrize("rule", list(Rule))
def test_a_spot_run_started_too_late_for_its_changeover_moves_to_on_demand(rule: Rule) -> None:
    # Spot got capacity just now with half a changeover of slack: a preemption at the end of its
    # changeover would leave on-demand too little time.
    now_h = 20.0 - 5.0 - 1.5 * D / HOUR
    s = situation(elapsed_h=now_h, done_h=5.0, placement=Placement.ON_SPOT, placed_h=now_h)
    assert slack_seconds(s) == pytest.approx(0.5 * D, abs=1)
    decision = decide_deadline(s, rule)
    assert decision.action is Action.SWITCH_TO_ON_DEMAND
    assert "too little slack" in decision.reason


def test_uniform_progress_waiting_behind_the_line_goes_on_demand_ahead_of_it_waits() -> None:
    behind = situation(elapsed_h=10.0, done_h=4.0, placement=Placement.WAITING_FOR_SPOT)  # line: 0.5
    assert decide_deadline(behind, Rule.UNIFORM_PROGRESS).action is Action.SWITCH_TO_ON_DEMAND
    assert decide_deadline(behind, Rule.GREEDY).action is Action.STAY
    ahead = situation(elapsed_h=10.0, done_h=6.0, placement=Placement.WAITING_FOR_SPOT)
    decision = decide_deadline(ahead, Rule.UNIFORM_PROGRESS)
    assert decision.action is Action.STAY
    # The line (0.05 per hour) reaches 0.6 at 12 h.
    assert decision.holds_seconds == pytest.approx(2 * HOUR)


def test_uniform_progress_hysteresis_stays_on_demand_until_ahead_of_the_line_2d_on() -> None:
    # At 10 h the line is 0.5 and 2d on it is 0.5 + 1200 s / 20 h.
    just_ahead = situation(elapsed_h=10.0, done_h=5.1, placement=Placement.ON_DEMAND)
    ahead_2d = 0.5 + 2 * D / (20 * HOUR)
    assert just_ahead.work.done_fraction < ahead_2d
    decision = decide_deadline(just_ahead, Rule.UNIFORM_PROGRESS)
    assert decision.action is Action.STAY
    assert decision.reason.startswith("hysteresis")
    assert decision.holds_seconds is not None and decision.holds_seconds > 0
    clear = situation(elapsed_h=10.0, done_h=10 * ahead_2d + 0.01, placement=Placement.ON_DEMAND)
    assert decide_deadline(clear, Rule.UNIFORM_PROGRESS).action is Action.BACK_TO_SPOT
    assert decide_deadline(clear, Rule.GREEDY).action is Action.STAY


def test_hysteresis_holds_until_progress_on_demand_reaches_the_line() -> None:
    s = situation(elapsed_h=10.0, done_h=5.0, placement=Placement.ON_DEMAND, placed_h=9.0)
    holds = decide_deadline(s, Rule.UNIFORM_PROGRESS).holds_seconds
    assert holds is not None
    # Progress on on-demand runs at 1 / 10 h, the line at 1 / 20 h.
    later = replace(
        s,
        now=s.now + timedelta(seconds=holds + 60),
        work=Work.in_seconds(int(10 * HOUR), int(5 * HOUR + holds + 60)),
    )
    assert decide_deadline(later, Rule.UNIFORM_PROGRESS).action is Action.BACK_TO_SPOT


def test_on_demand_with_slack_below_the_net_stays_to_the_end() -> None:
    s = situation(elapsed_h=10.5, done_h=9.9, span_h=11.0, placement=Placement.ON_DEMAND)
    assert s.work.done_fraction > (10.5 + 2 * D / HOUR) / 11.0  # ahead of the line 2d on
    assert slack_seconds(s) < 2 * D + M
    assert decide_deadline(s, Rule.UNIFORM_PROGRESS).action is Action.STAY


def test_spotjobs_stays_on_demand_while_spot_has_no_capacity() -> None:
    clear = situation(elapsed_h=10.0, done_h=6.0, placement=Placement.ON_DEMAND)
    assert decide_deadline(replace(clear, spot_available=False)).action is Action.STAY
    assert decide_deadline(replace(clear, spot_available=True)).action is Action.BACK_TO_SPOT
    # Unknown capacity: as Uniform Progress, back to Spot (to wait for it there).
    assert decide_deadline(clear).action is Action.BACK_TO_SPOT
    assert decide_deadline(replace(clear, spot_available=False), Rule.UNIFORM_PROGRESS).action is Action.BACK_TO_SPOT


def test_spotjobs_waits_behind_the_line_while_the_fleets_expected_wait_is_short_against_the_slack() -> None:
    # 4 h of the 10 done at 10 h of 20: behind the line (0.5).
    behind = situation(elapsed_h=10.0, done_h=4.0, placement=Placement.WAITING_FOR_SPOT)
    beyond_net = decide_deadline(behind).slack_seconds - (2 * D + M)
    # Outages of 1/4 h (runs of 3 h, capacity 12/13 of the time): wait, and say until when.
    short = replace(behind, spot_outlook=SpotOutlook(12 / 13, 3 * HOUR))
    assert short.spot_outlook.expected_wait_seconds == pytest.approx(HOUR / 4)
    decision = decide_deadline(short)
    assert decision.action is Action.STAY and "expected wait 900 s" in decision.reason
    assert decision.holds_seconds == pytest.approx(beyond_net - HOUR / 4 / deadline.WAIT_SHARE_OF_SLACK)
    # Outages longer than a few changeovers, or long against the slack beyond the net: leave as
    # Uniform Progress does (share 1/2: the mean outage is the mean lifetime).
    for s in (behind, replace(behind, deadline=behind.deadline - timedelta(seconds=beyond_net - 300))):
        room = decide_deadline(s).slack_seconds - (2 * D + M)
        cutoff = min(room * deadline.WAIT_SHARE_OF_SLACK, deadline.WAIT_CHANGEOVERS * D)
        longer, shorter = SpotOutlook(0.5, cutoff + 60), SpotOutlook(0.5, cutoff - 60)
        assert decide_deadline(replace(s, spot_outlook=longer)).action is Action.SWITCH_TO_ON_DEMAND
        assert decide_deadline(replace(s, spot_outlook=shorter)).action is Action.STAY
    assert room == pytest.approx(300) and cutoff == pytest.approx(300 * deadline.WAIT_SHARE_OF_SLACK)
    # No outlook (no fleet history): Uniform Progress, as before; the other rules ignore it.
    assert decide_deadline(behind).action is Action.SWITCH_TO_ON_DEMAND
    assert decide_deadline(short, Rule.UNIFORM_PROGRESS).action is Action.SWITCH_TO_ON_DEMAND
    # Ahead of the line it waits as before, for as long as before.
    ahead = situation(elapsed_h=10.0, done_h=6.0, placement=Placement.WAITING_FOR_SPOT)
    assert decide_deadline(replace(ahead, spot_outlook=short.spot_outlook)) == decide_deadline(ahead)


def test_spotjobs_holds_a_long_wait_behind_the_line_for_a_move_while_the_slack_pays_for_one() -> None:
    # Behind the line (4 h of 10 done at 10 h of 20), where the fleet's outages are long (3 h):
    # waiting since the preemption 10 minutes ago, it holds the wait so placement may move it.
    long_outages = SpotOutlook(0.5, 3 * HOUR)
    now = T0 + timedelta(hours=10)
    fresh = situation(elapsed_h=10.0, done_h=4.0, placement=Placement.WAITING_FOR_SPOT, spot_outlook=long_outages)
    fresh = replace(fresh, placed_at=now - timedelta(seconds=D))
    beyond_net = decide_deadline(fresh).slack_seconds - (2 * D + M)
    held = decide_deadline(fresh)
    assert held.action is Action.STAY and "for a move" in held.reason
    # it holds long enough for a move (which needs the rule to hold more than a changeover on)
    assert held.holds_seconds == pytest.approx(min(beyond_net - D, deadline.MOVE_HOLD_CHANGEOVERS * D - D))
    assert held.holds_seconds > D
    # past the hold, or without the slack for a move and one more changeover, it leaves as before
    later = replace(fresh, placed_at=now - timedelta(seconds=deadline.MOVE_HOLD_CHANGEOVERS * D + 1))
    assert decide_deadline(later).action is Action.SWITCH_TO_ON_DEMAND
    tight = replace(fresh, deadline=fresh.deadline - timedelta(seconds=beyond_net - 2 * D))
    assert decide_deadline(tight).action is Action.SWITCH_TO_ON_DEMAND
    # no outlook (no fleet history, no prior): Uniform Progress; the other rules ignore it
    assert decide_deadline(replace(fresh, spot_outlook=None)).action is Action.SWITCH_TO_ON_DEMAND
    assert decide_deadline(fresh, Rule.UNIFORM_PROGRESS).action is Action.SWITCH_TO_ON_DEMAND


@pytest.mark.parametrize("lifetime_h", [0.0, 1.0, 1e6])
def test_the_safety_net_fires_whatever_the_outlook(lifetime_h: float) -> None:
    elapsed = 20.0 - 5.0 - (D + 2 * D + M - 1) / HOUR  # slack just under 2d + m
    s = situation(elapsed_h=elapsed, done_h=5.0, placement=Placement.WAITING_FOR_SPOT)
    for share in (0.0, 0.99, 1.0):
        with_outlook = replace(s, spot_outlook=SpotOutlook(share, lifetime_h * HOUR))
        assert decide_deadline(with_outlook).action is Action.SWITCH_TO_ON_DEMAND
        assert decide_deadline(with_outlook).reason.startswith("safety net")


def test_slack_counts_the_on_demand_step_rate_and_the_changeover_left() -> None:
    work = Work(total_steps=1000, committed_steps=500, spot_step_seconds=10.0, on_demand_step_seconds=8.0)
    s = situation(elapsed_h=10.0, done_h=0.0, placement=Placement.ON_DEMAND, placed_h=10.0 - 100 / HOUR, work=work)
    # 10 h to the deadline, 500 steps x 8 s on on-demand, 500 s of the changeover left.
    assert slack_seconds(s) == pytest.approx(10 * HOUR - 4000 - (D - 100))


def test_changeover_estimate_a_high_percentile_never_below_the_prior() -> None:
    prior = 1200.0
    assert changeover_estimate([], prior) == prior
    assert changeover_estimate([100.0, 200.0], prior) == prior
    seen = [100.0 * i for i in range(1, 11)]  # 100 .. 1000
    assert changeover_estimate(seen, prior) == prior  # the 90th percentile, 900 s: below the floor
    tens = [150.0 * i for i in range(1, 11)]  # 150 .. 1500
    assert changeover_estimate(tens, prior) == 1350.0  # the 90th percentile
    assert changeover_estimate([*tens, 5000.0], prior) == 1500.0
    assert changeover_estimate([3000.0, 100.0], prior) == 3000.0  # a slow one counts at once


def test_decision_to_json_names_the_figures() -> None:
    body = decide_deadline(situation(elapsed_h=10.0, done_h=6.0, placement=Placement.WAITING_FOR_SPOT)).to_json()
    assert body["action"] == "stay"
    assert set(body) == {"action", "reason", "slack_seconds", "progress", "expected_progress", "holds_seconds"}
    assert body["progress"] == 0.6 and body["expected_progress"] == 0.5


# --- the simulator runs the production function --------------------------------------------


def test_the_simulator_calls_the_production_policy_function(monkeypatch: pytest.MonkeyPatch) -> None:
    assert bench.decide_deadline is deadline.decide_deadline
    # And every decision of a simulated run goes through that name, not a copy of the rules.
    rules: list[Rule] = []

    def counted(s: Situation, rule: Rule) -> deadline.DeadlineDecision:
        rules.append(rule)
        return deadline.decide_deadline(s, rule)

    monkeypatch.setattr(bench, "decide_deadline", counted)
    simulate(Job(HOUR, 12 * GAP, 600, 3.0), trace_of([True, False] * 10), 0, bench.deadline_chooser(Rule.SPOTJOBS))
    assert rules and set(rules) == {Rule.SPOTJOBS}


GAP = 600


def trace_of(bits: list[bool]) -> Trace:
    return Trace.of("synthetic", GAP, [int(b) for b in bits])


# A trace of 60 ticks and a job on-demand could finish by its deadline (the properties below).
SMALL_JOBS = {
    "bits": st.lists(st.booleans(), min_size=60, max_size=60),
    "work_ticks": st.integers(min_value=1, max_value=30),
    "extra_ticks": st.integers(min_value=0, max_value=29),
    "changeover": st.sampled_from([0, 180, 600, 720, 1800]),
}


@settings(max_examples=120, deadline=None)
@given(
    **SMALL_JOBS,
    rule=st.sampled_from(list(Rule)),
)
def test_no_deadline_that_on_demand_could_meet_is_missed(
    bits: list[bool], work_ticks: int, extra_ticks: int, changeover: int, rule: Rule
) -> None:
    work = work_ticks * GAP
    deadline_ticks = math.ceil((work + changeover) / GAP) + extra_ticks  # on-demand from the start fits
    job = Job(work, deadline_ticks * GAP, changeover, 3.0)
    trace = trace_of(bits)
    outcome = simulate(job, trace, 0, bench.deadline_chooser(rule))
    assert not outcome.missed
    assert outcome.spot_work_hours + outcome.on_demand_work_hours == pytest.approx(work / HOUR)
    # Jumping over ticks where nothing can change gives what asking at every tick gives.
    assert simulate(job, trace, 0, bench.deadline_chooser(rule), every_tick=True) == outcome


@settings(max_examples=120, deadline=None)
@given(
    **SMALL_JOBS,
    share=st.floats(min_value=0.0, max_value=1.0),
    lifetime=st.floats(min_value=0.0, max_value=1e6),
)
def test_no_deadline_is_missed_whatever_the_fleets_outlook_says(
    bits: list[bool], work_ticks: int, extra_ticks: int, changeover: int, share: float, lifetime: float
) -> None:
    # The outlook only decides above the net: a wrong one (a stale estimate) costs, never misses.
    work = work_ticks * GAP
    job = Job(work, (math.ceil((work + changeover) / GAP) + extra_ticks) * GAP, changeover, 3.0)
    outlook = SpotOutlook(share, lifetime)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench, "decide_deadline", lambda s, rule: decide_deadline(replace(s, spot_outlook=outlook), rule))
        assert not simulate(job, trace_of(bits), 0, bench.deadline_chooser(Rule.SPOTJOBS)).missed


def test_greedy_on_a_synthetic_trace_uses_spot_until_the_slack_runs_out() -> None:
    # 3 h of work, a 6 h deadline, d = 0.2 h; Spot for the first 2 h, then none.
    trace = trace_of([True] * 12 + [False] * 48)
    job = Job(3 * HOUR, 36 * GAP, 720, 3.0)
    outcome = simulate(job, trace, 0, bench.deadline_chooser(Rule.GREEDY))
    assert not outcome.missed
    assert outcome.spot_work_hours == pytest.approx(2 - 0.2)
    assert outcome.on_demand_work_hours == pytest.approx(1.2)
    # Spot 2 h, on-demand 1.2 h of work and its changeover, at k = 3; on-demand only: 3.2 h x 3.
    assert outcome.cost == pytest.approx((2 + 3 * 1.4) / (3 * 3.2))


def test_fixed_k_falls_back_after_the_spot_attempt_runs_out_of_restarts_and_misses_when_spot_never_comes() -> None:
    flaky = trace_of([True, False] * 40)  # a preemption every other tick
    job = Job(2 * HOUR, 60 * GAP, 180, 3.0)
    outcome = simulate(job, flaky, 0, bench.fixed_k_chooser(1))
    assert not outcome.missed
    # Seven Spot runs of one tick (the first and six restarts), each paying the changeover.
    assert outcome.spot_work_hours == pytest.approx(7 * (GAP - 180) / HOUR)
    never = trace_of([False] * 80)
    missed = simulate(job, never, 0, bench.fixed_k_chooser(1))
    assert missed.missed
    # A missed job is still finished, on on-demand after the deadline, and paid for.
    assert missed.on_demand_work_hours == pytest.approx(2.0)
    assert missed.cost == pytest.approx(1.0)
    assert not simulate(job, never, 0, bench.deadline_chooser(Rule.SPOTJOBS)).missed


def test_omniscient_is_the_least_cost_and_never_above_any_policy() -> None:
    bits = ([True] * 5 + [False] * 3) * 10
    trace = trace_of(bits)
    job = Job(4 * HOUR, 40 * GAP, 720, 3.0)
    starts = [0, 3, 9, 20]
    costs, spot_hours = omniscient_costs(trace, starts, int(job.work_seconds), 720, 3.0, [40])[40]
    for i, start in enumerate(starts):
        for rule in Rule:
            assert costs[i] <= simulate(job, trace, start, bench.deadline_chooser(rule)).cost + 1e-9
        assert 0 < spot_hours[i] <= 4.0
    # Always available: all of it on Spot, one changeover.
    always = trace_of([True] * 60)
    best, spot = omniscient_costs(always, [0], int(job.work_seconds), 720, 3.0, [40])[40]
    assert best[0] == pytest.approx((4 * HOUR + 720) / (3.0 * (4 * HOUR + 720)))
    assert spot[0] == pytest.approx(4.0)


def test_the_margin_of_one_tick_is_what_keeps_the_promise(monkeypatch: pytest.MonkeyPatch) -> None:
    # One tick of work, a changeover of 180 s, a deadline two ticks away, no Spot at all:
    # on-demand from the start fits (780 s of 1,200). Waiting at the first tick leaves 420 s of
    # slack, above 2d: without the margin (m = 0) the safety net waits, and the next tick is too late.
    job = Job(GAP, 2 * GAP, 180, 3.0)
    never = trace_of([False, False])
    assert not simulate(job, never, 0, bench.deadline_chooser(Rule.GREEDY)).missed
    real = deadline.decide_deadline
    monkeypatch.setattr(bench, "decide_deadline", lambda s, rule: real(replace(s, review_seconds=0.0), rule))
    assert simulate(job, never, 0, bench.deadline_chooser(Rule.GREEDY)).missed
