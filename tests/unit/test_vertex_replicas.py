"""What the Vertex emulator gives each replica of a multi-replica job, its plans that name a
replica, and its named modes for what Google does not document."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.cloud import aiplatform_v1

from devstack.vertex.logs import LogEntryFactory
from devstack.vertex.modes import ReplicaModes, parse_modes
from devstack.vertex.preemption import PlannedPreemption, PreemptionPlanner, parse_plan
from devstack.vertex.signals import DOCUMENTED, RICH, profile
from devstack.vertex.worker import build_launches

TORCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


def pool(replicas: int, *, package: bool = False, command: str = "train") -> dict[str, Any]:
    spec: dict[str, Any] = {"machineSpec": {"machineType": "a2-highgpu-1g"}, "replicaCount": str(replicas)}
    if package:
        spec["pythonPackageSpec"] = {
            "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch:1",
            "packageUris": ["gs://b/p.tar.gz"],
            "pythonModule": "trainer.task",
        }
    else:
        spec["containerSpec"] = {"imageUri": "img", "command": [command]}
    return spec


def ports_from_40000(count: int) -> list[int]:
    return list(range(40000, 40000 + count))


def launches_of(*pools: dict[str, Any]) -> dict[str, dict[str, str]]:
    job = aiplatform_v1.CustomJob.from_json(
        json.dumps({"displayName": "t", "jobSpec": {"workerPoolSpecs": list(pools)}})
    )
    return {launch.replica: dict(launch.env) for launch in build_launches(job, "42", free_ports=ports_from_40000)}


def test_each_replica_of_each_pool_gets_its_own_task_and_the_same_loopback_cluster() -> None:
    envs = launches_of(pool(1), pool(2, command="work"), pool(2), pool(1))

    assert list(envs) == [
        "workerpool0-0",
        "workerpool1-0",
        "workerpool1-1",
        "workerpool2-0",
        "workerpool2-1",
        "workerpool3-0",
    ]
    specs = {name: json.loads(env["CLUSTER_SPEC"]) for name, env in envs.items()}
    assert specs["workerpool0-0"]["cluster"] == {
        "workerpool0": ["127.0.0.1:40000"],
        "workerpool1": ["127.0.0.1:40001", "127.0.0.1:40002"],
        "workerpool2": ["127.0.0.1:40003", "127.0.0.1:40004"],
        "workerpool3": ["127.0.0.1:40005"],
    }
    for name, spec in specs.items():
        assert spec["cluster"] == specs["workerpool0-0"]["cluster"]
        assert spec["task"] == {"type": name.split("-")[0], "index": int(name.split("-")[1])}
    tf_tasks = {name: json.loads(env["TF_CONFIG"])["task"] for name, env in envs.items()}
    assert [(task["type"], task["index"]) for task in tf_tasks.values()] == [
        ("chief", 0),
        ("worker", 0),
        ("worker", 1),
        ("ps", 0),
        ("ps", 1),
        ("evaluator", 0),
    ]
    # Evaluators are not part of TF_CONFIG's cluster (the Vertex and AI Platform docs).
    assert sorted(json.loads(envs["workerpool3-0"]["TF_CONFIG"])["cluster"]) == ["chief", "ps", "worker"]
    assert all(variable not in env for env in envs.values() for variable in TORCH_VARIABLES)


def test_a_pool_runs_its_own_command() -> None:
    job = aiplatform_v1.CustomJob.from_json(
        json.dumps({"displayName": "t", "jobSpec": {"workerPoolSpecs": [pool(1), pool(1, command="work")]}})
    )

    launches = build_launches(job, "42", free_ports=lambda count: list(range(1, count + 1)))

    assert [(launch.replica, launch.argv) for launch in launches] == [
        ("workerpool0-0", ("train",)),
        ("workerpool1-0", ("work",)),
    ]


def test_python_package_replicas_of_pools_0_and_1_get_master_world_size_and_rank() -> None:
    envs = launches_of(pool(1, package=True), pool(2, package=True), pool(1, package=True))

    ranked = {
        name: {variable: env[variable] for variable in TORCH_VARIABLES}
        for name, env in envs.items()
        if name != "workerpool2-0"
    }
    assert not any(variable in envs["workerpool2-0"] for variable in TORCH_VARIABLES)  # a parameter server
    assert ranked["workerpool0-0"] == {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "40000",
        "WORLD_SIZE": "3",
        "RANK": "0",
    }
    assert ranked["workerpool1-0"]["RANK"] == "1" and ranked["workerpool1-1"]["RANK"] == "2"
    assert {env["MASTER_PORT"] for env in ranked.values()} == {"40000"}


def test_a_parameter_server_pool_gets_no_rank() -> None:
    envs = launches_of(pool(1, package=True), {}, pool(1, package=True))

    assert list(envs) == ["workerpool0-0", "workerpool2-0"]  # the empty pool keeps its position
    assert envs["workerpool0-0"]["WORLD_SIZE"] == "1"
    assert not any(variable in envs["workerpool2-0"] for variable in TORCH_VARIABLES)


def test_a_single_replica_job_keeps_vertex_shaped_names_and_no_distributed_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RANK", "7")  # the emulator's own environment never leaks Vertex's variables

    [env] = launches_of(pool(1, package=True)).values()

    [address] = json.loads(env["CLUSTER_SPEC"])["cluster"]["workerpool0"]
    assert address.startswith("cmle-training-workerpool0-") and address.endswith("-0:2222")
    assert "TF_CONFIG" not in env
    assert all(variable not in env for variable in TORCH_VARIABLES)


def test_container_lines_carry_their_replica_as_task_name() -> None:
    entry = LogEntryFactory().container("p", "42", "stdout", "hello", replica="workerpool1-1")

    assert entry["resource"]["labels"]["task_name"] == "workerpool1-1"
    assert LogEntryFactory().container("p", "42", "stdout", "hello")["resource"]["labels"]["task_name"] == (
        "workerpool0-0"
    )


def test_the_rich_profiles_lines_name_the_reclaimed_replica_and_what_restarts() -> None:
    rich = profile(RICH)

    assert rich.preempted(2, "workerpool1-0", whole_job=False) == [
        (
            "WARNING",
            "The Spot VM of replica workerpool1-0 was preempted. Restarting replica workerpool1-0 (restart 2 of 6).",
        )
    ]
    assert "Restarting the job" in rich.preempted(2, "workerpool1-0")[0][1]
    assert profile(DOCUMENTED).preempted(2, "workerpool1-0") == []  # Vertex documents no such line


# ---- plans that name a replica ----


def test_a_plan_counts_the_starts_of_the_replica_it_names() -> None:
    planner = PreemptionPlanner(rate_per_minute=60.0)
    planner.add_plan({"labels": {}, "replica": "workerpool1-0", "preemptions": 1, "after_checkpoints": 2})
    state = planner.new_job_state(1)

    assert planner.next_preemption(state, {}, "workerpool0-0") is None  # neither the plan nor the rate
    assert planner.next_preemption(state, {}, "workerpool1-0") == PlannedPreemption(after_checkpoints=2)
    assert planner.next_preemption(state, {}, "workerpool1-1") is None
    assert planner.next_preemption(state, {}, "workerpool1-0") is None  # its one preemption is used


def test_a_plan_of_every_replica_counts_the_primarys_starts() -> None:
    planner = PreemptionPlanner()
    plan = planner.add_plan({"labels": {}, "replica": "all", "preemptions": 2, "after_output": "saving"})
    state = planner.new_job_state(1)

    assert planner.next_preemption(state, {}, "workerpool1-0") is None
    assert planner.next_preemption(state, {}, "workerpool0-0") == PlannedPreemption(after_output="saving")
    assert plan.to_json() == {
        "id": plan.plan_id,
        "labels": {},
        "replica": "all",
        "preemptions": 2,
        "after_output": "saving",
    }


def test_without_a_plan_the_random_rate_reclaims_every_replicas_vm() -> None:
    # Compute Engine reclaims Spot VMs one by one: each replica draws its own delay.
    planner = PreemptionPlanner(rate_per_minute=6.0, seed=1)
    state = planner.new_job_state(1)
    for replica in ("workerpool0-0", "workerpool1-0", "workerpool1-1"):
        planned = planner.next_preemption(state, {}, replica)
        assert planned is not None and planned.after_seconds is not None, replica


def test_the_rate_reclaims_only_the_primary_in_the_primary_mode() -> None:
    planner = PreemptionPlanner(rate_per_minute=6.0, seed=1)
    state = planner.new_job_state(1)

    assert planner.next_preemption(state, {}, "workerpool1-0", rate_reclaims="primary") is None
    planned = planner.next_preemption(state, {}, rate_reclaims="primary")
    assert planned is not None and planned.after_seconds is not None
    assert parse_modes({"rate_reclaims": "primary"}, ReplicaModes()).rate_reclaims == "primary"


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ({"labels": {}, "replica": "worker-1", "preemptions": 1, "after_seconds": 1}, "replica must be"),
        ({"labels": {}, "replica": "workerpool4-0", "preemptions": 1, "after_seconds": 1}, "replica must be"),
        ({"labels": {}, "after_output": "", "preemptions": 1}, "non-empty string"),
        ({"labels": {}, "after_output": "x", "after_seconds": 1, "preemptions": 1}, "not both"),
    ],
)
def test_a_bad_replica_plan_is_refused_naming_the_field(body: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_plan("p", body)


# ---- modes ----


def test_the_modes_default_to_the_least_surprising_reading_and_switch_one_field_at_a_time() -> None:
    defaults = ReplicaModes()
    assert defaults.to_json() == {
        "preemption_restarts": "replica",
        "survivor_stop": "sigterm",
        "spot_restart_count": "per_event",
        "transient_exit_restarts": "job",
        "rate_reclaims": "each_replica",
        "timeout_end": "failed",
        "flex_wait_expiry": "resource_exhausted",
        "flex_preemption": "never",
        "flex_requirements": "invalid_argument",
    }

    switched = parse_modes({"survivor_stop": "sigkill"}, defaults)

    assert switched == ReplicaModes(survivor_stop="sigkill")


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ([], "JSON object"),
        ({"restarts": "job"}, "unknown field"),
        ({"preemption_restarts": "pool"}, "preemption_restarts must be one of"),
        ({"spot_restart_count": 6}, "spot_restart_count must be one of"),
        ({"timeout_end": "cancelled"}, "timeout_end must be one of"),
    ],
)
def test_a_bad_mode_is_refused_naming_it(body: Any, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_modes(body, ReplicaModes())
