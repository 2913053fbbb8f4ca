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

A job signs its own lines, so what they say of its own attempt is a claim: nothing counts past
what Vertex can have done (six restarts, so runs 0..6 and seven preemptions: `MAX_SPOT_RESTARTS`,
per replica of the job's pools: each replica is a VM Spot can reclaim; `max_preemptions`), and a
kit line with a number no job can have written (a run past that, a negative or fractional
one, a step, size or duration past the envelope's bounds, a time outside the attempt's life) is
refused whole, with a `kit_line_refused` WARNING naming the job. The service-line family is
bounded the same way: any log writer can set `task_name=service` (docs/security.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from spotjobs_kit.lines import (
    CHECKPOINT_COMMITTED,
    PREEMPTED,
    RUN_FAILED,
    RUN_FINISHED,
    RUN_STARTED,
    KitRecord,
)

from shared.alerts import AlertKind
from shared.clock import iso, parse_iso, parse_rfc3339
from shared.deciding.effects import Effects, LogLine, attempt_alert, event_fields
from shared.jobs import MAX_SPOT_PREEMPTIONS, MAX_SPOT_RESTARTS, JobSnapshot, JobState, job_replicas
from shared.ledger.records import Attempt, RequestRecord, alert_marker, evidence_marker
from shared.requests.envelope_options import MAX_SECONDS, MAX_TOTAL_STEPS

PREEMPTION_LINE_KEY = "preemption-line"
PREEMPTION_STATE_KEY = "preemption-state"
KIT_RUN_KEY = "kit-run"  # a run of the job started (its restart index)
KIT_PREEMPTED_KEY = "kit-preempted"  # a run got the SIGTERM
KIT_FINISHED_KEY = "kit-finished"  # a run finished its training
KIT_FAILED_KEY = "kit-failed"  # a run's training code raised
KIT_TIMEOUT_KEY = "kit-timeout"  # the job ended at its timeout: its last run's SIGTERM no preemption
KIT_CANCEL_KEY = "kit-cancel"  # a cancel stopped the job: its last run's SIGTERM no preemption
WAITING_STATES = frozenset({JobState.QUEUED, JobState.PENDING})
# The newest preemptions whose times an attempt keeps, oldest first: the deadline rule asks only how
# often lately (`shared.deciding.deadline.preempted_often`), and a job of many replicas may count hundreds.
PREEMPTION_TIMES_KEPT = 4
# What a kit line's numbers may be and still be evidence (docs/security.md, "Limits"): the
# envelope's bounds on steps and seconds, and a checkpoint of at most a petabyte (far past any one
# job's). A line's time lies between its attempt's claim and now, give or take a clock's skew.
MAX_CHECKPOINT_BYTES = 10**15
KIT_CLOCK_SKEW = timedelta(hours=1)
_WHOLE_BOUNDS = (
    ("step", 0, MAX_TOTAL_STEPS),
    ("resumed_step", 0, MAX_TOTAL_STEPS),
    ("total_steps", 1, MAX_TOTAL_STEPS),
    ("bytes", 0, MAX_CHECKPOINT_BYTES),
)
_SECONDS_BOUNDS = (
    ("seconds", 0.0, MAX_SECONDS),
    ("seconds_since_checkpoint", 0.0, MAX_SECONDS),
    ("steps_per_second", 0.0, float(MAX_TOTAL_STEPS)),
)
# A positive step rate slower than one step in the longest step the envelope takes means nothing.
MIN_STEPS_PER_SECOND = 1.0 / MAX_SECONDS
_SHOWN_CHARS = 40


def max_restarts(record: RequestRecord) -> int:
    """The most restarts Vertex can have made of one attempt of this request's job: six per
    replica. Whether Vertex counts its six per job, per reclaimed VM or per replica is not
    documented (docs/signals.md); per replica is the reading that allows the most."""
    return MAX_SPOT_RESTARTS * job_replicas(record.request.get("custom_job") or {})


def max_preemptions(record: RequestRecord) -> int:
    """The most VMs Vertex can have reclaimed in one attempt: each replica's restarts and the one
    that ended it (seven for a one-replica job)."""
    return MAX_SPOT_PREEMPTIONS * job_replicas(record.request.get("custom_job") or {})


def kit_line_refusal(
    attempt: Attempt, kit: KitRecord, now: datetime, most_restarts: int = MAX_SPOT_RESTARTS
) -> str | None:
    """Why a signed kit line about `attempt` is no evidence (a number its job cannot have seen), or
    None when Vertex's job can have written every number in it (`most_restarts`: `max_restarts`)."""
    if kit.run is None:
        return "its run is not a whole number"
    if not 0 <= kit.run <= most_restarts:
        return f"its run is not 0 to {most_restarts}: Vertex restarts this job at most {most_restarts} times"
    for name, low, high in _WHOLE_BOUNDS:
        whole = getattr(kit, name)
        if whole is not None and not low <= whole <= high:
            return f"its {name} is not {low} to {high}"
    for name, least, most in _SECONDS_BOUNDS:
        number = getattr(kit, name)
        if number is not None and not (math.isfinite(number) and least <= number <= most):
            return f"its {name} is not {least:g} to {most:g}"
    if kit.steps_per_second and kit.steps_per_second < MIN_STEPS_PER_SECOND:
        return f"its steps_per_second is below one step in {MAX_SECONDS:.0f} s"
    if kit.time is not None:
        moment = parse_rfc3339(kit.time)
        earliest = parse_iso(attempt.claimed_at) - KIT_CLOCK_SKEW
        if moment is None or not earliest <= moment <= now + KIT_CLOCK_SKEW:
            return "its time is not an RFC 3339 time between its attempt's claim and now"
    return None


def note_kit_line(record: RequestRecord, attempt: Attempt, kit: KitRecord, now: datetime, effects: Effects) -> bool:
    """Record what one kit line says about `attempt`; a line delivered twice changes nothing. False
    for a line refused (`kit_line_refusal`): nothing of it is kept, and a WARNING names its job."""
    refused = kit_line_refusal(attempt, kit, now, max_restarts(record))
    if refused is not None:
        effects.lines.append(
            LogLine(
                "WARNING",
                f"a {kit.event} line of attempt {attempt.n} of {record.request_id} is refused: {refused}",
                event_fields(
                    record,
                    attempt,
                    "kit_line_refused",
                    kit_event=kit.event,
                    run=_shown(kit.fields.get("run", kit.run)),
                    reason=refused,
                ),
            )
        )
        return False
    n, run = attempt.n, kit.run
    assert run is not None  # kit_line_refusal refuses a line without one
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
    return True


def _shown(value: Any) -> Any:
    """A value a job wrote, as a log field: a number as it is, anything else cut short."""
    if value is None or isinstance(value, int | float):
        return value
    text = str(value)
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}... ({len(text)} characters)"


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
    """The runs of attempt n the kit's lines named, for `key`; a marker past what Vertex can have
    run (one written before the bound) is no run."""
    prefix = evidence_marker(key, n)
    runs = (m[len(prefix) :] for m in record.markers if m.startswith(prefix))
    most = max_restarts(record)
    return {int(run) for run in runs if run.isdigit() and int(run) <= most}


def preempted_in_last_run(record: RequestRecord, n: int) -> bool:
    """The kit saw attempt n's latest run get the SIGTERM, and that run never finished (whatever
    sent it: a job that exits 0 after it, even during a cancel, left its training unfinished)."""
    runs = kit_runs(record, n)
    if not runs:
        return False
    last = max(runs)
    return last in kit_runs(record, n, KIT_PREEMPTED_KEY) and last not in kit_runs(record, n, KIT_FINISHED_KEY)


def preemption_ended_last_run(record: RequestRecord, n: int) -> bool:
    """`preempted_in_last_run`, and its SIGTERM was a preemption's, not the stop at the job's
    timeout or for a cancel (`discount_timeout_stop`, `discount_cancel_stop`)."""
    return preempted_in_last_run(record, n) and max(kit_runs(record, n)) not in _stopped(record, n)


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
    seen_at: datetime,
    effects: Effects,
) -> None:
    """Record the evidence in `record` and raise `attempt.preemptions` to what it shows, with one
    `preemption` line per increase and one `preemption_storm` alert once the count reaches the threshold. `job` is
    None for a kit line (no Vertex read). Each preemption it adds happened by `seen_at`, when the
    observation saw the job (a read's answer, a kit line's own time), not when a late or
    redelivered decision took it: its time kept, within the job's run as Vertex reported it."""
    n = attempt.n
    if line_identity:
        _note_evidence(record, attempt, PREEMPTION_LINE_KEY, line_identity, effects)
    if job is not None and fresh and attempt.state == JobState.RUNNING and job.state in WAITING_STATES:
        seen = record.count_marks(evidence_marker(PREEMPTION_STATE_KEY, n))
        _note_evidence(record, attempt, PREEMPTION_STATE_KEY, str(seen + 1), effects)
    source, counted = _counted(record, n)
    if counted <= attempt.preemptions:
        return
    moment = iso(attempt.within_run(seen_at, job))
    added = [moment] * min(counted - attempt.preemptions, PREEMPTION_TIMES_KEPT)
    attempt.preempted_at = _by_time(attempt.preempted_at + added)[-PREEMPTION_TIMES_KEPT:]
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


