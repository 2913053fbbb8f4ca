"""Budgets in the simulated world (issue 46): some plain GPU envelope requests carry a
`max_cost_usd` (`with_budget`, drawn from a generator of their own so every other draw of a seed
stays where it was), small enough that some are stopped at it and large enough that others finish.
Some GPU requests with a deadline or a fallback carry one too (`with_work_budgets`, the review of
2026-12-07): a deadline's sized to its declared work on Spot, so the deadline rule's switch to
on-demand is planned against it (`budget_refuses`) and the stop may land during a hand-over, and
a fallback's attempts are billed on demand.

The promises (docs/requests.md, "A budget"):

- `budgets_reached` (the alert catalogue's condition for `budget_reached`): a request whose spend
  reached its budget was alerted, naming it;
- `budgets_held` (`QUIESCENCE`): no request's spend passed its budget by more than the documented
  overshoot (the job's price for `OVERSHOOT_INTERVALS` reconcile intervals, plus `LAG` for the
  cancel and a delivery the world delayed), widened by the ticks of one run lock's lease for every
  reconcile pass that died while the request ran (`dead_pass_seconds`), and by the time Vertex
  refused the stray sweep's listing where a stray of it ran, once `stray_sweep_refused` said so
  (`blind_sweep_seconds`), and by the time its jobs ran in a location whose Vertex API stalled
  (`stalled_region_seconds`). That the alert comes once (plus once per publish a
  fault left unconfirmed) is `alerts_not_per_redelivery`'s, as for every alert;
- `billed_as_vertex_ran` (`QUIESCENCE`, docs/requests.md, "What a request costs"): `spotjobs
  report`'s bill of every finished request, with or without a budget, is what the simulated Vertex
  ran of its jobs (their own start and end, machines, replicas and strategy), to the cent: between
  its attempts' spans less every wait for a machine after a preemption, and every span whole,
  its strays' included; and every stray of it that the code cancelled is named in the bill as a
  floor (`floor_of`).

- `budgets_unpriced` (the catalogue's condition for `budget_unpriced`): a request with a budget
  that ran on the row a redeployed price table dropped (`sim.faults`, `price_row_dropped`) and was
  not over when it was dropped is alerted once, naming it, unless its budget was reached first.

The spends and bills here are priced with the table as shipped (`shipped_price`): what Vertex
ran costs what it costs, whatever table the functions were deployed with.

A request its budget stopped is cancelled as an operator's cancel is (`stopped`): the promises
that excuse those (a job that fails or is preempted while it is cancelled alerts nothing) excuse it.

The spend is the code's own arithmetic (`shared.fleet.spend.request_spend`) over the record, whose
start and end times are the simulated Vertex's.
"""

from __future__ import annotations

import functools
import json
import math
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.alerts import AlertKind

if TYPE_CHECKING:
    from sim.promises import Expected
    from sim.workload import Workload
    from sim.world import Violation, World

SHARE = 0.5  # of plain GPU envelope requests with a budget
BUDGETS_USD = (0.02, 0.1, 1.0)  # about 40 s, 3 min and 30 min of a2-highgpu-1g on Spot
# A pass that sees the spend may come one reconcile interval late; a failed pass (the world's
# faults) puts it off to the next one.
OVERSHOOT_INTERVALS = 2
LAG = timedelta(seconds=600)  # the simulated Vertex takes up to 400 s to end a cancelled job


def with_budget(body: dict[str, Any], request_id: str, at: datetime) -> None:
    """Give `body` a budget, for a share of requests (its own generator: the seed's other draws stay)."""
    rng = random.Random(f"budget:{request_id}:{at.isoformat()}")
    if rng.random() < SHARE:
        body["max_cost_usd"] = rng.choice(BUDGETS_USD)


WORK_BUDGET_FACTORS = (1.5, 3.0, 8.0)  # x the declared work on Spot: on demand is 2 to 6 times Spot


