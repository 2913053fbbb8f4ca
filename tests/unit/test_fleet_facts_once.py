"""One fleet fact stored under two names counts once. A fact's name carries its time
(shared/fleet/store.py), so the same (attempt, kind, index) can be stored twice: a preemption
recorded by two observations that saw the job at different moments (its count lowered by a stop and
raised again), or written with a fractional time floored before seed 10044's fix and rounded up
after it. The estimate, and the compaction that folds an attempt into its sums, read each once, at
the earliest time (when the first observation saw it), from old names and new alike."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.fleet import store
from shared.fleet.estimate import estimate, summarize
from shared.fleet.observations import FleetFact, Kind, MachineClass, epoch
from sim.gcs import MemoryStorage

NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)
CPU = MachineClass("n1-standard-8")
HERE = "us-central1"
STARTED = NOW - timedelta(hours=3)


def bucket() -> Any:
    return MemoryStorage(clock=lambda: NOW).client().bucket("state")


def ran_with_one_preemption(key: str, started: datetime = STARTED) -> list[FleetFact]:
    """A Spot job that got capacity at `started` and ran 3 h, preempted once, 1 h in."""
    return [
        FleetFact(Kind.WAIT, HERE, started, 300.0, attempt_key=key),
        FleetFact(Kind.PREEMPT, HERE, started + timedelta(hours=1), attempt_key=key),
        FleetFact(Kind.RUN, HERE, started + timedelta(hours=3), 3 * 3600.0, 1, attempt_key=key),
    ]


def test_a_preemption_recorded_by_two_observations_counts_once() -> None:
    state = bucket()
    facts = ran_with_one_preemption("k-1")
    again = FleetFact(Kind.PREEMPT, HERE, STARTED + timedelta(hours=1, minutes=7), attempt_key="k-1")
    store.write_facts(state, CPU, [*facts, again])
    assert len(list(state.client.list_blobs(state, prefix="fleet/"))) == 4  # two names, one fact
    seen = estimate(store.read(state, CPU, NOW), HERE, NOW)
    assert seen.preemptions == 1
    assert seen.mean_lifetime_seconds == 3 * 3600.0  # the run's 3 h per preemption, not per name


def test_a_preemption_floored_before_the_fix_and_rounded_up_after_it_counts_once() -> None:
    state = bucket()
    seen_at = STARTED + timedelta(hours=1, seconds=0.858)
    facts = ran_with_one_preemption("k-1")
    store.write_facts(state, CPU, [facts[0], facts[2]])
    rounded_up = store.object_name(CPU, FleetFact(Kind.PREEMPT, HERE, seen_at, attempt_key="k-1"))
    floored = rounded_up.replace(f"~{math.ceil(seen_at.timestamp())}~", f"~{epoch(seen_at)}~")
    assert floored != rounded_up
    for name in (floored, rounded_up):
        state.blob(name).upload_from_string(b"")
    read = store.read(state, CPU, NOW)
    assert estimate(read, HERE, NOW).preemptions == 1
    assert summarize(read, NOW).restart_waits == 2 * 3600  # from the earlier name to the run's end


def test_a_restart_recorded_twice_answers_its_wait_once() -> None:
    # Preempted at 1 h, restarted at 1.5 h (recorded again at 2 h), preempted at 2.5 h and never
    # restarted: a second restart would answer the second preemption before it happened.
    key = "k-1"
    facts = [
        FleetFact(Kind.WAIT, HERE, STARTED, 300.0, attempt_key=key),
        FleetFact(Kind.PREEMPT, HERE, STARTED + timedelta(hours=1), attempt_key=key),
        FleetFact(Kind.RESTART, HERE, STARTED + timedelta(hours=1.5), attempt_key=key, index=1),
        FleetFact(Kind.RESTART, HERE, STARTED + timedelta(hours=2), attempt_key=key, index=1),
        FleetFact(Kind.PREEMPT, HERE, STARTED + timedelta(hours=2.5), attempt_key=key, index=1),
        FleetFact(Kind.RUN, HERE, NOW, 3 * 3600.0, 2, attempt_key=key),
    ]
    summary = summarize(facts, NOW)
    assert (summary.preemptions, summary.answered_restart_waits, summary.restart_waits) == (2, 1800, 1800 + 1800)


def test_a_compacted_attempt_sums_a_fact_stored_twice_once() -> None:
    state = bucket()
    key = "k-1"
    started = NOW - timedelta(days=2)
    facts = ran_with_one_preemption(key, started)
    again = FleetFact(Kind.PREEMPT, HERE, started + timedelta(hours=1, minutes=7), attempt_key=key)
    store.write_facts(state, CPU, [*facts, again])
    assert store.compact(state, CPU, NOW) == 1
    [folded] = store.read(state, CPU, NOW)
    assert folded.summary is not None and folded.summary.preemptions == 1
