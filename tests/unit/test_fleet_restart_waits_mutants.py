"""`attempt_restart_waits` at its edge (the twelfth mutation pass): a preemption recorded after
the attempt's run ended (a late line) waited for no machine: no restart wait, never a negative one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.fleet.estimate import summarize
from shared.fleet.observations import FleetFact, Kind

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
HOUR = 3600.0


def fact(kind: Kind, ago: float, seconds: float = 0.0, count: int = 0) -> FleetFact:
    """A fact of attempt `a` in us-east4, `ago` seconds before NOW."""
    return FleetFact(kind, "us-east4", NOW - timedelta(seconds=ago), seconds, count, "a", 0)


def test_a_preemption_recorded_after_the_run_ended_waits_nothing() -> None:
    facts = [
        fact(Kind.WAIT, 4 * HOUR),
        fact(Kind.RUN, 2 * HOUR, seconds=2 * HOUR, count=1),  # the attempt's run, ended 2 h ago
        fact(Kind.PREEMPT, HOUR),
    ]
    assert summarize(facts, NOW).restart_waits == 0