def with_work_budgets(workload: Workload) -> Workload:
    """Give half the GPU requests with a deadline a budget of `WORK_BUDGET_FACTORS` times their
    declared work's Spot price at the cheapest of their locations (a budget that cannot pay for it
    on Spot is refused at submit, which `shared.requests.budget`'s tests judge), and half those with
    a fallback one of `BUDGETS_USD`. A generator per request: its publisher's retry carries the
    same body, and every other draw of the seed stays."""
    import json

    from shared.requests.pricing import layout_hourly

    for arrival in workload.arrivals:
        kind = arrival.kind
        if not arrival.is_plain_request or kind not in ("deadline", "fallback"):
            continue
        body = json.loads(arrival.data)
        pools = body["custom_job"]["jobSpec"]["workerPoolSpecs"]
        rng = random.Random(f"{workload.seed_text}:work-budget:{body['request_id']}")
        if not pools[0]["machineSpec"].get("acceleratorCount") or rng.random() >= SHARE:
            continue
        if kind == "fallback":
            body["max_cost_usd"] = rng.choice(BUDGETS_USD)
        else:
            hours = body["total_steps"] * body["expected_step_seconds"] / 3600
            locations = body.get("locations") or [body.get("location") or workload.settings.location]
            spot = [p[0] for loc in locations if (p := layout_hourly(body, loc)) is not None]
            if not spot:
                continue
            body["max_cost_usd"] = max(0.01, round(min(spot) * hours * rng.choice(WORK_BUDGET_FACTORS), 2))
        arrival.data = json.dumps(body, separators=(",", ":")).encode()
    return workload


@functools.cache
def shipped_table() -> dict[str, Any]:
    """`shared/price_table.json` as shipped (the deployed functions' may lack a row: `sim.faults`)."""
    from shared.requests.pricing import PRICE_TABLE_PATH

    return json.loads(PRICE_TABLE_PATH.read_text())


def shipped_price(machine_type: str, location: str) -> tuple[float, float] | None:
    """(Spot, on-demand) per hour in the table as shipped: what a run costs whatever was deployed."""
    row = shipped_table()["machine_types"].get(machine_type, {}).get("locations", {}).get(location)
    return None if row is None else (float(row["spot_per_hour"]), float(row["on_demand_per_hour"]))


def stopped(world: World) -> set[str]:
    """Requests whose budget stopped them (their cancel's source)."""
    from shared.deciding.budget_watch import BUDGET_SOURCE
    from sim.invariants import records

    return {r.request_id for r in records(world) if r.cancel is not None and r.cancel.source == BUDGET_SOURCE}


def _spends(world: World) -> list[tuple[Any, float, float]]:
    """(record, spend, budget) of every request with a budget whose spend is known."""
    from shared.fleet.spend import max_cost, request_spend
    from sim.invariants import records

    out = []
    for record in records(world):
        limit = max_cost(record.request)
        spend = request_spend(record, world.clock.now(), shipped_price).usd if limit is not None else None
        if limit is not None and spend is not None:
            out.append((record, spend, limit))
    return out


def budgets_reached(world: World) -> list[Expected]:
    from sim.invariants import excused
    from sim.promises import Expected

    unpriced = {expected.request_id for expected in budgets_unpriced(world)}  # stopped for that, not at the limit
    return [
        Expected(AlertKind.BUDGET_REACHED, record.request_id, f"spent ${spend:.4f} of its max_cost_usd ${limit:.2f}")
        for record, spend, limit in _spends(world)
        if spend >= limit and not excused(world, record.request_id) and record.request_id not in unpriced
    ]


def budgets_unpriced(world: World) -> list[Expected]:
    """`budget_unpriced`: a request with a budget had a job that ran on the row the price table was
    redeployed without (its CustomJob as created: a machine type of its pools, in its location), and
    the request was not over when the row went (a job of it ended later, or runs): the decision
    that reads that end, or a reconcile pass, watches its budget with the new table. Not owed once
    its budget was reached (`budget_reached` said first: the watch is done) or a fault excuses it."""
    from shared.fleet.spend import max_cost
    from shared.requests.pricing import layout
    from sim.invariants import alerts, excused, records
    from sim.promises import Expected

    dropped = world.tampering.price_row_dropped
    if dropped is None:
        return []
    machine, location, at = dropped
    reached = {a.get("request_id") for a in alerts(world) if a.get("kind") == AlertKind.BUDGET_REACHED.value}
    out = []
    for record in records(world):
        if max_cost(record.request) is None or record.request_id in reached or excused(world, record.request_id):
            continue
        jobs = [world.vertex.jobs[a.job] for a in record.attempts if a.job in world.vertex.jobs]
        ran_there = any(
            job.start_time is not None
            and job.location == location
            and machine in {m for m, _ in layout({"custom_job": job.request})}
            for job in jobs
        )
        if ran_there and any(job.end_time is None or job.end_time > at for job in jobs):
            why = f"it ran on {machine} in {location}, which the price table redeployed at {at:%H:%M:%S} lacks"
            out.append(Expected(AlertKind.BUDGET_UNPRICED, record.request_id, why))
    return out


