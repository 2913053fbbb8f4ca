"""Deadline policies on Spot availability traces: the cost of finishing in time.

Replays traces in the shared format (`{"metadata": {"gap_seconds": 600}, "data": [1, 0, ...]}`,
every `*.json` under `--traces`, recursively) through `bench.deadline_sim` and reports, per
policy, the mean and p75 of the cost normalised by on-demand only, the Spot and on-demand hours of
work and the deadline misses. The policies under test are the production function,
`shared.deciding.deadline.decide_deadline`, in its three rules, and today's fixed fallback, `shared.requests.attempts.plan_attempt`;
nothing here re-implements them. On-demand only and the Omniscient optimum (a dynamic programme
that knows the trace) bound them.

First the paper's Table 3 (Wu et al., NSDI '24: 48 h of work, d = 0.2 h, job fraction C/R = 0.8,
300 random starts per trace), then the sweep: job fractions 0.6 to 0.95, d = 0.05, 0.2, 0.5 h.
The default traces are the 2-week AWS traces in the `shared/spot-traces` folder beside the
repository's own folder; no public trace of GCP GPU Spot capacity exists, these are the stand-in.

    python -m bench.bench_deadline [--traces DIR] [--job-fraction F] [--changeover-hours D]
                                   [--starts 300] [--json]
                                   [--model event [--checkpoint-seconds I] [--changeover-tail]
                                                  [--fleet-changeovers N]]

`--model event` replays each request event by event through the production input builder
(`bench.deadline_events`): commits every I seconds, drawn changeovers (median D, 8 min unless
given), production's d (with the fleet's bound over N earlier changeovers, snapshotted at each
claim; 0: a lone request's own), asks at kit lines and reconcile passes. Its sweep: I in 600,
1800, 3600, 7200 s x job fractions 0.6, 0.8, 0.9; no Omniscient or fixed fallback there.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from bench.deadline_events import CHANGEOVER_MEDIAN_SECONDS, EventJob, simulate_events
from bench.deadline_sim import HOUR, Chooser, Job, Outcome, Run, Trace, load_traces, omniscient_costs, simulate
from bench.report import Figure, emit
from devstack.vertex.logs import MAX_SPOT_RESTARTS
from shared.clock import EPOCH
from shared.deciding.deadline import Action, Placement, Rule, Situation, Work, decide_deadline
from shared.requests.attempts import SPOT, plan_attempt
from spotjobs.reporting.prices import Prices

BENCH = "deadline"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACES = REPO_ROOT.parent / "shared" / "spot-traces"
WORK_HOURS = 48.0
FRACTIONS = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
CHANGEOVER_HOURS = (0.05, 0.2, 0.5)
TABLE3 = {
    "fraction": 0.8,
    "changeover_hours": 0.2,
    "spot_hours": {"greedy": 17.2, "uniform_progress": 22.9, "omniscient": 27.4},
}
SEED = 25
# Today's fallback: STANDARD after this many Spot attempts (the least `SPOTJOBS_MIN_SPOT_ATTEMPTS` allows).
FIXED_K = 1
POLICIES = ("on_demand", "fixed_k", "greedy", "uniform_progress", "spotjobs", "omniscient")
# The event model: the rules under production's inputs (None: on-demand only), its sweep.
EVENT_RULES: dict[str, Rule | None] = {
    "on_demand": None,
    "greedy": Rule.GREEDY,
    "uniform_progress": Rule.UNIFORM_PROGRESS,
    "spotjobs": Rule.SPOTJOBS,
}
EVENT_FRACTIONS = (0.6, 0.8, 0.9)
CHECKPOINT_SECONDS = (600, 1800, 3600, 7200)
# The fleet's on-demand changeovers in the location before a request (`--fleet-changeovers`): a
# busy fleet's week of them, the window the claim reads (docs/deadlines.md also has 200 and 0).
FLEET_CHANGEOVERS = 1000


def deadline_chooser(rule: Rule) -> Chooser:
    """`shared.deciding.deadline.decide_deadline` with the simulator's clock; the review interval is one tick."""

    def choose(run: Run) -> tuple[Action, float | None]:
        job = run.job
        decision = decide_deadline(
            Situation(
                now=EPOCH + timedelta(seconds=run.now),
                deadline=EPOCH + timedelta(seconds=job.deadline_seconds),
                started=EPOCH,
                work=Work.in_seconds(int(job.work_seconds), int(round(run.done))),
                placement=run.placement,
                placed_at=EPOCH + timedelta(seconds=run.placed_at),
                changeover_seconds=job.changeover_seconds,
                review_seconds=run.trace.gap_seconds,
                # The traces were taken by trying to launch a Spot VM every tick: capacity is known.
                spot_available=run.available(),
            ),
            rule,
        )
        return decision.action, decision.holds_seconds

    return choose


