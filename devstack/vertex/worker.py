"""How the emulator runs each replica of each worker pool of a CustomJob as a local process.

A replica's argv comes from its pool's `containerSpec.command + args`, or `python -m
pythonPackageSpec.pythonModule args` with this interpreter; the image URI is recorded, never
pulled, and nothing goes through a shell. The environment is the emulator's own (so
PUBSUB_EMULATOR_HOST, STORAGE_EMULATOR_HOST and PYTHONPATH reach the trainer), then the pool's
`env`, then what Vertex sets (documented in "Prepare training code" and "Distributed training",
https://cloud.google.com/vertex-ai/docs/training/distributed-training): AIP_MODEL_DIR,
AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR under `baseOutputDirectory` (the same on every
replica), CLOUD_ML_JOB_ID, CLUSTER_SPEC ("set on every replica": `cluster`, `environment`,
`task` = this replica's `{"type": "workerpool<P>", "index": <i>}`, `job`), and TF_CONFIG for
distributed jobs only (Vertex does not set it for single-replica jobs; task type `chief`,
`worker`, `ps` or `evaluator` by pool, and `cluster` without the evaluators).

Host names: a single-replica job's address has Vertex's shape
(`cmle-training-workerpool0-<hash>-0:2222`); nothing connects to it. In a job with more than one
replica every address is `127.0.0.1:<port>` instead, one free port per replica picked when the job
starts and kept across its restarts (Vertex restarts a worker "with the same hostname"), so the
replicas reach each other on loopback.

`pythonPackageSpec` jobs with more than one replica also get MASTER_ADDR (the primary's address),
MASTER_PORT (the primary's port), WORLD_SIZE (the replicas of pools 0 and 1) and RANK (0 for the
primary, then pool 1's replicas in order), as AI Platform Training documents for its prebuilt
PyTorch containers ("sets environment variables like WORLD_SIZE, RANK, MASTER_ADDR, and
MASTER_PORT on each node"; the master is "the VM with rank 0",
https://cloud.google.com/ai-platform/training/docs/distributed-pytorch). Vertex documents only
CLUSTER_SPEC for custom containers ("you must parse CLUSTER_SPEC"), so `containerSpec` replicas
do not get them. Which pools count, and that the port is the primary's, are assumed.

Each replica starts in its own session, so a preemption or a shutdown signals its whole process
group, as tearing down a container would.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from google.cloud import aiplatform_v1

from devstack.vertex.logs import PRIMARY_REPLICA

# Variables Vertex owns: never inherited from the emulator's own environment.
_VERTEX_VARIABLES = (
    "AIP_MODEL_DIR",
    "AIP_CHECKPOINT_DIR",
    "AIP_TENSORBOARD_LOG_DIR",
    "CLOUD_ML_JOB_ID",
    "CLUSTER_SPEC",
    "TF_CONFIG",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
)
# Worker pool position -> TF_CONFIG task type; evaluators (pool 3) are not part of its cluster.
_TF_TASK_TYPES = ("chief", "worker", "ps", "evaluator")
_TF_CLUSTER_POOLS = 3
# Pools whose replicas are PyTorch ranks: the primary and the workers (not parameter or
# reduction servers, not evaluators).
_RANKED_POOLS = 2
_CLUSTER_PORT = 2222
LOOPBACK = "127.0.0.1"

OutputCallback = Callable[[str, str], None]


class UnrunnableJob(Exception):
    """The job is valid for the API but cannot be run as local processes."""


@dataclass(frozen=True)
class WorkerLaunch:
    argv: tuple[str, ...]
    env: Mapping[str, str]
    image_uri: str
    replica: str = PRIMARY_REPLICA  # the log task_name, workerpool<P>-<i>


def replica_name(pool: int, index: int) -> str:
    return f"workerpool{pool}-{index}"


def replica_counts(job: aiplatform_v1.CustomJob) -> list[int]:
    """Replicas per worker pool, by position; an empty pool `{}` has none, the primary pool one."""
    return [
        max(int(pool.replica_count), 1 if position == 0 else 0)
        for position, pool in enumerate(job.job_spec.worker_pool_specs)
    ]


def build_launches(
    job: aiplatform_v1.CustomJob, job_id: str, free_ports: Callable[[int], list[int]] | None = None
) -> list[WorkerLaunch]:
    """One launch per replica, the primary first, then each pool's replicas in order."""
    counts = replica_counts(job)
    names = [replica_name(position, index) for position, count in enumerate(counts) for index in range(count)]
    ports = dict(zip(names, (free_ports or _free_ports)(len(names)), strict=True)) if len(names) > 1 else {}
    inherited = _inherited_environment()
    launches = []
    for position, count in enumerate(counts):
        if not count:
            continue
        argv, image_uri, spec_env = _pool_command(job.job_spec.worker_pool_specs[position])
        for index in range(count):
            env = {**inherited, **spec_env, **vertex_environment(job, job_id, position, index, ports)}
            launches.append(WorkerLaunch(argv, env, image_uri, replica_name(position, index)))
    return launches


