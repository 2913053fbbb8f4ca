"""Where a new attempt runs: `Placer.place` asks `choose_location` (shared/fleet/placement.py) among
the request's allowed `locations`, from the price table (every replica of every pool:
`shared.requests.pricing.layout_hourly`) and the fleet's estimate, when a claim
creates an attempt (the first, a re-queue, a deadline switch: submit's `_claim`, the one place
every attempt is created). The attempt keeps where and why (`Attempt.placed`), and for a deadline
request what the estimate says of Spot there (`Attempt.spot_outlook`), which the deadline rule
weighs on every later observation without reading the fleet again. An attempt a move decided
(`shared.deciding.moves`) is not placed again: it runs where the move placed it (`placed_by_move`).

The class's observations are read once per claim, in one listing (`store.read`), and only when an
attempt is created: to place it, and for a deadline request to keep the outlook (with one
allowed location too). A location the fleet has not run in is weighed from the shipped region
prior (`shared.fleet.prior`) where it has one, and every estimate starts from it. With nothing to
weigh the attempt runs where `plan_attempt` put it (the first allowed location, or the failover
order after a stockout): one allowed location, no machine class, no price for every allowed
location, neither an observation nor a prior in any of them, or a listing that failed (the facts
are advisory: a failed read never holds a create back).

A request with a committed checkpoint weighs reading it where the attempt would run: its size
(the kit's checkpoint_committed line, `Attempt.last_checkpoint_bytes`) at the data transfer price
from the checkpoint bucket's location (`Settings.checkpoint_bucket_location`, set by Terraform;
unknown: not weighed), so a location far from the bucket must save more than the read costs.

For a request with a deadline and no `changeover_seconds` of its own, the claim also snapshots the
fleet's changeover bound where the attempt runs (`Attempt.fleet_changeover_seconds`, from the same
one read), so the deadline rule, asked on every kit line, covers the fleet's slow moves without
reading the fleet each time."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from shared.clock import parse_iso
from shared.errors import is_retryable
from shared.fleet.estimate import CapacityEstimate, SpotOutlook, changeover_bound, estimate
from shared.fleet.observations import FleetFact, MachineClass
from shared.fleet.placement import Candidate, Job, Move, choose_location
from shared.fleet.prior import LocationPrior, location_prior
from shared.fleet.spend import affordable, budget_left
from shared.fleet.transfer import per_gb
from shared.jobs import job_replicas
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome
from shared.requests.attempts import SPOT
from shared.requests.job_policy import VERTEX_DEFAULT_TIMEOUT_SECONDS
from shared.requests.pricing import Price, layout_hourly, machine_types
from shared.wiring import Ports

NO_OBSERVATIONS = "no observations"

ReadFacts = Callable[[MachineClass], Sequence[FleetFact]]
Prior = Callable[[str, str], "LocationPrior | None"]


def no_prior(machine_type: str, location: str) -> LocationPrior | None:
    """No region prior: the fleet's observations alone (`SPOTJOBS_REGION_PRIOR` off)."""
    return None


@dataclass(frozen=True)
class LocationChoice:
    location: str
    reason: str
    cost: float | None = None  # the model's expected dollars to finish there; None: nothing was weighed


