"""The promises people rely on, as invariants (issue 43, item 3): each a function of the world
returning its violations, judged on ground truth the stand-ins keep (what Vertex did to each job,
what the trainer wrote, what the publishers sent), never on the code under test's own account of it
where ground truth exists. Registered in `sim.invariants` (docs/simulator.md, "Promises checked").

- `alert_catalogue`: each kind of `shared.alerts.AlertKind` whose documented condition held in the
  run was published naming its request, at least once (`CONDITIONS`); a kind the world cannot
  produce ground truth for says why in `NOT_CHECKED`, so no kind is left without one or the other;
  and no `deadline_missed` was published without its condition (`false_deadline_alarms`);
- `nothing_stuck_silently`: a request not ended that has not moved for longer than the documented
  bound has an alert naming it;
- `deadlines_met`: a deadline request whose run kept the rule's assumptions met its deadline;
- `fleet_facts_bounded`: every fleet fact is bounded by what Vertex did for its attempt's job;
- `logs_and_status_own_lines`: `spotjobs logs` and `spotjobs status` show nothing another job wrote
  as the request's own.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.alerts import AlertKind
from sim import budgets, flex
from sim.continuations import DEADLINE_EXCEEDED_ERROR
from sim.faults import HAND_WRITTEN_ATTEMPT
from sim.vertex import STOCKOUT_ERROR, USER_ERROR

if TYPE_CHECKING:
    from shared.ledger.records import Attempt, RequestRecord
    from sim.vertex import Refused, SimJob
    from sim.world import Violation, World

# What a check of the world may lag behind the moment a condition first held: a reconcile pass
# or two (they run every `reconcile_interval_seconds`), a cancel Vertex takes its time over (the
# stand-in's slowest is 400 s), and a delivery's redelivery backoff.
LAG = timedelta(seconds=900)


@dataclass(frozen=True)
class Expected:
    """An alert the run owes: of `kind`, naming `request_id` (None: any request, or none)."""

    kind: AlertKind
    request_id: str | None
    why: str
    location: str | None = None  # an alert of no request names it in its details (`stray_sweep_refused`)
    job: str | None = None  # and the job, when the condition is of one job (a stray's refused cancel)
    # The alert owed is one published after this moment: one of an earlier run of the condition
    # does not speak for this one.
    after: datetime | None = None
    by: datetime | None = None  # and no later than this moment: one of a later run does not either


# The invariants' own readers of the world (imported when called: sim.invariants registers this
# module's invariants when it is imported, so either may be imported first).


def records(world: World) -> Iterator[RequestRecord]:
    from sim.invariants import records as read

    return read(world)


def alerts(world: World) -> list[dict[str, Any]]:
    from sim.invariants import alerts as read

    return read(world)


def violation(invariant: str, detail: str) -> Violation:
    from sim.invariants import violation as make

    return make(invariant, detail)


def excused(world: World, request_id: str, location: str | None = None) -> str | None:
    from sim.invariants import excused as why

    return why(world, request_id, location)


# Ground truth, read from the stand-ins.


def jobs_by_attempt(world: World) -> dict[tuple[str, int], list[SimJob]]:
    """Every job Vertex ever created, by the request and attempt its labels name."""
    out: dict[tuple[str, int], list[SimJob]] = collections.defaultdict(list)
    for job in world.vertex.jobs.values():
        out[(job.request_id, job.attempt)].append(job)
    return out


def only_jobs(world: World) -> Iterator[SimJob]:
    """The jobs that are their attempt's only one (an attempt with a stray beside it is ambiguous:
    which of the two the request follows is the code's own record)."""
    for jobs in jobs_by_attempt(world).values():
        if len(jobs) == 1:
            yield jobs[0]


def cancelled_by_operator(world: World) -> set[str]:
    """Requests an operator cancelled, or whose budget stopped them: the same cancel (sim/budgets.py)."""
    return set(world.creates_before_cancel) | budgets.stopped(world)


def waited_seconds(job: SimJob, now: datetime) -> float:
    """How long the job waited for a machine (QUEUED, PENDING) before it ran or ended (a cancel
    ends the wait when it starts; its end is later by the cancel's own delay, within `LAG`). One
    wait, from its create, whatever its states (issue 43: QUEUED may last, `queued_hold`); the
    waits a restart shows (`restart_state`) are `waits`'."""
    return ((job.start_time or job.end_time or now) - job.create_time).total_seconds()


def waits(job: SimJob, now: datetime) -> list[tuple[datetime, datetime, str]]:
    """Each wait of the job for a machine, (began, ended or now, what): the one before its first
    run, from its create, and each wait a restart showed (`SimJob.restart_waits`), from the
    preemption that began it."""
    end = job.end_time or now
    first = (job.create_time, job.start_time or end, "")
    return [first, *((began, ended or end, " after a restart") for began, ended in job.restart_waits)]


def names(alert: dict[str, Any], request_id: str) -> bool:
    """Whether an alert names the request: its own field, or (a prune run's report of several
    requests) its list of requests and of what earlier runs left unreported."""
    if alert.get("request_id") == request_id:
        return True
    details = alert.get("details") if isinstance(alert.get("details"), dict) else {}
    listed = [*(details.get("requests") or []), *(details.get("unreported_earlier") or [])]
    return any(isinstance(r, dict) and r.get("request_id") == request_id for r in listed) or bool(
        details.get("requests_truncated")
    )


# The catalogue's conditions, one per kind that ground truth can tell (`AlertKind.meaning`).


def invalid_requests(world: World) -> list[Expected]:
    """`invalid_request`: a request the deployment's policy refuses (the workload's `invalid`
    arrivals carry an image outside `SPOTJOBS_ALLOWED_IMAGE_PREFIXES`)."""
    out = []
    for arrival in world.workload.arrivals:
        if arrival.index in world.disabled_arrivals or arrival.kind != "invalid":
            continue
        request_id = arrival.label.split()[-1]
        out.append(Expected(AlertKind.INVALID_REQUEST, request_id, f"arrival #{arrival.index} has a refused image"))
    return out


def reads_refused(world: World, job: SimJob, *, hiding_its_end: bool) -> bool:
    """Whether Vertex refused gets in the job's location (a 403: `sim.faults`) while it lived:
    on_job_event reads a job before it counts a service line, so its preemption lines of that time
    went unread for good. `hiding_its_end`: refused for good from before its end was read, so
    nobody learns how it ended, and reconcile's `lookup_failed` is the word owed instead."""
    end = job.end_time or world.clock.now()
    for refusal in world.vertex.refusals:
        if refusal.operation != "get" or refusal.location != job.location or refusal.since > end + LAG:
            continue
        if refusal.until is None or (not hiding_its_end and refusal.until > job.create_time):
            return True
    return False


def unread_timeout_stop(world: World, job: SimJob) -> int:
    """1 when Vertex stopped `job` at its timeout and refused for good the reads that would show
    that end (`reads_refused`): the kit's `preempted` line of the stop counts as a preemption until
    the job's end is seen (docs/signals.md), so for good (seed 1889); else 0."""
    return int(job.error == DEADLINE_EXCEEDED_ERROR and reads_refused(world, job, hiding_its_end=True))


def preemptions_announced(world: World, job: SimJob) -> list[datetime]:
    """When Vertex announced each of the job's preemptions (its service lines), earliest first, once
    the ledger indexed the job (`jobs/<job_id>.json`: a job never indexed is never its claim's, or
    its look-up was refused). A line that came before the index (a claim whose create's answer was
    lost) is kept by on_job_event and counted by the adoption, or, should that delivery die
    between recording the job and counting, by submit's redelivery or the job's next service line
    (shared/kept_lines.py; seed 35): owed as every other."""
    from shared.ledger.store import JOBS_PREFIX

    job_id = job.name.rsplit("/", 1)[-1]
    if world.storage.objects(world.settings.state_bucket).get(f"{JOBS_PREFIX}{job_id}.json") is None:
        return []
    seen: dict[str, datetime] = {}  # by insertId: a message delivered twice is one line
    for message in world.pubsub.on(world.settings.job_events_topic):
        if message.message_id in world.hostile:
            continue
        entry = message.json()
        if not isinstance(entry, dict) or "was preempted" not in str(entry.get("textPayload")):
            continue
        labels = (entry.get("resource") or {}).get("labels") or {}
        if labels.get("job_id") == job_id:
            seen.setdefault(str(entry.get("insertId")), message.publish_time)
    return sorted(seen.values())


# Who looks up a claim's job by its labels: reconcile for a stale claim, submit_job for a claim it
# takes over (the only look-up a claim waiting in the quota line gets, seed 1617); both say
# `lookup_failed` when Vertex refuses it (shared/attempt_lookup.py).
CLAIM_LOOKERS = ("reconcile", "submit_job")


def claim_lookups_refused(world: World) -> dict[str, str]:
    """Requests a look-up of whose claim's job (a listing by its attempt's labels, by one of
    `CLAIM_LOOKERS`) Vertex refused for good, and why. Not submit's replay guard's listing by the
    request's labels alone (`Refused.request_wide`): it has no claim, its message is redelivered
    (`submit_blocked`) until it dead-letters, and the dead-letter alert is its word (seed 3729)."""
    return {
        r.request_id: f"Vertex answered {r.code} to {r.caller}'s {r.operation} in {r.location}"
        for r in world.vertex.refused
        if _claim_lookup(r)
    }


def _claim_lookup(refused: Refused) -> bool:
    """A refused listing by an attempt's labels, by one of `CLAIM_LOOKERS`."""
    return (
        refused.operation == "list"
        and bool(refused.request_id)
        and refused.caller in CLAIM_LOOKERS
        and not refused.request_wide
    )


