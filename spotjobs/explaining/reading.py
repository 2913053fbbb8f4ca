"""Reading `spotjobs explain`'s input: LogEntries in any of gcloud's shapes, and a described job."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.deciding.events import JobLogEntry
    from shared.jobs import JobSnapshot


@dataclass(frozen=True)
class ParsedEntry:
    """One input entry as read: its position, the raw JSON, and the log entry or why it was ignored."""

    position: int
    raw: Any
    entry: JobLogEntry | None
    ignored_reason: str | None


class UnreadableInput(ValueError):
    """FILE or JOB_JSON cannot be read; the message is the one line printed."""


def read_entries(text: str) -> list[Any]:
    """The entries of a JSON array, of JSON lines, or a single JSON object."""
    stripped = text.strip()
    if not stripped:
        return []
    try:
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        pass
    else:
        if isinstance(value, list):
            return value
        if isinstance(value, dict):
            return [value]
        raise UnreadableInput(
            f"the file holds a JSON {type(value).__name__}, not LogEntries (a JSON array, JSON lines or one entry)"
        )
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except (ValueError, RecursionError):
            raise UnreadableInput(
                f"line {number} is not JSON: expected a JSON array, JSON lines or one LogEntry"
            ) from None
    return entries


def read_job_json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise UnreadableInput(
            "the job file is not JSON (gcloud ai custom-jobs describe JOB_ID --region R --format=json)"
        ) from None
    if not isinstance(value, dict):
        raise UnreadableInput("the job file is not a JSON object (a CustomJob)")
    return value


@dataclass(frozen=True)
class DescribedJob:
    snapshot: JobSnapshot
    labels: dict[str, str]
    strategy: str  # jobSpec.scheduling.strategy; unset means STANDARD (custom_job.proto)
    kit_key: str | None = None  # SPOTJOBS_KIT_KEY in its containers' env: what its kit signs with


def described_job(job_json: Mapping[str, Any]) -> DescribedJob:
    """The job as decisions read it, its labels and strategy, from a CustomJob in REST JSON
    (camelCase); fields newer than the client library are ignored."""
    from google.cloud.aiplatform_v1.types import CustomJob
    from google.protobuf import json_format

    from shared.jobs import JobSnapshot, JobState

    try:
        job = CustomJob.from_json(json.dumps(job_json), ignore_unknown_fields=True)
    except (ValueError, json_format.Error) as exc:
        raise UnreadableInput(f"the job file is not a CustomJob: {exc}") from None
    if not job.name or "/customJobs/" not in job.name:
        raise UnreadableInput("the job file names no CustomJob (its name is missing)")
    snapshot = JobSnapshot.of(job)
    if snapshot.state == JobState.UNSPECIFIED:  # ignore_unknown_fields also drops an unknown enum
        raise UnreadableInput(f"state {job_json.get('state')!r} is not a JobState")
    strategy = job.job_spec.scheduling.strategy
    name = getattr(strategy, "name", "") if strategy else ""
    return DescribedJob(snapshot, dict(job.labels), name or "STANDARD", _kit_key(job))


def _kit_key(job: Any) -> str | None:
    """The attempt's key, as submit puts it in every worker pool's env (shared/adapters/vertex.py)."""
    from shared.jobs import ENV_KIT_KEY

    for pool in job.job_spec.worker_pool_specs:
        for env in (*pool.container_spec.env, *pool.python_package_spec.env):
            if env.name == ENV_KIT_KEY and env.value:
                return env.value
    return None
