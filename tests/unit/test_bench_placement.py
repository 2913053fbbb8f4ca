"""The multi-location simulator (bench/bench_placement.py): its command line and JSON shape, that
it decides with production's functions, what placement does on scripted traces, and the opt-in
paid probes (bench/placement_probes.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bench_placement, placement_probes
from bench.bench_placement import (
    POLICIES,
    Attempt,
    FailoverOrder,
    Fleet,
    Policy,
    Setup,
    Spotjobs,
    load_regions,
    omniscient,
    simulate_fleet,
)
from bench.placement_probes import ProbeLedger, probing
from shared.deciding.deadline import Placement
from shared.fleet.estimate import SpotOutlook, estimate
from shared.fleet.observations import FleetFact, Kind
from shared.fleet.prior import LocationPrior


def write_zone(folder: Path, zone: str, region: str, spot: float, on_demand: float, data: list[int]) -> None:
    body = {
        "metadata": {
            "gap_seconds": 600,
            "zone": zone,
            "region": region,
            "spot_price_per_hour": spot,
            "on_demand_price_per_hour": on_demand,
        },
        "data": data,
    }
    (folder / f"{zone}.json").write_text(json.dumps(body))


# A region prior of short outages: a wait there has an outlook, and the rule holds it.
SHORT_OUTAGES = LocationPrior(0.95, 10.0, 0.5)


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    # us-east4 is the cheapest and never has Spot; europe-west1 always has, for a little more.
    write_zone(tmp_path, "us-east4-a", "us-east4", 10.0, 80.0, [0] * 300)
    write_zone(tmp_path, "europe-west1-b", "europe-west1", 12.0, 90.0, [1] * 300)
    # a region's zones merge: available when any is
    write_zone(tmp_path, "us-west1-a", "us-west1", 20.0, 80.0, [1, 0] * 150)
    write_zone(tmp_path, "us-west1-b", "us-west1", 20.0, 80.0, [0, 1] * 150)
    return tmp_path


def test_zones_of_a_region_are_merged(traces: Path) -> None:
    regions, gap = load_regions(traces)
    assert gap == 600 and [r.name for r in regions] == ["europe-west1", "us-east4", "us-west1"]
    assert all(next(r for r in regions if r.name == "us-west1").available)


def test_json_has_one_object_per_ratio_with_every_policy(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--traces", str(traces), "--deadline-ratio", "1.5", "2", "--job-hours", "4", "--fleet", "2", "--runs", "2"]
    assert bench_placement.main([*argv, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["deadline_ratio"] for line in lines] == [1.5, 2.0]
    for line in lines:
        assert sorted(line["policies"]) == sorted(POLICIES)
        assert all(sorted(row) == ["cost_mean", "misses", "moves"] for row in line["policies"].values())


def test_it_decides_with_production_functions(traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    called: dict[str, int] = {}
    for name in ("decide_deadline", "estimate", "choose_location", "sits_out"):
        real = getattr(bench_placement, name)

        def counting(*args, _real=real, _name=name, **kwargs):  # type: ignore[no-untyped-def]
            called[_name] = called.get(_name, 0) + 1
            return _real(*args, **kwargs)

        assert real.__module__.startswith("shared.")  # production's, imported by the bench
        monkeypatch.setattr(bench_placement, name, counting)
    regions, _ = load_regions(traces)
    # us-east4's prior gives its waits an outlook, so the rule holds one for a move (production's
    # `consider_move` moves a deadline request only then)
    setup = Setup(tuple(regions), 600, 24, 48, 2, 10.0, {"us-east4": SHORT_OUTAGES})
    outlooks: list[object] = []
    real_decide = bench_placement.decide_deadline
    monkeypatch.setattr(
        bench_placement, "decide_deadline", lambda s, rule: outlooks.append(s.spot_outlook) or real_decide(s, rule)
    )
    simulate_fleet(setup, [0, 10], Spotjobs)
    assert called["decide_deadline"] > 0 and called["estimate"] > 0 and called["choose_location"] > 0
    assert called["sits_out"] > 0  # a waiting job's move, as production's `consider_move` weighs it
    # the estimate's outlook, as a claim keeps it in production, reaches the rule
    assert any(isinstance(o, SpotOutlook) for o in outlooks)


def test_placement_leaves_a_region_without_spot_and_today_waits_there(traces: Path) -> None:
    regions, _ = load_regions(traces)
    setup = Setup(tuple(regions), 600, 24, 48, 2, 10.0, {"us-east4": SHORT_OUTAGES})  # an outlook: the rule holds
    placed = simulate_fleet(setup, [0], Spotjobs)[0]
    today = simulate_fleet(setup, [0], FailoverOrder)[0]
    assert not placed.missed and not today.missed
    assert placed.moves == 1 and placed.region == 0  # to europe-west1, where Spot is
    assert placed.egress == 0.0  # moved once its first changeover passed: no checkpoint yet
    assert today.moves == 0  # never preempted, so never a stockout: it waits, then on-demand
    best = omniscient(setup, [0])[0]
    assert best <= placed.cost < today.cost
    assert best == pytest.approx(12.0 * (24 + 2) / 6)  # Spot in europe-west1 throughout


def test_a_new_spot_attempt_is_on_spot_within_its_changeover_as_in_production(tmp_path: Path) -> None:
    # No capacity for the first tick, then always: production counts the queued job as on Spot
    # within its changeover (`deadline_situation`), so the rule cannot leave it for on-demand then.
    write_zone(tmp_path, "us-east4-a", "us-east4", 10.0, 80.0, [0] + [1] * 299)
    regions, _ = load_regions(tmp_path)
    setup = Setup(tuple(regions), 600, 24, 29, 2, 0.0)  # 5 ticks of slack: behind the line at once
    [job] = simulate_fleet(setup, [0], bench_placement.Policy)  # Uniform Progress, pinned
    assert not job.missed and job.cost == pytest.approx(10.0 * (24 + 2) / 6)  # Spot throughout
    seen = bench_placement.situation(setup, bench_placement.Attempt(start=0, region=0), 1, None)
    assert seen.placement is Placement.ON_SPOT  # within its changeover
    later = bench_placement.situation(setup, bench_placement.Attempt(start=0, region=0), 2, None)
    assert later.placement is Placement.WAITING_FOR_SPOT


def test_a_move_with_a_checkpoint_pays_its_transfer(traces: Path) -> None:
    regions, _ = load_regions(traces)  # europe-west1, us-east4, us-west1
    setup = Setup(tuple(regions), 600, 24, 48, 2, 10.0)
    job = bench_placement.Attempt(start=0, region=1, done=5)
    bench_placement._move(job, setup, 2)  # us-east4 -> us-west1: one continent
    bench_placement._move(job, setup, 0)  # -> europe-west1: another
    assert (job.moves, job.region) == (2, 0)
    assert job.egress == pytest.approx(10.0 * 0.02 + 10.0 * 0.08)
    fresh = bench_placement.Attempt(start=0, region=1)
    bench_placement._move(fresh, setup, 0)
    assert fresh.egress == 0.0  # nothing to move before any work is committed


@pytest.fixture
def unprobed(tmp_path: Path) -> Path:
    # us-east4 is the cheapest and always has Spot; each other region has a probe to tell.
    write_zone(tmp_path, "us-east4-a", "us-east4", 10.0, 80.0, [1] * 300)
    write_zone(tmp_path, "asia-southeast1-b", "asia-southeast1", 11.0, 90.0, [1] * 300)  # runs its length
    write_zone(tmp_path, "europe-west1-b", "europe-west1", 12.0, 90.0, [0] + [1] * 3 + [0] * 296)  # preempted
    write_zone(tmp_path, "us-west1-a", "us-west1", 13.0, 90.0, [0] * 300)  # never gets capacity
    return tmp_path


def probed_run(folder: Path) -> tuple[Setup, Attempt, ProbeLedger, list[FleetFact]]:
    """One request whose deadline leaves no slack: its expected cost in us-east4 is on-demand's, so
    Spot anywhere else could beat it."""
    regions, _ = load_regions(folder)
    setup = Setup(tuple(regions), 600, 12, 16, 2, 0.0)
    ledger = ProbeLedger()
    made: list[Policy] = []

    def policy(setup: Setup, fleet: Fleet) -> Policy:
        made.append(probing(ledger)(setup, fleet))
        return made[0]

    [job] = simulate_fleet(setup, [0], policy)
    assert not job.missed and regions[job.region].name == "us-east4"
    return setup, job, ledger, made[0].fleet.observations


def test_probes_observe_regions_the_fleet_never_ran_in_and_are_billed(
    unprobed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(placement_probes, "PROBES_PER_REQUEST", 3)
    setup, job, ledger, facts = probed_run(unprobed)

    def kinds(region: str) -> list[tuple[Kind, float]]:
        return [(o.kind, o.seconds) for o in facts if o.location == region]

    # created at tick 1, once the fleet's job had run in us-east4 for a tick
    assert kinds("asia-southeast1") == [(Kind.WAITING, 0), (Kind.WAIT, 0), (Kind.RUN, 8 * 600)]  # d + 1 h
    assert kinds("europe-west1") == [(Kind.WAITING, 0), (Kind.WAIT, 0), (Kind.PREEMPT, 0), (Kind.RUN, 3 * 600)]
    assert kinds("us-west1") == [(Kind.WAITING, 0), (Kind.NO_CAPACITY, 3600)]  # cancelled after an hour
    seen = estimate(facts, "asia-southeast1", bench_placement.at(16, setup))
    assert seen.mean_lifetime_seconds == 8 * 600 and seen.lifetime_censored  # the estimate learned it
    assert ledger.probes == 3
    assert ledger.cost == pytest.approx((11.0 * 8 + 12.0 * 3) / 6)  # whole ticks with capacity, none waiting
    # counted in the policy's cost, and as creates
    row = bench_placement._probed_row(setup, [[0]])
    assert row.cost_mean == pytest.approx(job.cost + ledger.cost)
    assert (row.probes, row.probe_cost, row.creates) == (3, pytest.approx(ledger.cost), job.number + 3)
    plain = simulate_fleet(setup, [0], Spotjobs)[0]
    assert plain.cost == job.cost  # the probes changed nothing for this job, and billed it nothing


def test_the_probe_budget_goes_to_the_cheapest_spot_first(unprobed: Path) -> None:
    _, _, ledger, facts = probed_run(unprobed)  # one request: one probe
    assert ledger.probes == 1
    assert {o.location for o in facts} == {"us-east4", "asia-southeast1"}


def test_probes_are_opt_in_and_reported(unprobed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--traces", str(unprobed), "--deadline-ratio", "1.5", "--job-hours", "2", "--fleet", "2", "--runs", "1"]
    assert bench_placement.main([*argv, "--json"]) == 0
    assert "spotjobs_probes" not in json.loads(capsys.readouterr().out)["policies"]
    assert bench_placement.main([*argv, "--json", "--probes"]) == 0
    row = json.loads(capsys.readouterr().out)["policies"]["spotjobs_probes"]
    assert sorted(row) == ["cost_mean", "misses", "moves", "probe_cost", "probes"]
    assert row["probes"] > 0 and row["probe_cost"] > 0
    assert bench_placement.main([*argv, "--probes"]) == 0
    assert "probes / job" in capsys.readouterr().out


def test_a_waiting_move_needs_the_rule_to_spare_its_changeover_as_in_production() -> None:
    # Production moves a deadline request only while the rule holds its wait by more than a
    # changeover (`consider_move`: the rule decides nothing during the hand-over); the bench's
    # waiting move asks the same, also for a job preempted often lately.
    cheap_bursty = bench_placement.Region("us-east4", 10.0, 80.0, (False,) * 60)
    steady = bench_placement.Region("asia-southeast1", 5.0, 80.0, (True,) * 60)

    def moved(deadline_ticks: int) -> int | None:
        setup = Setup((cheap_bursty, steady), 600, 24, deadline_ticks, 2, 0.0)
        job = Attempt(0, 0, placed=9, done=8, preempted=[7, 9], ran=True, outlook=SpotOutlook(0.99, 36000.0))
        return Spotjobs(setup, Fleet()).waiting_move(job, 10)

    assert moved(37) == 1  # 2 changeovers of slack beyond the net: the rule holds the wait 1400 s
    assert moved(35) is None  # 1 changeover beyond it: the move's changeover would come out of the net
