"""Placement (shared/fleet/placement.py) on scripted prices and estimates, and the dated H100
price table it reads in production."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from google.api_core.exceptions import ServiceUnavailable

from shared.clock import iso
from shared.fleet.estimate import CapacityEstimate, SpotOutlook, estimate
from shared.fleet.observations import FleetFact, Kind, MachineClass
from shared.fleet.placement import (
    MOVE_MARGIN,
    SHARE_MODEL_SLACK_CHANGEOVERS,
    Candidate,
    Job,
    Move,
    choose_location,
    expected_cost,
    share_of_slack,
)
from shared.fleet.placing import NO_OBSERVATIONS, LocationChoice, Placer, checkpoint_move, place_claimed, work_hours
from shared.fleet.transfer import OTHER_CONTINENT_PER_GB, SAME_CONTINENT_PER_GB, per_gb
from shared.ledger.records import Attempt, RequestRecord
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


@pytest.mark.parametrize(
    ("source", "region", "price"),
    [
        ("us-central1", "us-central1", 0.0),
        ("US-CENTRAL1", "us-central1", 0.0),  # Terraform upper-cases a bucket's location
        ("US-CENTRAL1", "us-east4", SAME_CONTINENT_PER_GB),
        ("northamerica-northeast1", "us-east4", SAME_CONTINENT_PER_GB),
        ("US", "us-east4", 0.0),  # a multi-region bucket, read on its continent
        ("US", "europe-west1", OTHER_CONTINENT_PER_GB),
        ("EU", "europe-west3", 0.0),
        ("ASIA", "asia-southeast1", 0.0),
        ("NAM4", "us-east4", SAME_CONTINENT_PER_GB),  # a dual-region: as a region of its continent
        ("EUR4", "us-east4", OTHER_CONTINENT_PER_GB),
        ("asia-southeast1", "us-central1", OTHER_CONTINENT_PER_GB),
        ("mars-north1", "mars-north1", 0.0),
        ("mars-north1", "us-east4", OTHER_CONTINENT_PER_GB),  # unknown: the dearer rate
    ],
)
def test_reading_a_checkpoint_is_priced_from_the_buckets_location(source: str, region: str, price: float) -> None:
    assert per_gb(source, region) == price


def test_a_checkpoint_in_one_bucket_is_read_wherever_the_attempt_runs_the_current_location_too() -> None:
    here = Candidate("us-central1", 18.98, 82.53, seen("us-central1", 0.95))
    there = Candidate("us-east4", 18.0, 82.53, seen("us-east4", 0.95))
    job = Job(10, 0.2, current_location="us-central1", hours_to_deadline=30)
    assert choose_location(job, [here, there]).location == "us-east4"
    # 2 TB in a us-central1 bucket: reading it in us-east4 costs $40, more than its Spot saves
    bucket = Move(checkpoint_gb=2000, price_per_gb=per_gb, bucket_location="US-CENTRAL1")
    choice = choose_location(job, [here, there], bucket)
    assert choice.location == "us-central1"
    assert {c.location: c.move_cost for c in choice.costs} == {"us-central1": 0.0, "us-east4": pytest.approx(40.0)}
    # in a bucket of a third region, staying reads it too: us-east4 wins again
    far = Move(checkpoint_gb=2000, price_per_gb=per_gb, bucket_location="EUROPE-WEST1")
    assert choose_location(job, [here, there], far).location == "us-east4"
    # a multi-region bucket over both: nothing to read across regions
    assert choose_location(job, [here, there], Move(2000, per_gb, bucket_location="US")).location == "us-east4"


def test_the_checkpoint_to_move_is_the_newest_committed_with_its_size_and_the_buckets_location() -> None:
    older, newer = first(), Attempt(2, "us-central1", "SPOT", claimed_at="2026-12-02T12:05:00Z")
    older.last_checkpoint, older.last_checkpoint_bytes = [0, 50], 10**9
    newer.last_checkpoint, newer.last_checkpoint_bytes = [0, 100], 3 * 10**9
    move = checkpoint_move([older, newer], "US-CENTRAL1")
    assert (move.checkpoint_gb, move.bucket_location) == (3.0, "US-CENTRAL1")
    assert move.cost(None, "us-east4") == (pytest.approx(3 * SAME_CONTINENT_PER_GB), pytest.approx(3 / 1000))
    # nothing weighed without a checkpoint, its size (a kit older than `bytes`), or the bucket's location
    assert checkpoint_move([], "US-CENTRAL1") == Move()
    assert checkpoint_move([older, newer], "") == Move()
    newer.last_checkpoint_bytes = older.last_checkpoint_bytes = None
    assert checkpoint_move([older, newer], "US-CENTRAL1") == Move()


def test_a_tight_deadline_is_on_demand_where_it_is_cheapest() -> None:
    tight = Job(24, 0.2, None, hours_to_deadline=24.2)
    east = Candidate("us-east4", 14.85, 90.0, seen("us-east4", 0.9))
    central = Candidate("us-central1", 18.98, 82.53, seen("us-central1", 0.9))
    assert choose_location(tight, [east, central]).location == "us-central1"
    switch = Job(24, 0.2, None, hours_to_deadline=30, on_demand=True)
    assert choose_location(switch, [east, central]).location == "us-central1"


def test_a_wait_the_rule_holds_only_for_a_move_costs_on_demand_where_it_waits() -> None:
    # Waiting in us-east4 (the cheapest Spot, long slack): it stays, unless the deadline rule holds
    # the wait only for a move, when staying means the rest on on-demand there.
    east = Candidate("us-east4", 14.85, 82.53, seen("us-east4", 0.8))
    central = Candidate("us-central1", 18.98, 82.53, seen("us-central1", 0.95))
    waiting = Job(20, 0.2, current_location="us-east4", hours_to_deadline=40, waiting=True)
    assert choose_location(waiting, [east, central]).location == "us-east4"
    leaving = Job(20, 0.2, current_location="us-east4", hours_to_deadline=40, waiting=True, leaving=True)
    assert expected_cost(leaving, east, Move()).cost == pytest.approx((20 + 0.2) * 82.53)
    assert choose_location(leaving, [east, central]).location == "us-central1"


def test_a_new_request_with_room_is_planned_with_the_share_model_where_the_fleet_ran_on_spot() -> None:
    # docs/placement.md, sixth pass: after a burst the fleet's own runs in us-east4 are a few hours
    # long, and `plan_on_spot` put part of a new day's job on on-demand that 10 changeovers of
    # slack pay on Spot; a region the fleet never ran in (its prior's long runs) won instead.
    assert SHARE_MODEL_SLACK_CHANGEOVERS == 8.0
    east = Candidate("us-east4", 14.85, 82.53, replace(seen("us-east4", 0.95, 4.6), spot_vm_seconds=13.8 * 3600))
    asia = Candidate("asia-southeast1", 19.26, 107.01, seen("asia-southeast1", 0.95, 20))
    first = Job(24, 0.25, None, hours_to_deadline=24 + 3 * 0.25 + 10 * 0.25, new_request=True)  # 10 d of budget
    choice = choose_location(first, [east, asia])
    assert choice.location == "us-east4"
    assert expected_cost(first, east, Move()).spot_share == 1.0  # 0.95 x 2.5 h / (0.05 x 24 h) > 1
    # A re-queue (the fleet's runs have met this job), below 8 changeovers of budget, or where only
    # the prior speaks: Spot run length weighed, as before.
    assert choose_location(replace(first, new_request=False), [east, asia]).location == "asia-southeast1"
    tighter = replace(first, hours_to_deadline=24 + 3 * 0.25 + 7.9 * 0.25)
    assert expected_cost(tighter, east, Move()).spot_share < 1.0
    assert expected_cost(replace(tighter, hours_to_deadline=24 + 3 * 0.25 + 8 * 0.25), east, Move()).spot_share == 1.0
    prior_only = Candidate("us-east4", 14.85, 82.53, seen("us-east4", 0.95, 4.6))
    assert choose_location(first, [prior_only, asia]).location == "asia-southeast1"


def test_the_share_model_puts_on_spot_what_the_slack_pays_at_the_share_of_time_with_capacity() -> None:
    assert share_of_slack(24, 0.8, 2.0) == (pytest.approx(1 / 3), 1.0)  # 0.8 x 2 / (0.2 x 24)
    assert share_of_slack(24, 0.95, 2.0) == (1.0, 0.0)
    assert share_of_slack(24, 1.0, 0.0) == (1.0, 0.0)
    assert share_of_slack(0, 0.5, 2.0) == (1.0, 0.0)


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
    assert Prices.load().as_of == "2026-07-30"  # the A100 row keeps the table's (tools/price_table.py)


# Placing a new attempt (shared/fleet/placing.py): what submit's claim asks.

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
H100_JOB = {
    "jobSpec": {
        "workerPoolSpecs": [
            {
                "machineSpec": {
                    "machineType": "a3-highgpu-8g",
                    "acceleratorType": "NVIDIA_H100_80GB",
                    "acceleratorCount": 8,
                }
            }
        ]
    }
}
TWO_REGIONS = {"custom_job": H100_JOB, "location": "us-central1", "locations": ["us-central1", "us-east4"]}
PRICES = {"us-central1": (18.98, 82.53), "us-east4": (14.85, 82.53), "asia-southeast1": (19.26, 107.01)}


def price(machine_type: str, location: str) -> tuple[float, float] | None:
    return PRICES.get(location) if machine_type == "a3-highgpu-8g" else None


def waited(location: str, minutes: float, key: str, running: bool = True) -> list[FleetFact]:
    """A Spot attempt that waited `minutes` for capacity and runs now (or waits still)."""
    created = NOW - timedelta(hours=3)
    if not running:
        return [FleetFact(Kind.WAITING, location, created, attempt_key=key)]
    return [FleetFact(Kind.WAIT, location, created + timedelta(minutes=minutes), minutes * 60, attempt_key=key)]


def placer(facts: list[FleetFact], reads: list[str] | None = None) -> Placer:
    def read(machine_class: MachineClass) -> list[FleetFact]:
        if reads is not None:
            reads.append(machine_class.key)
        return facts

    return Placer(read, price, NOW, changeover_prior_seconds=1200)


def first(location: str = "us-central1", strategy: str = "SPOT") -> Attempt:
    return Attempt(1, location, strategy, claimed_at="2026-12-02T12:00:00Z")


def test_with_no_observations_the_first_allowed_location_keeps_the_attempt() -> None:
    placed = placer([]).place(TWO_REGIONS, first(), [])
    assert placed == LocationChoice("us-central1", NO_OBSERVATIONS)
    # observations of a location the request does not allow are none for it
    assert placer(waited("asia-southeast1", 5, "a")).place(TWO_REGIONS, first(), []).reason == NO_OBSERVATIONS


def test_an_allowed_location_where_spot_had_capacity_wins_over_one_where_jobs_wait() -> None:
    # the planned location has the cheapest Spot, but its job has waited three hours there
    request = {**TWO_REGIONS, "location": "us-east4", "locations": ["us-east4", "asia-southeast1"]}
    facts = waited("asia-southeast1", 5, "a") + waited("us-east4", 0, "b", running=False)
    placed = placer(facts).place(request, first("us-east4"), [])
    assert placed.location == "asia-southeast1"
    assert "cheapest expected cost" in placed.reason and "$19.26/h" in placed.reason
    # with the wait closed (capacity found), the cheaper planned one wins
    found = waited("asia-southeast1", 5, "a") + waited("us-east4", 5, "b")
    assert placer(found).place(request, first("us-east4"), []).location == "us-east4"
    # where Spot is as available, the planned location stays unless another saves the margin
    even = waited("us-east4", 5, "a") + waited("us-central1", 5, "b")
    prices_even = {"us-central1": (14.9, 82.53), "us-east4": (14.85, 82.53)}
    same = Placer(lambda _: even, lambda _m, loc: prices_even[loc], NOW, 1200).place(TWO_REGIONS, first(), [])
    assert same.location == "us-central1" and same.reason.startswith("stay")


def test_a_deadline_switch_is_placed_on_the_cheapest_on_demand() -> None:
    request = {**TWO_REGIONS, "locations": ["us-central1", "asia-southeast1"], "location": "asia-southeast1"}
    facts = waited("asia-southeast1", 5, "a")
    placed = placer(facts).place(request, first("asia-southeast1", "STANDARD"), [])
    assert placed.location == "us-central1"
    assert "$82.53/h" in placed.reason


def test_what_cannot_be_weighed_keeps_the_planned_location_and_says_why() -> None:
    facts = waited("us-east4", 5, "a")
    one = {**TWO_REGIONS, "locations": []}
    assert placer(facts).place(one, first(), []) == LocationChoice("us-central1", "the only allowed location")
    cpu = {**TWO_REGIONS, "custom_job": {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1"}}]}}}
    assert placer(facts).place(cpu, first(), []).reason.startswith("no prices for n1")

    def broken(_: MachineClass) -> list[FleetFact]:
        raise ServiceUnavailable("listing refused")

    refused = Placer(broken, price, NOW, 1200).place(TWO_REGIONS, first(), [])
    assert refused == LocationChoice("us-central1", "fleet observations unreadable")


def test_the_observations_are_read_once_per_claim() -> None:
    reads: list[str] = []
    place = placer(waited("us-east4", 5, "a"), reads)
    place.place(TWO_REGIONS, first(), [])
    place.place(TWO_REGIONS, first(), [])  # the claim's compare-and-swap ran again
    assert reads == ["a3-highgpu-8g+nvidia_h100_80gb+8"]


def test_a_deadline_claim_keeps_the_outlook_where_the_attempt_runs_from_its_one_read() -> None:
    reads: list[str] = []
    facts = waited("us-east4", 5, "a") + waited("us-central1", 5, "b")
    due = {**TWO_REGIONS, "deadline": "2026-12-03T12:00:00Z", "total_steps": 100, "expected_step_seconds": 72}
    record = RequestRecord("r1", due, "gs://b/r1/", attempts=[first()])
    claimed = placer(facts, reads)
    place_claimed(claimed, record, record.attempts[0])
    attempt = record.attempts[0]
    expected = estimate(facts, attempt.location, NOW).outlook
    assert expected is not None and attempt.spot_outlook == expected.to_json()
    assert SpotOutlook.from_json(attempt.spot_outlook) == expected
    assert reads == ["a3-highgpu-8g+nvidia_h100_80gb+8"]  # the placement's read, not a second
    # one allowed location: the claim reads the fleet for the outlook alone
    alone = RequestRecord("r2", {**due, "locations": []}, "gs://b/r2/", attempts=[first()])
    place_claimed(placer(facts), alone, alone.attempts[0])
    assert alone.attempts[0].spot_outlook == estimate(facts, "us-central1", NOW).outlook.to_json()
    # no deadline, nothing seen there, or an unreadable listing: none (the rule is then Uniform Progress)
    plain = RequestRecord("r3", TWO_REGIONS, "gs://b/r3/", attempts=[first()])
    place_claimed(placer(facts), plain, plain.attempts[0])
    unseen = RequestRecord("r4", {**due, "locations": []}, "gs://b/r4/", attempts=[first()])
    place_claimed(placer(waited("us-east4", 5, "a")), unseen, unseen.attempts[0])

    def broken(_: MachineClass) -> list[FleetFact]:
        raise ServiceUnavailable("listing refused")

    refused = RequestRecord("r5", due, "gs://b/r5/", attempts=[first()])
    place_claimed(Placer(broken, price, NOW, 1200), refused, refused.attempts[0])
    assert [r.attempts[0].spot_outlook for r in (plain, unseen, refused)] == [None, None, None]


def test_capacity_now_is_the_fleets_estimate_where_the_attempt_runs() -> None:
    yes, no = waited("us-east4", 5, "a"), waited("us-central1", 0, "b", running=False)  # running / waiting 3 h
    reads: list[str] = []
    fleet = placer(yes + no, reads)
    assert fleet.has_capacity(TWO_REGIONS, "us-east4") is True
    assert fleet.has_capacity(TWO_REGIONS, "us-central1") is False
    assert reads == ["a3-highgpu-8g+nvidia_h100_80gb+8"]  # one read for both
    assert placer(no).has_capacity(TWO_REGIONS, "us-east4") is None  # nothing seen there
    cpu = {"custom_job": {"jobSpec": {"workerPoolSpecs": [{}]}}, "location": "us-central1"}
    assert placer(no).has_capacity(cpu, "us-central1") is None

    def broken(_: MachineClass) -> list[FleetFact]:
        raise ServiceUnavailable("listing refused")

    assert Placer(broken, price, NOW, 1200).has_capacity(TWO_REGIONS, "us-central1") is None


def test_the_work_left_comes_from_the_kit_else_the_request() -> None:
    ran = Attempt(1, "us-east4", "SPOT", claimed_at="x", total_steps=1000, steps_per_second=0.1)
    ran.last_checkpoint = [1, 640]
    assert work_hours({}, [ran]) == pytest.approx(1.0)
    assert work_hours({"total_steps": 100, "expected_step_seconds": 72}, []) == pytest.approx(2.0)
    assert work_hours({}, []) is None


def test_status_says_where_each_attempt_ran_and_why_there() -> None:
    from spotjobs.cli.status import format_request

    planned = first()
    planned.placed = NO_OBSERVATIONS
    moved = Attempt(2, "us-east4", "SPOT", claimed_at="2026-12-02T13:00:00Z", placed="cheapest expected cost: $9")
    text = format_request(RequestRecord("r1", request=TWO_REGIONS, output_dir="gs://b/r1/", attempts=[planned, moved]))
    assert text.splitlines()[-2:] == [
        "placed      attempt 1 in us-central1: no observations",
        "placed      attempt 2 in us-east4: cheapest expected cost: $9",
    ]


# Moving a job that waits for Spot (shared/deciding/moves.py), on scripted observations.


def waiting_record(state: str = "JOB_STATE_PENDING") -> RequestRecord:
    created = iso(NOW - timedelta(hours=2))
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at=created, job="projects/p/locations/us-central1/customJobs/1")
    attempt.created_at, attempt.state = created, state
    return RequestRecord("r1", {**TWO_REGIONS, "max_attempts": 3}, "gs://b/r1/", attempts=[attempt])


def test_a_job_waiting_past_its_changeover_where_others_find_spot_is_moved_on_a_fresh_read_only() -> None:
    from shared.deciding.decision_policy import DecisionPolicy
    from shared.deciding.effects import Effects
    from shared.deciding.moves import consider_move
    from shared.jobs import JobSnapshot
    from shared.settings import Settings

    facts = waited("us-central1", 0, "b", running=False) + waited("us-east4", 5, "a")
    policy = DecisionPolicy.from_settings(Settings())
    pending = JobSnapshot("projects/p/locations/us-central1/customJobs/1", "JOB_STATE_PENDING")

    stale = waiting_record(state="JOB_STATE_RUNNING")  # a newer read said it runs
    consider_move(stale, pending, placer(facts), policy, NOW, Effects())
    assert stale.attempt(1).outcome is None and stale.requeue is None

    fresh = waiting_record()
    effects = Effects()
    consider_move(fresh, pending, placer(facts), policy, NOW, effects)
    assert fresh.attempt(1).outcome == "moved" and fresh.attempt(1).cancel_decided_at == iso(NOW)
    assert (fresh.requeue.attempt, fresh.requeue.location, fresh.requeue.reason) == (2, "us-east4", "move")
    assert effects.requeue_decided and [line.fields["event"] for line in effects.lines] == ["moved"]


# The claim's snapshot of the fleet's changeover bound, for a deadline's d.

ONE_REGION_DEADLINE = {"custom_job": H100_JOB, "location": "us-east4", "deadline": "2026-12-03T12:00:00Z"}


def changeovers(location: str, *seconds: float) -> list[FleetFact]:
    return [
        FleetFact(Kind.CHANGEOVER, location, NOW - timedelta(hours=1), s, attempt_key=f"c{i}")
        for i, s in enumerate(seconds)
    ]


def test_a_deadline_claim_snapshots_the_fleets_changeover_bound_where_the_attempt_runs() -> None:
    reads: list[str] = []
    record = RequestRecord("r1", ONE_REGION_DEADLINE, "gs://b/r1/", attempts=[first("us-east4", "STANDARD")])
    place_claimed(
        placer(changeovers("us-east4", 500, 4000) + changeovers("us-central1", 9000), reads), record, record.attempts[0]
    )
    assert record.attempts[0].fleet_changeover_seconds == 4000.0  # us-east4's largest of two
    assert record.attempts[0].placed == "the only allowed location" and len(reads) == 1
    # Placed in another allowed location: that one's bound, from the same one read.
    reads.clear()
    both = {**ONE_REGION_DEADLINE, "location": "asia-southeast1", "locations": ["asia-southeast1", "us-central1"]}
    two = RequestRecord("r2", both, "gs://b/r2/", attempts=[first("asia-southeast1", "STANDARD")])
    facts = (
        changeovers("asia-southeast1", 500.0) + changeovers("us-central1", 700.0) + waited("asia-southeast1", 5, "a")
    )
    place_claimed(placer(facts, reads), two, two.attempts[0])  # on-demand is cheaper in us-central1
    assert (two.attempts[0].location, two.attempts[0].fleet_changeover_seconds) == ("us-central1", 700.0)
    assert len(reads) == 1


def test_only_a_deadline_without_its_own_changeover_reads_the_fleet_for_the_bound() -> None:
    # No deadline: no read. A deadline with its own d: the claim's one read (for the Spot outlook)
    # gives no bound.
    for request, expected_reads in (
        ({"custom_job": H100_JOB, "location": "us-east4"}, 0),
        ({**ONE_REGION_DEADLINE, "changeover_seconds": 600}, 1),
    ):
        reads: list[str] = []
        record = RequestRecord("r1", request, "gs://b/r1/", attempts=[first("us-east4")])
        place_claimed(placer(changeovers("us-east4", 4000), reads), record, record.attempts[0])
        assert record.attempts[0].fleet_changeover_seconds is None and len(reads) == expected_reads

    tries: list[MachineClass] = []

    def broken(machine_class: MachineClass) -> list[FleetFact]:
        tries.append(machine_class)
        raise ServiceUnavailable("listing refused")

    record = RequestRecord("r1", ONE_REGION_DEADLINE, "gs://b/r1/", attempts=[first("us-east4")])
    place_claimed(Placer(broken, price, NOW, 1200), record, record.attempts[0])  # advisory: no bound
    assert record.attempts[0].fleet_changeover_seconds is None and len(tries) == 1
    # placement's failed read is not tried again for the bound in the same claim
    both = {**ONE_REGION_DEADLINE, "locations": ["us-east4", "us-central1"]}
    two = RequestRecord("r2", both, "gs://b/r2/", attempts=[first("us-east4")])
    tries.clear()
    place_claimed(Placer(broken, price, NOW, 1200), two, two.attempts[0])
    assert two.attempts[0].placed == "fleet observations unreadable" and len(tries) == 1


def test_the_snapshot_survives_the_records_json_and_an_older_record_reads_without_it() -> None:
    attempt = first("us-east4", "STANDARD")
    attempt.fleet_changeover_seconds = 3300.0
    record = RequestRecord("r1", ONE_REGION_DEADLINE, "gs://b/r1/", attempts=[attempt])
    assert RequestRecord.from_json(record.to_document()).attempts[0].fleet_changeover_seconds == 3300.0
    older = record.to_document()
    del older["attempts"][0]["fleet_changeover_seconds"]
    read = RequestRecord.from_json(older)
    assert read.attempts[0].fleet_changeover_seconds is None and read.attempts[0].newer_fields == {}
