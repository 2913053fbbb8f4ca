"""The capacity estimate: from the fleet's observations only (no trace, no probe), whether Spot has
capacity now in a location for a machine class, how sure that is, and how long a Spot run lasts
there. Pure: `estimate(observations, location, now)`.

Each fact is evidence about capacity at its time: a Spot job that got capacity (`wait`, a
`restart`) or runs now says yes; a wait that found none (`nocap`), a stockout, a preemption, or a wait still open past
`OPEN_WAIT_GRACE_SECONDS` (Vertex queues and provisions a job for minutes even with capacity)
says no. Capacity comes and goes, so older evidence counts less: weight 1/2 per
`HALF_LIFE_SECONDS` of age. The estimate is the weighted share of yes, pulled towards 1/2 by a
prior of weight `PRIOR_WEIGHT`; `sure` is the evidence's total weight, and below `MIN_SURE` the
answer to "capacity now?" is unknown (None), which the deadline rule treats as Uniform Progress.

The mean Spot lifetime is one VM's: the time the VMs ran on Spot in VM-seconds (a job of R
replicas runs R VMs, each one Spot can reclaim) over the VMs reclaimed (the maximum-likelihood mean
of an exponential lifetime with runs still going counted as censored); with no preemption seen it
is a lower bound (`lifetime_censored`). A wait for a machine that a restart the fleet saw ended is
no time run, for any VM of the job; a wait no restart answered stays counted, since a trainer
without the kit tells no restart and its job may have run through it (`RestartWaits`). A job of R
replicas is reclaimed R times as often (`per_job_lifetime`). The share of the time with capacity
is the jobs' time, whatever their replicas. An attempt compacted a day after it closed (an
`attempt` fact: `summarize`, shared/fleet/store.py) adds its sums, its wait and its changeover,
and no evidence: by then its evidence weighed nothing; one compacted before its answered waits
were kept apart counts its whole time on Spot as run (`AttemptSummary.vm_seconds_ran`).

An attempt whose end the fleet never heard of (its `run` fact lost: the facts are advisory) is
open only until its job must have ended, `longest_job_seconds` after its start (the deployment's
longest `scheduling.timeout`, a continuation being another attempt): its time on Spot and its
restart wait stop there, and it says nothing of capacity now. An attempt whose wait's closing fact
was lost (its `wait` or `nocap`) and that told of its run, a preemption, a restart or a stockout
has no open wait: its job got capacity or ended (`_wait_closed`).

`CapacityEstimate.outlook` is what a deadline request's claim keeps of it in the attempt
(`Attempt.spot_outlook`) for the deadline rule: the share of the time with capacity and the mean
lifetime, from which the rule weighs how long a wait for Spot is likely to last.

`changeover_bound(observations, location, now)` is the fleet's side of a deadline's changeover d:
an upper confidence bound on a high percentile of the on-demand create-to-running times seen
there (docs/deadlines.md, "The changeover estimate")."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.fleet.observations import AttemptSummary, FleetFact, Kind, attempt_replicas, each_once, within_bound
from shared.fleet.prior import LocationPrior
from shared.requests.job_policy import VERTEX_DEFAULT_TIMEOUT_SECONDS

HALF_LIFE_SECONDS = 3600.0
OPEN_WAIT_GRACE_SECONDS = 900.0
PRIOR_WEIGHT = 1.0
MIN_SURE = 0.5
PRIOR_HOURS = 1.0
# The fleet's changeover bound: the order statistic above the p95 with 90% confidence. Without a
# tail it stays near the 1,200 s prior; 5% of moves in a tail lift it into the tail
# (docs/deadlines.md, "The changeover estimate", has the measurement behind both numbers).
CHANGEOVER_BOUND_SHARE = 0.95
CHANGEOVER_BOUND_CONFIDENCE = 0.9


@dataclass(frozen=True)
class CapacityEstimate:
    location: str
    available: float  # how likely Spot has capacity now (1/2 with no evidence)
    sure: float  # the evidence's weight: 0 none, each fresh observation about 1
    mean_lifetime_seconds: float | None  # one VM's time on Spot per reclaim; None: never on Spot
    lifetime_censored: bool  # no preemption seen: the mean lifetime is a lower bound
    median_wait_seconds: float | None  # of the waits that got capacity
    changeover_p90_seconds: float | None  # of the on-demand attempts' create-to-running
    open_waits: int  # Spot attempts waiting now
    # The share of the time a Spot job had capacity there over the window: time on Spot over time
    # on Spot and waiting (closed, open and restart waits), with `PRIOR_HOURS` of prior at 1/2.
    share_available: float = 0.5
    # What the mean lifetime is made of, for `lifetime_over`: the VMs' time run on Spot (answered
    # restart waits left out), the VMs reclaimed, and the region prior it started from (None: none).
    spot_vm_seconds: float = 0.0
    preemptions: int = 0
    prior: LocationPrior | None = None

    def lifetime_over(self, hours: float) -> float | None:
        """One VM's mean Spot lifetime in seconds as a run of `hours` meets it: the fleet's time
        on Spot and reclaims, with the prior's run counted at its length over that horizon
        (`LocationPrior.run_hours_over`: the traces' long runs keep a day's job going more often
        than their mean says); without a prior, `mean_lifetime_seconds`."""
        if self.prior is None or not self.prior.run_survival:
            return self.mean_lifetime_seconds
        runs = self.prior.weight_runs
        return (self.spot_vm_seconds + runs * self.prior.run_hours_over(hours) * 3600) / (self.preemptions + runs)

    @property
    def outlook(self) -> SpotOutlook | None:
        """The deadline rule's `spot_outlook` for a one-replica job; None where the fleet never ran on Spot."""
        return self.outlook_for(1)

    def outlook_for(self, replicas: int) -> SpotOutlook | None:
        """The deadline rule's `spot_outlook` for a job of `replicas` VMs: its Spot runs last one
        VM's lifetime over them (`per_job_lifetime`); None where the fleet never ran on Spot."""
        if self.mean_lifetime_seconds is None:
            return None
        lifetime = per_job_lifetime(self.mean_lifetime_seconds, replicas)
        return SpotOutlook(round(self.share_available, 4), round(lifetime, 1))

    @property
    def has_capacity(self) -> bool | None:
        """The deadline rule's `spot_available`: None when too little is known."""
        return None if self.sure < MIN_SURE else self.available >= 0.5

    def to_json(self) -> dict[str, object]:
        return {
            "location": self.location,
            "available": round(self.available, 3),
            "sure": round(self.sure, 2),
            "has_capacity": self.has_capacity,
            "mean_lifetime_seconds": _rounded(self.mean_lifetime_seconds),
            "lifetime_censored": self.lifetime_censored,
            "median_wait_seconds": _rounded(self.median_wait_seconds),
            "changeover_p90_seconds": _rounded(self.changeover_p90_seconds),
            "open_waits": self.open_waits,
            "share_available": round(self.share_available, 3),
        }


