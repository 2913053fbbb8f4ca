"""The deadline cost model's Spot plan (shared/fleet/placement.py, `plan_on_spot`) at its edges:
Spot that always has capacity with no slack, or with a job waiting where it is, a location never
with capacity, outages with a certain start, and the far tail of the preemptions (issue 43: the
mutants test_fleet_costs.py left). Expectations come from the Poisson law written out here."""

from __future__ import annotations

import math

import pytest

from shared.fleet.estimate import CapacityEstimate
from shared.fleet.placement import Candidate, Job, Move, expected_cost, plan_on_spot

SPOT, ON_DEMAND = 5.0, 20.0


def seen(share: float, lifetime_hours: float = 4.0) -> CapacityEstimate:
    return CapacityEstimate(
        location="x",
        available=share,
        sure=3.0,
        mean_lifetime_seconds=lifetime_hours * 3600,
        lifetime_censored=False,
        median_wait_seconds=1800.0,
        changeover_p90_seconds=None,
        open_waits=0,
        share_available=share,
    )


def at(estimate: CapacityEstimate) -> Candidate:
    return Candidate("x", SPOT, ON_DEMAND, estimate)


def at_most(j: int, mean: float) -> float:
    """P(N <= j), N Poisson of that mean."""
    return sum(math.exp(-mean) * mean**i / math.factorial(i) for i in range(j + 1))


def until(n: int, work: float, run: float) -> tuple[float, float]:
    """E[min(work, the time of the n-th preemption)] = run x sum over j < n of P(N > j), and
    P(N >= n), N the preemptions in the work (one per `run` hours)."""
    mean = work / run
    return min(work, run * sum(1 - at_most(j, mean) for j in range(n))), 1 - at_most(n - 1, mean)


def test_spot_that_always_has_capacity_keeps_the_work_on_spot_even_with_no_slack() -> None:
    no_slack = Job(remaining_hours=10, changeover_hours=0.5, current_location=None, hours_to_deadline=11.5)
    costed = expected_cost(no_slack, at(seen(share=1.0)), Move())
    assert costed.spot_share == 1.0 and costed.cost == pytest.approx(10 * SPOT * (1 + 0.5 / 4))


def test_a_job_waiting_where_spot_always_has_capacity_pays_a_changeover_of_its_slack_first() -> None:
    # slack 12 - 10 - 1.5 = 0.5 h: one changeover (outages last nothing where p is 1); the wait
    # where it is spends it, so the work runs on Spot until the first preemption
    waiting = Job(remaining_hours=10, changeover_hours=0.5, current_location="x", hours_to_deadline=12, waiting=True)
    costed = expected_cost(waiting, at(seen(share=1.0, lifetime_hours=4.0)), Move())
    before, goes = until(1, 10, 4.0)
    assert costed.spot_share == pytest.approx(before / 10, rel=1e-9)
    spot_hour = SPOT * (1 + 0.5 / 4)
    expected = before * spot_hour + (10 - before + goes * 0.5) * ON_DEMAND
    assert costed.cost == pytest.approx(expected, rel=1e-9)


def test_a_location_never_with_capacity_runs_a_deadline_on_demand() -> None:
    job = Job(remaining_hours=10, changeover_hours=0.5, current_location=None, hours_to_deadline=20)
    costed = expected_cost(job, at(seen(share=0.0)), Move())
    assert costed.spot_share == pytest.approx(0.0, abs=1e-6)
    assert costed.cost == pytest.approx((10 + 0.5) * ON_DEMAND, rel=1e-6)


def test_with_a_certain_start_each_outage_still_spends_the_slack() -> None:
    # half-hour outages and changeovers, an hour of slack: one preemption paid, the second ends Spot
    plan = plan_on_spot(work=10, run=4.0, outage=0.5, start=1.0, changeover=0.5, budget=1.0)
    before, goes = until(2, 10, 4.0)
    assert plan.share == pytest.approx(before / 10, rel=1e-9) and plan.share < 1
    assert plan.on_demand_chance == pytest.approx(goes, rel=1e-9)


def test_the_tail_of_many_preemptions_is_counted_until_it_is_nothing() -> None:
    # 48 preemptions expected, 62 paid: the 63rd still comes one time in fifty
    plan = plan_on_spot(work=48.0, run=1.0, outage=0.5, start=1.0, changeover=0.5, budget=62.0)
    before, goes = until(63, 48.0, 1.0)
    assert 0.01 < goes < 0.05
    assert plan.on_demand_chance == pytest.approx(goes, rel=1e-9)
    assert plan.share == pytest.approx(before / 48, rel=1e-12) and plan.share < 1


def test_runs_shorter_than_an_hour_are_counted_as_they_are() -> None:
    # half-hour runs: 4 preemptions expected in 2 h of work; 3 h of slack pays 2 of 1.5 h each
    plan = plan_on_spot(work=2.0, run=0.5, outage=1.0, start=1.0, changeover=0.5, budget=3.0)
    before, goes = until(3, 2.0, 0.5)
    assert plan.share == pytest.approx(before / 2.0, rel=1e-9)
    assert plan.on_demand_chance == pytest.approx(goes, rel=1e-9)


def test_a_job_waiting_where_spot_always_has_capacity_with_no_changeover_loses_nothing_to_the_wait() -> None:
    waiting = Job(remaining_hours=10, changeover_hours=0.0, current_location="x", hours_to_deadline=10.5, waiting=True)
    costed = expected_cost(waiting, at(seen(share=1.0, lifetime_hours=4.0)), Move())
    assert costed.spot_share == 1.0 and costed.cost == pytest.approx(10 * SPOT)


def test_runs_that_last_nothing_put_the_work_on_demand() -> None:
    assert plan_on_spot(work=1.0, run=0.0, outage=1.0, start=1.0, changeover=0.5, budget=3.0) == (0.0, 1.0)


def test_slack_for_more_preemptions_than_can_come_keeps_all_of_it_on_spot_with_no_changeover_to_pay() -> None:
    # 100 h of slack at a thousandth of an hour each: past any preemption half an hour of work has
    assert plan_on_spot(work=0.5, run=4.0, outage=0.001, start=0.5, changeover=0.001, budget=100.0) == (1.0, 0.0)


def test_spot_that_always_has_capacity_keeps_a_deadline_past_its_slack_on_spot() -> None:
    past = Job(remaining_hours=10, changeover_hours=0.5, current_location=None, hours_to_deadline=11.0)
    assert expected_cost(past, at(seen(share=1.0)), Move()).spot_share == 1.0
