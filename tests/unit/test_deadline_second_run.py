"""Issue 45 item 2's edges of `Rule.SPOTJOBS` (shared/deciding/deadline.py): a second Spot run from
on-demand when the slack beyond the net pays one, the hold for a move counted from when a wait fell
behind the line, and `sits_out`, which keeps a move from taking a job out of a short outage."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

import shared.deciding.deadline as deadline
from shared.deciding.deadline import Action, Placement, Rule, Situation, Work, decide_deadline, sits_out
from shared.fleet.estimate import SpotOutlook

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
HOUR = 3600.0
D = 600.0  # changeover
M = 300.0  # review interval
REVIEW = 60.0  # a reconcile pass a minute: when `sits_out` looks for the next review's hold
NET = 2 * D + M
# Outages of 1/4 h on average (runs of 3 h, capacity 12/13 of the time).
SHORT_OUTAGES = SpotOutlook(12 / 13, 3 * HOUR)


def on_demand(*, slack_beyond_net: float, on_demand_for: float, **changes: object) -> Situation:
    """A 10 h job, 4 h done at 10 h into a deadline (behind Uniform Progress's line), on on-demand
    for `on_demand_for` seconds (its changeover done), with this slack beyond the safety net."""
    now = T0 + timedelta(hours=10)
    base = Situation(
        now=now,
        deadline=now + timedelta(seconds=6 * HOUR + NET + slack_beyond_net),
        started=T0,
        work=Work.in_seconds(int(10 * HOUR), int(4 * HOUR)),
        placement=Placement.ON_DEMAND,
        placed_at=now - timedelta(seconds=on_demand_for),
        changeover_seconds=D,
        review_seconds=M,
        spot_outlook=SHORT_OUTAGES,
    )
    return replace(base, **changes)


def test_on_demand_behind_the_line_goes_back_to_spot_for_a_second_run_the_slack_pays_for() -> None:
    pays = deadline.SECOND_RUN_CHANGEOVERS * D
    over = D + SHORT_OUTAGES.expected_wait_seconds  # its changeover and the outage expected
    s = on_demand(slack_beyond_net=pays, on_demand_for=over)
    decision = decide_deadline(s)
    assert decision.slack_seconds - NET == pytest.approx(pays)
    assert decision.progress < decision.expected_progress  # behind the line: the hysteresis would stay
    assert decision.action is Action.BACK_TO_SPOT and decision.reason.startswith("a second Spot run")
    # Uniform Progress and Greedy stay on on-demand, as before.
    assert decide_deadline(s, Rule.UNIFORM_PROGRESS).action is Action.STAY
    assert decide_deadline(s, Rule.GREEDY).action is Action.STAY


def test_the_second_run_waits_for_the_outage_to_be_over_and_says_until_when() -> None:
    over = D + SHORT_OUTAGES.expected_wait_seconds
    early = on_demand(slack_beyond_net=10 * D, on_demand_for=over - 120)
    decision = decide_deadline(early)
    assert decision.action is Action.STAY and decision.reason.startswith("hysteresis")
    assert decision.holds_seconds == pytest.approx(120)


@pytest.mark.parametrize(
    "changes",
    [
        {"spot_available": False},  # the fleet says Spot has no capacity now
        {"spot_outlook": None},  # nothing known of Spot there: Uniform Progress
    ],
)
def test_no_second_run_where_spot_has_no_capacity_or_nothing_is_known(changes: dict[str, object]) -> None:
    s = on_demand(slack_beyond_net=10 * D, on_demand_for=2 * HOUR, **changes)
    assert decide_deadline(s).action is Action.STAY


def test_no_second_run_when_the_slack_beyond_the_net_cannot_pay_for_it() -> None:
    short = on_demand(slack_beyond_net=deadline.SECOND_RUN_CHANGEOVERS * D - 1, on_demand_for=2 * HOUR)
    decision = decide_deadline(short)
    assert decision.action is Action.STAY and decision.reason.startswith("hysteresis")


def test_the_net_still_fires_after_a_second_run_whose_spot_finds_no_capacity() -> None:
    # Back on Spot with the slack the second run left: a wait without capacity goes to on-demand
    # once the slack is below the net, as any wait does.
    s = on_demand(slack_beyond_net=deadline.SECOND_RUN_CHANGEOVERS * D, on_demand_for=2 * HOUR)
    waiting = replace(
        s,
        placement=Placement.WAITING_FOR_SPOT,
        placed_at=s.now,
        now=s.now + timedelta(seconds=deadline.SECOND_RUN_CHANGEOVERS * D),
    )
    decision = decide_deadline(waiting)
    assert decision.action is Action.SWITCH_TO_ON_DEMAND and decision.reason.startswith("safety net")


def test_a_wait_that_falls_behind_the_line_is_held_for_a_move_from_then() -> None:
    # Waiting for Spot for 5 h (since 5 h in), 5 h done of 10: the line (1/20 h) reaches 0.25 at
    # 5 h... of a 20 h deadline the job fell behind 0.5 at 10 h, `behind` seconds ago.
    long_outages = SpotOutlook(0.5, 3 * HOUR)
    behind = 120.0
    now = T0 + timedelta(hours=10, seconds=behind)
    s = Situation(
        now=now,
        deadline=T0 + timedelta(hours=20),
        started=T0,
        work=Work.in_seconds(int(10 * HOUR), int(5 * HOUR)),
        placement=Placement.WAITING_FOR_SPOT,
        placed_at=T0 + timedelta(hours=5),
        changeover_seconds=D,
        review_seconds=M,
        spot_outlook=long_outages,
    )
    held = decide_deadline(s)
    assert held.action is Action.STAY and "for a move" in held.reason and held.held_for_move
    assert held.holds_seconds == pytest.approx(deadline.MOVE_HOLD_CHANGEOVERS * D - behind)
    later = replace(s, now=now + timedelta(seconds=deadline.MOVE_HOLD_CHANGEOVERS * D))
    left = decide_deadline(later)
    assert left.action is Action.SWITCH_TO_ON_DEMAND and not left.held_for_move


def waiting_for(waited: float, *, slack_beyond_net: float = 10 * D) -> Situation:
    """Waiting for Spot `waited` seconds, with this slack beyond the safety net (the slack counts
    the on-demand changeover still ahead). Its claim expected one-minute outages, so the rule sits
    the wait out itself and holds it for the slack beyond the net: the next review still spares a
    move, and only `sits_out`'s own bounds answer."""
    now = T0 + timedelta(hours=10)
    return Situation(
        now=now,
        deadline=now + timedelta(seconds=6 * HOUR + D + NET + slack_beyond_net),
        started=T0,
        work=Work.in_seconds(int(10 * HOUR), int(4 * HOUR)),
        placement=Placement.WAITING_FOR_SPOT,
        placed_at=now - timedelta(seconds=waited),
        changeover_seconds=D,
        review_seconds=M,
        spot_outlook=outlook_with_wait(60),
    )


def outlook_with_wait(seconds: float) -> SpotOutlook:
    """Capacity 99% of the time, runs long enough for a mean outage of `seconds`."""
    return SpotOutlook(0.99, seconds * 99)


def test_a_job_sits_out_an_outage_the_fleet_expects_short_until_its_wait_outlasts_it() -> None:
    short = outlook_with_wait(1.5 * D)
    assert short.expected_wait_seconds == pytest.approx(1.5 * D)
    assert sits_out(waiting_for(D + 1), short, REVIEW)
    assert sits_out(waiting_for(1.5 * D), short, REVIEW)
    assert not sits_out(waiting_for(1.5 * D + 1), short, REVIEW)  # longer than expected: weigh a move
    # A very short expected outage still sits out a changeover (a move costs one).
    assert sits_out(waiting_for(D), outlook_with_wait(60), REVIEW)
    assert not sits_out(waiting_for(D + 1), outlook_with_wait(60), REVIEW)


def test_a_job_does_not_sit_out_a_long_outage_one_the_slack_cannot_pay_or_an_unknown_one() -> None:
    longer = outlook_with_wait(deadline.WAIT_CHANGEOVERS * D + 1)
    assert not sits_out(waiting_for(D + 1), longer, REVIEW)
    assert not sits_out(waiting_for(D + 1, slack_beyond_net=1.5 * D - 1), outlook_with_wait(1.5 * D), REVIEW)
    assert sits_out(waiting_for(D + 1, slack_beyond_net=1.5 * D + 1), outlook_with_wait(1.5 * D), REVIEW)
    assert decide_deadline(waiting_for(D + 1, slack_beyond_net=1.5 * D)).slack_seconds == pytest.approx(NET + 1.5 * D)
    assert not sits_out(waiting_for(D + 1), None, REVIEW)


def test_with_long_slack_beyond_the_net_a_job_sits_out_an_outage_of_three_changeovers() -> None:
    # docs/placement.md, fifth pass: with 24 changeovers of slack beyond the net a wait pays for
    # itself many times over, and a move pays dearer Spot for the rest of the work (the shared
    # traces' 1.5: a job left us-east4 ten minutes before it came back).
    three = outlook_with_wait(2.9 * D)  # under three changeovers (the exact edge: the mutants' file)
    assert sits_out(waiting_for(D + 1, slack_beyond_net=24 * D), three, REVIEW)
    assert sits_out(waiting_for(2.9 * D, slack_beyond_net=24 * D), three, REVIEW)
    assert not sits_out(waiting_for(3 * D, slack_beyond_net=24 * D), three, REVIEW)  # outlasted it: weigh a move
    assert not sits_out(waiting_for(D + 1, slack_beyond_net=24 * D), outlook_with_wait(3.1 * D), REVIEW)
    # Below 24 changeovers the bound stays two changeovers (the shared 1.2, SkyNomad's 1.1).
    assert not sits_out(waiting_for(D + 1, slack_beyond_net=24 * D - 1), three, REVIEW)
    assert sits_out(waiting_for(D + 1, slack_beyond_net=24 * D - 1), outlook_with_wait(1.9 * D), REVIEW)
