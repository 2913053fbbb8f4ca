"""Placement across locations on Spot availability traces: the cost of finishing by a deadline.

    python -m bench.bench_placement [--traces DIR] [--deadline-ratio R ...] [--job-hours H]
        [--fleet N] [--signals] [--probes] [--json] [--exclude-region R ...] [--setup skynomad]
        [--no-prior] [--starts-after HOURS]

Reads every `*.json` under DIR (default: bench/traces/gcp-h100, the GCP H100 traces) in the
shared format (one zone a file: `metadata.region`, `metadata.spot_price_per_hour`,
`metadata.on_demand_price_per_hour`, `metadata.gap_seconds`; `data`, 1 = available). A region is
available at a tick when any of its zones is (Vertex picks the zone). A job needs H hours of work
and must be done `R x H` hours after its start; `--fleet N` requests run at once from staggered
starts, and the run is repeated from `--runs` start times spread over the traces.

The model is the tick model of `bench.deadline_sim`, per location: every new instance pays the
changeover d (whole ticks, no work, billed); a Spot job waits where it was placed until that
region has capacity and is preempted when it has none; the last tick is billed whole. The rule
sees a new Spot attempt that has not run yet as on Spot within its changeover for its first d
ticks, as production's `deadline_situation` does (Vertex queues a job for minutes even with
capacity), then as waiting. A move of
a waiting job, or of a job going to on-demand elsewhere, pays the checkpoint's transfer
(`--checkpoint-gb` x the price between the two regions, `shared.fleet.transfer.per_gb`). Missed deadlines are
finished on on-demand in the cheapest region and counted.

Policies (all decide with production's `decide_deadline`; the review interval is one tick):

- `up_mean_region`, `up_best_region`: Uniform Progress pinned to one region, the mean over the
  regions and the region with the least mean cost (chosen knowing the outcome);
- `failover_order`: today's production: Uniform Progress (no capacity signal), the request's
  `locations` in a static order (cheapest Spot first) moved along only on a stockout, which
  Vertex reports after a Spot job's sixth restart;
- `spotjobs`: placement (`shared.fleet.placement.choose_location`) for every new attempt and for
  a job waiting longer than its changeover (unless `shared.deciding.deadline.sits_out` keeps it
  in a short outage; at once when `preempted_often`; only while the rule spares the move's
  changeover, `spares_a_move`, as production's `consider_move`), fed by `shared.fleet.estimate.estimate` of the fleet's own attempts (the
  observations production records: waits, open waits, preemptions, runs), and `Rule.SPOTJOBS`
  with `spot_available` from the same estimate;
- `omniscient`: the least cost knowing every trace (a dynamic programme over ticks, work and
  placement: wait, Spot in a region, on-demand in the cheapest region; moves free of egress).

`--signals` adds spotjobs' placement with the trace's truth as the capacity signal, with none,
with `Rule.GREEDY`, and with no outlook kept for the rule (`spotjobs_uniform`: the rule's line
while waiting, as before it weighed the expected wait), and the estimate's precision and recall
against the trace at the asks.

`--probes` adds `spotjobs_probes`: spotjobs whose fleet is also fed by opt-in paid probes, short
Spot jobs in regions it knows too little of (`bench.placement_probes`: when, how long, the
budget). Their billed minutes are in its cost, and each is one create against Vertex's quota.

`--setup skynomad` replaces the job, deadline, d, checkpoint, zones and starts with SkyNomad's
deadline sweep from its public artifact (`bench.skynomad_setup`: six zones unmerged, a 51.83 h
deadline, work = deadline / ratio, d = 0.2 h exact on 2-minute ticks, 50 GB, its six windows of
one job) and prints the artifact's published Optimal and SkyNomad beside ours.
`--exclude-region` leaves regions out of the traces (the issue's run without us-east4).
Every policy's fleet estimate starts from the shipped region prior (`shared.fleet.prior`, fitted on
the traces' first week by `bench.region_prior`), as production's does; `--no-prior` leaves it out,
and `--starts-after 168` keeps only the runs starting after that week, where the prior is out of
sample.

Prints per ratio the slack (deadline less work) in changeovers, the mean cost in dollars and
normalised to on-demand in the cheapest region, misses, moves and egress per job, the gap to the
optimum and which region is the best single one; `--json` one object per ratio:
`{"deadline_ratio": R, "slack_changeovers": S, "policies": {NAME: {"cost_mean": C, "misses": M,
"moves": V}}}` (with `--setup skynomad` also `"published": {"optimal": O, "skynomad": N}`), and with
`--probes` also `spotjobs_probes` with `probes` and `probe_cost` (per job; the cost is in `C`).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from shared.deciding.deadline import (
    Action,
    Placement,
    Rule,
    Situation,
    Work,
    decide_deadline,
    preempted_often,
    sits_out,
    spares_a_move,
)
from shared.fleet.estimate import CapacityEstimate, SpotOutlook, estimate
from shared.fleet.observations import FleetFact, Kind
from shared.fleet.placement import Candidate, Job, Move, choose_location
from shared.fleet.prior import LocationPrior, location_prior
from shared.fleet.transfer import per_gb

DEFAULT_TRACES = Path(__file__).with_name("traces") / "gcp-h100"
RATIOS = (1.05, 1.1, 1.2, 1.5, 2.0)
POLICIES = ("up_mean_region", "up_best_region", "failover_order", "spotjobs", "omniscient")
EPOCH = datetime(2025, 10, 4, tzinfo=UTC)
TRACES_MACHINE_TYPE = "a3-highgpu-8g"  # the GCP H100 traces' (bench/traces/gcp-h100/README.md)
# Vertex fails a Spot job with STOCKOUT after its sixth restart (docs/deadlines.md).
RESTARTS_BEFORE_STOCKOUT = 6


@dataclass(frozen=True)
class Region:
    name: str
    spot_per_hour: float
    on_demand_per_hour: float
    available: tuple[bool, ...]


def load_regions(
    folder: Path, exclude: Sequence[str] = (), zones_only: Sequence[str] | None = None
) -> tuple[list[Region], int]:
    """The regions of every trace under `folder` (a region's zones merged: any available), and
    the tick in seconds; none of the regions in `exclude`. With `zones_only`, those zones alone,
    each a location of its own (unmerged, named by its zone)."""
    zones: dict[str, list[dict]] = {}
    gap = None
    for path in sorted(folder.rglob("*.json")):
        body = json.loads(path.read_text())
        meta = body.get("metadata", {}) if isinstance(body, dict) else {}
        if "data" not in body or "region" not in meta or meta["region"] in exclude:
            continue
        if zones_only is not None:
            if meta.get("zone") not in zones_only:
                continue
            meta["region"] = meta["zone"]
        gap = gap or int(meta["gap_seconds"])
        if int(meta["gap_seconds"]) != gap:
            raise ValueError(f"{path}: tick {meta['gap_seconds']} s, others {gap} s")
        zones.setdefault(meta["region"], []).append(body)
    if gap is None:
        raise ValueError(f"no trace in {folder}")
    length = min(len(b["data"]) for bodies in zones.values() for b in bodies)
    regions = []
    for name, bodies in sorted(zones.items()):
        meta = bodies[0]["metadata"]
        merged = tuple(any(bool(b["data"][t]) for b in bodies) for t in range(length))
        regions.append(
            Region(name, float(meta["spot_price_per_hour"]), float(meta["on_demand_price_per_hour"]), merged)
        )
    return regions, gap


@dataclass(frozen=True)
class Setup:
    regions: tuple[Region, ...]
    gap: int  # seconds per tick
    work_ticks: int
    deadline_ticks: int
    changeover_ticks: int
    checkpoint_gb: float
    priors: Mapping[str, LocationPrior] = field(default_factory=dict)  # per region name (`with_priors`)

    @property
    def cheapest_on_demand(self) -> Region:
        return min(self.regions, key=lambda r: (r.on_demand_per_hour, r.name))

    def hours(self, ticks: float) -> float:
        return ticks * self.gap / 3600


@dataclass
class Attempt:
    """One job of the fleet as the simulator runs it."""

    start: int  # trace tick of the request's start
    region: int
    mode: Placement = Placement.WAITING_FOR_SPOT
    placed: int = 0  # tick (from the start) of the current attempt or instance
    changeover_left: int = 0
    done: int = 0  # ticks of work committed
    cost: float = 0.0
    moves: int = 0
    egress: float = 0.0
    restarts: int = 0  # preemptions of the current Spot attempt
    preempted: list[int] = field(default_factory=list)  # their ticks (from the start), as `Attempt.preempted_at`
    number: int = 1  # attempt number (observation keys)
    ran: bool = False  # the current Spot attempt got capacity once
    run_began: int = 0
    finished: bool = False
    missed: bool = False
    key: str = ""
    outlook: SpotOutlook | None = None  # what the current attempt's claim kept of the estimate


@dataclass
class Fleet:
    """The fleet's observations, as production would record them, and the estimates of a tick."""

    observations: list[FleetFact] = field(default_factory=list)
    cache: dict[tuple[int, str], CapacityEstimate] = field(default_factory=dict)
    # The shipped region prior per location, as production's `Placer` passes it (none: `--no-prior`).
    priors: Mapping[str, LocationPrior] = field(default_factory=dict)

    def note(self, observation: FleetFact) -> None:
        self.observations.append(observation)
        self.cache.clear()

    def estimate(self, region: str, tick: int, setup: Setup) -> CapacityEstimate:
        found = self.cache.get((tick, region))
        if found is None:
            found = self.cache[(tick, region)] = estimate(
                self.observations, region, at(tick, setup), self.priors.get(region)
            )
        return found


def at(tick: int, setup: Setup) -> datetime:
    return EPOCH + timedelta(seconds=tick * setup.gap)


def situation(setup: Setup, job: Attempt, tick: int, spot_available: bool | None) -> Situation:
    g = setup.gap
    placement = job.mode
    if placement is Placement.WAITING_FOR_SPOT and not job.ran and tick - job.placed < setup.changeover_ticks:
        # As production's `deadline_situation`: a new Spot job queued for less than one changeover
        # is on Spot within its changeover (Vertex queues and provisions a job for minutes even
        # with capacity), not yet waiting for Spot.
        placement = Placement.ON_SPOT
    return Situation(
        now=at(tick, setup),
        deadline=at(setup.deadline_ticks, setup),
        started=EPOCH,
        work=Work.in_seconds(setup.work_ticks * g, job.done * g),
        placement=placement,
        placed_at=at(job.placed, setup),
        changeover_seconds=setup.changeover_ticks * g,
        review_seconds=g,
        spot_available=spot_available,
        spot_outlook=job.outlook,
    )


class Policy:
    """Where and when: the hooks the simulator calls (`tick` counted from the job's start); the
    base is Uniform Progress pinned."""

    rule = Rule.UNIFORM_PROGRESS

    def __init__(self, setup: Setup, fleet: Fleet) -> None:
        self.setup, self.fleet = setup, fleet

    def first_region(self, job: Attempt, tick: int) -> int:
        return job.region

    def spot_available(self, job: Attempt, tick: int) -> bool | None:
        return None

    def outlook(self, job: Attempt, tick: int) -> SpotOutlook | None:
        """What a new attempt's claim keeps for the deadline rule (`Attempt.spot_outlook`)."""
        return None

    def on_demand_region(self, job: Attempt, tick: int) -> int:
        return job.region

    def spot_region(self, job: Attempt, tick: int) -> int:
        return job.region

    def waiting_move(self, job: Attempt, tick: int) -> int | None:
        return None

    def after_stockout(self, job: Attempt) -> int:
        return job.region

    def probe(self, absolute: int, jobs: Sequence[Attempt]) -> None:
        """Launch and run paid probes at this trace tick: none but `spotjobs_probes`'s
        (`bench.placement_probes`)."""


class FailoverOrder(Policy):
    """Today's: the static order, moved along on a stockout only."""

    def __init__(self, setup: Setup, fleet: Fleet) -> None:
        super().__init__(setup, fleet)
        self.order = sorted(range(len(setup.regions)), key=lambda i: setup.regions[i].spot_per_hour)

    def first_region(self, job: Attempt, tick: int) -> int:
        return self.order[0]

    def after_stockout(self, job: Attempt) -> int:
        return self.order[(self.order.index(job.region) + 1) % len(self.order)]


class Spotjobs(Policy):
    """Placement by expected cost from the fleet's estimate; `Rule.SPOTJOBS` with its signal."""

    rule = Rule.SPOTJOBS

    def candidates(self, absolute: int) -> list[Candidate]:
        """Every region with its prices and the fleet's estimate at this trace tick."""
        s = self.setup
        return [
            Candidate(r.name, r.spot_per_hour, r.on_demand_per_hour, self.fleet.estimate(r.name, absolute, s))
            for r in s.regions
        ]

    def _choose(
        self,
        job: Attempt,
        tick: int,
        current: int | None,
        on_demand: bool,
        waiting: bool = False,
        leaving: bool = False,
        new_request: bool = False,
    ) -> int:
        s = self.setup
        remaining = s.hours(s.work_ticks - job.done)
        placement_job = Job(
            remaining_hours=remaining,
            changeover_hours=s.hours(s.changeover_ticks),
            current_location=None if current is None else s.regions[current].name,
            hours_to_deadline=s.hours(s.deadline_ticks - tick),
            on_demand=on_demand,
            waiting=waiting,
            leaving=leaving,
            new_request=new_request,
        )
        move = Move(checkpoint_gb=s.checkpoint_gb if job.done else 0.0, price_per_gb=per_gb)
        chosen = choose_location(placement_job, self.candidates(job.start + tick), move).location
        return next(i for i, r in enumerate(s.regions) if r.name == chosen)

    def first_region(self, job: Attempt, tick: int) -> int:
        return self._choose(job, tick, None, on_demand=False, new_request=True)

    def spot_available(self, job: Attempt, tick: int) -> bool | None:
        region = self.setup.regions[job.region].name
        return self.fleet.estimate(region, job.start + tick, self.setup).has_capacity

    def outlook(self, job: Attempt, tick: int) -> SpotOutlook | None:
        region = self.setup.regions[job.region].name
        return self.fleet.estimate(region, job.start + tick, self.setup).outlook

    def on_demand_region(self, job: Attempt, tick: int) -> int:
        return self._choose(job, tick, job.region, on_demand=True)

    def spot_region(self, job: Attempt, tick: int) -> int:
        return self._choose(job, tick, job.region, on_demand=False)

    def waiting_move(self, job: Attempt, tick: int) -> int | None:
        # As production's `consider_move`: only while the rule spares the move's changeover; after
        # a changeover of waiting, not out of a short outage (a fresh outlook), and where the rule
        # holds the wait only for a move, staying costs the rest on on-demand; within it, only a
        # job preempted often lately, staying costed so.
        now = situation(self.setup, job, tick, None)
        decision = decide_deadline(now, self.rule)
        if not spares_a_move(decision, now.changeover_seconds):
            return None
        at_once = tick - job.placed < self.setup.changeover_ticks
        if at_once and not preempted_often(now, [at(t, self.setup) for t in job.preempted]):
            return None
        if not at_once and sits_out(now, self.outlook(job, tick), self.setup.gap, self.rule):
            return None
        leaving = at_once or decision.held_for_move
        chosen = self._choose(job, tick, job.region, on_demand=False, waiting=True, leaving=leaving)
        return None if chosen == job.region else chosen


class SpotjobsTruth(Spotjobs):
    """Placement as spotjobs, with the trace's truth as the capacity signal (what probing every
    tick would know)."""

    def spot_available(self, job: Attempt, tick: int) -> bool | None:
        return _region(self.setup, job).available[job.start + tick]


class SpotjobsBlind(Spotjobs):
    """Placement as spotjobs, with no capacity signal (the deadline rule is Uniform Progress)."""

    def spot_available(self, job: Attempt, tick: int) -> bool | None:
        return None


@dataclass
class Quality:
    """The estimate's `has_capacity` against the trace, at every ask of the deadline rule."""

    asked: int = 0
    known: int = 0
    true_yes: int = 0
    said_yes: int = 0
    truly_yes: int = 0  # among the known

    def line(self) -> str:
        precision = self.true_yes / max(1, self.said_yes)
        recall = self.true_yes / max(1, self.truly_yes)
        no_right = self.known - self.said_yes - (self.truly_yes - self.true_yes)
        return (
            f"estimate vs trace at {self.asked} asks: known {self.known / max(1, self.asked):.0%}; "
            f"capacity: precision {precision:.2f}, recall {recall:.2f}; "
            f"no capacity right {no_right / max(1, self.known - self.truly_yes):.2f}"
        )


class SpotjobsGreedy(Spotjobs):
    """Placement as spotjobs, with `Rule.GREEDY` (wait for Spot until the safety net): production's
    rule is Uniform Progress's, which goes to on-demand as soon as it falls behind its line."""

    rule = Rule.GREEDY


class SpotjobsUniform(Spotjobs):
    """Placement as spotjobs, with no outlook kept for the rule: `Rule.SPOTJOBS` before it weighed the
    expected wait (Uniform Progress's line while waiting)."""

    def outlook(self, job: Attempt, tick: int) -> SpotOutlook | None:
        return None


def measured(quality: Quality) -> Callable[[Setup, Fleet], Policy]:
    class Measured(Spotjobs):
        def spot_available(self, job: Attempt, tick: int) -> bool | None:
            said = super().spot_available(job, tick)
            truth = _region(self.setup, job).available[job.start + tick]
            quality.asked += 1
            if said is not None:
                quality.known += 1
                quality.said_yes += said
                quality.truly_yes += truth
                quality.true_yes += said and truth
            return said

    return Measured


def simulate_fleet(
    setup: Setup,
    starts: Sequence[int],
    make_policy: Callable[[Setup, Fleet], Policy],
    watch: Callable[[Attempt, int], None] | None = None,
) -> list[Attempt]:
    """Run the requests starting at `starts` (trace ticks) together, one tick at a time; `watch`
    is shown every live job at the end of each of its ticks (`bench.placement_trace`)."""
    fleet = Fleet(priors=setup.priors)
    policy = make_policy(setup, fleet)
    jobs = [Attempt(start=s, region=0, key=f"r{i}") for i, s in enumerate(starts)]
    first, last = min(starts), max(starts) + setup.deadline_ticks
    for absolute in range(first, last):
        for job in jobs:
            tick = absolute - job.start
            if job.finished or tick < 0:
                continue
            if tick == 0:
                job.region = policy.first_region(job, 0)
                _wait(job, fleet, setup, 0, policy)
            if tick >= setup.deadline_ticks:
                _miss(job, setup)
                continue
            _settle(job, fleet, setup, tick, policy)
        policy.probe(absolute, jobs)
        for job in jobs:
            tick = absolute - job.start
            if job.finished or tick < 0 or tick >= setup.deadline_ticks:
                continue
            _decide(job, fleet, setup, tick, policy)
            _advance(job, setup)
            if job.done >= setup.work_ticks:
                job.finished = True
            if watch is not None:
                watch(job, tick)
    for job in jobs:
        if not job.finished:
            _miss(job, setup)
    return jobs


def _region(setup: Setup, job: Attempt) -> Region:
    return setup.regions[job.region]


def _obs(fleet: Fleet, setup: Setup, job: Attempt, kind: Kind, tick: int, seconds: float = 0.0, index: int = 0) -> None:
    fleet.note(
        FleetFact(
            kind,
            _region(setup, job).name,
            at(job.start + tick, setup),
            seconds,
            attempt_key=f"{job.key}-{job.number}",
            index=index,
        )
    )


def _wait(job: Attempt, fleet: Fleet, setup: Setup, tick: int, policy: Policy) -> None:
    """A new Spot attempt, waiting in its region."""
    job.mode, job.placed, job.restarts, job.ran, job.preempted = Placement.WAITING_FOR_SPOT, tick, 0, False, []
    job.outlook = policy.outlook(job, tick)
    _obs(fleet, setup, job, Kind.WAITING, tick)


def _end_attempt(job: Attempt, fleet: Fleet, setup: Setup, tick: int) -> None:
    """The current attempt ends (cancelled, switched, stocked out): what production records."""
    g = setup.gap
    if job.mode is Placement.ON_DEMAND:
        pass
    elif not job.ran:
        _obs(fleet, setup, job, Kind.NO_CAPACITY, tick, (tick - job.placed) * g)
    else:
        _obs(fleet, setup, job, Kind.RUN, tick, (tick - job.run_began) * g)
    job.number += 1


def _settle(job: Attempt, fleet: Fleet, setup: Setup, tick: int, policy: Policy) -> None:
    """Capacity at this tick: a Spot instance is preempted, a waiting Spot job starts."""
    up = _region(setup, job).available[job.start + tick]
    if job.mode is Placement.ON_SPOT and not up:
        job.restarts += 1
        job.preempted.append(tick)
        _obs(fleet, setup, job, Kind.PREEMPT, tick, index=job.restarts - 1)
        job.mode, job.placed = Placement.WAITING_FOR_SPOT, tick
        if job.restarts > RESTARTS_BEFORE_STOCKOUT:
            _end_attempt(job, fleet, setup, tick)
            job.region = policy.after_stockout(job)
            _wait(job, fleet, setup, tick, policy)
    elif job.mode is Placement.WAITING_FOR_SPOT and up:
        if not job.ran:
            _obs(fleet, setup, job, Kind.WAIT, tick, (tick - job.placed) * setup.gap)
            job.ran, job.run_began = True, tick
        else:
            _obs(fleet, setup, job, Kind.RESTART, tick, index=job.restarts)  # the kit's run_started
        job.mode, job.placed, job.changeover_left = Placement.ON_SPOT, tick, setup.changeover_ticks


def _move(job: Attempt, setup: Setup, target: int) -> None:
    if target != job.region:
        job.moves += 1
        if job.done:
            job.egress += setup.checkpoint_gb * per_gb(_region(setup, job).name, setup.regions[target].name)
        job.region = target


def _decide(job: Attempt, fleet: Fleet, setup: Setup, tick: int, policy: Policy) -> None:
    absolute = job.start + tick
    if job.mode is Placement.WAITING_FOR_SPOT:
        target = policy.waiting_move(job, tick)
        if target is not None:
            _end_attempt(job, fleet, setup, tick)
            _move(job, setup, target)
            _wait(job, fleet, setup, tick, policy)
            if _region(setup, job).available[absolute]:
                _settle(job, fleet, setup, tick, policy)
    decision = decide_deadline(situation(setup, job, tick, policy.spot_available(job, tick)), policy.rule)
    if decision.action is Action.SWITCH_TO_ON_DEMAND and job.mode is Placement.WAITING_FOR_SPOT and job.outlook is None:
        # As production's `watch_deadline`: a wait whose claim kept no outlook asks the fleet's
        # now before leaving, and keeps it.
        job.outlook = policy.outlook(job, tick)
        decision = decide_deadline(situation(setup, job, tick, policy.spot_available(job, tick)), policy.rule)
    if decision.action is Action.SWITCH_TO_ON_DEMAND:
        _end_attempt(job, fleet, setup, tick)
        _move(job, setup, policy.on_demand_region(job, tick))
        job.mode, job.placed, job.changeover_left = Placement.ON_DEMAND, tick, setup.changeover_ticks
    elif decision.action is Action.BACK_TO_SPOT:
        _end_attempt(job, fleet, setup, tick)
        _move(job, setup, policy.spot_region(job, tick))
        _wait(job, fleet, setup, tick, policy)
        if _region(setup, job).available[absolute]:
            _settle(job, fleet, setup, tick, policy)


def _advance(job: Attempt, setup: Setup) -> None:
    if job.mode is Placement.WAITING_FOR_SPOT:
        return
    region = _region(setup, job)
    price = region.spot_per_hour if job.mode is Placement.ON_SPOT else region.on_demand_per_hour
    job.cost += price * setup.hours(1)
    if job.changeover_left:
        job.changeover_left -= 1
    else:
        job.done += 1


def _miss(job: Attempt, setup: Setup) -> None:
    """Past the deadline: finished on on-demand in the cheapest region, counted as missed."""
    left = setup.work_ticks - job.done + setup.changeover_ticks
    job.cost += setup.cheapest_on_demand.on_demand_per_hour * setup.hours(left)
    job.done, job.finished, job.missed = setup.work_ticks, True, True


def omniscient(setup: Setup, starts: Sequence[int]) -> list[float]:
    """The least cost of each start knowing every trace: a dynamic programme over ticks, work done
    and placement (waiting; Spot in a region or on-demand in the cheapest, each with the changeover
    ticks left), vectorised over the starts. Same billing as the simulator (whole ticks);
    moves pay no egress, so it is a lower bound by at most that."""
    import numpy as np

    s = setup
    w, d, tick_hours = s.work_ticks, s.changeover_ticks, s.hours(1)
    origin = np.array(starts)
    shape = (len(starts), w + 1)
    instances = [(r.spot_per_hour, np.array(r.available, dtype=bool)) for r in s.regions]
    instances.append((s.cheapest_on_demand.on_demand_per_hour, None))
    inf = np.inf
    waiting = np.full(shape, inf)
    waiting[:, 0] = 0.0
    # running[i][c]: on instance i with c changeover ticks left before this tick
    running = [[np.full(shape, inf) for _ in range(d + 1)] for _ in instances]
    for tick in range(s.deadline_ticks):
        best = waiting.copy()
        for states in running:
            for state in states:
                best = np.minimum(best, state)
        new_running = []
        for (price, available), states in zip(instances, running):
            up = np.ones(len(starts), dtype=bool) if available is None else available[origin + tick]
            cost = price * tick_hours
            nxt = [np.full(shape, inf) for _ in range(d + 1)]
            # A new instance this tick: its first changeover tick.
            entering = [(best, d)] + [(states[c], c) for c in range(d + 1)]
            for source, left in entering:
                if left > 0:
                    nxt[left - 1] = np.minimum(nxt[left - 1], source + cost)
                else:
                    moved = np.full(shape, inf)
                    moved[:, 1:] = source[:, :-1] + cost
                    moved[:, w] = np.minimum(moved[:, w], source[:, w])  # done: stays done, unbilled
                    nxt[0] = np.minimum(nxt[0], moved)
            for c in range(d + 1):
                nxt[c] = np.where(up[:, None], nxt[c], inf)
            new_running.append(nxt)
        waiting, running = best, new_running
    final = waiting[:, w]
    for states in running:
        for state in states:
            final = np.minimum(final, state[:, w])
    return final.tolist()


@dataclass(frozen=True)
class Row:
    cost_mean: float
    misses: int
    moves: float
    egress: float
    runs: int
    creates: float = 0.0  # attempts created per job
    probes: float | None = None  # paid probes per job (each one create), `spotjobs_probes` only
    probe_cost: float | None = None  # their billed dollars per job, counted in `cost_mean`
    region: str | None = None  # the region of `up_best_region`

    def to_json(self) -> dict[str, float | int]:
        row = {"cost_mean": round(self.cost_mean, 2), "misses": self.misses, "moves": round(self.moves, 3)}
        if self.probes is not None and self.probe_cost is not None:
            row |= {"probes": round(self.probes, 3), "probe_cost": round(self.probe_cost, 2)}
        return row


def _row(jobs: Sequence[Attempt]) -> Row:
    return Row(
        statistics.fmean(j.cost + j.egress for j in jobs),
        sum(j.missed for j in jobs),
        statistics.fmean(j.moves for j in jobs),
        statistics.fmean(j.egress for j in jobs),
        len(jobs),
        statistics.fmean(j.number for j in jobs),
    )


def _probed_row(setup: Setup, fleets: Sequence[Sequence[int]]) -> Row:
    """`spotjobs_probes`: spotjobs fed also by paid probes, whose billed minutes are in its cost."""
    from bench.placement_probes import ProbeLedger, probing  # it builds on this module's Spotjobs

    ledger = ProbeLedger()
    jobs = [j for starts in fleets for j in simulate_fleet(setup, starts, probing(ledger))]
    row = _row(jobs)
    per_job = ledger.cost / len(jobs)
    return replace(
        row,
        cost_mean=row.cost_mean + per_job,
        creates=row.creates + ledger.probes / len(jobs),
        probes=ledger.probes / len(jobs),
        probe_cost=per_job,
    )


def pinned(region: int) -> Callable[[Setup, Fleet], Policy]:
    class Pinned(Policy):
        def first_region(self, job: Attempt, tick: int) -> int:
            return region

    return Pinned


def with_priors(setup: Setup) -> Setup:
    """The setup with the shipped region prior of the traces' machine type for each of its
    locations (regions, or zones in SkyNomad's setup), as production's placement reads it."""
    priors = {r.name: p for r in setup.regions if (p := location_prior(TRACES_MACHINE_TYPE, r.name)) is not None}
    return replace(setup, priors=priors)


def starting_after(setup: Setup, fleets: Sequence[Sequence[int]], hours: float) -> list[list[int]]:
    """The fleets whose every start is at least `hours` into the traces: the out-of-sample ones
    for a prior fitted on the traces' first `hours` (`bench.region_prior`)."""
    first = math.ceil(hours * 3600 / setup.gap)
    return [list(starts) for starts in fleets if min(starts) >= first]


def slack_in_changeovers(setup: Setup) -> float:
    """The slack (deadline less work) counted in changeovers: how many surprises a job can afford,
    the measure that makes two setups' ratios comparable."""
    return (setup.deadline_ticks - setup.work_ticks) / setup.changeover_ticks


def shared_setup(
    regions: Sequence[Region], gap: int, args: argparse.Namespace, ratio: float
) -> tuple[Setup, list[list[int]]]:
    """The bench's own setup: a job of `--job-hours`, a deadline of ratio x that, d rounded up to
    whole ticks; `--runs` fleets of `--fleet` staggered starts spread over the traces."""
    work_ticks = round(args.job_hours * 3600 / gap)
    setup = Setup(
        tuple(regions),
        gap,
        work_ticks,
        math.floor(work_ticks * ratio),
        math.ceil(args.changeover_hours * 3600 / gap),
        args.checkpoint_gb,
    )
    length = len(regions[0].available)
    stagger = max(1, work_ticks // max(1, args.fleet))
    span = (args.fleet - 1) * stagger + setup.deadline_ticks
    bases = [round(i * (length - span - 1) / max(1, args.runs - 1)) for i in range(args.runs)]
    return setup, [[b + i * stagger for i in range(args.fleet)] for b in bases]


def run_setup(
    setup: Setup, fleets: Sequence[Sequence[int]], args: argparse.Namespace
) -> tuple[dict[str, Row], Quality]:
    """Every policy of the bench, and the optimum, on `fleets` (each a list of trace ticks)."""
    regions = setup.regions
    every = [s for starts in fleets for s in starts]
    rows: dict[str, Row] = {}
    per_region = [
        _row([j for starts in fleets for j in simulate_fleet(setup, starts, pinned(r))]) for r in range(len(regions))
    ]
    rows["up_mean_region"] = Row(
        statistics.fmean(r.cost_mean for r in per_region),
        sum(r.misses for r in per_region),
        0.0,
        0.0,
        sum(r.runs for r in per_region),
    )
    best_region = min(range(len(regions)), key=lambda i: per_region[i].cost_mean)
    rows["up_best_region"] = replace(per_region[best_region], region=regions[best_region].name)
    rows["failover_order"] = _row([j for starts in fleets for j in simulate_fleet(setup, starts, FailoverOrder)])
    quality = Quality()
    rows["spotjobs"] = _row([j for starts in fleets for j in simulate_fleet(setup, starts, measured(quality))])
    if args.probes:
        rows["spotjobs_probes"] = _probed_row(setup, fleets)
    if args.signals:
        variants = (
            ("spotjobs_truth", SpotjobsTruth),
            ("spotjobs_blind", SpotjobsBlind),
            ("spotjobs_greedy", SpotjobsGreedy),
            ("spotjobs_uniform", SpotjobsUniform),
        )
        for name, policy in variants:
            rows[name] = _row([j for starts in fleets for j in simulate_fleet(setup, starts, policy)])
    optimum = omniscient(setup, every)
    rows["omniscient"] = Row(statistics.fmean(optimum), 0, 0.0, 0.0, len(optimum))
    return rows, quality


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_placement", description=__doc__.split("\n\n")[1])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="folder of traces (default: %(default)s)")
    parser.add_argument("--deadline-ratio", type=float, nargs="+", default=list(RATIOS), help="deadline / work")
    parser.add_argument("--job-hours", type=float, default=24.0, help="hours of work (default 24)")
    parser.add_argument("--fleet", type=int, default=8, help="requests of the class at once (default 8)")
    parser.add_argument("--runs", type=int, default=12, help="start times spread over the traces (default 12)")
    parser.add_argument("--changeover-hours", type=float, default=0.2, help="d, rounded up to ticks (default 0.2)")
    parser.add_argument("--checkpoint-gb", type=float, default=100.0, help="checkpoint moved per move (default 100)")
    parser.add_argument(
        "--signals",
        action="store_true",
        help="also spotjobs with the trace's truth, with no capacity signal and with the Greedy rule, "
        "and the estimate against the trace",
    )
    parser.add_argument(
        "--probes",
        action="store_true",
        help="also spotjobs_probes: spotjobs fed by paid probes, their cost counted (bench/placement_probes.py)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per ratio")
    parser.add_argument(
        "--setup",
        choices=("shared", "skynomad"),
        default="shared",
        help="shared: the options above; skynomad: SkyNomad's deadline sweep from its artifact "
        "(bench/skynomad_setup.py: its six zones unmerged, 51.83 h deadline, work = deadline / ratio, "
        "d = 0.2 h exact, 50 GB, its six windows; ignores --job-hours, --fleet, --runs, "
        "--changeover-hours, --checkpoint-gb)",
    )
    parser.add_argument(
        "--exclude-region", nargs="+", default=[], help="regions left out of the traces (e.g. us-east4)"
    )
    parser.add_argument(
        "--no-prior",
        action="store_true",
        help="spotjobs without the shipped region prior (shared/fleet/region_prior.json): the fleet's "
        "own observations alone",
    )
    parser.add_argument(
        "--starts-after",
        type=float,
        default=0.0,
        help="only the runs starting at least this many hours into the traces (168: out of sample for "
        "the region prior, fitted on the first week)",
    )
    args = parser.parse_args(argv)
    skynomad = None
    if args.setup == "skynomad":
        from bench import skynomad_setup as skynomad  # it builds on this module's Setup

        regions, gap = load_regions(args.traces, args.exclude_region, zones_only=skynomad.ZONES)
    else:
        regions, gap = load_regions(args.traces, args.exclude_region)
    shown = [*POLICIES, "spotjobs_probes"] if args.probes else POLICIES
    for ratio in args.deadline_ratio:
        began = time.process_time()
        if skynomad is None:
            setup, fleets = shared_setup(regions, gap, args, ratio)
        else:
            setup, fleets = skynomad.setup(regions, gap, ratio)
        if not args.no_prior:
            setup = with_priors(setup)
        if args.starts_after:
            fleets = starting_after(setup, fleets, args.starts_after)
        rows, quality = run_setup(setup, fleets, args)
        slack = slack_in_changeovers(setup)
        published = skynomad.PUBLISHED.get(ratio) if skynomad is not None else None
        if args.json:
            line: dict[str, object] = {
                "deadline_ratio": ratio,
                "slack_changeovers": round(slack, 2),
                "policies": {n: rows[n].to_json() for n in shown},
            }
            if published is not None:
                line["published"] = {"optimal": published[0], "skynomad": published[1]}
            print(json.dumps(line))
            continue
        norm = setup.cheapest_on_demand.on_demand_per_hour * setup.hours(setup.work_ticks + setup.changeover_ticks)
        best = rows["omniscient"].cost_mean
        jobs = sum(len(starts) for starts in fleets)
        print(
            f"deadline ratio {ratio} ({args.setup} setup): {setup.hours(setup.work_ticks):.2f} h of work, "
            f"deadline {setup.hours(setup.deadline_ticks):.2f} h, slack {slack:.1f} changeovers of "
            f"{setup.hours(setup.changeover_ticks):.2f} h, {len(fleets)} runs of {jobs // len(fleets)} "
            f"({time.process_time() - began:.0f} s of CPU)"
        )
        print("  policy           cost $   / on-demand  misses  moves/job  egress $/job  gap to optimum")
        for name in [*POLICIES, *(n for n in rows if n not in POLICIES)]:
            r = rows[name]
            print(
                f"  {name:<15} {r.cost_mean:8.0f}   {r.cost_mean / norm:9.3f}  {r.misses:6d}  {r.moves:9.2f}"
                f"  {r.egress:12.2f}  {r.cost_mean / best - 1:+13.1%}"
            )
        print(f"  up_best_region: {rows['up_best_region'].region}")
        if published is not None:
            optimal, nomad = published
            print(
                f"  published (SkyNomad artifact): Optimal {optimal:.0f}, SkyNomad {nomad:.0f} "
                f"(gap {nomad / optimal - 1:+.1%}); our optimum / theirs {best / optimal:.3f}"
            )
        if args.signals:
            print(f"  {quality.line()}")
        if args.probes:
            probed = rows["spotjobs_probes"]
            print(
                f"  spotjobs_probes: {probed.probes:.2f} probes / job, ${probed.probe_cost:.2f} / job (in its cost); "
                f"creates / job {probed.creates:.2f} (spotjobs {rows['spotjobs'].creates:.2f})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
