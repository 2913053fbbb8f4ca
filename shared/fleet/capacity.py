"""Where and on what a new attempt runs when its request lists `capacity` alternatives
(shared/requests/capacity.py): a (location, machine, strategy) chosen with the placement's cost
model, on top of `Placer.place` (shared/fleet/placing.py), which chooses the location of each
(machine, strategy) among the request's allowed locations.

- **Which options.** Every strategy of every alternative, in the request's order, that the
  deployment lets this attempt run on (`refuses`: the policy's allowlist and its Spot attempts
  first); FLEX_START with a deadline only when its whole wait (`maxWaitDuration`), the work left and
  the request's changeover end before the deadline, as nothing is known of how long it waits.
- **How priced.** Each option is placed on its machine (the job rewritten: `request_on_machine`):
  Spot by the model with its Spot and on-demand prices (a deadline's switch to on-demand runs on
  the same machine, which lists STANDARD: the policy requires it), STANDARD at the on-demand price,
  FLEX_START at the on-demand price too: the price table has no Dynamic Workload Scheduler price
  (Google documents flex-start as discounted, so this is an upper bound, as `shared.fleet.spend`
  counts it), and its wait is not priced. When the model weighed every option, the least expected
  cost to finish wins; when it weighed not all of them (one allowed location, nothing observed,
  no prices), the lowest hourly price where each was placed. Ties go to the request's order.
- **After no capacity.** An attempt that follows a stockout (the re-queue leaves its machine
  open), or a move of a Spot job waiting past its changeover, is not placed on the (machine,
  strategy, location) that had none, nor on one an earlier attempt was moved away from: the next
  best option, as a stockout moves the next attempt to the next location. When that leaves no
  option, only the latest is left out (stockouts are transient). A re-queue after a preemption and a deadline switch keep the machine the
  attempt ran on (the switch goes STANDARD); their claim places only the location. A move's
  attempt keeps all three the move chose (`placed_by_move`).

The attempt records its machine and strategy and why (`Attempt.placed`), which `spotjobs status`
shows; submit creates the CustomJob on that machine (`request_on_machine`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from shared.clock import parse_iso
from shared.fleet.placing import LocationChoice, Placer, place_claimed, placed_by_move, work_hours
from shared.jobs import FLEX_START, max_wait_seconds
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome
from shared.requests.attempts import SPOT
from shared.requests.capacity import alternatives, request_on_machine
from shared.requests.policy import check_strategy
from shared.requests.pricing import Price, hourly, layout_hourly
from shared.settings import Settings

# Why attempt n may not run on a strategy (the policy's answer); None when it may.
Refuses = Callable[[str], object | None]
# The (machine, strategy, location) an attempt found no capacity on.
Tried = tuple[str | None, str, str]


def refusing(settings: Settings, spot_attempts_before: int) -> Refuses:
    """The deployment's answer for an attempt after `spot_attempts_before` Spot attempts."""

    def refuses(strategy: str) -> object | None:
        return check_strategy(
            strategy,
            spot_attempts_before,
            allowed_fallbacks=settings.allowed_fallback_strategies,
            min_spot_attempts=settings.min_spot_attempts,
        )

    return refuses


@dataclass(frozen=True)
class CapacityChoice:
    location: str
    machine: str
    strategy: str
    reason: str


@dataclass(frozen=True)
class _Option:
    order: int  # the request's: ties go to the first listed
    machine: str
    strategy: str
    placed: LocationChoice
    per_hour: float | None  # where placed, on its strategy; None unpriced


def choose_capacity(
    placer: Placer,
    request: Mapping[str, Any],
    attempt: Attempt,
    earlier: Sequence[Attempt],
    refuses: Refuses,
    now: datetime,
    *,
    without: Sequence[Tried] = (),
    price: Price = hourly,
) -> CapacityChoice | None:
    """The option `attempt` runs on (module docstring), none of `without` (the options found
    without capacity, the latest last) unless that leaves none; None when the deployment allows
    none now."""
    options = _options(placer, request, attempt, earlier, refuses, now, without, price)
    if not options and len(without) > 1:
        without = without[-1:]
        options = _options(placer, request, attempt, earlier, refuses, now, without, price)
    if not options:
        return None
    weighed = all(o.placed.cost is not None for o in options)
    if weighed:
        best = min(options, key=lambda o: (o.placed.cost, o.order))
        why = f"cheapest expected cost to finish of {len(options)} options"
    else:
        best = min(options, key=lambda o: (math.inf if o.per_hour is None else o.per_hour, o.order))
        shown = "unpriced" if best.per_hour is None else f"${best.per_hour:.2f} an hour"
        why = f"lowest hourly price of {len(options)} options ({shown}; the model weighed not all)"
    if len(options) == 1:
        why = "the only option allowed now"
    skipped = "".join(f"; not {m} {s} in {loc}: no capacity there before" for m, s, loc in without)
    reason = f"{best.machine} {best.strategy}: {why}{skipped}; in {best.placed.location}: {best.placed.reason}"
    return CapacityChoice(best.placed.location, best.machine, best.strategy, reason)


