"""Preemptions counted once each, from whatever evidence arrives, however often it arrives.

What Vertex documents about a preempted Spot job is little: it is restarted (up to six times),
with no documented restart state, and once the restarts run out it FAILS with a STOCKOUT error
(docs/signals.md). So the evidence is of three families, none complete alone:

  * the trainer kit's lines (shared/deciding/events.py, Signal.KIT): `run_started` with the run's restart
    index r says runs 0..r-1 ended; each that did not report `run_failed` (the training code
    raised, and Vertex restarted it) ended by a preemption, even one killed without notice;
    `preempted` says run r got the SIGTERM. Counted once per (attempt, run);
  * optional Vertex signals where they exist (the emulator's `rich` profile, never needed): a
    preemption line from the service task, counted once per LogEntry `insertId`, and a RUNNING
    attempt observed back in QUEUED/PENDING, once per observed transition;
  * the end of the attempt: FAILED with a stockout/preemption error and no other evidence means
    at least one preemption, count unknown (`Attempt.preemptions_unknown`, reported as "≥1").

The families see the same preemptions, so the attempt's count is the largest family's tally: one
preemption seen several ways counts once, the count never exceeds the preemptions that happened,
and it is exact when any one family saw them all. The evidence keys live in `record.markers`
beside the alert keys, written in the same compare-and-swap as the count.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from spotjobs_kit.lines import (
    CHECKPOINT_COMMITTED,
    PREEMPTED,
    RUN_FAILED,
    RUN_FINISHED,
    RUN_STARTED,
    KitRecord,
)

from shared.alerts import AlertKind
from shared.deciding.effects import Effects, LogLine, attempt_alert, event_fields
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt, RequestRecord, alert_marker, evidence_marker

PREEMPTION_LINE_KEY = "preemption-line"
PREEMPTION_STATE_KEY = "preemption-state"
KIT_RUN_KEY = "kit-run"  # a run of the job started (its restart index)
KIT_PREEMPTED_KEY = "kit-preempted"  # a run got the SIGTERM
KIT_FINISHED_KEY = "kit-finished"  # a run finished its training
KIT_FAILED_KEY = "kit-failed"  # a run's training code raised
WAITING_STATES = frozenset({JobState.QUEUED, JobState.PENDING})
# A kit line's run index is a number any writer of the job's log sets: a line naming a run at or
# past this is not evidence (far more restarts than one job lives through), so the markers of an
# attempt and the work on them stay bounded (docs/security.md, "Limits").
MAX_KIT_RUN = 1000


def note_kit_line(record: RequestRecord, attempt: Attempt, kit: KitRecord) -> None:
    """Record what one kit line says about `attempt`; a line delivered twice changes nothing."""
    n, run = attempt.n, kit.run
    if run is None or not 0 <= run < MAX_KIT_RUN:
        return
    if kit.event == RUN_STARTED:
        record.mark(evidence_marker(KIT_RUN_KEY, n, str(run)))
    elif kit.event == PREEMPTED:
        record.mark(evidence_marker(KIT_RUN_KEY, n, str(run)))
        record.mark(evidence_marker(KIT_PREEMPTED_KEY, n, str(run)))
    elif kit.event == RUN_FINISHED:
        record.mark(evidence_marker(KIT_FINISHED_KEY, n, str(run)))
    elif kit.event == RUN_FAILED:
        record.mark(evidence_marker(KIT_FAILED_KEY, n, str(run)))
    elif kit.event == CHECKPOINT_COMMITTED and kit.step is not None:
        _count_checkpoint(attempt, run, kit)


def _count_checkpoint(attempt: Attempt, run: int, kit: KitRecord) -> None:
    # Lines of one attempt come in (run, step) order; an older or repeated one is not counted
    # again (a late, out-of-order line is dropped: the statistics stay a fair sample).
    position = [run, kit.step]
    if attempt.last_checkpoint is not None and position <= attempt.last_checkpoint:
        return
    attempt.last_checkpoint = position
    attempt.last_checkpoint_bytes = kit.bytes
    attempt.checkpoints_committed += 1
    attempt.checkpoint_seconds += kit.seconds or 0.0
    if kit.time:
        attempt.first_checkpoint_at = attempt.first_checkpoint_at or kit.time
        attempt.last_checkpoint_at = kit.time


def kit_runs(record: RequestRecord, n: int, key: str = KIT_RUN_KEY) -> set[int]:
    prefix = evidence_marker(key, n)
    return {int(m[len(prefix) :]) for m in record.markers if m.startswith(prefix)}


def preempted_in_last_run(record: RequestRecord, n: int) -> bool:
    """The kit saw attempt n's latest run get the SIGTERM, and that run never finished."""
    runs = kit_runs(record, n)
    if not runs:
        return False
    last = max(runs)
    return last in kit_runs(record, n, KIT_PREEMPTED_KEY) and last not in kit_runs(record, n, KIT_FINISHED_KEY)


