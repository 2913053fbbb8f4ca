"""Multi-replica jobs in the simulated world (issue 44, item 5).

A share of seeds (`SHARE`) gives some of its plain envelope, deadline and fallback requests a
second worker pool of one to three replicas (pools 0 and 1, as a torch.distributed job has), drawn from a generator of its
own (`random.Random(f"{seed}:replicas")`) so every other draw of a seed stays where it was.

Vertex (`sim.vertex.SimVertex.advance`) then reclaims one replica's VM, or every replica's at
once, at each preemption of such a job: one service line per reclaimed VM (the emulator's rich
mode), and the restarts counted towards the six in the seed's `spot_restart_count` mode
(`per_event`, `per_vm`, `per_replica`: docs/local.md, unknown from Google's documentation). When a
preemption leaves a replica running, that survivor may exit 134 (`peer_exit`): Vertex restarts the
job for such an exit at most three times and fails it at the fourth, as the emulator does.

The invariants (`QUIESCENCE`): no job restarted past three exits of 134 or 139
(`transient_exits_bounded`), an attempt counts no more preemptions than VMs Vertex reclaimed
and never more than seven per replica (`preemptions_within_reclaimed_vms`), and every attempt of a
request is created with the layout its first one had (`same_layout_every_attempt`; with capacity
alternatives, its replicas), and a fleet
fact names no more replicas than its attempt's job had (`fleet_facts_replicas_bounded`).
"""

from __future__ import annotations

import collections
import copy
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shared.jobs import MAX_SPOT_PREEMPTIONS, job_replicas

if TYPE_CHECKING:
    from sim.invariants import Violation
    from sim.vertex import SimJob
    from sim.workload import Workload
    from sim.world import World

SHARE = 0.3  # of seeds with multi-replica requests
REQUEST_SHARE = 0.5  # of such a seed's plain envelope requests
ALL_AT_ONCE_SHARE = 0.3  # of a multi-replica job's preemptions: every replica reclaimed together
SPOT_RESTART_COUNTS = ("per_event", "per_vm", "per_replica")
# Of a multi-replica job's preemptions that reclaim some replicas but not all: a survivor exits 134
# (torch.distributed aborts when its peer is gone), which Vertex restarts as "potentially transient"
# at most three times per job, failing it at the fourth (docs/local.md "Replicas and worker pools").
PEER_EXIT_SHARE = 0.3
TRANSIENT_EXIT_RESTARTS = 3
PEER_EXIT_CODE = 134


@dataclass
class Replicas:
    """What one seed drew for multi-replica jobs."""

    active: bool = False  # the seed has multi-replica requests
    requests: dict[str, int] = field(default_factory=dict)  # request id -> replicas of its pool 1
    spot_restart_count: str = "per_event"
    rng: random.Random = field(default_factory=lambda: random.Random(0))  # which replicas a preemption reclaims
    # Whether a survivor exits 134: a generator of its own, so the reclaims drawn stay where they were.
    exit_rng: random.Random = field(default_factory=lambda: random.Random(0))


def draw(seed: int) -> Replicas:
    rng = random.Random(f"{seed}:replicas")
    if rng.random() >= SHARE:
        return Replicas(rng=rng)
    exits = random.Random(f"{seed}:replicas:exits")
    return Replicas(active=True, spot_restart_count=rng.choice(SPOT_RESTART_COUNTS), rng=rng, exit_rng=exits)


def with_replicas(workload: Workload, drawn: Replicas) -> Workload:
    """Gives some plain envelope, deadline and fallback requests a pool 1 of one to three replicas
    like pool 0's (a publisher's retry of one carries the same body): the deadline rule and the
    switch to on-demand meet jobs of several VMs too."""
    if not drawn.active:
        return workload
    rewritten: dict[bytes, bytes] = {}
    for arrival in workload.arrivals:
        if arrival.data in rewritten:
            arrival.data = rewritten[arrival.data]
            continue
        if not arrival.label.startswith(("envelope ", "deadline ", "fallback ")) or drawn.rng.random() >= REQUEST_SHARE:
            continue
        body = json.loads(arrival.data)
        pools = body["custom_job"]["jobSpec"]["workerPoolSpecs"]
        pool = copy.deepcopy(pools[0])
        pool["replicaCount"] = drawn.rng.randint(1, 3)
        pools.append(pool)
        drawn.requests[body["request_id"]] = pool["replicaCount"]
        rewritten[arrival.data] = json.dumps(body, separators=(",", ":")).encode()
        arrival.data = rewritten[arrival.data]
    return workload


def reclaim(job: SimJob, drawn: Replicas) -> list[str]:
    """The replicas (`workerpool<P>-<i>`) whose VMs one preemption of `job` reclaims: the primary's
    alone for a one-replica job (no draw), else one replica or every one."""
    names = replica_names(job.request)
    if len(names) == 1:
        return names
    if drawn.rng.random() < ALL_AT_ONCE_SHARE:
        return names
    return [drawn.rng.choice(names)]


