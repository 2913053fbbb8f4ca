"""How the emulator runs worker pool 0, replica 0 of a CustomJob as a local process.

The argv comes from `containerSpec.command + args`, or `python -m pythonPackageSpec.pythonModule
args` with this interpreter; the image URI is recorded, never pulled, and nothing goes through a
shell. The environment is the emulator's own (so PUBSUB_EMULATOR_HOST, STORAGE_EMULATOR_HOST and
PYTHONPATH reach the trainer), then the spec's `env`, then what Vertex sets (documented in
"Prepare training code" and "Distributed training"): AIP_MODEL_DIR, AIP_CHECKPOINT_DIR and
AIP_TENSORBOARD_LOG_DIR under `baseOutputDirectory`, CLOUD_ML_JOB_ID, CLUSTER_SPEC, and TF_CONFIG
for distributed jobs only (Vertex does not set it for single-replica jobs).

Each worker starts in its own session, so a preemption or a shutdown signals its whole process
group, as tearing down a container would.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from google.cloud import aiplatform_v1

# Variables Vertex owns: never inherited from the emulator's own environment.
_VERTEX_VARIABLES = (
    "AIP_MODEL_DIR",
    "AIP_CHECKPOINT_DIR",
    "AIP_TENSORBOARD_LOG_DIR",
    "CLOUD_ML_JOB_ID",
    "CLUSTER_SPEC",
    "TF_CONFIG",
)
# Worker pool position -> TF_CONFIG task type; pool 3 (evaluators) is not part of the cluster.
_TF_TASK_TYPES = ("chief", "worker", "ps")
_CLUSTER_PORT = 2222

OutputCallback = Callable[[str, str], None]


class UnrunnableJob(Exception):
    """The job is valid for the API but cannot be run as a local process."""


@dataclass(frozen=True)
class WorkerLaunch:
    argv: tuple[str, ...]
    env: Mapping[str, str]
    image_uri: str


def build_launch(job: aiplatform_v1.CustomJob, job_id: str) -> WorkerLaunch:
    pool = job.job_spec.worker_pool_specs[0]
    if "python_package_spec" in pool:
        package = pool.python_package_spec
        argv = (sys.executable, "-m", package.python_module, *package.args)
        image_uri, spec_env = package.executor_image_uri, package.env
    else:
        container = pool.container_spec
        if not container.command:
            raise UnrunnableJob(
                f"The emulator cannot run the default entrypoint of image {container.image_uri}: "
                "set containerSpec.command, or use pythonPackageSpec."
            )
        argv = (*container.command, *container.args)
        image_uri, spec_env = container.image_uri, container.env
    env = {
        **_inherited_environment(),
        **{variable.name: variable.value for variable in spec_env},
        **vertex_environment(job, job_id),
    }
    return WorkerLaunch(argv=argv, env=env, image_uri=image_uri)


def _inherited_environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name not in _VERTEX_VARIABLES}


def vertex_environment(job: aiplatform_v1.CustomJob, job_id: str) -> dict[str, str]:
    spec_json = json.loads(
        aiplatform_v1.CustomJobSpec.to_json(
            job.job_spec, use_integers_for_enums=False, always_print_fields_with_no_presence=False
        )
    )
    cluster = _cluster_addresses(job, job_id)
    env = {
        "CLOUD_ML_JOB_ID": job_id,
        "CLUSTER_SPEC": json.dumps(
            {
                "cluster": cluster,
                "environment": "cloud",
                "task": {"type": "workerpool0", "index": 0},
                "job": spec_json,
            }
        ),
    }
    if sum(len(addresses) for addresses in cluster.values()) > 1:
        env["TF_CONFIG"] = json.dumps(_tf_config(cluster, spec_json))
    base = job.job_spec.base_output_directory.output_uri_prefix
    if base:
        base = base.rstrip("/")
        env["AIP_MODEL_DIR"] = f"{base}/model/"
        env["AIP_CHECKPOINT_DIR"] = f"{base}/checkpoints/"
        env["AIP_TENSORBOARD_LOG_DIR"] = f"{base}/logs/"
    return env


def _cluster_addresses(job: aiplatform_v1.CustomJob, job_id: str) -> dict[str, list[str]]:
    # Host names shaped like Vertex's ("cmle-training-workerpool0-<hash>-0:2222").
    suffix = hashlib.sha1(job_id.encode()).hexdigest()[:10]
    cluster: dict[str, list[str]] = {}
    for index, pool in enumerate(job.job_spec.worker_pool_specs):
        replicas = max(int(pool.replica_count), 1 if index == 0 else 0)
        if replicas:
            cluster[f"workerpool{index}"] = [
                f"cmle-training-workerpool{index}-{suffix}-{replica}:{_CLUSTER_PORT}" for replica in range(replicas)
            ]
    return cluster


def _tf_config(cluster: Mapping[str, list[str]], spec_json: Any) -> dict[str, Any]:
    tf_cluster = {
        task_type: cluster[f"workerpool{index}"]
        for index, task_type in enumerate(_TF_TASK_TYPES)
        if f"workerpool{index}" in cluster
    }
    return {
        "cluster": tf_cluster,
        "environment": "cloud",
        "task": {"type": "chief", "index": 0},
        "job": spec_json,
    }


class WorkerProcess:
    """One run of the primary replica: the process, its output pumps, and its shutdown."""

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
        assert self._process is not None, "worker not started"
        if grace_seconds <= 0:
            self._signal_group(signal.SIGKILL)
            self._process.wait()
            self.tear_down()
            return ["SIGKILL"]
        sent = ["SIGTERM"]
        self._signal_group(signal.SIGTERM)
        try:
            self._process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            sent.append("SIGKILL")
            self._signal_group(signal.SIGKILL)
            self._process.wait()
        self.tear_down()
        return sent

    def tear_down(self) -> None:
        """Kills whatever the worker left in its group: the container is gone once it exits."""
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
