"""The bound Vertex puts on what a fact may tell (shared/fleet/observations.py, `within_bound`)
for a compacted attempt of several replicas: seven preemptions per VM, as for its run."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.fleet.observations import AttemptSummary, FleetFact, Kind, within_bound
from shared.jobs import MAX_SPOT_PREEMPTIONS

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
LOC = "us-east4"


def compacted(preemptions: int, replicas: int = 1) -> FleetFact:
    summary = AttemptSummary(exposure=36000, preemptions=preemptions, replicas=replicas)
    return FleetFact(Kind.ATTEMPT, LOC, T0, attempt_key="k", summary=summary)


def test_a_compacted_attempt_may_tell_seven_preemptions_per_replica_and_no_more() -> None:
    assert within_bound(compacted(2 * MAX_SPOT_PREEMPTIONS, replicas=2))
    assert not within_bound(compacted(2 * MAX_SPOT_PREEMPTIONS + 1, replicas=2))
    assert within_bound(compacted(MAX_SPOT_PREEMPTIONS))
    assert not within_bound(compacted(MAX_SPOT_PREEMPTIONS + 1))


def test_a_compacted_attempt_of_no_preemptions_is_read_and_a_negative_count_is_not() -> None:
    assert within_bound(compacted(0))
    assert not within_bound(compacted(-1))


def test_a_fact_that_says_no_replicas_is_bounded_as_one_vm() -> None:
    assert within_bound(FleetFact(Kind.RUN, LOC, T0, count=MAX_SPOT_PREEMPTIONS, replicas=0))
    assert not within_bound(FleetFact(Kind.RUN, LOC, T0, count=MAX_SPOT_PREEMPTIONS + 1, replicas=0))
