"""The deterministic simulator's speed (sim/, `python -m sim`): seeds and events a second on one
core, over a fixed seed range. An event is a handler invocation or a Vertex job's state change.

    python -m bench.bench_sim [--seeds 40] [--start 0]
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.report import Figure, emit

BENCH = "bench_sim"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--start", type=int, default=10_000)
    args = parser.parse_args()
    from sim.world import World

    World(args.start).run()  # imports and the Terraform rules: not the simulator's speed
    events = steps = failing = 0
    began = time.perf_counter()
    for seed in range(args.start, args.start + args.seeds):
        world = World(seed)
        failing += bool(world.run())
        events += world.events
        steps += world.steps
    elapsed = time.perf_counter() - began
    emit(
        BENCH,
        [
            Figure("seeds per second", round(args.seeds / elapsed, 2), "seeds/s"),
            Figure("events per second", round(events / elapsed), "events/s"),
            Figure("scheduling steps per second", round(steps / elapsed), "steps/s"),
            Figure("seeds with a violation", f"{failing}/{args.seeds}"),
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
