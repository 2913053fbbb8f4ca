"""FLEX_START in the Vertex emulator (devstack/vertex/flex.py, validation.py, modes.py): the
documented requirements refused at create, maxWaitDuration, and the opt-in capacity trace."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.cloud import aiplatform_v1

from devstack.vertex.errors import ApiError
from devstack.vertex.flex import (
    DEFAULT_MAX_WAIT_SECONDS,
    FlexCapacity,
    WaitVerdict,
    max_wait_seconds,
    wait_verdict,
)
from devstack.vertex.modes import ReplicaModes, parse_modes
from devstack.vertex.validation import flex_start_violations, validate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def flex_job(
    *pools: dict[str, Any], strategy: str = "FLEX_START", scheduling: dict[str, Any] | None = None
) -> aiplatform_v1.CustomJob:
    specs = [
        {"replicaCount": 1, "containerSpec": {"imageUri": "trainer"}, "machineSpec": machine}
        for machine in pools or ({"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB"},)
    ]
    body = {
        "displayName": "flex",
        "jobSpec": {"workerPoolSpecs": specs, "scheduling": {"strategy": strategy, **(scheduling or {})}},
    }
    return aiplatform_v1.CustomJob.from_json(json.dumps(body))


H100 = {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8}
A100 = {"machineType": "a2-ultragpu-8g", "acceleratorType": "NVIDIA_A100_80GB", "acceleratorCount": 8}
T4 = {"machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4", "acceleratorCount": 1}


# ---- create-time validation of the documented requirements ----


@pytest.mark.parametrize("machine", [H100, A100, {"machineType": "g2-standard-8", "acceleratorType": "NVIDIA_L4"}])
def test_a_flex_start_job_meeting_the_requirements_is_accepted(machine: dict[str, Any]) -> None:
    validate(flex_job(machine, machine, scheduling={"timeout": "604800s"}))


@pytest.mark.parametrize(
    ("pools", "scheduling", "field", "requirement"),
    [
        ((T4,), {}, "worker_pool_specs[0].machine_spec.accelerator_type", "L4, A100, H100, H200 or B200"),
        (({"machineType": "n1-standard-8"},), {}, "worker_pool_specs[0].machine_spec.accelerator_type", "GPUs"),
        ((H100,), {"timeout": "604801s"}, "scheduling.timeout", "7 days or less"),
        ((H100, A100), {}, "worker_pool_specs;", "same machine configuration"),
        ((H100, {**H100, "acceleratorCount": 4}), {}, "worker_pool_specs;", "same machine configuration"),
    ],
)
def test_a_flex_start_job_breaking_a_documented_requirement_is_refused_naming_it(
    pools: tuple[dict[str, Any], ...], scheduling: dict[str, Any], field: str, requirement: str
) -> None:
    with pytest.raises(ApiError) as refused:
        validate(flex_job(*pools, scheduling=scheduling))
    assert refused.value.status == "INVALID_ARGUMENT"
    assert f"custom_job.job_spec.{field}" in refused.value.message
    assert requirement in refused.value.message


def test_the_requirements_are_flex_starts_only_and_can_be_left_to_the_job() -> None:
    validate(flex_job(T4, A100, strategy="SPOT", scheduling={"timeout": "864000s"}))
    # An empty worker pool spec keeps the later pools' indexes: it is no machine configuration.
    assert flex_start_violations(flex_job(H100, {}, H100)) == []
    broken = flex_job(T4)
    validate(broken, refuse_flex_start_violations=False)  # the `flex_requirements` mode job_failed
    assert [path for path, _ in flex_start_violations(broken)] == [
        "custom_job.job_spec.worker_pool_specs[0].machine_spec.accelerator_type"
    ]


# ---- maxWaitDuration and the wait ----


def test_max_wait_duration_defaults_to_one_day_and_zero_waits_for_ever() -> None:
    assert max_wait_seconds(flex_job()) == DEFAULT_MAX_WAIT_SECONDS == 86400
    assert max_wait_seconds(flex_job(scheduling={"maxWaitDuration": "0s"})) is None
    assert max_wait_seconds(flex_job(scheduling={"maxWaitDuration": "1800s"})) == 1800


def test_a_job_waits_while_there_is_no_capacity_at_most_its_max_wait() -> None:
    assert wait_verdict(True, 10_000.0, 60.0) is WaitVerdict.RUN  # capacity at the last moment still runs
    assert wait_verdict(False, 59.9, 60.0) is WaitVerdict.WAIT
    assert wait_verdict(False, 60.0, 60.0) is WaitVerdict.EXPIRED
    assert wait_verdict(False, 10**9, None) is WaitVerdict.WAIT  # maxWaitDuration 0: for ever


# ---- the capacity trace ----


def test_without_a_trace_flex_start_capacity_is_always_there() -> None:
    capacity = FlexCapacity(Clock())
    assert capacity.available("us-central1", "a3-highgpu-8g")
    assert capacity.seconds_to_next_tick("us-central1", "a3-highgpu-8g") == float("inf")


def test_a_trace_naming_a_machine_type_holds_before_one_naming_none_and_replays_in_ticks() -> None:
    clock = Clock()
    capacity = FlexCapacity(clock)
    assert capacity.set_trace({"data": [0], "tick_seconds": 3600}) == {"data": [0], "tick_seconds": 3600.0}
    answer = capacity.set_trace({"data": [0, 1], "tick_seconds": 10, "machine_type": "a3-highgpu-8g"})
    assert answer == {"data": [0, 1], "tick_seconds": 10.0, "machine_type": "a3-highgpu-8g"}
    assert not capacity.available("us-central1", "a3-highgpu-8g")
    assert not capacity.available("us-central1", "a2-ultragpu-8g")  # the trace naming no machine
    clock.now += 11
    assert capacity.available("us-central1", "a3-highgpu-8g")
    assert not capacity.available("us-central1", "a2-ultragpu-8g")
    capacity.set_trace({"data": []})
    assert capacity.available("us-central1", "a2-ultragpu-8g")


def test_a_trace_may_name_a_region_and_a_machine_type_and_is_removed_as_set() -> None:
    capacity = FlexCapacity(Clock())
    capacity.set_trace({"data": [0], "location": "us-east4", "machine_type": "a3-highgpu-8g"})
    assert not capacity.available("us-east4", "a3-highgpu-8g")
    assert capacity.available("us-central1", "a3-highgpu-8g")
    assert capacity.available("us-east4", "a2-ultragpu-8g")
    assert capacity.to_json("us-east4", "a3-highgpu-8g")["data"] == [0]
    capacity.set_trace({"data": [], "location": "us-east4", "machine_type": "a3-highgpu-8g"})
    assert capacity.available("us-east4", "a3-highgpu-8g")
    capacity.set_trace({"data": [0]})
    capacity.clear()
    assert capacity.available("us-east4", "a3-highgpu-8g")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"data": [2]}, "data"),
        ({"data": [1], "machine_type": 7}, "machine_type"),
        ({"data": [1], "kind": "flex"}, "trace"),
        ([1, 0], "machine_type"),
    ],
)
def test_a_bad_trace_is_refused_naming_the_field(body: Any, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        FlexCapacity().set_trace(body)


# ---- the undocumented behaviour, named modes ----


def test_the_flex_start_assumptions_are_switchable_modes_with_the_documented_reading_first() -> None:
    defaults = ReplicaModes()
    assert (defaults.flex_wait_expiry, defaults.flex_preemption, defaults.flex_requirements) == (
        "resource_exhausted",
        "never",
        "invalid_argument",
    )
    switched = parse_modes({"flex_preemption": "as_spot", "flex_wait_expiry": "stockout"}, defaults)
    assert switched == ReplicaModes(flex_preemption="as_spot", flex_wait_expiry="stockout")
    with pytest.raises(ValueError, match="flex_requirements"):
        parse_modes({"flex_requirements": "accept"}, defaults)
