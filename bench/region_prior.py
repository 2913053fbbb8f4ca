"""Fit the region prior the functions ship (`shared/fleet/region_prior.json`) from Spot traces.

    python -m bench.region_prior [--traces DIR] [--hours 168] [--out shared/fleet/region_prior.json]

Reads the traces as the placement bench does (`bench.bench_placement.load_regions`: one zone a
file, a region available when any of its zones is) and keeps only their first `--hours` (168: the
first week), so a bench run on the starts after them (`--starts-after 168`) judges the prior out of
sample. Per machine type and location (each region merged, and each zone alone for the
like-for-like bench) it writes the share of ticks with capacity, the mean run of available ticks
and the mean outage, in hours, the run survival (`survival` at `SURVIVAL_HOURS`), with the traces' source, the window fitted and the date: the
refresh command for a newer trace."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.bench_placement import DEFAULT_TRACES, load_regions
from shared.fleet.prior import PRIOR_PATH

SOURCE = (
    "bench/traces/gcp-h100 (GCP H100 Spot availability, 13 zones, 2025-10-04 + 14.7 days), converted from "
    "andylizf/skynomad-artifact commit 62b9aaa, data/converted_multi_region_aligned_h100_16_merged.tar.gz "
    "(Apache-2.0)"
)


# The horizons of `run_survival`, in hours: a tight deadline's job runs a day or two of work.
SURVIVAL_HOURS = (1, 2, 4, 8, 12, 24, 48, 96)


def runs(available: Sequence[bool]) -> tuple[list[int], list[int]]:
    """The lengths in ticks of the runs with capacity and of the outages."""
    up: list[int] = []
    down: list[int] = []
    length = 0
    for k, value in enumerate(available):
        length += 1
        if k + 1 == len(available) or available[k + 1] != value:
            (up if value else down).append(length)
            length = 0
    return up, down


def fitted(available: Sequence[bool], gap: int) -> dict[str, object]:
    up, down = runs(available)
    hours = gap / 3600
    return {
        "share_available": round(sum(available) / max(1, len(available)), 4),
        # A trace with no outage (or no run) bounds the mean by its length: a censored run.
        "mean_run_hours": round(sum(up) / max(1, len(up)) * hours, 2),
        "mean_outage_hours": round(sum(down) / max(1, len(down)) * hours, 2),
        "run_survival": {f"{h:g}": survival(up, h * 3600 / gap) for h in SURVIVAL_HOURS},
    }


def survival(up: Sequence[int], ticks: float) -> float:
    """The share of the ticks with capacity from which capacity lasts at least `ticks` more: a run
    of n ticks gives n - ticks of them (a job started at a random moment with capacity sees the
    long runs more often than their count says)."""
    return round(sum(max(0.0, n - ticks) for n in up) / max(1, sum(up)), 4)


def fit(traces: Path, hours: float) -> dict[str, object]:
    regions, gap = load_regions(traces)
    zone_names = sorted({p.stem for p in traces.rglob("*.json")})
    zones, _ = load_regions(traces, zones_only=zone_names)
    ticks = round(hours * 3600 / gap)
    meta = json.loads(next(iter(sorted(traces.rglob("*.json")))).read_text())["metadata"]
    began = datetime.fromisoformat(meta["start_time"]).astimezone(UTC)
    return {
        "_comment": "What placement assumes of Spot in a location before the fleet has run there "
        "(shared/fleet/prior.py); refresh with `python -m bench.region_prior`.",
        "fitted_at": datetime.now(UTC).date().isoformat(),
        "source": SOURCE,
        "window": {"from": began.isoformat(), "to": (began + timedelta(hours=hours)).isoformat(), "hours": hours},
        "machine_types": {
            meta["machine_type"]: {
                "locations": {r.name: fitted(r.available[:ticks], gap) for r in regions},
                "zones": {z.name: fitted(z.available[:ticks], gap) for z in zones},
            }
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.region_prior", description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--hours", type=float, default=168.0, help="fit on the traces' first hours (default 168)")
    parser.add_argument("--out", type=Path, default=PRIOR_PATH)
    args = parser.parse_args(argv)
    args.out.write_text(json.dumps(fit(args.traces, args.hours), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
