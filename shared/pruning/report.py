"""What a prune run did: per request (kept, deleted, skipped, errors), in total, and as the log
lines and the prune_report alert that tell people."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spotjobs_kit.layout import Checkpoint

from shared.alerts import Alert, AlertKind
from shared.errors import is_retryable
from shared.log import Logger
from shared.pruning.journal import LeftBehind
from shared.pruning.retention import NEWEST_KEPT_WITHOUT_COMPLETE


@dataclass
class RequestReport:
    """What happened to one request's checkpoints (filled from several threads)."""

    request_id: str
    dry_run: bool
    status: str | None = None
    lifecycle: str | None = None
    keep_last: int | None = None
    kept: list[dict[str, Any]] = field(default_factory=list)
    deleted: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    retryable_errors: int = 0
    objects_deleted: int = 0
    objects_skipped: int = 0
    bytes_freed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "status": self.status,
            "lifecycle": self.lifecycle,
            "keep_last": self.keep_last,
            "dry_run": self.dry_run,
            "kept": self.kept,
            "deleted": self.deleted,
            "skipped": self.skipped,
            "objects_deleted": self.objects_deleted,
            "objects_skipped": self.objects_skipped,
            "bytes_freed": self.bytes_freed,
            "errors": self.errors,
        }

    @property
    def permanent_errors(self) -> int:
        """Errors a redelivery would meet again (403, OutOfScope...): someone has to act."""
        return len(self.errors) - self.retryable_errors

    def record_error(self, what: str, exc: BaseException) -> None:
        with self.lock:
            self.errors.append(f"{what}: {type(exc).__name__}: {exc}")
            self.retryable_errors += int(is_retryable(exc))


def checkpoint_entry(c: Checkpoint, reason: str) -> dict[str, Any]:
    """One checkpoint's line in a report's kept or deleted list."""
    return {"checkpoint": c.name, "step": c.step, "complete": c.complete, "evidence": c.evidence, "reason": reason}


@dataclass
class PruneResult:
    reports: list[RequestReport]
    dry_run: bool
    duration_seconds: float
    calls: dict[str, int]
    next_cursor: str | None = None  # where the next bounded run starts ("" = from the top)

    @property
    def summary(self) -> dict[str, Any]:
        return {
            "requests_scanned": len(self.reports),
            "checkpoints_deleted": sum(len(r.deleted) for r in self.reports),  # dry run: planned
            "objects_deleted": sum(r.objects_deleted for r in self.reports),
            "bytes_freed": sum(r.bytes_freed for r in self.reports),
            "skipped": sum(len(r.skipped) + r.objects_skipped for r in self.reports),
            "errors": sum(len(r.errors) for r in self.reports),
            "dry_run": self.dry_run,
            "duration_seconds": round(self.duration_seconds, 3),
            "calls": self.calls,
        }

    @property
    def retryable_errors(self) -> int:
        return sum(r.retryable_errors for r in self.reports)


# The most requests one report lists (what a run deleted from, what earlier runs left unreported).
REPORT_LIMIT = 50


def report_alert(result: PruneResult, *, earlier: Sequence[LeftBehind] = (), limit: int = REPORT_LIMIT) -> Alert | None:
    """The prune_report alert of a run that deleted something, met errors, or found what earlier
    runs deleted and never reported (`earlier`, shared/pruning/journal.py); None otherwise.
    Severity: ERROR with permanent errors (403, OutOfScope: someone must act), WARNING with only
    transient ones, else INFO."""
    summary = result.summary
    if not summary["objects_deleted"] and not summary["errors"] and not earlier:
        return None
    requests = [
        {
            "request_id": r.request_id,
            "checkpoints_deleted": len(r.deleted),
            "objects_deleted": r.objects_deleted,
            "bytes_freed": r.bytes_freed,
            "errors": r.errors[:5],
        }
        for r in result.reports
        if r.objects_deleted or r.errors
    ]
    only = requests[0]["request_id"] if len(requests) == 1 else None
    if any(r.permanent_errors for r in result.reports):
        severity = "ERROR"
    elif summary["errors"]:
        severity = "WARNING"
    else:
        severity = "INFO"
    return Alert.of(
        AlertKind.PRUNE_REPORT,
        severity=severity,
        message=(
            f"Pruned {summary['checkpoints_deleted']} checkpoints "
            f"({summary['objects_deleted']} objects, {summary['bytes_freed']} bytes) "
            f"in {len(requests)} requests"
            + (f"; {summary['errors']} errors" if summary["errors"] else "")
            + (f"; earlier runs that could not report were deleting from {len(earlier)} requests" if earlier else "")
            + "."
        ),
        request_id=only,
        details={
            **summary,
            "requests": requests[:limit],
            "requests_truncated": len(requests) > limit,
            "unreported_earlier": [e.to_json() for e in earlier[:limit]],
        },
    )


def log_report(log: Logger, report: RequestReport) -> None:
    """One line per request that something happened to: ERROR when it had permanent errors,
    WARNING when only transient ones (the redelivery retries them), else INFO."""
    # Kept with nothing known complete: worth a line even when nothing was deleted.
    kept_incomplete = [k for k in report.kept if k["reason"] == NEWEST_KEPT_WITHOUT_COMPLETE]
    if not (report.deleted or report.skipped or report.errors or kept_incomplete):
        return
    fields: dict[str, Any] = {
        "deleted": [d["checkpoint"] for d in report.deleted],
        "skipped": report.skipped,
        "errors": report.errors,
        "objects_deleted": report.objects_deleted,
        "bytes_freed": report.bytes_freed,
    }
    if kept_incomplete:
        fields["kept_without_complete"] = kept_incomplete
    request_log = log.bind(request_id=report.request_id, event="checkpoints_pruned")
    if report.permanent_errors:
        request_log.error("pruning a request failed; a retry would fail the same way", **fields)
    elif report.errors:
        request_log.warning("pruning a request failed for now; the redelivery retries", **fields)
    else:
        request_log.info("pruned checkpoints", **fields)