def replica_names(custom_job: dict[str, Any]) -> list[str]:
    pools = (custom_job.get("jobSpec") or {}).get("workerPoolSpecs") or []
    return [
        f"workerpool{p}-{i}"
        for p, pool in enumerate(pools)
        if pool
        for i in range(max(1, int(pool.get("replicaCount") or 0)))
    ] or ["workerpool0-0"]


def restarts_reached(job: SimJob, reclaimed: list[str], counting: str) -> int:
    """Counts one preemption towards the six restarts as `counting` says (the emulator's
    `spot_restart_count`, devstack/vertex/restarts.py); returns the count it reached."""
    for name in reclaimed:
        job.replica_restarts[name] = job.replica_restarts.get(name, 0) + 1
    job.vms_reclaimed += len(reclaimed)
    if counting == "per_replica":
        return max(job.replica_restarts[name] for name in reclaimed)
    job.restarts += len(reclaimed) if counting == "per_vm" else 1
    return job.restarts


def peer_exit(job: SimJob, reclaimed: list[str], drawn: Replicas) -> str | None:
    """The survivor that exits 134 after a preemption reclaimed its peer's VM (`PEER_EXIT_SHARE` of
    preemptions that leave a replica running), its exit counted in `job.transient_exits`; None when
    none does. Vertex restarts the job for it (the emulator's `transient_exit_restarts` `job`)."""
    survivors = [name for name in replica_names(job.request) if name not in reclaimed]
    if not survivors or drawn.exit_rng.random() >= PEER_EXIT_SHARE:
        return None
    job.transient_exits += 1
    return drawn.exit_rng.choice(survivors)


def peer_exit_error(replica: str) -> dict[str, Any]:
    """The job's error when Vertex fails it at a transient exit past its three restarts."""
    return {"code": 3, "message": f"The replica {replica} exited with a non-zero status of {PEER_EXIT_CODE}."}


def transient_exits_bounded(world: World) -> list[Violation]:
    """A job is restarted after at most `TRANSIENT_EXIT_RESTARTS` exits of 134 or 139; the next one
    fails it with that exit (docs/local.md), as the Vertex emulator does."""
    from sim.invariants import violation

    return [
        violation(
            "transient_exits_bounded",
            f"{job.request_id} a{job.attempt}: {job.transient_exits} exits of 134 or 139, and its job is {job.state}",
        )
        for job in world.vertex.jobs.values()
        if job.transient_exits > TRANSIENT_EXIT_RESTARTS
        and not (
            job.state == "JOB_STATE_FAILED" and f"status of {PEER_EXIT_CODE}" in str((job.error or {}).get("message"))
        )
    ]


def layout(custom_job: dict[str, Any]) -> list[tuple[str, int]]:
    """A CustomJob's worker-pool layout: each pool's machine and replicas."""
    pools = (custom_job.get("jobSpec") or {}).get("workerPoolSpecs") or []
    return [
        (json.dumps(pool.get("machineSpec") or {}, sort_keys=True), max(1, int(pool.get("replicaCount") or 0)))
        for pool in pools
        if pool
    ]


def preemptions_within_reclaimed_vms(world: World) -> list[Violation]:
    """An attempt counts no more preemptions than VMs Vertex reclaimed of its job (and its stop at
    the timeout, where Vertex hides that end for good: `unread_timeout_stop`), and never more than
    seven per replica (shared/deciding/preemptions.py `max_preemptions`)."""
    from sim.invariants import records, violation
    from sim.promises import unread_timeout_stop

    jobs = world.vertex.jobs  # by resource name, as an attempt names its job
    out = []
    for record in records(world):
        for attempt in record.attempts:
            job = jobs.get(attempt.job or "")
            if job is None:
                continue
            bound = MAX_SPOT_PREEMPTIONS * job_replicas(job.request)
            reclaimed = job.vms_reclaimed + unread_timeout_stop(world, job)  # a stop read as one, for good
            if attempt.preemptions > reclaimed or attempt.preemptions > bound:
                out.append(
                    violation(
                        "preemptions_within_reclaimed_vms",
                        f"{record.request_id} attempt {attempt.n} counts {attempt.preemptions} preemptions; "
                        f"Vertex reclaimed {job.vms_reclaimed} VMs of its {job_replicas(job.request)} replicas",
                    )
                )
    return out


def same_layout_every_attempt(world: World) -> list[Violation]:
    """Every create of a request (re-queues, moves, deadline switches) keeps the worker-pool layout
    of its first create; a request with capacity alternatives its replicas per pool, its machines
    being the alternatives' (`alternatives_kept`). After a person deleted the id's record, its
    next attempt 1 is a new request's first create (a body claimed afresh: seed 6300)."""
    from shared.jobs import LABEL_ATTEMPT, LABEL_REQUEST_ID
    from sim.invariants import records, violation

    # As recorded, and as published on job-requests: a record a fault left unreadable or a person
    # deleted still had them, and `spotjobs resubmit` publishes a body no publisher's arrival is
    # (seed 11027).
    with_alternatives = {r.request_id for r in records(world) if r.request.get("capacity")} | {
        body.get("request_id")
        for message in world.pubsub.on(world.settings.job_requests_topic)
        if b'"capacity"' in message.data and isinstance(body := message.json(), dict)
    }
    first: dict[str, list[tuple[str, int]]] = {}
    out = []
    for create in world.vertex.created:
        if not create.accepted:
            continue
        labels = create.job.get("labels") or {}
        request_id = labels.get(LABEL_REQUEST_ID, "")
        shape = layout(create.job)
        if request_id in with_alternatives:
            shape = [("", replicas) for _, replicas in shape]
        deleted_at = world.tampering.records_deleted_at.get(request_id)
        if deleted_at is not None and create.at >= deleted_at and labels.get(LABEL_ATTEMPT) == "1":
            first[request_id] = shape
        if first.setdefault(request_id, shape) != shape:
            out.append(
                violation(
                    "same_layout_every_attempt",
                    f"{request_id}: a create with layout {shape}, its first had {first[request_id]}",
                )
            )
    return out


