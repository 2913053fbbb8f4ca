"""Fakes for the decision tests: Vertex (tests.support.vertex) and a Pub/Sub publisher in memory;
the ledger is real (fake-gcs-server, which enforces the generation preconditions the decisions rely on).
No tests here."""

from __future__ import annotations

import io
import itertools
import json
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared.ledger.claims import claim_attempt, new_kit_key, record_job
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import JobIndexEntry, LedgerStore
from shared.log import Logger
from shared.settings import Settings
from shared.wiring import Ports
from tests.support.vertex import DEPLOYMENT, PROJECT, FakeVertex

STOCKOUT = {"code": 8, "message": "Job failed with STOCKOUT: the Spot VM was preempted 7 times."}
USER_ERROR = {"code": 3, "message": "The replica workerpool0-0 exited with a non-zero status of 1."}


@dataclass
class Published:
    topic: str
    data: dict[str, Any]
    attributes: dict[str, str]


@dataclass
class FakePublisher:
    """Publishes into a list; `fail_next` makes the next publishes fail as Pub/Sub would (503)."""

    messages: list[Published] = field(default_factory=list)
    fail_next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def publish(self, topic: str, data: bytes, **attributes: str) -> Future[str]:
        from google.api_core.exceptions import ServiceUnavailable

        future: Future[str] = Future()
        with self._lock:
            if self.fail_next:
                self.fail_next -= 1
                future.set_exception(ServiceUnavailable("publish failed"))
                return future
            self.messages.append(Published(topic, json.loads(data), dict(attributes)))
            future.set_result(str(next(self._ids)))
        return future

    def on(self, topic: str) -> list[Published]:
        with self._lock:
            return [m for m in self.messages if m.topic.endswith(f"/topics/{topic}")]


class CapturedLog:
    """A Logger writing into memory, and the parsed lines."""

    def __init__(self) -> None:
        self.stream = io.StringIO()
        self.logger = Logger(stream=self.stream, min_severity="DEBUG")

    @property
    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stream.getvalue().splitlines()]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("event") == name]


def make_settings(bucket: str, **env: str) -> Settings:
    return Settings.from_env(
        {
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            "SPOTJOBS_STATE_BUCKET": bucket,
            "SPOTJOBS_LOCATION": "us-central1",
            "SPOTJOBS_DEPLOYMENT": DEPLOYMENT,
            # Requests here fall back to STANDARD; a deployment allows no fallback by default.
            "SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD",
            **env,
        }
    )


@dataclass
class World:
    """A ledger on fake-gcs-server, fake Vertex and Pub/Sub, and Ports over them."""

    ledger: LedgerStore
    vertex: FakeVertex
    publisher: FakePublisher
    settings: Settings

    @property
    def ports(self) -> Ports:
        return Ports(self.settings, self.ledger, lambda: self.publisher, self.vertex)

    def submitted(
        self,
        request_id: str = "req-1",
        *,
        state: int = 3,
        request: dict[str, Any] | None = None,
        location: str = "us-central1",
    ) -> tuple[RequestRecord, str]:
        """A request whose attempt 1 was created and indexed, as submit leaves it."""
        job = self.vertex.add(request_id, 1, location, state)
        envelope = {
            "schema_version": 1,
            "request_id": request_id,
            "custom_job": {
                "displayName": "train",
                "jobSpec": {
                    "workerPoolSpecs": [
                        {
                            "machineSpec": {"machineType": "a2-highgpu-1g"},
                            "replicaCount": "1",
                            "containerSpec": {
                                "imageUri": "us-docker.pkg.dev/p/r/trainer:1",
                                "command": ["python"],
                            },
                        }
                    ]
                },
            },
            "location": location,
            "locations": [],
            "max_attempts": 3,
            "fallback": None,
            "checkpoints": None,
            **(request or {}),
        }
        record = RequestRecord(
            request_id,
            envelope,
            self.settings.output_dir_for(request_id),
            status=RequestStatus.SUBMITTED,
            attempts=[
                Attempt(
                    1,
                    location,
                    "SPOT",
                    claimed_at=_iso_now(),
                    job=job,
                    state="JOB_STATE_QUEUED",
                    kit_key=new_kit_key(),
                )
            ],
        )
        self.ledger.restore(record)
        self.ledger.index_job(JobIndexEntry(request_id, 1, location, job))
        return record, job

    def kit_key(self, request_id: str = "req-1", n: int = 1) -> str | None:
        """The key attempt n's containers sign their kit lines with (as submit gave it to them)."""
        record = self.ledger.get(request_id)
        attempt = record.attempt(n) if record else None
        return attempt.kit_key if attempt else None

    def claim_requeue(self, request_id: str) -> str:
        """What submit does with a re-queued attempt: claim it, create its job, record it."""
        record = self.ledger.get(request_id)
        assert record is not None and record.requeue is not None
        requeue = record.requeue
        job = self.vertex.add(request_id, requeue.attempt, requeue.location, 1)

        self.ledger.update(
            request_id,
            lambda current: (
                claim_attempt(
                    current,
                    envelope=current.request,
                    n=requeue.attempt,
                    now=datetime.now(UTC),
                    lease_seconds=self.settings.claim_lease_seconds,
                    output_dir=current.output_dir,
                ).record
            ),
        )
        self.ledger.update(
            request_id,
            lambda current: record_job(
                current, n=requeue.attempt, job_name=job, state="JOB_STATE_QUEUED", created_at=None
            ),
        )
        self.ledger.index_job(JobIndexEntry(request_id, requeue.attempt, requeue.location, job))
        return job

    def rewrite(self, request_id: str, change: Callable[[RequestRecord], object]) -> None:
        """Change a stored record behind the state machine's back, as a crash at the right
        moment would have left it (test setup only; the ledger refuses such moves)."""
        record, generation = self.ledger.read(request_id)
        assert record is not None
        change(record)
        self.ledger._write(record, generation)


def _iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def log_entry(
    job_name: str,
    text: str,
    *,
    task: str = "service",
    insert_id: str | None = None,
    severity: str = "INFO",
    timestamp: str | None = None,
) -> bytes:
    """A LogEntry as the sink publishes it, for the job named."""
    entry: dict[str, Any] = {
        "resource": {
            "type": "ml_job",
            "labels": {
                "project_id": PROJECT,
                "job_id": job_name.rsplit("/", 1)[-1],
                "task_name": task,
            },
        },
        "severity": severity,
        "timestamp": timestamp or _iso_now(),
        "jsonPayload": {"message": text},
    }
    if insert_id:
        entry["insertId"] = insert_id
    return json.dumps(entry).encode()
