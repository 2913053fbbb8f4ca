"""The capacity estimate (shared/fleet/estimate.py) against the numbers docs/placement.md states:
evidence weighs 1/2 per hour of age, a prior of weight 1 at 1/2, unknown below a total weight of
0.5, an open wait says no after 15 min, an hour of prior at 1/2 in the share of time with
capacity, the mean lifetime as time on Spot per preemption; and the compacted summaries, the
nearest-rank percentile and the changeover bound's order statistic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.fleet.estimate import (
    CapacityEstimate,
    SpotOutlook,
    changeover_bound,
    closed,
    estimate,
    estimates,
    percentile,
    summarize,
    upper_bound,
)
from shared.fleet.observations import AttemptSummary, FleetFact, Kind

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
HERE = "us-east4"
HOUR = 3600.0
GRACE = 15 * 60.0  # docs/placement.md: an open wait older than 15 min says no


def fact(
    kind: Kind, ago: float, key: str = "a", seconds: float = 0.0, count: int = 0, index: int = 0, location: str = HERE
) -> FleetFact:
    """A fact `ago` seconds before NOW."""
    return FleetFact(kind, location, NOW - timedelta(seconds=ago), seconds, count, key, index)


def compacted(key: str, ago: float, **sums: int | None) -> FleetFact:
    return FleetFact(Kind.ATTEMPT, HERE, NOW - timedelta(seconds=ago), attempt_key=key, summary=AttemptSummary(**sums))


def with_prior(yes: float, total: float) -> float:
    """The weighted share of yes with the documented prior of weight 1 at 1/2."""
    return (0.5 + yes) / (1.0 + total)


def made(available: float = 0.5, sure: float = 1.0, **fields: object) -> CapacityEstimate:
    values: dict = {
        "location": HERE,
        "available": available,
        "sure": sure,
        "mean_lifetime_seconds": None,
        "lifetime_censored": True,
        "median_wait_seconds": None,
        "changeover_p90_seconds": None,
        "open_waits": 0,
    }
    return CapacityEstimate(**{**values, **fields})


# Capacity now: has_capacity's two thresholds.


def test_capacity_is_known_from_a_total_weight_of_one_half_and_yes_from_an_even_chance() -> None:
    assert made(available=0.5, sure=0.5).has_capacity is True  # both at their threshold
    assert made(available=0.9, sure=0.4999).has_capacity is None
    assert made(available=0.4999, sure=0.5).has_capacity is False
    assert made(available=0.9, sure=1.4).has_capacity is True
    assert made(available=0.1, sure=0.0).has_capacity is None


# The weights of evidence: 1/2 per hour of age, the prior of weight 1 at 1/2.


def test_evidence_weighs_half_per_hour_of_age_against_a_prior_of_one_at_one_half() -> None:
    facts = [
        # a got capacity two hours ago (weight 1/4) and ended an hour ago (a run is no evidence)
        fact(Kind.WAIT, 2 * HOUR, "a", seconds=600),
        fact(Kind.RUN, HOUR, "a", seconds=HOUR),
        # b found none an hour ago (weight 1/2)
        fact(Kind.NO_CAPACITY, HOUR, "b", seconds=1800),
    ]
    found = estimate(facts, HERE, NOW)
    assert found.sure == pytest.approx(0.75, rel=1e-9)
    assert found.available == pytest.approx(with_prior(0.25, 0.75), rel=1e-9)
    assert found.has_capacity is False


def test_an_hour_old_yes_alone_is_just_enough_to_know() -> None:
    facts = [fact(Kind.WAIT, HOUR, seconds=60), fact(Kind.RUN, HOUR / 2, seconds=HOUR / 2)]
    found = estimate(facts, HERE, NOW)
    assert found.sure == pytest.approx(0.5, rel=1e-9)
    assert found.available == pytest.approx(with_prior(0.5, 0.5), rel=1e-9)
    assert found.has_capacity is True


@pytest.mark.parametrize(
    ("kind", "says_yes"),
    [
        (Kind.WAIT, True),
        (Kind.RESTART, True),
        (Kind.NO_CAPACITY, False),
        (Kind.STOCKOUT, False),
        (Kind.PREEMPT, False),
    ],
)
def test_each_kind_of_fact_is_a_yes_or_a_no_of_full_weight_when_fresh(kind: Kind, says_yes: bool) -> None:
    # closed by a run at the same instant: nothing is running now to add evidence of its own
    found = estimate([fact(kind, 0.0), fact(Kind.RUN, 0.0)], HERE, NOW)
    assert found.sure == pytest.approx(1.0)
    assert found.available == pytest.approx(with_prior(1.0 if says_yes else 0.0, 1.0))


def test_runs_changeovers_and_open_waits_within_the_grace_are_no_evidence() -> None:
    quiet = [
        fact(Kind.RUN, 0.0, "a", seconds=HOUR),
        fact(Kind.CHANGEOVER, 0.0, "b", seconds=600),
        fact(Kind.WAITING, GRACE, "c"),  # open exactly 15 min: provisioning, perhaps
    ]
    found = estimate(quiet, HERE, NOW)
    assert (found.sure, found.available, found.open_waits) == (0.0, 0.5, 1)


def test_an_open_wait_says_no_past_the_grace_and_counts_as_waiting() -> None:
    found = estimate([fact(Kind.WAITING, GRACE + 1, "c")], HERE, NOW)
    assert found.sure == pytest.approx(1.0)
    assert found.available == pytest.approx(with_prior(0.0, 1.0))
    assert found.open_waits == 1
    # its time so far is a wait in the share of time with capacity (an hour of prior at 1/2)
    assert found.share_available == pytest.approx((HOUR / 2) / (GRACE + 1 + HOUR))


def test_a_wait_that_closed_is_not_open() -> None:
    found_none = [fact(Kind.WAITING, 2 * HOUR, "c"), fact(Kind.NO_CAPACITY, HOUR, "c", seconds=HOUR)]
    assert estimate(found_none, HERE, NOW).open_waits == 0
    got = [fact(Kind.WAITING, 2 * HOUR, "d"), fact(Kind.WAIT, HOUR, "d", seconds=HOUR)]
    assert estimate(got, HERE, NOW).open_waits == 0
    assert estimate([fact(Kind.WAITING, 60, "e"), fact(Kind.WAITING, 60, "f")], HERE, NOW).open_waits == 2


def test_a_wait_whose_fact_was_lost_is_closed_at_the_start_of_its_run() -> None:
    """The `wait` fact was lost (the facts are advisory), its `run` was not: the run's start is
    when the wait ended, so the estimate and the summary are those of the facts with it."""
    whole = [fact(Kind.WAITING, 3 * HOUR), fact(Kind.WAIT, 2 * HOUR, seconds=HOUR), fact(Kind.RUN, HOUR, seconds=HOUR)]
    lost = [whole[0], whole[2]]
    assert estimate(lost, HERE, NOW).open_waits == 0
    assert estimate(lost, HERE, NOW) == estimate(whole, HERE, NOW)
    assert summarize(lost, NOW) == summarize(whole, NOW)


def test_a_preemption_or_restart_ends_a_lost_wait_at_the_latest_it_can_have_started() -> None:
    for ran in (Kind.PREEMPT, Kind.RESTART):
        found = estimate([fact(Kind.WAITING, 3 * HOUR), fact(ran, HOUR)], HERE, NOW)
        assert found.open_waits == 0
        assert found.median_wait_seconds == pytest.approx(2 * HOUR)


def test_a_stockout_ends_a_wait_without_saying_it_got_capacity() -> None:
    found = estimate([fact(Kind.WAITING, 3 * HOUR), fact(Kind.STOCKOUT, HOUR)], HERE, NOW)
    assert found.open_waits == 0
    assert found.sure == pytest.approx(0.5)  # the stockout an hour ago, and no open wait's fresh no
    assert found.median_wait_seconds is None


def test_a_running_job_is_a_fresh_yes_and_its_time_so_far_is_on_spot() -> None:
    found = estimate([fact(Kind.WAIT, 2 * HOUR, seconds=600)], HERE, NOW)
    # the wait two hours ago (1/4) and running now (1)
    assert found.sure == pytest.approx(1.25)
    assert found.available == pytest.approx(with_prior(1.25, 1.25))
    assert found.mean_lifetime_seconds == pytest.approx(2 * HOUR) and found.lifetime_censored
    assert found.share_available == pytest.approx((2 * HOUR + HOUR / 2) / (2 * HOUR + 600 + HOUR))


def test_a_job_preempted_and_not_back_says_no_only_past_the_grace() -> None:
    within = [fact(Kind.WAIT, 2 * HOUR, seconds=60), fact(Kind.PREEMPT, GRACE)]
    found = estimate(within, HERE, NOW)
    weights = 0.25 + 0.5 ** (GRACE / HOUR)  # the wait and the preemption; nothing about now
    assert found.sure == pytest.approx(weights)
    assert found.available == pytest.approx(with_prior(0.25, weights))
    past = [fact(Kind.WAIT, 2 * HOUR, seconds=60), fact(Kind.PREEMPT, GRACE + 1)]
    restarting = estimate(past, HERE, NOW)
    weights = 0.25 + 0.5 ** ((GRACE + 1) / HOUR) + 1.0  # and a fresh no: restarting without capacity
    assert restarting.sure == pytest.approx(weights)
    assert restarting.available == pytest.approx(with_prior(0.25, weights))


def test_a_job_back_after_each_preemption_runs_now_and_one_still_down_does_not() -> None:
    back = [
        fact(Kind.WAIT, 5 * HOUR),
        fact(Kind.PREEMPT, 4 * HOUR, index=0),
        fact(Kind.RESTART, 4 * HOUR, index=1),
        fact(Kind.PREEMPT, 3 * HOUR, index=1),
        fact(Kind.RESTART, 3 * HOUR, index=2),
    ]
    evidence = 0.5**5 + 2 * 0.5**4 + 2 * 0.5**3  # the wait, the preemptions and restarts
    yes = 0.5**5 + 0.5**4 + 0.5**3
    found = estimate(back, HERE, NOW)
    assert found.sure == pytest.approx(evidence + 1.0)
    assert found.available == pytest.approx(with_prior(yes + 1.0, evidence + 1.0))
    down = [*back, fact(Kind.PREEMPT, 2 * HOUR, index=2)]
    found = estimate(down, HERE, NOW)
    assert found.sure == pytest.approx(evidence + 0.25 + 1.0)
    assert found.available == pytest.approx(with_prior(yes, evidence + 0.25 + 1.0))


def test_the_grace_runs_from_the_last_preemption_not_from_a_restart_recorded_late() -> None:
    down = [
        fact(Kind.WAIT, 4 * HOUR),
        fact(Kind.PREEMPT, 3 * HOUR, index=0),
        fact(Kind.PREEMPT, 2 * HOUR, index=1),
        fact(Kind.RESTART, 300, index=1),  # run 1's start, recorded only now: still one restart short
    ]
    found = estimate(down, HERE, NOW)
    yes = 0.5**4 + 0.5 ** (300 / HOUR)
    evidence = yes + 0.5**3 + 0.5**2 + 1.0  # and down for two hours: a fresh no
    assert found.sure == pytest.approx(evidence)
    assert found.available == pytest.approx(with_prior(yes, evidence))


def test_only_facts_of_the_location_with_a_time_by_now_and_within_vertexs_bound_count() -> None:
    counted = [fact(Kind.NO_CAPACITY, 0.0, "a", seconds=60)]  # at now exactly
    found = estimate(counted, HERE, NOW)
    assert found.sure == pytest.approx(1.0)
    ignored = [
        fact(Kind.WAIT, -60, "b", seconds=60),  # after now
        FleetFact(Kind.WAIT, HERE, None, 60.0, attempt_key="c"),  # never stamped
        fact(Kind.WAIT, 60, "d", seconds=60, location="us-west1"),
        fact(Kind.PREEMPT, 60, "a", index=7),  # an eighth preemption: Vertex restarts six times
    ]
    assert estimate(counted + ignored, HERE, NOW) == found


# The mean lifetime and the share of time with capacity.


def test_the_mean_lifetime_is_the_time_on_spot_per_preemption() -> None:
    one = [
        fact(Kind.WAIT, 3 * HOUR, seconds=60),
        fact(Kind.PREEMPT, 2 * HOUR),
        fact(Kind.RESTART, 2 * HOUR, index=1),
        fact(Kind.RUN, HOUR, seconds=2 * HOUR, count=1),
    ]
    found = estimate(one, HERE, NOW)
    assert found.mean_lifetime_seconds == pytest.approx(2 * HOUR) and not found.lifetime_censored
    two = [*one[:3], fact(Kind.PREEMPT, 1.5 * HOUR, index=1), fact(Kind.RUN, HOUR, seconds=2 * HOUR, count=2)]
    assert estimate(two, HERE, NOW).mean_lifetime_seconds == pytest.approx(HOUR)


def test_a_second_on_spot_is_a_lifetime_of_at_least_a_second_and_none_is_none() -> None:
    found = estimate([fact(Kind.WAIT, 1.0, seconds=60)], HERE, NOW)
    assert (found.mean_lifetime_seconds, found.lifetime_censored) == (1.0, True)
    never = estimate([fact(Kind.NO_CAPACITY, 60, seconds=600)], HERE, NOW)
    assert never.mean_lifetime_seconds is None and never.outlook is None


def test_the_share_of_time_with_capacity_has_an_hour_of_prior_at_one_half() -> None:
    assert estimate([], HERE, NOW).share_available == 0.5
    ran = [fact(Kind.WAIT, 4 * HOUR, seconds=HOUR), fact(Kind.RUN, HOUR, seconds=3 * HOUR)]
    assert estimate(ran, HERE, NOW).share_available == pytest.approx((3 * HOUR + HOUR / 2) / (4 * HOUR + HOUR))


def test_restart_waits_of_open_and_compacted_attempts_are_waits_not_time_on_spot() -> None:
    open_attempt = [
        fact(Kind.WAIT, 4 * HOUR, "a", seconds=0),
        fact(Kind.PREEMPT, 3 * HOUR, "a"),
        fact(Kind.RESTART, 2 * HOUR, "a", index=1),  # an hour down
    ]
    old = compacted("o", 30 * HOUR, exposure=int(5 * HOUR), waited=600, preemptions=1, restart_waits=int(HOUR))
    found = estimate([*open_attempt, old], HERE, NOW)
    on_spot = 4 * HOUR + 5 * HOUR
    down = HOUR + HOUR
    assert found.share_available == pytest.approx((on_spot - down + HOUR / 2) / (on_spot + 600 + HOUR))
    # The open attempt's hour down, ended by its restart, is no time on Spot for the lifetime
    # either; the summary written before such waits were kept apart keeps its whole time.
    assert found.mean_lifetime_seconds == pytest.approx((on_spot - HOUR) / 2)


def test_a_restart_wait_is_never_more_than_the_time_on_spot() -> None:
    # a summary written by an older version: more restart waits than time on Spot
    odd = compacted("o", 30 * HOUR, exposure=600, waited=0, preemptions=1, restart_waits=int(HOUR))
    assert estimate([odd], HERE, NOW).share_available == pytest.approx((HOUR / 2) / (600 + HOUR))


# Compacted attempts: their sums, no evidence.


def test_a_compacted_attempt_adds_its_sums_waits_and_changeover_but_no_evidence() -> None:
    facts = [
        compacted("o1", 30 * HOUR, exposure=7200, waited=1200, preemptions=2, wait=300),
        compacted("o2", 30 * HOUR, exposure=3600, waited=900, preemptions=1, wait=900),
        compacted("o3", 30 * HOUR, changeover=700),
        fact(Kind.WAIT, 0.0, "n", seconds=600),
        fact(Kind.RUN, 0.0, "n", seconds=0.0),
    ]
    found = estimate(facts, HERE, NOW)
    assert found.sure == pytest.approx(1.0)  # the fresh wait only
    assert found.mean_lifetime_seconds == pytest.approx((7200 + 3600) / 3)
    assert found.median_wait_seconds == 600.0  # of 300, 900 and 600
    assert found.changeover_p90_seconds == 700.0
    assert found.share_available == pytest.approx((10800 + HOUR / 2) / (10800 + 1200 + 900 + 600 + HOUR))
    assert changeover_bound(facts, HERE, NOW) == 700.0


def test_a_compacted_attempt_without_a_wait_or_changeover_adds_none() -> None:
    facts = [compacted("o", 30 * HOUR, exposure=600), fact(Kind.WAIT, 60, "n", seconds=120)]
    found = estimate(facts, HERE, NOW)
    assert found.median_wait_seconds == 120.0 and found.changeover_p90_seconds is None


def test_every_location_seen_gets_its_estimate() -> None:
    facts = [fact(Kind.WAIT, 60, "a", seconds=60), fact(Kind.NO_CAPACITY, 60, "b", seconds=60, location="us-west1")]
    found = estimates(facts, NOW)
    assert list(found) == ["us-east4", "us-west1"]
    assert found["us-west1"] == estimate(facts, "us-west1", NOW)


# What compaction keeps of a closed attempt (`closed`, `summarize`).


def test_an_attempt_is_closed_once_it_ran_or_found_no_capacity_or_was_on_demand() -> None:
    assert closed([fact(Kind.WAIT, 60), fact(Kind.RUN, 0)])
    assert closed([fact(Kind.WAITING, 60), fact(Kind.NO_CAPACITY, 0)])
    assert closed([fact(Kind.CHANGEOVER, 60)])
    assert not closed([fact(Kind.WAITING, 60)])
    assert not closed([fact(Kind.WAIT, 60), fact(Kind.PREEMPT, 30)])
    assert not closed([compacted("a", 60, exposure=1)])


def test_a_summary_keeps_the_sums_the_estimate_weighs() -> None:
    facts = [
        fact(Kind.WAITING, 10 * HOUR),
        fact(Kind.WAIT, 9 * HOUR, seconds=HOUR + 0.4),
        fact(Kind.PREEMPT, 8 * HOUR, index=0),
        fact(Kind.RESTART, 7.5 * HOUR, index=1),
        fact(Kind.PREEMPT, 6 * HOUR, index=1),
        fact(Kind.PREEMPT, 5 * HOUR, index=9),  # past Vertex's bound: left out
        fact(Kind.RUN, 4 * HOUR, seconds=5 * HOUR + 0.6, count=2),
    ]
    # the second preemption's wait runs to the run's end: two hours
    assert summarize(facts, NOW) == AttemptSummary(
        exposure=int(5 * HOUR) + 1,
        waited=int(HOUR),
        preemptions=2,
        restart_waits=int(HOUR / 2 + 2 * HOUR),
        wait=int(HOUR),
        changeover=None,
        answered_restart_waits=int(HOUR / 2),  # the first, which its restart ended
    )
    on_demand = [fact(Kind.CHANGEOVER, HOUR, seconds=612.7)]
    assert summarize(on_demand, NOW) == AttemptSummary(changeover=613, answered_restart_waits=0)
    found_none = [fact(Kind.WAITING, 2 * HOUR), fact(Kind.NO_CAPACITY, HOUR, seconds=HOUR)]
    assert summarize(found_none, NOW) == AttemptSummary(waited=int(HOUR), answered_restart_waits=0)


def test_a_restart_recorded_before_its_preemption_is_no_wait() -> None:
    facts = [
        fact(Kind.WAIT, 3 * HOUR),
        fact(Kind.RESTART, 2 * HOUR, index=1),  # the kit's line came before the preemption's event
        fact(Kind.PREEMPT, HOUR),
        fact(Kind.RUN, 0.0, seconds=3 * HOUR, count=1),
    ]
    assert summarize(facts, NOW).restart_waits == 0


def test_a_preemption_not_followed_by_a_restart_waits_until_now_while_open() -> None:
    facts = [fact(Kind.WAIT, 3 * HOUR), fact(Kind.PREEMPT, HOUR)]
    assert summarize(facts, NOW).restart_waits == int(HOUR)


# The nearest-rank percentile and the changeover bound.


def test_the_nearest_rank_percentile() -> None:
    tens = [float(v) for v in range(10, 0, -1)]
    assert percentile(tens, 0.9) == 9.0
    assert percentile(tens, 1.0) == 10.0
    assert percentile(tens, 0.0) == 1.0
    assert percentile([7.0, 3.0], 0.5) == 3.0
    assert percentile([5.0], 0.9) == 5.0
    assert percentile([], 0.9) is None


def test_the_estimates_changeover_is_the_p90_of_the_locations() -> None:
    facts = [fact(Kind.CHANGEOVER, 60 * i, f"c{i}", seconds=100.0 * i) for i in range(1, 11)]
    assert estimate(facts, HERE, NOW).changeover_p90_seconds == 900.0


def test_the_bound_is_the_smallest_order_statistic_with_the_confidence() -> None:
    # n = 45: P(fewer than 45 of 45 below the p95) = 1 - 0.95^45 = 0.9006: the largest, the 45th
    values = [float(v) for v in range(45, 0, -1)]
    assert upper_bound(values, 0.95, 0.9) == 45.0
    # the median of 9 with 45%: P(fewer than k of 9 below the median) is 0.254 at k = 4, 1/2 at 5
    assert upper_bound([float(v) for v in range(1, 10)], 0.5, 0.45) == 5.0
    # with 25% confidence, k = 4 of 9: P(fewer than 4) = 0.254
    assert upper_bound([float(v) for v in range(1, 10)], 0.5, 0.25) == 4.0
    # the p10 of 20 with 90%: P(fewer than 4 below) = 0.867, fewer than 5: 0.957
    assert upper_bound([float(v) for v in range(1, 21)], 0.1, 0.9) == 5.0
    assert upper_bound([3.0], 0.95, 0.9) == 3.0
    # reached exactly is enough: P(none of 2 below the median) = 1/4, at 25% the smallest
    assert upper_bound([2.0, 1.0], 0.5, 0.25) == 1.0


def test_the_changeover_bound_is_the_order_statistic_above_the_p95_with_90_percent() -> None:
    # 100 changeovers: the 99th (test_fleet.py derives it); the constants are the documented ones
    facts = [fact(Kind.CHANGEOVER, 60, f"c{i}", seconds=float(i)) for i in range(1, 101)]
    assert changeover_bound(facts, HERE, NOW) == 99.0
    assert changeover_bound([*facts, fact(Kind.CHANGEOVER, 0.0, "z", seconds=5000.0)], HERE, NOW) == 100.0


# What the deadline rule keeps of it.


def test_the_outlook_keeps_the_share_to_four_places_and_the_lifetime_to_a_tenth_of_a_second() -> None:
    found = made(share_available=0.123456, mean_lifetime_seconds=1234.56, lifetime_censored=False)
    assert found.outlook == SpotOutlook(0.1235, 1234.6)


def test_the_expected_wait_is_the_mean_outage_at_the_share() -> None:
    assert SpotOutlook(0.25, HOUR).expected_wait_seconds == pytest.approx(3 * HOUR)
    assert SpotOutlook(0.8, HOUR).expected_wait_seconds == pytest.approx(HOUR / 4)
    assert SpotOutlook(1.5, HOUR).expected_wait_seconds == 0.0  # a share read above one: never waits
    assert SpotOutlook(0.0, HOUR).expected_wait_seconds == pytest.approx(HOUR * (1 - 1e-6) / 1e-6)
    assert SpotOutlook(-0.5, HOUR).expected_wait_seconds == pytest.approx(HOUR * (1 - 1e-6) / 1e-6)


def test_an_outlook_this_version_cannot_read_is_none() -> None:
    assert SpotOutlook.from_json({"share_available": 0.5, "mean_lifetime_seconds": "long"}) is None
    assert SpotOutlook.from_json({"share_available": None, "mean_lifetime_seconds": 60.0}) is None
    assert SpotOutlook.from_json({}) is None
    assert SpotOutlook.from_json({"share_available": 1, "mean_lifetime_seconds": 60}) == SpotOutlook(1.0, 60.0)


def test_the_json_shows_what_spotjobs_fleet_prints() -> None:
    found = made(
        available=0.123456,
        sure=1.23456,
        mean_lifetime_seconds=1234.56,
        lifetime_censored=False,
        median_wait_seconds=None,
        changeover_p90_seconds=99.96,
        open_waits=2,
        share_available=0.98765,
    )
    assert found.to_json() == {
        "location": HERE,
        "available": 0.123,
        "sure": 1.23,
        "has_capacity": False,
        "mean_lifetime_seconds": 1234.6,
        "lifetime_censored": False,
        "median_wait_seconds": None,
        "changeover_p90_seconds": 100.0,
        "open_waits": 2,
        "share_available": 0.988,
    }
