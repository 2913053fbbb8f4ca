"""`spotjobs fleet [--json]`: where Spot lives, as the fleet's own jobs saw it.

Per machine class (machine type, accelerators) and location, from the observations of the last
week in the state bucket (shared/fleet): the estimate that Spot has capacity now and how sure it
is (the weight of the evidence: about one per fresh observation), the mean Spot lifetime of one VM (time
on Spot in VM-seconds per VM reclaimed; ">=" when none was seen), the median wait for Spot capacity, the 90th
percentile of on-demand changeovers, the open waits, and the hourly Spot and on-demand prices of
the price table (shared/price_table.json) where it has the machine type there.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from spotjobs.cli.common import EXIT_OK, command, terminal_text


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = command(
        subparsers,
        "fleet",
        help="where Spot has capacity: per machine class and location, what the fleet's jobs saw",
        description=__doc__.split("\n\n", 1)[1],
        examples=["spotjobs fleet", "spotjobs fleet --json | jq '.[] | select(.has_capacity)'"],
    )
    parser.add_argument("--json", action="store_true", help="one JSON array, a row per class and location")
    parser.add_argument("--project", help="Google Cloud project (default: GOOGLE_CLOUD_PROJECT)")
    parser.set_defaults(run=run_fleet)


def run_fleet(args: argparse.Namespace) -> int:
    from google.cloud import storage

    from shared.clock import utcnow
    from shared.requests.pricing import hourly
    from shared.settings import get_settings

    settings = get_settings()
    bucket = storage.Client(project=args.project or settings.project).bucket(settings.state_bucket)
    now = utcnow()
    rows = fleet_rows(observed_fleet(bucket, now), now, hourly)
    print(json.dumps(rows, indent=2) if args.json else render(rows))
    return EXIT_OK


def observed_fleet(bucket: Any, now: datetime) -> dict[Any, list[Any]]:
    """Every machine class's observations of the estimate's window, from the state bucket."""
    from shared.fleet import store

    return {machine_class: store.read(bucket, machine_class, now) for machine_class in store.classes(bucket)}


def fleet_rows(
    observed: Mapping[Any, Sequence[Any]],
    now: datetime,
    price: Callable[[str, str], tuple[float, float] | None],
) -> list[dict[str, Any]]:
    """One row per class and location with observations."""
    from shared.fleet.estimate import estimates

    rows = []
    for machine_class, observations in sorted(observed.items()):
        for location, found in estimates(observations, now).items():
            prices = price(machine_class.machine_type, location)
            rows.append(
                {
                    "machine_type": machine_class.machine_type,
                    "accelerator_type": machine_class.accelerator_type,
                    "accelerator_count": machine_class.accelerator_count,
                    **found.to_json(),
                    "spot_per_hour": prices[0] if prices else None,
                    "on_demand_per_hour": prices[1] if prices else None,
                }
            )
    return rows


FLEET_HEADER = (
    "class",
    "location",
    "capacity now",
    "sure",
    "mean lifetime",
    "median wait",
    "changeover p90",
    "$/h spot",
    "$/h on-demand",
)


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return "no fleet observations in the last week"
    header = FLEET_HEADER
    lines = [header, *(row_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)


def row_cells(row: Mapping[str, Any]) -> tuple[str, ...]:
    """A row's cells as `render` shows them (the dashboard's Fleet page too)."""
    klass = f"{row['machine_type']} {row['accelerator_count']}x{row['accelerator_type'] or '-'}"
    capacity = {True: "yes", False: "no", None: "unknown"}[row["has_capacity"]]
    lifetime = _hours(row["mean_lifetime_seconds"])
    if row["lifetime_censored"] and row["mean_lifetime_seconds"] is not None:
        lifetime = f">={lifetime}"
    return (
        terminal_text(klass),
        terminal_text(row["location"]),
        f"{capacity} ({row['available']:.2f})",
        f"{row['sure']:.1f}",
        lifetime,
        _minutes(row["median_wait_seconds"]),
        _minutes(row["changeover_p90_seconds"]),
        _price(row["spot_per_hour"]),
        _price(row["on_demand_per_hour"]),
    )


def _price(per_hour: float | None) -> str:
    return "-" if per_hour is None else f"{per_hour:.2f}"


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.1f} h"


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.0f} min"
