"""The region prior's weight as docs/placement.md states it ("A region prior": 6 h of time at the
prior's share, one and a half runs of its mean), pinned by number: test_fleet_prior.py reads the constant, so
a changed constant moved its expectation with it (issue 43, a mutant it left). The prior is read
with `location_prior`, as placement reads it: the weights are its fields' defaults, which run no
line of the module when a test builds a `LocationPrior` itself."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.fleet.estimate import estimate
from shared.fleet.observations import FleetFact, Kind
from shared.fleet.prior import location_prior

NOW = datetime(2026, 12, 6, 12, tzinfo=UTC)


def test_the_prior_weighs_six_hours_at_its_share_and_one_and_a_half_runs_of_its_mean() -> None:
    prior = location_prior("a3-highgpu-8g", "us-east4")
    assert prior is not None
    # 12 h of the fleet's own Spot: three 4 h runs, each ended by a preemption
    facts = [
        fact
        for k in range(3)
        for fact in (
            FleetFact(Kind.RUN, "us-east4", NOW - timedelta(hours=4 * k), 4 * 3600.0, attempt_key=f"a{k}"),
            FleetFact(Kind.PREEMPT, "us-east4", NOW - timedelta(hours=4 * k), attempt_key=f"a{k}"),
        )
    ]
    seen = estimate(facts, "us-east4", NOW, prior)
    assert seen.share_available == pytest.approx((12 + 6 * prior.share_available) / (12 + 6))
    assert seen.mean_lifetime_seconds == pytest.approx((12 + 1.5 * prior.mean_run_hours) * 3600 / (3 + 1.5))
    # so one short run of the fleet's does not halve the prior's lifetime (docs/placement.md, fourth pass)
    short = [
        FleetFact(Kind.RUN, "us-east4", NOW, 3600.0, attempt_key="b"),
        FleetFact(Kind.PREEMPT, "us-east4", NOW, attempt_key="b"),
    ]
    halved = (1 + prior.mean_run_hours) / 2
    assert estimate(short, "us-east4", NOW, prior).mean_lifetime_seconds > halved * 3600 + 1
