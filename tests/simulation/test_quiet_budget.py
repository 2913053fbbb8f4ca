"""The quiet phase's step cap judges a world still busy as it stands: the cap must not cut a world
whose work grows with its requests (a GPU burst of 200) long before `LIVENESS_BOUND`, or liveness
reads a request mid-re-queue as stuck (seeds 1486 and 1547)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sim import invariants
from sim.world import QUIET_STEPS, World


class BusyWorld(World):
    """A world whose quiet phase has `work` steps to do, one simulated second each, then is settled."""

    def __init__(self, seed: int, work: int) -> None:
        super().__init__(seed)
        self.work = work
        self.quiet_steps = 0

    def _step(self, until: datetime | None) -> bool:
        self.steps += 1
        self.quiet_steps += 1
        self.clock.advance(1.0)
        return True

    def _settled(self) -> bool:
        return self.quiet_steps >= self.work

    def _check(self, invariants: Any, which: str) -> None:
        pass


def test_a_gpu_burst_world_is_judged_once_settled_not_mid_flight() -> None:
    burst = BusyWorld(1547, work=6000)  # about what seed 1547's 200 GPU requests need quiet
    assert len(burst.workload.arrivals) > 200
    burst._phase_quiet(invariants)
    assert burst._settled(), f"judged after {burst.quiet_steps} quiet steps, still busy"


def test_a_small_world_still_busy_at_the_cap_is_judged_as_it_stands() -> None:
    runaway = BusyWorld(3, work=10 * QUIET_STEPS)
    assert len(runaway.workload.arrivals) < 100
    runaway._phase_quiet(invariants)
    assert runaway.quiet_steps == QUIET_STEPS
