"""The quiet phase's step cap judges a world still busy as it stands: the cap must not cut a world
whose work grows with its requests (a GPU burst of 200) long before `LIVENESS_BOUND`, or liveness
reads a request mid-re-queue as stuck (seeds 1486 and 1547). Nor may its time bound cut a request
whose jobs Vertex held QUEUED for hours (`queued_hold`): those hours are Vertex's, not the code's
(seed 5912)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sim import invariants
from sim.world import LIVENESS_BOUND, QUIET_STEPS, World
from tests.support.sim_world import job


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


class SlowWorld(World):
    """A world whose quiet phase is settled `settles_after` in, a simulated minute a step."""

    def __init__(self, seed: int, settles_after: timedelta) -> None:
        super().__init__(seed)
        self.settles_at = self.clock.now() + settles_after

    def _step(self, until: datetime | None) -> bool:
        self.steps += 1
        self.clock.advance(60.0)
        return True

    def _settled(self) -> bool:
        return self.clock.now() >= self.settles_at

    def _check(self, invariants: Any, which: str) -> None:
        pass


def held_queued(world: World, holds: dict[tuple[str, int], float]) -> None:
    """Vertex holds each (request, attempt)'s job QUEUED its hours from its create."""
    world.vertex.queued_hold = lambda held: holds[(held.request_id, held.attempt)] * 3600.0
    for request_id, attempt in holds:
        world.vertex.advance(job(world, request_id, attempt, "JOB_STATE_QUEUED"))


def test_a_request_whose_jobs_vertex_held_queued_for_hours_is_judged_once_settled() -> None:
    """Seed 5912 (at 1c5db56): burst49's attempt 1 was held QUEUED 7 h, its attempt 2 2 h; with
    six preemptions' waits between, its second job ended 12 h after the faults stopped, and
    liveness read it a tenth of a second later, mid-decision, as stuck."""
    world = SlowWorld(5912, settles_after=LIVENESS_BOUND + timedelta(hours=8))
    held_queued(world, {("burst49", 1): 7, ("burst49", 2): 2})
    world._phase_quiet(invariants)
    assert world._settled(), f"judged {world.settles_at - world.clock.now()} before it settled"


def test_the_bound_grows_by_the_longest_holds_of_one_request_not_of_all() -> None:
    """Requests wait out their holds side by side: two requests held 7 h and 2 h take 7 h more."""
    world = SlowWorld(5912, settles_after=LIVENESS_BOUND * 2)
    quiet_began = world.clock.now()
    held_queued(world, {("r1", 1): 7, ("r2", 1): 2})
    world._phase_quiet(invariants)
    assert not world._settled()
    assert world.clock.now() - quiet_began == LIVENESS_BOUND + timedelta(hours=7)
