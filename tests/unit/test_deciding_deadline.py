"""The deadline rule at its exact edges (shared/deciding/deadline.py): each threshold the module
docstring states, met exactly ("below 2d + m", "behind the line", "ahead of ep(t + 2d)", a wait
"at most" its share, a hold of exactly its changeovers), the figures a decision says and how long
it holds when another term is the smaller, and work counted in steps that are not seconds.
Situations are built in whole seconds, so that each edge is met exactly, not approximately."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from shared.deciding.deadline import (
    MOVE_HOLD_CHANGEOVERS,
    Action,
    DeadlineDecision,
    Placement,
    Rule,
    Situation,
    Work,
    decide_deadline,
)
from shared.fleet.estimate import SpotOutlook

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
D = 600.0  # the changeover
M = 300.0  # the review interval
NET = 2 * D + M
TOTAL = 36_000  # ten hours of work, a step a second
SPAN = 72_000  # the deadline twenty hours after the start
LONG_OUTAGES = SpotOutlook(0.5, 3 * 3600.0)  # an expected wait of three hours: past any cutoff


def at(
    elapsed: float, done: int, placement: Placement, *, placed: float = 3600.0, work: Work | None = None
) -> Situation:
    """`elapsed` seconds after the start, `done` steps committed, placed `placed` seconds ago."""
    now = T0 + timedelta(seconds=elapsed)
    return Situation(
        now=now,
        deadline=T0 + timedelta(seconds=SPAN),
        started=T0,
        work=work or Work.in_seconds(TOTAL, done),
        placement=placement,
        placed_at=now - timedelta(seconds=placed),
        changeover_seconds=D,
        review_seconds=M,
    )


def test_a_wait_with_slack_exactly_the_safety_net_is_not_below_it() -> None:
    # Half the work left (18,000 s): slack = time left - 18,000 - d.
    exactly = at(SPAN - (18_000 + D + NET), 18_000, Placement.WAITING_FOR_SPOT)
    decision = decide_deadline(exactly, Rule.GREEDY)
    assert decision.slack_seconds == NET
    assert (decision.action, decision.holds_seconds) == (Action.STAY, 0.0)

    below = replace(exactly, now=exactly.now + timedelta(seconds=1))
    assert decide_deadline(below, Rule.GREEDY).action is Action.SWITCH_TO_ON_DEMAND


def test_a_spot_run_whose_slack_pays_exactly_its_changeover_stays() -> None:
    started_now = at(SPAN - (18_000 + D + D), 18_000, Placement.ON_SPOT, placed=0.0)
    decision = decide_deadline(started_now)
    assert decision.slack_seconds == D
    assert decision.action is Action.STAY and decision.reason.startswith("exploitation")

    later = started_now.now + timedelta(seconds=0.5)
    half_a_second_short = replace(started_now, now=later, placed_at=later)  # started half a second later
    assert decide_deadline(half_a_second_short).action is Action.SWITCH_TO_ON_DEMAND


@pytest.mark.parametrize("rule", [Rule.UNIFORM_PROGRESS, Rule.SPOTJOBS])
@pytest.mark.parametrize("outlook", [None, SpotOutlook(0.5, 60.0), LONG_OUTAGES], ids=["none", "short", "long"])
def test_a_wait_exactly_on_the_line_is_not_behind_it(rule: Rule, outlook: SpotOutlook | None) -> None:
    on_the_line = replace(at(SPAN / 2, TOTAL // 2, Placement.WAITING_FOR_SPOT, placed=D), spot_outlook=outlook)
    decision = decide_deadline(on_the_line, rule)
    assert decision.progress == decision.expected_progress == 0.5
    assert decision.action is Action.STAY
    assert decision.reason == "waiting for Spot: ahead of the line"


def test_on_demand_exactly_ahead_of_the_line_2d_on_goes_back_to_spot() -> None:
    # The line 2d on is (elapsed + 2d) / span: exactly the half done.
    exactly = at(SPAN / 2 - 2 * D, TOTAL // 2, Placement.ON_DEMAND)
    decision = decide_deadline(exactly, Rule.UNIFORM_PROGRESS)
    assert decision.action is Action.BACK_TO_SPOT


def behind_the_line(outlook: SpotOutlook, *, waited: float = 3600.0) -> Situation:
    """4 h of 10 done at 10 h of 20, waiting for Spot `waited` seconds, with the fleet's outlook."""
    return replace(at(SPAN / 2, 4 * 3600, Placement.WAITING_FOR_SPOT, placed=waited), spot_outlook=outlook)


