"""What a decision produces beyond the record: log lines and alerts, described, not yet carried out."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.alerts import Alert, AlertKind
from shared.clock import iso
from shared.ledger.records import Attempt, RequestRecord


@dataclass(frozen=True)
class LogLine:
    severity: str
    message: str
    fields: dict[str, Any]

    @property
    def event(self) -> str:
        return str(self.fields.get("event", ""))


@dataclass
class Effects:
    """What a transition decided beyond the record itself; carried out after it is written."""

    lines: list[LogLine] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    requeue_decided: bool = False
    prune_requested: bool = False

    @property
    def events(self) -> tuple[str, ...]:
        return tuple(line.event for line in self.lines)


def event_fields(record: RequestRecord, attempt: Attempt, event: str, **extra: Any) -> dict[str, Any]:
    return {
        "event": event,
        "request_id": record.request_id,
        "attempt": attempt.n,
        "job": attempt.job,
        "location": attempt.location,
        **extra,
    }


def attempt_alert(
    record: RequestRecord,
    attempt: Attempt,
    kind: AlertKind,
    now: datetime,
    message: str,
    **details: Any,
) -> Alert:
    return Alert.of(
        kind,
        message,
        request_id=record.request_id,
        attempt=attempt.n,
        job=attempt.job,
        details={"location": attempt.location, "strategy": attempt.strategy, **details},
        time=iso(now),
    )