def dead_pass_seconds(world: World, record: Any) -> float:
    """How long reconcile passes that died while `record` ran put its stop off (seed 54): its
    attempts' jobs or its strays, whose run is its spend too (docs/requests.md; seed 10261: only a
    person's console re-run of its job ran), to the last read that found a stray of it (the end of
    its spend: seed 11986, a re-run that ran on after its request's job ended)."""
    from shared.clock import parse_iso

    starts = [parse_iso(run.started_at) for run in [*record.attempts, *record.strays] if run.started_at]
    if not starts:
        return 0.0
    ends = [parse_iso(a.ended_at) for a in record.attempts if a.ended_at]
    until = max(ends) if ends and record.latest.ended_at else world.clock.now()
    strays_seen = [parse_iso(stray.seen_until) for stray in record.strays if stray.started_at]
    return dead_pass_seconds_around(world, min(starts), max([until, *strays_seen]))


def dead_pass_seconds_around(world: World, since: datetime, until: datetime) -> float:
    """How long reconcile passes that died from one lease before `since` to `until` put off what
    a pass would have seen in that span: a pass whose instance is gone holds the run lock for its
    lease (`shared.ledger.run_lock.LEASE_SECONDS`, longer than two intervals), so every tick
    within it ends at once (seed 54; seed 4709 for `job_stuck`)."""
    from shared.ledger.run_lock import LEASE_SECONDS

    interval = world.settings.reconcile_interval_seconds
    first = since - timedelta(seconds=LEASE_SECONDS)
    dead = sum(1 for moment in world.dead_reconciles if first <= moment <= until)
    return dead * math.ceil(LEASE_SECONDS / interval) * interval


def blind_sweep_seconds(world: World, record: Any) -> float:
    """How long the stray sweep was blind to a stray of `record` (seed 10994): Vertex refused its
    listing of the stray's location (a 403 on list, `sim.faults`) while the stray ran, and a
    `stray_sweep_refused` alert named the location. docs/ARCHITECTURE.md: such a location is blind
    to strays; docs/operations.md: a job there runs uncancelled, the operator told, until the
    permission is granted again and the next pass cancels it. Each refusal counts once over the
    span its location's strays ran, from their first start to the last read that found one."""
    from shared.clock import parse_iso
    from sim.promises import listings_refused_said

    spans: dict[str, tuple[datetime, datetime]] = {}
    for stray in record.strays:
        if stray.started_at and stray.location in listings_refused_said(world):
            start, seen = parse_iso(stray.started_at), parse_iso(stray.seen_until)
            first, last = spans.get(stray.location, (start, seen))
            spans[stray.location] = (min(first, start), max(last, seen))
    blind = 0.0
    for refusal in world.vertex.refusals:
        if refusal.operation == "list" and refusal.location in spans:
            first, last = spans[refusal.location]
            overlap = min(last, refusal.until or last) - max(first, refusal.since)
            blind += max(0.0, overlap.total_seconds())
    return blind


def stalled_region_seconds(world: World, record: Any) -> float:
    """How long `record`'s jobs ran in the location whose Vertex API stalled (`sim.faults`
    `region_stalled`, seed 11612): no call there answers until the faulty phase ends, so no pass
    can read, find or cancel a job there (docs/ARCHITECTURE.md, "No call waits for good": a pass
    sends no more calls to a location where one ran out its timeout and defers its requests). Each
    job counts from its start to its end or the stall's."""
    stall = world.permanent.stall
    if stall is None:
        return 0.0
    until = world.faults_stopped_at or world.clock.now()
    seconds = 0.0
    for job in world.vertex.jobs.values():
        if job.request_id == record.request_id and job.location == stall.location and job.start_time is not None:
            seconds += max(0.0, (min(job.end_time or until, until) - job.start_time).total_seconds())
    return seconds


def budgets_held(world: World) -> list[Violation]:
    from shared.fleet.spend import overshoot_bound_usd
    from sim.invariants import excused, violation

    out = []
    for record, spend, limit in _spends(world):
        if excused(world, record.request_id) or record.latest is None:
            continue
        review = OVERSHOOT_INTERVALS * world.settings.reconcile_interval_seconds + LAG.total_seconds()
        review += dead_pass_seconds(world, record) + blind_sweep_seconds(world, record)
        review += stalled_region_seconds(world, record)
        bound = max(overshoot_bound_usd(record.request, a, review, shipped_price) for a in record.attempts)
        if spend > limit + bound:
            out.append(
                violation(
                    "budgets_held",
                    f"{record.request_id} spent ${spend:.4f}, past its max_cost_usd ${limit:.2f} by more than "
                    f"${bound:.4f} ({review:.0f} s of its job)",
                )
            )
    return out


