"""Placement (shared/fleet/placement.py) on scripted prices and estimates, and the dated H100
price table it reads in production."""

from __future__ import annotations

import pytest

from shared.fleet.estimate import CapacityEstimate
from shared.fleet.placement import MOVE_MARGIN, Candidate, Job, Move, choose_location, expected_cost
from spotjobs.reporting.prices import Prices


def seen(location: str, share: float, lifetime_hours: float | None = 10.0, sure: float = 3.0) -> CapacityEstimate:
    """An estimate whose Spot jobs had capacity `share` of the time (and now as likely)."""
    return CapacityEstimate(
        location=location,
        available=share,
        sure=sure,
        mean_lifetime_seconds=None if lifetime_hours is None else lifetime_hours * 3600,
        lifetime_censored=False,
        median_wait_seconds=600.0,
        changeover_p90_seconds=None,
        open_waits=0,
        share_available=share,
    )


EAST = Candidate("us-east4", 14.85, 82.53)
CENTRAL = Candidate("us-central1", 18.98, 82.53)
ASIA = Candidate("asia-southeast1", 19.26, 107.01)
DEADLINE = Job(remaining_hours=24, changeover_hours=0.2, current_location=None, hours_to_deadline=36)


def test_with_nothing_observed_the_cheapest_spot_wins() -> None:
    assert choose_location(DEADLINE, [CENTRAL, EAST, ASIA]).location == "us-east4"


def test_a_location_seldom_with_capacity_loses_to_a_dearer_one_often_with_it() -> None:
    east = Candidate("us-east4", 14.85, 82.53, seen("us-east4", 0.1))
    central = Candidate("us-central1", 18.98, 82.53, seen("us-central1", 0.95))
    choice = choose_location(DEADLINE, [east, central])
    assert choice.location == "us-central1"
    assert [c.location for c in choice.costs] == ["us-central1", "us-east4"]
    # the share of the work expected on Spot drives it
    assert expected_cost(DEADLINE, east, Move()).spot_share < 0.2 < 0.9 < choice.costs[0].spot_share


def test_short_spot_lifetimes_cost_changeovers() -> None:
    churn = Candidate("us-east4", 14.85, 82.53, seen("us-east4", 0.95, lifetime_hours=0.25))
    steady = Candidate("us-central1", 18.98, 82.53, seen("us-central1", 0.95, lifetime_hours=20))
    assert choose_location(DEADLINE, [churn, steady]).location == "us-central1"


def test_the_current_location_stays_unless_another_saves_more_than_the_margin() -> None:
    here = Candidate("us-central1", 15.0, 82.53, seen("us-central1", 0.95))
    there = Candidate("us-east4", 15.0 * (1 - MOVE_MARGIN / 2), 82.53, seen("us-east4", 0.95))
    job = Job(24, 0.2, current_location="us-central1", hours_to_deadline=36)
    assert choose_location(job, [here, there]).location == "us-central1"
    assert choose_location(Job(24, 0.2, None, 36), [here, there]).location == "us-east4"


def test_moving_the_checkpoint_is_counted() -> None:
    here = Candidate("us-central1", 18.98, 82.53, seen("us-central1", 0.95))
    there = Candidate("asia-southeast1", 14.0, 107.01, seen("asia-southeast1", 0.95))
    job = Job(10, 0.2, current_location="us-central1", hours_to_deadline=20)
    assert choose_location(job, [here, there]).location == "asia-southeast1"
    heavy = Move(checkpoint_gb=2000, price_per_gb=lambda source, target: 0.08)
    choice = choose_location(job, [here, there], heavy)
    assert choice.location == "us-central1"
    assert next(c for c in choice.costs if c.location == "asia-southeast1").move_cost == pytest.approx(160.0)


def test_a_tight_deadline_is_on_demand_where_it_is_cheapest() -> None:
    tight = Job(24, 0.2, None, hours_to_deadline=24.2)
    east = Candidate("us-east4", 14.85, 90.0, seen("us-east4", 0.9))
    central = Candidate("us-central1", 18.98, 82.53, seen("us-central1", 0.9))
    assert choose_location(tight, [east, central]).location == "us-central1"
    switch = Job(24, 0.2, None, hours_to_deadline=30, on_demand=True)
    assert choose_location(switch, [east, central]).location == "us-central1"


def test_without_a_deadline_time_waiting_is_weighed() -> None:
    scarce = Candidate("us-east4", 14.85, 82.53, seen("us-east4", 0.05))
    plenty = Candidate("us-central1", 18.98, 82.53, seen("us-central1", 0.95))
    free_time = Job(24, 0.2, None, hours_to_deadline=None, hour_value=0.0)
    assert choose_location(free_time, [scarce, plenty]).location == "us-east4"
    valued = Job(24, 0.2, None, hours_to_deadline=None, hour_value=50.0)
    assert choose_location(valued, [scarce, plenty]).location == "us-central1"


def test_the_price_table_has_the_h100_regions_with_their_own_date_and_source() -> None:
    east = Prices.load("a3-highgpu-8g", "us-east4")
    assert (east.spot_per_hour, east.on_demand_per_hour, east.as_of) == (14.8534, 82.5254, "2025-10-04")
    assert "skynomad-artifact" in east.source
    assert Prices.load().as_of == "2025-03-06"  # the A100 row keeps the table's