@dataclass(frozen=True)
class SpotOutlook:
    """What the deadline rule weighs of Spot in a location (`Situation.spot_outlook`): the share of
    the time a Spot job had capacity there and the mean Spot lifetime, as estimated when the
    attempt was claimed."""

    share_available: float
    mean_lifetime_seconds: float

    @property
    def expected_wait_seconds(self) -> float:
        """The mean outage, were capacity to alternate between runs of the mean lifetime and
        outages in that share (share = lifetime / (lifetime + outage)); exponential lifetimes
        are memoryless, so it is also the wait still expected once waiting."""
        share = min(1.0, max(self.share_available, 1e-6))
        return self.mean_lifetime_seconds * (1.0 - share) / share

    def to_json(self) -> dict[str, float]:
        return {"share_available": self.share_available, "mean_lifetime_seconds": self.mean_lifetime_seconds}

    @classmethod
    def from_json(cls, data: Mapping[str, object] | None) -> SpotOutlook | None:
        """The outlook an attempt keeps; None for none, or one this version cannot read."""
        share, lifetime = (data or {}).get("share_available"), (data or {}).get("mean_lifetime_seconds")
        if not isinstance(share, int | float) or not isinstance(lifetime, int | float):
            return None
        return cls(float(share), float(lifetime))


