"""The region prior: what placement assumes of Spot in a location before the fleet has run there.

`shared/fleet/region_prior.json` ships with the functions: per machine type and location, the
share of the time Spot had capacity, its mean run and its mean outage, and how long runs last (the
share of the time with capacity from which it lasts h hours more, at a few h), fitted on the first week of
public Spot traces (its `source`, `window` and `fitted_at` say which; `python -m
bench.region_prior` refreshes it). `estimate(..., prior=)` starts from it instead of 1/2 and no
lifetime, weighted as `WEIGHT_HOURS` of time seen and `WEIGHT_RUNS` runs, so the fleet's own
observations outweigh it within hours of running there. The traces' runs are far from exponential
(many short ones, a few of days), so a job of W hours meets the prior's run at `run_hours_over(W)`:
the mean of the exponential that is cut within W as often as the runs were. A location or machine type it does not
list has no prior (the estimate's 1/2). Zones (`zones`) are there for the like-for-like bench
only: Vertex places a job in a region."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

PRIOR_PATH = Path(__file__).with_name("region_prior.json")
# As few hours as this: the prior ranks locations the fleet has not seen, and gives way to what it
# sees (measured against 24 h: docs/placement.md, "A region prior").
WEIGHT_HOURS = 6.0
# One and a half runs: one short run of the fleet's own no longer halves a region's lifetime (a job
# preempted within its first hour sent a whole fleet's later jobs elsewhere), and the fleet's runs
# still outweigh it within a few (measured: docs/placement.md, "Robust placement", fourth pass).
WEIGHT_RUNS = 1.5


@dataclass(frozen=True)
class LocationPrior:
    share_available: float
    mean_run_hours: float
    mean_outage_hours: float
    weight_hours: float = WEIGHT_HOURS
    weight_runs: float = WEIGHT_RUNS
    # (h, the share of the time with capacity from which it lasts at least h hours more), h rising.
    run_survival: Sequence[tuple[float, float]] = ()

    def run_hours_over(self, hours: float) -> float:
        """The mean run of the exponential that outlasts `hours` from a moment with capacity as
        often as the traces' runs did: -h / ln(survival) at each horizon h of `run_survival` (the
        mean run where no run that long was seen), linear in `hours` between them from the mean run
        at 0, the last horizon's beyond it. Without `run_survival`, the mean run."""
        previous_hours, previous_run = 0.0, self.mean_run_hours
        for horizon, survival in self.run_survival:
            run = -horizon / math.log(survival) if 0 < survival < 1 else self.mean_run_hours
            if hours <= horizon:
                part = max(0.0, hours - previous_hours) / max(horizon - previous_hours, 1e-9)
                return previous_run + part * (run - previous_run)
            previous_hours, previous_run = horizon, run
        return previous_run


def location_prior(machine_type: str, location: str, path: Path = PRIOR_PATH) -> LocationPrior | None:
    """The prior of `machine_type` in `location` (a region, or a zone); None where none is shipped."""
    rows = _table(path).get("machine_types", {}).get(machine_type, {})
    row = rows.get("locations", {}).get(location) or rows.get("zones", {}).get(location)
    if row is None:
        return None
    return LocationPrior(
        float(row["share_available"]),
        float(row["mean_run_hours"]),
        float(row["mean_outage_hours"]),
        run_survival=tuple(sorted((float(h), float(s)) for h, s in (row.get("run_survival") or {}).items())),
    )


@cache
def _table(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}