def never_named_for_a_refused_lookup(world: World) -> set[tuple[str, int]]:
    """(request, attempt) of claims whose job the record never named because a look-up of it was
    refused for good (a 403 on list): nothing is decided on the job's lines or its end, and
    `lookup_failed` is the word owed (seed 118: a storm, and a failed job, of such a claim)."""
    unlooked = set(claim_lookups_refused(world))
    return {(r.request_id, a.n) for r in records(world) if r.request_id in unlooked for a in r.attempts if not a.job}


def sweep_listings_refused(world: World) -> dict[str, str]:
    """Locations where Vertex refused the stray sweep's listing (reconcile's list naming no
    request: a 403 on list, `sim.faults`) while the refusal stands for good, and why."""
    now = world.clock.now()
    standing = {r.location for r in world.vertex.refusals if r.until is None and r.applies("list", r.location, now)}
    return {
        r.location: f"Vertex answered {r.code} to the stray sweep's list in {r.location}"
        for r in world.vertex.refused
        if r.operation == "list" and not r.request_id and r.caller == "reconcile" and r.location in standing
    }


def said_blind(world: World) -> set[str]:
    """Locations the stray sweep cannot list now (a refusal of `list` in force) that a
    `stray_sweep_refused` alert names: a live job there that the ledger does not record is the
    operator's to end, and was told (seed 10018: a job re-run by hand in such a location)."""
    now = world.clock.now()
    refused_now = {r.location for r in world.vertex.refusals if r.applies("list", r.location, now)}
    return refused_now & listings_refused_said(world)


def listings_refused_said(world: World) -> set[str]:
    """Locations a `stray_sweep_refused` alert named as blind (its listing refused, not a stray's cancel)."""
    return {details.get("location") for details in _sweep_refusals_said(world) if details.get("call", "list") == "list"}


def said_uncancelled(world: World) -> set[str]:
    """Jobs whose cancel Vertex refuses now (a refusal of `cancel` in force in their location) that
    a `stray_sweep_refused` alert names: a stray the sweep sees and cannot end is the operator's to
    end, and was told (seed 954: a job re-run by hand where cancels are refused for good)."""
    now = world.clock.now()
    refused_now = {r.location for r in world.vertex.refusals if r.applies("cancel", r.location, now)}
    return {
        details.get("job")
        for details in _sweep_refusals_said(world)
        if details.get("call") == "cancel" and details.get("location") in refused_now
    }


def _sweep_refusals_said(world: World) -> list[dict[str, Any]]:
    return [
        alert["details"]
        for alert in alerts(world)
        if alert.get("kind") == AlertKind.STRAY_SWEEP_REFUSED.value and isinstance(alert.get("details"), dict)
    ]


def stray_cancels_refused(world: World) -> dict[str, str]:
    """Live jobs its readable (or deleted by a person) record does not name, in a location whose
    `cancel` Vertex refuses for good and whose listing it does not, of a request whose cancel the
    code met refused there: the sweep saw each and could not end it; and why."""
    now = world.clock.now()
    standing = {r.location for r in world.vertex.refusals if r.until is None and r.applies("cancel", r.location, now)}
    blind = {r.location for r in world.vertex.refusals if r.applies("list", r.location, now)}
    met = {(r.request_id, r.location): r.code for r in world.vertex.refused if r.operation == "cancel"}
    by_id = {r.request_id: r for r in records(world)}
    out = {}
    for job in world.vertex.jobs.values():
        code = met.get((job.request_id, job.location))
        if not job.live or code is None or job.location not in standing or job.location in blind:
            continue
        record = by_id.get(job.request_id)
        if record is None and job.request_id not in world.tampering.deleted_records:
            continue  # unreadable: nothing is decided on it (`ledger_corrupt` is its word)
        if record is not None and (record.cancel is not None or any(a.job == job.name for a in record.attempts)):
            continue
        out[job.name] = (
            f"Vertex answered {code} to the cancel of {job.name}, a job of {job.request_id} its record does not name"
        )
    return out


def blind_sweeps(world: World) -> list[Expected]:
    """`stray_sweep_refused`: the stray sweep's listing of a location was refused for good, or its
    cancel of a stray it sees (naming the job)."""
    listings = [
        Expected(AlertKind.STRAY_SWEEP_REFUSED, None, why, location)
        for location, why in sweep_listings_refused(world).items()
    ]
    cancels = [
        Expected(AlertKind.STRAY_SWEEP_REFUSED, None, why, world.vertex.jobs[name].location, name)
        for name, why in stray_cancels_refused(world).items()
    ]
    return listings + cancels


def left_unreadable(world: World) -> set[str]:
    from sim.invariants import left_unreadable as unreadable

    return unreadable(world)


def preemption_storms(world: World) -> list[Expected]:
    """`preemption_storm`: Vertex preempted an attempt's job `preemption_storm_threshold` times or
    more, announced (`preemptions_announced`), and its lines could be read (`reads_refused`, and a
    claim whose look-up Vertex refused for good never names its job).
    Not when a person deleted the request's record before the threshold's line was heard
    (`deleted_before`; seed 3807: the record-less stray's `stray_job` is its word)."""
    threshold = world.settings.preemption_storm_threshold
    cancelled = cancelled_by_operator(world)
    unnamed = never_named_for_a_refused_lookup(world)
    unreadable = left_unreadable(world)  # nothing is decided on such a record: `ledger_corrupt` is its word
    return [
        Expected(
            AlertKind.PREEMPTION_STORM,
            job.request_id,
            f"attempt {job.attempt}'s job was preempted {job.vms_reclaimed} times, {len(seen)} of them announced "
            f"(threshold {threshold})",
        )
        for job in only_jobs(world)
        if job.vms_reclaimed >= threshold
        and len(seen := preemptions_announced(world, job)) >= threshold
        and not deleted_before(world, job.request_id, seen[threshold - 1])
        and job.request_id not in cancelled
        and (job.request_id, job.attempt) not in unnamed
        and job.request_id not in unreadable
        and not reads_refused(world, job, hiding_its_end=False)
    ]


def max_attempts_of(world: World, record: RequestRecord) -> int:
    return int(record.request.get("max_attempts") or world.settings.default_max_attempts)


def attempts_exhausted(world: World) -> list[Expected]:
    """`attempts_exhausted`: the job of the last attempt (`max_attempts`, continuations after a
    timeout not counted: sim/continuations.py) failed with a stockout, or its FLEX_START wait ran
    out (a capacity error, RESOURCE_EXHAUSTED: sim/flex.py); not when an attempt followed it (a
    deadline outranks `max_attempts`: its on-demand attempt finishes the work, seed 190)."""
    from shared.deciding.continuations import counted_attempts

    cancelled = cancelled_by_operator(world)
    by_id = {r.request_id: r for r in records(world)}
    unnamed = never_named_for_a_refused_lookup(world)
    return [
        Expected(
            AlertKind.ATTEMPTS_EXHAUSTED,
            job.request_id,
            f"attempt {job.attempt}'s job " + ("waited out its maxWaitDuration" if job.flex_start else "stocked out"),
        )
        for job in only_jobs(world)
        if (job.error == STOCKOUT_ERROR or flex.wait_expired(job))
        and job.request_id in by_id
        and counted_attempts(by_id[job.request_id], job.attempt) >= max_attempts_of(world, by_id[job.request_id])
        and by_id[job.request_id].attempt(job.attempt + 1) is None  # a deadline's on-demand attempt: no give-up
        and job.request_id not in cancelled
        and (job.request_id, job.attempt) not in unnamed
        and not reads_refused(world, job, hiding_its_end=True)
    ]


def jobs_failed(world: World) -> list[Expected]:
    """`job_failed`: an attempt's job failed for another reason than capacity (the trainer's error),
    its record still readable (seed 60: a person wrote it unreadable while its job ran) and not
    deleted by a person before the code could read the failure (`deleted_before`; seed 560: the
    record deleted 1.3 s before its job failed)."""
    cancelled = cancelled_by_operator(world)
    unnamed = never_named_for_a_refused_lookup(world)
    unreadable = left_unreadable(world)  # nothing is decided on such a record: `ledger_corrupt` is its word
    return [
        Expected(AlertKind.JOB_FAILED, job.request_id, f"attempt {job.attempt}'s job failed: {USER_ERROR['message']}")
        for job in only_jobs(world)
        if job.error == USER_ERROR
        and job.request_id not in cancelled
        and job.request_id not in unreadable
        and (job.request_id, job.attempt) not in unnamed
        and not reads_refused(world, job, hiding_its_end=True)
        and not deleted_before(world, job.request_id, job.end_time or job.update_time)
    ]


def jobs_stuck(world: World) -> list[Expected]:
    """`job_stuck`: a job waited (QUEUED, PENDING) longer than `stuck_after_seconds`, by more than
    the reconcile passes and cancel delays it may take to see it (`LAG`); not one whose record a
    person left unreadable (nothing is decided on it: `ledger_corrupt` is its word), nor one of a
    claim whose look-up Vertex refused for good (its record never names the job: `lookup_failed`
    is the word owed, seed 84). A FLEX_START job waits for capacity by design, up to its
    maxWaitDuration (docs/requests.md: stuck "FLEX_START only past its `maxWaitDuration`"): its
    bound is that much longer (`sim.flex.wait_allowance`). A reconcile pass that died near the
    line holds the run lock over the ticks of its lease, so the bound is that much longer for
    each (`budgets.dead_pass_seconds_around`; seed 4709: the wait ended before any pass saw it).
    Nor one whose record a person deleted before its line (`deleted_before`: nothing is decided on
    a request whose record is gone; its job is a stray, whose refused cancel is said by
    `stray_sweep_refused`; review s10)."""
    from sim.invariants import left_unreadable

    now = world.clock.now()
    unreadable = left_unreadable(world)
    unlooked = never_named_for_a_refused_lookup(world)
    return [
        Expected(AlertKind.JOB_STUCK, job.request_id, f"attempt {job.attempt}'s job waited {seconds:.0f} s{what}")
        for job in only_jobs(world)
        if job.request_id not in unreadable and (job.request_id, job.attempt) not in unlooked
        for began, ended, what in waits(job, now)
        if (seconds := (ended - began).total_seconds()) > stuck_bound_seconds(world, job, began, ended)
        and not deleted_before(world, job.request_id, stuck_line(world, job, began))
    ]


