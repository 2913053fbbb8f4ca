"""The dated price table (`shared/price_table.json`): hourly Spot and on-demand prices per machine
type and location, with its date and sources. It lives with the requests because validation checks
a request's `max_cost_usd` against it (`shared.requests.budget`), placement weighs it in the
functions (`shared.fleet.placing`) and the operator's reports read the same file
(`spotjobs.reporting.prices`). Written by tools/price_table.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

PRICE_TABLE_PATH = Path(__file__).parents[1] / "price_table.json"
# (Spot, on-demand) per hour of a machine type in a location, None unpriced: `hourly`, or a test's own table.
Price = Callable[[str, str], "tuple[float, float] | None"]


def hourly(machine_type: str, location: str) -> tuple[float, float] | None:
    """(Spot, on-demand) per hour of `machine_type` in `location`; None where the table has no row."""
    row = table()["machine_types"].get(machine_type, {}).get("locations", {}).get(location)
    return None if row is None else (float(row["spot_per_hour"]), float(row["on_demand_per_hour"]))


def layout(request: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(machine type, replicas) of each worker pool of a request's job; empty pools are the API's
    placeholders, no replicas."""
    pools = ((request.get("custom_job") or {}).get("jobSpec") or {}).get("workerPoolSpecs") or []
    return [
        (str((pool.get("machineSpec") or {}).get("machineType") or ""), max(1, int(pool.get("replicaCount") or 0)))
        for pool in pools
        if pool
    ]


def layout_hourly(
    request: Mapping[str, Any],
    location: str,
    price: Price = hourly,
) -> tuple[float, float] | None:
    """(Spot, on-demand) per hour of every replica of every worker pool of a request's job in
    `location`: each replica is a VM of its own, billed on its own. None without a pool, or when
    some pool's machine has no price there (a part of the job priced would understate it)."""
    spot = on_demand = 0.0
    pools = layout(request)
    for machine_type, replicas in pools:
        prices = price(machine_type, location)
        if prices is None:
            return None
        spot += prices[0] * replicas
        on_demand += prices[1] * replicas
    return (spot, on_demand) if pools else None


def machine_types(request: Mapping[str, Any]) -> str:
    """The machine types of a request's worker pools, for a person: "a3-highgpu-8g + 2 x a2-ultragpu-8g"."""
    parts = [(m or "?") if n == 1 else f"{n} x {m or '?'}" for m, n in layout(request)]
    return " + ".join(parts) or "?"


@cache
def table(path: Path = PRICE_TABLE_PATH) -> dict[str, Any]:
    return json.loads(path.read_text())
