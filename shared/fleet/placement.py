"""Placement: the location, among a request's allowed ones, with the least expected cost to finish.
Pure: `choose_location(job, candidates, move)`; docs/placement.md derives the model.

For each location, from its prices, the capacity estimate (`shared.fleet.estimate`) and what a
move there costs:

- on Spot, the work W is paid at the Spot price, plus a changeover d per preemption (W / L of
  them, L the job's expected Spot run there: one VM's mean lifetime over the job's replicas, as
  any of its VMs reclaimed stops it; the time to get going again is billed and repeats work
  since the last checkpoint);
- with a deadline T hours away, only the slack may be spent waiting for Spot: B = T - W - 3d
  (d is the next changeover). The deadline rule itself keeps more in hand: its slack beyond the
  net is T - W - 3d - m, and every Spot changeover, the first too, comes out of it, so B is
  generous to a start with capacity by about d + m; the tight cells of docs/placement.md's bench
  rest on that (its seventh pass). With capacity a share p of
  the time (the estimate's `share_available`: time on Spot over time on Spot and waiting) and runs
  of L, an outage lasts L (1 - p) / p, so B pays for k = B / (outage + d) preemptions; the work
  runs on Spot until the (k + 1)-th (Poisson preemptions: `plan_on_spot`; one per L, where the
  region prior's run counts at the length cut within W as often as the traces' runs were,
  `CapacityEstimate.lifetime_over`, but for a waiting job's move) and the rest on on-demand, which the deadline rule switches to in time (plus one on-demand changeover), where
  on-demand is cheapest among the allowed locations, the checkpoint's move there included (the
  switch is placed like any attempt: a cheap Spot region with dear on-demand is not charged its own);
  a new request with `SHARE_MODEL_SLACK_CHANGEOVERS` of budget, where the fleet has its own time on
  Spot, with the share model instead (`share_of_slack`: B pays p B / ((1 - p) W) of the work);
- without a deadline every hour of waiting is weighed at `hour_value` (the time itself is worth
  something: a result later), the expected wait (1 - p) / p times the median wait seen;
- a job waiting where the deadline rule holds the wait only for a move (`Job.leaving`) costs the
  rest of the work on on-demand there, what the rule does once the hold is over;
- a move (another location than the current one) pays the checkpoint's transfer (its size x the
  inter-region price; nothing when the bucket is multi-region or in the same region) and the
  time to copy it, which adds to the changeover.

The current location wins unless another saves more than `MOVE_MARGIN` of its cost: the
estimate is noisy, and a move is a cancel and a new attempt."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from shared.fleet.estimate import CapacityEstimate, per_job_lifetime

# Below this share of the current location's expected cost a move is not worth its risk.
MOVE_MARGIN = 0.02
# A Spot lifetime never seen preempted, or never seen at all: assume this (hours), the same order
# as the GCP H100 traces' median run of available ticks (docs/placement.md).
PRIOR_LIFETIME_HOURS = 6.0
PRIOR_WAIT_HOURS = 1.0  # a wait for Spot when none was seen closing
# A new request with at least this many changeovers of slack is planned, where the fleet has its
# own time on Spot, with the share model (`share_of_slack`) rather than `plan_on_spot`: the
# fleet's runs there after a burst of preemptions (a few hours, each paying an outage and a
# changeover) put part of a day's job on on-demand that such slack pays on Spot. Measured on the
# GCP H100 traces (docs/placement.md, "Robust placement", sixth pass; 6 and 10 the same).
SHARE_MODEL_SLACK_CHANGEOVERS = 8.0


@dataclass(frozen=True)
class Candidate:
    location: str
    spot_per_hour: float
    on_demand_per_hour: float
    estimate: CapacityEstimate | None = None  # None: nothing observed there (p = 1/2)


@dataclass(frozen=True)
class Job:
    remaining_hours: float  # work left, in hours on the machine
    changeover_hours: float  # d: decision to first progress
    current_location: str | None  # None: a first attempt, nothing to move
    hours_to_deadline: float | None = None  # None: no deadline
    hour_value: float = 0.0  # without a deadline: what an hour of waiting is worth, in dollars
    on_demand: bool = False  # placing an on-demand attempt (a deadline switch)
    replicas: int = 1  # the VMs of every worker pool, each one Spot can reclaim
    waiting: bool = False  # a Spot job waiting for capacity in `current_location` now: it has none there
    # The deadline rule holds that wait only for a move (`deadline.MOVE_HOLD_CHANGEOVERS`): staying
    # there, the rest of the work runs on on-demand.
    leaving: bool = False
    new_request: bool = False  # a request's first attempt: nothing ran yet (`SHARE_MODEL_SLACK_CHANGEOVERS`)


@dataclass(frozen=True)
class Move:
    """What moving the checkpoint costs: its size, the price per GB between two locations (0 within
    one, or from a multi-region bucket: `shared.fleet.transfer.per_gb`), and the copy rate.

    With `bucket_location` the checkpoint stays in that bucket and the next attempt reads it from
    there wherever it runs (production: the request's checkpoint folder), so every location pays
    its own read, the current one too; without, it moves with the job, from the current location
    (the placement bench's model)."""

    checkpoint_gb: float = 0.0
    price_per_gb: Callable[[str, str], float] = lambda source, target: 0.0
    gb_per_hour: float = 1000.0
    bucket_location: str | None = None

    def cost(self, source: str | None, target: str) -> tuple[float, float]:
        """(dollars, hours) of getting the checkpoint to `target` from `source` (or the bucket)."""
        if self.bucket_location is not None:
            source = self.bucket_location
        elif source == target:
            return 0.0, 0.0
        if source is None or self.checkpoint_gb <= 0:
            return 0.0, 0.0
        price = self.price_per_gb(source, target)
        if price <= 0:
            return 0.0, 0.0
        return self.checkpoint_gb * price, self.checkpoint_gb / self.gb_per_hour


@dataclass(frozen=True)
class Costed:
    location: str
    cost: float  # expected dollars to finish there, the move included
    spot_share: float  # expected share of the work on Spot
    move_cost: float


@dataclass(frozen=True)
class Choice:
    location: str
    reason: str
    costs: tuple[Costed, ...]  # every candidate, cheapest first

    @property
    def cost(self) -> float:
        return next(c.cost for c in self.costs if c.location == self.location)


def expected_cost(job: Job, candidate: Candidate, move: Move, others: Sequence[Candidate] = ()) -> Costed:
    """The expected dollars to finish in `candidate`'s location (see the module docstring); with a
    deadline the rest of the work goes on-demand there or in the cheapest of `others` (the
    request's other allowed locations), the checkpoint's move included."""
    move_dollars, move_hours = move.cost(job.current_location, candidate.location)
    d = job.changeover_hours + move_hours
    w = max(0.0, job.remaining_hours)
    on_demand_cost = (w + d) * candidate.on_demand_per_hour
    if job.on_demand or (job.leaving and candidate.location == job.current_location):
        return Costed(candidate.location, on_demand_cost + move_dollars, 0.0, move_dollars)
    est = candidate.estimate
    # How much of the time Spot has capacity there (the past window's share), not whether it has
    # now: the work runs for hours, through outages and back.
    p = est.share_available if est is not None else 0.5
    lifetime = PRIOR_LIFETIME_HOURS
    if est is not None and est.mean_lifetime_seconds:
        seen = est.mean_lifetime_seconds / 3600
        lifetime = max(seen, PRIOR_LIFETIME_HOURS) if est.lifetime_censored else seen
    lifetime = per_job_lifetime(lifetime, job.replicas)  # the class's lifetimes are one VM's
    spot_hour_cost = candidate.spot_per_hour * (1 + d / max(lifetime, 1e-6))
    if job.hours_to_deadline is None:
        wait = (est.median_wait_seconds / 3600) if est is not None and est.median_wait_seconds else PRIOR_WAIT_HOURS
        expected_wait = (1 - p) / max(p, 1e-3) * wait
        cost = w * spot_hour_cost + d * candidate.spot_per_hour + expected_wait * job.hour_value
        return Costed(candidate.location, cost + move_dollars, 1.0, move_dollars)
    # The slack beyond the two changeovers the deadline rule keeps in hand is what may be spent
    # waiting; each preemption spends an outage (L (1 - p) / p, were capacity to alternate between
    # runs of L and outages) and a changeover of it, and the work runs on Spot until the one it can
    # no longer pay: long runs keep a tight deadline on Spot where a high share alone would not.
    budget = max(0.0, job.hours_to_deadline - w - 3 * d)
    # An outage lasts L (1 - p) / p, were capacity to alternate between runs of L and outages; where
    # Spot never ran (and no prior) L is only the prior's, so as without a deadline: (1 - p) / p
    # waits of `PRIOR_WAIT_HOURS`.
    ran = est is not None and est.mean_lifetime_seconds is not None
    outage = (lifetime if ran else PRIOR_WAIT_HOURS) * (1 - p) / max(p, 1e-6)
    waits_now = job.waiting and candidate.location == job.current_location  # no capacity there now
    # Whether the work is cut before it is done, and when: runs are not exponential (many short,
    # a few of days), so the prior's run counts at the length that is cut within the work as often
    # as the traces' runs were (`CapacityEstimate.lifetime_over`). Not for a waiting job's move:
    # measured, its moves then went back and forth between locations (docs/placement.md).
    over = est.lifetime_over(w) if est is not None and est.prior is not None and not job.waiting else None
    run = lifetime if over is None else per_job_lifetime(over / 3600, job.replicas)
    start = 0.0 if waits_now else p
    own = est is not None and est.spot_vm_seconds > 0  # the fleet's own time on Spot, not the prior's
    if job.new_request and own and budget >= SHARE_MODEL_SLACK_CHANGEOVERS * d:
        share, on_demand_chance = share_of_slack(w, start, budget)
    else:
        share, on_demand_chance = plan_on_spot(w, run, outage, start, d, budget)
    rest = (1 - share) * w
    here = (rest + on_demand_chance * d) * candidate.on_demand_per_hour
    fallback = min([here, *(switch_elsewhere(job, candidate, o, move, rest, on_demand_chance) for o in others)])
    cost = share * w * spot_hour_cost + fallback
    return Costed(candidate.location, cost + move_dollars, share, move_dollars)


def switch_elsewhere(
    job: Job, candidate: Candidate, target: Candidate, move: Move, rest: float, chance: float
) -> float:
    """What the deadline switch from Spot in `candidate`'s location costs on-demand in `target`'s:
    the `rest` of the work, and with the switch's `chance` its changeover and the checkpoint's move
    there (the switch is placed like any attempt: the cheapest on-demand wins)."""
    dollars, hours = move.cost(candidate.location, target.location)
    return (rest + chance * (job.changeover_hours + hours)) * target.on_demand_per_hour + chance * dollars


class SpotPlan(NamedTuple):
    share: float  # the expected share of the work done on Spot
    on_demand_chance: float  # the chance the rest goes to on-demand (its changeover is paid then)


def plan_on_spot(work: float, run: float, outage: float, start: float, changeover: float, budget: float) -> SpotPlan:
    """What a deadline request with `budget` hours of slack to spend does on Spot, where runs last
    `run` hours and outages `outage` hours on average and the start has capacity with a chance of
    `start`.

    Preemptions come one per `run` hours of work (Poisson); each, and a start without capacity,
    spends an outage and a changeover of the budget; the work goes to on-demand at the first the
    budget can no longer pay (linear between whole numbers of them)."""
    if work <= 0 or outage <= 0 and start >= 1 and budget >= 0:
        return SpotPlan(1.0, 0.0)
    if budget <= 0:
        return SpotPlan(0.0, 1.0)
    affordable = budget / max(outage + changeover, 1e-9)
    mean = work / max(run, 1e-9)

    def until(preemptions: int) -> tuple[float, float]:
        """E[min(work, the time of that preemption)] (run x the sum over j < n of P(N > j), N the
        preemptions in the work) and P(N >= n): the work before it, and whether it comes at all."""
        if preemptions <= 0:
            return 0.0, 1.0
        if preemptions > mean + 12 * math.sqrt(mean) + 12:
            return work, 0.0
        term, at_most, total = math.exp(-mean), 0.0, 0.0
        for j in range(preemptions):
            at_most += term
            total += 1.0 - at_most
            term *= mean / (j + 1)
        return min(work, run * total), max(0.0, 1.0 - at_most)

    def after(paid: float) -> tuple[float, float]:
        """`until` the preemption after the `paid` ones the budget pays (more than -1: the budget is
        positive here)."""
        whole = math.floor(paid)
        (low, low_chance), (high, high_chance) = until(whole + 1), until(whole + 2)
        part = paid - whole
        return low + part * (high - low), low_chance + part * (high_chance - low_chance)

    (started, started_chance), (waited, waited_chance) = after(affordable), after(affordable - 1)
    share = min(1.0, (start * started + (1 - start) * waited) / work)
    return SpotPlan(share, start * started_chance + (1 - start) * waited_chance)


def share_of_slack(work: float, start: float, budget: float) -> SpotPlan:
    """The share model (the cost model before issue 45): with capacity a share `start` of the time,
    each hour waited comes with `start` / (1 - `start`) hours of Spot work, so the `budget` pays a
    share min(1, p B / ((1 - p) W)) of the work on Spot, the rest on on-demand. It ignores how long
    runs last, which at large slack the budget pays many times over."""
    if work <= 0 or start >= 1:
        return SpotPlan(1.0, 0.0)
    share = min(1.0, start * budget / ((1 - start) * work))
    return SpotPlan(share, 1.0 if share < 1 else 0.0)


def choose_location(job: Job, candidates: Sequence[Candidate], move: Move = Move()) -> Choice:
    """The cheapest candidate to finish in (of equal costs, the cheapest on-demand, then Spot); the
    current one unless another saves `MOVE_MARGIN`."""
    if not candidates:
        raise ValueError("no candidate location")
    # Equal costs (all of the work on on-demand, wherever Spot would start): where on-demand is
    # cheapest (no switch elsewhere), then the cheaper Spot.
    prices = {c.location: (c.on_demand_per_hour, c.spot_per_hour) for c in candidates}
    costs = tuple(
        sorted(
            (expected_cost(job, c, move, candidates) for c in candidates),
            key=lambda c: (c.cost, *prices[c.location], c.location),
        )
    )
    best = costs[0]
    current = next((c for c in costs if c.location == job.current_location), None)
    if current is not None and current is not best and current.cost <= best.cost * (1 + MOVE_MARGIN):
        return Choice(current.location, f"stay: within {MOVE_MARGIN:.0%} of the cheapest ({best.location})", costs)
    return Choice(best.location, f"cheapest expected cost to finish: ${best.cost:,.0f}", costs)
