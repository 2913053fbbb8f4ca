"""One fleet fact stored under two names counts once at its earliest time (`each_once`), whatever
order its names come in. The store lists names in order, so a fact's earlier name is read first,
and only a fact whose names come newest first (facts gathered in memory, or read from two
listings) tells "the earliest" from "the first seen"; the fifteenth mutation pass found that no
test gave them in that order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.fleet.estimate import summarize
from shared.fleet.observations import FleetFact, Kind, each_once

NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)
HERE = "us-central1"
STARTED = NOW - timedelta(hours=3)
KEY = "k-1"


def test_a_preemption_whose_later_name_comes_first_is_dated_by_its_earlier_name() -> None:
    seen_first = FleetFact(Kind.PREEMPT, HERE, STARTED + timedelta(hours=1), attempt_key=KEY)
    seen_again = FleetFact(Kind.PREEMPT, HERE, STARTED + timedelta(hours=1, minutes=7), attempt_key=KEY)
    facts = [
        FleetFact(Kind.WAIT, HERE, STARTED, 300.0, attempt_key=KEY),
        seen_again,
        seen_first,
        FleetFact(Kind.RUN, HERE, STARTED + timedelta(hours=3), 3 * 3600.0, 1, attempt_key=KEY),
    ]
    assert [o.at for o in each_once(facts) if o.kind is Kind.PREEMPT] == [seen_first.at]
    summary = summarize(facts, NOW)
    assert summary.preemptions == 1
    assert summary.restart_waits == 2 * 3600  # from the first observation's time to the run's end
