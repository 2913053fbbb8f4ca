"""SkyNomad's deadline sweep in the placement bench (bench/skynomad_setup.py, `--setup skynomad`):
its parameters from the artifact, the zones unmerged, the optimum on a tiny trace, and the slack
in changeovers that every table states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bench_placement, skynomad_setup
from bench.bench_placement import Region, Setup, load_regions, omniscient, slack_in_changeovers


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


def test_the_setup_has_the_artifacts_parameters() -> None:
    length = skynomad_setup.WINDOWS * skynomad_setup.DEADLINE_TRACE_TICKS
    regions = [Region(zone, 18.0, 82.0, (True, False) * (length // 2 + 1)) for zone in skynomad_setup.ZONES]
    setup, fleets = skynomad_setup.setup(regions, 600, 1.05)
    assert setup.gap == 120 and setup.hours(setup.deadline_ticks) == pytest.approx(51.8333, abs=1e-4)
    assert setup.hours(setup.changeover_ticks) == pytest.approx(0.2)  # exact, not rounded up to 10 min
    assert setup.hours(setup.work_ticks) == pytest.approx(51.8333 / 1.05, abs=1 / 60)  # job = deadline / ratio
    assert setup.checkpoint_gb == 50.0
    # six windows, one job each, one deadline apart from the traces' start
    assert fleets == [[w * 1555] for w in range(6)]
    # each 10-minute point becomes five 2-minute ticks
    assert setup.regions[0].available[:10] == (True,) * 5 + (False,) * 5
    assert slack_in_changeovers(setup) == pytest.approx((1555 - 1481) / 6)
    assert set(skynomad_setup.PUBLISHED) == set(bench_placement.RATIOS)


def test_its_zones_are_locations_of_their_own(tmp_path: Path) -> None:
    write_zone(tmp_path, "us-central1-a", "us-central1", 18.98, 82.53, [1, 0])
    write_zone(tmp_path, "us-central1-b", "us-central1", 18.98, 82.53, [0, 1])
    write_zone(tmp_path, "us-west1-a", "us-west1", 18.98, 82.53, [0, 0])
    regions, _ = load_regions(tmp_path, zones_only=("us-central1-a", "us-west1-a"))
    assert [(r.name, r.available) for r in regions] == [
        ("us-central1-a", (True, False)),
        ("us-west1-a", (False, False)),
    ]


def test_a_region_can_be_left_out(tmp_path: Path) -> None:
    write_zone(tmp_path, "us-east4-a", "us-east4", 14.85, 82.53, [1, 1])
    write_zone(tmp_path, "us-west1-a", "us-west1", 18.98, 82.53, [0, 1])
    regions, _ = load_regions(tmp_path, exclude=("us-east4",))
    assert [r.name for r in regions] == ["us-west1"]


def tiny_setup(repeat: int) -> Setup:
    """Hourly ticks cut in `repeat`: A has Spot for 2 h at $1/h, then B for 4 h at $3/h; 3 h of
    work, a 6 h deadline, d = 1 h."""
    a = Region("a", 1.0, 10.0, (True, True, False, False, False, False))
    b = Region("b", 3.0, 10.0, (False, False, True, True, True, True))
    fine = skynomad_setup.refine([a, b], 3600, 3600 // repeat)
    return Setup(tuple(fine), 3600 // repeat, 3 * repeat, 6 * repeat, repeat, 50.0)


def test_the_optimum_on_a_tiny_trace() -> None:
    # A: d then 1 h of work ($2); B from hour 2: d then 2 h of work ($9). B alone costs $12,
    # on-demand $40.
    assert omniscient(tiny_setup(1), [0]) == [pytest.approx(11.0)]
    # the finer tick, which keeps d exact, changes nothing where d is whole ticks either way
    assert omniscient(tiny_setup(5), [0]) == [pytest.approx(11.0)]


def test_every_line_states_the_slack_in_changeovers(traces_for_main: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--traces", str(traces_for_main), "--deadline-ratio", "2", "--job-hours", "4", "--fleet", "1"]
    assert bench_placement.main([*argv, "--runs", "2", "--json"]) == 0
    # 4 h of work, 8 h deadline, d rounded up to 2 ticks of 10 min
    assert json.loads(capsys.readouterr().out)["slack_changeovers"] == pytest.approx(12.0)
    assert bench_placement.main([*argv, "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "slack 12.0 changeovers of 0.33 h" in out
    assert "up_best_region: europe-west1" in out  # which region the best single region is


@pytest.fixture
def traces_for_main(tmp_path: Path) -> Path:
    write_zone(tmp_path, "europe-west1-b", "europe-west1", 12.0, 90.0, [1] * 120)
    write_zone(tmp_path, "us-west1-a", "us-west1", 20.0, 80.0, [1, 0] * 60)
    return tmp_path
