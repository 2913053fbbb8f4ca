"""`preempted_often`'s window at its edge (shared/deciding/deadline.py): a preemption exactly
`QUICK_PREEMPTION_HOURS` (4 h, docs/placement.md "Robust placement") ago is still lately, one a
second older is not, nor one dated after now. The mutation pass found the window's edges untested
(the tests stood 0.1 h off)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.deciding.deadline import QUICK_PREEMPTIONS, Placement, Situation, Work, preempted_often

NOW = datetime(2026, 12, 1, 17, 0, tzinfo=UTC)
D, M = 600.0, 300.0  # changeover, review interval


def waiting_with_little_slack() -> Situation:
    """A 10 h job, 5 h done, waiting for Spot, one changeover of slack beyond the safety net."""
    return Situation(
        now=NOW,
        deadline=NOW + timedelta(seconds=5 * 3600 + D + (2 * D + M) + D),
        started=NOW - timedelta(hours=9),
        work=Work.in_seconds(10 * 3600, 5 * 3600),
        placement=Placement.WAITING_FOR_SPOT,
        placed_at=NOW - timedelta(minutes=1),
        changeover_seconds=D,
        review_seconds=M,
    )


@pytest.mark.parametrize(("seconds_ago", "often"), [(4 * 3600, True), (4 * 3600 + 1, False)])
def test_a_preemption_exactly_four_hours_ago_is_still_lately(seconds_ago: int, often: bool) -> None:
    # as many as the rule asks for (QUICK_PREEMPTIONS), all that long ago
    times = [NOW - timedelta(seconds=seconds_ago)] * QUICK_PREEMPTIONS
    assert preempted_often(waiting_with_little_slack(), times) is often


def test_a_preemption_dated_after_now_is_not_counted() -> None:
    # counted by an instance whose clock ran a second ahead of this decision's
    times = [NOW + timedelta(seconds=1)] * QUICK_PREEMPTIONS
    assert not preempted_often(waiting_with_little_slack(), times)
    assert preempted_often(waiting_with_little_slack(), [NOW] * QUICK_PREEMPTIONS)  # at now: counted
