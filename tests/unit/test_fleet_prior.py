"""The shipped region prior (shared/fleet/prior.py, shared/fleet/region_prior.json): its loader and
provenance, the refresh command that fits it (bench/region_prior.py), the estimate that starts from
it and gives way to the fleet's own observations, and placement weighing it where the fleet has
seen nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench import region_prior
from shared.fleet.estimate import estimate
from shared.fleet.observations import FleetFact, Kind
from shared.fleet.placing import Placer, attempt_placer, no_prior
from shared.fleet.prior import PRIOR_PATH, WEIGHT_HOURS, LocationPrior, location_prior
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
    assert region_prior.fitted([True, True, False, False], 1800) == {
        "share_available": 0.5,
        "mean_run_hours": 1.0,
        "mean_outage_hours": 1.0,
    }


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
    assert seen.mean_lifetime_seconds == pytest.approx((48 + 20) * 3600 / 7)  # the prior: one run of 20 h
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
