"""The deadline simulator: a job replayed through a Spot availability trace on a simulated clock.

Model (Wu et al., NSDI '24, section 3): a job of C seconds of compute, a deadline D seconds after
its start, one availability point per tick of g seconds (1: a Spot VM could be had). At each tick
boundary the job's placement is settled, then a chooser is asked what to do:

- on Spot and the tick is unavailable: preempted, the job waits for Spot;
- waiting for Spot and the tick is available: the pending Spot attempt starts (as on Vertex, a
  queued Spot job takes capacity when there is some);
- the chooser's action: switch to on-demand, back to Spot (waiting, or Spot at once when available)
  or stay.

Every start of an instance costs the changeover d (launch, setup, progress lost since the last
checkpoint): its first d seconds do no work. Spot costs 1 per second, on-demand k; the last
instance is billed until the work is done. A chooser says how long its decision holds
(`DeadlineDecision.holds_seconds`), so the clock jumps to the next tick where something can change: a
change of availability, the decision's end, the deadline. `every_tick=True` asks at every tick
instead (the tests check both give the same outcome).

`omniscient_costs` is the offline optimum: a dynamic programme over ticks that knows the trace.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from shared.deciding.deadline import Action, Placement

HOUR = 3600.0


@dataclass(frozen=True)
class Trace:
    name: str
    gap_seconds: int
    available: tuple[bool, ...]
    next_change: tuple[int, ...]  # per tick: the first later tick whose availability differs

    @classmethod
    def of(cls, name: str, gap_seconds: int, data: Iterable[int]) -> Trace:
        available = tuple(bool(x) for x in data)
        following, nxt = [0] * len(available), len(available)
        for i in range(len(available) - 1, -1, -1):
            following[i] = nxt
            if i and available[i - 1] != available[i]:
                nxt = i
        return cls(name, gap_seconds, available, tuple(following))


def load_traces(folder: Path) -> list[Trace]:
    """Every trace in the shared format under `folder`, searched recursively, by path."""
    traces = []
    for path in sorted(folder.rglob("*.json")):
        body = json.loads(path.read_text())
        if not isinstance(body, dict) or "data" not in body or "gap_seconds" not in body.get("metadata", {}):
            continue
        traces.append(Trace.of(str(path.relative_to(folder)), int(body["metadata"]["gap_seconds"]), body["data"]))
    return traces


@dataclass(frozen=True)
class Job:
    work_seconds: float
    deadline_seconds: float  # after the start; a whole number of ticks
    changeover_seconds: float
    price_ratio: float


@dataclass
class Run:
    """What the simulator tells a chooser: the clock, the job's progress and placement."""

    job: Job
    trace: Trace
    start: int  # tick of the trace where the job starts
    now: float = 0.0
    done: float = 0.0  # seconds of work done
    placement: Placement = Placement.WAITING_FOR_SPOT
    placed_at: float = 0.0
    changeover_left: float = 0.0
    preemptions: int = 0

    def available(self) -> bool:
        return self.trace.available[self.start + int(round(self.now / self.trace.gap_seconds))]


@dataclass(frozen=True)
class Outcome:
    cost: float  # normalised by the cost of on-demand only, k (C + d)
    spot_work_hours: float
    on_demand_work_hours: float
    missed: bool


Chooser = Callable[[Run], tuple[Action, "float | None"]]


def simulate(job: Job, trace: Trace, start: int, choose: Chooser, every_tick: bool = False) -> Outcome:
    g = trace.gap_seconds
    run = Run(job, trace, start)
    spend = {Placement.ON_SPOT: 0.0, Placement.ON_DEMAND: 0.0}
    work = {Placement.ON_SPOT: 0.0, Placement.ON_DEMAND: 0.0}
    deadline_tick = int(round(job.deadline_seconds / g))
    tick = 0
    while run.done < job.work_seconds:
        if tick >= deadline_tick:
            # Missed: the job still has to finish, on on-demand.
            work[Placement.ON_DEMAND] += job.work_seconds - run.done
            spend[Placement.ON_DEMAND] += job.work_seconds - run.done + job.changeover_seconds
            return _outcome(job, spend, work, missed=True)
        run.now = tick * g
        available = trace.available[start + tick]
        if run.placement is Placement.ON_SPOT and not available:
            run.placement, run.placed_at, run.preemptions = Placement.WAITING_FOR_SPOT, run.now, run.preemptions + 1
        if run.placement is Placement.WAITING_FOR_SPOT and available:
            _place(run, Placement.ON_SPOT)
        action, holds = choose(run)
        if action is Action.SWITCH_TO_ON_DEMAND:
            _place(run, Placement.ON_DEMAND)
        elif action is Action.BACK_TO_SPOT:
            if available:
                _place(run, Placement.ON_SPOT)
            else:
                run.placement, run.placed_at = Placement.WAITING_FOR_SPOT, run.now
        following = tick + 1
        # A decision's `holds_seconds` is about the placement it stays in: after a move, ask again.
        if not every_tick and action is Action.STAY:
            following = min(trace.next_change[start + tick] - start, deadline_tick)
            if holds is not None:
                following = min(following, tick + max(1, math.floor(holds / g - 1e-6)))
            following = max(following, tick + 1)
        _advance(run, (following - tick) * g, spend, work)
        tick = following
    return _outcome(job, spend, work, missed=False)


def _place(run: Run, placement: Placement) -> None:
    run.placement, run.placed_at, run.changeover_left = placement, run.now, run.job.changeover_seconds


