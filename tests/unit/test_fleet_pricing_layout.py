"""The layout a request is priced by (shared/requests/pricing.py): its pools' machines and replicas,
as a person reads them in placement's reasons, and a pool that does not say its replicas."""

from __future__ import annotations

from typing import Any

from shared.requests.pricing import layout, layout_hourly, machine_types

PRICES = {("a3-highgpu-8g", "us-east4"): (14.85, 82.53), ("a2-ultragpu-8g", "us-east4"): (10.0, 40.0)}


def price(machine_type: str, location: str) -> tuple[float, float] | None:
    return PRICES.get((machine_type, location))


def request(*pools: dict[str, Any]) -> dict[str, Any]:
    return {"custom_job": {"jobSpec": {"workerPoolSpecs": list(pools)}}}


def test_the_machine_types_name_each_pool_with_its_replicas_past_one() -> None:
    body = request(
        {"machineSpec": {"machineType": "a3-highgpu-8g"}, "replicaCount": "1"},
        {},
        {"machineSpec": {"machineType": "a2-ultragpu-8g"}, "replicaCount": "2"},
    )
    assert machine_types(body) == "a3-highgpu-8g + 2 x a2-ultragpu-8g"


def test_a_pool_without_a_machine_type_is_named_by_a_question_mark() -> None:
    assert machine_types(request({"replicaCount": "3"})) == "3 x ?"
    assert machine_types(request({"replicaCount": "1"})) == "?"
    assert machine_types(request()) == "?"


def test_a_pool_that_does_not_say_its_replicas_is_one_vm() -> None:
    body = request({"machineSpec": {"machineType": "a3-highgpu-8g"}})
    assert layout(body) == [("a3-highgpu-8g", 1)]
    assert layout_hourly(body, "us-east4", price) == (14.85, 82.53)


def test_a_request_without_pools_has_no_layout_and_no_price() -> None:
    assert layout({}) == []
    assert layout_hourly({}, "us-east4", price) is None
