"""The dated price table (`shared/price_table.json`): hourly Spot and on-demand prices per machine
type and location, with its date and sources. It lives in `shared/` because placement weighs it in
the functions (`shared.fleet.placing`); the operator's reports read the same file
(`spotjobs.reporting.prices`)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

PRICE_TABLE_PATH = Path(__file__).parents[1] / "price_table.json"


def hourly(machine_type: str, location: str) -> tuple[float, float] | None:
    """(Spot, on-demand) per hour of `machine_type` in `location`; None where the table has no row."""
    row = table()["machine_types"].get(machine_type, {}).get("locations", {}).get(location)
    return None if row is None else (float(row["spot_per_hour"]), float(row["on_demand_per_hour"]))


@cache
def table(path: Path = PRICE_TABLE_PATH) -> dict[str, Any]:
    return json.loads(path.read_text())