def stuck_line(world: World, job: SimJob, began: datetime) -> datetime:
    """When the code may first call `job`'s wait from `began` stuck: its threshold (longer for a
    FLEX_START job) past that."""
    return began + timedelta(seconds=world.settings.stuck_after_seconds) + flex.wait_allowance(job)


def stuck_bound_seconds(world: World, job: SimJob, began: datetime, waited_until: datetime) -> float:
    """How long `job` may wait from `began` before its `job_stuck` is owed: the threshold (longer
    for a FLEX_START job), the passes that notice it (`LAG`), and the leases of passes that died
    near its line."""
    allowed = world.settings.stuck_after_seconds + flex.wait_allowance(job).total_seconds()
    line = stuck_line(world, job, began)
    return allowed + LAG.total_seconds() + budgets.dead_pass_seconds_around(world, line, waited_until)


def checkpoints_pruned(world: World) -> list[Expected]:
    """`prune_report`: an object the trainer wrote in a request's folder is gone (only a prune run
    deletes checkpoints in the world); at least once, a later run's report included."""
    table = world.storage.objects(world.settings.checkpoint_bucket)
    gone: dict[str, str] = {}
    for folder, saves in sorted(world.trainer.saves.items()):
        request_id = folder.rstrip("/").split("/")[-2]
        for save in saves.values():
            missing = [
                name
                for name in save.objects
                if folder + name not in table and folder + name not in world.tampering.deleted_objects
            ]
            if missing and request_id not in gone:
                gone[request_id] = f"{folder}{missing[0]} was deleted"
    return [Expected(AlertKind.PRUNE_REPORT, rid, why) for rid, why in gone.items()]


def deadline_of(record: RequestRecord) -> datetime | None:
    from shared.clock import parse_iso

    try:
        return parse_iso(str(record.request["deadline"])) if record.request.get("deadline") else None
    except (ValueError, OverflowError):
        return None


def deadlines_missed(world: World) -> list[Expected]:
    """`deadline_missed`: a request's deadline passed and it had not finished: no job of it
    succeeded by then, and one of its jobs succeeded after it or was still live `LAG` past it, or
    the request is still unfinished `LAG` past it (a claim or re-queue waiting for its create,
    with no job to read: review s10)."""
    now = world.clock.now()
    cancelled = cancelled_by_operator(world)
    jobs = collections.defaultdict(list)
    for job in world.vertex.jobs.values():
        jobs[job.request_id].append(job)
    out = []
    for record in records(world):
        deadline = deadline_of(record)
        if deadline is None or record.request_id in cancelled:
            continue
        own = jobs[record.request_id]
        done = [j.end_time for j in own if j.state == "JOB_STATE_SUCCEEDED" and j.end_time]
        if any(t <= deadline for t in done):
            continue
        late = [t for t in done if t > deadline]
        live_past = [j for j in own if (j.end_time or now) > deadline + LAG]
        unfinished_past = not record.is_terminal and now > deadline + LAG
        if late or live_past or unfinished_past:
            out.append(Expected(AlertKind.DEADLINE_MISSED, record.request_id, f"its deadline {deadline} passed"))
    return out


def false_deadline_alarms(world: World) -> list[Violation]:
    """A `deadline_missed` alert only where its condition held (an alert without it is a false
    alarm): raised at or after the deadline it names, for a request none of whose jobs succeeded by
    then. A read taken before the deadline and decided after it says nothing of it (issue 43)."""
    from shared.clock import parse_iso

    succeeded = collections.defaultdict(list)
    for job in world.vertex.jobs.values():
        if job.state == "JOB_STATE_SUCCEEDED" and job.end_time:
            succeeded[job.request_id].append(job.end_time)
    out = []
    for alert in alerts(world):
        details = alert.get("details") if isinstance(alert.get("details"), dict) else {}
        if alert.get("kind") != AlertKind.DEADLINE_MISSED.value or not details.get("deadline"):
            continue
        deadline, raised, request_id = (
            parse_iso(str(details["deadline"])),
            parse_iso(alert["time"]),
            alert.get("request_id"),
        )
        in_time = [t for t in succeeded[request_id] if t <= deadline]
        if raised < deadline or in_time:
            why = f"raised at {raised}" if raised < deadline else f"a job of it succeeded at {min(in_time)}"
            out.append(violation("alert_catalogue", f"deadline_missed for {request_id}, deadline {deadline}: {why}"))
    return out


def quota_bursts(world: World) -> list[Expected]:
    """`quota_limited`: at some moment more requests waited for their first create than the
    submission quota creates in twice `quota_alert_after_seconds` (each request the ledger
    accepted waits from when a submit_job instance first took its message (`first_submitted`;
    before that it waited for an instance, which the deployment's sizing decides, not the quota)
    to its job's create at Vertex, or to Vertex's first refusal of its create for good: its turn
    came, and `submit_failed` speaks for it (seed 6509); a GPU request in a world whose GPU quota
    fills waits for that quota, not this one; a cancelled one may never be created). A submit_job
    delivery of it that met the stalled region (`sim.faults` `region_stalled`) ends its wait too:
    it waits for the stall, not the quota, until an instance takes it again (seed 12137: a message
    past its lease with no record is looked for in every location the stray sweep lists,
    docs/ARCHITECTURE.md, "Replays and lost documents", and a burst bound for a region that
    answered waited the stall out, nacked, the line never longer than two). Its alert names no
    request."""
    from sim.vertex import _uses_gpus

    settings = world.settings
    published: dict[str, datetime] = {}
    held: dict[str, list[datetime]] = collections.defaultdict(list)
    gpu: set[str] = set()
    for message in world.pubsub.on(settings.job_requests_topic):
        body = message.json()
        if not isinstance(body, dict) or not isinstance(body.get("request_id"), str):
            continue
        rid = body["request_id"]
        held[rid] += world.stall_held.get(message.message_id, [])  # a re-queue's delivery too
        if "attempt" not in body:
            published.setdefault(rid, world.first_submitted.get(rid, message.publish_time))
            if _uses_gpus(body.get("custom_job") or {}):
                gpu.add(rid)
    created = {}  # when each request's wait for its create ended
    for job in world.vertex.jobs.values():
        if job.attempt == 1:
            created[job.request_id] = min(job.create_time, created.get(job.request_id, job.create_time))
    for refusal in world.vertex.refused:
        if refusal.operation == "create" and refusal.caller == "submit_job" and refusal.request_id:
            created[refusal.request_id] = min(refusal.at, created.get(refusal.request_id, refusal.at))
    now = world.clock.now()
    accepted = {r.request_id for r in records(world)} - cancelled_by_operator(world)
    edges = []
    for rid, at in published.items():
        if rid not in accepted or (world.workload.gpu_quota_full and rid in gpu):
            continue
        edges += _quota_waits([at, *world.submit_takes.get(rid, ())], held[rid], created.get(rid, now))
    waiting = most = 0
    for _, step in sorted(edges):
        waiting += step
        most = max(most, waiting)
    slots = 2 * settings.quota_alert_after_seconds * settings.vertex_creates_per_minute / 60.0
    if most <= slots + 1:
        return []
    return [Expected(AlertKind.QUOTA_LIMITED, None, f"{most} requests waited for their create at once")]


def _quota_waits(takes: list[datetime], holds: list[datetime], end: datetime) -> list[tuple[datetime, int]]:
    """A request's waits for the quota before `end`, as edges: each from a take of its message
    while it was not waiting to the next hold by the stalled region, or to `end`."""
    edges: list[tuple[datetime, int]] = []
    since = None
    for at, is_hold in sorted([*((t, False) for t in takes), *((h, True) for h in holds)]):
        if at >= end:
            break
        if not is_hold and since is None:
            since = at
        elif is_hold and since is not None:
            edges += [(since, 1), (at, -1)]
            since = None
    if since is not None:
        edges += [(since, 1), (end, -1)]
    return edges


def request_id_conflicts(world: World) -> list[Expected]:
    """`request_id_conflict`: one request id published with two bodies, both valid (neither a
    re-queue nor a redrive, nor an id spotjobs derives, which a publisher may not take), the
    second while the first's record is kept; not for a record a person left unreadable (submit
    cannot compare bodies with it: `ledger_corrupt` is its word, seed 258). A person's deletion
    ends what is known to be kept: only bodies published before it count (after it, the id is
    claimed afresh by whichever comes, seed 3667)."""
    from shared.jobs import RESERVED_ID_PREFIXES
    from shared.requests.envelope import InvalidJobRequest
    from shared.requests.policy import validate_request

    bodies: dict[str, set[bytes]] = collections.defaultdict(set)
    for arrival in world.workload.arrivals:
        if arrival.index in world.disabled_arrivals or arrival.topic != "job_requests_topic":
            continue
        try:
            request = validate_request(arrival.data, attributes=dict(arrival.attributes), settings=world.settings)
        except (InvalidJobRequest, ValueError):
            continue
        if (
            request.attempt is not None
            or not request.request_id
            or request.request_id.startswith(RESERVED_ID_PREFIXES)
            or "CloudPubSubDeadLetterSourceDeliveryCount" in arrival.attributes
        ):
            continue
        deleted_at = world.tampering.records_deleted_at.get(request.request_id)
        if deleted_at is not None and arrival.at >= deleted_at:
            continue
        bodies[request.request_id].add(json.dumps(request.custom_job, sort_keys=True).encode())
    unreadable = left_unreadable(world)
    return [
        Expected(AlertKind.REQUEST_ID_CONFLICT, rid, f"published with {len(found)} bodies")
        for rid, found in bodies.items()
        if len(found) > 1 and rid not in unreadable
    ]


