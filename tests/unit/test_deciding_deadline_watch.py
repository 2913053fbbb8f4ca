"""shared/deciding/deadline_watch.py at its edges, on Situations built by hand: the projection of
the finish counts the changeover still to pay, on the capacity the attempt has."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.deciding.deadline import Placement, Situation, Work
from shared.deciding.deadline_watch import projected_finish

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
CHANGEOVER = 600.0


def placed(placement: Placement, seconds_ago: float) -> Situation:
    """1,000 steps left, a second each on Spot and half that on on-demand; asked for `seconds_ago`."""
    return Situation(
        now=NOW,
        deadline=NOW + timedelta(days=1),
        started=NOW - timedelta(hours=1),
        work=Work(total_steps=2000, committed_steps=1000, spot_step_seconds=1.0, on_demand_step_seconds=0.5),
        placement=placement,
        placed_at=NOW - timedelta(seconds=seconds_ago),
        changeover_seconds=CHANGEOVER,
        review_seconds=300.0,
    )


@pytest.mark.parametrize(
    ("placement", "seconds_ago", "finish_in"),
    [
        # Waiting for Spot: the whole changeover is still ahead, however long it waited already.
        (Placement.WAITING_FOR_SPOT, 0, 1000 + CHANGEOVER),
        (Placement.WAITING_FOR_SPOT, 2 * CHANGEOVER, 1000 + CHANGEOVER),
        # Running: what is left of the changeover since it was asked for, never less than none.
        (Placement.ON_SPOT, 100, 1000 + CHANGEOVER - 100),
        (Placement.ON_SPOT, 2 * CHANGEOVER, 1000),
        (Placement.ON_DEMAND, 100, 500 + CHANGEOVER - 100),
    ],
)
def test_the_projected_finish_adds_the_changeover_still_to_pay(
    placement: Placement, seconds_ago: float, finish_in: float
) -> None:
    assert projected_finish(placed(placement, seconds_ago)) == NOW + timedelta(seconds=finish_in)
