"""An attempt's VMs' time running on Spot (`estimate`'s `spot_vm_seconds`, the mean lifetime's
numerator) at its edges (the thirteenth mutation pass): a job read at the instant it started has
run no VM second, and restart waits longer than the run they are taken from (facts stored before
seed 10375 stamped them within the run, or an attempt counted only to its job's longest timeout)
leave no negative VM time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.fleet.estimate import estimate, summarize
from shared.fleet.observations import FleetFact, Kind

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
HOUR = 3600.0
WHERE = "us-east4"


def fact(kind: Kind, ago: float, seconds: float = 0.0, count: int = 0, index: int = 0) -> FleetFact:
    """A fact of attempt `a` in WHERE, `ago` seconds before NOW."""
    return FleetFact(kind, WHERE, NOW - timedelta(seconds=ago), seconds, count, "a", index)


def test_a_job_read_at_the_instant_it_started_has_run_no_vm_second() -> None:
    facts = [fact(Kind.WAIT, 0.0, seconds=HOUR)]  # waited an hour, running since now
    assert estimate(facts, WHERE, NOW).spot_vm_seconds == 0


# A preemption and its restart stamped late (facts stored before seed 10375's fix) may span more
# than the run they were taken from.
LATE_STAMPED = [
    fact(Kind.WAIT, 5 * HOUR),
    fact(Kind.PREEMPT, 4 * HOUR),
    fact(Kind.RESTART, HOUR, index=1),  # answered three hours later
    fact(Kind.RUN, 0.5 * HOUR, seconds=HOUR, count=1),  # the job's run: one hour
]


def test_a_run_shorter_than_its_answered_restart_wait_ran_no_vm_time_not_less() -> None:
    assert estimate(LATE_STAMPED, WHERE, NOW).spot_vm_seconds == 0


def test_its_compacted_summary_ran_no_vm_time_either() -> None:
    summary = summarize(LATE_STAMPED, NOW)
    assert summary.answered_restart_waits > summary.exposure  # the edge this is about
    assert summary.vm_seconds_ran == 0


def test_an_attempt_counted_to_its_longest_timeout_runs_no_negative_vm_time() -> None:
    """An attempt whose end the fleet never heard of counts its run only to the longest timeout
    a job may have; a restart wait answered past it is longer than that run, and leaves none."""
    facts = [
        fact(Kind.WAIT, 3 * HOUR),  # started three hours ago, no `run` fact: counted one hour
        fact(Kind.PREEMPT, 2.5 * HOUR),
        fact(Kind.RESTART, 0.5 * HOUR, index=1),  # two hours' wait, answered
    ]
    assert estimate(facts, WHERE, NOW, longest_job_seconds=HOUR).spot_vm_seconds == 0
