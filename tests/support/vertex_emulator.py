"""The Vertex AI emulator in-process for the integration tests: its configuration, the official
REST client on it, its control surface, waits, and Google's Pub/Sub emulator for its log sink."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1

from devstack.vertex.emulator import VertexEmulator
from devstack.vertex.service import EmulatorConfig

PROJECT = "spotjobs-test"
LOCATION = "us-central1"
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
State = aiplatform_v1.JobState
TERMINAL = {State.JOB_STATE_SUCCEEDED, State.JOB_STATE_FAILED, State.JOB_STATE_CANCELLED}
# Errors at once unless a test asks for Vertex's delay (the documented profile's default is 60 s).
FAST = {
    "queued_seconds": 0.05,
    "pending_seconds": 0.05,
    "grace_seconds": 0.5,
    "error_delay_seconds": 0.0,
}


def http_json(url: str, body: Any = None, method: str | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"))
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def control(emulator: VertexEmulator, path: str, body: Any = None) -> Any:
    status, payload = http_json(f"{emulator.url}/emulator/v1/{path}", body)
    assert status == 200, payload
    return payload


def details(emulator: VertexEmulator, name: str) -> dict[str, Any]:
    return control(emulator, name)


def wait_for(check: Callable[[], Any], *, timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_for_state(
    client: aiplatform_v1.JobServiceClient,
    name: str,
    states: set[State],
    timeout: float = 20.0,
) -> aiplatform_v1.CustomJob:
    def reached() -> aiplatform_v1.CustomJob | None:
        job = client.get_custom_job(name=name)
        return job if job.state in states else None

    return wait_for(reached, timeout=timeout, what=f"{name} to reach {states}")


def create(client: aiplatform_v1.JobServiceClient, body: dict[str, Any]) -> aiplatform_v1.CustomJob:
    return client.create_custom_job(parent=PARENT, custom_job=aiplatform_v1.CustomJob.from_json(json.dumps(body)))


def job_id(name: str) -> str:
    return name.rsplit("/", 1)[1]


@pytest.fixture
def make_emulator() -> Iterator[Callable[..., VertexEmulator]]:
    started: list[VertexEmulator] = []

    def start(**overrides: Any) -> VertexEmulator:
        config = EmulatorConfig(**{"project": PROJECT, **FAST, **overrides})
        emulator = VertexEmulator(config).start()
        started.append(emulator)
        return emulator

    yield start
    for emulator in started:
        emulator.stop()


def client_for(emulator: VertexEmulator) -> aiplatform_v1.JobServiceClient:
    return aiplatform_v1.JobServiceClient(
        transport="rest",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": emulator.url},
    )


# ---- the log sink, through Google's Pub/Sub emulator ----


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=0.5):
            return True
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="module")
def pubsub_emulator() -> Iterator[str]:
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        pytest.skip("gcloud (for Google's Pub/Sub emulator) is not installed")
    host = f"127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        [
            gcloud,
            "beta",
            "emulators",
            "pubsub",
            "start",
            f"--host-port={host}",
            f"--project={PROJECT}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(lambda: _answers(f"http://{host}/"), timeout=60, what="the Pub/Sub emulator")
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("PUBSUB_EMULATOR_HOST", host)
            yield host
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


class EventsTopic:
    """A fresh topic with a pull subscription, read as LogEntry dicts."""

    def __init__(self) -> None:
        from google.cloud import pubsub_v1

        suffix = uuid.uuid4().hex[:8]
        self.topic = f"projects/{PROJECT}/topics/job-events-{suffix}"
        self.subscription = f"projects/{PROJECT}/subscriptions/job-events-{suffix}"
        pubsub_v1.PublisherClient().create_topic(name=self.topic)
        self._subscriber = pubsub_v1.SubscriberClient()
        self._subscriber.create_subscription(name=self.subscription, topic=self.topic)
        self.received: list[tuple[dict[str, Any], dict[str, str]]] = []

    def pull_for(self, seconds: float, until: Callable[[], bool] = lambda: False) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not until():
            response = self._subscriber.pull(
                request={
                    "subscription": self.subscription,
                    "max_messages": 100,
                    "return_immediately": True,  # the emulator honours it: no long poll
                },
                timeout=5,
            )
            if not response.received_messages:
                time.sleep(0.1)
            else:
                self._subscriber.acknowledge(
                    request={
                        "subscription": self.subscription,
                        "ack_ids": [message.ack_id for message in response.received_messages],
                    }
                )
            for message in response.received_messages:
                entry = json.loads(message.message.data.decode("utf-8"))
                self.received.append((entry, dict(message.message.attributes)))

    def entries_for(self, job_name: str) -> list[dict[str, Any]]:
        return [entry for entry, _ in self.received if entry["resource"]["labels"]["job_id"] == job_id(job_name)]

    def service_entries(self, job_name: str) -> list[dict[str, Any]]:
        # Pub/Sub promises no order without an ordering key, and a log sink sets none: the
        # entries' own timestamps (then insertIds, a counter) say which came first.
        service = [
            entry for entry in self.entries_for(job_name) if entry["resource"]["labels"]["task_name"] == "service"
        ]
        return sorted(service, key=lambda entry: (entry["timestamp"], entry["insertId"]))

    def service_messages(self, job_name: str) -> list[str]:
        return [entry_text(entry) for entry in self.service_entries(job_name)]


def entry_text(entry: dict[str, Any]) -> str:
    return str(entry.get("textPayload", entry.get("jsonPayload", {}).get("message", "")))
