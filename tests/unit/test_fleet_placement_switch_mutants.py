"""The deadline cost model's two additions since the fifth mutation pass (shared/fleet/placement.py):
the switch to on-demand in another location pays its changeover and the checkpoint's copy there,
both in hours of on-demand; and the prior's run at the work's length is read in hours (a prior
whose runs are exponential costs what no run shape does)."""

from __future__ import annotations

import math

import pytest

from shared.fleet.estimate import CapacityEstimate
from shared.fleet.placement import Candidate, Job, Move, expected_cost, switch_elsewhere
from shared.fleet.prior import LocationPrior

SPOT, ON_DEMAND = 5.0, 20.0


def test_a_switch_elsewhere_pays_the_changeover_and_the_copy_in_on_demand_hours() -> None:
    # 100 GB at $0.02/GB and 50 GB/h: $2 and 2 h to get the checkpoint to "y"
    move = Move(checkpoint_gb=100, price_per_gb=lambda source, target: 0.02, gb_per_hour=50)
    job = Job(remaining_hours=10, changeover_hours=0.5, current_location="x", hours_to_deadline=20)
    here, there = Candidate("x", SPOT, 30.0), Candidate("y", SPOT, ON_DEMAND)
    cost = switch_elsewhere(job, here, there, move, rest=3.0, chance=0.5)
    assert cost == pytest.approx((3.0 + 0.5 * (0.5 + 2.0)) * ON_DEMAND + 0.5 * 2.0, rel=1e-12)


def seen(prior: LocationPrior | None) -> CapacityEstimate:
    return CapacityEstimate(
        location="x",
        available=0.8,
        sure=3.0,
        mean_lifetime_seconds=4 * 3600.0,
        lifetime_censored=False,
        median_wait_seconds=1800.0,
        changeover_p90_seconds=None,
        open_waits=0,
        share_available=0.8,
        prior=prior,
    )


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_prior_whose_runs_are_exponential_costs_what_its_mean_run_does(replicas: int) -> None:
    # survival exp(-h / 4) at every horizon: the run at any length is the mean, 4 h
    exponential = LocationPrior(0.8, 4.0, 1.0, run_survival=((6.0, math.exp(-6 / 4)), (24.0, math.exp(-24 / 4))))
    job = Job(remaining_hours=10, changeover_hours=0.5, current_location=None, hours_to_deadline=14, replicas=replicas)
    with_shape = expected_cost(job, Candidate("x", SPOT, ON_DEMAND, seen(exponential)), Move())
    without = expected_cost(job, Candidate("x", SPOT, ON_DEMAND, seen(None)), Move())
    assert 0 < without.spot_share < 1  # the plan is cut by preemptions: the run's length matters
    assert with_shape.cost == pytest.approx(without.cost, rel=1e-12)
    assert with_shape.spot_share == pytest.approx(without.spot_share, rel=1e-12)