def test_an_expected_wait_of_exactly_its_cutoff_is_sat_out() -> None:
    # The cutoff here is WAIT_CHANGEOVERS changeovers (the slack beyond the net is hours).
    exactly = SpotOutlook(0.5, 2 * D)  # share one half: the expected wait is the lifetime
    assert exactly.expected_wait_seconds == 2 * D
    decision = decide_deadline(behind_the_line(exactly))
    assert decision.action is Action.STAY
    assert decision.reason == (
        "waiting for Spot behind the line: the fleet's expected wait 1200 s is short against the slack beyond "
        "the net (12300 s) and the changeover"
    )
    # docs/placement.md: at most `WAIT_CHANGEOVERS` = 2 changeovers (pinned as documented)
    assert decide_deadline(behind_the_line(SpotOutlook(0.5, 2 * D + 1))).action is Action.SWITCH_TO_ON_DEMAND


def test_a_wait_held_for_a_move_exactly_its_changeovers_is_still_held() -> None:
    decision = decide_deadline(behind_the_line(LONG_OUTAGES, waited=MOVE_HOLD_CHANGEOVERS * D))
    assert decision.action is Action.STAY
    assert decision.reason == (
        "waiting for Spot behind the line: held 3 changeovers for a move to another location "
        "(slack beyond the net 12300 s)"
    )
    assert decision.holds_seconds == 0.0


def test_a_hold_for_a_move_lasts_no_longer_than_the_slack_beyond_the_net_less_a_changeover() -> None:
    # The slack beyond the net is 2d + 100 s: enough for a move (more than 2d), and the hold ends
    # 100 s + d before the hold's own end (waited d of 3d).
    fresh = behind_the_line(LONG_OUTAGES, waited=D)
    beyond = decide_deadline(fresh).slack_seconds - NET
    tight = replace(fresh, deadline=fresh.deadline - timedelta(seconds=beyond - (2 * D + 100)))
    decision = decide_deadline(tight)
    assert decision.slack_seconds - NET == pytest.approx(2 * D + 100)
    assert decision.action is Action.STAY and "for a move" in decision.reason
    assert decision.holds_seconds == pytest.approx(D + 100)


def test_a_wait_ahead_of_the_line_holds_no_longer_than_the_slack_beyond_the_net() -> None:
    # 6 h of 10 done at 5 h of a 10.5 h deadline: the line reaches 0.6 in 1.3 h, the slack beyond
    # the net (4,800 - 1,500 s) runs out first.
    s = replace(at(5 * 3600, 6 * 3600, Placement.WAITING_FOR_SPOT), deadline=T0 + timedelta(hours=10.5))
    decision = decide_deadline(s, Rule.UNIFORM_PROGRESS)
    assert (decision.action, decision.reason) == (Action.STAY, "waiting for Spot: ahead of the line")
    assert decision.slack_seconds == 4800.0
    assert decision.holds_seconds == pytest.approx(4800.0 - NET)