def estimate(
    observations: Iterable[FleetFact],
    location: str,
    now: datetime,
    prior: LocationPrior | None = None,
    longest_job_seconds: float = VERTEX_DEFAULT_TIMEOUT_SECONDS,
) -> CapacityEstimate:
    """The estimate for `location` from the class's observations (any location's may be passed);
    with a `prior` (the shipped region prior, `shared.fleet.prior`) the share of the time with
    capacity and the mean lifetime start from it rather than from 1/2 and nothing, and the fleet's
    own time there outweighs it as it accumulates. `longest_job_seconds`: the longest
    `scheduling.timeout` a job may have (the deployment's `max_timeout_seconds`), at which an
    attempt whose end the fleet never heard of stops counting (a lost `run` fact)."""
    seen: dict[str, list[FleetFact]] = {}
    for o in observations:
        if o.location == location and o.at is not None and o.at <= now:
            seen.setdefault(o.attempt_key, []).append(o)
    by_attempt = {key: _wait_closed(_bounded(facts)) for key, facts in seen.items()}
    here = [o for facts in by_attempt.values() for o in facts]
    evidence: list[tuple[float, float]] = []  # (age in seconds, 1 capacity / 0 none)
    exposure = 0.0  # the jobs' time on Spot
    vm_ran = 0.0  # their VMs' time running there (the lifetime's)
    waited = 0.0
    preemptions = 0
    open_waits = 0
    restart_waits = 0.0  # the attempts' waits for a machine after a preemption: within their time on Spot
    for facts in by_attempt.values():
        kinds = {o.kind: o for o in facts}
        started = kinds.get(Kind.WAIT)
        running_since = started.at if started is not None and Kind.RUN not in kinds else None
        # An attempt whose end the fleet never heard of (a lost write) ended by its job's timeout.
        until = now if running_since is None else min(now, running_since + timedelta(seconds=longest_job_seconds))
        down = attempt_restart_waits(facts, until)
        restart_waits += down.total
        for o in facts:
            if o.summary is not None:  # a closed attempt compacted: no evidence, its sums
                exposure += o.summary.exposure
                vm_ran += o.summary.vm_seconds_ran
                waited += o.summary.waited
                preemptions += o.summary.preemptions
                restart_waits += o.summary.restart_waits
                continue
            age = (now - o.at).total_seconds() if o.at else 0.0
            if o.kind in (Kind.WAIT, Kind.RESTART):
                evidence.append((age, 1.0))
            elif o.kind in (Kind.NO_CAPACITY, Kind.STOCKOUT, Kind.PREEMPT):
                evidence.append((age, 0.0))
            if o.kind is Kind.PREEMPT:
                preemptions += 1
            elif o.kind is Kind.RUN:
                exposure += o.seconds
                vm_ran += max(0.0, o.seconds - down.answered) * o.replicas
            elif o.kind in (Kind.WAIT, Kind.NO_CAPACITY):
                waited += o.seconds
        if started is not None and running_since is not None:
            running = (until - running_since).total_seconds()
            exposure += running
            vm_ran += max(0.0, running - down.answered) * started.replicas
            last_preempt = max((o.at for o in facts if o.kind is Kind.PREEMPT and o.at), default=None)
            restarts = [o for o in facts if o.kind is Kind.RESTART]
            preempted = sum(o.kind is Kind.PREEMPT for o in facts)
            ended = until < now  # past its timeout: how it ended is unknown, so nothing of capacity now
            if not ended and (last_preempt is None or len(restarts) >= preempted):
                evidence.append((0.0, 1.0))  # running now
            elif not ended and (now - last_preempt).total_seconds() > OPEN_WAIT_GRACE_SECONDS:
                evidence.append((0.0, 0.0))  # restarting after a preemption, still without capacity
        waiting = kinds.get(Kind.WAITING)
        if waiting is not None and not kinds.keys() & ENDS_A_WAIT and waiting.at is not None:
            open_waits += 1
            waited += (now - waiting.at).total_seconds()
            if (now - waiting.at).total_seconds() > OPEN_WAIT_GRACE_SECONDS:
                evidence.append((0.0, 0.0))
    # The time on Spot counted restart waits (from a run's start to its end): they are waits.
    restart_waits = min(exposure, restart_waits)
    prior_seconds, prior_share = PRIOR_HOURS * 3600, 0.5
    if prior is not None:
        prior_seconds, prior_share = prior.weight_hours * 3600, prior.share_available
    weights = [(0.5 ** (age / HALF_LIFE_SECONDS), value) for age, value in evidence]
    sure = sum(w for w, _ in weights)
    available = (0.5 * PRIOR_WEIGHT + sum(w * v for w, v in weights)) / (PRIOR_WEIGHT + sure)
    lifetime = (vm_ran / max(1, preemptions)) if exposure > 0 or preemptions else None
    censored = preemptions == 0
    if prior is not None:
        # The prior counts as `weight_runs` runs of its mean length, each ended by a reclaim.
        runs = prior.weight_runs
        lifetime = (vm_ran + runs * prior.mean_run_hours * 3600) / (preemptions + runs)
        censored = False
    waits = _seconds_of(here, Kind.WAIT)
    changeovers = _seconds_of(here, Kind.CHANGEOVER)
    return CapacityEstimate(
        location=location,
        available=available,
        sure=sure,
        mean_lifetime_seconds=lifetime,
        lifetime_censored=censored,
        median_wait_seconds=statistics.median(waits) if waits else None,
        changeover_p90_seconds=percentile(changeovers, 0.9),
        open_waits=open_waits,
        share_available=(exposure - restart_waits + prior_seconds * prior_share) / (exposure + waited + prior_seconds),
        spot_vm_seconds=vm_ran,
        preemptions=preemptions,
        prior=prior,
    )


