"""A process that runs seeds (`python -m sim`, the bench) leaves what its first world loaded out of
later garbage collections (`sim.virtual.freeze_long_lived`). Tried in a process of its own: a
freeze is the whole process's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_of_seeds_freezes_what_its_first_world_loaded_once() -> None:
    script = (
        "import gc\n"
        "from sim.__main__ import run_one\n"
        "assert gc.get_freeze_count() == 0\n"
        "run_one(0, 30)\n"
        "frozen = gc.get_freeze_count()\n"
        "run_one(1, 30)\n"
        "print(frozen, gc.get_freeze_count())\n"
    )
    env = {"PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "kit" / "src")))}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=300
    )
    frozen, frozen_after = map(int, done.stdout.split()[-2:])
    assert frozen > 50_000  # the modules, not a handful
    assert frozen_after <= frozen  # once a process (a frozen object freed by its count leaves it)
