"""Fleet observations: the facts one request's attempts tell about Spot capacity, per machine class
and location, as small immutable values named so that the name carries the whole fact.

`observations_of(record)` derives them from a ledger record, deterministically: the same record
gives the same observations, each with a stable key (the attempt, the kind, an index), so a hook
that records what a decision added (`shared.fleet.recording`) writes each fact once however often a delivery is
repeated. The kinds:

- `wait`: a Spot attempt got capacity: seconds from its create to RUNNING, at the start, with
  its `replicas` (the VMs of every worker pool: each is a VM Spot can reclaim);
- `waiting`: a Spot attempt created and not running yet: an open wait since `at`;
- `nocap`: a Spot attempt that ended without ever running (cancelled, switched, stocked out):
  a wait that found no capacity, seconds from its create to its end;
- `run`: a Spot attempt that ran and ended: seconds from its start to its end (the job's time),
  `count` its preemptions (at least one when it ended by preemption with no count), with its
  `replicas`;
- `preempt`: a Spot attempt's k-th preemption, when the observation that first recorded it saw
  the job (`shared.fleet.recording.new_facts`);
- `restart`: its k-th restart got capacity again (the trainer kit's `run_started` of run k),
  likewise, once Vertex reported the attempt running;
- `changeover`: an on-demand attempt's create-to-running seconds (what a move costs in time);
- `stockout`: an attempt ended with a stockout error (RESOURCE_EXHAUSTED, or the stockout
  patterns), at its end;
- `attempt`: a closed attempt's facts compacted into one (`AttemptSummary`: what the estimate
  weighs of them), at its newest fact (`shared.fleet.store.compact`).

A fact about the fleet steers every request of the class, so it is bounded by what Vertex can
have done for the job, never by what the job says: at most `MAX_SPOT_PREEMPTIONS` preemptions per
replica of the attempt's job (each replica's VM can be reclaimed that often, the bound
`shared.deciding.preemptions.max_preemptions` puts on the count) and `MAX_SPOT_RESTARTS` restarts
per replica (Vertex restarts a Spot job "up to six times"; whether per job or per replica is not
documented, and `shared.deciding.preemptions.max_restarts` reads it per replica, the reading that
allows the most), and only for an attempt Vertex reported running. Every time in a fact is Vertex's or the recorder's
clock, or a kit line's own only within the job's run as Vertex reported it (not before its start,
not past its end). A stored fact past the bound (written before it) is not read (`within_bound`).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from shared.clock import parse_iso
from shared.jobs import FLEX_START, MAX_SPOT_PREEMPTIONS, MAX_SPOT_RESTARTS, job_replicas
from shared.ledger.records import Attempt, RequestRecord
from shared.requests.attempts import SPOT

# google.rpc RESOURCE_EXHAUSTED, as shared.deciding.job_end classifies a capacity failure.
STOCKOUT_CODE = 8
_UNSAFE = re.compile(r"[^a-z0-9_.-]+")


class Kind(StrEnum):
    WAIT = "wait"
    WAITING = "waiting"
    NO_CAPACITY = "nocap"
    RUN = "run"
    PREEMPT = "preempt"
    RESTART = "restart"
    CHANGEOVER = "changeover"
    STOCKOUT = "stockout"
    ATTEMPT = "attempt"


@dataclass(frozen=True)
class AttemptSummary:
    """What the estimate weighs of a closed attempt's facts (`shared.fleet.estimate.summarize`),
    in whole seconds: its time on Spot (the job's, restart waits included) and waiting for a first
    run, its preemptions and restart waits, its wait for capacity or on-demand changeover, if any,
    its job's replicas (its time on Spot is that many VMs'), and of its restart waits those a
    restart the fleet saw ended (None: a summary written before they were kept apart)."""

    exposure: int = 0
    waited: int = 0
    preemptions: int = 0
    restart_waits: int = 0
    wait: int | None = None
    changeover: int | None = None
    replicas: int = 1
    answered_restart_waits: int | None = None

    @property
    def vm_seconds_ran(self) -> int:
        """Its VMs' time running on Spot (the mean lifetime's): its time on Spot less the waits a
        restart ended, for each VM; an older summary's whole time on Spot (the rule it was written under)."""
        return max(0, self.exposure - (self.answered_restart_waits or 0)) * self.replicas