def _advance(run: Run, seconds: float, spend: dict[Placement, float], work: dict[Placement, float]) -> None:
    if run.placement is Placement.WAITING_FOR_SPOT:
        return
    overhead = min(seconds, run.changeover_left)
    progress = min(seconds - overhead, run.job.work_seconds - run.done)
    run.changeover_left -= overhead
    run.done += progress
    spend[run.placement] += overhead + progress
    work[run.placement] += progress


def _outcome(job: Job, spend: dict[Placement, float], work: dict[Placement, float], missed: bool) -> Outcome:
    cost = spend[Placement.ON_SPOT] + job.price_ratio * spend[Placement.ON_DEMAND]
    return Outcome(
        cost=cost / (job.price_ratio * (job.work_seconds + job.changeover_seconds)),
        spot_work_hours=work[Placement.ON_SPOT] / HOUR,
        on_demand_work_hours=work[Placement.ON_DEMAND] / HOUR,
        missed=missed,
    )


def omniscient_costs(
    trace: Trace,
    starts: list[int],
    work_seconds: int,
    changeover_seconds: int,
    price_ratio: float,
    deadline_ticks: list[int],
) -> dict[int, tuple[list[float], list[float]]]:
    """The least cost of the work done within each deadline (in ticks), for every start, knowing
    the whole trace, normalised like `Outcome.cost`; with the Spot work hours of that optimum.

    A dynamic programme over ticks: the state at a tick boundary is the placement (waiting, Spot,
    on-demand), the changeover left on the instance and the work done, in units of gcd(g, d) (all
    work done in a tick is a multiple of it); its value is the least cost to get there. Each tick
    the job may wait, start a new instance (changeover d) or keep the one it has; Spot only where
    the trace is available. Vectorised over the starts with numpy; each tick only the work done
    that is reachable by then and can still finish by the last deadline is computed.
    """
    import numpy as np

    g, d, k = trace.gap_seconds, changeover_seconds, price_ratio
    unit = math.gcd(g, d) if d else g
    total = work_seconds // unit
    if total * unit != work_seconds:
        raise ValueError(f"work {work_seconds} s is not a multiple of gcd(tick, changeover) = {unit} s")
    per_tick = g // unit
    levels = sorted({max(0, d - j * g) for j in range(1, d // g + 2)})
    last = max(deadline_ticks)
    available = np.array(trace.available, dtype=bool)
    origin = np.array(starts)
    rows = np.arange(len(starts))
    shape = (len(starts), total + 1)
    keys = [("wait", 0)] + [(mode, o) for mode in ("spot", "od") for o in levels]
    cost = {key: np.full(shape, np.inf) for key in keys}
    spot = {key: np.zeros(shape) for key in keys}
    cost[("wait", 0)][:, 0] = 0.0
    results: dict[int, tuple[list[float], list[float]]] = {}

    def best_of(candidates: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        best_cost, best_spot = candidates[0]
        for c, s in candidates[1:]:
            better = c < best_cost
            best_cost, best_spot = np.where(better, c, best_cost), np.where(better, s, best_spot)
        return best_cost, best_spot

    def one_tick(src_cost, src_spot, overhead: int, price: float, on_spot: bool, lo: int, hi: int):
        """An instance run for one tick: the work done from [lo, hi] of the next boundary."""
        step = max(0, g - overhead) // unit
        dst_cost, dst_spot = np.full(shape, np.inf), np.zeros(shape)
        if step == 0:
            dst_cost[:, lo : hi + 1] = src_cost[:, lo : hi + 1] + price * g
            dst_spot[:, lo : hi + 1] = src_spot[:, lo : hi + 1]
            return dst_cost, dst_spot
        a, b = max(lo, step), min(hi, total - 1)
        if a <= b:
            dst_cost[:, a : b + 1] = src_cost[:, a - step : b - step + 1] + price * g
            dst_spot[:, a : b + 1] = src_spot[:, a - step : b - step + 1] + (step if on_spot else 0)
        if hi == total:
            # Work that finishes in this tick: billed until done.
            first = max(0, total - step)
            left = total - np.arange(first, total)
            finishing = src_cost[:, first:total] + price * (overhead + left * unit)
            at = np.argmin(finishing, axis=1)
            dst_cost[:, total] = finishing[rows, at]
            dst_spot[:, total] = src_spot[:, first:total][rows, at] + (left[at] if on_spot else 0)
        return dst_cost, dst_spot

    for tick in range(last):
        lo = max(0, total - (last - tick - 1) * per_tick)
        hi = min(total, (tick + 1) * per_tick)
        fresh = best_of([(cost[key], spot[key]) for key in keys])
        up = available[origin + tick][:, None]
        new: dict[tuple[str, int], list[tuple[np.ndarray, np.ndarray]]] = {("wait", 0): [fresh]}
        for mode, price in (("spot", 1.0), ("od", k)):
            sources = [(fresh, d)] + [((cost[(mode, o)], spot[(mode, o)]), o) for o in levels]
            for (src_cost, src_spot), overhead in sources:
                c, s = one_tick(src_cost, src_spot, overhead, price, mode == "spot", lo, hi)
                if mode == "spot":
                    c = np.where(up, c, np.inf)
                new.setdefault((mode, max(0, overhead - g)), []).append((c, s))
        for key in keys:
            if key in new:
                cost[key], spot[key] = best_of(new[key])
            else:
                cost[key], spot[key] = np.full(shape, np.inf), np.zeros(shape)
        if tick + 1 in deadline_ticks:
            final_cost, final_spot = best_of([(cost[key], spot[key]) for key in keys])
            norm = k * (work_seconds + d)
            results[tick + 1] = ((final_cost[:, total] / norm).tolist(), (final_spot[:, total] * unit / HOUR).tolist())
    return results