def _seconds_of(observations: Iterable[FleetFact], kind: Kind) -> list[float]:
    """The seconds of every `wait` or `changeover`, those of compacted attempts included."""
    seen = []
    for o in observations:
        if o.kind is kind:
            seen.append(o.seconds)
        elif o.summary is not None:
            value = o.summary.wait if kind is Kind.WAIT else o.summary.changeover
            if value is not None:
                seen.append(float(value))
    return seen


def closed(facts: Sequence[FleetFact]) -> bool:
    """Whether an attempt's facts are all it will tell: a Spot attempt that ended (`run`,
    `nocap`), or an on-demand one (its changeover is its only fact)."""
    kinds = {o.kind for o in facts}
    return bool(kinds & {Kind.RUN, Kind.NO_CAPACITY}) or not kinds & {Kind.WAIT, Kind.WAITING, Kind.ATTEMPT}


def summarize(facts: Sequence[FleetFact], now: datetime) -> AttemptSummary:
    """What `estimate` weighs of a closed attempt's facts (`closed`), in one fact's worth: the
    same sums, without the evidence of capacity (its weight halves every hour: nothing a day on).
    A fact past Vertex's bound (`within_bound`) is left out, as `estimate` leaves it out; the
    summary keeps the job's replicas."""
    facts = _wait_closed(_bounded(facts))
    waits = attempt_restart_waits(facts, now)
    wait = next((o.seconds for o in facts if o.kind is Kind.WAIT), None)
    changeover = next((o.seconds for o in facts if o.kind is Kind.CHANGEOVER), None)
    return AttemptSummary(
        exposure=round(sum(o.seconds for o in facts if o.kind is Kind.RUN)),
        waited=round(sum(o.seconds for o in facts if o.kind in (Kind.WAIT, Kind.NO_CAPACITY))),
        preemptions=sum(o.kind is Kind.PREEMPT for o in facts),
        restart_waits=round(waits.total),
        wait=None if wait is None else round(wait),
        changeover=None if changeover is None else round(changeover),
        replicas=attempt_replicas(facts),
        answered_restart_waits=round(waits.answered),
    )


def _bounded(facts: Sequence[FleetFact]) -> list[FleetFact]:
    """An attempt's facts, each once however many names it was stored under (`each_once`), within
    Vertex's bound for its job's replicas (`within_bound`)."""
    replicas = attempt_replicas(facts)
    return [o for o in each_once(facts) if within_bound(o, replicas)]


# What only an attempt whose wait ended tells: it got capacity (a `wait`; a `run`, a preemption or
# a restart, which only a job Vertex reported running has) or it ended (`nocap`, a stockout).
ENDS_A_WAIT = frozenset({Kind.WAIT, Kind.NO_CAPACITY, Kind.RUN, Kind.PREEMPT, Kind.RESTART, Kind.STOCKOUT})


def _wait_closed(facts: list[FleetFact]) -> list[FleetFact]:
    """An attempt's facts with its `wait` where that fact was lost and the attempt's others prove
    the job got capacity (the facts are advisory: one write can fail where the next succeeds): at
    its `run`'s start, the wait it was; else at its first preemption or restart, the latest it can
    have started. Without it an open `waiting` would say no capacity for the estimate's window."""
    kinds = {o.kind for o in facts}
    waiting = next((o for o in facts if o.kind is Kind.WAITING and o.at is not None), None)
    if waiting is None or kinds & {Kind.WAIT, Kind.NO_CAPACITY}:
        return facts
    run = next((o for o in facts if o.kind is Kind.RUN and o.at is not None), None)
    ran = [o.at for o in facts if o.kind in (Kind.PREEMPT, Kind.RESTART) and o.at is not None]
    started = run.at - timedelta(seconds=run.seconds) if run is not None else min(ran, default=None)
    if started is None:
        return facts
    waited = max(0.0, (started - waiting.at).total_seconds())
    replicas = attempt_replicas(facts)
    return [
        *facts,
        FleetFact(Kind.WAIT, waiting.location, started, waited, attempt_key=waiting.attempt_key, replicas=replicas),
    ]


