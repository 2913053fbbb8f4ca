"""The demo's scenario: seven job requests (one of them on two nodes) and one retraining trigger
("new data -> retrain"), each with the outcome and attempts it must end with."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

MACHINE_TYPE = "a2-highgpu-1g"
ACCELERATOR = {"acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
EXECUTOR_IMAGE = "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest"
ALLOWED_IMAGE_PREFIX = "us-docker.pkg.dev/vertex-ai/"
TRAINER_MODULE = "devstack.trainer"
WORKER_MODULE = "devstack.demo.worker"  # the two-node scenario's stand-in worker
PRIMARY_REPLICA, WORKER_REPLICA = "workerpool0-0", "workerpool1-0"
STEPS = 1000
CHECKPOINT_EVERY = 50
STEP_SECONDS = 0.01
FAIL_AT_STEP = 120
VERTEX_MAX_PREEMPTIONS = 7  # six restarts, then the seventh preemption fails the job (STOCKOUT)
TRIGGER_WINDOW_SECONDS = 5  # the new-data trigger's coalesce_seconds

SUCCEEDED, FAILED, REJECTED = "succeeded", "failed", "rejected"


@dataclass(frozen=True)
class ExpectedAttempt:
    strategy: str
    preemptions: int  # as spotjobs counts them: one per reclaimed VM
    # A job of several replicas: the VMs reclaimed per replica, as the emulator did it, and how
    # many times each replica started.
    replica_preemptions: Mapping[str, int] | None = None
    replica_runs: Mapping[str, int] | None = None


@dataclass(frozen=True)
class Scenario:
    key: str
    request_id: str
    description: str
    outcome: str  # SUCCEEDED | FAILED | REJECTED
    attempts: tuple[ExpectedAttempt, ...]
    body: bytes
    publish_count: int = 1
    plan: Mapping[str, Any] | None = None  # a Vertex emulator preemption plan
    # A retraining trigger instead of a published request: its definition, and how many objects
    # land in the stack's data bucket in one window. Its request id (trg-<name>-<window>) is known
    # once the objects land (`with_request_id`).
    trigger: Mapping[str, Any] | None = None
    objects: int = 0
    # A job of several replicas: what each replica runs, by replica name (shown in the report).
    replica_roles: Mapping[str, str] | None = None
    # A replica the demo reclaims itself (the emulator binds one plan per job), once the primary
    # has restarted after the plan's preemption and committed a checkpoint since (`runner`).
    reclaim_after_restart: str | None = None

    def expected_json(self) -> dict[str, Any]:
        expected = {
            "outcome": self.outcome,
            "description": self.description,
            "attempts": [_expected_attempt_json(a) for a in self.attempts],
        }
        if self.replica_roles is not None:
            expected["replica_roles"] = dict(self.replica_roles)
        if self.trigger is not None:
            expected["manifest_objects"] = self.objects
        return expected

    def with_request_id(self, request_id: str) -> Scenario:
        return replace(self, request_id=request_id)


def _expected_attempt_json(attempt: ExpectedAttempt) -> dict[str, Any]:
    expected: dict[str, Any] = {"strategy": attempt.strategy, "preemptions": attempt.preemptions}
    if attempt.replica_preemptions is not None:
        expected["replica_preemptions"] = dict(attempt.replica_preemptions)
    if attempt.replica_runs is not None:
        expected["replica_runs"] = dict(attempt.replica_runs)
    return expected


def trainer_job(display_name: str, *, data_seed: int, fail_at_step: int | None = None) -> dict[str, Any]:
    """A CustomJob (REST JSON, as a user would POST it) that runs the demo trainer."""
    args = [
        "--steps",
        str(STEPS),
        "--checkpoint-every",
        str(CHECKPOINT_EVERY),
        "--step-seconds",
        str(STEP_SECONDS),
        "--seed",
        str(data_seed),
    ]
    if fail_at_step is not None:
        args += ["--fail-at-step", str(fail_at_step)]
    return {
        "displayName": display_name,
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": MACHINE_TYPE, **ACCELERATOR},
                    "replicaCount": "1",
                    "pythonPackageSpec": {
                        "executorImageUri": EXECUTOR_IMAGE,
                        "packageUris": ["gs://spotjobs-demo-packages/spotjobs-demo-trainer-0.1.tar.gz"],
                        "pythonModule": TRAINER_MODULE,
                        "args": args,
                    },
                }
            ]
        },
    }


def two_node_job(display_name: str, *, data_seed: int) -> dict[str, Any]:
    """The demo trainer on the primary and the stand-in worker (`devstack.demo.worker`) on a second
    VM of the same machine type. A reclaimed replica restarts the whole job
    (`restartJobOnWorkerRestart`, documented), so the primary saves on SIGTERM and resumes; without
    it the emulator's default restarts the worker alone and nothing documented would tell spotjobs."""
    job = trainer_job(display_name, data_seed=data_seed)
    primary = job["jobSpec"]["workerPoolSpecs"][0]
    worker = {
        "machineSpec": dict(primary["machineSpec"]),
        "replicaCount": "1",
        "pythonPackageSpec": {**primary["pythonPackageSpec"], "pythonModule": WORKER_MODULE, "args": []},
    }
    job["jobSpec"]["workerPoolSpecs"].append(worker)
    job["jobSpec"]["scheduling"] = {"restartJobOnWorkerRestart": True}
    return job


def _invalid_job() -> dict[str, Any]:
    """A request breaking several policy rules at once, so the rejection lists every reason."""
    return {
        "displayName": "crypto-miner",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "n1-standard-96"},
                    "replicaCount": "64",
                    "containerSpec": {"imageUri": "docker.io/someone/miner:latest"},
                }
            ],
            "scheduling": {"strategy": "STANDARD"},
        },
    }