def fixed_k_chooser(after_spot_attempts: int) -> Chooser:
    """Today's behaviour: a Spot attempt restarts after each preemption until Vertex's restarts run
    out, then `plan_attempt` plans the next attempt (STANDARD once the Spot attempts are spent)."""
    request = {"fallback": {"after_spot_attempts": after_spot_attempts, "strategy": "STANDARD"}}
    attempt = {"n": 1, "preemptions_before": 0, "strategy": SPOT}

    def choose(run: Run) -> tuple[Action, float | None]:
        ended = run.preemptions - attempt["preemptions_before"] > MAX_SPOT_RESTARTS
        if attempt["strategy"] == SPOT and ended:
            attempt.update(n=attempt["n"] + 1, preemptions_before=run.preemptions)
            attempt["strategy"] = plan_attempt(request, attempt["n"], None, after_stockout=True)[1]
        if attempt["strategy"] != SPOT and run.placement is not Placement.ON_DEMAND:
            return Action.SWITCH_TO_ON_DEMAND, None
        return Action.STAY, None

    return choose


def on_demand_chooser(run: Run) -> tuple[Action, float | None]:
    return (Action.STAY if run.placement is Placement.ON_DEMAND else Action.SWITCH_TO_ON_DEMAND), None


# A fresh chooser per run (fixed_k counts the run's attempts).
CHOOSERS: dict[str, Callable[[], Chooser]] = {
    "on_demand": lambda: on_demand_chooser,
    "fixed_k": lambda: fixed_k_chooser(FIXED_K),
    "greedy": lambda: deadline_chooser(Rule.GREEDY),
    "uniform_progress": lambda: deadline_chooser(Rule.UNIFORM_PROGRESS),
    "spotjobs": lambda: deadline_chooser(Rule.SPOTJOBS),
}


def random_starts(trace: Trace, count: int, longest_ticks: int) -> list[int]:
    rng = random.Random(f"{SEED}:{trace.name}")
    return [rng.randrange(0, len(trace.available) - longest_ticks) for _ in range(count)]


def deadline_ticks(fraction: float, gap_seconds: int) -> int:
    """The deadline C / fraction, down to a whole tick (so every policy sees the same one)."""
    return int(WORK_HOURS * HOUR / fraction / gap_seconds + 1e-9)


def run_cells(
    traces: list[Trace], fractions: list[float], changeovers: list[float], starts: int, price_ratio: float
) -> list[dict]:
    gap = traces[0].gap_seconds
    origins = start_ticks(traces, fractions, starts)
    cells = []
    for hours in changeovers:
        began = time.perf_counter(), time.process_time()
        d = int(round(hours * HOUR))
        ticks = {f: deadline_ticks(f, gap) for f in fractions}
        best = {
            t.name: omniscient_costs(
                t, origins[t.name], int(WORK_HOURS * HOUR), d, price_ratio, sorted(set(ticks.values()))
            )
            for t in traces
        }
        for fraction in fractions:
            job = Job(WORK_HOURS * HOUR, ticks[fraction] * gap, d, price_ratio)
            outcomes: dict[str, list[Outcome]] = {name: [] for name in POLICIES}
            for trace in traces:
                optimum_costs, optimum_spot = best[trace.name][ticks[fraction]]
                for i, start in enumerate(origins[trace.name]):
                    for name, make in CHOOSERS.items():
                        outcomes[name].append(simulate(job, trace, start, make()))
                    spot_hours = optimum_spot[i]
                    outcomes["omniscient"].append(Outcome(optimum_costs[i], spot_hours, WORK_HOURS - spot_hours, False))
            cells.append(
                {
                    "job_fraction": fraction,
                    "changeover_hours": hours,
                    "traces": len(traces),
                    "starts": starts,
                    "policies": {name: summary(outcomes[name]) for name in POLICIES},
                    **elapsed(began),
                }
            )
            began = time.perf_counter(), time.process_time()
    return cells


def elapsed(began: tuple[float, float]) -> dict[str, float]:
    """Wall and CPU seconds since `began`: on a shared machine the wall time is mostly the others'."""
    return {
        "seconds": round(time.perf_counter() - began[0], 1),
        "cpu_seconds": round(time.process_time() - began[1], 1),
    }


def start_ticks(traces: list[Trace], fractions: list[float], starts: int) -> dict[str, list[int]]:
    """The random starts per trace, fitting the longest deadline of the sweep whatever cells are
    asked: one cell run alone gives the figures it has in the sweep."""
    gap = traces[0].gap_seconds
    longest = max(deadline_ticks(f, gap) for f in (*FRACTIONS, *fractions))
    return {t.name: random_starts(t, starts, longest) for t in traces}