def _pool_command(pool: aiplatform_v1.WorkerPoolSpec) -> tuple[tuple[str, ...], str, dict[str, str]]:
    if "python_package_spec" in pool:
        package = pool.python_package_spec
        argv = (sys.executable, "-m", package.python_module, *package.args)
        return argv, package.executor_image_uri, {variable.name: variable.value for variable in package.env}
    container = pool.container_spec
    if not container.command:
        raise UnrunnableJob(
            f"The emulator cannot run the default entrypoint of image {container.image_uri}: "
            "set containerSpec.command, or use pythonPackageSpec."
        )
    argv = (*container.command, *container.args)
    return argv, container.image_uri, {variable.name: variable.value for variable in container.env}


def _free_ports(count: int) -> list[int]:
    """Ports free on loopback now, all different (each held until every one is picked)."""
    with contextlib.ExitStack() as held:
        probes = [held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for probe in probes:
            probe.bind((LOOPBACK, 0))
        return [int(probe.getsockname()[1]) for probe in probes]


def _inherited_environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name not in _VERTEX_VARIABLES}


def vertex_environment(
    job: aiplatform_v1.CustomJob,
    job_id: str,
    pool: int = 0,
    index: int = 0,
    ports: Mapping[str, int] | None = None,
) -> dict[str, str]:
    """What Vertex sets on replica `index` of worker pool `pool`; `ports` (replica name -> port)
    gives a multi-replica job's loopback addresses."""
    spec_json = json.loads(
        aiplatform_v1.CustomJobSpec.to_json(
            job.job_spec, use_integers_for_enums=False, always_print_fields_with_no_presence=False
        )
    )
    cluster = _cluster_addresses(job, job_id, ports or {})
    env = {
        "CLOUD_ML_JOB_ID": job_id,
        "CLUSTER_SPEC": json.dumps(
            {
                "cluster": cluster,
                "environment": "cloud",
                "task": {"type": f"workerpool{pool}", "index": index},
                "job": spec_json,
            }
        ),
    }
    replicas = sum(len(addresses) for addresses in cluster.values())
    if replicas > 1:
        env["TF_CONFIG"] = json.dumps(_tf_config(cluster, spec_json, pool, index))
        if pool < _RANKED_POOLS and "python_package_spec" in job.job_spec.worker_pool_specs[pool]:
            env.update(_torch_variables(cluster, pool, index))
    base = job.job_spec.base_output_directory.output_uri_prefix
    if base:
        base = base.rstrip("/")
        env["AIP_MODEL_DIR"] = f"{base}/model/"
        env["AIP_CHECKPOINT_DIR"] = f"{base}/checkpoints/"
        env["AIP_TENSORBOARD_LOG_DIR"] = f"{base}/logs/"
    return env


def _cluster_addresses(job: aiplatform_v1.CustomJob, job_id: str, ports: Mapping[str, int]) -> dict[str, list[str]]:
    # Without ports: host names shaped like Vertex's ("cmle-training-workerpool0-<hash>-0:2222").
    suffix = hashlib.sha1(job_id.encode()).hexdigest()[:10]
    cluster: dict[str, list[str]] = {}
    for position, count in enumerate(replica_counts(job)):
        if count:
            cluster[f"workerpool{position}"] = [
                f"{LOOPBACK}:{ports[replica_name(position, index)]}"
                if ports
                else f"cmle-training-workerpool{position}-{suffix}-{index}:{_CLUSTER_PORT}"
                for index in range(count)
            ]
    return cluster


def _tf_config(cluster: Mapping[str, list[str]], spec_json: Any, pool: int, index: int) -> dict[str, Any]:
    tf_cluster = {
        _TF_TASK_TYPES[position]: cluster[f"workerpool{position}"]
        for position in range(_TF_CLUSTER_POOLS)
        if f"workerpool{position}" in cluster
    }
    return {
        "cluster": tf_cluster,
        "environment": "cloud",
        "task": {"type": _TF_TASK_TYPES[pool], "index": index},
        "job": spec_json,
    }


