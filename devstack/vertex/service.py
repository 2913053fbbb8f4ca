"""The emulator's operations, independent of HTTP: the CustomJob API and the control surface.

API methods take the REST request's parts and return the REST response's JSON text, produced by
`aiplatform_v1` types (camelCase; enums as integers when the caller asked for
`enum-encoding=int`, as the official REST client does, else as names). Failures raise ApiError.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.cloud import aiplatform_v1
from google.protobuf import json_format

from devstack.vertex.capacity import SpotCapacity
from devstack.vertex.errors import invalid_argument, permission_denied
from devstack.vertex.faults import FaultInjector, parse_fault
from devstack.vertex.filter import parse_filter
from devstack.vertex.flex import FlexCapacity, is_flex_start, max_wait_seconds
from devstack.vertex.jobs import JobRecord
from devstack.vertex.logs import PRIMARY_REPLICA, LogEntryFactory, LogSink
from devstack.vertex.modes import ReplicaModes, parse_modes
from devstack.vertex.preemption import PreemptionPlanner
from devstack.vertex.quotas import DEFAULT_CRUD_PER_MINUTE, DEFAULT_SUBMISSIONS_PER_MINUTE, QuotaEnforcer
from devstack.vertex.runner import JobRunner, RunnerConfig
from devstack.vertex.signals import DEFAULT_PROFILE, PROFILES, profile
from devstack.vertex.validation import flex_start_violations, found_errors, validate
from shared.log import Logger

_OUTPUT_ONLY_FIELDS = (
    "name",
    "state",
    "create_time",
    "start_time",
    "end_time",
    "update_time",
    "error",
    "web_access_uris",
)
_DEFAULT_PAGE_SIZE = 100
_MAX_PAGE_SIZE = 1000
_SINK_FLUSH_SECONDS = 5.0
_TOPIC = re.compile(r"^projects/[^/]+/topics/[^/]+$")


@dataclass(frozen=True)
class EmulatorConfig:
    # When set, requests for any other project are refused, as the real API would.
    project: str | None = None
    # When set, job names carry it instead of the project id, as real Vertex responses do.
    project_number: str | None = None
    events_topic: str | None = None
    log_sink_enabled: bool = True
    max_running: int = 8
    queued_seconds: float = 0.2
    pending_seconds: float = 0.2
    grace_seconds: float = 2.0
    # None: the signal profile's default (documented: 60 s, "about a minute"; rich: 0).
    error_delay_seconds: float | None = None
    preemption_rate_per_minute: float = 0.0
    seed: int = 0
    # `documented` or `rich` (devstack.vertex.signals); the control surface can switch it for
    # jobs created afterwards.
    signals: str = DEFAULT_PROFILE
    # Vertex AI's request quotas per project and region (devstack.vertex.quotas); 0 turns one off.
    quota_submissions_per_minute: int = DEFAULT_SUBMISSIONS_PER_MINUTE
    quota_crud_per_minute: int = DEFAULT_CRUD_PER_MINUTE
    # A folder standing in for Vertex's Cloud Storage FUSE mount (devstack.vertex.fuse); None: off.
    gcs_fuse_dir: str | None = None
    # What Google does not document about multi-replica preemptions (devstack.vertex.modes); the
    # control surface can switch them for jobs created afterwards.
    replica_modes: ReplicaModes = ReplicaModes()

    def __post_init__(self) -> None:
        if self.max_running < 1:
            raise ValueError("max_running must be at least 1")
        if self.quota_submissions_per_minute < 0 or self.quota_crud_per_minute < 0:
            raise ValueError("quotas cannot be negative (0 turns one off)")
        durations = (
            self.queued_seconds,
            self.pending_seconds,
            self.grace_seconds,
            self.error_delay_seconds or 0.0,
            self.preemption_rate_per_minute,
        )
        if any(value < 0 for value in durations):
            raise ValueError("durations and the preemption rate cannot be negative")
        profile(self.signals)  # raises ValueError for an unknown profile
        if self.events_topic is not None and not _TOPIC.match(self.events_topic):
            raise ValueError(f"events_topic must look like projects/P/topics/T: {self.events_topic}")


class VertexService:
    def __init__(self, config: EmulatorConfig, logger: Logger) -> None:
        self._config = config
        self._logger = logger
        self._planner = PreemptionPlanner(config.preemption_rate_per_minute, config.seed)
        self._capacity = SpotCapacity()
        self._flex_capacity = FlexCapacity()
        self._faults = FaultInjector()
        self._quotas = QuotaEnforcer(
            submissions_per_minute=config.quota_submissions_per_minute,
            crud_per_minute=config.quota_crud_per_minute,
        )
        self._sink = LogSink(config.events_topic, enabled=config.log_sink_enabled, logger=logger)
        self._runner = JobRunner(
            config=RunnerConfig(
                max_running=config.max_running,
                queued_seconds=config.queued_seconds,
                pending_seconds=config.pending_seconds,
                grace_seconds=config.grace_seconds,
                error_delay_seconds=config.error_delay_seconds,
                gcs_fuse_dir=config.gcs_fuse_dir,
            ),
            planner=self._planner,
            capacity=self._capacity,
            flex_capacity=self._flex_capacity,
            sink=self._sink,
            entries=LogEntryFactory(),
            logger=logger,
        )
        self._counter_lock = threading.Lock()
        self._creates_attempted = 0
        self._jobs_created = 0
        self._signals = profile(config.signals)
        self._modes = config.replica_modes

    # ---- the CustomJob API ----

    def create_job(self, project: str, location: str, body: bytes, int_enums: bool) -> str:
        with self._counter_lock:
            self._creates_attempted += 1
        self._count_against_quota("create", project, location)
        fault = self._faults.take("create")
        if fault is not None and fault.mode == "error":
            raise fault.error()
        self._check_project(project, location, "create")
        job = _parse_custom_job(body)
        with self._counter_lock:
            flex_requirements = self._modes.flex_requirements
        validate(job, refuse_flex_start_violations=flex_requirements == "invalid_argument")
        record = self._new_record(project, location, job)
        self._runner.submit(record)
        with self._counter_lock:
            self._jobs_created += 1
        self._logger.info("job created", job=record.job.name, labels=record.labels)
        if fault is not None:  # lost_response: the job exists, the caller hears an error
            raise fault.error()
        return self._job_json(record, int_enums)

    def get_job(self, project: str, location: str, job_id: str, int_enums: bool) -> str:
        self._count_against_quota("get", project, location)
        fault = self._faults.take("get")
        if fault is not None and fault.mode == "error":
            raise fault.error()
        record = self._find(project, location, job_id, "get")
        if fault is not None:
            raise fault.error()
        return self._job_json(record, int_enums)

    def list_jobs(self, project: str, location: str, query: dict[str, list[str]], int_enums: bool) -> str:
        self._count_against_quota("list", project, location)
        fault = self._faults.take("list")
        if fault is not None and fault.mode == "error":
            raise fault.error()
        self._check_project(project, location, "list")
        try:
            job_filter = parse_filter(_single(query, "filter"))
        except ValueError as error:
            raise invalid_argument(str(error)) from error
        page_size = _page_size(_single(query, "pageSize"))
        with self._runner.lock:
            records, next_token = self._runner.store.page(
                location,
                job_filter,
                page_size,
                _single(query, "pageToken"),
                created_by=self._faults.visible_since(),
            )
            response = aiplatform_v1.ListCustomJobsResponse(
                custom_jobs=[record.job for record in records], next_page_token=next_token
            )
            text: str = aiplatform_v1.ListCustomJobsResponse.to_json(
                response,
                use_integers_for_enums=int_enums,
                always_print_fields_with_no_presence=False,
            )
        if fault is not None:
            raise fault.error()
        return text

    def cancel_job(self, project: str, location: str, job_id: str) -> str:
        self._count_against_quota("cancel", project, location)
        fault = self._faults.take("cancel")
        if fault is not None and fault.mode == "error":
            raise fault.error()
        record = self._find(project, location, job_id, "cancel")
        self._runner.cancel(record)
        if fault is not None:
            raise fault.error()
        return "{}"

    # ---- the control surface ----

    def add_fault(self, body: Any) -> dict[str, Any]:
        try:
            fault = parse_fault(body)
        except ValueError as error:
            raise invalid_argument(str(error)) from error
        self._faults.add(fault)
        return fault.to_json()

    def clear_faults(self) -> dict[str, Any]:
        """Drop every pending fault and the list lag (the injected count stays, for stats)."""
        return {"cleared": self._faults.clear_pending()}

    def add_preemption_plan(self, body: Any) -> dict[str, Any]:
        try:
            return self._planner.add_plan(body).to_json()
        except ValueError as error:
            raise invalid_argument(str(error)) from error

    def set_capacity(self, kind: str, body: Any) -> dict[str, Any]:
        """Sets (or with `{"data": []}` removes) a capacity trace: `spot` (`capacity`) or
        `flex` (FLEX_START, `flex`)."""
        try:
            return self._capacity_of(kind).set_trace(body)
        except ValueError as error:
            raise invalid_argument(str(error)) from error

    def capacity(self, kind: str) -> dict[str, Any]:
        capacity = self._capacity_of(kind)
        return {**capacity.to_json(), "available": capacity.available()}

    def _capacity_of(self, kind: str) -> SpotCapacity | FlexCapacity:
        if kind == "flex":
            return self._flex_capacity
        return self._capacity

    def preemption_plans(self) -> dict[str, Any]:
        return {"plans": [plan.to_json() for plan in self._planner.plans()]}

    def set_log_sink(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("enabled"), bool):
            raise invalid_argument('expected {"enabled": true|false}')
        self._sink.set_enabled(body["enabled"])
        return {"enabled": self._sink.stats().enabled}

    def set_signals(self, body: Any) -> dict[str, Any]:
        """Switches the signal profile of jobs created from now on (`reset` restores the
        configured one): `{"profile": "documented"|"rich"}`."""
        if not isinstance(body, dict) or body.get("profile") not in PROFILES:
            raise invalid_argument(f'expected {{"profile": one of {list(PROFILES)}}}')
        with self._counter_lock:
            self._signals = profile(body["profile"])
        return {"profile": body["profile"]}

    def set_replica_modes(self, body: Any) -> dict[str, Any]:
        """Switches the replica modes (`devstack.vertex.modes`) of jobs created from now on
        (`reset` restores the configured ones); fields not named keep their value."""
        with self._counter_lock:
            try:
                self._modes = parse_modes(body, self._modes)
            except ValueError as error:
                raise invalid_argument(str(error)) from error
            return self._modes.to_json()

    def preempt_job(self, project: str, location: str, job_id: str, body: Any = None) -> dict[str, Any]:
        """Reclaims the primary now, or `{"replica": "workerpool1-0"}`, or `{"replica": "all"}`."""
        replica = (body or {}).get("replica", PRIMARY_REPLICA) if isinstance(body, dict) else None
        if not isinstance(replica, str):
            raise invalid_argument('expected {"replica": "workerpool<P>-<i>" or "all"} or no body')
        record = self._find(project, location, job_id, "preempt")
        self._runner.preempt_now(record, replica)
        return {"name": record.job.name, "preempted": True, "replica": replica}

    def job_details(self, project: str, location: str, job_id: str) -> dict[str, Any]:
        record = self._find(project, location, job_id, "get")
        with self._runner.lock:
            return record.details()

    def stats(self) -> dict[str, Any]:
        sink = self._sink.stats()
        with self._counter_lock:
            counters = {
                "creates_attempted": self._creates_attempted,
                "jobs_created": self._jobs_created,
            }
            signals, modes = self._signals, self._modes
        return {
            **counters,
            "signals": signals.name,
            "replica_modes": modes.to_json(),
            **self._runner.stats(),
            "faults_injected": self._faults.injected,
            "faults_pending": [fault.to_json() for fault in self._faults.pending()],
            "preemption_plans": len(self._planner.plans()),
            "quotas": self._quotas.stats(),
            "log_sink": {
                "enabled": sink.enabled,
                "topic": self._config.events_topic,
                "published": sink.published,
                "suppressed": sink.suppressed,
                "failed": sink.failed,
                "in_flight": sink.in_flight,
                "filtered_out": sink.filtered_out,
            },
        }

    def reset(self) -> dict[str, Any]:
        """Back to the state at start-up: no jobs (workers terminated), plans or faults."""
        self._runner.reset()
        self._planner.clear()
        self._capacity.clear()
        self._flex_capacity.clear()
        self._faults.clear()
        self._quotas.reset()
        self._sink.set_enabled(self._config.log_sink_enabled)
        with self._counter_lock:
            self._creates_attempted = 0
            self._jobs_created = 0
            self._signals = profile(self._config.signals)
            self._modes = self._config.replica_modes
        return {"reset": True}

    def close(self) -> None:
        self._runner.stop()
        self._sink.close(_SINK_FLUSH_SECONDS)

    # ---- helpers ----

    def _count_against_quota(self, method: str, project: str, location: str) -> None:
        # Before anything else, as Google's front end does: a refused call does nothing.
        self._quotas.check(method, project, location, f"projects/{self._config.project_number or project}")

    def _check_project(self, project: str, location: str, verb: str) -> None:
        allowed = {self._config.project, self._config.project_number} - {None}
        if allowed and project not in allowed:
            raise permission_denied(
                f"Permission 'aiplatform.customJobs.{verb}' denied on resource "
                f"'//aiplatform.googleapis.com/projects/{project}/locations/{location}' "
                "(or it may not exist)."
            )

    def _find(self, project: str, location: str, job_id: str, verb: str) -> JobRecord:
        self._check_project(project, location, verb)
        name = f"projects/{project}/locations/{location}/customJobs/{job_id}"
        with self._runner.lock:
            return self._runner.store.get(location, job_id, name)

    def _new_record(self, project: str, location: str, job: aiplatform_v1.CustomJob) -> JobRecord:
        with self._runner.lock:
            job_id, sequence = self._runner.store.new_ids()
        with self._counter_lock:
            signals, modes = self._signals, self._modes
        name_project = self._config.project_number or project
        job.name = f"projects/{name_project}/locations/{location}/customJobs/{job_id}"
        job.create_time = job.update_time = datetime.now(UTC)
        flex_start = is_flex_start(job)
        violations = flex_start_violations(job)  # left only under the `flex_requirements` mode job_failed
        return JobRecord(
            job=job,
            job_id=job_id,
            location=location,
            project_id=self._config.project or project,
            sequence=sequence,
            labels=dict(job.labels),
            is_spot=job.job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
            or (flex_start and modes.flex_preemption == "as_spot"),
            preemption=self._planner.new_job_state(sequence),
            profile=signals,
            modes=modes,
            is_flex_start=flex_start,
            flex_max_wait_seconds=max_wait_seconds(job),
            flex_refusal=found_errors(violations) if violations else None,
        )

    def _job_json(self, record: JobRecord, int_enums: bool) -> str:
        with self._runner.lock:
            text: str = aiplatform_v1.CustomJob.to_json(
                record.job,
                use_integers_for_enums=int_enums,
                always_print_fields_with_no_presence=False,
            )
        return text


def _parse_custom_job(body: bytes) -> aiplatform_v1.CustomJob:
    try:
        job: aiplatform_v1.CustomJob = aiplatform_v1.CustomJob.from_json(body.decode("utf-8"))
    except (json_format.ParseError, UnicodeDecodeError) as error:
        # The parser's first line names the field ('... has no field named "X" at "CustomJob"').
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise invalid_argument(f"Invalid JSON payload received. {detail}") from error
    raw = aiplatform_v1.CustomJob.pb(job)
    for field_name in _OUTPUT_ONLY_FIELDS:
        raw.ClearField(field_name)
    return job


def _single(query: dict[str, list[str]], name: str) -> str:
    values = query.get(name, [])
    return values[-1] if values else ""


def _page_size(text: str) -> int:
    if not text:
        return _DEFAULT_PAGE_SIZE
    try:
        size = int(text)
    except ValueError:
        raise invalid_argument(f"Invalid pageSize: {text!r}") from None
    if size < 0:
        raise invalid_argument(f"Invalid pageSize: {text!r}")
    return min(size or _DEFAULT_PAGE_SIZE, _MAX_PAGE_SIZE)
