"""Preemptions counted once each, from whatever evidence arrives, however often it arrives.

Preemption counting rule. Two kinds of evidence exist, and neither is complete:
  * a preemption line from Vertex's service task (configured patterns), counted once per
    LogEntry `insertId` (container lines are hints only: a trainer logging "preempted" while it
    checkpoints must not count the same preemption twice);
  * a RUNNING attempt observed back in QUEUED/PENDING, counted once per observed transition.
The same preemption usually produces both, and either can be missing (a lost event, a restart
faster than a poll). The attempt's count is the larger of the two tallies, so one preemption seen
both ways counts once; the count never exceeds the preemptions that happened and is exact when
the log sink delivers. The evidence keys live in `record.markers` beside the alert keys, written
in the same compare-and-swap as the count.
"""

from __future__ import annotations

from datetime import datetime

from shared.effects import Effects, LogLine, attempt_alert, event_fields
from shared.ledger import Attempt, RequestRecord, alert_marker, evidence_marker
from shared.vertex import JobSnapshot, JobState

PREEMPTION_LINE_KEY = "preemption-line"
PREEMPTION_STATE_KEY = "preemption-state"
WAITING_STATES = frozenset({JobState.QUEUED, JobState.PENDING})


def count_preemptions(
    record: RequestRecord,
    attempt: Attempt,
    job: JobSnapshot,
    line_identity: str | None,
    *,
    fresh: bool,
    storm_threshold: int,
    now: datetime,
    effects: Effects,
) -> None:
    """Record the evidence in `record` and raise `attempt.preemptions` to what it shows, with one
    `preemption` line per increase and one `preemption_storm` alert past the threshold."""
    n = attempt.n
    if line_identity:
        record.mark(evidence_marker(PREEMPTION_LINE_KEY, n, line_identity))
    if fresh and attempt.state == JobState.RUNNING and job.state in WAITING_STATES:
        seen = record.count_marks(evidence_marker(PREEMPTION_STATE_KEY, n))
        record.mark(evidence_marker(PREEMPTION_STATE_KEY, n, str(seen + 1)))
    by_line = record.count_marks(evidence_marker(PREEMPTION_LINE_KEY, n))
    by_state = record.count_marks(evidence_marker(PREEMPTION_STATE_KEY, n))
    counted = max(by_line, by_state)
    if counted <= attempt.preemptions:
        return
    attempt.preemptions = counted
    effects.lines.append(
        LogLine(
            "WARNING",
            f"attempt {n} of {record.request_id} was preempted ({counted} so far)",
            event_fields(
                record,
                attempt,
                "preemption",
                preemptions=counted,
                source="log" if by_line >= by_state else "state",
            ),
        )
    )
    storm = alert_marker("preemption_storm", n)
    if counted > storm_threshold and record.mark(storm):
        effects.alerts.append(
            attempt_alert(
                record,
                attempt,
                "preemption_storm",
                "WARNING",
                now,
                f"attempt {n} of {record.request_id} was preempted {counted} times "
                f"(threshold {storm_threshold})",
                preemptions=counted,
                threshold=storm_threshold,
            )
        )