def _counted(record: RequestRecord, n: int) -> tuple[str, int]:
    """The family of evidence that shows the most preemptions of attempt n, and how many."""
    tallies = {
        "kit": _kit_preemptions(record, n),
        "log": record.count_marks(evidence_marker(PREEMPTION_LINE_KEY, n)),
        "state": record.count_marks(evidence_marker(PREEMPTION_STATE_KEY, n)),
    }
    source, counted = max(tallies.items(), key=lambda item: item[1])
    return source, min(counted, max_preemptions(record))  # markers written before the bound count no more


def discount_timeout_stop(record: RequestRecord, attempt: Attempt) -> None:
    """Vertex stops a job at its timeout as it stops a preempted one: the kit's `preempted` line of
    its last run is no preemption (shared/deciding/continuations.py). Marked for the attempt, not a
    run, so lines that come late (the last run's, or its `run_started`) change nothing, and the count
    lowered to what the rest of the evidence shows."""
    _discount_stop(record, attempt, KIT_TIMEOUT_KEY)


def discount_cancel_stop(record: RequestRecord, attempt: Attempt) -> None:
    """A cancel stops the job's containers as a preemption does (Google says only that the job ends
    CANCELLED; the emulator sends SIGTERM, and so may Vertex: docs/signals.md), so the kit's
    `preempted` line of its last run is no preemption either, as for `discount_timeout_stop`. A run
    a real preemption ended before the cancel is no last run once the next one started; one the
    cancel met in its restart's wait is left uncounted: at most one too few, never one too many."""
    _discount_stop(record, attempt, KIT_CANCEL_KEY)


