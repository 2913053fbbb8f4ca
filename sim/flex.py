"""FLEX_START (Dynamic Workload Scheduler) in the simulated world (issue 45's acceptance, issue 43).

Vertex, as the emulator models it by default (devstack/vertex/flex.py, devstack/vertex/modes.py,
docs/local.md "FLEX_START"), from what Google documents
(https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws and Compute Engine's
https://cloud.google.com/compute/docs/instances/about-flex-start-vms):

- create refuses a FLEX_START job that breaks a documented requirement (L4, A100, H100, H200 or B200
  GPUs, a timeout of 7 days or less, the same machine configuration in every pool) with a 400
  naming it (`flex_requirements` `invalid_argument`): `refuse_create`;
- the job waits PENDING for capacity, at most its `maxWaitDuration` (a day when unset, 0 for ever)
  counted from the start of its wait, then every replica starts; a wait that runs out ends the job
  FAILED with RESOURCE_EXHAUSTED (8) and the emulator's message (`flex_wait_expiry`
  `resource_exhausted`): `advance_wait`;
- once running it is never preempted (`flex_preemption` `never`: flex-start VMs run for their fixed
  duration): Spot's preemptions, STOCKOUT and outages never apply to it (`begin`).

The workload (`with_flex_start`, drawn from generators of their own so a seed's other draws stay
where they were): in `SEED_SHARE` of seeds the deployment allows FLEX_START, some of them with
`min_spot_attempts` 0, and some GPU envelope and fallback requests name `fallback: {"strategy":
"FLEX_START", "after_spot_attempts": k}` (k = 0 in those: FLEX_START from the first attempt), some a
`maxWaitDuration` of their own. Each FLEX_START job's capacity comes after a delay drawn per job
(`wait_of`), or, for a wait of `NEVER_WITHIN` or less, never.

The invariants (`QUIESCENCE`): a FLEX_START attempt is never counted preempted
(`flex_start_never_preempted`); a FLEX_START job never waits past its `maxWaitDuration`, and one
whose wait ran out has its attempt decided, re-queued or given up (`flex_waits_decided`; the alert
of a give-up is the catalogue's `attempts_exhausted`). At most one live job per request is
`one_live_job_per_request`'s, which counts FLEX_START jobs as any other.
"""

from __future__ import annotations

import json
import random
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as api

from shared.jobs import FLEX_START, LABEL_REQUEST_ID
from shared.settings import Settings

if TYPE_CHECKING:
    from sim.vertex import SimJob, SimVertex
    from sim.workload import Workload
    from sim.world import Violation, World

# "L4, A100, H100, H200, or B200 GPUs", "a maximum timeout of 7 days or less", "the same machine
# configuration for all worker pools" (schedule-jobs-dws), as devstack/vertex/validation.py words them.
ACCELERATORS = frozenset(
    {
        "NVIDIA_L4",
        "NVIDIA_TESLA_A100",
        "NVIDIA_A100_80GB",
        "NVIDIA_H100_80GB",
        "NVIDIA_H100_MEGA_80GB",
        "NVIDIA_H200_141GB",
        "NVIDIA_B200",
    }
)
MAX_TIMEOUT_SECONDS = 7 * 86400
# "maxWaitDuration ... The default value is 1 day" (Scheduling); 0 waits indefinitely.
DEFAULT_MAX_WAIT_SECONDS = 86400.0
RESOURCE_EXHAUSTED = 8  # google.rpc.Code of Compute Engine's capacity errors (devstack/vertex/modes.py)