def refused_for_good(world: World, operation: str, callers: tuple[str, ...]) -> dict[str, str]:
    """Requests one of whose `operation` calls (by one of `callers`) Vertex refused for good."""
    return {
        r.request_id: f"Vertex answered {r.code} to {r.caller}'s {r.operation} in {r.location}"
        for r in world.vertex.refused
        if r.operation == operation and r.request_id and r.caller in callers
    }


def creates_refused(world: World) -> list[Expected]:
    """`submit_failed`: Vertex refused a request's create for good (a 403 for the create
    permission, a 400 on its job: `sim.faults`), and nobody cancelled the request. Not when the
    code created a job of the request after its last refusal: the delivery that met the refusal
    died before recording it, the permission was granted again, and the request ran (seed 85)."""
    cancelled = cancelled_by_operator(world)
    refused = refused_for_good(world, "create", ("submit_job",))
    last_refused: dict[str, datetime] = {}
    for r in world.vertex.refused:
        if r.operation == "create" and r.caller == "submit_job" and r.request_id:
            last_refused[r.request_id] = max(r.at, last_refused.get(r.request_id, r.at))
    created_since = {
        job.request_id
        for job in world.vertex.jobs.values()
        if job.name not in world.tampering.duplicated_jobs  # a person's re-run is not the code's create
        and job.request_id in last_refused
        and job.create_time > last_refused[job.request_id]
    }
    return [
        Expected(AlertKind.SUBMIT_FAILED, rid, why)
        for rid, why in refused.items()
        if rid not in cancelled and rid not in created_since
    ]


def lookups_refused(world: World) -> list[Expected]:
    """`lookup_failed`: a look-up of a claim's job (a listing by its attempt's labels, by reconcile
    or by submit_job's take-over: `claim_lookups_refused`), or reconcile's get of a recorded
    attempt's job, was refused (a 403 for the list or the get permission: `sim.faults`). Not when
    every such refusal of the request was met by a delivery that a fault of ours then cut short
    (`World.refusals_cut_short`): the alert is decided in the ledger when the refusal is met, and
    the retry's own look-up is what says it again, so one that meets no refusal owes nothing
    (seed 2418: the redelivery found the request cancelled, its attempt ended with no create
    sent, nothing to look up; seed 3849: reconcile's next pass read the live job from its listing,
    a get being only for a job the listing cannot answer)."""
    met_whole = {
        r.request_id
        for index, r in enumerate(world.vertex.refused)
        if (_claim_lookup(r) or _reconcile_get(r)) and index not in world.refusals_cut_short
    }
    refused = claim_lookups_refused(world) | refused_for_good(world, "get", ("reconcile",))
    return [Expected(AlertKind.LOOKUP_FAILED, rid, why) for rid, why in refused.items() if rid in met_whole]


def _reconcile_get(refused: Refused) -> bool:
    return refused.operation == "get" and bool(refused.request_id) and refused.caller == "reconcile"


def deleted_jobs_failed(world: World) -> list[Expected]:
    """`job_failed`: an ended job the request still followed was deleted at Vertex (NotFound
    for good: `shared.reconcile_vertex.vanished_job`), and the request did not end otherwise. Nor
    as a timeout the code had read before the deletion (its record marks it; seed 97): a timeout
    stays one (shared/deciding/job_end.py), its own alert speaks for it. A record a person
    deleted afterwards is read as it was then: what the code had decided stays decided (seed 871).
    Nor when Vertex refused gets for good before the deletion could be read (`deletion_unread`), or
    a person deleted the record before it could (`record_deleted_before_read`), or left it
    unreadable (`record_unreadable_before_read`)."""
    from shared.deciding.preemptions import KIT_TIMEOUT_KEY
    from shared.ledger.records import evidence_marker
    from sim.invariants import read_record

    cancelled = cancelled_by_operator(world)
    as_deleted = (
        read_record(data) for documents in world.tampering.deleted_record_documents.values() for data in documents
    )
    known = [*records(world), *(record for record in as_deleted if record is not None)]
    ended_otherwise = {r.request_id for r in known if r.status.value in ("SUCCEEDED", "CANCELLED")}
    timeouts_read = {
        (r.request_id, marker) for r in known for marker in r.markers if marker.startswith(KIT_TIMEOUT_KEY)
    }

    def timeout_read(name: str, rid: str) -> bool:
        job = world.vertex.jobs.get(name)
        if job is None or job.error != DEADLINE_EXCEEDED_ERROR:
            return False
        return (rid, evidence_marker(KIT_TIMEOUT_KEY, job.attempt)) in timeouts_read

    return [
        Expected(AlertKind.JOB_FAILED, rid, f"its job {name.rsplit('/', 1)[-1]} was deleted at Vertex")
        for name, rid in world.tampering.deleted_jobs.items()
        if name in world.tampering.followed_when_deleted
        and rid not in cancelled
        and rid not in ended_otherwise
        and not timeout_read(name, rid)
        and not deletion_unread(world, world.vertex.jobs[name])
        and not record_deleted_before_read(world, world.vertex.jobs[name])
        and not record_unreadable_before_read(world, world.vertex.jobs[name])
    ]


def deletion_took_effect(world: World, job: SimJob) -> datetime:
    """When a person's deletion of the job took effect: at once for an ended job, at its end for a
    live one (Vertex cancels it first)."""
    asked = world.tampering.jobs_deleted_at[job.name]
    return max(asked, job.end_time) if job.end_time else asked


def deletion_unread(world: World, job: SimJob) -> bool:
    """Whether Vertex refused gets in the job's location for good from before the code could read
    its deletion (`LAG` after it took effect). Only a get answers NotFound (a listing just leaves
    the job out), so the code never learns the job is gone, and reconcile's refused get owes
    `lookup_failed` instead (seed 3047)."""
    deleted = deletion_took_effect(world, job)
    return any(
        refusal.operation == "get"
        and refusal.location == job.location
        and refusal.until is None
        and refusal.since <= deleted + LAG
        for refusal in world.vertex.refusals
    )


def record_deleted_before_read(world: World, job: SimJob) -> bool:
    """Whether a person deleted the job's request record after asking for the job's deletion and
    before the code could read that deletion (`LAG` after it took effect): with the record gone
    nothing is decided on the request (seed 4179: the record deleted while the job was still
    cancelling). A first deletion before the job's was of an earlier record: it excuses nothing."""
    deleted_at = world.tampering.records_deleted_at.get(job.request_id)
    return (
        deleted_at is not None
        and deleted_at >= world.tampering.jobs_deleted_at[job.name]
        and deleted_before(world, job.request_id, deletion_took_effect(world, job))
    )


def record_unreadable_before_read(world: World, job: SimJob) -> bool:
    """Whether a person last wrote the job's request record by hand, in a shape the code cannot
    read and left so, before the code could read the job's deletion (`LAG` after it took effect):
    nothing is decided on such a record, `ledger_corrupt` is its word (seed 4345: the record
    written truncated 2 min after the deleted job ended, before the next reconcile pass)."""
    from sim.invariants import left_unreadable

    written_at = world.tampering.written_at.get(f"requests/{job.request_id}.json")
    return (
        written_at is not None
        and written_at < deletion_took_effect(world, job) + LAG
        and job.request_id in left_unreadable(world)
    )


def records_unreadable(world: World) -> list[Expected]:
    """`ledger_corrupt`: a person wrote a request's record in a shape the code cannot read, and
    it stayed so (the retention sweep reads every record, so it is said by then)."""
    from sim.invariants import read_record

    state = world.storage.objects(world.settings.state_bucket)
    return [
        Expected(AlertKind.LEDGER_CORRUPT, name[len("requests/") : -len(".json")], f"written by hand as {shape}")
        for name, shape in sorted(world.tampering.written.items())
        if name.startswith("requests/") and name in state and read_record(state[name].data) is None
    ]


def trigger_states_unreadable(world: World) -> list[Expected]:
    """`trigger_corrupt`: someone wrote a trigger's state in a shape the code cannot read, and it
    stayed so (the tick's retention sweep reads every trigger's state, so it is said by then)."""
    from shared.triggers.store import unreadable

    state = world.storage.objects(world.settings.state_bucket)
    return [
        Expected(AlertKind.TRIGGER_CORRUPT, None, f"{name} written as {shape}")
        for name, shape in sorted(world.tampering.written.items())
        if name.startswith("triggers/") and name in state and unreadable(name, state[name].data) is not None
    ]


def strays_cancelled(world: World) -> list[Expected]:
    """`stray_job`: the code cancelled a live job of a request (`SimVertex.cancels`) that no attempt
    of the request's record names, the record readable or deleted by a person; not a request a
    person cancelled (its late job gets no alert: their cancel asked it to stop), but owed for one
    its budget stopped, which asked no one (seed 10994: a person's console copy). A move's or a
    deadline switch's cancel is of the job its attempt records, so it owes nothing, even once a
    person deletes the record: a cancel before the deletion is judged on the record as deleted
    (an attempt's job, once recorded, stays; seed 1504)."""
    from shared.deciding.budget_watch import BUDGET_SOURCE
    from sim.invariants import read_record

    cancelled = set(world.creates_before_cancel)
    by_id = {r.request_id: r for r in records(world)}
    out: dict[str, Expected] = {}
    for when, name, caller in world.vertex.cancels:
        job = world.vertex.jobs.get(name)
        if job is None or caller == "operator" or job.request_id in cancelled or job.request_id in out:
            continue
        record = by_id.get(job.request_id)
        deleted_at = world.tampering.records_deleted_at.get(job.request_id)
        if deleted_at is not None and when < deleted_at:
            record = read_record(world.tampering.deleted_record_documents[job.request_id][0])
        if record is None and job.request_id not in world.tampering.deleted_records:
            continue  # unreadable (`ledger_corrupt` is its word) or never written
        asked = record is not None and record.cancel is not None and record.cancel.source != BUDGET_SOURCE
        if record is not None and (asked or any(a.job == name for a in record.attempts)):
            continue
        why = f"{caller} cancelled its job {name.rsplit('/', 1)[-1]} (attempt {job.attempt}), which its record does not name"
        out[job.request_id] = Expected(AlertKind.STRAY_JOB, job.request_id, why)
    return list(out.values())