def _options(
    placer: Placer,
    request: Mapping[str, Any],
    attempt: Attempt,
    earlier: Sequence[Attempt],
    refuses: Refuses,
    now: datetime,
    without: Sequence[Tried],
    price: Price,
) -> list[_Option]:
    """Every option the deployment allows, each placed in its best location."""
    options: list[_Option] = []
    allowed = [str(loc) for loc in request.get("locations") or []] or [attempt.location]
    listed = [(a.machine, strategy) for a in alternatives(request) for strategy in a.strategies]
    for order, (machine, strategy) in enumerate(listed):
        on_it = request_on_machine(request, machine)
        if refuses(strategy) is not None or (strategy == FLEX_START and not _wait_fits(on_it, earlier, now)):
            continue
        here = [loc for loc in allowed if (machine, strategy, loc) not in without]
        if not here:
            continue
        planned = attempt.location if attempt.location in here else here[0]
        trial = replace(attempt, location=planned, strategy=strategy, machine=machine)
        placed = placer.place({**on_it, "locations": here}, trial, earlier)
        prices = layout_hourly(on_it, placed.location, price)
        per_hour = None if prices is None else prices[0] if strategy == SPOT else prices[1]
        options.append(_Option(order, machine, strategy, placed, per_hour))
    return options


def without_capacity(earlier: Sequence[Attempt], latest: Attempt) -> list[Tried]:
    """The options the attempts of a request found no capacity on: those moved away from, and
    `latest`'s (a stockout's, or the waiting job a move leaves), last."""
    moved = [_tried(a) for a in earlier if a.outcome == AttemptOutcome.MOVED and a is not latest]
    return [t for t in moved if t != _tried(latest)] + [_tried(latest)]


def _tried(attempt: Attempt) -> Tried:
    return (attempt.machine, attempt.strategy, attempt.location)


def _wait_fits(request: Mapping[str, Any], earlier: Sequence[Attempt], now: datetime) -> bool:
    """Whether a FLEX_START attempt's whole wait, the work left and the changeover end before the
    request's deadline (always, without one); not when the work left is unknown."""
    deadline = request.get("deadline")
    if not deadline:
        return True
    work = work_hours(request, earlier)
    if work is None:
        return False
    changeover = float(request.get("changeover_seconds") or 0.0)
    needed = max_wait_seconds(request.get("custom_job") or {}) + work * 3600 + changeover
    return needed <= (parse_iso(deadline) - now).total_seconds()


# Why a claim found its machine decided: by how the attempt before it ended (the choice itself
# is in that decision's log line: a move's `moved`, a re-queue's `requeue`).
_DECIDED_BY = {
    AttemptOutcome.MOVED: "decided when the attempt before was moved (it waited for Spot past its changeover)",
    AttemptOutcome.SWITCHED_TO_ON_DEMAND: "the attempt before's machine, switched to on-demand for the deadline",
    "": "the machine the attempt before ran on (a re-queue after a preemption)",
}


def place_attempt(placer: Placer, record: RequestRecord, attempt: Attempt, refuses: Refuses, now: datetime) -> None:
    """Set where, on what and why the attempt a claim just created runs: `place_claimed` for a
    request without alternatives; with them, its machine and strategy too (module docstring), and
    the deadline's outlook and changeover bound on that machine."""
    request = record.request
    if not request.get("capacity"):
        place_claimed(placer, record, attempt)
        return
    earlier = [a for a in record.attempts if a.n < attempt.n]
    if attempt.machine is None:  # attempt 1, or after a stockout: choose again
        without = without_capacity(earlier, earlier[-1]) if earlier else []
        choice = choose_capacity(placer, request, attempt, earlier, refuses, now, without=without)
        if choice is None:  # the create's policy check refuses it, naming why
            attempt.machine = alternatives(request)[0].machine
            attempt.placed = "no alternative the deployment allows for this attempt"
        else:
            attempt.location, attempt.machine, attempt.strategy = choice.location, choice.machine, choice.strategy
            attempt.placed = choice.reason
    else:
        on_it = request_on_machine(request, attempt.machine)
        placed = placed_by_move(attempt, earlier) or placer.place(on_it, attempt, earlier)
        attempt.location = placed.location
        why = _DECIDED_BY.get(str(earlier[-1].outcome), _DECIDED_BY[""]) if earlier else _DECIDED_BY[""]
        attempt.placed = f"{attempt.machine} {attempt.strategy}, {why}; {placed.reason}"
    on_it = request_on_machine(request, attempt.machine)
    outlook = placer.spot_outlook(on_it, attempt.location)
    attempt.spot_outlook = None if outlook is None else outlook.to_json()
    attempt.fleet_changeover_seconds = placer.changeover_bound(on_it, attempt.location)
