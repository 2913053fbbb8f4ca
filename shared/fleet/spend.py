"""What a request has spent: each attempt's run time, from Vertex's own start and end of its
CustomJob (`startTime`, `endTime`, kept as `Attempt.started_at` / `ended_at`; a Spot job's restarts
inside one CustomJob are within that span, less its waits for a machine after a preemption as far
as reads at Vertex vouch for them, QUEUED or PENDING once it ran, when no VM runs and none is
billed: from the state's update time to the start of the last read that found it still so,
`Attempt.rewaited_seconds`; the rest of a wait stays in, a run no read saw may hide there), times
the hourly price of every replica of every
worker pool where the attempt ran (`shared.requests.pricing.layout_hourly`), on the attempt's
capacity: Spot at the Spot price, anything else at the on-demand price (FLEX_START's discount is
not in the table: an upper bound). The saving is against the same run time on demand.

A stray (a job with the request's labels the ledger did not record, cancelled by the sweep:
`RequestRecord.strays`) ran on the request's behalf, and Vertex bills it: the spend holds it from
its startTime to the start of the last read that found it not ended, at its own machines' price
on its own strategy. Its end is never read, so the spend is then a floor, naming the strays
(`Spend.floor_of`).

A machine type or region the price table does not price makes the spend unknown, said so with
the rows missing, never zero. Vertex's training management fee is not in it: the table marks it
unknown (`management_fee`), and so does every spend computed here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.clock import parse_iso
from shared.jobs import JobState
from shared.ledger.records import Attempt, RequestRecord, Stray
from shared.requests.attempts import SPOT
from shared.requests.capacity import request_on_machine
from shared.requests.pricing import Price, hourly, layout, layout_hourly, table


@dataclass(frozen=True)
class Spend:
    """A request's spend so far. `usd` and `on_demand_usd` are None when some attempt that ran
    has no price (`unpriced` names the machine types and regions)."""

    usd: float | None
    on_demand_usd: float | None
    run_seconds: float
    unpriced: tuple[str, ...] = ()
    management_fee: str = "unknown"
    floor_of: tuple[str, ...] = ()  # strays billed only to the last read that saw them: the spend is at least this

    @property
    def known(self) -> bool:
        return self.usd is not None

    @property
    def saving_usd(self) -> float | None:
        return None if self.usd is None or self.on_demand_usd is None else self.on_demand_usd - self.usd

    def to_json(self) -> dict[str, Any]:
        return {
            "spent_usd": None if self.usd is None else round(self.usd, 4),
            "on_demand_usd": None if self.on_demand_usd is None else round(self.on_demand_usd, 4),
            "saving_usd": None if self.saving_usd is None else round(self.saving_usd, 4),
            "run_seconds": round(self.run_seconds, 3),
            "unpriced": list(self.unpriced),
            "management_fee": self.management_fee,
            "floor_of": list(self.floor_of),
        }

    def shown(self) -> str:
        """For a person: "$12.34 (on demand $40.00, saved $27.66; Vertex's training fee not included)"."""
        fee = "Vertex's training fee not included (unknown)" if self.management_fee == "unknown" else ""
        if self.usd is None:
            return f"unknown: no price for {', '.join(self.unpriced)}"
        saving = self.saving_usd or 0.0
        floor = "at least " if self.floor_of else ""
        strays = f"; stray job {', '.join(self.floor_of)} billed to the last read that saw it" if self.floor_of else ""
        return (
            f"{floor}${self.usd:.2f} (on demand ${self.on_demand_usd or 0.0:.2f}, saved ${saving:.2f}; {fee}{strays})"
        )


def run_seconds(attempt: Attempt, now: datetime) -> float:
    """Seconds Vertex ran the attempt's job: from its startTime to its endTime, or to `now` while
    it runs; 0 before it started. Less its waits after a run as far as reads vouch for them (a Spot
    restart waiting for a machine: `Attempt.rewaited_seconds`, and the one it waits in now)."""
    if not attempt.started_at:
        return 0.0
    end = attempt.ended_at
    if end is None and attempt.state in JobState.TERMINAL:
        end = attempt.state_changed_at  # ended, and no end time read: Vertex's last update
    until = parse_iso(end) if end else now
    seconds = (until - parse_iso(attempt.started_at)).total_seconds() - attempt.rewaited_seconds
    if attempt.rewait_since and attempt.rewait_seen_until:  # the wait it is in, as far as seen
        seen = min(until, parse_iso(attempt.rewait_seen_until)) - parse_iso(attempt.rewait_since)
        seconds -= max(0.0, seen.total_seconds())
    return max(0.0, seconds)


def attempt_hourly(request: Mapping[str, Any], attempt: Attempt, price: Price = hourly) -> tuple[float, float] | None:
    """(what an hour of the attempt costs on its capacity, the same hour on demand); None unpriced."""
    prices = layout_hourly(request, attempt.location, price)
    if prices is None:
        return None
    spot, on_demand = prices
    return (spot if attempt.strategy == SPOT else on_demand), on_demand


def request_spend(record: RequestRecord, now: datetime, price: Price = hourly) -> Spend:
    """The spend of every attempt of the request that ran, and of its strays, at `now`."""
    return attempts_spend(record.request, record.attempts, now, price, record.strays)


def stray_seconds(stray: Stray) -> float:
    """Seconds a read vouches the stray ran: from its startTime to the start of that read."""
    if not stray.started_at:
        return 0.0
    return max(0.0, (parse_iso(stray.seen_until) - parse_iso(stray.started_at)).total_seconds())


def attempts_spend(
    request: Mapping[str, Any],
    attempts: Sequence[Attempt],
    now: datetime,
    price: Price = hourly,
    strays: Sequence[Stray] = (),
) -> Spend:
    """The spend of `attempts` of `request` and of its `strays` at `now` (`request_spend` of a record's)."""
    usd = on_demand = seconds = 0.0
    unpriced: list[str] = []
    by_n = {attempt.n: attempt for attempt in attempts}
    for stray in strays:
        ran = stray_seconds(stray)
        if ran <= 0:
            continue
        seconds += ran
        created, strategy = _stray_layout(request, stray, by_n.get(stray.attempt or 0))
        rates = layout_hourly(created, stray.location, price)
        if rates is None:
            missing = [m or "?" for m, _ in layout(created) if price(m, stray.location) is None]
            unpriced.extend(f"{m} in {stray.location}" for m in missing or ["?"])
            continue
        usd += (rates[0] if strategy == SPOT else rates[1]) * ran / 3600
        on_demand += rates[1] * ran / 3600
    for attempt in attempts:
        ran = run_seconds(attempt, now)
        if ran <= 0:
            continue
        seconds += ran
        on_it = request_on_machine(request, attempt.machine)  # its capacity alternative's, if any
        rates = attempt_hourly(on_it, attempt, price)
        if rates is None:
            missing = [m or "?" for m, _ in layout(on_it) if price(m, attempt.location) is None]
            unpriced.extend(f"{m} in {attempt.location}" for m in missing or ["?"])
            continue
        usd += rates[0] * ran / 3600
        on_demand += rates[1] * ran / 3600
    known = not unpriced
    return Spend(
        usd if known else None,
        on_demand if known else None,
        seconds,
        tuple(dict.fromkeys(unpriced)),
        management_fee_status(),
        tuple(stray.job for stray in strays),
    )


def _stray_layout(request: Mapping[str, Any], stray: Stray, attempt: Attempt | None) -> tuple[Mapping[str, Any], str]:
    """(a request whose job has the stray's pools, its strategy): as read, or, when the read left
    them out, its attempt's job's (the create it repeats: on the attempt's machine and capacity)."""
    if stray.pools:
        return {"custom_job": {"jobSpec": {"workerPoolSpecs": stray.pools}}}, stray.strategy
    if attempt is None:
        return {}, ""  # labelled for no attempt, machines unread: unpriced
    return request_on_machine(request, attempt.machine), attempt.strategy


def management_fee_status() -> str:
    """ "unknown" unless the price table says Google published Vertex's training fee."""
    return str((table().get("management_fee") or {}).get("status") or "unknown")


def max_cost(request: Mapping[str, Any]) -> float | None:
    """The request's `max_cost_usd` (the canonical envelope keeps it only when set)."""
    value = request.get("max_cost_usd")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def overshoot_bound_usd(
    request: Mapping[str, Any], attempt: Attempt, review_seconds: float, price: Price = hourly
) -> float:
    """How far the spend can pass the budget before the stop lands: one review interval (the
    reconcile interval: the pass that sees the spend reached may come that late) of the attempt
    running at its hourly price. The cancel's own seconds at Vertex come on top."""
    rates = attempt_hourly(request, attempt, price)
    return 0.0 if rates is None else rates[0] * review_seconds / 3600


def budget_left(
    request: Mapping[str, Any], attempts: Sequence[Attempt], now: datetime, price: Price = hourly
) -> float | None:
    """Dollars of the request's `max_cost_usd` not spent yet; None without a budget or with a spend
    unknown (validation refuses a budget on a machine type the table does not price)."""
    limit = max_cost(request)
    spent = attempts_spend(request, attempts, now, price).usd if limit is not None else None
    return None if limit is None or spent is None else limit - spent


def affordable(
    prices: Mapping[str, tuple[float, float]], left: float | None, work_hours: float | None, *, on_demand: bool
) -> dict[str, tuple[float, float]]:
    """The locations of `prices` ((Spot, on-demand) per hour) where the work left fits in what is
    left of the budget, on the attempt's capacity. All of them without a budget or a known amount
    of work, and when none fits (the budget watch stops the request at its budget wherever it runs)."""
    if left is None or work_hours is None:
        return dict(prices)
    fits = {loc: p for loc, p in prices.items() if p[1 if on_demand else 0] * work_hours <= left}
    return fits or dict(prices)