def build_scenarios(seed: int) -> list[Scenario]:
    rng = random.Random(seed)

    def request_id(key: str) -> str:
        return f"demo-s{seed}-{key}"

    def plan(key: str, preemptions: int, most_checkpoints: int) -> dict[str, Any]:
        # Keyed to the trainer's progress, not to time: each run is preempted right after its
        # k-th committed checkpoint, so every restart resumes from one however loaded the machine
        # (a time-keyed plan on a slow machine preempts before the first). A run trains about
        # k * CHECKPOINT_EVERY steps, so every planned preemption lands before training could
        # finish (a unit test holds this for all seeds).
        return {
            "labels": {"spotjobs-request-id": request_id(key), "spotjobs-attempt": "1"},
            "preemptions": preemptions,
            "after_checkpoints": rng.randint(1, most_checkpoints),
        }

    def envelope(key: str, **extra: Any) -> bytes:
        job = trainer_job(f"demo-{key}", data_seed=rng.randrange(10**6), **extra.pop("job", {}))
        return json.dumps({"request_id": request_id(key), "custom_job": job, **extra}).encode()

    few = rng.randint(2, 4)
    scenarios = [
        Scenario(
            "few-preemptions",
            request_id("few-preemptions"),
            f"preempted {few} times, resumes each time, succeeds within attempt 1",
            SUCCEEDED,
            (ExpectedAttempt("SPOT", few),),
            envelope("few-preemptions"),
            plan=plan("few-preemptions", few, 2),
        ),
        Scenario(
            "requeued",
            request_id("requeued"),
            "preempted 7 times (past Vertex's 6 restarts), re-queued, finishes on attempt 2 from its checkpoint",
            SUCCEEDED,
            (ExpectedAttempt("SPOT", VERTEX_MAX_PREEMPTIONS), ExpectedAttempt("SPOT", 0)),
            envelope("requeued", max_attempts=3),
            plan=plan("requeued", VERTEX_MAX_PREEMPTIONS, 1),
        ),
        Scenario(
            "fallback",
            request_id("fallback"),
            "preempted 7 times on Spot, falls back to STANDARD capacity for attempt 2",
            SUCCEEDED,
            (ExpectedAttempt("SPOT", VERTEX_MAX_PREEMPTIONS), ExpectedAttempt("STANDARD", 0)),
            envelope("fallback", max_attempts=3, fallback={"after_spot_attempts": 1, "strategy": "STANDARD"}),
            plan=plan("fallback", VERTEX_MAX_PREEMPTIONS, 1),
        ),
        Scenario(
            "duplicate",
            request_id("duplicate"),
            "published twice; de-duplicated to one job",
            SUCCEEDED,
            (ExpectedAttempt("SPOT", 0),),
            envelope("duplicate"),
            publish_count=2,
        ),
        Scenario(
            "invalid",
            request_id("invalid"),
            "breaks the request policy; rejected with every reason and an alert, no job",
            REJECTED,
            (),
            json.dumps({"request_id": request_id("invalid"), "custom_job": _invalid_job()}).encode(),
        ),
        Scenario(
            "code-bug",
            request_id("code-bug"),
            f"the training code fails at step {FAIL_AT_STEP}; an alert, no re-queue",
            FAILED,
            (ExpectedAttempt("SPOT", 0),),
            envelope("code-bug", job={"fail_at_step": FAIL_AT_STEP}),
        ),
    ]
    # Drawn after the six, so adding it changed none of them.
    objects = rng.randint(20, 40)
    name = f"demo-s{seed}-data"
    definition = {
        "schema_version": 1,
        "name": name,
        "description": "new data in the data bucket -> one retraining request per window",
        "source": {"gcs": {"bucket": "spotjobs-data", "prefix": f"{name}/incoming/"}},
        "coalesce_seconds": TRIGGER_WINDOW_SECONDS,
        "request": {
            "custom_job": trainer_job("demo-new-data-{window_id}", data_seed=rng.randrange(10**6)),
            "max_attempts": 2,
        },
    }
    scenarios.append(
        Scenario(
            "new-data",
            f"trg-{name}",
            f"a burst of {objects} objects lands in the data bucket; one request trains on its manifest",
            SUCCEEDED,
            (ExpectedAttempt("SPOT", 0),),
            json.dumps(definition).encode(),
            trigger=definition,
            objects=objects,
        )
    )
    # Drawn after the trigger's, so adding it changed none of the others.
    scenarios.append(
        Scenario(
            "two-node",
            request_id("two-node"),
            "two nodes; the worker's VM is reclaimed, then the primary's; each time the whole job "
            "restarts and resumes from the primary's checkpoint",
            SUCCEEDED,
            # Every reclaim restarts both replicas: three starts each.
            (
                ExpectedAttempt(
                    "SPOT", 2, {PRIMARY_REPLICA: 1, WORKER_REPLICA: 1}, {PRIMARY_REPLICA: 3, WORKER_REPLICA: 3}
                ),
            ),
            json.dumps(
                {
                    "request_id": request_id("two-node"),
                    "custom_job": two_node_job("demo-two-node", data_seed=rng.randrange(10**6)),
                }
            ).encode(),
            plan={**plan("two-node", 1, 2), "replica": WORKER_REPLICA},
            replica_roles={PRIMARY_REPLICA: "demo trainer", WORKER_REPLICA: "stand-in worker, trains nothing"},
            reclaim_after_restart=PRIMARY_REPLICA,
        )
    )
    return scenarios
