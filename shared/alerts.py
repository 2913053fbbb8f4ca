"""Ops alerts: one JSON schema for everything published to the ops-alerts topic.

    {"kind": "invalid_request" | "preemption_storm" | "attempts_exhausted" | "job_failed" |
             "job_stuck" | "prune_report" | ...,
     "severity": "INFO" | "WARNING" | "ERROR",
     "request_id": str | null, "attempt": int | null, "job": str | null,
     "message": str,            # one human sentence
     "details": {...},          # kind-specific, JSON
     "time": RFC 3339 UTC}

Message attributes repeat `kind`, `severity` and `request_id` so subscribers can filter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from shared.clock import now_iso

ALERT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Alert:
    kind: str
    severity: str
    message: str
    request_id: str | None = None
    attempt: int | None = None
    job: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    time: str = field(default_factory=now_iso)
    schema_version: int = ALERT_SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def attributes(self) -> dict[str, str]:
        """Message attributes, for subscribers' filters."""
        attributes = {"kind": self.kind, "severity": self.severity}
        if self.request_id:
            attributes["request_id"] = self.request_id
        return attributes