def fleet_facts_replicas_bounded(world: World) -> list[Violation]:
    """A fleet fact (a wait, a run, a compacted attempt) names no more VMs than its attempt's jobs
    had: a fact's time counts that many VMs' exposure (the per-VM lifetime, docs/signals.md), so
    `fleet_facts_bounded`'s bound on the job's time bounds the VMs' only with it."""
    from shared.fleet.observations import attempt_key
    from shared.fleet.store import FLEET_PREFIX, parse_name
    from sim.faults import HAND_WRITTEN_ATTEMPT
    from sim.invariants import violation

    vms: dict[str, int] = {}
    for job in world.vertex.jobs.values():
        key = attempt_key(job.request_id, job.attempt)
        vms[key] = max(vms.get(key, 1), job_replicas(job.request))
    out = []
    for name in sorted(world.storage.objects(world.settings.state_bucket)):
        if not name.startswith(FLEET_PREFIX) or (parsed := parse_name(name)) is None:
            continue
        fact = parsed[1]
        if fact.attempt_key.startswith(HAND_WRITTEN_ATTEMPT) or fact.attempt_key not in vms:
            continue  # a person's fact, or one of no job (`fleet_facts_bounded` says so)
        named = fact.summary.replicas if fact.summary is not None else fact.replicas
        if named > vms[fact.attempt_key]:
            out.append(
                violation(
                    "fleet_facts_replicas_bounded",
                    f"{name}: {named} replicas, its attempt's jobs had {vms[fact.attempt_key]}",
                )
            )
    return out


def fleet_restart_waits_within_the_jobs_life(world: World) -> list[Violation]:
    """An attempt's waits for a machine after a preemption, as the fleet's estimate reads them from
    its stored facts (`summarize`: its summary once compacted), fit in its jobs' life after the
    first preemption Vertex made of them (until now while the fleet holds no end of it): no job
    waits twice at once. Several VMs reclaimed at once (a `preempt` fact each) wait for one restart
    of their job (review of 2026-12-07: paired a restart each, a two-replica job's second VM waited
    to the end of its run)."""

    from shared.fleet.estimate import summarize
    from shared.fleet.observations import Kind, attempt_key
    from shared.fleet.store import FLEET_PREFIX, parse_name
    from sim.faults import HAND_WRITTEN_ATTEMPT
    from sim.invariants import violation

    now = world.clock.now()
    jobs: dict[str, list[SimJob]] = collections.defaultdict(list)
    for job in world.vertex.jobs.values():
        jobs[attempt_key(job.request_id, job.attempt)].append(job)
    facts: dict[str, list[Any]] = collections.defaultdict(list)
    for name in sorted(world.storage.objects(world.settings.state_bucket)):
        if name.startswith(FLEET_PREFIX) and (parsed := parse_name(name)) is not None:
            if not parsed[1].attempt_key.startswith(HAND_WRITTEN_ATTEMPT):
                facts[parsed[1].attempt_key].append(parsed[1])
    out = []
    for key, told in sorted(facts.items()):
        reclaims = [moment for job in jobs.get(key, []) for moment in job.reclaimed_at]
        if not reclaims:
            continue  # no preemption of it: `fleet_facts_bounded` owns its preemption facts
        summaries = [f.summary.restart_waits for f in told if f.summary is not None]
        waits = max(summaries) if summaries else summarize([f for f in told if f.at and f.at <= now], now).restart_waits
        # Without its `run` fact (a write lost: the facts are advisory) the fleet reads it open.
        ended = summaries or any(f.kind is Kind.RUN for f in told)
        end = max(job.end_time or now for job in jobs[key]) if ended else now
        life = (end - min(reclaims)).total_seconds()
        if waits > life + 1:
            out.append(
                violation(
                    "fleet_restart_waits_within_the_jobs_life",
                    f"attempt {key}: {waits} s of waits after a preemption; its jobs lived {life:.0f} s "
                    f"after their first preemption",
                )
            )
    return out


QUIESCENCE: list[Callable[[World], list[Violation]]] = [
    transient_exits_bounded,
    preemptions_within_reclaimed_vms,
    same_layout_every_attempt,
    fleet_facts_replicas_bounded,
    fleet_restart_waits_within_the_jobs_life,
]
RETENTION: list[Callable[[World], list[Violation]]] = [fleet_facts_replicas_bounded]
