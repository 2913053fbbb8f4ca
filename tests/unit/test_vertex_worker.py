"""How the Vertex emulator turns worker pool 0 into an argv and Vertex's environment, and stops a
replica's processes."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import pytest
from google.cloud import aiplatform_v1

from devstack.vertex.worker import (
    UnrunnableJob,
    WorkerLaunch,
    WorkerProcess,
    build_launches,
    stop_together,
    vertex_environment,
)


def custom_job(
    pool: dict[str, Any],
    *,
    base: str | None = None,
    extra_pools: list[dict[str, Any]] | None = None,
) -> aiplatform_v1.CustomJob:
    spec: dict[str, Any] = {"workerPoolSpecs": [pool, *(extra_pools or [])]}
    if base is not None:
        spec["baseOutputDirectory"] = {"outputUriPrefix": base}
    return aiplatform_v1.CustomJob.from_json(json.dumps({"displayName": "t", "jobSpec": spec}))


CONTAINER = {
    "machineSpec": {"machineType": "a2-highgpu-1g"},
    "replicaCount": "1",
    "containerSpec": {
        "imageUri": "us-docker.pkg.dev/p/trainer:1",
        "command": ["python3", "-m", "trainer"],
        "args": ["--epochs", "3"],
        "env": [
            {"name": "AIP_MODEL_DIR", "value": "overridden-by-vertex"},
            {"name": "A", "value": "1"},
        ],
    },
}


@pytest.mark.parametrize("base", ["gs://b/requests/r1", "gs://b/requests/r1/", "gs://b/requests/r1//"])
def test_output_directories_hang_under_the_base_with_one_slash(base: str) -> None:
    env = vertex_environment(custom_job(CONTAINER, base=base), "42")

    assert env["AIP_MODEL_DIR"] == "gs://b/requests/r1/model/"
    assert env["AIP_CHECKPOINT_DIR"] == "gs://b/requests/r1/checkpoints/"
    assert env["AIP_TENSORBOARD_LOG_DIR"] == "gs://b/requests/r1/logs/"
    assert env["CLOUD_ML_JOB_ID"] == "42"


def test_a_container_spec_runs_command_then_args_with_vertex_variables_last() -> None:
    launch = build_launches(custom_job(CONTAINER, base="gs://b/o"), "42")[0]

    assert launch.argv == ("python3", "-m", "trainer", "--epochs", "3")
    assert launch.image_uri == "us-docker.pkg.dev/p/trainer:1"
    assert launch.env["A"] == "1"
    assert launch.env["AIP_MODEL_DIR"] == "gs://b/o/model/"


def test_a_python_package_runs_as_a_module_of_this_interpreter() -> None:
    pool = {
        "machineSpec": {"machineType": "a2-highgpu-1g"},
        "pythonPackageSpec": {
            "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/tf:1",
            "packageUris": ["gs://b/p.tar.gz"],
            "pythonModule": "trainer.task",
            "args": ["--x"],
        },
    }

    launch = build_launches(custom_job(pool), "42")[0]

    assert launch.argv == (sys.executable, "-m", "trainer.task", "--x")
    assert launch.image_uri == "us-docker.pkg.dev/vertex-ai/training/tf:1"


def test_an_image_without_a_command_cannot_run_locally() -> None:
    pool = {"machineSpec": {"machineType": "a2"}, "containerSpec": {"imageUri": "img"}}

    with pytest.raises(UnrunnableJob, match="default entrypoint of image img"):
        build_launches(custom_job(pool), "42")[0]


def test_cluster_spec_always_and_tf_config_only_for_distributed_jobs() -> None:
    single = vertex_environment(custom_job(CONTAINER), "42")
    workers = {**CONTAINER, "replicaCount": "2"}
    evaluator = {**CONTAINER, "replicaCount": "1"}
    distributed = vertex_environment(custom_job(CONTAINER, extra_pools=[workers, {}, evaluator]), "42")

    cluster_spec = json.loads(single["CLUSTER_SPEC"])
    assert cluster_spec["task"] == {"type": "workerpool0", "index": 0}
    assert cluster_spec["environment"] == "cloud"
    [address] = cluster_spec["cluster"]["workerpool0"]
    assert address.startswith("cmle-training-workerpool0-") and address.endswith("-0:2222")
    assert cluster_spec["job"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] == "us-docker.pkg.dev/p/trainer:1"
    assert "TF_CONFIG" not in single
    assert sorted(json.loads(distributed["CLUSTER_SPEC"])["cluster"]) == [
        "workerpool0",
        "workerpool1",
        "workerpool3",
    ]
    tf_config = json.loads(distributed["TF_CONFIG"])
    assert tf_config["task"] == {"type": "chief", "index": 0}
    assert {kind: len(hosts) for kind, hosts in tf_config["cluster"].items()} == {
        "chief": 1,
        "worker": 2,
    }


# A container command that starts a process in a session of its own (as torchrun starts each of its
# workers), prints that process's pid, and waits.
SESSION_SPAWNER = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def alive(pid: int) -> bool:
    """Running (a zombie, killed and not yet reaped by whoever adopted it, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_replica_killed_takes_every_process_it_started_even_in_another_session() -> None:
    # A reclaimed VM (or a container stopped past its grace) leaves nothing running: torchrun's
    # workers, each in a session of its own, went on training after their replica was killed.
    printed: list[str] = []
    started = threading.Event()

    def on_output(stream: str, text: str) -> None:
        if stream == "stdout":
            printed.append(text)
            started.set()

    worker = WorkerProcess(
        WorkerLaunch((sys.executable, "-c", SESSION_SPAWNER), {}, "image", "workerpool1-0"), on_output
    )
    worker.start()
    assert started.wait(30), "the replica never started its process"
    grandchild = int(printed[0])
    assert alive(grandchild)

    assert stop_together([worker], 0.0) == [["SIGKILL"]]

    deadline = time.monotonic() + 10
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild)