def last_run_unfinished(record: RequestRecord, n: int) -> bool:
    """The kit has spoken for attempt n, and its latest run seen never said `run_finished`."""
    runs = kit_runs(record, n)
    return bool(runs) and max(runs) not in kit_runs(record, n, KIT_FINISHED_KEY)


def last_run_ended_by_preemption(record: RequestRecord, n: int) -> None:
    """Attempt n failed by preemption or stockout: its last run seen ended by preemption too, even
    if it was reclaimed before it could say so (a reclaim during start-up, a kill without notice)."""
    runs = kit_runs(record, n)
    if not runs:
        return
    last = max(runs)
    ended_otherwise = kit_runs(record, n, KIT_FINISHED_KEY) | kit_runs(record, n, KIT_FAILED_KEY)
    if last not in ended_otherwise:
        record.mark(evidence_marker(KIT_PREEMPTED_KEY, n, str(last)))


def count_preemptions(
    record: RequestRecord,
    attempt: Attempt,
    job: JobSnapshot | None,
    line_identity: str | None,
    *,
    fresh: bool,
    storm_threshold: int,
    now: datetime,
    effects: Effects,
) -> None:
    """Record the evidence in `record` and raise `attempt.preemptions` to what it shows, with one
    `preemption` line per increase and one `preemption_storm` alert once the count reaches the threshold. `job` is
    None for a kit line (no Vertex read)."""
    n = attempt.n
    if line_identity:
        record.mark(evidence_marker(PREEMPTION_LINE_KEY, n, line_identity))
    if job is not None and fresh and attempt.state == JobState.RUNNING and job.state in WAITING_STATES:
        seen = record.count_marks(evidence_marker(PREEMPTION_STATE_KEY, n))
        record.mark(evidence_marker(PREEMPTION_STATE_KEY, n, str(seen + 1)))
    tallies = {
        "kit": _kit_preemptions(record, n),
        "log": record.count_marks(evidence_marker(PREEMPTION_LINE_KEY, n)),
        "state": record.count_marks(evidence_marker(PREEMPTION_STATE_KEY, n)),
    }
    source, counted = max(tallies.items(), key=lambda item: item[1])
    if counted <= attempt.preemptions:
        return
    attempt.preemptions = counted
    attempt.preemptions_unknown = False
    effects.lines.append(
        LogLine(
            "WARNING",
            f"attempt {n} of {record.request_id} was preempted ({counted} so far)",
            event_fields(record, attempt, "preemption", preemptions=counted, source=source),
        )
    )
    # The catalogue's "N times or more": the N-th preemption alerts (the marker keeps it once).
    if counted >= storm_threshold and record.mark(alert_marker(AlertKind.PREEMPTION_STORM, n)):
        effects.alerts.append(
            attempt_alert(
                record,
                attempt,
                AlertKind.PREEMPTION_STORM,
                now,
                f"attempt {n} of {record.request_id} was preempted {counted} times (threshold {storm_threshold})",
                preemptions=counted,
                threshold=storm_threshold,
            )
        )


def _kit_preemptions(record: RequestRecord, n: int) -> int:
    """Runs that said `preempted`, and every run before the last one seen that did not fail (a
    restart ends the run before it), counted without building the runs before the last."""
    last = max(kit_runs(record, n), default=0)
    failed = kit_runs(record, n, KIT_FAILED_KEY)
    ended = last - sum(1 for run in failed if 0 <= run < last)  # runs 0 .. last-1 that did not fail
    preempted = kit_runs(record, n, KIT_PREEMPTED_KEY)
    return ended + sum(1 for run in preempted if not 0 <= run < last or run in failed)


def preemptions_text(attempt: Attempt) -> str:
    """The attempt's preemptions as people read them: a count, or "≥1" when the attempt ended by
    preemption and no evidence of how many reached us (never 0)."""
    return "≥1" if attempt.preemptions_unknown else str(attempt.preemptions)


def total_preemptions_text(attempts: Iterable[Attempt]) -> str:
    """The preemptions of several attempts: "4", or "≥4" when some attempt's count is unknown."""
    attempts = list(attempts)
    total = sum(a.preemptions or int(a.preemptions_unknown) for a in attempts)
    return f"≥{total}" if any(a.preemptions_unknown for a in attempts) else str(total)
