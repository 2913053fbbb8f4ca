"""How long one cell of the deadline benchmark takes (issue 31, item 4): nine traces of 20,000 ticks,
100 starts, one job fraction and one d (tick model) or one checkpoint interval (event model).

The public traces are shorter (AWS: 8 x 3,895 ticks, GCP: 13 x 2,114), so the nine are cut from
all of them joined end to end, each beginning a ninth of the way further (wrapping round). Prints
the wall and CPU seconds of each cell: on a shared machine the wall time is mostly the others' load.

    python -m bench.bench_deadline_speed [--traces DIR ...] [--model tick|event ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench.bench_deadline import (
    BENCH,
    DEFAULT_TRACES,
    run_cells,
    run_event_cells,
)
from bench.deadline_events import CHANGEOVER_MEDIAN_SECONDS
from bench.deadline_sim import HOUR, Trace, load_traces
from bench.report import Figure, emit
from spotjobs.reporting.prices import Prices

TRACES, TICKS, STARTS = 9, 20_000, 100
TARGET_SECONDS = 120.0
# The slowest cells: the tick model's finest Omniscient unit (d = 3 min), the event model's most
# frequent commits; both at the lowest fraction, the longest deadline.
FRACTION, CHANGEOVER_HOURS, CHECKPOINT_SECONDS = 0.6, 0.05, 600


def long_traces(traces: list[Trace], count: int = TRACES, ticks: int = TICKS) -> list[Trace]:
    """`count` traces of `ticks` ticks cut from `traces` joined end to end, each starting
    len / count ticks after the one before, wrapping round."""
    joined = [bit for trace in traces for bit in trace.available]
    step = len(joined) // count
    return [
        Trace.of(
            f"joined+{i * step}", traces[0].gap_seconds, (joined[(i * step + j) % len(joined)] for j in range(ticks))
        )
        for i in range(count)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--traces",
        type=Path,
        nargs="+",
        default=[DEFAULT_TRACES, DEFAULT_TRACES.parent / "gcp-spot-traces"],
        help="folders of traces (searched recursively), joined in this order",
    )
    parser.add_argument("--model", choices=("tick", "event"), nargs="+", default=["tick", "event"])
    args = parser.parse_args(argv)
    found = [t for folder in args.traces if folder.is_dir() for t in load_traces(folder)]
    if not found:
        print(f"bench_deadline_speed: no traces under {args.traces} (give --traces DIR ...)", file=sys.stderr)
        emit(BENCH, [Figure("traces", "absent")])
        return 0
    if len({t.gap_seconds for t in found}) > 1:
        print("bench_deadline_speed: the traces have different ticks", file=sys.stderr)
        return 2
    traces = long_traces(found)
    prices = Prices.load()
    k = prices.on_demand_per_hour / prices.spot_per_hour
    load = os.getloadavg()[0]
    print(f"{len(traces)} traces of {TICKS} ticks from {len(found)} traces; {STARTS} starts; load average {load:.1f}")
    figures = []
    for model in args.model:
        if model == "tick":
            cell = run_cells(traces, [FRACTION], [CHANGEOVER_HOURS], STARTS, k)[0]
            name = f"tick cell (fraction {FRACTION}, d = {CHANGEOVER_HOURS} h)"
        else:
            median = CHANGEOVER_MEDIAN_SECONDS / HOUR
            cell = run_event_cells(traces, [FRACTION], [CHECKPOINT_SECONDS], median, False, STARTS, k)[0]
            name = f"event cell (fraction {FRACTION}, I = {CHECKPOINT_SECONDS} s)"
        print(f"{name}: {cell['seconds']} s wall, {cell['cpu_seconds']} s CPU", flush=True)
        figures += [
            Figure(f"{name}, wall", cell["seconds"], "s"),
            Figure(
                f"{name}, CPU",
                cell["cpu_seconds"],
                "s",
                f"< {TARGET_SECONDS:.0f}",
                cell["cpu_seconds"] < TARGET_SECONDS,
            ),
        ]
    emit(BENCH, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
