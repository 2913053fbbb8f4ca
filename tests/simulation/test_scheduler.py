"""Two shortcuts of the scheduler must change no decision, or a seed would replay another run
than the one it found (and the step counts and events per second would measure another world):
it keeps what else is due besides the tasks in flight (`World._others_due`) until something
moves it, and a task whose next steps can only lead back to it goes on without a switch
(`World._goes_on_alone`)."""

from __future__ import annotations

from typing import Any

import pytest

from sim.world import World


class RescanningWorld(World):
    """The scheduler without its shortcuts: what else is due is found again at every step, and
    every call of a task goes back to the scheduler."""

    def _step(self, until: Any) -> bool:
        self._schedule_moved()
        return super()._step(until)

    def _goes_on_alone(self, task: Any) -> bool:
        return False


# Seeds with interleaved deliveries, slow round trips, operators' commands and permanent faults.
@pytest.mark.parametrize("seed", [2, 5, 8])
def test_the_shortcuts_change_no_decision(seed: int) -> None:
    remembering, rescanning = World(seed), RescanningWorld(seed)

    assert remembering.run() == rescanning.run()
    assert [str(line) for line in remembering.trace] == [str(line) for line in rescanning.trace]
    assert (remembering.steps, remembering.events) == (rescanning.steps, rescanning.events)
    assert remembering.calls_among_others > 0