class Placer:
    """Places the attempts one claim creates; `read_facts` is called at most once."""

    def __init__(
        self,
        read_facts: ReadFacts,
        price: Price,
        now: datetime,
        changeover_prior_seconds: float,
        bucket_location: str = "",
        prior: Prior = no_prior,
        longest_job_seconds: float = VERTEX_DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self._read_facts = read_facts
        self._longest_job_seconds = longest_job_seconds  # `estimate`'s bound on an attempt never closed
        self._prior = prior  # the region prior per (machine type, location): `location_prior`
        self._price = price
        self._now = now
        self._changeover_prior_seconds = changeover_prior_seconds
        self._bucket_location = bucket_location  # the checkpoint bucket's: "" unknown
        self._facts: dict[MachineClass, Sequence[FleetFact]] = {}
        self._unreadable: set[MachineClass] = set()  # a read that failed: the bound does not retry it

    def place(
        self,
        request: Mapping[str, Any],
        attempt: Attempt,
        earlier: Sequence[Attempt],
        waiting: bool = False,
        leaving: bool = False,
    ) -> LocationChoice:
        """Where `attempt` (planned in `attempt.location`) runs, and why there; `waiting`: it is a
        Spot job waiting for capacity there now (a move), so Spot has none there at its start;
        `leaving`: the deadline rule holds that wait only for a move (`Job.leaving`)."""
        planned = attempt.location
        allowed = [str(loc) for loc in request.get("locations") or []] or [planned]
        if len(allowed) < 2:
            return LocationChoice(planned, "the only allowed location")
        machine_class = MachineClass.of_request(request)
        if machine_class is None:
            return LocationChoice(planned, "no machine class to weigh")
        # Every replica of every pool is a VM billed on its own: a location is priced for the layout.
        prices = {loc: p for loc in allowed if (p := layout_hourly(request, loc, self._price)) is not None}
        # Never planned past the request's max_cost_usd: the locations where the work left fits in it.
        left = budget_left(request, earlier, self._now, self._price)
        prices = affordable(prices, left, work_hours(request, earlier), on_demand=attempt.strategy != SPOT)
        if left is not None and len(prices) == 1:
            return LocationChoice(
                next(iter(prices)), "the only allowed location where the work left fits in max_cost_usd"
            )
        priced = list(prices)
        if len(priced) < 2:
            return LocationChoice(planned, f"no prices for {machine_types(request)} in two allowed locations")
        facts = self._read(machine_class)
        if facts is None:
            return LocationChoice(planned, "fleet observations unreadable")
        seen = {o.location for o in facts}
        priors = {loc: p for loc in priced if (p := self._prior(machine_class.machine_type, loc)) is not None}
        if not (seen | set(priors)) & set(priced):
            return LocationChoice(planned, NO_OBSERVATIONS)
        candidates = [
            Candidate(
                loc,
                spot,
                on_demand,
                self._estimate(facts, loc, priors.get(loc)) if loc in seen or loc in priors else None,
            )
            for loc, (spot, on_demand) in prices.items()
        ]
        work = work_hours(request, earlier)
        job = replace(
            self._job(request, attempt, work, planned if planned in priced else None, candidates),
            waiting=waiting,
            leaving=leaving,
            new_request=not earlier,
        )
        move = checkpoint_move(earlier, self._bucket_location)
        choice = choose_location(job, candidates, move)
        chosen = next(c for c in candidates if c.location == choice.location)
        share = chosen.estimate.share_available if chosen.estimate is not None else None
        seen_text = f"capacity {share:.0%} of the time" if share is not None else "nothing observed there"
        if chosen.location not in seen and share is not None:
            seen_text = f"the region prior: {seen_text}"
        price = chosen.on_demand_per_hour if job.on_demand else chosen.spot_per_hour
        per_hour = " per hour of work" if work is None else ""
        read = next(c.move_cost for c in choice.costs if c.location == choice.location)
        read_text = f"; reading its {move.checkpoint_gb:,.0f} GB checkpoint there ${read:,.2f}" if read else ""
        reason = f"{choice.reason}{per_hour} ({seen_text}, ${price:.2f}/h)" + read_text
        return LocationChoice(choice.location, reason, choice.cost)

    def spot_outlook(self, request: Mapping[str, Any], location: str) -> SpotOutlook | None:
        """The fleet's outlook of Spot in `location` for a request with a deadline (the claim's one
        read, shared with `place`, from the region prior where one is shipped), its mean lifetime the
        job's Spot run (one VM's over the request's replicas); None for any other, with neither
        anything seen there nor a prior, or unreadable."""
        machine_class = MachineClass.of_request(request) if request.get("deadline") else None
        facts = None if machine_class is None else self._read(machine_class)
        if facts is None or machine_class is None:
            return None
        outlook = self._estimate(facts, location, self._prior(machine_class.machine_type, location))
        return outlook.outlook_for(job_replicas(request.get("custom_job") or {}))

    def has_capacity(self, request: Mapping[str, Any], location: str) -> bool | None:
        """The fleet's answer to "has Spot capacity now in `location`?" for the request's class
        (`CapacityEstimate.has_capacity`): the deadline rule's `spot_available`, as the placement
        bench (`bench.bench_placement`) measures it. None when too little is known there, without
        a machine class, or unreadable."""
        machine_class = MachineClass.of_request(request)
        facts = None if machine_class is None else self._read(machine_class)
        return None if facts is None else self._estimate(facts, location, None).has_capacity

    def changeover_bound(self, request: Mapping[str, Any], location: str) -> float | None:
        """The fleet's changeover bound in `location` for a request with a deadline whose d is not
        given (the claim's one read, shared with `place`); None for any other, or unreadable."""
        if not request.get("deadline") or request.get("changeover_seconds") is not None:
            return None
        machine_class = MachineClass.of_request(request)
        facts = None if machine_class is None else self._read(machine_class)
        return None if facts is None else changeover_bound(facts, location, self._now)

    def _estimate(self, facts: Sequence[FleetFact], location: str, prior: LocationPrior | None) -> CapacityEstimate:
        return estimate(facts, location, self._now, prior, self._longest_job_seconds)

    def _read(self, machine_class: MachineClass) -> Sequence[FleetFact] | None:
        if machine_class in self._unreadable:
            return None
        if machine_class not in self._facts:
            from google.api_core.exceptions import GoogleAPICallError

            try:
                self._facts[machine_class] = self._read_facts(machine_class)
            except Exception as exc:  # advisory: the attempt runs where planned (module docstring)
                if not (is_retryable(exc) or isinstance(exc, GoogleAPICallError)):
                    raise
                self._unreadable.add(machine_class)
                return None
        return self._facts[machine_class]

    def _job(
        self,
        request: Mapping[str, Any],
        attempt: Attempt,
        work: float | None,
        current: str | None,
        candidates: Sequence[Candidate],
    ) -> Job:
        """The placement model's job: the work left (the kit's progress, else the request's
        deadline fields, else one hour: the locations are then compared per hour of work), the
        changeover, the time to the deadline, and without one an hour waited priced as an hour on
        the cheapest on-demand (what buying the time back costs)."""
        changeover = float(request.get("changeover_seconds") or self._changeover_prior_seconds) / 3600
        deadline = request.get("deadline")
        hours_to_deadline = None
        if deadline and work is not None:
            hours_to_deadline = (parse_iso(deadline) - self._now).total_seconds() / 3600
        return Job(
            remaining_hours=1.0 if work is None else work,
            changeover_hours=changeover,
            current_location=current,  # the planned location wins unless another saves the margin
            hours_to_deadline=hours_to_deadline,
            hour_value=0.0 if hours_to_deadline is not None else min(c.on_demand_per_hour for c in candidates),
            on_demand=attempt.strategy != SPOT,
            replicas=job_replicas(request.get("custom_job") or {}),
        )


def work_hours(request: Mapping[str, Any], earlier: Sequence[Attempt]) -> float | None:
    """Hours of work left: from the trainer kit's lines (planned steps, rate, the last committed
    step), else the request's `total_steps` x `expected_step_seconds`; None when neither says."""
    committed = max((a.last_checkpoint[1] for a in earlier if a.last_checkpoint), default=0)
    for a in reversed(earlier):
        if a.total_steps and a.steps_per_second:
            return max(0, a.total_steps - committed) / a.steps_per_second / 3600
    total, step = request.get("total_steps"), request.get("expected_step_seconds")
    if total and step:
        return max(0, int(total) - committed) * float(step) / 3600
    return None


def checkpoint_move(earlier: Sequence[Attempt], bucket_location: str) -> Move:
    """What the next attempt pays to read the request's last committed checkpoint where it runs:
    its size from the kit's line, priced from the bucket's location (`shared.fleet.transfer`);
    nothing without a checkpoint, its size, or the bucket's location."""
    size = next((a.last_checkpoint_bytes for a in reversed(earlier) if a.last_checkpoint_bytes), None)
    if not size or not bucket_location:
        return Move()
    return Move(checkpoint_gb=size / 1e9, price_per_gb=per_gb, bucket_location=bucket_location)


def attempt_placer(ports: Ports) -> Placer:
    """A placer reading the state bucket's observations (one listing per class) and the price table."""
    from shared.fleet import store
    from shared.ledger.run_lock import ledger_bucket
    from shared.requests.pricing import hourly

    now = ports.clock()
    return Placer(
        lambda machine_class: store.read(ledger_bucket(ports.ledger), machine_class, now),
        hourly,
        now,
        ports.settings.changeover_prior_seconds,
        ports.settings.checkpoint_bucket_location,
        location_prior if ports.settings.region_prior else no_prior,
        ports.settings.max_timeout_seconds,
    )


def place_claimed(placer: Placer, record: RequestRecord, attempt: Attempt) -> None:
    """Set where the attempt a claim just created runs, and why, and for a deadline request the
    fleet's outlook of Spot and its changeover bound there (in the record the claim writes)."""
    earlier = [a for a in record.attempts if a.n < attempt.n]
    placed = placed_by_move(attempt, earlier) or placer.place(record.request, attempt, earlier)
    attempt.location, attempt.placed = placed.location, placed.reason
    outlook = placer.spot_outlook(record.request, attempt.location)
    attempt.spot_outlook = None if outlook is None else outlook.to_json()
    attempt.fleet_changeover_seconds = placer.changeover_bound(record.request, attempt.location)


def placed_by_move(attempt: Attempt, earlier: Sequence[Attempt]) -> LocationChoice | None:
    """Where a move placed `attempt` (its re-queue's location) when the attempt before it was
    moved; None for any other attempt. The move weighed the job waiting with no Spot where it was
    (`Placer.place` with `waiting`), which a claim cannot know: placed again, a move out of the
    cheapest location went back there, a changeover paid for nothing (simulator seed 2486)."""
    before = earlier[-1] if earlier else None
    if before is None or before.outcome is not AttemptOutcome.MOVED:
        return None
    why = f"where the move of attempt {before.n} out of {before.location} placed it (its `moved` line says why)"
    return LocationChoice(attempt.location, why)
