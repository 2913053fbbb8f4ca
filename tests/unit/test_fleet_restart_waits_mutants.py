"""`attempt_restart_waits` at its edge (the twelfth mutation pass): a preemption recorded after
the attempt's run ended (a late line) waited for no machine: no restart wait, never a negative one."""

from __future__ import annotations

from shared.fleet.estimate import summarize
from shared.fleet.observations import Kind
from tests.unit.test_fleet_estimate import HOUR, NOW, fact


def test_a_preemption_recorded_after_the_run_ended_waits_nothing() -> None:
    facts = [
        fact(Kind.WAIT, 4 * HOUR),
        fact(Kind.RUN, 2 * HOUR, seconds=2 * HOUR, count=1),  # the attempt's run, ended 2 h ago
        fact(Kind.PREEMPT, HOUR),
    ]
    assert summarize(facts, NOW).restart_waits == 0
