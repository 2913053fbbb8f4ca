"""The dated price table (`shared/price_table.json`): hourly on-demand and Spot prices per machine type
and location, used to estimate what requests cost on Spot and would have cost on demand.

One copy, shipped with `shared/` as package data (placement weighs it in the functions), so
`spotjobs report` works from an installed package and the demo (`devstack/demo/cost.py`) reads
the same table. Prices change (Spot prices up to once a day): the table carries its date and source, and every report quotes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.requests.pricing import PRICE_TABLE_PATH, table

PRICES_PATH = PRICE_TABLE_PATH
DEFAULT_MACHINE_TYPE = "a2-highgpu-1g"
DEFAULT_LOCATION = "us-central1"


@dataclass(frozen=True)
class Prices:
    """The hourly prices of one machine type in one location."""

    machine_type: str
    location: str
    on_demand_per_hour: float
    spot_per_hour: float
    as_of: str
    source: str
    caveat: str

    @classmethod
    def load(
        cls,
        machine_type: str = DEFAULT_MACHINE_TYPE,
        location: str = DEFAULT_LOCATION,
        path: Path = PRICES_PATH,
    ) -> Prices:
        """The row for `machine_type` in `location`; KeyError when the table has none."""
        data = table(path)
        machine = data["machine_types"][machine_type]
        row = machine["locations"][location]
        source = machine.get("source", data["source"])  # a machine type may have its own source and date
        return cls(
            machine_type=machine_type,
            location=location,
            on_demand_per_hour=float(row["on_demand_per_hour"]),
            spot_per_hour=float(row["spot_per_hour"]),
            as_of=machine.get("as_of", data["as_of"]),
            source=source["name"],
            caveat=source["caveat"],
        )

    @classmethod
    def find(cls, machine_type: str, location: str, path: Path = PRICES_PATH) -> Prices | None:
        """The row, or None when the table does not price that machine type there."""
        try:
            return cls.load(machine_type, location, path)
        except KeyError:
            return None

    def per_hour(self, strategy: str) -> float:
        """What an hour costs under a Vertex scheduling strategy (Spot, else on demand)."""
        return self.spot_per_hour if strategy == "SPOT" else self.on_demand_per_hour


def table_info(path: Path = PRICES_PATH) -> dict[str, Any]:
    """The table's currency, date and source, for a report's footnote."""
    data = table(path)
    return {"currency": data.get("currency", "USD"), "as_of": data["as_of"], **data["source"]}
