"""A stray's part of the request's bill at its edges (the twelfth mutation pass): its on-demand
figure (what the saving is measured against), a stray that never ran (nothing to price, whatever
its machines), and an unpriced stray named by its machine."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.fleet.spend import attempts_spend
from shared.ledger.records import Stray
from shared.requests.pricing import hourly

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
A100 = [{"machineSpec": {"machineType": "a2-highgpu-1g"}, "replicaCount": 1}]


def stray(pools: list, started_at: str | None = "2026-12-01T10:00:00.000Z", attempt: int | None = 1) -> Stray:
    """Read running at 11:00, started at 10:00 (an hour vouched for)."""
    return Stray(
        "projects/p/locations/us-central1/customJobs/9",
        attempt,
        "us-central1",
        "SPOT",
        pools,
        seen_until="2026-12-01T11:00:00.000Z",
        started_at=started_at,
    )


def test_a_spot_strays_hour_is_measured_against_the_same_hour_on_demand() -> None:
    spot, on_demand = hourly("a2-highgpu-1g", "us-central1") or (0.0, 0.0)
    assert spot < on_demand
    spend = attempts_spend({}, [], NOW, strays=[stray(A100)])
    assert spend.usd == pytest.approx(spot) and spend.on_demand_usd == pytest.approx(on_demand)
    assert spend.saving_usd == pytest.approx(on_demand - spot)


def test_a_stray_that_never_ran_costs_nothing_even_where_it_cannot_be_priced() -> None:
    spend = attempts_spend({}, [], NOW, strays=[stray([], started_at=None, attempt=None)])
    assert spend.known and spend.usd == 0.0 and spend.unpriced == ()


def test_a_stray_on_a_machine_the_table_does_not_price_names_that_machine() -> None:
    unknown = [{"machineSpec": {"machineType": "zz-unpriced-1"}, "replicaCount": 1}]
    spend = attempts_spend({}, [], NOW, strays=[stray(unknown)])
    assert spend.usd is None and spend.unpriced == ("zz-unpriced-1 in us-central1",)


def test_a_stray_read_at_its_start_instant_vouches_for_no_run() -> None:
    at_start = stray(A100, started_at="2026-12-01T11:00:00.000Z")
    spend = attempts_spend({}, [], NOW, strays=[at_start])
    assert spend.usd == 0.0 and spend.run_seconds == 0.0


def test_every_stray_is_on_the_bill_after_one_that_never_ran_or_cannot_be_priced() -> None:
    spot, _ = hourly("a2-highgpu-1g", "us-central1") or (0.0, 0.0)
    never_ran = stray([], started_at=None, attempt=None)
    assert attempts_spend({}, [], NOW, strays=[never_ran, stray(A100)]).usd == pytest.approx(spot)
    unpriced = [stray([{"machineSpec": {"machineType": f"zz-unpriced-{n}"}, "replicaCount": 1}]) for n in (1, 2)]
    assert attempts_spend({}, [], NOW, strays=unpriced).unpriced == (
        "zz-unpriced-1 in us-central1",
        "zz-unpriced-2 in us-central1",
    )


def test_a_strays_second_is_on_the_bill() -> None:
    spot, _ = hourly("a2-highgpu-1g", "us-central1") or (0.0, 0.0)
    a_second = stray(A100, started_at="2026-12-01T10:59:59.000Z")
    assert attempts_spend({}, [], NOW, strays=[a_second]).usd == pytest.approx(spot / 3600)


def test_a_stray_on_demand_is_billed_at_the_on_demand_price() -> None:
    _, on_demand = hourly("a2-highgpu-1g", "us-central1") or (0.0, 0.0)
    standard = stray(A100)
    standard.strategy = "STANDARD"
    spend = attempts_spend({}, [], NOW, strays=[standard])
    assert spend.usd == pytest.approx(on_demand) and spend.saving_usd == pytest.approx(0.0)