SEED_SHARE = 0.4  # of seeds whose deployment allows FLEX_START
FIRST_ATTEMPT_SHARE = 0.5  # of those: min_spot_attempts 0, so a fallback may start at attempt 1
REQUEST_SHARE = 0.5  # of their GPU envelope and fallback requests
MAX_WAITS = (None, "1800s", "3600s", "7200s")  # None: unset (the adapter sends Vertex's day)
CAPACITY_AFTER = (0.0, 60.0, 600.0, 1800.0, 7200.0)  # seconds from the start of the wait
# Past `stuck_after_seconds` (6 h) and within the default day: a long documented wait, not stuck.
LONG_WAIT_SECONDS = 8 * 3600.0
# Capacity may never come only within a wait this short: a day's would outlast the quiet phase.
NEVER_WITHIN = 7200.0
NEVER_SHARE = 0.3


# Vertex.


def requirement_broken(request: dict[str, Any]) -> tuple[str, str] | None:
    """(field, message) of the first documented FLEX_START requirement the job breaks, None when it
    meets them all or is not FLEX_START."""
    spec = request.get("jobSpec") or {}
    if (spec.get("scheduling") or {}).get("strategy") != FLEX_START:
        return None
    pools = [pool for pool in spec.get("workerPoolSpecs") or [] if pool]
    for i, pool in enumerate(pools):
        if (pool.get("machineSpec") or {}).get("acceleratorType") not in ACCELERATORS:
            return (
                f"job_spec.worker_pool_specs[{i}].machine_spec.accelerator_type",
                "Strategy FLEX_START requires L4, A100, H100, H200 or B200 GPUs.",
            )
        if pool.get("machineSpec") != pools[0].get("machineSpec"):
            return (
                f"job_spec.worker_pool_specs[{i}].machine_spec",
                "Strategy FLEX_START requires the same machine configuration for all worker pools.",
            )
    timeout = (spec.get("scheduling") or {}).get("timeout")
    if timeout is not None and float(str(timeout).rstrip("s") or 0) > MAX_TIMEOUT_SECONDS:
        return "custom_job.job_spec.scheduling.timeout", "Strategy FLEX_START requires a timeout of 7 days or less."
    return None


def max_wait_seconds(request: dict[str, Any]) -> float | None:
    """A FLEX_START job's maxWaitDuration in seconds (a day when unset); None: it waits for ever."""
    raw = ((request.get("jobSpec") or {}).get("scheduling") or {}).get("maxWaitDuration")
    if raw is None:
        return DEFAULT_MAX_WAIT_SECONDS
    seconds = float(str(raw).rstrip("s") or 0)
    return None if seconds == 0 else seconds


def wait_expired_error(max_wait: float) -> dict[str, Any]:
    """The error of a job whose wait ran out: the emulator's (Vertex documents no text)."""
    return {
        "code": RESOURCE_EXHAUSTED,
        "message": "The resources requested by this FLEX_START job were not available within its "
        f"maxWaitDuration ({max_wait:g}s).",
    }


def wait_expired(job: SimJob) -> bool:
    """Whether Vertex ended `job` because its capacity did not come within its wait."""
    return job.flex_start and job.error == wait_expired_error(max_wait_seconds(job.request) or 0.0)


def refuse_create(vertex: SimVertex, request: dict[str, Any], location: str) -> None:
    """A 400 for a FLEX_START job breaking a documented requirement, kept as a refusal."""
    from sim.vertex import Refused

    broken = requirement_broken(request)
    if broken is None:
        return
    request_id = str((request.get("labels") or {}).get(LABEL_REQUEST_ID, ""))
    vertex.refused.append(Refused(vertex.clock(), "create", location, request_id, 400, vertex.caller()))
    raise api.InvalidArgument(f"List of found errors:\t1.Field: {broken[0]}; Message: {broken[1]}\t")


def begin(vertex: SimVertex, job: SimJob) -> None:
    """A new FLEX_START job: no preemption is its fate, nor Spot's STOCKOUT; Spot's hang (capacity
    that never comes) is its wait's to decide (`vertex.flex_wait`)."""
    job.preemptions = 0
    if job.fate in ("stockout", "hang"):
        job.fate = "succeed"
    job.flex_capacity_after = vertex.flex_wait(job)


