"""The placement cost model (shared/fleet/placement.py) term by term, as docs/placement.md states
it (W the work left, d the changeover, p the share of time with capacity, L the mean lifetime),
the margin that keeps the current location, what a checkpoint's read or move costs
(shared/fleet/transfer.py) and the price table's lookup (shared/requests/pricing.py)."""

from __future__ import annotations

import math

import pytest

from shared.fleet.estimate import CapacityEstimate
from shared.fleet.placement import Candidate, Job, Move, choose_location, expected_cost
from shared.fleet.transfer import continent, per_gb
from shared.requests.pricing import hourly

SPOT, ON_DEMAND = 5.0, 20.0


def seen(
    share: float = 0.8,
    lifetime_hours: float | None = 4.0,
    censored: bool = False,
    median_wait_seconds: float | None = 1800.0,
) -> CapacityEstimate:
    return CapacityEstimate(
        location="x",
        available=share,
        sure=3.0,
        mean_lifetime_seconds=None if lifetime_hours is None else lifetime_hours * 3600,
        lifetime_censored=censored,
        median_wait_seconds=median_wait_seconds,
        changeover_p90_seconds=None,
        open_waits=0,
        share_available=share,
    )


def at(estimate: CapacityEstimate | None = None, location: str = "x") -> Candidate:
    return Candidate(location, SPOT, ON_DEMAND, estimate)


# Without a deadline: W Spot hours at the Spot price x (1 + d / L), a changeover, and the
# expected wait (1 - p) / p x the median wait at the hour's value.


def test_without_a_deadline_the_work_the_changeovers_and_the_wait_are_priced() -> None:
    job = Job(remaining_hours=10, changeover_hours=0.5, current_location=None, hour_value=30.0)
    costed = expected_cost(job, at(seen(share=0.8, lifetime_hours=4.0, median_wait_seconds=1800)), Move())
    spot_hour = SPOT * (1 + 0.5 / 4)
    assert costed.cost == pytest.approx(10 * spot_hour + 0.5 * SPOT + (0.2 / 0.8) * 0.5 * 30)
    assert (costed.spot_share, costed.move_cost) == (1.0, 0.0)


def test_without_anything_seen_the_priors_are_an_even_share_six_hours_of_life_and_an_hour_of_wait() -> None:
    job = Job(remaining_hours=10, changeover_hours=0.5, current_location=None, hour_value=30.0)
    assert expected_cost(job, at(), Move()).cost == pytest.approx(10 * SPOT * (1 + 0.5 / 6) + 0.5 * SPOT + 1.0 * 30)
    # seen, but never preempted there for longer than the prior, and no wait seen closing
    unknown = seen(share=0.5, lifetime_hours=None, median_wait_seconds=None)
    assert expected_cost(job, at(unknown), Move()).cost == pytest.approx(10 * SPOT * (1 + 0.5 / 6) + 0.5 * SPOT + 30)


def test_a_lifetime_never_cut_by_a_preemption_counts_at_least_the_prior() -> None:
    job = Job(remaining_hours=10, changeover_hours=0.5, current_location=None)
    short = expected_cost(job, at(seen(lifetime_hours=2.0, censored=True)), Move()).cost
    assert short == pytest.approx(10 * SPOT * (1 + 0.5 / 6) + 0.5 * SPOT)
    long = expected_cost(job, at(seen(lifetime_hours=12.0, censored=True)), Move()).cost
    assert long == pytest.approx(10 * SPOT * (1 + 0.5 / 12) + 0.5 * SPOT)
    # a lifetime seen cut short, under an hour: a changeover every half hour
    churn = expected_cost(job, at(seen(lifetime_hours=0.5)), Move()).cost
    assert churn == pytest.approx(10 * SPOT * (1 + 0.5 / 0.5) + 0.5 * SPOT)


