"""The demo trainer against fake-gcs-server, and under the Vertex AI emulator's Spot preemptions."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devstack.demo.traces import runs_from_output
from devstack.processes import REPO_ROOT
from devstack.trainer import StopRequested, parse_args, train

# The Vertex emulator's default grace period between SIGTERM and SIGKILL (Vertex itself gives 30 s).
GRACE_SECONDS = 2.0
LINE_TIMEOUT_SECONDS = 30.0


class Trainer:
    """`python -m devstack.trainer` in a subprocess, its stdout read as JSON lines."""

    def __init__(self, storage_url: str, checkpoint_dir: str, model_dir: str, *args: str) -> None:
        env = {
            **os.environ,
            "STORAGE_EMULATOR_HOST": storage_url,
            "GOOGLE_CLOUD_PROJECT": "spotjobs-test",
            "AIP_CHECKPOINT_DIR": checkpoint_dir,
            "AIP_MODEL_DIR": model_dir,
            "PYTHONPATH": str(REPO_ROOT),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "devstack.trainer", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self._queue.put(json.loads(raw))
        self._queue.put(None)

    def wait_for_line(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + LINE_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is None:
                break
            self.lines.append(item)
            if predicate(item):
                return item
        raise AssertionError(f"no such line; saw {self.lines}; stderr: {self._stderr()}")

    def finish(self, timeout: float = 60.0) -> int:
        returncode = self.process.wait(timeout=timeout)
        while (item := self._queue.get(timeout=5)) is not None:
            self.lines.append(item)
        return returncode

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("event") == name]

    def kit(self, name: str) -> list[dict[str, Any]]:
        """The trainer kit's lines of one event (their `spotjobs_kit` object)."""
        return [line["spotjobs_kit"] for line in self.lines if line.get("spotjobs_kit", {}).get("event") == name]

    def _stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return "(still running)"
        return self.process.stderr.read()[-2000:]


@pytest.fixture
def paths(gcs_bucket: Any) -> Iterator[Callable[[str], tuple[str, str]]]:
    def make(name: str) -> tuple[str, str]:
        base = f"gs://{gcs_bucket.name}/{name}"
        return f"{base}/checkpoints/", f"{base}/model/"

    yield make


def run_to_end(fake_gcs: str, dirs: tuple[str, str], *args: str) -> Trainer:
    trainer = Trainer(fake_gcs, *dirs, *args)
    assert trainer.finish() == 0, trainer._stderr()
    return trainer


def test_sigterm_commits_a_checkpoint_within_the_grace_period_and_the_next_run_resumes_there(
    fake_gcs: str, gcs_bucket: Any, paths: Callable[[str], tuple[str, str]]
) -> None:
    dirs = paths("sigterm")
    args = ("--steps", "300", "--checkpoint-every", "50", "--step-seconds", "0.01")
    first = Trainer(fake_gcs, *dirs, *args)
    first.wait_for_line(lambda line: line.get("event") == "checkpoint")
    first.process.send_signal(signal.SIGTERM)
    # The Vertex emulator would SIGKILL after the grace period: the exit must come before it.
    assert first.process.wait(timeout=GRACE_SECONDS) == 128 + signal.SIGTERM
    first.finish()
    (stopping,) = first.events("stopping")
    # The newest committed checkpoint holds the step the run stopped at: written on SIGTERM, or
    # the periodic one when the signal landed right on a checkpoint step.
    saved = first.events("checkpoint")[-1]
    assert saved["step"] == stopping["step"] >= 50
    assert saved.get("reason") == "sigterm" or saved["step"] % 50 == 0
    marker = gcs_bucket.blob(f"sigterm/checkpoints/step-{saved['step']:06d}/COMMITTED")
    assert json.loads(marker.download_as_bytes())["step"] == saved["step"]

    # The kit reported the preemption, and the commit it made on SIGTERM.
    (preempted,) = first.kit("preempted")
    assert preempted["step"] is not None and preempted["seconds_since_checkpoint"] >= 0
    assert first.kit("checkpoint_committed")[-1]["step"] == saved["step"]

    second = run_to_end(fake_gcs, dirs, *args)
    (started,) = second.kit("run_started")
    assert (started["resumed_step"], started["checkpoint"]) == (saved["step"], saved["checkpoint"])
    assert started["run"] == 1  # the second start of this (local) job: the kit counted the first
    resume = second.events("resume")[0]
    # Step and loss continue from the checkpoint: nothing restarts from zero.
    assert (resume["event"], resume["step"], resume["eval_loss"]) == ("resume", saved["step"], saved["eval_loss"])
    (final,) = second.events("final")
    assert final["step"] == 300 and final["eval_loss"] < first.events("checkpoint")[0]["eval_loss"]
    model = json.loads(gcs_bucket.blob("sigterm/model/model.json").download_as_bytes())
    assert model["step"] == 300 and model["metrics"]["accuracy"] > 0.8