def advance_wait(vertex: SimVertex, job: SimJob) -> None:
    """PENDING until its capacity comes (every replica starts) or its wait runs out (FAILED);
    capacity that comes at the wait's last moment still starts the job."""
    began = job.flex_wait_began = job.flex_wait_began or job.update_time
    now = vertex.clock()
    wait = max_wait_seconds(job.request)
    capacity = None if job.flex_capacity_after is None else began + timedelta(seconds=job.flex_capacity_after)
    expiry = None if wait is None else began + timedelta(seconds=wait)
    if capacity is not None and capacity <= now and (expiry is None or capacity <= expiry):
        vertex.set_state(job, "JOB_STATE_RUNNING")
        vertex.runs(job, "start")
    elif wait is not None and expiry is not None and expiry <= now:
        vertex.set_state(job, "JOB_STATE_FAILED", wait_expired_error(wait))
    else:
        due = [moment for moment in (capacity, expiry) if moment is not None]
        job.next_change = min(due) if due else None  # neither: it waits until someone cancels it


# The workload.


def wait_of(seed_text: str, job: SimJob) -> float | None:
    """Seconds from the start of the job's wait to its capacity; None: it never comes."""
    rng = random.Random(f"{seed_text}:flex:wait:{job.request_id}:{job.attempt}")
    wait = max_wait_seconds(job.request)
    if wait is not None and wait <= NEVER_WITHIN:
        return None if rng.random() < NEVER_SHARE else rng.choice(CAPACITY_AFTER)
    return rng.choice((*CAPACITY_AFTER, LONG_WAIT_SECONDS))


def with_flex_start(workload: Workload) -> Workload:
    """A deployment that allows FLEX_START, and requests whose fallback is FLEX_START."""
    rng = random.Random(f"{workload.seed_text}:flex")
    if rng.random() >= SEED_SHARE:
        return workload
    allowed = [s for s in workload.env["SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES"].split(",") if s]
    workload.env["SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES"] = ",".join([*allowed, FLEX_START])
    if rng.random() < FIRST_ATTEMPT_SHARE:
        workload.env["SPOTJOBS_MIN_SPOT_ATTEMPTS"] = "0"
    workload.settings = Settings.from_env(workload.env)
    first = workload.settings.min_spot_attempts
    for arrival in workload.arrivals:
        if not arrival.is_plain_request or arrival.kind not in ("envelope", "fallback"):
            continue
        body = json.loads(arrival.data)
        if "capacity" in body:  # its alternatives name their strategies; a fallback beside them is refused
            if _flex_alternative(workload.seed_text, body):
                arrival.data = json.dumps(body, separators=(",", ":")).encode()
            continue
        spec = body["custom_job"]["jobSpec"]
        if spec["workerPoolSpecs"][0]["machineSpec"].get("acceleratorType") not in ACCELERATORS:
            continue
        pick = random.Random(f"{workload.seed_text}:flex:{body['request_id']}")  # a retry as its first send
        if pick.random() >= REQUEST_SHARE:
            continue
        body["fallback"] = {"strategy": FLEX_START, "after_spot_attempts": pick.choice((first, first + 1))}
        max_wait = pick.choice(MAX_WAITS)
        if max_wait is not None:
            spec.setdefault("scheduling", {})["maxWaitDuration"] = max_wait
        arrival.data = json.dumps(body, separators=(",", ":")).encode()
    return workload


def _flex_alternative(seed_text: str, body: dict[str, Any]) -> bool:
    """Half the requests with capacity alternatives may run their last one on FLEX_START too (or
    only), in one location: shared/fleet/capacity.py places it beside Spot. Only where every pool
    has pool 0's machine, as FLEX_START requires once the alternative rewrites it."""
    pools = body["custom_job"]["jobSpec"]["workerPoolSpecs"]
    first = pools[0]["machineSpec"]["machineType"]
    pick = random.Random(f"{seed_text}:flex:capacity:{body['request_id']}")
    if any(p.get("machineSpec", {}).get("machineType") != first for p in pools if p) or pick.random() >= 0.5:
        return False
    last = body["capacity"][-1]
    last["strategies"] = pick.choice((["SPOT", FLEX_START], [FLEX_START]))
    # In one location, so that an H100 without Spot there leaves it to the alternative, not a move.
    body["locations"] = body["locations"][:1]
    return True


