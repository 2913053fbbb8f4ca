"""`job_stuck` said only of a job that was stuck that long (review s10, 2026-12-07): the converse of
`sim.promises.jobs_stuck`, which owes the alert but would let a false one pass.

`job_stuck_justified` (`QUIESCENCE`) reads each `job_stuck` alert (but the one after a switch's
cancel, `after_cancel`, which counts from the cancel) against the job's own states at Vertex
(`SimJob.states`): the span the alert names, which is, for a wait, QUEUED then PENDING in a row
(from its create, or from the end of its run), and for another stuck state (CANCELLING), that
state alone from its start, had lasted `stuck_after_seconds` by the alert's time (a span that
ended before it, to its end), a FLEX_START wait its `maxWaitDuration` beyond
(`sim.flex.wait_allowance`). Before the review a FLEX_START job
cancelled by hand after a long wait by design was alerted at once: its CANCELLING was counted
with the wait before it, and with Spot's threshold.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from shared.clock import parse_iso
from sim import flex

if TYPE_CHECKING:
    from sim.vertex import SimJob
    from sim.world import Violation, World

WAITING = frozenset({"JOB_STATE_QUEUED", "JOB_STATE_PENDING"})
# The alert's time is cut to the millisecond, a state's kept to the microsecond: the alert was decided
# after its read was answered, so a state that began a millisecond or more past the alert's time is
# one it cannot have read (seed 11053: a PENDING 0.39 s after it, a second preemption).
ALERT_TIME_CUT = timedelta(milliseconds=1)
# The slack of the lengths compared, whose ends (the alert's time, a wait's start) are both cut.
CLOCK_GRANULARITY = timedelta(seconds=1)


def stuck_span(job: SimJob, state: str, at: datetime) -> tuple[datetime, datetime] | None:
    """The stuck span of `job` that holds `state` at `at` (or last before it), by its states at
    Vertex: when it began, and when it ended (`at` if it held then); None if it was never in
    `state` by then. `at` is an alert's time, cut to the millisecond: a state that began within
    `ALERT_TIME_CUT` after it may be the one the alert read (seed 374: PENDING at
    16:02:16.898xxx, alerted at 16:02:16.898). A span that ended before the alert is counted to
    its end, as the product counts a wait the read that alerted it ended (`flag_ended_wait`)."""
    seen = [(began, name) for began, name in job.states if began < at + ALERT_TIME_CUT]
    last = max((i for i, (_, name) in enumerate(seen) if name == state), default=None)
    if last is None:
        return None
    same_span = WAITING if state in WAITING else frozenset({state})
    first = last
    while first > 0 and seen[first - 1][1] in same_span:
        first -= 1
    ended = next((began for began, name in seen[last + 1 :] if name not in same_span), at)
    return seen[first][0], min(ended, at)


def job_stuck_justified(world: World) -> list[Violation]:
    from sim.invariants import alerts, violation

    out = []
    for alert in alerts(world):
        details = alert.get("details") or {}
        if alert.get("kind") != "job_stuck" or details.get("after_cancel"):
            continue
        job = world.vertex.jobs.get(str(alert.get("job") or ""))
        state, at = str(details.get("state") or ""), parse_iso(str(alert.get("time")))
        if job is None:
            continue  # a job the world does not know is `no_unknown_live_job`'s
        span = stuck_span(job, state, at)
        allowed = timedelta(seconds=world.settings.stuck_after_seconds)
        if state in WAITING:
            allowed += flex.wait_allowance(job)
        lasted = span[1] - span[0] if span else None
        if lasted is None or lasted + CLOCK_GRANULARITY < allowed:
            stuck_for = "never" if lasted is None else f"{lasted.total_seconds():.0f} s"
            out.append(
                violation(
                    "job_stuck_justified",
                    f"{alert.get('request_id')} attempt {alert.get('attempt')}: job_stuck at {alert.get('time')} "
                    f"for {job.name} {state}, which it had been (in that span) for {stuck_for}, under "
                    f"{allowed.total_seconds():.0f} s",
                )
            )
    return out


QUIESCENCE: list[Callable[[World], list[Violation]]] = [job_stuck_justified]