def run_event_cells(
    traces: list[Trace],
    fractions: list[float],
    intervals: list[int],
    changeover_hours: float,
    tail: bool,
    starts: int,
    price_ratio: float,
    policies: list[str] | None = None,
    fleet_changeovers: int = FLEET_CHANGEOVERS,
) -> list[dict]:
    """The event model (`bench.deadline_events`): each request replayed through production's inputs,
    for `policies` (names of `EVENT_RULES`; default all)."""
    origins = start_ticks(traces, fractions, starts)
    gap = traces[0].gap_seconds
    cells = []
    for interval in intervals:
        for fraction in fractions:
            began = time.perf_counter(), time.process_time()
            job = EventJob(
                int(WORK_HOURS * HOUR),
                deadline_ticks(fraction, gap) * gap,
                interval,
                price_ratio,
                changeover_hours * HOUR,
                tail,
                fleet_changeovers,
            )
            rules = {name: rule for name, rule in EVENT_RULES.items() if policies is None or name in policies}
            outcomes: dict[str, list[Outcome]] = {name: [] for name in rules}
            for trace in traces:  # each seed's policies in turn: its fleet is drawn once
                for start in origins[trace.name]:
                    for name, rule in rules.items():
                        outcomes[name].append(simulate_events(job, trace, start, rule, f"{SEED}:{trace.name}:{start}"))
            cells.append(
                {
                    "job_fraction": fraction,
                    "changeover_hours": round(changeover_hours, 4),
                    "traces": len(traces),
                    "starts": starts,
                    "policies": {name: summary(found) for name, found in outcomes.items()},
                    **elapsed(began),
                    "model": "event",
                    "checkpoint_seconds": interval,
                    "changeover_tail": tail,
                    "fleet_changeovers": fleet_changeovers,
                }
            )
    return cells


def summary(outcomes: list[Outcome]) -> dict[str, float | int]:
    import numpy as np

    costs = np.array([o.cost for o in outcomes])
    return {
        "cost_mean": round(float(costs.mean()), 4),
        "cost_p75": round(float(np.percentile(costs, 75)), 4),
        "spot_hours_mean": round(sum(o.spot_work_hours for o in outcomes) / len(outcomes), 2),
        "on_demand_hours_mean": round(sum(o.on_demand_work_hours for o in outcomes) / len(outcomes), 2),
        "misses": sum(o.missed for o in outcomes),
        "switches_mean": round(sum(getattr(o, "switches", 0) for o in outcomes) / len(outcomes), 2),
    }