class StopAtStep(StopRequested):
    """A SIGTERM that arrives once the loop has finished `step` steps (checked between steps)."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self._checks_left = step + 1

    @property
    def requested(self) -> bool:
        self._checks_left -= 1
        return self._checks_left <= 0


def test_a_stop_between_checkpoints_commits_one_at_the_current_step(
    gcs_bucket: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config = parse_args(
        [
            "--steps",
            "200",
            "--checkpoint-every",
            "50",
            "--step-seconds",
            "0",
            "--checkpoint-dir",
            f"gs://{gcs_bucket.name}/stop/checkpoints/",
            "--model-dir",
            f"gs://{gcs_bucket.name}/stop/model/",
        ]
    )
    assert train(config, gcs_bucket.client, StopAtStep(73)) == 128 + signal.SIGTERM
    lines = [json.loads(raw) for raw in capsys.readouterr().out.splitlines()]
    events = [line for line in lines if "event" in line]
    # The kit's lines that say what happened (a rate-limited `progress` line goes with each commit).
    kit = [line["spotjobs_kit"] for line in lines if "spotjobs_kit" in line]
    kit = [k for k in kit if k["event"] != "progress"]
    assert [(k["event"], k.get("step", k.get("resumed_step"))) for k in kit] == [
        ("run_started", None),
        ("checkpoint_committed", 50),
        ("checkpoint_committed", 73),
    ]
    assert [(e["event"], e["step"]) for e in events] == [
        ("resume", 0),
        ("checkpoint", 50),
        ("stopping", 73),
        ("checkpoint", 73),
    ]
    assert events[-1]["reason"] == "sigterm"
    assert gcs_bucket.blob("stop/checkpoints/step-000073/COMMITTED").exists()
    assert not gcs_bucket.blob("stop/model/model.json").exists()


def test_a_run_interrupted_and_resumed_trains_exactly_the_same_model(
    fake_gcs: str, gcs_bucket: Any, paths: Callable[[str], tuple[str, str]]
) -> None:
    args = ("--steps", "200", "--checkpoint-every", "40", "--seed", "5")
    run_to_end(fake_gcs, paths("straight"), *args, "--step-seconds", "0")

    interrupted = Trainer(fake_gcs, *paths("interrupted"), *args, "--step-seconds", "0.01")
    interrupted.wait_for_line(lambda line: line.get("event") == "checkpoint")
    interrupted.process.send_signal(signal.SIGTERM)
    assert interrupted.finish() == 128 + signal.SIGTERM
    resumed = run_to_end(fake_gcs, paths("interrupted"), *args, "--step-seconds", "0")
    assert resumed.events("resume")[0]["step"] > 0

    straight = json.loads(gcs_bucket.blob("straight/model/model.json").download_as_bytes())
    again = json.loads(gcs_bucket.blob("interrupted/model/model.json").download_as_bytes())
    assert again == straight  # bit for bit: the batch of a step depends on the step alone


def test_resume_skips_checkpoints_without_their_commit_marker_or_with_torn_shards(
    fake_gcs: str, gcs_bucket: Any, paths: Callable[[str], tuple[str, str]]
) -> None:
    dirs = paths("torn")
    run_to_end(fake_gcs, dirs, "--steps", "100", "--checkpoint-every", "50", "--step-seconds", "0")
    complete = "torn/checkpoints/step-000100/"
    # step 150: shards but no marker (killed mid-write); step 200: a marker whose shard is short.
    for shard in ("model.json", "optimizer.json", "trainer_state.json"):
        gcs_bucket.blob(f"torn/checkpoints/step-000150/{shard}").upload_from_string(b"{}")
        data = gcs_bucket.blob(complete + shard).download_as_bytes()
        gcs_bucket.blob(f"torn/checkpoints/step-000200/{shard}").upload_from_string(data[:-5])
    marker = json.loads(gcs_bucket.blob(complete + "COMMITTED").download_as_bytes())
    gcs_bucket.blob("torn/checkpoints/step-000200/COMMITTED").upload_from_string(json.dumps({**marker, "step": 200}))

    resumed = run_to_end(fake_gcs, dirs, "--steps", "250", "--checkpoint-every", "50", "--step-seconds", "0")
    assert resumed.events("resume")[0]["checkpoint"] == "step-000100/"
    # The kit reports the checkpoint the trainer resumed from, not the newest with a marker.
    assert resumed.kit("run_started")[0]["resumed_step"] == 100


def test_failing_training_code_exits_1_after_committing_its_last_checkpoint(
    fake_gcs: str, gcs_bucket: Any, paths: Callable[[str], tuple[str, str]]
) -> None:
    trainer = Trainer(
        fake_gcs,
        *paths("bug"),
        "--steps",
        "100",
        "--checkpoint-every",
        "50",
        "--step-seconds",
        "0",
        "--fail-at-step",
        "60",
    )
    assert trainer.finish() == 1
    (error,) = trainer.events("error")
    assert error["step"] == 60 and error["severity"] == "ERROR"
    assert "simulated bug in the training code at step 60" in trainer._stderr()
    assert gcs_bucket.blob("bug/checkpoints/step-000050/COMMITTED").exists()
    assert not trainer.events("final")


@pytest.mark.stack
def test_a_spot_job_preempted_twice_resumes_from_its_checkpoint_each_time(stack: Any) -> None:
    from shared.adapters.vertex import get_job, parent_path, to_custom_job
    from shared.jobs import state_name

    test_id = uuid.uuid4().hex[:10]
    stack.vertex_control(
        "POST",
        "/emulator/v1/preemption-plans",
        # Keyed to progress, not time: each run is preempted right after its second committed
        # checkpoint, so the restarts resume from one however slow the machine. Compute Engine's
        # 30 s notice (the stack's is half a second): the SIGTERM save completes however busy
        # the machine (a load average of 20 outlasted half a second).
        {"labels": {"trainer-test": test_id}, "preemptions": 2, "after_checkpoints": 2, "grace_seconds": 30},
    )
    job_json = {
        "displayName": f"trainer-{test_id}",
        "labels": {"trainer-test": test_id},
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "a2-highgpu-1g"},
                    "replicaCount": "1",
                    "pythonPackageSpec": {
                        "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest",
                        "pythonModule": "devstack.trainer",
                        # 600 steps, a checkpoint every 50: two runs of two checkpoints each leave
                        # the third run steps to train.
                        "args": ["--steps", "600", "--checkpoint-every", "50", "--step-seconds", "0.01"],
                    },
                }
            ],
            "scheduling": {"strategy": "SPOT"},
            "baseOutputDirectory": {
                "outputUriPrefix": f"gs://{stack.settings.checkpoint_bucket}/trainer-tests/{test_id}/"
            },
        },
    }
    client = stack.job_service()
    settings = stack.settings
    job = client.create_custom_job(
        parent=parent_path(settings.project, settings.location), custom_job=to_custom_job(job_json)
    )

    def finished() -> str | None:
        state = state_name(get_job(client, job.name, timeout=30.0).state)
        return state if state in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED") else None

    assert stack.wait_for(finished, timeout=90, message="the trainer job to end") == "JOB_STATE_SUCCEEDED"
    details = stack.vertex_control("GET", f"/emulator/v1/{job.name}")
    assert details["runs"] == 3 and details["preemptions"] == 2
    # Every preempted run exited on SIGTERM; none needed the SIGKILL after the grace period.
    assert {s["signal"] for s in details["signals"]} == {"SIGTERM"}, details["signals"]
    runs = runs_from_output(details["output"])
    assert [run.run for run in runs] == [1, 2, 3]
    for previous, following in zip(runs, runs[1:]):
        newest = max(step for step, _ in previous.checkpoints.values()) if previous.checkpoints else 0
        assert following.start_step == newest == previous.end_step
    assert runs[-1].finished and runs[-1].end_step == 600
    # Each run is preempted after its second checkpoint (every 50 steps) past where it resumed; the
    # SIGTERM may land a step later than that checkpoint, whose emergency save is then the resume.
    assert runs[1].start_step >= 100 and runs[2].start_step >= (runs[1].start_step // 50 + 2) * 50
