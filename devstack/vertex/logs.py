"""The Cloud Logging entries the Vertex emulator writes, and the sink that routes them to Pub/Sub.

Every shape and text lives here; which of them a job emits is its signal profile's choice
(`devstack.vertex.signals`). They are modelled on:

- the `LogEntry` JSON a project log sink publishes to a Pub/Sub topic (message data = the entry,
  UTF-8; attribute `logging.googleapis.com/timestamp`), for the `ml_job` monitored resource with
  labels `project_id`, `job_id`, `task_name`, and logName `projects/P/logs/ml.googleapis.com%2F<job_id>`.
  gcloud's log streaming for Vertex custom jobs reads `resource.type="ml_job"`,
  `resource.labels.job_id` and `resource.labels.task_name`
  (https://github.com/google-cloud-sdk-unofficial/google-cloud-sdk/blob/master/lib/googlecloudsdk/command_lib/ai/log_util.py);
  the logName and `task_name="service"` are those public captures and scripts show;
- the service lines seen in public transcripts of Vertex AI CustomJobs ("Waiting for job to be
  provisioned.", "Job is preparing.", "Job is running.", "Tearing down training program.",
  "Finished tearing down training program.", "Job completed successfully.") and of AI Platform
  Training ("Job failed."), and the error texts in "Understanding the training service"
  (https://cloud.google.com/vertex-ai/docs/training/understanding-training-service: "The replica
  workerpool0-0 exited with a non-zero status of N. Termination reason: Error."). Vertex
  documents no preemption line; the `rich` profile's says "preempted", and its final one
  "STOCKOUT".

Payload forms:

- service lines (task_name `service`): `textPayload` (documented) or `jsonPayload.message` (rich);
- container lines (task_name the replica's, `workerpool<P>-<i>`: `workerpool0-0` for the primary,
  the form of gcloud's `task_name` and of `CustomJob.web_access_uris`' keys): `textPayload`, stdout at INFO and stderr at ERROR;
  in rich only, a line that is a JSON object with a `message` key becomes `jsonPayload` with the
  line's own `severity`.
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
import threading
from concurrent import futures
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from spotjobs_kit.lines import KEY as KIT_KEY
from spotjobs_kit.lines import TAG as KIT_TAG

from shared.log import SEVERITIES, Logger

SERVICE_TASK = "service"
PRIMARY_REPLICA = "workerpool0-0"
# Vertex restarts a preempted Spot job at most this many times (the Spot page of the training
# docs); the next preemption fails the job.
MAX_SPOT_RESTARTS = 6

PREPARING = "Job is preparing."
PROVISIONING = "Waiting for job to be provisioned."
RUNNING = "Job is running."
TEARING_DOWN = "Tearing down training program."
TEARDOWN = "Finished tearing down training program."
SUCCEEDED = "Job completed successfully."
FAILED = "Job failed."
CANCELLED = "Job was cancelled."  # invented (rich only)
# The documented profile's error after the Spot restarts ran out: the Spot page's own words
# ("fails with a STOCKOUT error"); the actual message is not documented.
STOCKOUT_DOCUMENTED = "The job failed with a STOCKOUT error."


def nonzero_exit(exit_status: int, replica: str = PRIMARY_REPLICA) -> str:
    return f"The replica {replica} exited with a non-zero status of {exit_status}. Termination reason: Error."


def preempted_and_restarting(restart: int, replica: str = PRIMARY_REPLICA, *, whole_job: bool = True) -> str:
    restarted = "the job" if whole_job else f"replica {replica}"
    return (
        f"The Spot VM of replica {replica} was preempted. "
        f"Restarting {restarted} (restart {restart} of {MAX_SPOT_RESTARTS})."
    )


def stockout(preemptions: int, replica: str = PRIMARY_REPLICA) -> str:
    return (
        f"Job failed with STOCKOUT: the Spot VM of replica {replica} was preempted "
        f"{preemptions} times and Vertex AI restarts a Spot job at most {MAX_SPOT_RESTARTS} times."
    )


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _now() -> datetime:
    return datetime.now(UTC)


class LogEntryFactory:
    """Builds `ml_job` LogEntry dicts, each with a unique insertId."""

    def __init__(self) -> None:
        self._insert_prefix = secrets.token_hex(4)
        self._insert_counter = itertools.count(1)

    def service(
        self, project_id: str, job_id: str, severity: str, message: str, *, as_json: bool = False
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {"jsonPayload": {"message": message}} if as_json else {"textPayload": message}
        return self._entry(project_id, job_id, SERVICE_TASK, severity, payload)

    def container(
        self,
        project_id: str,
        job_id: str,
        stream: str,
        line: str,
        *,
        structured: bool = False,
        replica: str = PRIMARY_REPLICA,
    ) -> dict[str, Any]:
        parsed = _structured_line(line) if structured else None
        if parsed is not None:
            severity = str(parsed.get("severity", "INFO")).upper()
            if severity not in SEVERITIES:
                severity = "INFO"
            payload: dict[str, Any] = {"jsonPayload": parsed}
        else:
            severity = "ERROR" if stream == "stderr" else "INFO"
            payload = {"textPayload": line}
        return self._entry(project_id, job_id, replica, severity, payload)

    def _entry(
        self, project_id: str, job_id: str, task_name: str, severity: str, payload: dict[str, Any]
    ) -> dict[str, Any]:
        moment = _now()
        return {
            "insertId": f"{self._insert_prefix}{next(self._insert_counter):010x}",
            "logName": f"projects/{project_id}/logs/ml.googleapis.com%2F{job_id}",
            "resource": {
                "type": "ml_job",
                "labels": {
                    "project_id": project_id,
                    "job_id": job_id,
                    "task_name": task_name,
                },
            },
            "severity": severity,
            "timestamp": rfc3339(moment),
            "receiveTimestamp": rfc3339(_now()),
            **payload,
        }


def _structured_line(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        parsed = json.loads(line)
    except ValueError:
        return None
    if isinstance(parsed, dict) and isinstance(parsed.get("message"), str):
        return parsed
    return None


# ---- the job-events sink's filter ----
#
# The emulator routes to the events topic exactly what the Terraform sink's default filter
# (`job_event_log_filter` in terraform/variables.tf) routes to job-events: JOB_EVENTS_SINK_FILTER
# below, which tests/unit/test_vertex_logs.py compares with the Terraform default, and
# `job_events_sink_admits`, its evaluation. Change both together.
SINK_CONTAINER_PATTERN = "(?i)preempt|reclaimed|stockout|resources are insufficient"
JOB_EVENTS_SINK_FILTER = f"""
resource.type="ml_job"
AND (
  resource.labels.task_name="service"
  OR jsonPayload.{KIT_KEY}.event:*
  OR textPayload:"{KIT_TAG}"
  OR (
    severity>=ERROR
    AND (
      textPayload=~"{SINK_CONTAINER_PATTERN}"
      OR jsonPayload.message=~"{SINK_CONTAINER_PATTERN}"
    )
  )
)
"""
_SINK_CONTAINER_REGEX = re.compile(SINK_CONTAINER_PATTERN)
# Cloud Logging's LogSeverity order (https://cloud.google.com/logging/docs/reference/v2/rest/v2/LogEntry#logseverity).
_AT_LEAST_ERROR = frozenset({"ERROR", "CRITICAL", "ALERT", "EMERGENCY"})


def job_events_sink_admits(entry: dict[str, Any]) -> bool:
    """True when the job-events sink's filter (above) selects `entry`."""
    resource = entry.get("resource") or {}
    if resource.get("type") != "ml_job":
        return False
    if (resource.get("labels") or {}).get("task_name") == SERVICE_TASK:
        return True
    payload = entry.get("jsonPayload") or {}
    kit = payload.get(KIT_KEY) if isinstance(payload, dict) else None
    if isinstance(kit, dict) and "event" in kit:
        return True
    text = entry.get("textPayload")
    if isinstance(text, str) and KIT_TAG in text:
        return True
    texts = [text, payload.get("message") if isinstance(payload, dict) else None]
    return entry.get("severity") in _AT_LEAST_ERROR and any(
        _SINK_CONTAINER_REGEX.search(t) for t in texts if isinstance(t, str)
    )


