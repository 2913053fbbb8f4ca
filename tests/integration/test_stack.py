"""The embedded stack itself: `spotjobs local up`, and push delivery into a served function."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from devstack.processes import REPO_ROOT
from tests.support.processes import _alive, _descendants

pytestmark = pytest.mark.stack


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _spotjobs_cli() -> list[str]:
    return [sys.executable, "-m", "spotjobs.cli"]


def test_local_up_prints_a_working_environment_and_leaves_nothing_behind() -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    process = subprocess.Popen(
        [*_spotjobs_cli(), "local", "up", "--json", "--reconcile-every", "1", "--quota-submissions-per-minute", "30"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        description = json.loads(process.stdout.readline())
        children = _descendants(process.pid)

        # Every part answers HTTP (a function answers a GET, which is no push, with 400: it is serving).
        for url in [*description["functions"].values(), description["vertex_endpoint"]]:
            assert _http_status(url + "/") < 500, url
        assert description["vertex_signals"] == "documented"  # the emulator's default profile
        # The quotas asked for, and CRUD's documented default, as the emulator enforces them.
        assert description["vertex_quotas"] == {"submissions_per_minute": 30, "crud_per_minute": 600}
        with urllib.request.urlopen(description["vertex_endpoint"] + "/emulator/v1/stats", timeout=5) as response:
            assert json.loads(response.read())["quotas"]["per_minute"] == {"submissions": 30, "crud": 600}
        assert set(description["functions"]) == {
            "submit_job",
            "on_job_event",
            "reconcile",
            "prune_checkpoints",
            "on_trigger",
        }
        assert description["data_bucket"] == "spotjobs-data"
        for variable in (
            "PUBSUB_EMULATOR_HOST",
            "STORAGE_EMULATOR_HOST",
            "SPOTJOBS_VERTEX_ENDPOINT",
            "GOOGLE_CLOUD_PROJECT",
            "SPOTJOBS_STATE_BUCKET",
            "SPOTJOBS_JOB_REQUESTS_TOPIC",
        ):
            assert description["env"][variable], variable
        # Java emulator, fake-gcs-server, Vertex emulator and five functions (with their workers).
        assert len(children) >= 7, children

        # Cloud Scheduler's stand-in has reconcile run on its own.
        reconcile_log = Path(description["logs"]) / "reconcile.log"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and '"reconcile_summary"' not in _read(reconcile_log):
            time.sleep(0.5)
        assert '"reconcile_summary"' in _read(reconcile_log)
    finally:
        process.send_signal(signal.SIGTERM)
        exit_status = process.wait(timeout=120)
    assert exit_status == 0

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.2)
    assert not [pid for pid in children if _alive(pid)], "processes left behind after SIGTERM"


def test_a_published_request_reaches_submit_job_through_its_push_subscription(stack) -> None:
    message_id = stack.publish("job_requests", b"this is not a job request")

    def delivered() -> list[dict]:
        return [line for line in stack.function_logs("submit_job") if line.get("message_id") == message_id]

    lines = stack.wait_for(delivered, timeout=30, message="submit_job to log the pushed message")
    # The function read the emulator's raw push body and logs its message id.
    assert lines[0]["function"] == "submit_job"
    assert lines[0]["event_id"] == message_id


def test_the_official_storage_and_pubsub_clients_reach_the_emulators(stack) -> None:
    bucket = stack.storage().bucket(stack.settings.state_bucket)
    blob = bucket.blob("probe/hello.txt")
    blob.upload_from_string(b"hi", if_generation_match=0)
    assert bucket.blob("probe/hello.txt").download_as_bytes() == b"hi"

    stack.publish("ops_alerts", json.dumps({"kind": "probe"}).encode(), kind="probe")
    assert {"kind": "probe"} in stack.pull_alerts(timeout=5)