def _discount_stop(record: RequestRecord, attempt: Attempt, key: str) -> None:
    record.mark(evidence_marker(key, attempt.n))
    lowered = _counted(record, attempt.n)[1]
    if lowered < attempt.preemptions:  # the stop ended the job's last run: its time is the newest
        kept = _by_time(attempt.preempted_at)  # a record's of before they were kept in order too
        attempt.preempted_at = kept[: max(0, len(kept) - (attempt.preemptions - lowered))]
    attempt.preemptions = lowered


def _by_time(moments: list[str]) -> list[str]:
    """Preemption times oldest first, so that the newest are kept: a later observation can tell
    an earlier time (a kit line delivered late stamps its own)."""
    return sorted(moments, key=parse_iso)


def unconfirmed_kit_preemptions(record: RequestRecord, attempt: Attempt) -> int:
    """1 while the count rests on the kit's `preempted` line of the job's last run alone, and
    neither a restart nor the job's end has confirmed it: Vertex stops a job at its timeout as it
    stops a preempted one (shared/deciding/continuations.py). What the fleet leaves out until then."""
    if attempt.outcome is not None or attempt.preemptions == 0:
        return 0
    source, counted = _counted(record, attempt.n)
    last = max(kit_runs(record, attempt.n), default=None)
    preempted = kit_runs(record, attempt.n, KIT_PREEMPTED_KEY) - _stopped(record, attempt.n)
    others = max(
        record.count_marks(evidence_marker(PREEMPTION_LINE_KEY, attempt.n)),
        record.count_marks(evidence_marker(PREEMPTION_STATE_KEY, attempt.n)),
    )
    return 1 if source == "kit" and last in preempted and counted > others else 0


def _stopped(record: RequestRecord, n: int) -> set[int]:
    """The run Vertex stopped at the job's timeout or for a cancel: the last one (no restart
    follows either)."""
    if not any(evidence_marker(key, n) in record.markers for key in (KIT_TIMEOUT_KEY, KIT_CANCEL_KEY)):
        return set()
    return {max(kit_runs(record, n), default=0)}


def note_kept_preemption_lines(
    record: RequestRecord, attempt: Attempt, identities: Iterable[str], effects: Effects
) -> None:
    """Mark on `attempt`, in the write that records its job, the Vertex preemption lines kept while
    the job was not indexed (their identities): the next decision on the attempt counts them,
    whichever delivery takes it, should the one recording the job die before its own."""
    for identity in sorted(identities):
        _note_evidence(record, attempt, PREEMPTION_LINE_KEY, identity, effects)


def _note_evidence(record: RequestRecord, attempt: Attempt, key: str, identity: str, effects: Effects) -> None:
    """Mark one piece of a Vertex family's evidence, unless the family already holds as many
    preemptions as Vertex can have done: then it is refused, with a WARNING (a forged service line,
    or a job restarted by more than preemptions), and the markers stay bounded."""
    marker = evidence_marker(key, attempt.n, identity)
    if marker in record.markers:
        return
    most = max_preemptions(record)
    if record.count_marks(evidence_marker(key, attempt.n)) >= most:
        effects.lines.append(
            LogLine(
                "WARNING",
                f"preemption evidence for attempt {attempt.n} of {record.request_id} is refused: it already "
                f"counts {most}, all Vertex can have done",
                event_fields(record, attempt, "preemption_evidence_refused", family=key, evidence=_shown(identity)),
            )
        )
        return
    record.mark(marker)


def _kit_preemptions(record: RequestRecord, n: int) -> int:
    """Runs that said `preempted`, and every run before the last one seen that did not fail (a
    restart ends the run before it), counted without building the runs before the last."""
    last = max(kit_runs(record, n), default=0)
    failed = kit_runs(record, n, KIT_FAILED_KEY)
    ended = last - sum(1 for run in failed if 0 <= run < last)  # runs 0 .. last-1 that did not fail
    preempted = kit_runs(record, n, KIT_PREEMPTED_KEY) - _stopped(record, n)
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