def sweeps_cut_short(world: World) -> list[Expected]:
    """`stray_sweep_cut_short`: a stray (a job its request's readable record never came to name, or
    of a record a person deleted) lived, uncancelled by anyone, through
    `shared.reconcile.SWEEP_CUT_SHORT_PASSES` reconcile passes in a row that listed its location
    (`SimVertex.pass_calls`), ran to their end, drew no fault and began after the passes before
    them had sent their last call (overlapping passes count one run in a last-writer-wins state,
    `CUT_SHORT_STATE`, so one may not have counted): a whole sweep of any of them would have
    cancelled it, so each was cut short (its budget or its window), and the run of them is said,
    by the last of them: the alert must be published no later than a claim lease and `LAG` after
    that pass's last call (its note, claimed by a pass that died before its publish, is taken over
    once older than a claim lease), so one of a later run does not speak for it. Not after a
    bound: the product alerts once for a run of passes cut short, which may have begun, and been
    alerted, before the stray existed, and the world holds no truth of a sweep that was whole.
    Counted from `LAG` after its create (a claim's job is no stray until its attempt records
    another, and a lagging list may miss it), or, for the job of a record a person deleted, from
    that deletion: until then the record named it and no sweep owed it a cancel (seeds 11415,
    11432); not where Vertex refuses a list or a cancel (`stray_sweep_refused` says that)."""
    from shared.reconcile import SWEEP_CUT_SHORT_PASSES

    passes: dict[int, list[Any]] = collections.defaultdict(list)
    for call in world.vertex.pass_calls:
        if call.sender is not None:
            passes[id(call.sender)].append(call)
    spans = sorted(
        ((calls[0].at, calls[-1].at, calls[0].sender, {c.location for c in calls}) for calls in passes.values()),
        key=lambda span: (span[0], span[1]),
    )
    refused = {r.location for r in world.vertex.refusals if r.operation in ("list", "cancel")}
    first_cancel: dict[str, datetime] = {}
    for when, name, _caller in world.vertex.cancels:
        first_cancel.setdefault(name, when)
    by_id = {r.request_id: r for r in records(world)}
    now = world.clock.now()
    sent_before: list[datetime | None] = []  # per span: the last call of the spans before it
    latest: datetime | None = None
    for _, end, _, _ in spans:
        sent_before.append(latest)
        latest = end if latest is None else max(latest, end)
    slack = timedelta(seconds=world.settings.claim_lease_seconds) + LAG
    out = []
    for job in world.vertex.jobs.values():
        record = by_id.get(job.request_id)
        if record is None and job.request_id not in world.tampering.deleted_records:
            continue  # unreadable (`ledger_corrupt`), or a job of a request not recorded yet
        if (record is not None and any(a.job == job.name for a in record.attempts)) or job.location in refused:
            continue
        began, ended = stray_since(world, job), min(first_cancel.get(job.name, now), job.end_time or now)
        run = 0
        for (start, end, sender, locations), before in zip(spans, sent_before, strict=True):
            if start < began or end > ended:
                continue
            whole = not getattr(sender, "crashed", False) and not getattr(sender, "faults", 0)
            whole = whole and (before is None or start >= before)
            run = run + 1 if whole and job.location in locations else 0
            if run >= SWEEP_CUT_SHORT_PASSES:
                why = f"stray {job.name.rsplit('/', 1)[-1]} of {job.request_id} outlived {run} passes in a row"
                out.append(Expected(AlertKind.STRAY_SWEEP_CUT_SHORT, None, why, by=end + slack))
                break
    return out


def stray_since(world: World, job: SimJob) -> datetime:
    """When a stray became one for the sweep: `LAG` after its create, or the deletion by a person
    of the record that named it (docs/ARCHITECTURE.md: a deleted record's job is a stray)."""
    from sim.invariants import read_record

    since = job.create_time + LAG
    deletions = zip(
        world.tampering.deleted_record_documents.get(job.request_id, []),
        world.tampering.deleted_record_times.get(job.request_id, []),
    )
    for document, deleted_at in deletions:
        record = read_record(document)
        if record is not None and any(a.job == job.name for a in record.attempts):
            return max(since, deleted_at)
    return since


def locations_unanswering(world: World) -> list[Expected]:
    """`location_unanswering`: `shared.unanswering.UNANSWERING_PASSES` reconcile passes in a row
    sent calls to a location and got a reply to none of them (`SimVertex.unanswered_calls`: each
    ran out its timeout or met a 503, a stalled region's or any other), each pass whole: it ran to
    its end, drew no fault but its unanswered calls' own, and began after the passes before it had
    sent their last call. Passes in the order they began; one that sent no call there is passed
    over (the product counts nothing of it either), one not whole breaks the run (it may or may not
    have counted). The alert must be published after the last whole pass before the run that got
    a reply there, if any (an alert of an earlier outage does not speak for this one)."""
    from shared.unanswering import UNANSWERING_PASSES

    by_pass: dict[int, list[tuple[int, Any]]] = collections.defaultdict(list)
    for index, call in enumerate(world.vertex.pass_calls):
        if call.sender is not None:
            by_pass[id(call.sender)].append((index, call))
    unanswered = world.vertex.unanswered_calls
    runs: collections.Counter[str] = collections.Counter()
    replied_at: dict[str, datetime] = {}
    sent_before: datetime | None = None  # the last call of the passes so far
    out = []
    for calls in sorted(by_pass.values(), key=lambda calls: (calls[0][1].at, calls[-1][1].at)):
        sender, began, last = calls[0][1].sender, calls[0][1].at, calls[-1][1].at
        failed = sum(index in unanswered for index, _ in calls)
        whole = not getattr(sender, "crashed", False) and getattr(sender, "faults", 0) == failed
        whole = whole and (sent_before is None or began >= sent_before)
        sent_before = last if sent_before is None else max(sent_before, last)
        for location in sorted({call.location for _, call in calls}):
            if not whole:
                runs[location] = 0
                continue
            if any(index not in unanswered for index, call in calls if call.location == location):
                runs[location] = 0
                replied_at[location] = last
                continue
            runs[location] += 1
            if runs[location] == UNANSWERING_PASSES:
                why = f"{UNANSWERING_PASSES} reconcile passes in a row got no reply to any call in {location}"
                since = replied_at.get(location)
                out.append(Expected(AlertKind.LOCATION_UNANSWERING, None, why, location=location, after=since))
    return out


# Re-publishes of one claim closer together than this are one (a publish retried after a lost
# answer); reconcile's are a claim lease apart at least.
REPUBLISH_APART = timedelta(seconds=60)


def note_republish(world: World, message: Any) -> None:
    """Reconcile published to job-requests: a re-publish of a claim when the attempt it names is,
    in the record as stored at that moment, claimed without a job or an outcome (a re-queue names
    an attempt the record does not hold yet). Read without a call."""
    body = message.json()
    request_id = message.attributes.get("request_id")
    attempt = body.get("attempt") if isinstance(body, dict) else None
    if not request_id or not isinstance(attempt, int):
        return
    stored = world.storage.objects(world.settings.state_bucket).get(f"requests/{request_id}.json")
    try:
        record = json.loads(stored.data) if stored is not None else None
    except ValueError:
        return
    now = world.clock.now()
    # The claim, counted just now (its `republished_at`): not a drainer's publish of an attempt in line.
    claims = [
        a
        for a in (record.get("attempts") or [] if isinstance(record, dict) else [])
        if isinstance(a, dict)
        and a.get("n") == attempt
        and not a.get("job")
        and not a.get("outcome")
        and isinstance(a.get("republished_at"), str)
        and now - datetime.fromisoformat(a["republished_at"]) < REPUBLISH_APART
    ]
    if claims:
        moments = world.republished.setdefault((request_id, attempt), [])
        if not moments or now - moments[-1] >= REPUBLISH_APART:
            moments.append(now)


def claims_stalled(world: World) -> list[Expected]:
    """`claim_stalled`: reconcile re-published a claim more than `max_claim_republishes` times
    (`note_republish`): the attempt still had no job."""
    limit = world.settings.max_claim_republishes
    return [
        Expected(
            AlertKind.CLAIM_STALLED,
            request_id,
            f"reconcile re-published attempt {n}'s claim {len(moments)} times (at most {limit} before the alert)",
        )
        for (request_id, n), moments in sorted(world.republished.items())
        if len(moments) > limit and not excused(world, request_id)
    ]


def notify_refusals(world: World) -> list[Expected]:
    """`notify_refused`: a publish to a request's notification topic was refused for good (the
    world's refusing topics: `sim.pubsub.SimPubSub.refusing`)."""
    from shared.deciding.notices import notify_topic

    refused = {topic for topic, _ in world.pubsub.refused}
    return [
        Expected(AlertKind.NOTIFY_REFUSED, record.request_id, f"its topic {name} refused a publish")
        for record in records(world)
        if (topic := notify_topic(record)) is not None and (name := topic.rsplit("/", 1)[-1]) in refused
    ]