def test_a_location_almost_never_with_capacity_waits_a_thousand_median_waits() -> None:
    job = Job(remaining_hours=1, changeover_hours=0.0, current_location=None, hour_value=1.0)
    assert expected_cost(job, at(seen(share=0.0)), Move()).cost == pytest.approx(SPOT + 1000 * 0.5)


def test_a_job_values_waiting_at_nothing_unless_told() -> None:
    assert Job(remaining_hours=1, changeover_hours=0.0, current_location=None).hour_value == 0.0
    assert Job(remaining_hours=1, changeover_hours=0.0, current_location=None).on_demand is False


# With a deadline: only the slack B = T - W - 3d is spent; each preemption (one per L hours of Spot
# work, Poisson) and a start without capacity spend an outage L (1 - p) / p and a changeover of it,
# and the work runs on Spot until the preemption B can no longer pay, the rest and a changeover on
# on-demand.


def work_before(preemptions: float, work: float, run: float) -> float:
    """E[min(work, the time of the n-th preemption)], integrated numerically: the integral over
    [0, work] of P(fewer than n preemptions by t), linear between whole n (n <= 0: nothing)."""
    if preemptions <= 0:
        return 0.0
    whole = math.floor(preemptions)
    steps = 20_000

    def integral(n: int) -> float:
        total = 0.0
        for k in range(steps):
            t = (k + 0.5) * work / steps
            total += sum(math.exp(-t / run) * (t / run) ** j / math.factorial(j) for j in range(n))
        return total * work / steps

    low = integral(whole)
    return low + (preemptions - whole) * (integral(whole + 1) - low)


def reaches(preemptions: float, work: float, run: float) -> float:
    """P(at least n preemptions within the work), linear between whole n (n <= 0: certain)."""

    def at_least(n: int) -> float:
        mean = work / run
        return 1.0 - sum(math.exp(-mean) * mean**j / math.factorial(j) for j in range(n))

    whole = math.floor(preemptions)
    if preemptions <= 0:
        return 1.0 if preemptions <= -1 else 1.0 + (preemptions + 1) * (at_least(1) - 1.0)
    return at_least(whole) + (preemptions - whole) * (at_least(whole + 1) - at_least(whole))


def test_with_a_deadline_the_work_runs_on_spot_until_the_preemption_the_slack_cannot_pay() -> None:
    job = Job(remaining_hours=10, changeover_hours=0.5, current_location=None, hours_to_deadline=20)
    costed = expected_cost(job, at(seen(share=0.5, lifetime_hours=4.0)), Move())
    slack = 20 - 10 - 3 * 0.5
    paid = slack / (4.0 * 0.5 / 0.5 + 0.5)  # preemptions paid: an outage of 4 h and a changeover each
    # capacity at the start half the time; otherwise the start's wait is the first one paid
    share = (0.5 * work_before(paid + 1, 10, 4.0) + 0.5 * work_before(paid, 10, 4.0)) / 10
    assert costed.spot_share == pytest.approx(share, rel=1e-3)
    # the on-demand changeover is paid when the rest goes there: when that preemption comes
    goes = 0.5 * reaches(paid + 1, 10, 4.0) + 0.5 * reaches(paid, 10, 4.0)
    spot_hour = SPOT * (1 + 0.5 / 4)
    expected = share * 10 * spot_hour + ((1 - share) * 10 + goes * 0.5) * ON_DEMAND
    assert costed.cost == pytest.approx(expected, rel=1e-3)


def test_at_the_same_share_of_time_long_spot_runs_keep_a_tight_deadline_on_spot_and_short_ones_do_not() -> None:
    tight = Job(remaining_hours=24, changeover_hours=0.2, current_location=None, hours_to_deadline=24 * 1.05)
    long_runs = expected_cost(tight, at(seen(share=0.9, lifetime_hours=1000.0)), Move())
    short_runs = expected_cost(tight, at(seen(share=0.9, lifetime_hours=0.5)), Move())
    assert long_runs.spot_share > 0.85  # a preemption is unlikely within the work
    assert short_runs.spot_share < 0.2  # some 48 preemptions; the slack pays for 2
    assert long_runs.cost < short_runs.cost


