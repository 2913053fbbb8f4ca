"""Prices of a multi-replica request (issue 44): placement, the cost figures and the fleet price
every replica of every worker pool, not one machine of pool 0."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from shared.fleet.observations import FleetFact, Kind
from shared.fleet.placing import Placer
from shared.ledger.records import Attempt
from shared.requests.pricing import layout_hourly

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
H100 = {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8}
A100 = {"machineType": "a2-ultragpu-8g", "acceleratorType": "NVIDIA_A100_80GB", "acceleratorCount": 8}
# (Spot, on-demand) per hour of one machine: pool 0's machine is cheaper in us-east4, pool 1's in
# us-central1.
PRICES = {
    ("a3-highgpu-8g", "us-central1"): (18.98, 82.53),
    ("a3-highgpu-8g", "us-east4"): (14.85, 82.53),
    ("a2-ultragpu-8g", "us-central1"): (10.0, 40.0),
    ("a2-ultragpu-8g", "us-east4"): (20.0, 40.0),
}


def price(machine_type: str, location: str) -> tuple[float, float] | None:
    return PRICES.get((machine_type, location))


def request(*pools: dict[str, Any]) -> dict[str, Any]:
    return {
        "custom_job": {"jobSpec": {"workerPoolSpecs": list(pools)}},
        "location": "us-east4",
        "locations": ["us-east4", "us-central1"],
    }


def pool(machine: dict[str, Any], replicas: int | str = 1) -> dict[str, Any]:
    return {"machineSpec": machine, "replicaCount": replicas}


def capacity_everywhere() -> list[FleetFact]:
    """Spot found at once in both locations: only the prices decide."""
    created = NOW - timedelta(hours=3)
    return [
        FleetFact(Kind.WAIT, location, created + timedelta(minutes=5), 300.0, attempt_key=key)
        for location, key in (("us-east4", "a"), ("us-central1", "b"))
    ]


def place(body: dict[str, Any]) -> Any:
    attempt = Attempt(1, "us-east4", "SPOT", claimed_at="2026-12-02T12:00:00Z")
    return Placer(lambda _: capacity_everywhere(), price, NOW, 1200).place(body, attempt, [])


def test_the_layout_costs_every_replica_of_every_pool_and_skips_placeholders() -> None:
    body = request(pool(H100), {}, pool(A100, "3"))
    assert layout_hourly(body, "us-central1", price) == (18.98 + 3 * 10.0, 82.53 + 3 * 40.0)
    # a pool whose machine has no price there leaves the layout unpriced, not priced in part
    assert layout_hourly(request(pool(H100), pool({"machineType": "a3-megagpu-8g"})), "us-east4", price) is None


def test_placement_weighs_the_whole_layout_not_pool_0s_machine() -> None:
    # pool 0 alone is cheaper in us-east4 (14.85 vs 18.98); with pool 1's three replicas
    # us-central1 is (48.98 vs 74.85)
    placed = place(request(pool(H100), pool(A100, 3)))
    assert placed.location == "us-central1"
    assert "$48.98/h" in placed.reason


def test_placement_quotes_the_price_of_all_replicas() -> None:
    placed = place(request(pool(H100), pool(H100, 2)))
    assert placed.location == "us-east4"
    assert f"${3 * 14.85:.2f}/h" in placed.reason


def ledger_record(*pools: dict[str, Any]) -> dict[str, Any]:
    """A succeeded request whose one Spot attempt ran an hour."""
    return {
        "request_id": "two-pools",
        "status": "SUCCEEDED",
        "request": {
            "request_id": "two-pools",
            "location": "us-central1",
            "custom_job": {"jobSpec": {"workerPoolSpecs": list(pools)}},
        },
        "attempts": [
            {
                "n": 1,
                "location": "us-central1",
                "strategy": "SPOT",
                "claimed_at": "2026-11-29T10:00:00.000Z",
                "job": "projects/p/locations/us-central1/customJobs/1",
                "created_at": "2026-11-29T10:00:00.000Z",
                "started_at": "2026-11-29T10:00:00.000Z",
                "ended_at": "2026-11-29T11:00:00.000Z",
                "state": "JOB_STATE_SUCCEEDED",
                "preemptions": 1,
                "outcome": "succeeded",
            }
        ],
    }


def test_the_reports_cost_prices_each_pools_replicas_at_their_own_machine() -> None:
    from spotjobs.reporting.prices import Prices
    from spotjobs.reporting.views import build_views, totals

    a2 = {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
    a3 = {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8}
    views = build_views([ledger_record(pool(a2), {}, pool(a3, "2"))])
    summary = totals(views, now=NOW)
    a2_prices, a3_prices = Prices.find("a2-highgpu-1g", "us-central1"), Prices.find("a3-highgpu-8g", "us-central1")
    assert a2_prices is not None and a3_prices is not None
    # one hour of the primary's a2 and two a3 replicas; the empty placeholder pool is no replica
    assert summary["cost_spot_usd"] == round(a2_prices.spot_per_hour + 2 * a3_prices.spot_per_hour, 2)
    assert views[0].machine == ("a2-highgpu-1g", 3)