def vertex_bill(world: World, record: Any) -> tuple[float, float] | None:
    """What the simulated Vertex ran of `record`'s jobs, as docs/requests.md prices it: each job
    from its start to its end (to now while it runs) x the price of every replica of every pool of
    the CustomJob as created (the machine it ran on), Spot or on demand as it was scheduled. At
    least: its attempts' jobs with every wait for a machine after a preemption left out
    (`restart_waits`: reads may have seen them all); its strays (`strays_of`) count nothing there,
    since only a read vouches for their run and their end is never read. At most: every job of
    it, strays whole, no wait left out (reads may have seen none). None when a job is priced
    nowhere, or deleted (its end is unknown to anyone)."""
    from shared.requests.pricing import layout_hourly

    least = most = 0.0
    now = world.clock.now()
    attempts_jobs = [world.vertex.jobs.get(attempt.job or "") for attempt in record.attempts]
    followed = {job.name for job in attempts_jobs if job is not None}
    for job in [*attempts_jobs, *strays_of(world, record)]:
        if job is None or job.start_time is None:
            continue
        prices = layout_hourly({"custom_job": job.request}, job.location, shipped_price)
        if prices is None or job.deleted:
            return None
        end = job.end_time or now
        ran = (end - job.start_time).total_seconds()
        waited = sum((min(until or end, end) - began).total_seconds() for began, until in job.restart_waits)
        hourly = prices[0] if job.spot else prices[1]
        if job.name in followed:
            least += hourly * (ran - waited) / 3600
        most += hourly * ran / 3600
    return least, most


def strays_of(world: World, record: Any) -> list[Any]:
    """The jobs with `record`'s request's labels that none of its attempts names: its strays."""
    named = {attempt.job for attempt in record.attempts}
    return [job for job in world.vertex.jobs.values() if job.request_id == record.request_id and job.name not in named]


def strays_cancelled(world: World, record: Any) -> list[str]:
    """Names of `record`'s strays that the code cancelled (the stray sweep, or a delivery that found
    a second job): each was noted in the record before its cancel was sent (shared/deciding/strays.py)."""
    strays = {job.name for job in strays_of(world, record)}
    return sorted({name for _, name, caller in world.vertex.cancels if name in strays and caller != "operator"})


def billed_as_vertex_ran(world: World) -> list[Violation]:
    """`spotjobs report`'s bill (the same arithmetic as `spotjobs status`, over the records as the
    ledger shows them) of every finished request is what Vertex ran (`vertex_bill`), to the cent,
    and names as a floor every stray of it the code cancelled (Vertex billed it; its run is in the
    bill as far as a read saw it). A request whose record a person wrote or deleted is excused."""
    from sim.invariants import excused, records, violation
    from spotjobs.reporting.bill import bill

    finished = [r for r in records(world) if r.is_terminal]
    rows = bill([r.to_json() for r in finished], world.clock.now())["requests"]
    out = []
    for record, row in zip(finished, rows, strict=True):
        unbilled = [name for name in strays_cancelled(world, record) if name not in row["floor_of"]]
        if (
            unbilled
            and not excused(world, record.request_id)
            and record.request_id not in world.tampering.deleted_records
        ):
            out.append(
                violation(
                    "billed_as_vertex_ran",
                    f"{record.request_id}'s bill leaves out its stray job {', '.join(unbilled)}, which the code "
                    "cancelled and Vertex billed",
                )
            )
        truth = vertex_bill(world, record)
        if truth is None or row["spent_usd"] is None or truth[0] - 0.01 < row["spent_usd"] < truth[1] + 0.01:
            continue
        least, most = truth
        ran = (
            f"${most:.4f}"
            if most - least < 0.01
            else f"${least:.4f} to ${most:.4f} (its waits after a preemption, its strays)"
        )
        out.append(
            violation(
                "billed_as_vertex_ran",
                f"{record.request_id} is billed ${row['spent_usd']:.4f}; Vertex ran its jobs for {ran}",
            )
        )
    return out


QUIESCENCE: list[Callable[[World], list[Violation]]] = [budgets_held, billed_as_vertex_ran]
