"""The price table's generator (tools/price_table.py) over an excerpt of the public catalogue
(tests/fixtures/pricing_excerpt.yml), and the table it wrote (shared/price_table.json)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from shared.requests.pricing import PRICE_TABLE_PATH, hourly
from tools.price_table import TRAINING_MACHINE_TYPES, build_table, main, read_generated, read_instances

EXCERPT = Path(__file__).parents[1] / "fixtures" / "pricing_excerpt.yml"


def excerpt_table(previous: dict | None = None) -> dict:
    lines = EXCERPT.read_text().splitlines()
    return build_table(
        read_instances(lines), as_of="2026-07-30", generated=read_generated(lines), commit="fd66b26", previous=previous
    )


def test_the_generator_reads_spot_and_on_demand_per_region_of_training_machine_types_only() -> None:
    table = excerpt_table()
    assert table["machine_types"]["a2-highgpu-1g"] == {
        "accelerator": "1 x a100",
        "locations": {
            "europe-west4": {"on_demand_per_hour": 3.747972, "spot_per_hour": 1.692835},
            "us-central1": {"on_demand_per_hour": 3.673385, "spot_per_hour": 1.92802},
        },
    }
    assert table["machine_types"]["a3-megagpu-8g"]["accelerator"] == "8 x h100-80gb-mega"
    assert table["machine_types"]["g2-standard-4"]["locations"]["us-central1"]["spot_per_hour"] == 0.397336
    assert "e2-standard-2" not in table["machine_types"]  # no GPU: Vertex trains GPU jobs on the others
    assert (
        table["machine_types"]["a2-highgpu-1g"]["locations"]["us-central1"]["on_demand_per_hour"] != 0.1296
    )  # licence


def test_the_table_is_dated_and_cites_the_catalogue_commit_and_says_the_vertex_fee_is_unknown() -> None:
    table = excerpt_table()
    assert table["as_of"] == "2026-07-30"
    assert "fd66b26" in table["source"]["url"] and "Thu Jul 30 06:13:17 2026" in table["source"]["name"]
    assert table["management_fee"]["status"] == "unknown"
    assert table["management_fee"]["page"] == "https://cloud.google.com/vertex-ai/pricing"


def test_a_region_with_only_one_of_the_two_prices_is_left_out_not_guessed() -> None:
    lines = EXCERPT.read_text().splitlines()
    instances = read_instances(lines)
    instances["g2-standard-4"]["cost"]["northamerica-south1"] = {"hour_spot": 0.2}
    table = build_table(instances, as_of="2026-07-30", generated="x", commit="c")
    assert "northamerica-south1" not in table["machine_types"]["g2-standard-4"]["locations"]


def test_an_entry_with_its_own_source_is_kept_exactly() -> None:
    skynomad = {
        "source": {"name": "skynomad"},
        "as_of": "2025-10-04",
        "locations": {"us-east4": {"spot_per_hour": 1.0}},
    }
    table = excerpt_table(previous={"machine_types": {"a3-megagpu-8g": skynomad, "a2-highgpu-1g": {"locations": {}}}})
    assert table["machine_types"]["a3-megagpu-8g"] == skynomad
    assert table["machine_types"]["a2-highgpu-1g"]["locations"]  # no own source: regenerated


def test_the_command_writes_the_table(tmp_path: Path) -> None:
    out = tmp_path / "price_table.json"
    assert main([str(EXCERPT), "--commit", "fd66b26", "--as-of", "2026-07-30", "--out", str(out)]) == 0
    assert set(json.loads(out.read_text())["machine_types"]) == {"a2-highgpu-1g", "a3-megagpu-8g", "g2-standard-4"}


def test_the_table_in_the_repo_prices_every_catalogued_training_type_and_keeps_the_skynomad_h100() -> None:
    table = json.loads(PRICE_TABLE_PATH.read_text())
    for name in ("a2-highgpu-8g", "a2-ultragpu-8g", "a3-highgpu-1g", "a3-megagpu-8g", "g2-standard-96"):
        assert name in table["machine_types"] and name in TRAINING_MACHINE_TYPES
    assert hourly("a3-highgpu-8g", "us-east4") == (14.8534, 82.5254)
    assert table["management_fee"]["status"] == "unknown"


def test_the_table_loads_fast_enough_for_a_cold_start() -> None:
    started = time.perf_counter()
    json.loads(PRICE_TABLE_PATH.read_text())
    assert time.perf_counter() - started < 0.05  # measured about 2 ms; the functions load it once
