"""A request's `capacity` alternatives: read (shared/requests/capacity.py), carried in the canonical
envelope, and judged by the deployment's policy, each dimension failing closed."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.errors import InvalidRequest
from shared.requests.capacity import MACHINES, Alternative, job_on_machine, read_capacity
from shared.requests.envelope import canonical_envelope, read_request, requeue_message
from shared.requests.policy import check_attempt_job, validate_request
from shared.requests.pricing import table
from shared.settings import Settings
from tests.conftest import load_event

BASE_JOB: dict[str, Any] = json.loads(load_event("requests/bare_docs.json"))
FLEX = Settings.from_env({"SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD,FLEX_START"})
H100_OR_A100 = [
    {"machine": "a3-highgpu-8g", "strategies": ["SPOT", "FLEX_START", "STANDARD"]},
    {"machine": "a2-ultragpu-8g", "strategies": ["SPOT", "STANDARD"]},
]


def body(**fields: Any) -> bytes:
    return json.dumps({"request_id": "r1", "custom_job": copy.deepcopy(BASE_JOB), **fields}).encode()


def violations(settings: Settings = FLEX, **fields: Any) -> list[str]:
    with pytest.raises(InvalidRequest) as raised:
        validate_request(body(**fields), attributes={}, settings=settings)
    return [str(v) for v in raised.value.violations]


def test_alternatives_are_read_in_order_and_kept_in_the_canonical_envelope_and_its_requeue() -> None:
    request = validate_request(body(capacity=H100_OR_A100), attributes={}, settings=FLEX)
    assert request.capacity == (
        Alternative("a3-highgpu-8g", ("SPOT", "FLEX_START", "STANDARD")),
        Alternative("a2-ultragpu-8g", ("SPOT", "STANDARD")),
    )
    envelope = canonical_envelope(request, default_location="us-central1", default_max_attempts=3)
    assert envelope["capacity"] == H100_OR_A100
    requeued, attributes = requeue_message(envelope, 2, "us-central1")
    again, problems = read_request(json.dumps(requeued).encode(), attributes=attributes, max_bytes=10**6)
    assert problems == [] and again.capacity == request.capacity


def test_a_request_without_capacity_keeps_the_envelope_it_always_had() -> None:
    request = validate_request(body(), attributes={}, settings=FLEX)
    assert "capacity" not in canonical_envelope(request, default_location="us-central1", default_max_attempts=3)


@pytest.mark.parametrize(
    ("capacity", "expected"),
    [
        ([], "capacity: expected a list of 1 to 8 alternatives"),
        ({"machine": "a3-highgpu-8g"}, "capacity: expected a list of 1 to 8 alternatives"),
        (["a3-highgpu-8g"], 'capacity[0]: expected {"machine": MACHINE_TYPE'),
        ([{"strategies": ["SPOT"]}], "capacity[0].machine: is required"),
        (
            [{"machine": "n1-standard-8", "strategies": ["SPOT"]}],
            "capacity[0].machine: is 'n1-standard-8'; known machine types: a2-highgpu-1g",
        ),
        ([{"machine": "a3-highgpu-8g"}], "capacity[0].strategies: expected a non-empty list"),
        ([{"machine": "a3-highgpu-8g", "strategies": []}], "capacity[0].strategies: expected a non-empty list"),
        (
            [{"machine": "a3-highgpu-8g", "strategies": ["spot"]}],
            "capacity[0].strategies[0]: is 'spot'; expected one of SPOT, STANDARD, FLEX_START",
        ),
        (
            [{"machine": "a3-highgpu-8g", "strategies": ["SPOT", "SPOT"]}],
            "capacity[0].strategies: lists a strategy more than once",
        ),
        ([{"machine": "a3-highgpu-8g", "strategies": ["SPOT"], "zone": "a"}], "capacity[0].zone: unknown field"),
        (
            [
                {"machine": "a3-highgpu-8g", "strategies": ["SPOT"]},
                {"machine": "a3-highgpu-8g", "strategies": ["STANDARD"]},
            ],
            "capacity[1].machine: is a3-highgpu-8g, listed before",
        ),
    ],
)
def test_bad_alternatives_are_refused_naming_the_field(capacity: object, expected: str) -> None:
    found: list[Any] = []
    read_capacity(capacity, found)
    assert any(str(v).startswith(expected) for v in found), found


def test_capacity_and_fallback_are_refused_together() -> None:
    found = violations(capacity=H100_OR_A100, fallback={"after_spot_attempts": 1, "strategy": "STANDARD"})
    assert "fallback: is set with capacity; list the strategies in capacity instead" in found


def test_every_machine_of_the_price_table_has_its_accelerators_and_the_table_agrees_on_the_count() -> None:
    priced = table()["machine_types"]
    assert set(MACHINES) == set(priced)
    for machine, (_, count) in MACHINES.items():
        assert priced[machine]["accelerator"].startswith(f"{count} x "), machine


def test_an_alternative_rewrites_every_pool_on_the_primary_machine_with_its_accelerators() -> None:
    job = copy.deepcopy(BASE_JOB)
    pools = job["jobSpec"]["workerPoolSpecs"]
    pools.append(copy.deepcopy(pools[0]))  # the workers, on the primary machine
    pools.append({**copy.deepcopy(pools[0]), "machineSpec": {"machineType": "a2-highgpu-2g"}})  # another machine
    pools[0]["machineSpec"]["reservationAffinity"] = {"reservationAffinityType": "NO_RESERVATION"}
    moved = job_on_machine(job, "a3-highgpu-8g")
    h100 = {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8}
    assert moved["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] == {
        **h100,
        "reservationAffinity": {"reservationAffinityType": "NO_RESERVATION"},
    }
    assert moved["jobSpec"]["workerPoolSpecs"][1]["machineSpec"] == h100
    assert moved["jobSpec"]["workerPoolSpecs"][2]["machineSpec"] == {"machineType": "a2-highgpu-2g"}
    assert job["jobSpec"]["workerPoolSpecs"][1]["machineSpec"]["machineType"] == "a2-highgpu-1g"  # a copy


# The policy, each dimension failing closed.


def test_a_strategy_other_than_spot_needs_the_deployments_allowlist() -> None:
    found = violations(Settings.from_env({}), capacity=H100_OR_A100)
    assert (
        "capacity[0].strategies[1]: is FLEX_START; allowed besides SPOT: none (SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES)"
        in found
    )
    assert (
        "capacity[1].strategies[1]: is STANDARD; allowed besides SPOT: none (SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES)"
        in found
    )


def test_a_machine_outside_the_allowed_families_is_refused_on_its_alternative() -> None:
    capacity = [{"machine": "g2-standard-8", "strategies": ["SPOT"]}]
    [found] = violations(capacity=capacity)
    assert found.startswith(
        "capacity[0].machine: is g2-standard-8; on it custom_job.jobSpec.workerPoolSpecs[0].machineSpec.machineType"
    )
    assert "allowed families: a2, a3" in found


def test_a_machine_above_the_accelerator_ceiling_is_refused_on_its_alternative() -> None:
    settings = Settings.from_env(
        {"SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD", "SPOTJOBS_MAX_ACCELERATORS_PER_REPLICA": "4"}
    )
    [found] = violations(settings, capacity=[{"machine": "a2-ultragpu-8g", "strategies": ["SPOT"]}])
    assert found.startswith(
        "capacity[0].machine: is a2-ultragpu-8g; on it custom_job.jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount"
    )


def test_flex_start_is_refused_on_an_alternative_past_its_seven_days() -> None:
    job = copy.deepcopy(BASE_JOB)
    job["jobSpec"]["scheduling"]["timeout"] = f"{8 * 86400}s"
    request = json.dumps(
        {
            "request_id": "r1",
            "custom_job": job,
            "capacity": [{"machine": "a3-highgpu-8g", "strategies": ["SPOT", "FLEX_START"]}],
        }
    ).encode()
    with pytest.raises(InvalidRequest) as raised:
        validate_request(request, attributes={}, settings=FLEX)
    found = [str(v) for v in raised.value.violations]
    assert any(
        v.startswith("capacity[0].strategies: lists FLEX_START; Dynamic Workload Scheduler needs a timeout of 7 days")
        for v in found
    ), found


def test_a_deadline_needs_standard_on_every_alternative() -> None:
    at = (datetime.now(UTC) + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    capacity = [
        {"machine": "a3-highgpu-8g", "strategies": ["SPOT", "STANDARD"]},
        {"machine": "a2-ultragpu-8g", "strategies": ["SPOT", "FLEX_START"]},
    ]
    found = violations(capacity=capacity, deadline=at)
    assert found == ["capacity[1].strategies: lacks STANDARD, which a deadline may switch to on this machine"]


def test_spot_must_be_listed_while_spot_attempts_come_first() -> None:
    found = violations(capacity=[{"machine": "a3-highgpu-8g", "strategies": ["FLEX_START"]}])
    assert found == ["capacity: lists no SPOT; 1 Spot attempts come first (SPOTJOBS_MIN_SPOT_ATTEMPTS)"]
    settings = Settings.from_env(
        {"SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "FLEX_START", "SPOTJOBS_MIN_SPOT_ATTEMPTS": "0"}
    )
    capacity = [{"machine": "a3-highgpu-8g", "strategies": ["FLEX_START"]}]
    assert validate_request(body(capacity=capacity), attributes={}, settings=settings).capacity


def test_a_budget_is_refused_with_alternatives() -> None:
    found = violations(capacity=H100_OR_A100, max_cost_usd=1000)
    assert "max_cost_usd: is not supported with capacity alternatives yet" in found


def test_the_create_refuses_flex_start_on_a_job_that_breaks_its_requirements() -> None:
    job = copy.deepcopy(BASE_JOB)
    job["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] = {"machineType": "a2-highgpu-1g"}
    found = check_attempt_job(
        job, request_id="r1", strategy="FLEX_START", location="us-central1", spot_attempts_before=1, settings=FLEX
    )
    assert [str(v) for v in found] == [
        "strategy: is FLEX_START; Dynamic Workload Scheduler needs L4, A100, H100, H200 or B200 GPUs, and "
        "workerPoolSpecs[0] has none"
    ]