# The invariants.


def flex_start_never_preempted(world: World) -> list[Violation]:
    """Vertex never preempts a FLEX_START job, and no FLEX_START attempt is counted preempted (its
    count, or the "at least one" of an attempt ended by a capacity error)."""
    from sim.invariants import records, violation

    out = [
        violation("flex_start_never_preempted", f"Vertex preempted FLEX_START job {job.name} of {job.request_id}")
        for job in world.vertex.jobs.values()
        if job.flex_start and (job.vms_reclaimed or job.restarts)
    ]
    for record in records(world):
        if record.request_id in world.tampering.requests:  # a person wrote it
            continue
        out += [
            violation(
                "flex_start_never_preempted",
                f"{record.request_id} attempt {attempt.n} ran FLEX_START and is counted preempted "
                f"({'at least once' if attempt.preemptions_unknown else attempt.preemptions})",
            )
            for attempt in record.attempts
            if attempt.strategy == FLEX_START and (attempt.preemptions or attempt.preemptions_unknown)
        ]
    return out


def flex_waits_decided(world: World) -> list[Violation]:
    """No FLEX_START job waits past its maxWaitDuration (and the step that moves it on), and the
    attempt of one whose wait ran out was decided: re-queued, or given up (`attempts_exhausted`,
    the catalogue's), unless a fault or a cancel speaks for its request."""
    from shared.ledger.states import AttemptOutcome
    from sim.invariants import excused, records, violation
    from sim.promises import cancelled_by_operator, never_named_for_a_refused_lookup, reads_refused

    now = world.clock.now()
    out = []
    for job in world.vertex.jobs.values():
        wait = max_wait_seconds(job.request)
        if job.flex_start and job.state == "JOB_STATE_PENDING" and job.flex_wait_began and wait is not None:
            waited = (now - job.flex_wait_began).total_seconds()
            if waited > wait + 900:  # the longest step between two changes of a job (sim.vertex.advance)
                out.append(violation("flex_waits_decided", f"{job.name} waited {waited:.0f} s, past {wait:g} s"))
    by_id = {r.request_id: r for r in records(world)}
    cancelled = cancelled_by_operator(world)
    unnamed = never_named_for_a_refused_lookup(world)
    decided = (AttemptOutcome.REQUEUED, AttemptOutcome.GAVE_UP)
    for job in world.vertex.jobs.values():
        record = by_id.get(job.request_id)
        if (
            not wait_expired(job)
            or record is None
            or job.request_id in cancelled
            or (job.request_id, job.attempt) in unnamed
            or excused(world, job.request_id, job.location)
            or reads_refused(world, job, hiding_its_end=True)
        ):
            continue
        attempt = record.attempt(job.attempt)
        if attempt is None or attempt.job != job.name or attempt.outcome in decided:
            continue
        out.append(
            violation(
                "flex_waits_decided",
                f"{job.request_id} attempt {job.attempt}: its FLEX_START wait ran out at {job.end_time} and the "
                f"attempt is {attempt.outcome.value if attempt.outcome else 'undecided'} ({record.status})",
            )
        )
    return out


def wait_allowance(job: SimJob) -> timedelta:
    """How long a FLEX_START job may wait for capacity by design: its maxWaitDuration
    (shared/deciding/stuck.py flags it stuck only past that and the usual threshold; a wait
    for ever adds nothing there either)."""
    if not job.flex_start:
        return timedelta(0)
    wait = max_wait_seconds(job.request)
    return timedelta(seconds=wait or 0.0)


QUIESCENCE = [flex_start_never_preempted, flex_waits_decided]
