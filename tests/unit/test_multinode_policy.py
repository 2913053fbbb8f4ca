"""The request policy on multi-replica jobs (issue 44): total replicas and accelerators over every
pool are capped, fail closed."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from shared.requests.job_policy import check_custom_job
from shared.requests.policy import InvalidJobRequest, validate_request
from shared.settings import Settings
from tests.conftest import load_event

BASE_JOB: dict[str, Any] = json.loads(load_event("requests/bare_docs.json"))
SETTINGS = Settings.from_env({})


def two_pool_job(primary: int = 1, workers: int = 3, accelerators: int = 1) -> dict[str, Any]:
    """Pool 0 (the primary) and pool 1 (workers) of the same machine, as Vertex's distributed
    training page lays them out."""
    job = copy.deepcopy(BASE_JOB)
    primary_pool = job["jobSpec"]["workerPoolSpecs"][0]
    primary_pool["replicaCount"] = primary
    primary_pool["machineSpec"]["acceleratorCount"] = accelerators
    worker_pool = copy.deepcopy(primary_pool)
    worker_pool["replicaCount"] = workers
    job["jobSpec"]["workerPoolSpecs"].append(worker_pool)
    return job


def violations(job: dict[str, Any], settings: Settings = SETTINGS) -> list[str]:
    return [str(v) for v in check_custom_job(job, "custom_job", "r1", settings)]


def test_a_two_pool_job_within_the_ceilings_passes() -> None:
    assert violations(two_pool_job(workers=3)) == []


def test_worker_pool_0_holds_the_primary_alone() -> None:
    # Vertex's distributed training page: "set its replicaCount to 1"; the others go to pool 1.
    [violation] = violations(two_pool_job(primary=2, workers=1))
    assert violation.startswith("custom_job.jobSpec.workerPoolSpecs[0].replicaCount: is 2; worker pool 0 holds")
    assert violation.endswith("put the other replicas in worker pool 1")
    single_pool = copy.deepcopy(BASE_JOB)
    single_pool["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] = "2"
    assert [v.split(":")[0] for v in violations(single_pool)] == ["custom_job.jobSpec.workerPoolSpecs[0].replicaCount"]
    assert violations(two_pool_job(primary=1, workers=1)) == []


def test_replicas_over_every_pool_are_capped_by_name() -> None:
    settings = dataclasses.replace(SETTINGS, max_replicas_per_job=4)
    assert violations(two_pool_job(workers=3), settings) == []
    assert violations(two_pool_job(workers=4), settings) == [
        "custom_job.jobSpec.workerPoolSpecs: asks for 5 replicas in all (every pool); "
        "at most 4 per job (SPOTJOBS_MAX_REPLICAS_PER_JOB)"
    ]


def test_accelerators_over_every_replica_of_every_pool_are_capped() -> None:
    # 1 primary + 3 workers, 8 GPUs each: 32 GPUs, though each pool alone is within the ceilings.
    assert violations(two_pool_job(workers=3, accelerators=8)) == [
        "custom_job.jobSpec.workerPoolSpecs: asks for 32 accelerators in all (replicas x accelerators, every pool); "
        "at most 16 per job"
    ]


def test_a_request_over_the_replica_cap_is_refused_whole() -> None:
    body = {"request_id": "r1", "location": "us-central1", "custom_job": two_pool_job(workers=8)}
    settings = dataclasses.replace(SETTINGS, max_replicas_per_job=4)
    with pytest.raises(InvalidJobRequest, match="9 replicas in all") as refused:
        validate_request(json.dumps(body).encode(), attributes={}, settings=settings)
    assert refused.value.request_id == "r1"


def test_the_replica_cap_is_a_setting_shown_with_the_ceilings() -> None:
    assert Settings.from_env({"SPOTJOBS_MAX_REPLICAS_PER_JOB": "3"}).max_replicas_per_job == 3
    assert SETTINGS.max_replicas_per_job == 8


def test_a_flex_start_fallback_needs_one_machine_configuration_in_every_pool() -> None:
    # Dynamic Workload Scheduler: "the same machine configuration for all worker pools".
    settings = dataclasses.replace(SETTINGS, allowed_fallback_strategies=("STANDARD", "FLEX_START"))
    job = two_pool_job(workers=1)
    reduction_server = {
        "machineSpec": {"machineType": "a2-highgpu-1g"},
        "replicaCount": 1,
        "containerSpec": {"imageUri": "us-docker.pkg.dev/my-project/training/rs:1"},
    }
    mixed = copy.deepcopy(job)
    mixed["jobSpec"]["workerPoolSpecs"][1] = reduction_server

    def refusals(custom_job: dict[str, Any], strategy: str) -> list[str]:
        body = {
            "request_id": "r1",
            "location": "us-central1",
            "custom_job": custom_job,
            "fallback": {"strategy": strategy, "after_spot_attempts": 1},
        }
        try:
            validate_request(json.dumps(body).encode(), attributes={}, settings=settings)
        except InvalidJobRequest as refused:
            return [str(v) for v in refused.violations]
        return []

    assert refusals(job, "FLEX_START") == []
    assert refusals(mixed, "STANDARD") == []
    assert refusals(mixed, "FLEX_START") == [
        "fallback.strategy: is FLEX_START; Dynamic Workload Scheduler needs the same machine configuration "
        "in every worker pool, and workerPoolSpecs[1] differs from workerPoolSpecs[0]"
    ]


def test_a_flex_start_fallback_needs_a_gpu_dynamic_workload_scheduler_offers_and_at_most_7_days() -> None:
    # Dynamic Workload Scheduler: "L4, A100, H100, H200, or B200 GPUs" and "a maximum timeout of 7 days or less".
    settings = dataclasses.replace(
        SETTINGS,
        allowed_fallback_strategies=("STANDARD", "FLEX_START"),
        allowed_machine_families=("a2", "a3", "n1"),
        max_timeout_seconds=28 * 86400,
    )

    def refusals(custom_job: dict[str, Any]) -> list[str]:
        body = {
            "request_id": "r1",
            "location": "us-central1",
            "custom_job": custom_job,
            "fallback": {"strategy": "FLEX_START", "after_spot_attempts": 1},
        }
        try:
            validate_request(json.dumps(body).encode(), attributes={}, settings=settings)
        except InvalidJobRequest as refused:
            return [str(v) for v in refused.violations]
        return []

    t4 = copy.deepcopy(BASE_JOB)
    t4["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] = {
        "machineType": "n1-standard-8",
        "acceleratorType": "NVIDIA_TESLA_T4",
        "acceleratorCount": 1,
    }
    assert refusals(t4) == [
        "fallback.strategy: is FLEX_START; Dynamic Workload Scheduler needs L4, A100, H100, H200 or B200 GPUs, "
        "and workerPoolSpecs[0] has NVIDIA_TESLA_T4"
    ]
    long = copy.deepcopy(BASE_JOB)
    long["jobSpec"].setdefault("scheduling", {})["timeout"] = f"{8 * 86400}s"
    assert refusals(long) == [
        "fallback.strategy: is FLEX_START; Dynamic Workload Scheduler needs a timeout of 7 days or less, "
        f"and jobSpec.scheduling.timeout is {8 * 86400}s"
    ]
    assert refusals(BASE_JOB) == []  # an A100, Vertex's default timeout of 7 days