@dataclass(frozen=True)
class SinkStats:
    enabled: bool
    published: int
    suppressed: int
    failed: int
    in_flight: int
    filtered_out: int = 0


class LogSink:
    """Publishes LogEntry dicts to one Pub/Sub topic, like a Logging sink with a Pub/Sub target.

    The publisher is created on first use (it honours PUBSUB_EMULATOR_HOST). Publishing is
    asynchronous; every future is tracked until done, a failure is logged and counted, and
    `flush` waits for the ones in flight. With no topic or when disabled, entries are counted
    as suppressed and dropped; entries the sink's filter (`job_events_sink_admits`) does not
    select are counted as filtered out, as Cloud Logging keeps them in the log and exports
    nothing.
    """

    def __init__(self, topic: str | None, *, enabled: bool, logger: Logger) -> None:
        self._topic = topic
        self._enabled = enabled and topic is not None
        self._logger = logger
        self._lock = threading.Lock()
        self._publisher: Any = None
        self._in_flight: set[futures.Future[str]] = set()
        self._published = 0
        self._suppressed = 0
        self._failed = 0
        self._filtered_out = 0

    def set_enabled(self, enabled: bool) -> None:
        with self._lock:
            self._enabled = enabled and self._topic is not None

    def publish(self, entry: dict[str, Any]) -> None:
        with self._lock:
            if not self._enabled:
                self._suppressed += 1
                return
            if not job_events_sink_admits(entry):
                self._filtered_out += 1
                return
            try:
                future = self._publisher_locked().publish(
                    self._topic,
                    json.dumps(entry, separators=(",", ":")).encode("utf-8"),
                    **{"logging.googleapis.com/timestamp": entry["timestamp"]},
                )
            except Exception as error:  # counted and logged: a sink failure never fails a job
                self._failed += 1
                self._logger.error("log entry publish failed", topic=self._topic, error=repr(error))
                return
            self._in_flight.add(future)
        future.add_done_callback(self._on_done)

    def flush(self, timeout: float) -> None:
        with self._lock:
            pending = list(self._in_flight)
        if pending:
            futures.wait(pending, timeout=timeout)

    def close(self, timeout: float) -> None:
        self.flush(timeout)
        with self._lock:
            publisher, self._publisher = self._publisher, None
        if publisher is not None:
            publisher.stop()

    def stats(self) -> SinkStats:
        with self._lock:
            return SinkStats(
                enabled=self._enabled,
                published=self._published,
                suppressed=self._suppressed,
                failed=self._failed,
                in_flight=len(self._in_flight),
                filtered_out=self._filtered_out,
            )

    def _publisher_locked(self) -> Any:
        if self._publisher is None:
            from google.cloud import pubsub_v1  # imported on first use: startup stays fast

            self._publisher = pubsub_v1.PublisherClient()
        return self._publisher

    def _on_done(self, future: futures.Future[str]) -> None:
        error = futures.CancelledError() if future.cancelled() else future.exception()
        with self._lock:
            self._in_flight.discard(future)
            if error is None:
                self._published += 1
            else:
                self._failed += 1
        if error is not None:
            self._logger.error("log entry publish failed", topic=self._topic, error=repr(error))
