"""Runs longer than Vertex's job timeout: an attempt that ran into its `scheduling.timeout` after
committing progress continues as the next attempt. Pure: the record in, the record and effects out.

Vertex ends a CustomJob at `scheduling.timeout` ("The maximum job running time. The default is 7
days.", aiplatform v1 `Scheduling`); FLEX_START allows at most 7 days. Google does not document
the state and error it ends one with, so a timeout is read from any of three signs: the state
EXPIRED, a FAILED job's error code DEADLINE_EXCEEDED, or a FAILED job that ran (Vertex's own start
and end times) as long as its timeout. The Vertex emulator ends one either way
(`timeout_end` in devstack/vertex/modes.py).

- Progress is the trainer kit's word: a `checkpoint_committed` line of the attempt (a newer
  complete checkpoint than the one it resumed from; the kit reports a re-save of a step already
  committed as `checkpoint_kept`), or, when no such line was heard by the time the timeout is
  decided, the same found in the checkpoint folder by the kit's run objects
  (`shared.deciding.folder_progress`: a line may come later than any settle window). The next
  attempt runs in the same output folder, so it resumes from the newest complete checkpoint like
  any re-queued attempt.
- A continuation is not a failure: the attempt that follows is not counted against
  `max_attempts` (`counted_attempts`). Continuations are bounded by the request's `max_runtime`,
  else the deployment's `SPOTJOBS_MAX_RUNTIME_SECONDS` (the smaller of the two): at most
  ceil(max_runtime / timeout) - 1 of them (`max_continuations`).
- A timeout without progress is a failure, with one `timeout_without_progress` alert; a timeout
  past the bound is a failure with a `job_failed` alert naming the bound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.alerts import AlertKind
from shared.clock import iso, parse_iso
from shared.deciding.effects import Effects, LogLine, attempt_alert, event_fields
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt, RequestRecord, Requeue, alert_marker
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.requests.job_policy import VERTEX_DEFAULT_TIMEOUT_SECONDS

if TYPE_CHECKING:
    from spotjobs_kit.layout import Checkpoint

# google.rpc DEADLINE_EXCEEDED: "The deadline expired before the operation could complete."
DEADLINE_EXCEEDED_CODE = 4
CONTINUATION_REASON = "timeout"


def job_timeout_seconds(custom_job: Mapping[str, Any]) -> float:
    """The request's `scheduling.timeout` in seconds ("3600s"), else Vertex's default, 7 days."""
    scheduling = (custom_job.get("jobSpec") or {}).get("scheduling") or {}
    raw = scheduling.get("timeout")
    try:
        seconds = float(str(raw).strip().rstrip("s")) if raw else VERTEX_DEFAULT_TIMEOUT_SECONDS
    except ValueError:
        return float(VERTEX_DEFAULT_TIMEOUT_SECONDS)
    return seconds if seconds > 0 else float(VERTEX_DEFAULT_TIMEOUT_SECONDS)


def timed_out(job: JobSnapshot, timeout_seconds: float) -> bool:
    """Whether Vertex ended `job` at its timeout (the signs: the module docstring)."""
    if job.state == JobState.EXPIRED:
        return True
    if job.state != JobState.FAILED:
        return False
    if int((job.error or {}).get("code") or 0) == DEADLINE_EXCEEDED_CODE:
        return True
    if not job.start_time or not job.end_time:
        return False
    return (parse_iso(job.end_time) - parse_iso(job.start_time)).total_seconds() >= timeout_seconds


def made_progress(attempt: Attempt) -> bool:
    return attempt.checkpoints_committed > 0


def continuations_before(record: RequestRecord, n: int) -> int:
    return sum(1 for attempt in record.attempts if attempt.n < n and attempt.continued_after_timeout)


def counted_attempts(record: RequestRecord, n: int) -> int:
    """Attempt n's number as `max_attempts` counts it: continuations after a timeout are not."""
    return n - continuations_before(record, n)


