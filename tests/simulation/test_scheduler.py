"""The scheduler keeps what else is due besides the tasks in flight (`World._others_due`) until
something moves it: that memo must change no decision, or a seed would replay another run than
the one it found (and the step counts and events per second would measure another world)."""

from __future__ import annotations

from typing import Any

import pytest

from sim.world import World


class RescanningWorld(World):
    """The scheduler without its memo: what else is due is found again at every step."""

    def _step(self, until: Any) -> bool:
        self._schedule_moved()
        return super()._step(until)


# Seeds with interleaved deliveries, slow round trips, operators' commands and permanent faults.
@pytest.mark.parametrize("seed", [2, 5, 8])
def test_the_memo_of_what_is_due_changes_no_decision(seed: int) -> None:
    remembering, rescanning = World(seed), RescanningWorld(seed)

    assert remembering.run() == rescanning.run()
    assert [str(line) for line in remembering.trace] == [str(line) for line in rescanning.trace]
    assert (remembering.steps, remembering.events) == (rescanning.steps, rescanning.events)
    assert remembering.calls_among_others > 0