@dataclass(frozen=True, order=True)
class MachineClass:
    """What capacity is asked for: the machine type and its accelerators (of the first pool)."""

    machine_type: str
    accelerator_type: str = ""
    accelerator_count: int = 0

    @property
    def key(self) -> str:
        """Its name segment: lower case, safe in an object name."""
        parts = (self.machine_type, self.accelerator_type or "none", str(self.accelerator_count))
        return "+".join(_UNSAFE.sub("-", part.lower()) for part in parts)

    @classmethod
    def from_key(cls, key: str) -> MachineClass:
        machine_type, accelerator, count = key.split("+")
        return cls(machine_type, "" if accelerator == "none" else accelerator, int(count))

    @classmethod
    def of_request(cls, request: Mapping[str, Any]) -> MachineClass | None:
        pools = ((request.get("custom_job") or {}).get("jobSpec") or {}).get("workerPoolSpecs") or []
        machine = (pools[0] or {}).get("machineSpec") or {} if pools else {}
        if not machine.get("machineType"):
            return None
        return cls(
            str(machine["machineType"]),
            str(machine.get("acceleratorType") or ""),
            int(machine.get("acceleratorCount") or 0),
        )


@dataclass(frozen=True)
class FleetFact:
    kind: Kind
    location: str
    at: datetime | None  # None: when its observation saw the job (set by `stamped`)
    seconds: float = 0.0
    count: int = 0
    attempt_key: str = ""  # the attempt it is about (a hash of the request id, and n)
    index: int = 0  # the k-th of its kind for the attempt (preemptions)
    summary: AttemptSummary | None = None  # an `attempt` fact's
    replicas: int = 1  # a `wait`'s or `run`'s: the VMs of its job (facts stored before: one)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.attempt_key, self.kind.value, self.index)

    def stamped(self, now: datetime) -> FleetFact:
        return self if self.at is not None else replace(self, at=now)


def within_bound(fact: FleetFact, replicas: int | None = None) -> bool:
    """Whether a fact is one Vertex can have vouched for: no k-th preemption or restart of an
    attempt past what Vertex does for a job of `replicas` VMs (a preemption does not say them: its
    attempt's `attempt_replicas`; by default the fact's own), no compacted attempt with more
    preemptions."""
    vms = max(1, fact.summary.replicas if fact.summary is not None else replicas or fact.replicas)
    if fact.kind is Kind.PREEMPT:
        return 0 <= fact.index < MAX_SPOT_PREEMPTIONS * vms
    if fact.kind is Kind.RESTART:
        return 0 <= fact.index <= MAX_SPOT_RESTARTS * vms
    if fact.kind is Kind.RUN:
        return 0 <= fact.count <= MAX_SPOT_PREEMPTIONS * vms
    return fact.summary is None or 0 <= fact.summary.preemptions <= MAX_SPOT_PREEMPTIONS * vms


def each_once(facts: Iterable[FleetFact]) -> list[FleetFact]:
    """Each fact once (its `key`: attempt, kind, index), at its earliest time: a name carries its
    time, so one fact can be stored under two (a preemption recorded by two observations that saw
    the job at different moments, or floored before seed 10044's fix and rounded up after it).
    The earliest is when the first observation saw it, as docs/placement.md dates it."""
    first: dict[tuple[str, str, int], FleetFact] = {}
    for o in facts:
        kept = first.get(o.key)
        if kept is None or (o.at is not None and (kept.at is None or o.at < kept.at)):
            first[o.key] = o
    return list(first.values())


def attempt_replicas(facts: Iterable[FleetFact]) -> int:
    """The VMs of an attempt's job, as its `wait`, `run` or summary says (1 when none does)."""
    return max((o.summary.replicas if o.summary is not None else o.replicas for o in facts), default=1)


@functools.lru_cache(maxsize=4096)
def attempt_key(request_id: str, n: int) -> str:
    # Remembered: every decision reads its record's facts two or three times, each with its keys.
    return f"{hashlib.sha256(request_id.encode()).hexdigest()[:16]}-{n}"