@pytest.mark.parametrize("step_seconds", [1.0, 2.0, 0.5])
def test_hysteresis_holds_until_on_demand_progress_reaches_the_line_2d_on_after_the_changeover_left(
    step_seconds: float,
) -> None:
    """On on-demand 100 s of its changeover: no progress for the 500 s left of it, then a step per
    `step_seconds`; the decision holds exactly until progress reaches the line 2d on."""
    total = int(TOTAL / step_seconds)  # ten hours of work whatever the step
    work = Work(total, total // 2 - int(1800 / step_seconds), spot_step_seconds=step_seconds)
    s = at(SPAN / 2, 0, Placement.ON_DEMAND, placed=100.0, work=work)
    decision = decide_deadline(s, Rule.UNIFORM_PROGRESS)
    assert decision.reason.startswith("hysteresis")
    holds = decision.holds_seconds
    assert holds is not None

    def after(seconds: float) -> Action:
        steps = int((seconds - (D - 100)) / step_seconds)  # progress only once the changeover is paid
        later = replace(
            s, now=s.now + timedelta(seconds=seconds), work=replace(work, committed_steps=work.committed_steps + steps)
        )
        return decide_deadline(later, Rule.UNIFORM_PROGRESS).action

    assert after(holds - 60) is Action.STAY
    assert after(holds + 60) is Action.BACK_TO_SPOT


def test_work_of_no_steps_is_done() -> None:
    nothing = Work(total_steps=0, committed_steps=0, spot_step_seconds=1.0)
    assert nothing.done_fraction == 1.0
    assert decide_deadline(at(0, 0, Placement.WAITING_FOR_SPOT, work=nothing)).reason == "done"


def test_a_wait_is_sat_out_up_to_twice_the_slack_beyond_the_net() -> None:
    """docs/placement.md: at most `WAIT_SHARE_OF_SLACK` = 2 times the slack beyond the safety net
    (pinned here as documented, not read from the module)."""
    fresh = behind_the_line(LONG_OUTAGES)
    beyond = decide_deadline(fresh).slack_seconds - NET
    tight = replace(fresh, deadline=fresh.deadline - timedelta(seconds=beyond - 300))  # 300 s beyond the net
    assert decide_deadline(replace(tight, spot_outlook=SpotOutlook(0.5, 600.0))).action is Action.STAY
    assert decide_deadline(replace(tight, spot_outlook=SpotOutlook(0.5, 601.0))).action is Action.SWITCH_TO_ON_DEMAND


@pytest.mark.parametrize("committed", [TOTAL, TOTAL + 1200])
def test_work_committed_to_its_total_or_past_it_has_nothing_left_anywhere(committed: int) -> None:
    done = Work.in_seconds(TOTAL, committed)
    assert [done.remaining_seconds(p) for p in Placement] == [0.0, 0.0, 0.0]


def test_a_decisions_figures_are_rounded_as_said() -> None:
    """Slack and holds to a tenth of a second, the shares to four places."""
    body = DeadlineDecision(Action.STAY, "why", 1234.5678, 0.123456, 0.654321, 98.7654).to_json()
    assert body == {
        "action": "stay",
        "reason": "why",
        "slack_seconds": 1234.6,
        "progress": 0.1235,
        "expected_progress": 0.6543,
        "holds_seconds": 98.8,
    }


def test_past_the_deadline_the_line_asks_for_all_of_the_work_not_more() -> None:
    late = at(SPAN + 3600, TOTAL // 2, Placement.ON_DEMAND)
    assert decide_deadline(late).expected_progress == 1.0


def test_a_deadline_at_its_own_start_is_decided_without_dividing_by_no_time() -> None:
    s = at(0, 0, Placement.WAITING_FOR_SPOT, placed=0.0)
    at_start = replace(s, deadline=s.started)
    decision = decide_deadline(at_start)
    assert decision.action is Action.SWITCH_TO_ON_DEMAND and decision.expected_progress == 0.0


def test_before_the_requests_start_the_line_asks_for_none_of_the_work() -> None:
    """A clock a little behind the ledger's (the observation's time before the claim's)."""
    early = at(-60, 0, Placement.WAITING_FOR_SPOT, placed=0.0)
    assert decide_deadline(early).expected_progress == 0.0


def test_a_spot_run_past_its_changeover_with_no_slack_left_leaves_for_on_demand() -> None:
    """Past the changeover none of it is left to pay: half a second short of on-demand's time is
    short, never made up by a changeover paid twice over."""
    short = at(SPAN - (18_000 + D) + 0.5, 18_000, Placement.ON_SPOT, placed=2 * D)
    decision = decide_deadline(short)
    assert decision.slack_seconds == -0.5
    assert decision.action is Action.SWITCH_TO_ON_DEMAND