def test_the_deadline_switch_is_costed_where_on_demand_is_cheapest_not_where_spot_ran() -> None:
    # Long Spot runs behind a dear on-demand price: the switch would go to the other location's
    # on-demand (placed like any attempt), so the long runs win at a tight deadline.
    tight = Job(remaining_hours=24, changeover_hours=0.2, current_location=None, hours_to_deadline=24 * 1.05)
    short_runs = Candidate("cheap-on-demand", 5.0, 20.0, seen(share=0.95, lifetime_hours=10.0))
    long_runs = Candidate("dear-on-demand", 5.5, 40.0, seen(share=0.95, lifetime_hours=40.0))
    assert choose_location(tight, [short_runs, long_runs]).location == "dear-on-demand"
    alone = expected_cost(tight, long_runs, Move())
    beside = expected_cost(tight, long_runs, Move(), [short_runs, long_runs])
    rest = (1 - alone.spot_share) * 24
    assert beside.spot_share == alone.spot_share
    assert alone.cost - beside.cost == pytest.approx(rest * (40.0 - 20.0), rel=0.02)  # and its changeover's
    # a move that costs more than on-demand saves keeps the switch where Spot ran
    far = Move(checkpoint_gb=1e5, price_per_gb=lambda source, target: 0.1 if source != target else 0.0)
    assert expected_cost(tight, long_runs, far, [short_runs, long_runs]).cost == pytest.approx(
        expected_cost(tight, long_runs, far).cost
    )


def test_a_job_waiting_where_it_is_pays_an_outage_before_it_starts_there() -> None:
    here = at(seen(share=0.9, lifetime_hours=10.0), "x")
    fresh = Job(remaining_hours=10, changeover_hours=0.5, current_location="x", hours_to_deadline=14)
    waiting = Job(remaining_hours=10, changeover_hours=0.5, current_location="x", hours_to_deadline=14, waiting=True)
    assert expected_cost(waiting, here, Move()).spot_share < expected_cost(fresh, here, Move()).spot_share
    # elsewhere, the start has capacity as often as Spot there has
    there = at(seen(share=0.9, lifetime_hours=10.0), "y")
    assert expected_cost(waiting, there, Move()).spot_share == expected_cost(fresh, there, Move()).spot_share


def test_with_slack_for_all_of_it_the_work_is_all_on_spot_but_for_a_tail_of_preemptions() -> None:
    job = Job(remaining_hours=10, changeover_hours=0.5, current_location=None, hours_to_deadline=60)
    costed = expected_cost(job, at(seen(share=0.5, lifetime_hours=4.0)), Move())
    assert costed.spot_share == pytest.approx(1.0, abs=1e-3)
    assert costed.cost == pytest.approx(10 * SPOT * (1 + 0.5 / 4), rel=0.02)


def test_under_an_hour_of_work_is_weighed_like_any_other() -> None:
    job = Job(remaining_hours=0.8, changeover_hours=0.1, current_location=None, hours_to_deadline=1.5)
    costed = expected_cost(job, at(seen(share=0.5, lifetime_hours=4.0)), Move())
    paid = (1.5 - 0.8 - 0.3) / (4.0 + 0.1)
    share = (0.5 * work_before(paid + 1, 0.8, 4.0) + 0.5 * work_before(paid, 0.8, 4.0)) / 0.8
    assert costed.spot_share == pytest.approx(share, rel=1e-3)
    # less than an hour of it on on-demand: still its own changeover there, when it goes
    goes = 0.5 * reaches(paid + 1, 0.8, 4.0) + 0.5 * reaches(paid, 0.8, 4.0)
    spot_hour = SPOT * (1 + 0.1 / 4)
    expected = share * 0.8 * spot_hour + ((1 - share) * 0.8 + goes * 0.1) * ON_DEMAND
    assert costed.cost == pytest.approx(expected, rel=1e-3)


