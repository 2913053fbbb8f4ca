"""Shrinking a failing seed: replay it with its deliveries run whole (no interleaving), then its
faults, then its arrivals, disabled one at a time (greedily, within a budget of replays), keeping
every removal after which the same invariant still fails. What is left is the smallest run found
that still fails: its trace is the steps that matter, and `--no-interleave` / `--disable-faults` /
`--disable-arrivals` replay it exactly."""

from __future__ import annotations

from dataclasses import dataclass

from sim.world import World

REPLAY_BUDGET = 60


@dataclass
class Shrunk:
    world: World
    interleave: bool
    no_faults: bool
    disabled_faults: frozenset[int]
    disabled_arrivals: frozenset[int]
    replays: int


def fails_alike(world: World, invariant: str) -> bool:
    return any(v.invariant == invariant for v in world.run())


def shrink(seed: int, invariant: str, *, budget: int = REPLAY_BUDGET, max_steps: int | None = None) -> Shrunk:
    """The smallest failing replay of `seed` found within `budget` replays."""
    no_faults = False
    interleave = True
    faults: frozenset[int] = frozenset()
    arrivals: frozenset[int] = frozenset()
    replays = 0
    first = World(seed, max_steps=max_steps)
    first.run()
    best = first

    def attempt(
        more_faults: frozenset[int], more_arrivals: frozenset[int], off: bool = False, whole: bool = False
    ) -> World | None:
        nonlocal replays
        replays += 1
        world = World(
            seed,
            disabled_faults=more_faults,
            disabled_arrivals=more_arrivals,
            no_faults=off or no_faults,
            interleave=interleave and not whole,
            max_steps=max_steps,
        )
        return world if fails_alike(world, invariant) else None

    # Whole deliveries first: a violation that needs no interleaving reads far more simply. (Faults
    # and arrivals are then drawn anew, so their ordinals are those of the uninterleaved run.)
    if (world := attempt(faults, arrivals, whole=True)) is not None:
        interleave, first, best = False, world, world
    # Then every fault at once: many violations need none.
    if first.faults and (world := attempt(faults, arrivals, off=True)) is not None:
        no_faults, best = True, world
    else:
        for fault in first.faults:
            if replays >= budget:
                break
            if (world := attempt(faults | {fault.ordinal}, arrivals)) is not None:
                faults, best = faults | {fault.ordinal}, world
    for arrival in first.workload.arrivals:
        if replays >= budget:
            break
        if (world := attempt(faults, arrivals | {arrival.index})) is not None:
            arrivals, best = arrivals | {arrival.index}, world
    return Shrunk(best, interleave, no_faults, faults, arrivals, replays)
