"""When a job is stuck: one `job_stuck` alert for a wait that lasted past its threshold (QUEUED
then PENDING in a row is one wait, timed from when it began: `shared.deciding.waits`), judged at
every read during it and at the read that ends it, and one for a job a cancel has not ended, that
holds back the attempt decided after it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from shared.alerts import AlertKind
from shared.clock import parse_iso
from shared.deciding.effects import Effects, LogLine, attempt_alert, event_fields
from shared.deciding.preemptions import WAITING_STATES
from shared.deciding.waits import STUCK_STATES
from shared.jobs import FLEX_START, JobSnapshot, max_wait_seconds
from shared.ledger.records import Attempt, RequestRecord, alert_marker


def flag_stuck(
    record: RequestRecord,
    attempt: Attempt,
    job: JobSnapshot,
    stuck_after_seconds: float,
    now: datetime,
    effects: Effects,
    read_at: datetime,
) -> None:
    """`read_at`: when the read was taken: the job is known to have waited until then, not until
    `now` (it may have started or ended since: issue 43)."""
    threshold = stuck_after_seconds
    if attempt.ending:
        # A cancel is best effort: a job it does not end holds back the attempt decided after it.
        # One never sent (Vertex refuses it for good, a 403 on every pass) holds it back as long,
        # counted from its decision (seed 707).
        since = attempt.cancel_sent_at or attempt.cancel_decided_at
        if not since:
            return
        stuck_for = (read_at - parse_iso(since)).total_seconds()
        marker = alert_marker(AlertKind.JOB_STUCK, attempt.n, "cancel")
        cancel = "cancel" if attempt.cancel_sent_at else "cancel was decided, which was never sent (reconcile logs why)"
        message = (
            f"attempt {attempt.n} of {record.request_id} is still {job.state} {stuck_for:.0f} s after its "
            f"{cancel}; attempt {attempt.n + 1} waits for it to end"
        )
    else:
        since = attempt.wait_began_at
        if job.state not in STUCK_STATES or not since:
            return
        # The whole wait, not only its current state's: QUEUED 5 h then PENDING 5 h waited 10 h.
        stuck_for = (read_at - parse_iso(since)).total_seconds()
        if job.state in WAITING_STATES:
            threshold = _wait_threshold(record, attempt, stuck_after_seconds)
        marker = alert_marker(AlertKind.JOB_STUCK, attempt.n, "wait", since)  # once per wait
        message = (
            f"attempt {attempt.n} of {record.request_id} has waited {stuck_for:.0f} s since {since}, now {job.state}"
        )
    if stuck_for < threshold or not record.mark(marker):
        return
    wait_began_at = None if attempt.ending else since
    _alert_stuck(
        record, attempt, job.state, now, effects, message, stuck_for, wait_began_at, after_cancel=attempt.ending
    )


def _wait_threshold(record: RequestRecord, attempt: Attempt, stuck_after_seconds: float) -> float:
    if attempt.strategy == FLEX_START:
        # FLEX_START waits for capacity by design, up to its maxWaitDuration (a day by default):
        # stuck only once it waited that long and the usual threshold beyond.
        return stuck_after_seconds + max_wait_seconds(record.request.get("custom_job") or {})
    return stuck_after_seconds


@dataclass(frozen=True)
class EndedWait:
    """A wait a read ended: from `began` until `ended`, last seen in `state` (QUEUED or PENDING)."""

    began: str
    ended: datetime
    state: str


def wait_ended_by(attempt: Attempt, job: JobSnapshot, read_at: datetime) -> EndedWait | None:
    """The wait the record holds that this read ends (the job left its waiting states), before
    the read is taken in: a record that never tracked it (a job recorded by its adoption) waited
    from its create, if it never ran. It ended by the read's update time, and a wait before the
    job's first run at its start time, its first RUNNING (custom_job.proto): the read may come long
    after, the job's end (seed 11916: no read of the run was taken in)."""
    if attempt.state not in WAITING_STATES or job.state in WAITING_STATES:
        return None
    never_ran = not (job.start_time or attempt.started_at)
    since = attempt.wait_began_at or (attempt.created_at if never_ran else None)
    if not since:
        return None
    ended = min(parse_iso(job.update_time) if job.update_time else read_at, read_at)
    if job.start_time and parse_iso(job.start_time) > parse_iso(since):
        ended = min(ended, parse_iso(job.start_time))
    return EndedWait(since, ended, attempt.state)


def flag_ended_wait(
    record: RequestRecord,
    attempt: Attempt,
    job: JobSnapshot,
    stuck_after_seconds: float,
    now: datetime,
    effects: Effects,
    wait: EndedWait | None,
) -> None:
    """A wait is judged at the read that ends it too: one no read saw while it lasted past the
    threshold (seed 9505: a job indexed and never recorded, adopted 7 h after its create when its
    first log line came, its request's pending cancel sent at once, first decided CANCELLING).
    One alert per wait: a read during it that alerted holds its marker."""
    if wait is None:
        return
    stuck_for = (wait.ended - parse_iso(wait.began)).total_seconds()
    marker = alert_marker(AlertKind.JOB_STUCK, attempt.n, "wait", wait.began)
    if stuck_for < _wait_threshold(record, attempt, stuck_after_seconds) or not record.mark(marker):
        return
    message = (
        f"attempt {attempt.n} of {record.request_id} waited {stuck_for:.0f} s since {wait.began} until it left "
        f"{wait.state}, now {job.state}"
    )
    _alert_stuck(record, attempt, wait.state, now, effects, message, stuck_for, wait.began, after_cancel=False)


def _alert_stuck(
    record: RequestRecord,
    attempt: Attempt,
    state: str,
    now: datetime,
    effects: Effects,
    message: str,
    stuck_for: float,
    wait_began_at: str | None,
    *,
    after_cancel: bool,
) -> None:
    effects.lines.append(
        LogLine(
            "WARNING",
            message,
            event_fields(record, attempt, "job_stuck", state=state, stuck_seconds=round(stuck_for)),
        )
    )
    effects.alerts.append(
        attempt_alert(
            record,
            attempt,
            AlertKind.JOB_STUCK,
            now,
            message,
            state=state,
            stuck_seconds=round(stuck_for),
            wait_began_at=wait_began_at,
            # Stuck in a wait, or holding back the attempt after its cancel: two conditions, each
            # alerted once (its own marker), which may name the same state (seed 1618).
            after_cancel=after_cancel,
        )
    )
