"""The Vertex AI emulator against the official aiplatform_v1 REST client, raw HTTP, real worker
processes and Google's Pub/Sub emulator (for the log sink)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import aiplatform_v1

from devstack.vertex.emulator import VertexEmulator
from devstack.vertex.modes import ReplicaModes
from tests.support.vertex_emulator import (
    LOCATION,
    PARENT,
    PROJECT,
    TERMINAL,
    EventsTopic,
    State,
    client_for,
    control,
    create,
    details,
    http_json,
    job_id,
    wait_for,
    wait_for_state,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

# A stand-in trainer. It records each start, each SIGTERM and each clean exit (one JSON line per
# event, appended atomically) to WORKER_RECORD, dumps its environment to WORKER_ENV_OUT, writes
# plain, stderr and structured lines, works for WORKER_SECONDS, then exits with WORKER_EXIT.
WORKER_SOURCE = r"""
import json, os, signal, sys, time

def note(event):
    fd = os.open(os.environ["WORKER_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (json.dumps({"event": event, "pid": os.getpid()}) + "\n").encode())
    os.close(fd)

def on_sigterm(signum, frame):
    note("sigterm")
    if os.environ.get("WORKER_IGNORE_SIGTERM") != "1":
        sys.exit(143)

signal.signal(signal.SIGTERM, on_sigterm)
note("start")
if os.environ.get("WORKER_ENV_OUT"):
    with open(os.environ["WORKER_ENV_OUT"], "w") as out:
        json.dump(dict(os.environ), out)
print("worker says hello", flush=True)
print("worker warns on stderr", file=sys.stderr, flush=True)
print(json.dumps({"severity": "WARNING", "message": "structured line"}), flush=True)
for stream, text in json.loads(os.environ.get("WORKER_LINES", "[]")):
    print(text, file=getattr(sys, stream), flush=True)
deadline = time.monotonic() + float(os.environ.get("WORKER_SECONDS", "0"))
while time.monotonic() < deadline:
    time.sleep(0.02)
note("exit")
sys.exit(int(os.environ.get("WORKER_EXIT", "0")))
"""


# ---- helpers ----


@pytest.fixture(scope="module")
def worker_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("worker") / "worker.py"
    path.write_text(WORKER_SOURCE)
    return path


class Worker:
    """One test trainer's command, environment and record of what happened to its processes."""

    def __init__(self, script: Path, directory: Path, **env: str) -> None:
        self.record = directory / f"record-{uuid.uuid4().hex[:8]}.jsonl"
        # -S (no site import): the trainer installs its SIGTERM handler within milliseconds, well
        # before the earliest preemption a test schedules.
        self.command = [sys.executable, "-S", str(script)]
        self.env = {"WORKER_RECORD": str(self.record), **env}

    def events(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def pids(self, event: str) -> list[int]:
        return [item["pid"] for item in self.events() if item["event"] == event]


@pytest.fixture
def make_worker(worker_script: Path, tmp_path: Path) -> Callable[..., Worker]:
    return lambda **env: Worker(worker_script, tmp_path, **env)


def job_body(
    worker: Worker,
    *,
    labels: dict[str, str] | None = None,
    strategy: str = "SPOT",
    base_output: str | None = None,
    extra_pools: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A CustomJob in REST JSON, as the Vertex docs show it."""
    job_spec: dict[str, Any] = {
        "workerPoolSpecs": [
            {
                "machineSpec": {"machineType": "a2-highgpu-1g"},
                "replicaCount": 1,
                "containerSpec": {
                    "imageUri": "us-docker.pkg.dev/spotjobs/trainer:latest",
                    "command": worker.command,
                    "env": [{"name": name, "value": value} for name, value in worker.env.items()],
                },
            },
            *(extra_pools or []),
        ],
        "scheduling": {"strategy": strategy},
    }
    if base_output is not None:
        job_spec["baseOutputDirectory"] = {"outputUriPrefix": base_output}
    return {"displayName": "emulator-test", "labels": labels or {}, "jobSpec": job_spec}


def pool_spec(worker: Worker, *, replicas: int) -> dict[str, Any]:
    """A worker pool after the first, running `worker`'s command."""
    return {
        "machineSpec": {"machineType": "a2-highgpu-1g"},
        "replicaCount": replicas,
        "containerSpec": {
            "imageUri": "us-docker.pkg.dev/spotjobs/trainer:latest",
            "command": worker.command,
            "env": [{"name": name, "value": value} for name, value in worker.env.items()],
        },
    }


def pid_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.fixture
def emulator(make_emulator: Callable[..., VertexEmulator]) -> VertexEmulator:
    return make_emulator()


@pytest.fixture
def client(emulator: VertexEmulator) -> aiplatform_v1.JobServiceClient:
    return client_for(emulator)


# ---- the REST surface ----


def test_official_client_creates_gets_lists_by_label_and_cancels(
    emulator: VertexEmulator,
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
) -> None:
    long_worker = make_worker(WORKER_SECONDS="60")
    wanted = create(client, job_body(long_worker, labels={"spotjobs-request-id": "r1", "spotjobs-attempt": "1"}))
    other = create(
        client,
        job_body(make_worker(), labels={"spotjobs-request-id": "r1", "spotjobs-attempt": "2"}),
    )

    assert wanted.name.startswith(f"{PARENT}/customJobs/")
    assert job_id(wanted.name).isdigit()
    assert wanted.state == State.JOB_STATE_QUEUED
    assert wanted.create_time and wanted.update_time
    assert wanted.job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
    running = wait_for_state(client, wanted.name, {State.JOB_STATE_RUNNING})
    assert running.start_time and not running.end_time

    for filter_text in (
        'labels.spotjobs-request-id="r1" AND labels.spotjobs-attempt="1"',
        "labels.spotjobs-request-id=r1 AND labels.spotjobs-attempt=1",
    ):
        found = client.list_custom_jobs(request={"parent": PARENT, "filter": filter_text})
        assert [job.name for job in found] == [wanted.name]
    both = client.list_custom_jobs(request={"parent": PARENT, "filter": 'labels.spotjobs-request-id="r1"'})
    assert {job.name for job in both} == {wanted.name, other.name}

    client.cancel_custom_job(name=wanted.name)
    assert client.get_custom_job(name=wanted.name).state in {
        State.JOB_STATE_CANCELLING,
        State.JOB_STATE_CANCELLED,
    }
    cancelled = wait_for_state(client, wanted.name, {State.JOB_STATE_CANCELLED})
    assert cancelled.error.code == 1
    assert cancelled.end_time
    [pid] = long_worker.pids("start")
    assert long_worker.pids("sigterm") == [pid]
    assert wait_for(lambda: pid_gone(pid), what="the cancelled worker to be gone")
    with pytest.raises(exceptions.BadRequest, match="Cannot cancel"):
        client.cancel_custom_job(name=wanted.name)
    with pytest.raises(exceptions.NotFound):
        client.get_custom_job(name=f"{PARENT}/customJobs/123")


def test_list_pages_and_filters_on_state(
    client: aiplatform_v1.JobServiceClient, make_worker: Callable[..., Worker]
) -> None:
    names = [create(client, job_body(make_worker(), labels={"batch": "b1"})).name for _ in range(5)]
    create(client, job_body(make_worker(), labels={"batch": "b2"}))
    for name in names:
        wait_for_state(client, name, TERMINAL)

    pager = client.list_custom_jobs(request={"parent": PARENT, "filter": 'labels.batch="b1"', "page_size": 2})
    pages = list(pager.pages)
    assert [len(page.custom_jobs) for page in pages] == [2, 2, 1]
    assert [job.name for page in pages for job in page.custom_jobs] == names[::-1]  # newest first
    succeeded = client.list_custom_jobs(
        request={"parent": PARENT, "filter": 'labels.batch="b1" AND state="JOB_STATE_SUCCEEDED"'}
    )
    assert len(list(succeeded)) == 5
    not_b1 = client.list_custom_jobs(request={"parent": PARENT, "filter": 'labels.batch!="b1"'})
    assert len(list(not_b1)) == 1
    created = client.get_custom_job(name=names[2]).create_time.isoformat().replace("+00:00", "Z")
    newer = client.list_custom_jobs(
        request={
            "parent": PARENT,
            "filter": f'createTime>"{created}" AND labels.batch:* AND NOT labels.batch=b2',
        }
    )
    assert [job.name for job in newer] == names[:2:-1]
    either = client.list_custom_jobs(
        request={"parent": PARENT, "filter": 'displayName:"emulator-*" OR state=JOB_STATE_FAILED'}
    )
    assert len(list(either)) == 6
    for refused in ("create_time>1", 'updateTime>"2026-01-01T00:00:00Z"'):
        with pytest.raises(exceptions.BadRequest, match="Invalid filter"):
            list(client.list_custom_jobs(request={"parent": PARENT, "filter": refused}))


def test_a_curl_style_post_of_the_documented_body_runs_the_job(
    emulator: VertexEmulator, make_worker: Callable[..., Worker]
) -> None:
    worker = make_worker()
    body = {
        "displayName": "docs-example",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "a2-highgpu-1g"},
                    "replicaCount": 1,
                    "containerSpec": {
                        "imageUri": "us-docker.pkg.dev/spotjobs/trainer:latest",
                        "command": worker.command,
                        "env": [{"name": "WORKER_RECORD", "value": str(worker.record)}],
                    },
                }
            ],
            "scheduling": {"strategy": "SPOT"},
        },
    }
    status, created = http_json(f"{emulator.url}/v1/{PARENT}/customJobs", body)

    assert status == 200, created
    assert created["state"] == "JOB_STATE_QUEUED"  # enum names unless the caller asks for ints
    assert created["jobSpec"]["scheduling"]["strategy"] == "SPOT"
    assert created["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == "1"  # int64 as a string

    def finished() -> dict[str, Any] | None:
        _, job = http_json(f"{emulator.url}/v1/{created['name']}")
        return job if job["state"] == "JOB_STATE_SUCCEEDED" else None

    job = wait_for(finished, what="the curl-created job to succeed")
    assert job["startTime"] <= job["endTime"]
    assert "error" not in job
    assert len(worker.pids("exit")) == 1


@pytest.mark.parametrize(
    ("mutate", "named"),
    [
        (lambda body: body.update(jobSpecc={}), "jobSpecc"),
        (
            lambda body: body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"].update(machineTyp="x"),
            "machineTyp",
        ),
        (lambda body: body["jobSpec"]["scheduling"].update(strategy="SPOTTY"), "SPOTTY"),
        (lambda body: body.pop("displayName"), "display_name"),
        (lambda body: body.update(labels={"Request": "r1"}), "labels[Request]"),
    ],
)
def test_an_invalid_body_is_refused_with_400_naming_the_field(
    emulator: VertexEmulator,
    make_worker: Callable[..., Worker],
    mutate: Callable[[dict[str, Any]], Any],
    named: str,
) -> None:
    body = job_body(make_worker())
    mutate(body)

    status, payload = http_json(f"{emulator.url}/v1/{PARENT}/customJobs", body)

    assert status == 400
    assert payload["error"]["code"] == 400
    assert payload["error"]["status"] == "INVALID_ARGUMENT"
    assert named in payload["error"]["message"]
    assert control(emulator, "stats")["jobs"] == 0


def test_requests_for_another_project_are_denied(emulator: VertexEmulator) -> None:
    other = client_for(emulator)
    with pytest.raises(exceptions.Forbidden):  # 403: PERMISSION_DENIED over REST
        list(other.list_custom_jobs(parent=f"projects/someone-else/locations/{LOCATION}"))


def test_job_names_carry_the_project_number_when_configured(
    make_emulator: Callable[..., VertexEmulator], make_worker: Callable[..., Worker]
) -> None:
    emulator = make_emulator(project_number="123456789012")
    client = client_for(emulator)

    job = create(client, job_body(make_worker()))

    assert job.name.startswith(f"projects/123456789012/locations/{LOCATION}/customJobs/")
    by_id = client.get_custom_job(name=f"{PARENT}/customJobs/{job_id(job.name)}")
    assert by_id.name == job.name


# ---- running workers ----


def test_the_worker_gets_vertex_environment_variables(
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPOTJOBS_EMULATOR_PASSTHROUGH", "inherited")
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", "stale-from-the-emulator-environment")
    single = make_worker(WORKER_ENV_OUT=str(tmp_path / "single.json"), TRAINER_FLAG="on")
    distributed = make_worker(WORKER_ENV_OUT=str(tmp_path / "distributed.json"))
    bare = make_worker(WORKER_ENV_OUT=str(tmp_path / "bare.json"))
    worker_pool = pool_spec(make_worker(), replicas=2)
    jobs = [
        create(client, job_body(single, base_output="gs://bucket/requests/r1")),
        create(
            client,
            job_body(distributed, base_output="gs://bucket/requests/r2/", extra_pools=[worker_pool]),
        ),
        create(client, job_body(bare)),
    ]
    for job in jobs:
        assert wait_for_state(client, job.name, TERMINAL).state == State.JOB_STATE_SUCCEEDED
    single_env, distributed_env, bare_env = (
        json.loads((tmp_path / f"{which}.json").read_text()) for which in ("single", "distributed", "bare")
    )

    assert single_env["AIP_CHECKPOINT_DIR"] == "gs://bucket/requests/r1/checkpoints/"
    assert single_env["AIP_MODEL_DIR"] == "gs://bucket/requests/r1/model/"
    assert single_env["AIP_TENSORBOARD_LOG_DIR"] == "gs://bucket/requests/r1/logs/"
    assert single_env["CLOUD_ML_JOB_ID"] == job_id(jobs[0].name)
    assert single_env["TRAINER_FLAG"] == "on"
    assert single_env["SPOTJOBS_EMULATOR_PASSTHROUGH"] == "inherited"
    cluster_spec = json.loads(single_env["CLUSTER_SPEC"])
    assert cluster_spec["task"] == {"type": "workerpool0", "index": 0}
    assert cluster_spec["environment"] == "cloud"
    assert len(cluster_spec["cluster"]["workerpool0"]) == 1
    assert cluster_spec["job"]["scheduling"]["strategy"] == "SPOT"
    assert "TF_CONFIG" not in single_env  # Vertex sets it for distributed jobs only

    assert distributed_env["AIP_CHECKPOINT_DIR"] == "gs://bucket/requests/r2/checkpoints/"
    tf_config = json.loads(distributed_env["TF_CONFIG"])
    assert tf_config["task"] == {"type": "chief", "index": 0}
    assert [len(tf_config["cluster"][kind]) for kind in ("chief", "worker")] == [1, 2]

    assert "AIP_CHECKPOINT_DIR" not in bare_env  # not inherited: Vertex owns it


def test_a_python_package_spec_runs_the_module_with_this_interpreter(
    emulator: VertexEmulator, client: aiplatform_v1.JobServiceClient, tmp_path: Path
) -> None:
    (tmp_path / "emulator_probe_task.py").write_text(
        "import os, sys\nopen(os.environ['PROBE_OUT'], 'w').write(' '.join(sys.argv[1:]))\n"
    )
    body = {
        "displayName": "package",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "a2-highgpu-1g"},
                    "replicaCount": 1,
                    "pythonPackageSpec": {
                        "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch:latest",
                        "packageUris": ["gs://bucket/trainer.tar.gz"],
                        "pythonModule": "emulator_probe_task",
                        "args": ["--epochs", "2"],
                        "env": [
                            {"name": "PYTHONPATH", "value": str(tmp_path)},
                            {"name": "PROBE_OUT", "value": str(tmp_path / "argv.txt")},
                        ],
                    },
                }
            ]
        },
    }

    job = create(client, body)

    assert wait_for_state(client, job.name, TERMINAL).state == State.JOB_STATE_SUCCEEDED
    assert (tmp_path / "argv.txt").read_text() == "--epochs 2"
    seen = details(emulator, job.name)
    assert seen["argv"][:3] == [sys.executable, "-m", "emulator_probe_task"]
    assert seen["image_uri"] == "us-docker.pkg.dev/vertex-ai/training/pytorch:latest"