def timeouts_without_progress(world: World) -> list[Expected]:
    """`timeout_without_progress`: an attempt's job ran into its timeout and its trainer committed
    nothing the code could hear of (`timeout_stuck`, or any timeout where the trainer writes no kit
    lines: sim/continuations.py). Not when a person deleted the request's record before the alert
    was due (`deleted_before_due`)."""
    cancelled = cancelled_by_operator(world)
    unnamed = never_named_for_a_refused_lookup(world)
    unreadable = left_unreadable(world)
    return [
        Expected(
            AlertKind.TIMEOUT_WITHOUT_PROGRESS, job.request_id, f"attempt {job.attempt}'s job timed out ({job.fate})"
        )
        for job in only_jobs(world)
        if job.error == DEADLINE_EXCEEDED_ERROR
        and (job.fate == "timeout_stuck" or not world.trainer.kit_lines)
        and job.request_id not in cancelled
        and (job.request_id, job.attempt) not in unnamed
        and job.request_id not in unreadable
        and not reads_refused(world, job, hiding_its_end=True)
        and not deleted_before_due(world, job, world.settings.kit_lines_settle_seconds)
    ]


def deleted_before_due(world: World, job: SimJob, wait_seconds: float) -> bool:
    """Whether a person deleted the job's request record before the code owed a word on the job's
    end: the code may wait `wait_seconds` after it (documented)."""
    ended = job.end_time or world.clock.now()
    return deleted_before(world, job.request_id, ended + timedelta(seconds=wait_seconds))


def deleted_before(world: World, request_id: str, due: datetime) -> bool:
    """Whether a person deleted the request's record before the code could say what was due at
    `due` (with `LAG` to see it). With the record gone nothing is decided on the request
    (docs/simulator.md: `object_deleted`); its alert is owed only if it was due before."""
    deleted_at = world.tampering.records_deleted_at.get(request_id)
    return deleted_at is not None and deleted_at < due + LAG


def job_failed_conditions(world: World) -> list[Expected]:
    return jobs_failed(world) + deleted_jobs_failed(world)


CONDITIONS: dict[AlertKind, Callable[[World], list[Expected]]] = {
    AlertKind.INVALID_REQUEST: invalid_requests,
    AlertKind.PREEMPTION_STORM: preemption_storms,
    AlertKind.ATTEMPTS_EXHAUSTED: attempts_exhausted,
    AlertKind.JOB_FAILED: job_failed_conditions,
    AlertKind.JOB_STUCK: jobs_stuck,
    AlertKind.PRUNE_REPORT: checkpoints_pruned,
    AlertKind.DEADLINE_MISSED: deadlines_missed,
    AlertKind.QUOTA_LIMITED: quota_bursts,
    AlertKind.REQUEST_ID_CONFLICT: request_id_conflicts,
    AlertKind.SUBMIT_FAILED: creates_refused,
    AlertKind.LOOKUP_FAILED: lookups_refused,
    AlertKind.LEDGER_CORRUPT: records_unreadable,
    AlertKind.TRIGGER_CORRUPT: trigger_states_unreadable,
    AlertKind.STRAY_JOB: strays_cancelled,
    AlertKind.STRAY_SWEEP_REFUSED: blind_sweeps,
    AlertKind.STRAY_SWEEP_CUT_SHORT: sweeps_cut_short,
    AlertKind.LOCATION_UNANSWERING: locations_unanswering,
    AlertKind.CLAIM_STALLED: claims_stalled,
    AlertKind.BUDGET_REACHED: budgets.budgets_reached,
    AlertKind.BUDGET_UNPRICED: budgets.budgets_unpriced,
    AlertKind.TIMEOUT_WITHOUT_PROGRESS: timeouts_without_progress,
    AlertKind.NOTIFY_REFUSED: notify_refusals,
}
# A report of what was deleted may come in a later prune run's (at least once): judged after retention.
JUDGED_AFTER_RETENTION = frozenset({AlertKind.PRUNE_REPORT, AlertKind.LEDGER_CORRUPT, AlertKind.TRIGGER_CORRUPT})

NOT_CHECKED: dict[AlertKind, str] = {
    AlertKind.INCOMPLETE_SUCCESS: "the simulated trainer's last run says `run_finished` before its job "
    "succeeds: a process that exits 0 after its SIGTERM is not modelled",
    AlertKind.TRIGGER_FAILED: "the world's trigger definitions always render, validate and publish",
    AlertKind.DEADLINE_AT_RISK: "its condition is the rule's own estimate (committed steps as the ledger "
    "saw them, the fleet's changeover): no ground truth; `deadlines_met` judges the outcome",
    AlertKind.LEDGER_MISSING: "a person deletes ledger records (`sim.faults`) and the world knows the jobs, "
    "but the condition is a delivery to submit_job of a request whose record is gone at that moment and that has "
    "jobs (at least a claim lease after its publish; sooner, with its active marker still there and a job created "
    "since the publish): the world keeps no record of when each delivery began (not coded)",
}


def unpromised_kinds() -> list[AlertKind]:
    """Kinds of the catalogue with neither a condition nor a reason it is not checked."""
    return [kind for kind in AlertKind if kind not in CONDITIONS and kind not in NOT_CHECKED]


def answers(alert: dict[str, Any], expected: Expected) -> bool:
    """Whether an alert of the expected kind is the one owed: it names the location, or the
    request, that the condition names (any one, when it names neither), published after the
    moment the condition says (`Expected.after`)."""
    if expected.after is not None and not _published(alert, after=expected.after):
        return False
    if expected.by is not None and not _published(alert, by=expected.by):
        return False
    if expected.location is not None:
        details = alert.get("details")
        if not isinstance(details, dict) or details.get("location") != expected.location:
            return False
        return expected.job is None or details.get("job") == expected.job
    return expected.request_id is None or names(alert, expected.request_id)


def _published(alert: dict[str, Any], *, after: datetime | None = None, by: datetime | None = None) -> bool:
    """Whether the alert's time is after `after` and no later than `by` (either may be None)."""
    from shared.clock import parse_iso

    try:
        at = parse_iso(alert["time"])
    except (KeyError, TypeError, ValueError):
        return False
    return (after is None or at > after) and (by is None or at <= by)


def owed_alerts(world: World, kinds: Sequence[AlertKind]) -> list[Violation]:
    published = alerts(world)
    out = []
    for kind in kinds:
        of_kind = [a for a in published if a.get("kind") == kind.value]
        for expected in CONDITIONS[kind](world):
            if any(answers(a, expected) for a in of_kind):
                continue
            named = expected.request_id or expected.location
            who = f" for {named}" if named else ""
            out.append(violation("alert_catalogue", f"no {kind.value} alert{who}: {expected.why}"))
    return out


def alert_catalogue(world: World) -> list[Violation]:
    """Once quiet: every kind whose condition held was alerted, naming its request."""
    owed = owed_alerts(world, [k for k in CONDITIONS if k not in JUDGED_AFTER_RETENTION])
    return owed + false_deadline_alarms(world)


def alert_catalogue_after_retention(world: World) -> list[Violation]:
    return owed_alerts(world, sorted(JUDGED_AFTER_RETENTION))


# Nothing stuck without a word.


def stuck_bound(world: World) -> timedelta:
    """The longest a request may stand still unremarked: a job waiting `stuck_after_seconds`, a
    claim re-published `max_claim_republishes` times (a lease, doubling, at most an hour apart),
    and the passes that notice either (`LAG`)."""
    from shared.swap import backoff_seconds

    settings = world.settings
    lease = settings.claim_lease_seconds
    claim = sum(backoff_seconds(lease, k, max(lease, 3600.0)) for k in range(settings.max_claim_republishes + 1))
    return timedelta(seconds=max(settings.stuck_after_seconds, lease + claim)) + LAG


def nothing_stuck_silently(world: World) -> list[Violation]:
    """Once quiet, a request not ended whose jobs (or, without one, whose record) have not changed
    for longer than `stuck_bound` has an alert naming it (a `quota_limited` alert, which names no
    request, speaks for the requests in the line it counts while that line creates: a create in
    its location within `stuck_bound`). `liveness` lets a GPU request wait
    for a quota that never frees; this requires that it is said. A FLEX_START job waiting for
    capacity may stand still its maxWaitDuration longer: a long documented wait is not stuck
    (docs/requests.md; `sim.flex.wait_allowance`)."""
    now = world.clock.now()
    bound = stuck_bound(world)
    published = alerts(world)
    named = {a.get("request_id") for a in published}
    quota_said = any(a.get("kind") == AlertKind.QUOTA_LIMITED.value for a in published)
    state = world.storage.objects(world.settings.state_bucket)
    # A line speaks through its burst's alert only while it creates (seed 1617: one stalled for a month).
    draining = {create.location for create in world.vertex.created if now - create.at <= bound}
    in_line = {
        name.rsplit("/", 1)[-1].split("~")[1]
        for name in state
        if name.startswith("pacing/") and "/waiting/" in name and name.split("/")[1] in draining
    }
    jobs = collections.defaultdict(list)
    for job in world.vertex.jobs.values():
        jobs[job.request_id].append(job)
    out = []
    for record in records(world):
        if record.is_terminal or record.request_id in named:
            continue
        if quota_said and record.request_id in in_line:
            continue
        obj = state.get(f"requests/{record.request_id}.json")
        moved = max([j.update_time for j in jobs[record.request_id]] + ([obj.time_created] if obj else []))
        waiting = max((flex.wait_allowance(j) for j in jobs[record.request_id] if j.live), default=timedelta(0))
        if now - moved > bound + waiting:
            out.append(
                violation(
                    "nothing_stuck_silently",
                    f"request {record.request_id} is {record.status}, unmoved since {moved.isoformat()} "
                    f"({(now - moved).total_seconds():.0f} s > {bound.total_seconds():.0f} s), and no alert names it",
                )
            )
    return out


