"""Deadlines met (issue 43): no handler run outlasts the timeout Terraform deploys for its function.

Cloud Functions kills a request that runs past its function's `timeout_seconds`
(https://cloud.google.com/functions/docs/configuring/timeout): whatever the run held (a claim,
reconcile's run lease) stays held until it expires, and what it had not written yet is lost. The
product promises to end in time on its own: a pass's `CallWindow` sends no call that could still be
waiting at its function's timeout (docs/ARCHITECTURE.md, "No call waits for good"); a push
delivery's calls each name a timeout within half of its 60 s (`sim.hangs.timeout_bound`).

The world does not kill: a run goes on to its end in virtual time, from the moment it was pushed
(`Task.started`) to the moment its handler returned, raised or crashed (`World.runs`), so a run
past its timeout is a run production would have killed. The timeouts are Terraform's, read from
terraform/ (the module's default in variables.tf's `function_defaults` type and the builtin sizing
of reconcile and prune_checkpoints in functions.tf), not copied here.

Excused: a push delivery that met a hang (a Vertex call with no reply, `sim.faults` `hangs`): it
waits out its call's timeout, up to half the function's, and nothing in a push function promises to
fit two of them; production kills it and Pub/Sub redelivers. Reconcile is not excused: its call
window is there for hangs. A crash only ends a run sooner, so it excuses nothing. The operator's
commands run in no function and are not judged.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.world import Task, Violation, World

# The functions whose run promises its timeout whatever hangs it meets (its call window).
WINDOWED = frozenset({"reconcile"})
_DEFAULT_TIMEOUT = re.compile(r"timeout_seconds\s*=\s*optional\(number,\s*(\d+)\)")


@dataclass(frozen=True)
class Run:
    """One handler run, from its push to its end."""

    function: str
    origin: str  # the message it delivered
    started: datetime
    ended: datetime
    hangs: int  # Vertex calls of it that got no reply


@functools.cache
def deployed_timeouts() -> dict[str, float]:
    """Each function's `timeout_seconds` as terraform/ deploys it with the module's defaults:
    `function_defaults`' own default, then `local.function_builtin`'s per-function sizing."""
    from tests.support.terraform import module_config, topology

    config = module_config()
    default = _DEFAULT_TIMEOUT.search(config.variables["function_defaults"]["type"])
    assert default is not None, "terraform/variables.tf: function_defaults declares no timeout_seconds default"
    builtin = config.locals["function_builtin"]
    return {
        function: float(builtin.get(function, {}).get("timeout_seconds", default.group(1)))
        for function in topology()["functions"]
    }


def note_run(world: World, task: Task) -> None:
    """A push delivery's run ended (`World._handle`): kept for `runs_within_timeout`."""
    assert task.started is not None  # set when it starts (`World._start`)
    world.runs.append(Run(task.name, task.origin, task.started, world.clock.now(), task.hangs))


def _overrun(function: str, started: datetime, until: datetime, hangs: int) -> float | None:
    """How many seconds past its function's timeout a run went, None when it did not or is excused."""
    timeout = deployed_timeouts()[function]
    over = (until - started - timedelta(seconds=timeout)).total_seconds()
    if over <= 0 or (hangs and function not in WINDOWED):
        return None
    return over


def runs_within_timeout(world: World) -> list[Violation]:
    """Every handler run that ended since the last check ended within its function's timeout of
    its start (a step invariant: the first run too long stops the seed there)."""
    from sim.invariants import violation

    seen = world.checked.get("runs", 0)
    world.checked["runs"] = len(world.runs)
    found = []
    for run in world.runs[seen:]:
        over = _overrun(run.function, run.started, run.ended, run.hangs)
        if over is not None:
            found.append(
                violation(
                    "runs_within_timeout",
                    f"{run.function} ran {(run.ended - run.started).total_seconds():g} s delivering message "
                    f"{run.origin} (from {run.started.isoformat()}), {over:g} s past its deployed timeout of "
                    f"{deployed_timeouts()[run.function]:g} s: production kills it there",
                )
            )
    return found


def none_in_flight_past_timeout(world: World) -> list[Violation]:
    """Once the world is quiet, no run still in flight began longer than its timeout ago."""
    from sim.invariants import violation

    now = world.clock.now()
    return [
        violation(
            "runs_within_timeout",
            f"{task.name} still runs message {task.origin} {(now - task.started).total_seconds():g} s after it "
            f"began, past its deployed timeout of {deployed_timeouts()[task.name]:g} s",
        )
        for task in world.tasks
        if task.name in deployed_timeouts()
        and task.started is not None
        and _overrun(task.name, task.started, now, task.hangs) is not None
    ]


STEP = [runs_within_timeout]
QUIESCENCE = [none_in_flight_past_timeout]