def max_runtime_seconds(record: RequestRecord, ceiling_seconds: float) -> float:
    requested = record.request.get("max_runtime")
    return min(float(requested), ceiling_seconds) if requested else ceiling_seconds


def max_continuations(record: RequestRecord, ceiling_seconds: float) -> int:
    timeout = job_timeout_seconds(record.request.get("custom_job") or {})
    return max(math.ceil(max_runtime_seconds(record, ceiling_seconds) / timeout) - 1, 0)


def continuations_text(record: RequestRecord, ceiling_seconds: float) -> str | None:
    """ "continued after timeout, 2 of 3" for `spotjobs status`; None before the first."""
    done = continuations_before(record, (record.latest.n + 1) if record.latest else 0)
    if done == 0:
        return None
    return f"continued after timeout, {done} of {max_continuations(record, ceiling_seconds)}"


def continue_or_fail(
    record: RequestRecord,
    attempt: Attempt,
    reason: str,
    *,
    ceiling_seconds: float,
    now: datetime,
    effects: Effects,
    found_in_folder: Checkpoint | None = None,
) -> None:
    """Attempt `attempt` (the request's latest) ran into its job timeout: the next attempt continues
    it, or the request fails (no progress, or its continuations used up). `found_in_folder`: the
    progress its checkpoint folder shows when no commit of it was heard."""
    if not made_progress(attempt) and found_in_folder is None:
        message = (
            f"attempt {attempt.n} of {record.request_id} ran into its job timeout without committing a "
            f"checkpoint ({reason}); not continued"
        )
        _fail(record, attempt, AlertKind.TIMEOUT_WITHOUT_PROGRESS, message, now, effects)
        return
    done, bound = continuations_before(record, attempt.n), max_continuations(record, ceiling_seconds)
    if done >= bound:
        limit = max_runtime_seconds(record, ceiling_seconds)
        message = (
            f"attempt {attempt.n} of {record.request_id} ran into its job timeout; its {done} continuation(s) "
            f"of {bound} used up its max_runtime of {limit:.0f} s"
        )
        _fail(record, attempt, AlertKind.JOB_FAILED, message, now, effects, max_runtime=limit)
        return
    following = attempt.n + 1
    attempt.continued_after_timeout = True
    attempt.outcome = AttemptOutcome.REQUEUED
    record.status = RequestStatus.REQUEUED
    record.requeue = Requeue(
        attempt=following,
        location=attempt.location,
        strategy=attempt.strategy,
        reason=CONTINUATION_REASON,
        decided_at=iso(now),
    )
    effects.requeue_decided = True
    # Told by the folder alone: its kit lines were not heard yet (they count when they come).
    seen = (
        f" (seen in its checkpoint folder: {found_in_folder.name}, no commit line heard yet)" if found_in_folder else ""
    )
    effects.lines.append(
        LogLine(
            "INFO",
            f"attempt {attempt.n} of {record.request_id} ran into its job timeout after committing progress{seen}; "
            f"attempt {following} continues it (continued after timeout, {done + 1} of {bound})",
            event_fields(
                record,
                attempt,
                "continued_after_timeout",
                next_attempt=following,
                continuation=done + 1,
                max_continuations=bound,
                checkpoint=attempt.last_checkpoint,
                folder_checkpoint=found_in_folder.name if found_in_folder else None,
            ),
        )
    )


def _fail(
    record: RequestRecord,
    attempt: Attempt,
    kind: AlertKind,
    message: str,
    now: datetime,
    effects: Effects,
    **details: Any,
) -> None:
    attempt.outcome = AttemptOutcome.FAILED
    record.status = RequestStatus.FAILED
    record.finished_at = iso(now)
    effects.lines.append(LogLine("ERROR", message, event_fields(record, attempt, kind.value, error=attempt.error)))
    if record.mark(alert_marker(kind, attempt.n)):
        effects.alerts.append(attempt_alert(record, attempt, kind, now, message, error=attempt.error, **details))