# Deadlines.


def deadlines_met(world: World) -> list[Violation]:
    """Once quiet, a deadline request met its deadline (a job of it SUCCEEDED by then) whenever
    the rule's assumptions held (docs/deadlines.md, "Why no deadline is missed"): on-demand from its
    creation could meet it (C + d <= R, d the rule's floor `changeover_prior_seconds`), every
    changeover Vertex imposed (create to RUNNING, or from a create the GPU quota turned away to its
    attempt's job running: on-demand was not there, or from the code's cancel of a job to the next
    one running: `_switched_slowly`) was within d, no job failed, hung or was
    preempted on on-demand, no job ran longer than the work declared (C), and nobody cancelled it.
    A request whose deadline has not passed yet, or that ended without succeeding for its own
    reasons, is not judged."""
    from shared.clock import parse_iso

    now = world.clock.now()
    d = world.settings.changeover_prior_seconds
    cancelled = cancelled_by_operator(world)
    jobs = collections.defaultdict(list)
    for job in world.vertex.jobs.values():
        jobs[job.request_id].append(job)
    quota_waits = gpu_quota_waits(world)
    out = []
    for record in records(world):
        deadline = deadline_of(record)
        if deadline is None or record.request_id in cancelled or now <= deadline + LAG:
            continue
        if excused(world, record.request_id, record.latest.location if record.latest else None):
            continue  # a person or a refusal for good broke the rule's assumptions
        try:
            work = float(record.request["total_steps"]) * float(record.request["expected_step_seconds"])
        except (KeyError, TypeError, ValueError, OverflowError):
            continue
        span = (deadline - parse_iso(record.created_at)).total_seconds()
        if work + d > span:
            continue  # infeasible from the start by the rule's own arithmetic
        own = jobs[record.request_id]
        if any(j.state == "JOB_STATE_SUCCEEDED" and j.end_time and j.end_time <= deadline for j in own):
            continue
        if _broke_the_rules_assumptions(own, d, work, now) or _switched_slowly(world, own, d, now):
            continue
        if _created_late(world, record, own, d):
            continue
        if _asked_rarely(world, record, parse_iso(record.created_at), deadline - timedelta(seconds=work)):
            continue
        started = {j.attempt: j.start_time for j in sorted(own, key=lambda j: j.create_time) if j.start_time}
        if any(((started.get(n) or now) - at).total_seconds() > d for n, at in quota_waits[record.request_id].items()):
            continue  # the GPU quota kept on-demand away longer than the bound
        ended = [j for j in own if j.state == "JOB_STATE_SUCCEEDED" and j.end_time]
        how = f"succeeded at {min(j.end_time for j in ended).isoformat()}" if ended else f"is {record.status}"
        out.append(
            violation(
                "deadlines_met",
                f"{record.request_id} (work {work:.0f} s, changeover {d:.0f} s, {span:.0f} s to its deadline "
                f"{deadline.isoformat()}) {how}, though every changeover was within the bound",
            )
        )
    return out


def _asked_rarely(world: World, record: RequestRecord, start: datetime, last_chance: datetime) -> bool:
    """The rule counts on the job being asked at least every m seconds (docs/deadlines.md, "Why no
    deadline is missed"), m the longest a job goes unasked by reconcile with one dead pass's run
    lease in between (`longest_unasked_seconds`: a waiting job, and a job no record names yet, a
    create whose delivery died before recording it, are asked by reconcile alone). Between the
    request's creation and the last moment on-demand could still finish its work, a stretch longer
    than m in which no pass that lived answered a reconcile call in its locations breaks that
    assumption (seed 24 on 241aac2: at a 5% fault rate reconcile's passes crashed, each crashed
    pass's lease turning the next two ticks away, so none asked Vertex for 90 minutes). A pass that
    died counts for none of the jobs it listed (`SimVertex.asked`), even one it decided on before
    it died."""
    from shared.deciding.deadline import longest_unasked_seconds

    m = longest_unasked_seconds(world.settings.reconcile_interval_seconds)
    locations = {a.location for a in record.attempts} or {world.settings.location}
    asks = sorted(
        at for location in locations for at in world.vertex.asked.get(location, ()) if start < at < last_chance
    )
    moments = [start, *asks, last_chance]
    return any((later - earlier).total_seconds() > m for earlier, later in zip(moments, moments[1:]))


def _created_late(world: World, record: RequestRecord, jobs: list[SimJob], d: float) -> bool:
    """The first changeover, from the request's arrival (a submit instance first took its message)
    to its first job's create at Vertex, was longer than d: the rule decides nothing before its
    first attempt exists (seed 128: 77 minutes in the submission quota's line behind a burst; seed
    24: its message dead-lettered, then an hour of reconcile passes crashed under faults)."""
    arrived = world.first_submitted.get(record.request_id)
    first = min((job.create_time for job in jobs), default=None)
    return arrived is not None and first is not None and (first - arrived).total_seconds() > d


def _switched_slowly(world: World, jobs: list[SimJob], d: float, now: datetime) -> bool:
    """A changeover runs "from a decision to the next instance's first progress" (docs/deadlines.md):
    from the code's cancel of a job (a switch or a move) to the next job's RUNNING, through the
    cancel's own delay and the next create's wait for the quota; longer than d breaks the rule's
    assumption (seed 24: a switch to on-demand whose Spot job took its time to cancel)."""
    cancelled_at: dict[str, datetime] = {}
    for at, name, caller in world.vertex.cancels:
        if caller != "operator":
            cancelled_at.setdefault(name, at)
    ordered = sorted(jobs, key=lambda j: j.create_time)
    return any(
        before.name in cancelled_at and ((after.start_time or now) - cancelled_at[before.name]).total_seconds() > d
        for before, after in zip(ordered, ordered[1:])
    )


def gpu_quota_waits(world: World) -> dict[str, dict[int, datetime]]:
    """By request and attempt, when the GPU quota first turned a create away."""
    from shared.jobs import LABEL_ATTEMPT, LABEL_REQUEST_ID

    first: dict[str, dict[int, datetime]] = collections.defaultdict(dict)
    for create in world.vertex.created:
        labels = create.job.get("labels") or {}
        if create.gpu_quota_refused:
            first[labels.get(LABEL_REQUEST_ID, "")].setdefault(int(labels.get(LABEL_ATTEMPT) or 0), create.at)
    return first


def _broke_the_rules_assumptions(jobs: list[SimJob], d: float, work: float, now: datetime) -> bool:
    for job in jobs:
        if job.error is not None:
            return True  # failed or stocked out (Vertex preempts no on-demand job: sim.vertex._on_demand)
        if job.start_time is None and job.state != "JOB_STATE_CANCELLED" and waited_seconds(job, now) > d:
            return True  # a changeover longer than the bound (or a wait that never ended)
        if job.start_time is not None and (job.start_time - job.create_time).total_seconds() > d:
            return True
        if job.start_time is not None and ((job.end_time or now) - job.start_time).total_seconds() > work:
            return True  # the simulated job ran longer than the work the request declared
    return False


# The fleet's facts.


def fleet_facts_bounded(world: World) -> list[Violation]:
    """Every fact in the fleet store is bounded by what Vertex did for its attempt's job(s): no
    more preemptions (a `preempt` fact's index, a `run`'s or a summary's count) than Vertex's
    restarts, no restart past them, durations within the job's real life, times not before its
    create nor after now."""
    from shared.fleet.observations import Kind, attempt_key
    from shared.fleet.store import FLEET_PREFIX, parse_name

    now = world.clock.now()
    by_key: dict[str, list[SimJob]] = collections.defaultdict(list)
    for job in world.vertex.jobs.values():
        by_key[attempt_key(job.request_id, job.attempt)].append(job)
    out = []
    for name in sorted(world.storage.objects(world.settings.state_bucket)):
        if not name.startswith(FLEET_PREFIX) or (parsed := parse_name(name)) is None:
            continue
        fact = parsed[1]
        if fact.attempt_key.startswith(HAND_WRITTEN_ATTEMPT):
            continue  # a person wrote it (sim.faults): it bounds nothing Vertex did
        jobs = by_key.get(fact.attempt_key, [])
        problems = []
        if not jobs:
            problems.append("no job of its attempt was ever created")
        else:
            preempted = sum(j.vms_reclaimed for j in jobs)  # a multi-replica job's facts are per VM
            created = min(j.create_time for j in jobs)
            starts = [j.start_time for j in jobs if j.start_time]
            life = max(((j.end_time or now) - j.create_time).total_seconds() for j in jobs) + 1
            ran = (
                max(((j.end_time or now) - s).total_seconds() for j in jobs if (s := j.start_time)) + 1 if starts else 0
            )
            if fact.kind is Kind.PREEMPT and fact.index >= preempted:
                problems.append(f"preemption #{fact.index + 1}, Vertex preempted it {preempted} times")
            if fact.kind is Kind.RESTART and fact.index > preempted:
                problems.append(f"restart #{fact.index}, Vertex restarted it {preempted} times")
            if fact.kind is Kind.RUN and (fact.count > preempted or fact.seconds > ran):
                problems.append(
                    f"a run of {fact.seconds:.0f} s preempted {fact.count} times; Vertex: {ran:.0f} s, {preempted}"
                )
            if fact.kind in (Kind.PREEMPT, Kind.RESTART, Kind.RUN, Kind.WAIT) and not starts:
                problems.append("Vertex never ran its job")
            if fact.kind in (Kind.WAIT, Kind.CHANGEOVER, Kind.NO_CAPACITY) and fact.seconds > life:
                problems.append(f"{fact.seconds:.0f} s, longer than its job's life ({life:.0f} s)")
            if fact.summary is not None and (fact.summary.preemptions > preempted or fact.summary.exposure > life):
                problems.append(
                    f"a summary of {fact.summary.preemptions} preemptions and {fact.summary.exposure} s on Spot; "
                    f"Vertex: {preempted}, life {life:.0f} s"
                )
            if fact.at is not None and fact.at < created - timedelta(seconds=1) and fact.kind is not Kind.WAITING:
                problems.append(f"at {fact.at.isoformat()}, before its job's create {created.isoformat()}")
        if fact.at is not None and fact.at > now + timedelta(seconds=1):
            problems.append(f"at {fact.at.isoformat()}, in the future")
        out += [violation("fleet_facts_bounded", f"{name}: {p}") for p in problems]
    return out + _open_waits_past_their_end(world, by_key) + _open_waits_the_estimate_counts(world, by_key)