def markdown(cell: dict) -> str:
    model = (
        f"event model, checkpoint every {cell['checkpoint_seconds']} s"
        + (", changeover tail" if cell["changeover_tail"] else "")
        + f", fleet saw {cell['fleet_changeovers']} changeovers"
        + ", d = median changeover"
        if cell.get("model") == "event"
        else "tick model"
    )
    rows = [
        f"job fraction {cell['job_fraction']}, d = {cell['changeover_hours']} h "
        f"({cell['traces']} traces x {cell['starts']} starts; {model}; {cell['seconds']} s, {cell['cpu_seconds']} s of CPU)",
        "",
        "| policy | cost mean | cost p75 | Spot h | on-demand h | misses | switches |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, p in cell["policies"].items():
        rows.append(
            f"| {name} | {p['cost_mean']:.3f} | {p['cost_p75']:.3f} | {p['spot_hours_mean']:.1f} "
            f"| {p['on_demand_hours_mean']:.1f} | {p['misses']} | {p['switches_mean']:.1f} |"
        )
    return "\n".join(rows)


def gap_closed(cell: dict) -> tuple[float, float]:
    """The mean cost above Omniscient's of spotjobs and of Uniform Progress."""
    p = cell["policies"]
    best = p["omniscient"]["cost_mean"]
    return p["spotjobs"]["cost_mean"] - best, p["uniform_progress"]["cost_mean"] - best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="folder of traces (searched recursively)")
    parser.add_argument("--job-fraction", type=float, help="one job fraction C/R (default: the sweep)")
    parser.add_argument("--changeover-hours", type=float, help="one changeover d in hours (default: the sweep)")
    parser.add_argument("--starts", type=int, default=300, help="random starts per trace")
    parser.add_argument("--json", action="store_true", help="print one JSON object per cell")
    parser.add_argument("--model", choices=("tick", "event"), default="tick", help="tick (the paper's) or event")
    parser.add_argument("--checkpoint-seconds", type=int, help="event model: one checkpoint interval (default: sweep)")
    parser.add_argument("--changeover-tail", action="store_true", help="event model: 5%% of changeovers 45-90 min")
    parser.add_argument(
        "--fleet-changeovers",
        type=int,
        default=FLEET_CHANGEOVERS,
        help="event model: on-demand changeovers the fleet saw before each request (0: none)",
    )
    parser.add_argument(
        "--policies", nargs="+", choices=list(EVENT_RULES), help="event model: only these policies (default: all)"
    )
    args = parser.parse_args(argv)
    traces = load_traces(args.traces) if args.traces.is_dir() else []
    if not traces:
        print(f"bench_deadline: no traces under {args.traces} (give --traces DIR)", file=sys.stderr)
        emit(BENCH, [Figure("traces", f"absent: none under {args.traces}")])
        return 0
    prices = Prices.load()
    k = prices.on_demand_per_hour / prices.spot_per_hour
    event = args.model == "event"
    fractions = [args.job_fraction] if args.job_fraction else list(EVENT_FRACTIONS if event else FRACTIONS)
    changeovers = [args.changeover_hours] if args.changeover_hours is not None else list(CHANGEOVER_HOURS)
    if not args.json:
        print(
            f"{len(traces)} traces under {args.traces} (AWS availability, the public stand-in for GCP Spot); "
            f"k = {k:.2f} ({prices.machine_type} in {prices.location}, shared/price_table.json, {prices.as_of})"
        )
    if event:
        intervals = [args.checkpoint_seconds] if args.checkpoint_seconds else list(CHECKPOINT_SECONDS)
        median = args.changeover_hours if args.changeover_hours is not None else CHANGEOVER_MEDIAN_SECONDS / HOUR
        cells = run_event_cells(
            traces,
            fractions,
            intervals,
            median,
            args.changeover_tail,
            args.starts,
            k,
            args.policies,
            args.fleet_changeovers,
        )
    else:
        cells = run_cells(traces, fractions, changeovers, args.starts, k)
    for cell in cells:
        print(json.dumps(cell) if args.json else markdown(cell) + "\n", flush=True)
    if not args.json:
        (report_events if event else report)(cells)
    return 0


def report_events(cells: list[dict]) -> None:
    if "spotjobs" not in cells[0]["policies"]:
        return  # its figures are spotjobs'
    runs = sum(c["traces"] * c["starts"] for c in cells)
    misses = sum(c["policies"]["spotjobs"]["misses"] for c in cells)
    tail = any(c["changeover_tail"] for c in cells)
    slowest = max(c["cpu_seconds"] for c in cells)
    emit(
        BENCH,
        [
            Figure(
                "spotjobs deadline misses, event model",
                f"{misses}/{runs}",
                "",
                "< 0.5%" if tail else "0",
                misses < 0.005 * runs if tail else misses == 0,
            ),
            Figure(
                "spotjobs switches per job, mean",
                round(sum(c["policies"]["spotjobs"]["switches_mean"] for c in cells) / len(cells), 2),
            ),
            Figure("slowest cell, wall", max(c["seconds"] for c in cells), "s"),
            Figure("slowest cell, CPU", slowest, "s", "< 120", slowest < 120),
        ],
    )


def report(cells: list[dict]) -> None:
    figures = []
    for cell in cells:
        if (cell["job_fraction"], cell["changeover_hours"]) == (TABLE3["fraction"], TABLE3["changeover_hours"]):
            for name, paper in TABLE3["spot_hours"].items():
                ours = cell["policies"][name]["spot_hours_mean"]
                off = ours / paper - 1
                figures.append(
                    Figure(f"Table 3 {name} Spot h (paper {paper})", ours, "h", "within 10%", bool(abs(off) <= 0.10))
                )
    misses = sum(c["policies"]["spotjobs"]["misses"] for c in cells)
    cheaper = sum(
        c["policies"]["spotjobs"]["cost_mean"] <= c["policies"]["uniform_progress"]["cost_mean"] for c in cells
    )
    ours, theirs = zip(*(gap_closed(c) for c in cells), strict=True)
    figures += [
        Figure("spotjobs deadline misses, all cells", misses, "", "0", misses == 0),
        Figure("cells where spotjobs costs <= UP", f"{cheaper}/{len(cells)}", "", "all", cheaper == len(cells)),
        Figure("mean gap to Omniscient, spotjobs", round(sum(ours) / len(ours), 4), "x on-demand"),
        Figure("mean gap to Omniscient, UP", round(sum(theirs) / len(theirs), 4), "x on-demand"),
    ]
    emit(BENCH, figures)


if __name__ == "__main__":
    sys.exit(main())
