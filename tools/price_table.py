"""Writes `shared/price_table.json` from a `pricing.yml` of Cyclenerd/google-cloud-pricing-cost-calculator
(generated from Google's Cloud Billing Catalog): hourly Spot and on-demand prices of every GPU
machine type Vertex AI custom training runs on, in every region the catalogue prices both.

    python -m tools.price_table PRICING_YML --commit SHA [--out shared/price_table.json]

Only `compute.instance.<machine>.cost.<region>.hour|hour_spot` and the accelerator count are read,
with a reader of that block's plain indented `key: value` lines (the file is generated, and a YAML
library is no dependency of the project). A machine type the table already prices from another
source (its own `source`, e.g. a3-highgpu-8g from the SkyNomad artifact, which the placement bench
replays) is kept exactly as it is.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

CATALOGUE_URL = "https://github.com/Cyclenerd/google-cloud-pricing-cost-calculator"
VERTEX_PRICING_PAGE = "https://cloud.google.com/vertex-ai/pricing"
# The GPU machine types Vertex AI custom training accepts (A2, A3, G2); a type the catalogue does
# not price (a3-ultragpu-8g, a3-edgegpu-8g in the file read) is simply absent from the table.
TRAINING_MACHINE_TYPES = (
    *(f"a2-highgpu-{n}g" for n in (1, 2, 4, 8)),
    "a2-megagpu-16g",
    *(f"a2-ultragpu-{n}g" for n in (1, 2, 4, 8)),
    *(f"a3-highgpu-{n}g" for n in (1, 2, 4, 8)),
    "a3-megagpu-8g",
    "a3-ultragpu-8g",
    "a3-edgegpu-8g",
    *(f"g2-standard-{n}" for n in (4, 8, 12, 16, 24, 32, 48, 96)),
)
NOT_ACCELERATORS = {"cost", "cpu", "ram", "local-ssd"}
_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?: (?P<value>.*))?$")


def read_instances(lines: Iterable[str]) -> dict[str, dict[str, Any]]:
    """`compute.instance` of a pricing.yml: machine type -> its scalar fields and `cost` per region."""
    instances: dict[str, dict[str, Any]] = {}
    path: list[tuple[int, str]] = []
    for line in lines:
        match = _LINE.match(line.rstrip("\n"))
        if not match:
            continue
        indent, key, value = len(match["indent"]), match["key"], match["value"]
        while path and path[-1][0] >= indent:
            path.pop()
        keys = [k for _, k in path]
        if keys[:2] == ["compute", "instance"] and value not in (None, ""):
            machine = instances.setdefault(keys[2], {"cost": {}}) if len(keys) > 2 else None
            if machine is not None and len(keys) == 3:
                machine[key] = value
            elif machine is not None and len(keys) == 5 and keys[3] == "cost":
                machine["cost"].setdefault(keys[4], {})[key] = float(value)
        if value in (None, ""):
            path.append((indent, key))
    return instances


def read_generated(lines: Iterable[str]) -> str:
    """The catalogue's `about.generated` line, as written ("Thu Jul 30 06:13:17 2026")."""
    for line in lines:
        if line.strip().startswith("generated:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def accelerator(fields: Mapping[str, Any]) -> str:
    """ "8 x h100-80gb" from the catalogue's count field; "?" when it names none."""
    found = [f"{value} x {key}" for key, value in fields.items() if key not in NOT_ACCELERATORS]
    return ", ".join(found) or "?"


def build_table(
    instances: Mapping[str, Mapping[str, Any]],
    *,
    as_of: str,
    generated: str,
    commit: str,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The price table: every training machine type the catalogue prices, each region where it
    has both a Spot and an on-demand price (a region with one of them only is left out, not
    guessed). Entries of `previous` with their own source are kept as they were."""
    kept = {
        name: entry
        for name, entry in ((previous or {}).get("machine_types") or {}).items()
        if isinstance(entry, Mapping) and "source" in entry
    }
    machine_types: dict[str, Any] = {}
    for name in TRAINING_MACHINE_TYPES:
        if name in kept:
            machine_types[name] = kept[name]
            continue
        fields = instances.get(name)
        if not fields:
            continue
        locations = {
            region: {"on_demand_per_hour": row["hour"], "spot_per_hour": row["hour_spot"]}
            for region, row in sorted(fields["cost"].items())
            if "hour" in row and "hour_spot" in row
        }
        if locations:
            machine_types[name] = {"accelerator": accelerator(fields), "locations": locations}
    return {
        "_comment": (
            "Hourly list prices of the GPU machine types Vertex AI custom training runs on, per region. "
            "Written by tools/price_table.py; prices change (Spot prices up to once a day): regenerate before quoting them."
        ),
        "currency": "USD",
        "as_of": as_of,
        "source": {
            "name": (
                f"Cyclenerd/google-cloud-pricing-cost-calculator, pricing.yml at commit {commit} "
                f"(generated {generated} from the Cloud Billing Catalog API), compute.instance.<type>.cost.<region>"
            ),
            "url": f"{CATALOGUE_URL}/blob/{commit}/pricing.yml",
            "official_pages": [
                "https://cloud.google.com/compute/gpus-pricing",
                "https://cloud.google.com/spot-vms/pricing",
                VERTEX_PRICING_PAGE,
            ],
            "caveat": (
                "Compute Engine prices of the VM with its GPUs. Vertex AI custom training adds its own "
                "charge on top (see management_fee): these figures are a floor, not the bill."
            ),
        },
        "management_fee": {
            "status": "unknown",
            "page": VERTEX_PRICING_PAGE,
            "note": (
                "Vertex AI bills custom training above the Compute Engine price of its machines, but no per-machine "
                "figure of that fee could be read from Google's page when this table was written: every cost "
                "computed from this table says the fee is not included, it is never counted as zero."
            ),
        },
        "machine_types": machine_types,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pricing_yml", type=Path)
    parser.add_argument("--commit", required=True, help="the catalogue commit the file is from")
    parser.add_argument("--as-of", required=True, help="the date the catalogue was generated (YYYY-MM-DD)")
    parser.add_argument("--out", type=Path, default=Path("shared/price_table.json"))
    args = parser.parse_args(argv)
    text = args.pricing_yml.read_text().splitlines()
    previous = json.loads(args.out.read_text()) if args.out.exists() else None
    table = build_table(
        read_instances(text), as_of=args.as_of, generated=read_generated(text), commit=args.commit, previous=previous
    )
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
