"""Job log entries from the job-events topic: parse and classify them. Pure: no I/O, no clients.

A project log sink publishes each Cloud Logging `LogEntry` as the message data (UTF-8 JSON). The
ones spotjobs reads are `resource.type="ml_job"` with `resource.labels.job_id` and
`resource.labels.task_name` ("service" for Vertex's own lines, "workerpool0-0" and so on for the
containers); the text is in `textPayload` or `jsonPayload.message`.

A service line is only a hint: the decision is always taken on the job as the API returns it. The
hint's one job is to say whether an entry is worth a ledger read and a Vertex call at all, so
container chatter (most of the traffic) costs nothing. A trainer kit line (`spotjobs_kit`, in
either payload) is evidence about one run of the job: counted in the ledger, with no Vertex call.
The signals and where each comes from: docs/signals.md.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from spotjobs_kit.lines import KitRecord, parse_kit_line

from shared.clock import parse_rfc3339
from shared.errors import ConfigurationError
from shared.settings import Settings

ML_JOB_RESOURCE = "ml_job"
SERVICE_TASK = "service"
# Vertex job ids are numeric; anything outside this shape is not a job of ours and must never
# become part of a ledger object path.
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_ERROR_SEVERITIES = frozenset({"ERROR", "CRITICAL", "ALERT", "EMERGENCY"})


class Signal(enum.Enum):
    """What a log line suggests about its job."""

    PREEMPTION = "preemption"  # a Spot VM was reclaimed (configured patterns)
    STOCKOUT = "stockout"  # capacity ran out (configured patterns)
    PENDING = "pending"  # provisioning / preparing: a preempted job passes through here
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    KIT = "kit"  # a trainer kit line: run started, preempted, checkpoint committed, run finished
    IRRELEVANT = "irrelevant"

    @property
    def is_relevant(self) -> bool:
        return self is not Signal.IRRELEVANT


# Vertex's own service lines (fixed texts, seen in public job transcripts), checked in order.
_SERVICE_LINES: tuple[tuple[re.Pattern[str], Signal], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), signal)
    for pattern, signal in (
        (r"^job is running\b", Signal.RUNNING),
        (r"^job completed successfully\b", Signal.SUCCEEDED),
        (r"^job failed\b", Signal.FAILED),
        (r"exited with a non-zero status", Signal.FAILED),
        (r"\bcancel", Signal.CANCELLED),
        (r"^waiting for job to be provisioned\b|^job is preparing\b", Signal.PENDING),
    )
)


@dataclass(frozen=True)
class JobLogEntry:
    """The parts of an `ml_job` LogEntry that spotjobs reads."""

    job_id: str
    task_name: str
    text: str
    severity: str = "DEFAULT"
    timestamp: datetime | None = None
    insert_id: str | None = None
    kit: KitRecord | None = None

    @property
    def is_service_line(self) -> bool:
        return self.task_name == SERVICE_TASK

    @property
    def identity(self) -> str:
        """The entry's `insertId`, which Logging keeps across redeliveries; derived from its time
        and text when a sink strips it."""
        if self.insert_id:
            return self.insert_id
        moment = self.timestamp.isoformat() if self.timestamp else ""
        return f"{moment}|{hashlib.sha1(self.text.encode()).hexdigest()[:16]}"

    def age_seconds(self, now: datetime) -> float | None:
        return None if self.timestamp is None else (now - self.timestamp).total_seconds()


class IgnoredEntry(ValueError):
    """Not an entry spotjobs reacts to. The message says why, for the one line that acks it."""


def parse_log_entry(data: bytes) -> JobLogEntry:
    """A job log entry from message data, or IgnoredEntry (the only exception it raises)."""
    try:
        entry = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise IgnoredEntry("message data is not JSON") from None
    if not isinstance(entry, Mapping):
        raise IgnoredEntry("message data is not a JSON object")
    resource = _mapping(entry.get("resource"))
    if resource.get("type") != ML_JOB_RESOURCE:
        raise IgnoredEntry(f"resource type {str(resource.get('type'))[:64]!r} is not ml_job")
    labels = _mapping(resource.get("labels"))
    job_id = labels.get("job_id")
    if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
        raise IgnoredEntry("resource.labels.job_id is missing or not a job id")
    task_name = labels.get("task_name")
    return JobLogEntry(
        job_id=job_id,
        task_name=task_name if isinstance(task_name, str) else "",
        text=_text(entry),
        severity=_severity(entry.get("severity")),
        timestamp=parse_rfc3339(entry.get("timestamp")),
        insert_id=_string(entry.get("insertId")),
        kit=_kit_line(entry),
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _text(entry: Mapping[str, Any]) -> str:
    text = entry.get("textPayload")
    if isinstance(text, str):
        return text
    message = _mapping(entry.get("jsonPayload")).get("message")
    return message if isinstance(message, str) else ""


def _kit_line(entry: Mapping[str, Any]) -> KitRecord | None:
    payload = entry.get("jsonPayload")
    record = parse_kit_line(payload) if isinstance(payload, Mapping) else None
    text = entry.get("textPayload")
    return record or (parse_kit_line(text) if isinstance(text, str) else None)


def _severity(value: Any) -> str:
    return value.upper() if isinstance(value, str) and value else "DEFAULT"


@dataclass(frozen=True)
class SignalPatterns:
    """The configured preemption and stockout patterns, compiled (case-insensitive)."""

    preemption: re.Pattern[str] | None
    stockout: re.Pattern[str] | None

    @classmethod
    def compile(cls, preemption: Sequence[str], stockout: Sequence[str]) -> SignalPatterns:
        return cls(_any_of("preemption", preemption), _any_of("stockout", stockout))

    def is_preemption(self, text: str) -> bool:
        return bool(self.preemption and self.preemption.search(text))

    def is_stockout(self, text: str) -> bool:
        return bool(self.stockout and self.stockout.search(text))


def _any_of(kind: str, patterns: Sequence[str]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigurationError(f"{kind} pattern {pattern!r} is not a regular expression: {exc}") from None
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


@functools.lru_cache(maxsize=8)
def _compiled(preemption: tuple[str, ...], stockout: tuple[str, ...]) -> SignalPatterns:
    return SignalPatterns.compile(preemption, stockout)


def patterns_from(settings: Settings) -> SignalPatterns:
    return _compiled(tuple(settings.preemption_patterns), tuple(settings.stockout_patterns))


def classify(entry: JobLogEntry, patterns: SignalPatterns) -> Signal:
    """What the line suggests. Preemption/stockout patterns apply to every task; the fixed state
    lines and ERROR severity only to Vertex's service lines, because a trainer's stderr is logged
    at ERROR and its chatter must not cost a Vertex call. A kit line is always KIT: its words
    ("preempted") are the kit's own report, not a pattern match."""
    if entry.kit is not None:
        return Signal.KIT
    if patterns.is_preemption(entry.text):
        return Signal.PREEMPTION
    if patterns.is_stockout(entry.text):
        return Signal.STOCKOUT
    if not entry.is_service_line:
        return Signal.IRRELEVANT
    text = entry.text.strip()
    for pattern, signal in _SERVICE_LINES:
        if pattern.search(text):
            return signal
    if entry.severity in _ERROR_SEVERITIES:
        return Signal.FAILED
    return Signal.IRRELEVANT