def test_with_no_slack_everything_runs_on_demand() -> None:
    job = Job(remaining_hours=10, changeover_hours=0.5, current_location=None, hours_to_deadline=9)
    costed = expected_cost(job, at(seen(share=0.9)), Move())
    assert costed.spot_share == 0.0
    assert costed.cost == pytest.approx((10 + 0.5) * ON_DEMAND)
    just = Job(remaining_hours=10, changeover_hours=0.5, current_location=None, hours_to_deadline=11.4)
    assert expected_cost(just, at(seen(share=0.9)), Move()).spot_share == 0.0


def test_always_capacity_or_no_work_left_is_all_spot() -> None:
    job = Job(remaining_hours=10, changeover_hours=0.5, current_location=None, hours_to_deadline=12)
    always = expected_cost(job, at(seen(share=1.0, lifetime_hours=4.0)), Move())
    assert always.spot_share == 1.0 and always.cost == pytest.approx(10 * SPOT * (1 + 0.5 / 4))
    done = Job(remaining_hours=0, changeover_hours=0.5, current_location=None, hours_to_deadline=12)
    assert expected_cost(done, at(seen(share=0.3)), Move()).cost == 0.0
    overrun = Job(remaining_hours=-2, changeover_hours=0.5, current_location=None, hours_to_deadline=12)
    assert expected_cost(overrun, at(seen(share=0.3)), Move()).cost == 0.0


def test_a_deadline_switch_pays_on_demand_for_the_work_and_the_changeover() -> None:
    switch = Job(remaining_hours=10, changeover_hours=0.5, current_location=None, hours_to_deadline=20, on_demand=True)
    costed = expected_cost(switch, at(seen(share=0.9)), Move())
    assert (costed.cost, costed.spot_share) == (pytest.approx(10.5 * ON_DEMAND), 0.0)


# A checkpoint's read or move: its dollars, and its copy time in the changeover.


def test_a_checkpoint_read_from_its_bucket_adds_its_price_and_its_copy_time_to_the_changeover() -> None:
    read = Move(checkpoint_gb=2000, price_per_gb=lambda source, target: 0.02, bucket_location="US-CENTRAL1")
    assert read.cost("us-east4", "us-east4") == (pytest.approx(40.0), pytest.approx(2.0))  # the current one reads too
    switch = Job(remaining_hours=10, changeover_hours=0.5, current_location="us-east4", on_demand=True)
    costed = expected_cost(switch, at(location="us-east4"), read)
    assert costed.cost == pytest.approx((10 + 0.5 + 2.0) * ON_DEMAND + 40.0) and costed.move_cost == pytest.approx(40)
    spot = Job(remaining_hours=10, changeover_hours=0.5, current_location="us-east4")
    assert expected_cost(spot, at(location="us-east4"), read).cost == pytest.approx(
        10 * SPOT * (1 + 2.5 / 6) + 2.5 * SPOT + 40.0
    )
    # with a deadline the copy's 2 h is a changeover's too: slack enough that all of it runs on Spot
    deadline = Job(remaining_hours=10, changeover_hours=0.5, current_location="us-east4", hours_to_deadline=80)
    assert expected_cost(deadline, at(location="us-east4"), read).cost == pytest.approx(
        10 * SPOT * (1 + 2.5 / 6) + 40.0, rel=1e-3
    )


def test_a_checkpoint_moved_with_the_job_costs_nothing_to_stay_or_on_a_first_attempt() -> None:
    moved = Move(checkpoint_gb=2000, price_per_gb=lambda source, target: 0.08)
    assert moved.cost("a", "a") == (0.0, 0.0)
    assert moved.cost(None, "a") == (0.0, 0.0)
    assert moved.cost("a", "b") == (pytest.approx(160.0), pytest.approx(2.0))
    assert Move(checkpoint_gb=0.5, price_per_gb=lambda source, target: 0.08).cost("a", "b") == (
        pytest.approx(0.04),
        pytest.approx(0.0005),
    )


