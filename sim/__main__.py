"""`python -m sim`: run the deterministic simulator over seeds, or replay one.

    python -m sim --seeds 300              # seeds 0..299; one line per failing seed, a summary
    python -m sim --seeds 3000 --jobs 2    # the same, in two processes
    python -m sim --seed 42                # replay seed 42: its trace, shrunk if it fails
    python -m sim --seed 42 --disable-faults 1,3 --disable-arrivals 0   # a shrunk replay, exactly

Exit status 1 when any seed violates an invariant.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import multiprocessing
import sys
import time

from sim.virtual import freeze_long_lived
from sim.world import Violation, World


def _ids(text: str) -> frozenset[int]:
    return frozenset(int(x) for x in text.split(",") if x.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run (from --start)")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, help="replay this one seed, with its trace")
    parser.add_argument("--steps", type=int, help="scheduling steps of the faulty phase (default: the workload's)")
    parser.add_argument("--verbose", action="store_true", help="the whole trace, and the functions' warnings")
    parser.add_argument(
        "--jobs", type=int, default=1, help="processes to run the seeds in (seeds are independent worlds)"
    )
    parser.add_argument("--no-shrink", action="store_true", help="print a failing seed's trace unshrunk")
    parser.add_argument("--no-faults", action="store_true", help="leave every fault out")
    parser.add_argument(
        "--no-interleave", action="store_true", help="run each delivery whole (no yield at its I/O calls)"
    )
    parser.add_argument("--disable-faults", type=_ids, default=frozenset(), help="fault ordinals to leave out")
    parser.add_argument("--disable-arrivals", type=_ids, default=frozenset(), help="arrivals to leave out")
    args = parser.parse_args(argv)
    if args.seed is not None:
        return replay(args)
    return run_seeds(args.start, args.seeds, args.steps, args.jobs)


def replay(args: argparse.Namespace) -> int:
    world = World(
        args.seed,
        disabled_faults=args.disable_faults,
        disabled_arrivals=args.disable_arrivals,
        no_faults=args.no_faults,
        interleave=not args.no_interleave,
        max_steps=args.steps,
        verbose=args.verbose,
    )
    violations = world.run()
    print(describe(world))
    if not violations:
        if args.verbose:
            print("\n".join(map(str, world.trace)))
        print(f"seed {args.seed}: no violation ({world.steps} steps, {world.events} events)")
        return 0
    shown = world
    command = f"python -m sim --seed {args.seed}"
    if not args.no_shrink and not (
        args.disable_faults or args.disable_arrivals or args.no_faults or args.no_interleave
    ):
        from sim.shrink import shrink

        shrunk = shrink(args.seed, violations[0].invariant, max_steps=args.steps)
        shown = shrunk.world
        print(
            f"shrunk in {shrunk.replays} replays: "
            f"{len(world.faults) if shrunk.no_faults else len(shrunk.disabled_faults)} of {len(world.faults)} faults and {len(shrunk.disabled_arrivals)} of {len(world.workload.arrivals)} "
            "arrivals left out, the same invariant still fails"
        )
        command += " --no-interleave" if not shrunk.interleave else ""
        command += " --no-faults" if shrunk.no_faults else ""
        command += _flags(shrunk.disabled_faults, shrunk.disabled_arrivals)
    print("\n".join(map(str, shown.trace if args.verbose else interesting(shown))))
    for violation in shown.violations or violations:
        print(f"VIOLATION {violation}")
    shrunk_note = f"   (shrunk: {command})" if command.count("--") > 1 else ""
    print(f"replay: python -m sim --seed {args.seed}{shrunk_note}")
    return 1


def _flags(faults: frozenset[int], arrivals: frozenset[int]) -> str:
    out = ""
    if faults:
        out += " --disable-faults " + ",".join(map(str, sorted(faults)))
    if arrivals:
        out += " --disable-arrivals " + ",".join(map(str, sorted(arrivals)))
    return out


def interesting(world: World) -> list[str]:
    """The trace without the routine: maintenance ticks that were simply acknowledged."""
    return [
        str(line)
        for line in world.trace
        if not (("task=reconcile" in line.text or "task=prune" in line.text) and line.text.endswith(": acked"))
    ]


def describe(world: World) -> str:
    w = world.workload
    return (
        f"seed {world.seed}: {len(w.arrivals)} arrivals over {w.duration}, fault rate {w.fault_rate}, "
        f"duplicates {w.duplicate_rate}, GPU quota {'full' + (' for good' if w.gpu_quota_forever else '') if w.gpu_quota_full else 'free'}; "
        + ", ".join(f"{k}={v}" for k, v in sorted(w.env.items()) if k not in STATIC_SETTINGS)
    )


STATIC_SETTINGS = {
    "GOOGLE_CLOUD_PROJECT",
    "SPOTJOBS_STATE_BUCKET",
    "SPOTJOBS_CHECKPOINT_BUCKET",
    "SPOTJOBS_LOCATION",
    "SPOTJOBS_DEPLOYMENT",
    "SPOTJOBS_TRAINING_SERVICE_ACCOUNT",
    "SPOTJOBS_ALLOWED_IMAGE_PREFIXES",
    "SPOTJOBS_ALLOWED_MACHINE_FAMILIES",
    "SPOTJOBS_LOG_LEVEL",
}


def run_one(seed: int, steps: int | None) -> tuple[int, list[str], str | None, int]:
    """Seed `seed`: the invariants it violated, its first violation, its events."""
    outcome = _run_world(seed, steps)
    freeze_long_lived()  # after the process's first world, which is gone now
    return outcome


def _run_world(seed: int, steps: int | None) -> tuple[int, list[str], str | None, int]:
    world = World(seed, max_steps=steps)
    try:
        violations = world.run()
    except Exception as exc:  # noqa: BLE001 - what escaped the world is this seed's finding, not the sweep's end
        crash = Violation("world_raised", f"{type(exc).__name__}: {exc}")
        return seed, [crash.invariant], str(crash), world.events
    return seed, sorted({v.invariant for v in violations}), str(violations[0]) if violations else None, world.events


def run_seeds(start: int, count: int, steps: int | None, jobs: int = 1) -> int:
    """Seeds start..start+count-1, in `jobs` processes (each seed is one world of its own, so they
    are independent; the lines come out in seed order)."""
    began = time.perf_counter()
    failures: collections.Counter[str] = collections.Counter()
    first_seed: dict[str, int] = {}
    events = 0
    seeds = range(start, start + count)
    with contextlib.ExitStack() as stack:
        if jobs > 1:
            pool = stack.enter_context(multiprocessing.get_context("fork").Pool(jobs))
            results = pool.imap(functools.partial(run_one, steps=steps), seeds)
        else:
            results = (run_one(seed, steps) for seed in seeds)
        for seed, names, first, seed_events in results:
            events += seed_events
            for name in names:
                failures[name] += 1
                first_seed.setdefault(name, seed)
            if first is not None:
                print(f"seed {seed}: {first}  (replay: python -m sim --seed {seed})", flush=True)
    elapsed = time.perf_counter() - began
    print(
        f"{count} seeds ({start}..{start + count - 1}) in {elapsed:.0f} s on {jobs} process(es): "
        f"{count / elapsed:.2f} seeds/s, {events / elapsed:.0f} events/s; "
        + (
            "failing: " + ", ".join(f"{n} x{c} (first seed {first_seed[n]})" for n, c in failures.most_common())
            if failures
            else "no violation"
        )
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
