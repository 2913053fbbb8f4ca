"""One run of the placement bench, traced: where each of its requests is, and when it changes.

    python -m bench.placement_trace [--setup skynomad] [--deadline-ratio R] [--run N] [--traces DIR]
        [--exclude-region R ...] [--no-prior] [--fleet N] [--runs N] [--job-hours H]

Replays run N of `python -m bench.bench_placement` (a window of SkyNomad's setup, or one fleet of
the shared setup, with the same options) with `spotjobs` (`bench.bench_placement.Spotjobs`:
production's placement and deadline rule) and prints, per request, a line at every change of
where it is (waiting for Spot, on Spot, on on-demand; the location; the attempt): the hours since
its start, the work done, its cost so far (egress included), the slack beyond the deadline rule's
safety net in changeovers (what the request can still spend on a surprise), and the locations with
Spot capacity at that tick (the trace's truth, which the policy does not see). Then each request's
cost, moves and misses, and the optimum's cost for its start. What a reading of a costly request
starts from (docs/placement.md, "Robust placement").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.bench_placement import (
    DEFAULT_TRACES,
    Attempt,
    Setup,
    Spotjobs,
    load_regions,
    omniscient,
    shared_setup,
    simulate_fleet,
    situation,
    with_priors,
)
from shared.deciding.deadline import Placement, decide_deadline, safety_net_seconds

WHERE = {
    Placement.WAITING_FOR_SPOT: "waiting for Spot",
    Placement.ON_SPOT: "on Spot",
    Placement.ON_DEMAND: "on on-demand",
}


def beyond_net_changeovers(setup: Setup, job: Attempt, tick: int) -> float:
    """The job's slack beyond the deadline rule's safety net (2d + m), in changeovers."""
    now = situation(setup, job, tick, None)
    return (decide_deadline(now).slack_seconds - safety_net_seconds(now)) / now.changeover_seconds


def trace(setup: Setup, starts: Sequence[int]) -> list[str]:
    """The lines of one run: each request's changes, then its outcome and the optimum's cost."""
    changes: dict[str, list[str]] = {}
    seen: dict[str, tuple[Placement, int, int]] = {}

    def watch(job: Attempt, tick: int) -> None:
        state = (job.mode, job.region, job.number)
        if seen.get(job.key) == state:
            return
        seen[job.key] = state
        up = [r.name for r in setup.regions if r.available[job.start + tick]]
        changes.setdefault(job.key, []).append(
            f"  {setup.hours(tick):6.2f} h  {WHERE[job.mode]:<16} {setup.regions[job.region].name:<18} "
            f"attempt {job.number:<2} done {setup.hours(job.done):6.2f} h  ${job.cost + job.egress:8,.0f}  "
            f"beyond the net {beyond_net_changeovers(setup, job, tick):5.1f}  capacity: {', '.join(up) or 'none'}"
        )

    jobs = simulate_fleet(setup, starts, Spotjobs, watch=watch)
    optimum = omniscient(setup, starts)
    lines = []
    for job, best in zip(jobs, optimum, strict=True):
        lines.append(f"{job.key} starting {setup.hours(job.start):.2f} h into the traces:")
        lines.extend(changes.get(job.key, []))
        lines.append(
            f"  cost ${job.cost + job.egress:,.0f} (egress ${job.egress:,.0f}), {job.moves} moves, "
            f"{'missed' if job.missed else 'in time'}; the optimum ${best:,.0f}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.placement_trace", description=__doc__.split("\n\n")[1])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="folder of traces (default: %(default)s)")
    parser.add_argument("--setup", choices=("shared", "skynomad"), default="shared", help="as the bench's --setup")
    parser.add_argument("--deadline-ratio", type=float, default=1.05, help="deadline / work (default 1.05)")
    parser.add_argument("--run", type=int, default=0, help="which run: a SkyNomad window, or a shared fleet (from 0)")
    parser.add_argument("--exclude-region", nargs="+", default=[], help="regions left out of the traces")
    parser.add_argument("--no-prior", action="store_true", help="without the shipped region prior")
    parser.add_argument("--job-hours", type=float, default=24.0, help="shared setup: hours of work (default 24)")
    parser.add_argument("--fleet", type=int, default=8, help="shared setup: requests at once (default 8)")
    parser.add_argument("--runs", type=int, default=12, help="shared setup: start times (default 12)")
    args = parser.parse_args(argv)
    # The shared setup's fixed options, as the bench's defaults.
    args.changeover_hours, args.checkpoint_gb = 0.2, 100.0
    if args.setup == "skynomad":
        from bench import skynomad_setup as skynomad

        regions, gap = load_regions(args.traces, args.exclude_region, zones_only=skynomad.ZONES)
        setup, fleets = skynomad.setup(regions, gap, args.deadline_ratio)
    else:
        regions, gap = load_regions(args.traces, args.exclude_region)
        setup, fleets = shared_setup(regions, gap, args, args.deadline_ratio)
    if not 0 <= args.run < len(fleets):
        parser.error(f"--run: {len(fleets)} runs in this setup, from 0")
    if not args.no_prior:
        setup = with_priors(setup)
    print("\n".join(trace(setup, fleets[args.run])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