# What only a decision that saw an attempt's job run or end records of it; any fact of a later
# attempt of its request is written by a decision whose record has the attempt ended.
_SEEN_RUN_OR_END = frozenset({"preempt", "restart", "run", "stockout"})
_CLOSES_A_WAIT = frozenset({"wait", "nocap", "attempt"})


def _open_waits_past_their_end(world: World, by_key: dict[str, list[SimJob]]) -> list[Violation]:
    """An attempt's `waiting` fact left open (no `wait`, `nocap` or summary) though its job ran
    or ended, and a later decision on the request recorded a fact that shows it knew: every
    decision writes again what closed a wait (shared/fleet/recording.py), so a lost write of it is
    made good by the next; open, it would tell the estimate "no capacity" for the whole window.
    Nothing decides on a finished request again, so the last decision's loss is made good by the
    reconcile pass that retires the request from the active index (`_retired_knowing_the_end`)."""
    from shared.fleet.observations import attempt_key
    from shared.fleet.store import FLEET_PREFIX, parse_name

    kinds: dict[str, set[str]] = collections.defaultdict(set)
    for name in world.storage.objects(world.settings.state_bucket):
        if name.startswith(FLEET_PREFIX) and (parsed := parse_name(name)) is not None:
            kinds[parsed[1].attempt_key].add(parsed[1].kind.value)
    retired = _retired_knowing_the_end(world)
    out = []
    for key, told in sorted(kinds.items()):
        jobs = by_key.get(key, [])
        if "waiting" not in told or told & _CLOSES_A_WAIT or not any(j.start_time or j.end_time for j in jobs):
            continue
        request_id, n = jobs[0].request_id, jobs[0].attempt
        later = sorted(
            {j.attempt for js in by_key.values() for j in js if j.request_id == request_id and j.attempt > n}
        )
        if told & _SEEN_RUN_OR_END or any(attempt_key(request_id, m) in kinds for m in later):
            since = f"a later decision recorded {sorted(told & _SEEN_RUN_OR_END) or 'a later attempt'}"
        elif (request_id, n) in retired:
            since = "reconcile retired the finished request"
        else:
            continue
        ran = "ran" if any(j.start_time for j in jobs) else "ended"
        out.append(
            violation(
                "fleet_facts_bounded",
                f"{request_id} attempt {n}: its wait is open in the fleet store, though Vertex {ran} its job and {since}",
            )
        )
    return out


def _retired_knowing_the_end(world: World) -> set[tuple[str, int]]:
    """The (request, attempt) of each Spot attempt whose record tells its wait ended (it ran, ended,
    or has an outcome), of a finished request reconcile retired from the active index (its marker
    gone): that pass wrote what closed the waits first (shared/reconcile_index.py)."""
    from shared.ledger.store import ACTIVE_PREFIX, needs_reconcile
    from shared.requests.attempts import SPOT

    objects = world.storage.objects(world.settings.state_bucket)
    return {
        (record.request_id, a.n)
        for record in records(world)
        if not needs_reconcile(record) and f"{ACTIVE_PREFIX}{record.request_id}" not in objects
        for a in record.attempts
        if a.job and a.strategy == SPOT and (a.started_at or a.ended_at or a.outcome is not None)
    }


def _open_waits_the_estimate_counts(world: World, by_key: dict[str, list[SimJob]]) -> list[Violation]:
    """The estimate counts no wait open that Vertex ended, once the fleet was told anything past
    its create: a `run`, a preemption, a restart or a stockout of the attempt proves the wait
    ended, whether or not its `wait` or `nocap` was written (shared/fleet/estimate.py). Per class
    and location, its open waits are at most the attempts with a `waiting` whose job is still
    waiting in Vertex, or of which the fleet holds nothing else (the last decision a request gets
    can lose every fact of its end: nothing decides on it again until reconcile retires it, which
    `_open_waits_past_their_end` judges)."""
    from shared.fleet.estimate import estimate
    from shared.fleet.observations import FleetFact, Kind
    from shared.fleet.store import FLEET_PREFIX, parse_name

    now = world.clock.now()
    facts: dict[tuple[str, str], list[FleetFact]] = collections.defaultdict(list)
    for name in world.storage.objects(world.settings.state_bucket):
        if name.startswith(FLEET_PREFIX) and (parsed := parse_name(name)) is not None:
            facts[(parsed[0].key, parsed[1].location)].append(parsed[1])
    out = []
    for (class_key, location), here in sorted(facts.items()):
        told: dict[str, set[Kind]] = collections.defaultdict(set)
        for fact in here:
            told[fact.attempt_key].add(fact.kind)
        may_be_open = sum(
            Kind.WAITING in kinds
            and (
                kinds == {Kind.WAITING}
                or not by_key.get(key)  # a person's fact, or one of no job: the clauses above judge it
                or any(not (j.start_time or j.end_time) for j in by_key[key])
            )
            for key, kinds in told.items()
        )
        counted = estimate(here, location, now).open_waits
        if counted > may_be_open:
            out.append(
                violation(
                    "fleet_facts_bounded",
                    f"{class_key} in {location}: the estimate counts {counted} open waits, of which only "
                    f"{may_be_open} can be: Vertex ran or ended the others' jobs and the fleet was told",
                )
            )
    return out


# What `spotjobs logs` and `spotjobs status` show.


class WorldLogs:
    """`trainer_logs.Source` over the world's job-events messages (what the log sink routed: the
    lines Cloud Logging holds), each keyed by its message id."""

    def __init__(self, world: World) -> None:
        from spotjobs.trainer_logs import CloudLogging

        self.entries = []
        for message in world.pubsub.on(world.settings.job_events_topic):
            entry = message.json()
            if isinstance(entry, dict):
                self.entries.append({**entry, "insertId": message.message_id})
        self._line = CloudLogging._line  # noqa: SLF001 - the CLI's own reading of an entry

    def read(self, attempts: Sequence[Attempt], since: str | None) -> list[Any]:
        by_job = {a.job_id: a.n for a in attempts if a.job_id}
        return [
            self._line(entry, by_job)
            for entry in self.entries
            if ((entry.get("resource") or {}).get("labels") or {}).get("job_id") in by_job
        ]


def forged_messages(world: World) -> set[str]:
    """Lines a job wrote under another job's id (`World.emit_log_line(..., forged=True)`)."""
    events = {m.message_id for m in world.pubsub.on(world.settings.job_events_topic)}
    return {message_id for message_id in world.hostile if message_id in events}


def logs_and_status_own_lines(world: World) -> list[Violation]:
    """Once quiet, `spotjobs logs ID` (`trainer_logs.request_lines`) shows no line another job wrote,
    nor any unsigned kit line, as the request's own (an event, or a run it starts), and `spotjobs
    status ID` (`format_request`) counts no more preemptions for an attempt than Vertex did to its job
    (its stop at the timeout aside, where Vertex hides that end for good: `unread_timeout_stop`),
    nor shows a job that is not the attempt's."""
    from spotjobs.cli.status import format_request
    from spotjobs.trainer_logs import request_lines

    source = WorldLogs(world)
    forged = forged_messages(world)
    jobs = world.vertex.jobs
    out = []
    for record in records(world):
        runs: dict[str, int | None] = {}
        for line in request_lines(lambda record=record: record, source):
            own_kit = line.kit is not None
            if own_kit and (line.key in forged or not line.signed):
                out.append(
                    violation(
                        "logs_own_lines",
                        f"{record.request_id}: `spotjobs logs` shows {line.text[:80]!r} as its own "
                        f"{line.kit.event if line.kit else ''} (forged: {line.key in forged})",
                    )
                )
            if own_kit and line.key not in forged and line.kit and line.kit.run is not None:
                runs[line.job_id] = line.kit.run
            if not line.service and line.run != runs.get(line.job_id):
                out.append(
                    violation(
                        "logs_own_lines",
                        f"{record.request_id}: a line of job {line.job_id} shown as run {line.run}, "
                        f"its own lines say {runs.get(line.job_id)}",
                    )
                )
        format_request(record, world.settings, world.clock.now())
        for attempt in record.attempts:
            job = jobs.get(attempt.job or "")
            if attempt.job and (job is None or (job.request_id, job.attempt) != (record.request_id, attempt.n)):
                out.append(
                    violation("status_own_facts", f"{record.request_id} attempt {attempt.n} shows job {attempt.job}")
                )
            elif job is not None and attempt.preemptions > job.vms_reclaimed + unread_timeout_stop(world, job):
                out.append(
                    violation(
                        "status_own_facts",
                        f"{record.request_id} attempt {attempt.n} shows {attempt.preemptions} preemptions; "
                        f"Vertex preempted its job {job.vms_reclaimed} times",
                    )
                )
    return out


QUIESCENCE = [alert_catalogue, nothing_stuck_silently, deadlines_met, fleet_facts_bounded, logs_and_status_own_lines]
RETENTION = [alert_catalogue_after_retention, fleet_facts_bounded]
