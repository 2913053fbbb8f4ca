"""Runs longer than Vertex's job timeout in the simulated world (issue 46, item 3).

Some jobs run into their `scheduling.timeout` (`TIMEOUT_SHARE` of those that would succeed
untouched, drawn from a generator of their own so every other draw of a seed stays where it was):
`timeout` ones train and commit first (`progress`), `timeout_stuck` ones commit nothing. Vertex
(`sim.vertex.SimVertex.advance`) ends both FAILED with DEADLINE_EXCEEDED, as the emulator's
default `timeout_end` does (docs/local.md). Only a seed whose trainer writes the kit's lines shows
the progress; elsewhere every timeout is one without evidence of progress. Some plain envelope
requests name a `max_runtime` of one to three default timeouts (`with_max_runtimes`), so a chain
of timeouts meets its bound.

The invariants (`QUIESCENCE`): a continuation follows only a timeout with progress the kit
reported, by a line or by a whole save in its folder (`continued_only_after_progress`); a request gives up only once its counted attempts,
continuations left out, reach `max_attempts` (`continuations_not_counted`); a timeout without
progress (no commit line, no whole save its folder shows by the kit's layout rules) that ended its
request was alerted (one marker, so once; `alerts_at_least_once` sees it published), and only such a one (`stuck_timeout_alerted`);
no request continues more often than its `max_runtime` allows (`continuations_bounded`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from shared.alerts import AlertKind
from shared.clock import parse_iso
from shared.deciding.continuations import continuations_before, counted_attempts, max_continuations
from shared.ledger.records import Attempt, RequestRecord, alert_marker
from shared.ledger.states import RequestStatus
from shared.requests.job_policy import VERTEX_DEFAULT_TIMEOUT_SECONDS

if TYPE_CHECKING:
    from sim.invariants import Violation
    from sim.workload import Workload
    from sim.world import World

TIMEOUT_FATES = ("timeout", "timeout_stuck")
TIMEOUT_SHARE = 0.15  # of attempts that would succeed with no preemption
PROGRESS_SHARE = 0.7  # of those timeouts: the trainer committed before the timeout
MAX_RUNTIME_SHARE = 0.3  # of plain envelope requests
DEADLINE_EXCEEDED_ERROR = {"code": 4, "message": "The job ran past its scheduling.timeout of 604800 s."}


def timeout_fate(seed_text: str, request_id: str, attempt: int, fate: tuple[str, int]) -> tuple[str, int]:
    """`fate`, or a timeout in its place (never for a deadline request: its rule is another's)."""
    if fate != ("succeed", 0) or "deadline" in request_id:
        return fate
    pick = random.Random(f"{seed_text}:timeout:{request_id}:{attempt}")
    if pick.random() >= TIMEOUT_SHARE:
        return fate
    return ("timeout" if pick.random() < PROGRESS_SHARE else "timeout_stuck"), 0


def with_max_runtimes(workload: Workload) -> Workload:
    """Some plain envelope requests (first sends and a publisher's retries alike) name a
    `max_runtime` of one to three default job timeouts."""
    for arrival in workload.arrivals:
        if not arrival.is_plain_request or arrival.kind != "envelope":
            continue
        body = json.loads(arrival.data)
        pick = random.Random(f"{workload.seed_text}:max_runtime:{body['request_id']}")
        if pick.random() >= MAX_RUNTIME_SHARE:
            continue
        body["max_runtime"] = f"{pick.choice((1, 2, 3)) * VERTEX_DEFAULT_TIMEOUT_SECONDS}s"
        arrival.data = json.dumps(body, separators=(",", ":")).encode()
    return workload


def _timed_out_fate(world: World, job_name: str | None) -> str | None:
    """The fate of a job Vertex ended at its timeout (ground truth), else None (it ended otherwise:
    a cancel, a deletion, or it still runs)."""
    job = world.vertex.jobs.get(job_name or "")
    return job.fate if job is not None and job.error == DEADLINE_EXCEEDED_ERROR else None


def continued_only_after_progress(world: World) -> list[Violation]:
    from sim.invariants import records, violation

    out = []
    for record in records(world):
        for attempt in record.attempts:
            if not attempt.continued_after_timeout:
                continue
            fate = _timed_out_fate(world, attempt.job)
            if fate != "timeout" or not (attempt.checkpoints_committed or _saved_whole(world, record, attempt)):
                out.append(
                    violation(
                        "continued_only_after_progress",
                        f"{record.request_id} attempt {attempt.n} was continued: its job timed out as {fate}, "
                        f"{attempt.checkpoints_committed} checkpoint(s) reported",
                    )
                )
    return out


def _saved_whole(world: World, record: RequestRecord, attempt: Attempt, *, vouched: bool = False) -> bool:
    """Whether the attempt's job saved a whole checkpoint while it ran (ground truth): progress
    the kit tells through its folder when it prints no line for it (two-file stems, no marker).
    `vouched`: only one the kit's layout rules can tell complete, as the code's folder read does: a
    bare stem of two files only once a later stem follows it (spotjobs_kit.layout)."""
    job = world.vertex.jobs.get(attempt.job or "")
    if job is None or attempt.started_at is None or attempt.ended_at is None:
        return False
    began, ended = parse_iso(attempt.started_at), parse_iso(attempt.ended_at)
    folder = world.trainer.job_folder(job)
    saves = list(world.trainer.saves.get(folder, {}).values())
    bare_stems = vouched and world.trainer.two_file_stems and world.trainer.layout_of_folder(folder) == "torch"
    return any(
        s.complete
        and s.written_by == record.request_id
        and began <= s.at <= ended
        and not (bare_stems and all(later.step <= s.step for later in saves))
        for s in saves
    )


def continuations_not_counted(world: World) -> list[Violation]:
    from sim.invariants import records, violation

    default = world.settings.default_max_attempts
    out = []
    for record in records(world):
        latest = record.latest
        if record.status != RequestStatus.GAVE_UP or latest is None:
            continue
        counted, allowed = counted_attempts(record, latest.n), int(record.request.get("max_attempts") or default)
        if counted < allowed:
            out.append(
                violation(
                    "continuations_not_counted",
                    f"{record.request_id} gave up at attempt {latest.n}, {counted} counted of max_attempts {allowed}",
                )
            )
    return out


def stuck_timeout_alerted(world: World) -> list[Violation]:
    from sim.invariants import records, violation

    out = []
    for record in records(world):
        latest = record.latest
        for attempt in record.attempts:
            marked = alert_marker(AlertKind.TIMEOUT_WITHOUT_PROGRESS, attempt.n) in record.markers
            # Progress is a commit line or a whole save its folder shows the code (seed 6016): a
            # timeout with either that ended its request did so by its max_runtime (`job_failed`).
            ended_it = (
                record.status == RequestStatus.FAILED
                and record.cancel is None
                and attempt is latest
                and _timed_out_fate(world, attempt.job) is not None
                and attempt.checkpoints_committed == 0
                and not _saved_whole(world, record, attempt, vouched=True)
            )
            problem = None
            if ended_it and not marked:
                problem = "ended its request without progress and no alert was decided"
            elif marked and (attempt.continued_after_timeout or attempt.checkpoints_committed):
                problem = "was alerted as without progress, yet it committed or was continued"
            if problem:
                out.append(violation("stuck_timeout_alerted", f"{record.request_id} attempt {attempt.n} {problem}"))
    return out


def continuations_bounded(world: World) -> list[Violation]:
    from sim.invariants import records, violation

    ceiling = world.settings.max_runtime_seconds
    out = []
    for record in records(world):
        latest = record.latest
        if latest is None:
            continue
        done = continuations_before(record, latest.n + 1)
        bound = max_continuations(record, ceiling)
        if done > bound:
            out.append(
                violation(
                    "continuations_bounded",
                    f"{record.request_id} continued {done} times; its max_runtime allows {bound}",
                )
            )
    return out


QUIESCENCE: list[Callable[[World], list[Violation]]] = [
    continued_only_after_progress,
    continuations_not_counted,
    stuck_timeout_alerted,
    continuations_bounded,
]
