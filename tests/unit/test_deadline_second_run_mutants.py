"""The deadline rule's second Spot run and `sits_out` (shared/deciding/deadline.py) at their edges,
each pinned where a slip in the code would change the answer: an expected outage of exactly the
bound still sits out, and what the second run's reason says of the slack."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import shared.deciding.deadline as deadline
from shared.deciding.deadline import Action, Placement, Situation, Work, decide_deadline, sits_out
from shared.fleet.estimate import SpotOutlook

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
HOUR = 3600.0
D = 600.0  # changeover
M = 300.0  # review interval
REVIEW = 60.0  # a reconcile pass a minute: when `sits_out` looks for the next review's hold
NET = 2 * D + M


def outage_of(seconds: float) -> SpotOutlook:
    """An outlook whose expected outage is exactly `seconds` (capacity half the time, runs as long)."""
    outlook = SpotOutlook(0.5, seconds)
    assert outlook.expected_wait_seconds == seconds
    return outlook


def situation(placement: Placement, *, since: float, slack_beyond_net: float, outlook: SpotOutlook) -> Situation:
    """A 10 h job, 4 h done at 10 h into its deadline, in `placement` for `since` seconds, with this
    slack beyond the safety net (a wait's slack counts the on-demand changeover still ahead)."""
    now = T0 + timedelta(hours=10)
    ahead = D if placement is Placement.WAITING_FOR_SPOT else 0.0
    return Situation(
        now=now,
        deadline=now + timedelta(seconds=6 * HOUR + ahead + NET + slack_beyond_net),
        started=T0,
        work=Work.in_seconds(int(10 * HOUR), int(4 * HOUR)),
        placement=placement,
        placed_at=now - timedelta(seconds=since),
        changeover_seconds=D,
        review_seconds=M,
        spot_outlook=outlook,
    )


def test_an_expected_outage_of_exactly_two_changeovers_is_still_sat_out() -> None:
    bound = deadline.WAIT_CHANGEOVERS * D
    waiting = situation(Placement.WAITING_FOR_SPOT, since=D + 1, slack_beyond_net=10 * D, outlook=outage_of(bound))
    assert sits_out(waiting, outage_of(bound), REVIEW)
    assert not sits_out(waiting, outage_of(bound + 1), REVIEW)


def test_an_expected_outage_of_exactly_the_slack_beyond_the_net_is_still_sat_out() -> None:
    wait = 1.5 * D  # under two changeovers: the slack is the bound here
    # The claim expected one-minute outages: the rule holds the wait for the slack beyond the net,
    # so the next review still spares a move and only the slack bounds the sit-out.
    waiting = situation(Placement.WAITING_FOR_SPOT, since=D + 1, slack_beyond_net=wait, outlook=outage_of(60))
    assert sits_out(waiting, outage_of(wait), REVIEW)
    assert not sits_out(waiting, outage_of(wait + 1), REVIEW)


def test_a_sit_out_stops_at_the_last_review_whose_successor_still_spares_a_move() -> None:
    # The claim expected 3 h outages, so the rule holds the wait 3 changeovers for a move; a move
    # is spared while that hold is more than a changeover. The next review, REVIEW on, still has
    # one until the wait reaches 2d - REVIEW: from there a sit-out leaves no move behind it.
    last = 2 * D - REVIEW
    fleet = outage_of(deadline.WAIT_CHANGEOVERS * D)
    for since, sat_out in ((last - 1, True), (last, False)):
        waiting = situation(
            Placement.WAITING_FOR_SPOT, since=since, slack_beyond_net=10 * D, outlook=SpotOutlook(0.5, 3 * HOUR)
        )
        held = decide_deadline(waiting)
        assert held.held_for_move and held.holds_seconds == pytest.approx(3 * D - since)
        assert sits_out(waiting, fleet, REVIEW) is sat_out


def test_the_second_run_says_the_slack_beyond_the_net_it_spends() -> None:
    outlook = outage_of(900.0)
    pays = deadline.SECOND_RUN_CHANGEOVERS * D
    s = situation(Placement.ON_DEMAND, since=D + 900.0, slack_beyond_net=pays, outlook=outlook)
    decision = decide_deadline(s)
    assert decision.action is Action.BACK_TO_SPOT
    assert decision.reason == (
        "a second Spot run: the slack beyond the net (1200 s) pays 2 changeovers and the outage expected there is over"
    )


@pytest.mark.parametrize(("slack_beyond_net", "action"), [(1200.0, Action.BACK_TO_SPOT), (1199.0, Action.STAY)])
def test_the_second_run_needs_two_changeovers_of_slack_beyond_the_net(slack_beyond_net: float, action: Action) -> None:
    # docs/deadlines.md: "the slack beyond the net pays 2 changeovers" (2 x 600 s here).
    s = situation(Placement.ON_DEMAND, since=D + 900.0, slack_beyond_net=slack_beyond_net, outlook=outage_of(900.0))
    assert decide_deadline(s).action is action


def test_on_demand_holds_until_it_catches_up_when_that_comes_before_the_second_run() -> None:
    # A 3 h outage expected: the second run is due 3 h from now; with 20 changeovers of slack the
    # job passes the line 2d on sooner. docs/deadlines.md: until then, "or until a second Spot run
    # is due, if sooner"; a caller may ask again sooner, never later.
    s = situation(Placement.ON_DEMAND, since=D, slack_beyond_net=20 * D, outlook=outage_of(3 * HOUR))
    decision = decide_deadline(s)
    assert decision.action is Action.STAY and decision.reason.startswith("hysteresis")
    assert decision.holds_seconds is not None and decision.holds_seconds < 3 * HOUR
    assert decision.holds_seconds == pytest.approx(deadline._until_caught_up(s))


def test_a_wait_that_fell_behind_the_line_half_a_second_ago_is_held_three_changeovers_less_that() -> None:
    # Waiting for Spot since 5 h in, 5 h done of 10, a 20 h deadline: behind the line since 10 h in.
    behind = 0.5
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
        spot_outlook=SpotOutlook(0.5, 3 * HOUR),
    )
    held = decide_deadline(s)
    assert held.action is Action.STAY and held.held_for_move
    assert held.holds_seconds == pytest.approx(deadline.MOVE_HOLD_CHANGEOVERS * D - behind)


def test_the_long_slack_bound_starts_at_exactly_its_changeovers_of_slack() -> None:
    bound = deadline.LONG_SLACK_WAIT_CHANGEOVERS * D
    long_slack = deadline.LONG_SLACK_CHANGEOVERS * D
    at = situation(Placement.WAITING_FOR_SPOT, since=D + 1, slack_beyond_net=long_slack, outlook=outage_of(bound))
    assert sits_out(at, outage_of(bound), REVIEW)
    assert not sits_out(at, outage_of(bound + 1), REVIEW)
    below = situation(
        Placement.WAITING_FOR_SPOT, since=D + 1, slack_beyond_net=long_slack - 1, outlook=outage_of(bound)
    )
    assert not sits_out(below, outage_of(bound), REVIEW)