def per_job_lifetime(mean_lifetime_seconds: float, replicas: int) -> float:
    """The expected Spot run of a job of `replicas` VMs from one VM's mean lifetime: any of its
    VMs reclaimed ends the run, so it lasts the lifetime over the replicas (exponential lifetimes)."""
    return mean_lifetime_seconds / max(1, replicas)


@dataclass(frozen=True)
class RestartWaits:
    """An attempt's waits for a machine after a preemption (`attempt_restart_waits`): those a
    restart the fleet saw ended, and the last one no restart answered (to the attempt's end, or now)."""

    answered: float = 0.0
    unanswered: float = 0.0

    @property
    def total(self) -> float:
        return self.answered + self.unanswered


def attempt_restart_waits(facts: Sequence[FleetFact], now: datetime) -> RestartWaits:
    """The time one attempt spent waiting for a machine after a preemption, from the first
    preemption recorded while its job ran to the restart that followed (answered), or the attempt's
    end, or now (unanswered: a trainer without the kit tells no restart, so that time may have been
    a run). Several VMs reclaimed at once (a preemption each) wait for one restart of their job (the
    trainer kit's run): paired a restart each, the second VM of a two-replica job reclaimed whole
    at 1 h and back at 1.5 h waited to the end of its 10-hour run. A restart recorded before its
    preemption (the kit's line first) answers it: no wait."""
    events = sorted(
        (o.at, o.kind is Kind.RESTART) for o in facts if o.at and o.kind in (Kind.PREEMPT, Kind.RESTART)
    )  # a preemption before a restart recorded at the same time
    answered, down_since, answered_early = 0.0, None, 0
    for moment, restart in events:
        if restart and down_since is not None:
            answered += (moment - down_since).total_seconds()
            down_since = None
        elif restart:
            answered_early += 1  # its preemption is recorded later
        elif down_since is None and answered_early:
            answered_early -= 1
        elif down_since is None:
            down_since = moment
    unanswered = 0.0
    if down_since is not None:
        ended = next((o.at for o in facts if o.kind is Kind.RUN and o.at), None)
        unanswered = max(0.0, ((ended or now) - down_since).total_seconds())
    return RestartWaits(answered, unanswered)


def estimates(observations: Sequence[FleetFact], now: datetime) -> dict[str, CapacityEstimate]:
    """One estimate per location seen."""
    return {loc: estimate(observations, loc, now) for loc in sorted({o.location for o in observations})}


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile (as `changeover_estimate` takes it); None of nothing."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


def changeover_bound(observations: Iterable[FleetFact], location: str, now: datetime) -> float | None:
    """The on-demand changeover of `location` a deadline plans with: `upper_bound` of the fleet's
    create-to-running times there; None with none seen."""
    here = each_once(o for o in observations if o.location == location and o.at and o.at <= now)
    return upper_bound(_seconds_of(here, Kind.CHANGEOVER), CHANGEOVER_BOUND_SHARE, CHANGEOVER_BOUND_CONFIDENCE)


def upper_bound(values: Sequence[float], share: float, confidence: float) -> float | None:
    """The smallest order statistic at or above the `share` quantile with `confidence` (the k-th
    smallest of n is below the quantile only when k or more of n are, a binomial tail). With too
    few values for that (n below log(1 - confidence) / log(share): 45 for the p95 at 90%), the
    largest: the best bound they give, and a slow move among them still raises it. None of nothing."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[_rank(len(ordered), share, confidence) - 1]


@functools.lru_cache(maxsize=256)  # fleet sizes recur from claim to claim: sum each binomial once
def _rank(n: int, share: float, confidence: float) -> int:
    """The smallest k with P(fewer than k of n below the `share` quantile) >= confidence; n when none."""
    below = 0.0
    for k in range(1, n + 1):
        below += _binomial(n, k - 1, share)
        if below >= confidence:
            return k
    return n


def _binomial(n: int, j: int, p: float) -> float:
    """P(j of n), in logs so that thousands of values do not underflow."""
    log = math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
    return math.exp(log + j * math.log(p) + (n - j) * math.log1p(-p))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