def test_a_free_read_takes_no_copy_time_and_no_checkpoint_or_price_costs_nothing() -> None:
    assert Move(2000, per_gb, bucket_location="US").cost(None, "us-east4") == (0.0, 0.0)
    assert Move(2000, per_gb, bucket_location="US-EAST4").cost(None, "us-east4") == (0.0, 0.0)
    assert Move(checkpoint_gb=2000).cost("a", "b") == (0.0, 0.0)  # no price given: free
    assert Move(price_per_gb=lambda source, target: 0.08).cost("a", "b") == (0.0, 0.0)  # no checkpoint


def test_reading_across_regions_costs_two_cents_a_gb_on_one_continent_eight_between() -> None:
    assert per_gb("us-central1", "us-east4") == pytest.approx(0.02)
    assert per_gb("europe-west1", "us-east4") == pytest.approx(0.08)
    assert per_gb("US", "europe-west1") == pytest.approx(0.08)
    assert per_gb("EU", "europe-west1") == 0.0
    assert (continent("us-east4"), continent("NAM4"), continent("EU"), continent("me-west1")) == (
        "north-america",
        "north-america",
        "europe",
        "middle-east",
    )
    assert continent("mars-north1") is None


# Choosing: the cheapest, unless the current one is within the margin (2%).


def priced(location: str, on_demand: float) -> Candidate:
    return Candidate(location, SPOT, on_demand)


def switch_job(current: str | None) -> Job:
    """On-demand for one hour without a changeover: each candidate costs its on-demand price."""
    return Job(remaining_hours=1, changeover_hours=0.0, current_location=current, on_demand=True)


def test_the_current_location_stays_within_two_percent_of_the_cheapest_and_no_further() -> None:
    cheapest = priced("b", 100.0)
    at_margin = choose_location(switch_job("a"), [priced("a", 102.0), cheapest])
    assert at_margin.location == "a"
    assert at_margin.reason == "stay: within 2% of the cheapest (b)"
    assert at_margin.cost == pytest.approx(102.0)  # the chosen one's, not the cheapest's
    assert choose_location(switch_job("a"), [priced("a", 101.0), cheapest]).location == "a"
    beyond = choose_location(switch_job("a"), [priced("a", 102.5), cheapest])
    assert beyond.location == "b" and beyond.reason == "cheapest expected cost to finish: $100"
    assert beyond.cost == pytest.approx(100.0)


def test_the_current_location_that_is_the_cheapest_is_chosen_as_the_cheapest() -> None:
    choice = choose_location(switch_job("a"), [priced("a", 100.0), priced("b", 101.0)])
    assert (choice.location, choice.reason) == ("a", "cheapest expected cost to finish: $100")
    assert [c.location for c in choice.costs] == ["a", "b"]


def test_a_first_attempt_goes_to_the_cheapest_and_ties_go_by_name() -> None:
    assert choose_location(switch_job(None), [priced("c", 101.0), priced("b", 100.0)]).location == "b"
    assert choose_location(switch_job(None), [priced("c", 100.0), priced("b", 100.0)]).location == "b"
    assert choose_location(switch_job("z"), [priced("c", 101.0), priced("b", 100.0)]).location == "b"


def test_no_candidate_is_an_error() -> None:
    with pytest.raises(ValueError, match="no candidate"):
        choose_location(switch_job(None), [])


# The price table.


def test_the_price_table_answers_per_machine_type_and_location_and_none_elsewhere() -> None:
    spot, on_demand = hourly("a3-highgpu-8g", "us-east4") or (0.0, 0.0)
    assert 0 < spot < on_demand
    assert hourly("a3-highgpu-8g", "mars-north1") is None
    assert hourly("no-such-machine", "us-east4") is None
