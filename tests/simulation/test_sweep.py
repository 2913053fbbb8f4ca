"""`python -m sim --seeds N`: a seed whose world raises is reported as that seed's finding, with
its replay line, and the sweep goes on to the seeds after it."""

from __future__ import annotations

import sim.__main__ as cli
from sim.world import World


def test_a_world_that_raises_is_a_failing_seed_and_the_sweep_goes_on(monkeypatch, capsys) -> None:
    ran: list[int] = []

    def run(world: World) -> list:
        ran.append(world.seed)
        if world.seed == 1:
            raise TypeError("a command met a shape it does not know")
        return []

    monkeypatch.setattr(
        World, "__init__", lambda self, seed, max_steps=None: setattr(self, "seed", seed) or setattr(self, "events", 0)
    )
    monkeypatch.setattr(World, "run", run)
    monkeypatch.setattr(cli, "freeze_long_lived", lambda: None)  # a freeze is the whole process's: not pytest's
    assert cli.run_seeds(0, 3, None) == 1
    out = capsys.readouterr().out
    assert ran == [0, 1, 2]
    assert (
        "seed 1: world_raised: TypeError: a command met a shape it does not know  (replay: python -m sim --seed 1)"
        in out
    )
    assert "world_raised x1 (first seed 1)" in out