def _torch_variables(cluster: Mapping[str, list[str]], pool: int, index: int) -> dict[str, str]:
    host, _, port = cluster["workerpool0"][0].rpartition(":")
    ranked = [len(cluster.get(f"workerpool{position}", [])) for position in range(_RANKED_POOLS)]
    return {
        "MASTER_ADDR": host,
        "MASTER_PORT": port,
        "WORLD_SIZE": str(sum(ranked)),
        "RANK": str(sum(ranked[:pool]) + index),
    }


class WorkerProcess:
    """One run of one replica: the process, its output pumps, and its shutdown."""

    def __init__(self, launch: WorkerLaunch, on_output: OutputCallback) -> None:
        self._launch = launch
        self._on_output = on_output
        self._process: subprocess.Popen[bytes] | None = None
        self._pumps: list[threading.Thread] = []

    @property
    def pid(self) -> int:
        assert self._process is not None, "worker not started"
        return self._process.pid

    def start(self) -> None:
        """Spawns the worker; raises OSError when the executable cannot be run."""
        self._process = subprocess.Popen(
            list(self._launch.argv),
            env=dict(self._launch.env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        for stream_name, pipe in (
            ("stdout", self._process.stdout),
            ("stderr", self._process.stderr),
        ):
            assert pipe is not None
            pump = threading.Thread(target=self._pump, args=(stream_name, pipe), name=f"pump-{self.pid}", daemon=True)
            pump.start()
            self._pumps.append(pump)

    def poll(self) -> int | None:
        assert self._process is not None, "worker not started"
        return self._process.poll()

    def wait(self) -> int:
        assert self._process is not None, "worker not started"
        return self._process.wait()

    def terminate(self, grace_seconds: float) -> list[str]:
        """SIGTERM the group, SIGKILL it after the grace period (at once, with no SIGTERM, for a
        grace of 0: a reclaim without notice); returns the signals sent."""
        return stop_together([self], grace_seconds)[0]

    def _wait(self, timeout: float | None) -> int:
        assert self._process is not None, "worker not started"
        return self._process.wait(timeout=timeout)

    def tear_down(self) -> None:
        """Kills whatever the worker left in its group: the container is gone once it exits."""
        self._kill_all()

    def _kill_all(self) -> None:
        """SIGKILL the group and every process the worker started in a session of its own (torchrun
        starts each of its workers so), as a container's end takes every process in it. Those are
        found only while the worker runs: afterwards they belong to no one, and its pid may be
        another process's."""
        for pid in _descendants(self.pid) if self.poll() is None else []:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self._signal_group(signal.SIGKILL)

    def join_output(self, timeout: float) -> None:
        for pump in self._pumps:
            pump.join(timeout)

    def _signal_group(self, signum: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
            os.killpg(self.pid, signum)

    def _pump(self, stream_name: str, pipe: IO[bytes]) -> None:
        with pipe:
            for raw in pipe:
                self._on_output(stream_name, raw.decode("utf-8", errors="replace").rstrip("\r\n"))


def stop_together(workers: list[WorkerProcess], grace_seconds: float) -> list[list[str]]:
    """Stops several workers at once, as VMs reclaimed together: SIGTERM to each group, one shared
    grace period, then SIGKILL to whichever group is still there (SIGKILL at once for a grace of 0).
    Returns the signals sent to each worker, in order."""
    sent: list[list[str]] = [[] for _ in workers]
    if grace_seconds > 0:
        for worker, signals in zip(workers, sent, strict=True):
            if worker.poll() is None:  # one that has exited already is sent nothing
                worker._signal_group(signal.SIGTERM)
                signals.append("SIGTERM")
        deadline = time.monotonic() + grace_seconds
        for worker in workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker._wait(max(deadline - time.monotonic(), 0.0))
    for worker, signals in zip(workers, sent, strict=True):
        if worker.poll() is None:
            worker._kill_all()
            signals.append("SIGKILL")
            worker._wait(None)
        worker.tear_down()
    return sent


def _descendants(pid: int) -> list[int]:
    """The processes below `pid`, from /proc (none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(FileNotFoundError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):  # gone meanwhile
                continue
            children.setdefault(parent, []).append(int(entry))
    found, frontier = [], [pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found += below
        frontier += below
    return found