def test_workers_that_cannot_succeed_fail_the_job_as_vertex_reports_it(
    emulator: VertexEmulator,
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
) -> None:
    failing = create(client, job_body(make_worker(WORKER_EXIT="3")))
    missing = job_body(make_worker())
    missing["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["command"] = ["/nonexistent/trainer"]
    not_runnable = create(client, missing)
    entrypoint_only = job_body(make_worker())
    del entrypoint_only["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["command"]
    image_only = create(client, entrypoint_only)

    failed = wait_for_state(client, failing.name, TERMINAL)
    assert failed.state == State.JOB_STATE_FAILED
    assert failed.error.code == 3
    assert failed.error.message == (
        "The replica workerpool0-0 exited with a non-zero status of 3. Termination reason: Error."
    )
    output = [(item["run"], item["stream"], item["line"]) for item in details(emulator, failing.name)["output"]]
    assert (1, "stdout", "worker says hello") in output
    assert (1, "stderr", "worker warns on stderr") in output
    unrunnable = wait_for_state(client, not_runnable.name, TERMINAL)
    assert unrunnable.state == State.JOB_STATE_FAILED
    assert "non-zero status of 127" in unrunnable.error.message
    no_command = wait_for_state(client, image_only.name, TERMINAL)
    assert no_command.state == State.JOB_STATE_FAILED
    assert "default entrypoint" in no_command.error.message


# ---- Spot preemption ----


def test_rich_a_spot_job_preempted_three_times_goes_back_through_pending_and_succeeds(
    make_emulator: Callable[..., VertexEmulator], make_worker: Callable[..., Worker]
) -> None:
    emulator = make_emulator(signals="rich")  # RUNNING -> PENDING on restart is rich only
    client = client_for(emulator)
    labels = {"spotjobs-request-id": "r3", "spotjobs-attempt": "1"}
    # Registered before the job exists; matched on a subset of its labels.
    plan = control(
        emulator,
        "preemption-plans",
        # Each start preempted once it said hello (its handler set, its start noted): a time after
        # the start would race Python's start-up on a loaded machine.
        {"labels": {"spotjobs-request-id": "r3"}, "preemptions": 3, "after_output": "worker says hello"},
    )
    assert plan["preemptions"] == 3 and plan["after_output"] == "worker says hello"
    worker = make_worker(WORKER_SECONDS="1.2")

    job = create(client, job_body(worker, labels=labels))

    done = wait_for_state(client, job.name, TERMINAL, timeout=30)
    assert done.state == State.JOB_STATE_SUCCEEDED
    starts, terminated = worker.pids("start"), worker.pids("sigterm")
    assert len(starts) == 4, worker.events()
    assert terminated == starts[:3], worker.events()  # every preempted process got SIGTERM...
    assert worker.pids("exit") == starts[3:]
    seen = details(emulator, job.name)
    assert seen["signals"] == [{"run": run, "signal": "SIGTERM"} for run in (1, 2, 3)]  # ...no SIGKILL
    assert seen["preemptions"] == 3
    history = seen["state_history"]
    assert history[:3] == ["JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING"]
    assert history.count("JOB_STATE_PENDING") == 4  # each restart goes back through PENDING
    assert history[-1] == "JOB_STATE_SUCCEEDED"


def test_rich_the_seventh_preemption_fails_the_job_with_stockout_code_8(
    make_emulator: Callable[..., VertexEmulator], make_worker: Callable[..., Worker]
) -> None:
    emulator = make_emulator(signals="rich")  # code 8 is invented, rich only
    client = client_for(emulator)
    control(
        emulator,
        "preemption-plans",
        {"labels": {"spotjobs-request-id": "r7"}, "preemptions": 7, "after_output": "worker says hello"},
    )
    worker = make_worker(WORKER_SECONDS="60")

    job = create(client, job_body(worker, labels={"spotjobs-request-id": "r7"}))

    failed = wait_for_state(client, job.name, TERMINAL, timeout=40)
    assert failed.state == State.JOB_STATE_FAILED
    assert failed.error.code == 8
    assert "STOCKOUT" in failed.error.message
    assert len(worker.pids("start")) == 7, worker.events()
    assert worker.pids("sigterm") == worker.pids("start"), worker.events()
    assert details(emulator, job.name)["preemptions"] == 7


def test_a_spot_capacity_trace_holds_spot_jobs_pending_and_preempts_them_when_it_goes(
    emulator: VertexEmulator,
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
) -> None:
    """The availability trace (invented, opt-in: devstack/vertex/capacity.py). The control
    surface sets it; each change below replaces the trace, so nothing here waits on a tick."""
    control(emulator, "spot-capacity", {"data": [0], "tick_seconds": 3600})
    worker = make_worker(WORKER_SECONDS="60")
    spot = create(client, job_body(worker, labels={"kind": "capacity"}))
    standard = create(client, job_body(make_worker(WORKER_SECONDS="60"), strategy="STANDARD"))
    wait_for_state(client, standard.name, {State.JOB_STATE_RUNNING})  # STANDARD never waits for Spot
    wait_for_state(client, spot.name, {State.JOB_STATE_PENDING})
    assert worker.pids("start") == [] and details(emulator, spot.name)["runs"] == 0

    control(emulator, "spot-capacity", {"data": [1], "tick_seconds": 3600})
    wait_for(lambda: worker.pids("start"), what="the Spot worker to start once capacity is there")
    control(emulator, "spot-capacity", {"data": [0], "tick_seconds": 3600})
    wait_for(lambda: worker.pids("sigterm"), what="the Spot worker's SIGTERM when capacity goes")
    wait_for(lambda: details(emulator, spot.name)["preemptions"] == 1, what="one preemption counted")
    assert len(worker.pids("start")) == 1  # and no restart while there is none
    assert details(emulator, standard.name)["preemptions"] == 0
    assert control(emulator, "spot-capacity")["available"] is False
    control(emulator, "spot-capacity", {"data": []})
    wait_for(lambda: len(worker.pids("start")) == 2, what="the restart once the trace is gone")
    status, payload = http_json(f"{emulator.url}/emulator/v1/spot-capacity", {"data": [2]})
    assert status == 400 and "data" in payload["error"]["message"]


def test_a_capacity_trace_of_one_location_holds_only_that_regions_spot_jobs(
    emulator: VertexEmulator,
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
) -> None:
    """Placement's stack scenarios (docs/placement.md): no Spot in one region, Spot in another."""
    control(emulator, "spot-capacity", {"data": [0], "tick_seconds": 3600, "location": LOCATION})
    held = make_worker(WORKER_SECONDS="60")
    there = make_worker(WORKER_SECONDS="60")
    spot = create(client, job_body(held))
    east = client.create_custom_job(
        parent=f"projects/{PROJECT}/locations/us-east4",
        custom_job=aiplatform_v1.CustomJob.from_json(json.dumps(job_body(there))),
    )
    wait_for(lambda: there.pids("start"), what="the Spot worker in the region with capacity to start")
    wait_for_state(client, spot.name, {State.JOB_STATE_PENDING})
    assert held.pids("start") == [] and control(emulator, "spot-capacity")["available"] is True
    control(emulator, "spot-capacity", {"data": [], "location": LOCATION})
    wait_for(lambda: held.pids("start"), what="the held Spot worker to start once its region's trace is gone")
    client.cancel_custom_job(name=spot.name)
    client.cancel_custom_job(name=east.name)


def test_a_flex_start_job_waits_for_its_capacity_then_runs_without_preemption_or_fails_when_its_wait_runs_out(
    emulator: VertexEmulator,
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
) -> None:
    """FLEX_START as documented (devstack/vertex/flex.py): it waits while its capacity trace (opt-in)
    says 0, then runs, and neither a preemption request nor the Spot trace reclaims it (the
    `flex_preemption` mode never); past maxWaitDuration it fails (`flex_wait_expiry`)."""
    gpu = {"acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
    worker = make_worker(WORKER_SECONDS="60")
    flex = job_body(worker, strategy="FLEX_START")
    flex["jobSpec"]["workerPoolSpecs"][0]["machineSpec"].update(gpu)
    flex["jobSpec"]["scheduling"]["maxWaitDuration"] = "0s"  # waits for ever
    control(emulator, "flex-capacity", {"data": [0], "tick_seconds": 3600, "machine_type": "a2-highgpu-1g"})
    held = create(client, flex)
    wait_for_state(client, held.name, {State.JOB_STATE_PENDING})
    time.sleep(0.5)
    assert worker.pids("start") == [] and details(emulator, held.name)["is_flex_start"] is True
    cancelled = create(client, flex)  # a cancel ends the wait at once
    wait_for_state(client, cancelled.name, {State.JOB_STATE_PENDING})
    client.cancel_custom_job(name=cancelled.name)
    assert wait_for_state(client, cancelled.name, TERMINAL, timeout=5).state == State.JOB_STATE_CANCELLED

    control(emulator, "flex-capacity", {"data": [1], "tick_seconds": 3600, "machine_type": "a2-highgpu-1g"})
    wait_for_state(client, held.name, {State.JOB_STATE_RUNNING})
    wait_for(lambda: worker.pids("start"), what="the FLEX_START worker to start once capacity is there")
    control(emulator, "spot-capacity", {"data": [0], "tick_seconds": 3600})
    control(emulator, "flex-capacity", {"data": [0], "tick_seconds": 3600, "machine_type": "a2-highgpu-1g"})
    status, payload = http_json(f"{emulator.url}/emulator/v1/{held.name}:preempt", {})
    assert status == 400 and "SPOT" in payload["error"]["message"]
    time.sleep(0.5)
    assert worker.pids("sigterm") == [] and details(emulator, held.name)["preemptions"] == 0

    brief = job_body(make_worker(WORKER_SECONDS="60"), strategy="FLEX_START")
    brief["jobSpec"]["workerPoolSpecs"][0]["machineSpec"].update(gpu)
    brief["jobSpec"]["scheduling"]["maxWaitDuration"] = "1s"
    expired = wait_for_state(client, create(client, brief).name, TERMINAL)
    assert expired.state == State.JOB_STATE_FAILED
    wait_for(lambda: client.get_custom_job(name=expired.name).error.code == 8, what="RESOURCE_EXHAUSTED")
    assert "maxWaitDuration" in client.get_custom_job(name=expired.name).error.message

    with pytest.raises(exceptions.BadRequest, match="accelerator_type"):
        create(client, job_body(make_worker(), strategy="FLEX_START"))  # no GPU
    client.cancel_custom_job(name=held.name)


def test_the_flex_start_modes_fail_at_start_end_a_wait_with_stockout_and_preempt_as_spot(
    emulator: VertexEmulator,
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
) -> None:
    """The other readings of what Vertex does not document (devstack/vertex/modes.py, `flex_*`)."""
    control(
        emulator,
        "replica-modes",
        {"flex_requirements": "job_failed", "flex_wait_expiry": "stockout", "flex_preemption": "as_spot"},
    )
    no_gpu = wait_for_state(client, create(client, job_body(make_worker(), strategy="FLEX_START")).name, TERMINAL)
    assert no_gpu.state == State.JOB_STATE_FAILED
    wait_for(lambda: "accelerator_type" in client.get_custom_job(name=no_gpu.name).error.message, what="its error")

    def flex_body(worker: Worker, max_wait: str) -> dict[str, Any]:
        body = job_body(worker, strategy="FLEX_START")
        body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = "NVIDIA_L4"
        body["jobSpec"]["scheduling"]["maxWaitDuration"] = max_wait
        return body

    control(emulator, "flex-capacity", {"data": [0], "tick_seconds": 3600})
    expired = wait_for_state(client, create(client, flex_body(make_worker(), "1s")).name, TERMINAL)
    assert expired.state == State.JOB_STATE_FAILED
    wait_for(lambda: "STOCKOUT" in client.get_custom_job(name=expired.name).error.message, what="STOCKOUT")

    control(emulator, "flex-capacity", {"data": []})
    worker = make_worker(WORKER_SECONDS="60")
    running = create(client, flex_body(worker, "60s"))
    wait_for(lambda: worker.pids("start"), what="the FLEX_START worker to start")
    control(emulator, f"{running.name}:preempt", {})
    wait_for(lambda: len(worker.pids("start")) == 2, what="the preempted FLEX_START worker's restart")
    assert details(emulator, running.name)["preemptions"] == 1
    client.cancel_custom_job(name=running.name)


def test_a_worker_that_ignores_sigterm_is_killed_after_the_grace_period(
    emulator: VertexEmulator,
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
) -> None:
    control(
        emulator,
        "preemption-plans",
        {"labels": {"kind": "stubborn"}, "preemptions": 1, "after_output": "worker says hello"},
    )
    worker = make_worker(WORKER_SECONDS="1.0", WORKER_IGNORE_SIGTERM="1")

    job = create(client, job_body(worker, labels={"kind": "stubborn"}))

    assert wait_for_state(client, job.name, TERMINAL).state == State.JOB_STATE_SUCCEEDED
    first, second = worker.pids("start")
    assert worker.pids("sigterm") == [first]  # SIGTERM first, and it was delivered
    assert worker.pids("exit") == [second]  # the first never got to exit on its own
    assert details(emulator, job.name)["signals"] == [
        {"run": 1, "signal": "SIGTERM"},
        {"run": 1, "signal": "SIGKILL"},
    ]


def test_standard_jobs_are_never_preempted_and_a_seeded_rate_preempts_spot_jobs(
    make_emulator: Callable[..., VertexEmulator], make_worker: Callable[..., Worker]
) -> None:
    # A mean of 0.2 s between preemptions: the SPOT job cannot outlast seven of them.
    emulator = make_emulator(preemption_rate_per_minute=300.0, seed=7)
    client = client_for(emulator)
    spot = create(client, job_body(make_worker(WORKER_SECONDS="60")))
    standard = create(client, job_body(make_worker(WORKER_SECONDS="1.0"), strategy="STANDARD"))

    assert wait_for_state(client, standard.name, TERMINAL).state == State.JOB_STATE_SUCCEEDED
    assert details(emulator, standard.name)["runs"] == 1
    failed = wait_for_state(client, spot.name, TERMINAL, timeout=40)
    assert failed.state == State.JOB_STATE_FAILED
    assert "STOCKOUT" in failed.error.message


def test_a_running_spot_job_can_be_preempted_on_demand(
    emulator: VertexEmulator,
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
) -> None:
    worker = make_worker(WORKER_SECONDS="60")
    spot = create(client, job_body(worker))
    standard = create(client, job_body(make_worker(WORKER_SECONDS="60"), strategy="STANDARD"))
    wait_for_state(client, spot.name, {State.JOB_STATE_RUNNING})
    wait_for_state(client, standard.name, {State.JOB_STATE_RUNNING})
    wait_for(lambda: worker.pids("start"), what="the worker to start")

    control(emulator, f"{spot.name}:preempt", {})

    wait_for(lambda: len(worker.pids("start")) == 2, what="the restart")
    assert worker.pids("sigterm") == worker.pids("start")[:1]
    status, refused = http_json(f"{emulator.url}/emulator/v1/{standard.name}:preempt", {})
    assert status == 400
    assert refused["error"]["status"] == "FAILED_PRECONDITION"
    for job in (spot, standard):
        client.cancel_custom_job(name=job.name)


# ---- fault injection, capacity, reset ----


def test_injected_create_faults_surface_as_the_matching_client_exceptions(
    emulator: VertexEmulator,
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
) -> None:
    body = job_body(make_worker())
    control(emulator, "faults", {"method": "create", "status": 503, "count": 2})
    for _ in range(2):
        with pytest.raises(exceptions.ServiceUnavailable):
            create(client, body)
    for status, raised in (
        (429, exceptions.TooManyRequests),
        (500, exceptions.InternalServerError),
    ):
        control(emulator, "faults", {"method": "create", "status": status})
        with pytest.raises(raised):
            create(client, body)
    job = create(client, body)
    control(emulator, "faults", {"method": "get", "status": 503})
    with pytest.raises(exceptions.ServiceUnavailable):
        client.get_custom_job(name=job.name)
    assert client.get_custom_job(name=job.name).name == job.name

    stats = control(emulator, "stats")
    assert stats["creates_attempted"] == 5
    assert stats["jobs_created"] == 1
    assert stats["faults_injected"] == 5


def test_a_lost_create_response_still_creates_the_job(
    emulator: VertexEmulator,
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
) -> None:
    control(emulator, "faults", {"method": "create", "mode": "lost_response", "count": 1})

    with pytest.raises(exceptions.GatewayTimeout):  # DeadlineExceeded is one
        create(client, job_body(make_worker(), labels={"spotjobs-request-id": "lost"}))

    [job] = client.list_custom_jobs(request={"parent": PARENT, "filter": 'labels.spotjobs-request-id="lost"'})
    assert wait_for_state(client, job.name, TERMINAL).state == State.JOB_STATE_SUCCEEDED


@pytest.mark.parametrize(
    ("status", "rpc_status", "raised"),
    [
        (499, "CANCELLED", exceptions.Cancelled),
        (500, "UNKNOWN", exceptions.InternalServerError),
        (500, "DATA_LOSS", exceptions.InternalServerError),
        (503, "UNAVAILABLE", exceptions.ServiceUnavailable),
    ],
)
def test_a_lost_response_can_answer_cancelled_unknown_data_loss_or_unavailable(
    emulator: VertexEmulator,
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
    status: int,
    rpc_status: str,
    raised: type[Exception],
) -> None:
    # Over REST the exception class comes from the HTTP status alone: UNKNOWN and DATA_LOSS are
    # both HTTP 500, an InternalServerError; the google.rpc name is only in the body.
    request_id = f"lost-{rpc_status.lower().replace('_', '-')}"
    control(
        emulator,
        "faults",
        {"method": "create", "mode": "lost_response", "status": status, "rpc_status": rpc_status},
    )
    body = job_body(make_worker(), labels={"spotjobs-request-id": request_id})

    with pytest.raises(raised) as caught:
        create(client, body)
    assert caught.value.code == status

    [job] = client.list_custom_jobs(request={"parent": PARENT, "filter": f'labels.spotjobs-request-id="{request_id}"'})
    assert wait_for_state(client, job.name, TERMINAL).state == State.JOB_STATE_SUCCEEDED
    # The same fault over raw HTTP: the google.rpc status named in the body.
    control(
        emulator,
        "faults",
        {"method": "create", "mode": "lost_response", "status": status, "rpc_status": rpc_status},
    )
    code, error = http_json(f"{emulator.url}/v1/{PARENT}/customJobs", body)
    assert (code, error["error"]["code"], error["error"]["status"]) == (status, status, rpc_status)


def test_a_list_lag_hides_young_jobs_from_lists_only_until_cleared(
    emulator: VertexEmulator,
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
) -> None:
    listed = lambda: [  # noqa: E731
        job.name
        for job in client.list_custom_jobs(request={"parent": PARENT, "filter": 'labels.spotjobs-request-id="lagged"'})
    ]
    old = create(client, job_body(make_worker(), labels={"spotjobs-request-id": "lagged"}))
    time.sleep(0.6)
    control(emulator, "faults", {"method": "list", "mode": "lag", "seconds": 0.5})

    young = create(client, job_body(make_worker(), labels={"spotjobs-request-id": "lagged"}))

    assert listed() == [old.name]  # the young job is missing from the list...
    assert client.get_custom_job(name=young.name).name == young.name  # ...never from get
    wait_for(lambda: len(listed()) == 2, what="the young job to show in the list")
    assert control(emulator, "stats")["faults_pending"] == [{"method": "list", "mode": "lag", "seconds": 0.5}]

    control(emulator, "faults", {"method": "list", "mode": "lag", "seconds": 60})
    hidden = create(client, job_body(make_worker(), labels={"spotjobs-request-id": "lagged"}))
    assert hidden.name not in listed()
    status, cleared = http_json(f"{emulator.url}/emulator/v1/faults", method="DELETE")
    assert (status, cleared) == (200, {"cleared": 1})
    assert hidden.name in listed()
    assert control(emulator, "stats")["faults_pending"] == []


def test_the_capacity_limit_bounds_running_processes(
    make_emulator: Callable[..., VertexEmulator], make_worker: Callable[..., Worker]
) -> None:
    emulator = make_emulator(max_running=2)
    client = client_for(emulator)
    jobs = [create(client, job_body(make_worker(WORKER_SECONDS="0.5"))) for _ in range(6)]
    samples = []
    while not all(client.get_custom_job(name=job.name).state in TERMINAL for job in jobs):
        samples.append(control(emulator, "stats"))
        time.sleep(0.02)

    assert max(sample["running_processes"] for sample in samples) == 2
    assert max(sample["jobs_by_state"].get("JOB_STATE_RUNNING", 0) for sample in samples) <= 2
    assert max(sample["waiting_for_capacity"] for sample in samples) >= 3
    assert all(client.get_custom_job(name=job.name).state == State.JOB_STATE_SUCCEEDED for job in jobs)


def test_a_job_waiting_for_capacity_is_cancelled_at_once(
    make_emulator: Callable[..., VertexEmulator], make_worker: Callable[..., Worker]
) -> None:
    emulator = make_emulator(max_running=1)
    client = client_for(emulator)
    running = create(client, job_body(make_worker(WORKER_SECONDS="60")))
    waiting_worker = make_worker()
    waiting = create(client, job_body(waiting_worker))

    client.cancel_custom_job(name=waiting.name)

    cancelled = client.get_custom_job(name=waiting.name)
    assert cancelled.state == State.JOB_STATE_CANCELLED
    assert cancelled.error.code == 1
    assert waiting_worker.events() == []
    client.cancel_custom_job(name=running.name)


def test_reset_terminates_workers_and_forgets_everything(
    emulator: VertexEmulator,
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
) -> None:
    worker = make_worker(WORKER_SECONDS="60")
    job = create(client, job_body(worker))
    control(emulator, "preemption-plans", {"labels": {"a": "b"}, "delays": [5]})
    control(emulator, "faults", {"method": "get", "status": 500, "count": 3})
    [pid] = wait_for(lambda: worker.pids("start"), what="the worker to start")

    control(emulator, "reset", {})

    assert wait_for(lambda: pid_gone(pid), what="the worker to be terminated")
    with pytest.raises(exceptions.NotFound):
        client.get_custom_job(name=job.name)
    stats = control(emulator, "stats")
    assert (stats["jobs"], stats["running_processes"], stats["preemption_plans"]) == (0, 0, 0)
    assert stats["faults_pending"] == []


def test_the_error_can_arrive_after_the_final_state_as_on_vertex(
    make_emulator: Callable[..., VertexEmulator], make_worker: Callable[..., Worker]
) -> None:
    emulator = make_emulator(error_delay_seconds=1.0)
    client = client_for(emulator)
    job = create(client, job_body(make_worker(WORKER_EXIT="2")))

    failed = wait_for_state(client, job.name, TERMINAL)

    assert failed.state == State.JOB_STATE_FAILED
    assert not failed.error.message
    later = wait_for(lambda: client.get_custom_job(name=job.name).error.message, what="the delayed error")
    assert "non-zero status of 2" in later


# ---- the command line ----


def test_the_command_line_prints_one_ready_line_and_cleans_up_on_sigterm(
    make_worker: Callable[..., Worker],
) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devstack.vertex.emulator",
            "--port",
            "0",
            "--project",
            PROJECT,
            "--no-log-sink",
            "--queued-seconds",
            "0.05",
            "--pending-seconds",
            "0.05",
            "--grace-seconds",
            "0.5",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        ready = json.loads(process.stdout.readline())
        assert ready == {"port": ready["port"], "url": f"http://127.0.0.1:{ready['port']}"}
        worker = make_worker(WORKER_SECONDS="60")
        status, job = http_json(f"{ready['url']}/v1/{PARENT}/customJobs", job_body(worker))
        assert status == 200, job
        [pid] = wait_for(lambda: worker.pids("start"), what="the worker to start")
        _, stats = http_json(f"{ready['url']}/emulator/v1/stats")
        assert stats["log_sink"]["enabled"] is False

        process.send_signal(signal.SIGTERM)

        assert process.wait(timeout=15) == 0
        assert process.stdout.read() == b""  # exactly one line, ever
        assert wait_for(lambda: pid_gone(pid), what="the worker to be terminated")
        assert worker.pids("sigterm") == [pid]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


# Container lines the job-events sink's filter selects (ERROR and a capacity word), and one it
# does not (INFO), in both payload candidates.
SINK_LINES = [
    ["stderr", "worker was preempted, checkpointing"],
    ["stdout", json.dumps({"severity": "ERROR", "message": "stockout seen by the worker"})],
    ["stdout", "preempted, says stdout"],
]


def test_documented_a_job_preempted_seven_times_stays_running_and_fails_with_stockout(
    pubsub_emulator: str,
    make_emulator: Callable[..., VertexEmulator],
    make_worker: Callable[..., Worker],
) -> None:
    events = EventsTopic()
    emulator = make_emulator(events_topic=events.topic, error_delay_seconds=0.5)
    client = client_for(emulator)
    assert control(emulator, "stats")["signals"] == "documented"  # the default
    control(
        emulator,
        "preemption-plans",
        # Each start preempted once it said hello (its handler set, its start noted), not a time
        # after it started: a loaded machine once took longer than 0.4 s to start Python.
        {"labels": {"run": "seven"}, "preemptions": 7, "after_output": "worker says hello"},
    )
    worker = make_worker(WORKER_SECONDS="60")
    job = create(client, job_body(worker, labels={"run": "seven"}))
    observed: list[State] = []

    def failed() -> aiplatform_v1.CustomJob | None:
        current = client.get_custom_job(name=job.name)
        observed.append(current.state)
        return current if current.state in TERMINAL else None

    done = wait_for(failed, timeout=40, what="the job to fail")

    assert done.state == State.JOB_STATE_FAILED
    assert not done.error.message  # "About one minute after a job ends": here half a second
    error = wait_for(
        lambda: (later := client.get_custom_job(name=job.name).error).message and later,
        what="the delayed error",
    )
    assert "STOCKOUT" in error.message and error.code == 2
    # The state never leaves RUNNING between restarts.
    seen = details(emulator, job.name)
    assert seen["state_history"] == ["JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_FAILED"]
    after_running = observed[observed.index(State.JOB_STATE_RUNNING) :]
    assert set(after_running) == {State.JOB_STATE_RUNNING, State.JOB_STATE_FAILED}
    assert after_running[-1] == State.JOB_STATE_FAILED
    assert after_running.count(State.JOB_STATE_FAILED) == 1
    # The only trace of a preemption: the worker got SIGTERM and started again, seven times.
    starts = worker.pids("start")
    assert len(starts) == 7 and len(set(starts)) == 7, worker.events()
    assert worker.pids("sigterm") == starts, worker.events()
    assert seen["preemptions"] == 7 and seen["signals"] == [{"run": run, "signal": "SIGTERM"} for run in range(1, 8)]
    # No preemption line: the documented service lines only, textPayload at INFO.
    events.pull_for(20, until=lambda: "Job failed." in events.service_messages(job.name))
    service = events.service_entries(job.name)
    assert [entry["textPayload"] for entry in service] == [
        "Waiting for job to be provisioned.",
        "Job is preparing.",
        "Job is running.",
        "Job failed.",
    ]
    for entry in service:
        assert "jsonPayload" not in entry
        assert entry["severity"] == "INFO"
        assert entry["logName"] == f"projects/{PROJECT}/logs/ml.googleapis.com%2F{job_id(job.name)}"
        assert entry["resource"] == {
            "type": "ml_job",
            "labels": {"project_id": PROJECT, "job_id": job_id(job.name), "task_name": "service"},
        }


def test_documented_log_entries_reach_the_events_topic_through_the_sink_filter(
    pubsub_emulator: str,
    make_emulator: Callable[..., VertexEmulator],
    make_worker: Callable[..., Worker],
) -> None:
    events = EventsTopic()
    emulator = make_emulator(events_topic=events.topic)
    client = client_for(emulator)
    worker = make_worker(WORKER_SECONDS="0.3", WORKER_LINES=json.dumps(SINK_LINES))

    job = create(client, job_body(worker))

    assert wait_for_state(client, job.name, TERMINAL).state == State.JOB_STATE_SUCCEEDED
    events.pull_for(20, until=lambda: "Job completed successfully." in events.service_messages(job.name))
    assert events.service_messages(job.name) == [
        "Waiting for job to be provisioned.",
        "Job is preparing.",
        "Job is running.",
        "Tearing down training program.",
        "Finished tearing down training program.",
        "Job completed successfully.",
    ]
    container = [
        entry for entry in events.entries_for(job.name) if entry["resource"]["labels"]["task_name"] == "workerpool0-0"
    ]
    # stdout at INFO, stderr at ERROR, a JSON line as text; only ERROR lines naming a capacity
    # word pass the filter.
    assert {(entry["severity"], entry["textPayload"]) for entry in container} == {
        ("ERROR", "worker was preempted, checkpointing"),
    }
    assert control(emulator, "stats")["log_sink"]["filtered_out"] >= 5


def test_rich_log_entries_reach_the_events_topic_in_both_payload_forms(
    pubsub_emulator: str,
    make_emulator: Callable[..., VertexEmulator],
    make_worker: Callable[..., Worker],
) -> None:
    events = EventsTopic()
    emulator = make_emulator(events_topic=events.topic, signals="rich")
    client = client_for(emulator)
    control(emulator, "preemption-plans", {"labels": {"run": "once"}, "delays": [0.5]})
    control(
        emulator,
        "preemption-plans",
        {"labels": {"run": "never"}, "preemptions": 7, "after_seconds": 0.3},
    )
    succeeding = create(
        client,
        job_body(
            make_worker(WORKER_SECONDS="0.8", WORKER_LINES=json.dumps(SINK_LINES)),
            labels={"run": "once"},
        ),
    )
    stocked_out = create(client, job_body(make_worker(WORKER_SECONDS="60"), labels={"run": "never"}))
    for job in (succeeding, stocked_out):
        wait_for_state(client, job.name, TERMINAL, timeout=40)

    events.pull_for(
        20,
        until=lambda: (
            "Job completed successfully." in events.service_messages(succeeding.name)
            and "Job failed." in events.service_messages(stocked_out.name)
        ),
    )

    entries = events.entries_for(succeeding.name)
    for entry in entries:
        assert entry["resource"]["type"] == "ml_job"
        assert entry["resource"]["labels"]["project_id"] == PROJECT
        assert entry["logName"] == f"projects/{PROJECT}/logs/ml.googleapis.com%2F{job_id(succeeding.name)}"
        assert datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).tzinfo is not None
        assert entry["receiveTimestamp"] >= entry["timestamp"]
    insert_ids = [entry["insertId"] for entry, _ in events.received]
    assert len(insert_ids) == len(set(insert_ids))
    assert all("logging.googleapis.com/timestamp" in attributes for _, attributes in events.received)

    assert all("jsonPayload" in entry for entry in events.service_entries(succeeding.name))
    service = events.service_messages(succeeding.name)
    assert service[0] == "Job is preparing."
    assert service.count("Job is running.") == 2
    assert [message for message in service if "preempted" in message] == [
        "The Spot VM of replica workerpool0-0 was preempted. Restarting the job (restart 1 of 6)."
    ]
    assert service[-2:] == [
        "Finished tearing down training program.",
        "Job completed successfully.",
    ]
    container = [e for e in entries if e["resource"]["labels"]["task_name"] == "workerpool0-0"]
    # Each run prints the lines: twice (one preemption), each once per run.
    as_text = {(e["severity"], e["textPayload"]) for e in container if "textPayload" in e}
    assert as_text == {("ERROR", "worker was preempted, checkpointing")}
    structured = {(e["severity"], e["jsonPayload"]["message"]) for e in container if "jsonPayload" in e}
    assert structured == {("ERROR", "stockout seen by the worker")}

    final = events.service_messages(stocked_out.name)[-2:]
    assert "STOCKOUT" in final[0]
    assert final[1] == "Job failed."
    severities = {
        entry["jsonPayload"]["message"]: entry["severity"]
        for entry in events.entries_for(stocked_out.name)
        if "jsonPayload" in entry
    }
    assert severities[final[0]] == "ERROR"


def test_the_log_sink_can_be_switched_off_and_jobs_still_run(
    pubsub_emulator: str,
    make_emulator: Callable[..., VertexEmulator],
    make_worker: Callable[..., Worker],
) -> None:
    events = EventsTopic()
    emulator = make_emulator(events_topic=events.topic)
    client = client_for(emulator)
    assert control(emulator, "log-sink", {"enabled": False}) == {"enabled": False}

    job = create(client, job_body(make_worker()))

    assert wait_for_state(client, job.name, TERMINAL).state == State.JOB_STATE_SUCCEEDED
    events.pull_for(1.5)
    assert events.received == []
    sink = control(emulator, "stats")["log_sink"]
    assert sink["published"] == 0
    assert sink["suppressed"] >= 5


# ---- request quotas (devstack/vertex/quotas.py) ----


def test_creates_past_the_submission_quota_get_429_naming_it_per_project_and_region(
    make_emulator: Callable[..., VertexEmulator], make_worker: Callable[..., Worker]
) -> None:
    emulator = make_emulator(quota_submissions_per_minute=2, quota_crud_per_minute=0)
    client = client_for(emulator)
    body = job_body(make_worker())
    created = [create(client, body) for _ in range(2)]

    with pytest.raises(exceptions.TooManyRequests) as refused:
        create(client, body)

    assert "Quota exceeded for quota metric 'aiplatform.googleapis.com/job_submission_requests'" in str(refused.value)
    assert refused.value.reason == "RATE_LIMIT_EXCEEDED"
    other_region = f"projects/{PROJECT}/locations/europe-west4"
    client.create_custom_job(parent=other_region, custom_job=aiplatform_v1.CustomJob.from_json(json.dumps(body)))
    for job in created:
        client.get_custom_job(name=job.name)  # CRUD is off here: reads are never refused
    stats = control(emulator, "stats")
    assert stats["quotas"] == {"per_minute": {"submissions": 2, "crud": 0}, "refused": {"submissions": 1, "crud": 0}}
    assert stats["jobs_created"] == 3  # the refused create stored nothing


def test_get_list_and_cancel_share_the_crud_quota(
    make_emulator: Callable[..., VertexEmulator], make_worker: Callable[..., Worker]
) -> None:
    emulator = make_emulator(quota_submissions_per_minute=0, quota_crud_per_minute=3)
    client = client_for(emulator)
    job = create(client, job_body(make_worker(WORKER_SECONDS="30")))
    client.get_custom_job(name=job.name)
    list(client.list_custom_jobs(request={"parent": PARENT}))
    client.cancel_custom_job(name=job.name)

    for call in (
        lambda: client.get_custom_job(name=job.name),
        lambda: list(client.list_custom_jobs(request={"parent": PARENT})),
    ):
        with pytest.raises(exceptions.TooManyRequests, match="resource_management_requests"):
            call()
    create(client, job_body(make_worker()))  # creates count against the other quota
    assert control(emulator, "stats")["quotas"]["refused"] == {"submissions": 0, "crud": 2}


# ---- scheduling.timeout: "The maximum job running time. The default is 7 days." ----


def test_a_job_that_reaches_its_scheduling_timeout_is_stopped_and_fails_deadline_exceeded(
    emulator: VertexEmulator,
    client: aiplatform_v1.JobServiceClient,
    make_worker: Callable[..., Worker],
) -> None:
    worker = make_worker(WORKER_SECONDS="60")
    body = job_body(worker, strategy="STANDARD")
    body["jobSpec"]["scheduling"]["timeout"] = "1.5s"

    job = create(client, body)

    ended = wait_for_state(client, job.name, TERMINAL)
    assert ended.state == State.JOB_STATE_FAILED
    assert ended.error.code == 4  # DEADLINE_EXCEEDED: the `timeout_end` mode's default (assumed)
    assert "scheduling.timeout" in ended.error.message
    running = (ended.end_time - ended.start_time).total_seconds()
    assert 1.5 <= running < 1.5 + 5
    assert worker.pids("sigterm") == worker.pids("start")  # stopped as a cancel stops it


def test_the_expired_timeout_end_mode_ends_a_timed_out_job_expired(
    make_emulator: Callable[..., VertexEmulator], make_worker: Callable[..., Worker]
) -> None:
    emulator = make_emulator(replica_modes=ReplicaModes(timeout_end="expired"))
    client = client_for(emulator)
    body = job_body(make_worker(WORKER_SECONDS="60"), strategy="STANDARD")
    body["jobSpec"]["scheduling"]["timeout"] = "1s"

    job = create(client, body)

    ended = wait_for_state(client, job.name, {*TERMINAL, State.JOB_STATE_EXPIRED})
    assert ended.state == State.JOB_STATE_EXPIRED
    assert details(emulator, job.name)["replica_modes"]["timeout_end"] == "expired"
