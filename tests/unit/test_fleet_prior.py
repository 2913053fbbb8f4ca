"""The shipped region prior (shared/fleet/prior.py, shared/fleet/region_prior.json): its loader and
provenance, the refresh command that fits it (bench/region_prior.py), the estimate that starts from
it and gives way to the fleet's own observations, and placement weighing it where the fleet has
seen nothing."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench import region_prior
from shared.fleet.estimate import estimate
from shared.fleet.observations import FleetFact, Kind
from shared.fleet.placement import Candidate, Costed, Job, Move, expected_cost
from shared.fleet.placing import Placer, attempt_placer, no_prior
from shared.fleet.prior import PRIOR_PATH, WEIGHT_HOURS, WEIGHT_RUNS, LocationPrior, location_prior
from shared.ledger.records import Attempt
from shared.settings import Settings

NOW = datetime(2026, 12, 6, 12, tzinfo=UTC)
H100 = {
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


def test_the_shipped_prior_says_where_it_comes_from_and_which_week_it_was_fitted_on() -> None:
    body = json.loads(PRIOR_PATH.read_text())
    assert "andylizf/skynomad-artifact" in body["source"] and body["fitted_at"]
    assert body["window"]["hours"] == 168.0  # the traces' first week: later starts are out of sample
    assert body["window"]["from"].startswith("2025-10-04")


def test_a_region_and_a_zone_have_a_prior_and_an_unknown_machine_or_location_none() -> None:
    region = location_prior("a3-highgpu-8g", "us-east4")
    zone = location_prior("a3-highgpu-8g", "europe-west1-c")
    assert isinstance(region, LocationPrior) and isinstance(zone, LocationPrior)
    for prior in (region, zone):
        assert 0 < prior.share_available <= 1 and prior.mean_run_hours > 0 and prior.mean_outage_hours >= 0
    assert location_prior("a3-highgpu-8g", "mars-north1") is None
    assert location_prior("a2-highgpu-1g", "us-east4") is None
    assert location_prior("a3-highgpu-8g", "us-east4", Path("/nonexistent/prior.json")) is None


def test_the_refresh_command_fits_the_shipped_numbers_from_the_traces_first_week(tmp_path: Path) -> None:
    out = tmp_path / "prior.json"
    assert region_prior.main(["--out", str(out)]) == 0
    fitted, shipped = json.loads(out.read_text()), json.loads(PRIOR_PATH.read_text())
    assert fitted["machine_types"] == shipped["machine_types"] and fitted["window"] == shipped["window"]


def test_runs_and_outages_are_counted_in_ticks() -> None:
    assert region_prior.runs([True, True, False, True, False, False]) == ([2, 1], [1, 2])
    fitted = region_prior.fitted([True, True, False, False], 1800)
    assert {k: v for k, v in fitted.items() if k != "run_survival"} == {
        "share_available": 0.5,
        "mean_run_hours": 1.0,
        "mean_outage_hours": 1.0,
    }
    assert fitted["run_survival"]["1"] == 0.0  # a run of 1 h never lasts an hour more


def test_the_run_survival_is_the_share_of_the_time_with_capacity_that_lasts_h_more() -> None:
    # runs of 1, 1 and 10 ticks: from 9 of their 12 ticks capacity lasts 1 tick more, from 8 of
    # them 2 more, and only the long run's lasts 5 more
    assert [region_prior.survival([1, 1, 10], t) for t in (1, 2, 5, 10)] == [0.75, 0.6667, 0.4167, 0.0]
    fitted = region_prior.fitted([True] * 12 + [False] + [True] + [False] + [True], 3600)
    assert list(fitted["run_survival"]) == [f"{h}" for h in region_prior.SURVIVAL_HOURS]
    assert fitted["run_survival"]["1"] == 0.7857 and fitted["run_survival"]["12"] == 0.0


def test_a_long_tail_of_runs_meets_a_long_job_at_a_longer_run_than_the_mean() -> None:
    # mean 10 h runs, but a third of the time with capacity lasts 24 h more: exp(-24 / L) = 1/3
    tail = LocationPrior(0.95, 10.0, 0.5, run_survival=((12, 0.5), (24, 1 / 3), (48, 0.0)))
    assert tail.run_hours_over(24) == pytest.approx(24 / math.log(3))
    assert tail.run_hours_over(6) == pytest.approx(10 + 0.5 * (12 / math.log(2) - 10))  # from the mean at 0
    assert tail.run_hours_over(0) == pytest.approx(10.0)
    assert tail.run_hours_over(48) == tail.run_hours_over(100) == pytest.approx(10.0)  # none that long: the mean
    assert LocationPrior(0.95, 10.0, 0.5).run_hours_over(24) == 10.0  # no survival shipped: the mean
    # the estimate counts the prior's run at that length beside the fleet's own time and reclaims
    blank = estimate([], "us-east4", NOW, tail)
    assert blank.mean_lifetime_seconds == pytest.approx(10 * 3600)  # the outlook's: the mean
    assert blank.lifetime_over(24) == pytest.approx(24 / math.log(3) * 3600)
    facts = [
        FleetFact(Kind.RUN, "us-east4", NOW - timedelta(hours=1), 8 * 3600.0, attempt_key="a"),
        FleetFact(Kind.PREEMPT, "us-east4", NOW - timedelta(hours=1), attempt_key="a"),
    ]
    seen = estimate(facts, "us-east4", NOW, tail)
    runs = WEIGHT_RUNS
    assert seen.lifetime_over(24) == pytest.approx((8 + runs * 24 / math.log(3)) * 3600 / (1 + runs))
    assert estimate(facts, "us-east4", NOW).lifetime_over(24) == 8 * 3600  # without a prior: the mean


def test_at_a_tight_deadline_the_region_whose_runs_last_a_day_wins_over_one_with_the_same_mean(
    tmp_path: Path,
) -> None:
    # Both regions' runs average 20 h, and us-east4's Spot is cheaper; but us-central1's runs have
    # a tail of days (from 60% of its time with capacity Spot lasts a day more, us-east4's 30%):
    # with the slack for no preemption, the work stays on Spot there more often.
    table = {
        "machine_types": {
            "a3-highgpu-8g": {
                "locations": {
                    loc: {
                        "share_available": 0.99,
                        "mean_run_hours": 20.0,
                        "mean_outage_hours": 0.2,
                        "run_survival": {"12": survive**0.5, "24": survive, "48": survive**2},
                    }
                    for loc, survive in (("us-east4", 0.3), ("us-central1", 0.6))
                }
            }
        }
    }
    path = tmp_path / "prior.json"
    path.write_text(json.dumps(table))
    request = {
        "custom_job": H100,
        "location": "us-east4",
        "locations": ["us-east4", "us-central1"],
        "deadline": (NOW + timedelta(hours=24 * 1.05)).isoformat(),
        "total_steps": 24,
        "expected_step_seconds": 3600,
    }
    attempt = Attempt(1, "us-east4", "SPOT", claimed_at=NOW.isoformat())
    placer = Placer(lambda machine_class: [], price, NOW, 720, prior=lambda m, loc: location_prior(m, loc, path))
    assert placer.place(request, attempt, []).location == "us-central1"


def test_with_nothing_seen_the_estimate_is_the_prior_and_the_fleets_time_outweighs_it() -> None:
    prior = LocationPrior(share_available=0.9, mean_run_hours=20.0, mean_outage_hours=2.2)
    blank = estimate([], "us-east4", NOW, prior)
    assert blank.share_available == pytest.approx(0.9)
    assert blank.mean_lifetime_seconds == pytest.approx(20 * 3600) and not blank.lifetime_censored
    assert blank.outlook is not None  # the deadline rule has an outlook from the first attempt on
    assert estimate([], "us-east4", NOW).outlook is None  # without the prior: none
    # two days of the fleet's own Spot runs: six attempts of 8 h, each ended by a preemption
    facts = [
        fact
        for k in range(6)
        for fact in (
            FleetFact(Kind.RUN, "us-east4", NOW - timedelta(hours=8 * k), 8 * 3600.0, attempt_key=f"a{k}"),
            FleetFact(Kind.PREEMPT, "us-east4", NOW - timedelta(hours=8 * k), attempt_key=f"a{k}"),
        )
    ]
    seen = estimate(facts, "us-east4", NOW, prior)
    # the prior: WEIGHT_RUNS runs of 20 h
    assert seen.mean_lifetime_seconds == pytest.approx((48 + WEIGHT_RUNS * 20) * 3600 / (6 + WEIGHT_RUNS))
    assert seen.share_available == pytest.approx((48 + WEIGHT_HOURS * 0.9) / (48 + WEIGHT_HOURS))


def price(machine_type: str, location: str) -> tuple[float, float] | None:
    return {"us-central1": (18.98, 82.53), "us-east4": (14.85, 82.53)}.get(location)


def test_a_lone_request_is_placed_by_the_prior_where_the_fleet_has_seen_nothing() -> None:
    request = {
        "custom_job": H100,
        "location": "us-central1",
        "locations": ["us-central1", "us-east4"],
        "deadline": (NOW + timedelta(hours=26)).isoformat(),
        "total_steps": 24,
        "expected_step_seconds": 3600,
    }
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at=NOW.isoformat())
    priors = {
        "us-central1": LocationPrior(0.5, 2.0, 2.0),
        "us-east4": LocationPrior(0.99, 20.0, 0.2),
    }
    placer = Placer(lambda machine_class: [], price, NOW, 720, prior=lambda machine, loc: priors.get(loc))
    placed = placer.place(request, attempt, [])
    assert placed.location == "us-east4" and "the region prior" in placed.reason
    assert placer.spot_outlook(request, "us-east4") is not None
    # without a prior, nothing to weigh: where planned, as before
    unweighed = Placer(lambda machine_class: [], price, NOW, 720).place(request, attempt, [])
    assert (unweighed.location, unweighed.reason) == ("us-central1", "no observations")


def test_production_reads_the_shipped_prior_unless_the_setting_turns_it_off() -> None:
    class Ports:
        def __init__(self, settings: Settings) -> None:
            self.settings, self.ledger = settings, None

        def clock(self) -> datetime:
            return NOW

    assert attempt_placer(Ports(Settings()))._prior is location_prior  # noqa: SLF001
    off = Settings.from_env({"SPOTJOBS_REGION_PRIOR": "false"})
    assert attempt_placer(Ports(off))._prior is no_prior  # noqa: SLF001


def test_a_waiting_job_s_move_weighs_the_mean_run_and_the_changeovers_the_mean_rate() -> None:
    tail = LocationPrior(0.95, 10.0, 0.5, run_survival=((12, 0.5), (24, 1 / 3), (48, 0.0)))
    plain = LocationPrior(0.95, 10.0, 0.5)

    def costed(prior: LocationPrior, **job: object) -> Costed:
        base = {"remaining_hours": 24, "changeover_hours": 0.2, "current_location": "us-central1"}
        return expected_cost(
            Job(**{**base, **job}), Candidate("us-east4", 15.0, 80.0, estimate([], "us-east4", NOW, prior)), Move()
        )

    tight = {"hours_to_deadline": 24 * 1.1}
    assert costed(tail, **tight).spot_share > costed(plain, **tight).spot_share  # the tail keeps it on Spot
    # measured: a waiting job's moves with it went back and forth (docs/placement.md)
    assert costed(tail, waiting=True, **tight) == costed(plain, waiting=True, **tight)
    # without a deadline the changeovers are paid at the mean rate: W / L of them whatever the tail
    assert costed(tail, hour_value=1.0) == costed(plain, hour_value=1.0)