@dataclass(frozen=True)
class Reading:
    """What the deciding room knows how to read in a record: the deployment's stockout patterns,
    the runs of an attempt the trainer kit said started (their restart indexes), and how many of
    an attempt's preemptions wait for confirmation (a kit's `preempted` line may be the stop at the
    job's timeout)."""

    is_stockout: Callable[[str], bool] = lambda _: False
    runs_started: Callable[[RequestRecord, int], set[int]] = lambda record, n: set()
    unconfirmed_preemptions: Callable[[RequestRecord, Attempt], int] = lambda record, attempt: 0


def observations_of(record: RequestRecord, reading: Reading = Reading()) -> list[FleetFact]:
    """Every fact the record's attempts with a job tell (see the module docstring)."""
    found: list[FleetFact] = []
    replicas = 0  # the request's VMs, read once, for the first attempt with a job
    for attempt in record.attempts:
        if attempt.job:
            key = attempt_key(record.request_id, attempt.n)
            replicas = replicas or job_replicas(record.request.get("custom_job") or {})
            unconfirmed = reading.unconfirmed_preemptions(record, attempt)
            found.extend(_of_attempt(attempt, key, replicas, reading.is_stockout, unconfirmed))
            if attempt.strategy == SPOT and attempt.started_at:  # Vertex saw it run: it can restart
                runs = reading.runs_started(record, attempt.n)
                restarts = sorted(r for r in runs if 0 < r <= MAX_SPOT_RESTARTS * replicas)
                found.extend(
                    FleetFact(Kind.RESTART, attempt.location, None, attempt_key=key, index=r) for r in restarts
                )
    return found


def _of_attempt(
    attempt: Attempt, key: str, replicas: int, is_stockout: Callable[[str], bool], unconfirmed: int = 0
) -> list[FleetFact]:
    # Its create time as Vertex gave it; a job found after the fact may lack one: its claim.
    created = parse_iso(attempt.created_at or attempt.claimed_at)
    started = parse_iso(attempt.started_at) if attempt.started_at else None
    ended = parse_iso(attempt.ended_at) if attempt.ended_at else None
    loc = attempt.location
    out: list[FleetFact] = []
    if attempt.strategy != SPOT:
        if started is not None:
            out.append(FleetFact(Kind.CHANGEOVER, loc, started, _seconds(created, started), attempt_key=key))
    elif started is None:
        out.append(FleetFact(Kind.WAITING, loc, created, attempt_key=key))
        if ended is not None or attempt.outcome is not None:
            # A move or a switch decides before the job's end is seen: the wait lasted until then.
            decided = parse_iso(attempt.cancel_decided_at) if attempt.cancel_decided_at else None
            end = ended or decided or created
            out.append(FleetFact(Kind.NO_CAPACITY, loc, end, _seconds(created, end), attempt_key=key))
    else:
        waited = _seconds(created, started)
        out.append(FleetFact(Kind.WAIT, loc, started, waited, attempt_key=key, replicas=replicas))
        # However the record came by its count (a job's lines, a forged service line, a record
        # written before the bound), the fleet takes no more than Vertex can have done.
        counted = max(attempt.preemptions - unconfirmed, 1 if attempt.preemptions_unknown else 0)
        preemptions = min(counted, MAX_SPOT_PREEMPTIONS * replicas)
        out.extend(FleetFact(Kind.PREEMPT, loc, None, attempt_key=key, index=i) for i in range(preemptions))
        if ended is not None:
            ran = _seconds(started, ended)
            out.append(FleetFact(Kind.RUN, loc, ended, ran, preemptions, attempt_key=key, replicas=replicas))
    error = attempt.error or {}
    # A FLEX_START job ends RESOURCE_EXHAUSTED when its maxWaitDuration runs out: Dynamic Workload
    # Scheduler's queue, not Spot's capacity, which is what the estimate reads a stockout as.
    if attempt.strategy == FLEX_START:
        return out
    if error and (error.get("code") == STOCKOUT_CODE or is_stockout(str(error.get("message") or ""))):
        out.append(FleetFact(Kind.STOCKOUT, loc, ended, attempt_key=key))
    return out


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())


def epoch(moment: datetime) -> int:
    return int(moment.astimezone(UTC).timestamp())
