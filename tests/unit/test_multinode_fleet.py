"""The fleet's facts of a multi-replica attempt (issue 44): each replica is a VM Spot can reclaim,
so a class's mean lifetime is per VM (time on Spot in VM-seconds over the VMs reclaimed), the
bound on an attempt's preemptions scales with its replicas, and placement reads the job's expected
Spot run as the per-VM lifetime over its replicas."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.fleet import store
from shared.fleet.estimate import CapacityEstimate, estimate, summarize
from shared.fleet.observations import FleetFact, Kind, MachineClass, Reading, observations_of, within_bound
from shared.fleet.placement import Candidate, Job, Move, expected_cost
from shared.fleet.placing import Placer
from shared.jobs import MAX_SPOT_PREEMPTIONS, MAX_SPOT_RESTARTS
from shared.ledger.records import Attempt, RequestRecord

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
H100 = {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8}
CLASS = MachineClass("a3-highgpu-8g", "NVIDIA_H100_80GB", 8)
LOC = "us-east4"


def job(replicas: int) -> dict[str, Any]:
    pools = [{"machineSpec": H100, "replicaCount": 1}]
    if replicas > 1:
        pools.append({"machineSpec": H100, "replicaCount": replicas - 1})
    return {"custom_job": {"jobSpec": {"workerPoolSpecs": pools}}}


def at(hours: float) -> str:
    return (T0 + timedelta(hours=hours)).isoformat().replace("+00:00", "Z")


def ran(replicas: int, hours: float, preemptions: int, ended: bool = True) -> RequestRecord:
    """A Spot attempt of `replicas` VMs that ran `hours` (started at once) with `preemptions`."""
    attempt = Attempt(
        1,
        LOC,
        "SPOT",
        claimed_at=at(0),
        job="j1",
        created_at=at(0),
        started_at=at(0),
        ended_at=at(hours) if ended else None,
        preemptions=preemptions,
    )
    return RequestRecord("r1", job(replicas), "gs://c/r1", attempts=[attempt])


def facts_of(record: RequestRecord) -> list[FleetFact]:
    return [o.stamped(T0 + timedelta(hours=1)) for o in observations_of(record)]


def lifetime_hours(facts: list[FleetFact], now: datetime) -> float:
    lifetime = estimate(facts, LOC, now).mean_lifetime_seconds
    assert lifetime is not None
    return lifetime / 3600


def test_a_two_replica_attempt_of_ten_hours_with_two_reclaims_lives_ten_hours_per_vm() -> None:
    facts = facts_of(ran(2, 10, 2))
    assert {o.replicas for o in facts if o.kind in (Kind.WAIT, Kind.RUN)} == {2}
    assert lifetime_hours(facts, T0 + timedelta(hours=11)) == pytest.approx(10.0)
    one_vm = facts_of(ran(1, 10, 2))  # one VM reclaimed twice in ten hours: five hours each
    assert lifetime_hours(one_vm, T0 + timedelta(hours=11)) == pytest.approx(5.0)


def test_an_open_multi_replica_run_counts_every_vms_time() -> None:
    facts = facts_of(ran(2, 0, 2, ended=False))
    assert lifetime_hours(facts, T0 + timedelta(hours=10)) == pytest.approx(10.0)


def test_share_of_time_with_capacity_stays_in_the_jobs_time() -> None:
    # two VMs that had capacity all along: the share is the job's, the same as one VM's
    now = T0 + timedelta(hours=11)
    two, one = estimate(facts_of(ran(2, 10, 0)), LOC, now), estimate(facts_of(ran(1, 10, 0)), LOC, now)
    assert two.share_available == pytest.approx(one.share_available)


def test_compaction_keeps_the_replica_count_and_the_estimates_lifetime() -> None:
    facts = facts_of(ran(2, 10, 2))
    now = T0 + timedelta(days=2)
    summary = FleetFact(Kind.ATTEMPT, LOC, T0 + timedelta(hours=10), attempt_key="k", summary=summarize(facts, now))
    assert summary.summary is not None and summary.summary.replicas == 2
    name = store.object_name(CLASS, summary)
    parsed = store.parse_name(name)
    assert parsed is not None and parsed[1] == summary
    assert lifetime_hours([parsed[1]], now) == pytest.approx(lifetime_hours(facts, now))


def test_facts_stored_without_a_replica_count_read_as_one_replica() -> None:
    old_run = "fleet/a3-highgpu-8g+nvidia_h100_80gb+8/us-east4/run~1764590400~36000~2~k~0"
    old_summary = "fleet/a3-highgpu-8g+nvidia_h100_80gb+8/us-east4/attempt~1764590400~k~36000~0~2~0~0~-"
    for name in (old_run, old_summary):
        parsed = store.parse_name(name)
        assert parsed is not None
        fact = parsed[1]
        assert (fact.summary.replicas if fact.summary else fact.replicas) == 1
        assert store.object_name(CLASS, fact) == name  # a one-replica fact keeps its name (written once)


def test_a_multi_replica_attempt_may_tell_seven_preemptions_per_replica_and_no_more() -> None:
    two = [o for o in facts_of(ran(2, 10, 20)) if o.kind is Kind.PREEMPT]
    assert len(two) == 2 * MAX_SPOT_PREEMPTIONS
    run = next(o for o in facts_of(ran(2, 10, 20)) if o.kind is Kind.RUN)
    assert run.count == 2 * MAX_SPOT_PREEMPTIONS and within_bound(run)
    assert not within_bound(FleetFact(Kind.RUN, LOC, T0, count=2 * MAX_SPOT_PREEMPTIONS + 1, replicas=2))
    assert not within_bound(FleetFact(Kind.RUN, LOC, T0, count=MAX_SPOT_PREEMPTIONS + 1))  # one replica: seven
    # a preemption's index is bounded by its attempt's replicas (its wait or run says how many)
    now = T0 + timedelta(hours=11)
    assert estimate(facts_of(ran(2, 10, 14)), LOC, now).mean_lifetime_seconds == pytest.approx(20 * 3600 / 14)


def test_a_multi_replica_attempt_may_tell_six_restarts_per_replica_and_no_more() -> None:
    # The Spot page's "restart the job up to six times" does not say per job or per replica; the
    # deciding room's bound on a kit line's run (`max_restarts`) reads it per replica, so do the facts.
    reading = Reading(runs_started=lambda record, n: set(range(3 * MAX_SPOT_RESTARTS)))
    two = [o for o in observations_of(ran(2, 10, 2), reading) if o.kind is Kind.RESTART]
    assert [o.index for o in two] == list(range(1, 2 * MAX_SPOT_RESTARTS + 1))
    assert all(within_bound(o, 2) for o in two)
    assert not within_bound(FleetFact(Kind.RESTART, LOC, T0, index=2 * MAX_SPOT_RESTARTS + 1), 2)
    one = [o for o in observations_of(ran(1, 10, 2), reading) if o.kind is Kind.RESTART]
    assert [o.index for o in one] == list(range(1, MAX_SPOT_RESTARTS + 1))
    assert not within_bound(FleetFact(Kind.RESTART, LOC, T0, index=MAX_SPOT_RESTARTS + 1), 1)


def test_a_preemption_past_its_attempts_bound_is_not_read() -> None:
    # a stored seventh-plus preemption of a one-replica attempt (written before the bound)
    now = T0 + timedelta(hours=11)
    facts = facts_of(ran(1, 10, 7))
    late = FleetFact(Kind.PREEMPT, LOC, T0 + timedelta(hours=1), attempt_key=facts[0].attempt_key, index=7)
    assert estimate([*facts, late], LOC, now).mean_lifetime_seconds == pytest.approx(10 * 3600 / 7)


def seen(lifetime_hours: float) -> CapacityEstimate:
    return CapacityEstimate(LOC, 1.0, 3.0, lifetime_hours * 3600, False, 600.0, None, 0, share_available=1.0)


def test_placement_reads_the_jobs_expected_spot_run_as_the_per_vm_lifetime_over_its_replicas() -> None:
    # one VM's lifetime 10 h: a 2-replica job is reclaimed every 5 h, so it pays twice the changeovers
    candidate = Candidate(LOC, 10.0, 50.0, seen(10))
    two = expected_cost(Job(10, 1, None, replicas=2), candidate, Move())
    five = expected_cost(Job(10, 1, None), Candidate(LOC, 10.0, 50.0, seen(5)), Move())
    assert two.cost == pytest.approx(five.cost)


def test_the_placer_gives_the_model_the_requests_replicas() -> None:
    placer = Placer(lambda _: [], lambda _m, _l: (1.0, 2.0), T0, 1200)
    placed = placer._job(job(3), Attempt(1, LOC, "SPOT", claimed_at=at(0)), None, None, [Candidate(LOC, 1, 2)])
    assert placed.replicas == 3


def test_a_deadline_requests_outlook_is_its_jobs_spot_run() -> None:
    # the deadline rule's mean outage L (1 - p) / p is of the job's runs: one VM's lifetime / R
    facts = facts_of(ran(2, 10, 2))
    placer = Placer(lambda _: facts, lambda _m, _l: (1.0, 2.0), T0 + timedelta(hours=11), 1200)
    one_vm = estimate(facts, LOC, T0 + timedelta(hours=11)).outlook
    outlook = placer.spot_outlook({**job(2), "deadline": at(48)}, LOC)
    assert one_vm is not None and outlook is not None
    assert outlook.mean_lifetime_seconds == pytest.approx(one_vm.mean_lifetime_seconds / 2)
    assert outlook.share_available == one_vm.share_available


def test_several_vms_reclaimed_at_once_wait_once_for_their_restart() -> None:
    # Both VMs of a two-replica job reclaimed at 1 h (two preemptions, one per VM), the job back at
    # 1.5 h (one restart), running on to 10 h: one wait of half an hour. Paired preemption by
    # restart, the second VM's preemption waited for a restart that never came, until the end: 9.5 h
    # of waits in a 10-hour run, and Spot there "had capacity" 9% of the time.
    facts = [
        FleetFact(Kind.WAIT, LOC, T0, 0.0, attempt_key="k", replicas=2),
        FleetFact(Kind.PREEMPT, LOC, T0 + timedelta(hours=1), attempt_key="k", index=0),
        FleetFact(Kind.PREEMPT, LOC, T0 + timedelta(hours=1), attempt_key="k", index=1),
        FleetFact(Kind.RESTART, LOC, T0 + timedelta(hours=1.5), attempt_key="k", index=1),
        FleetFact(Kind.RUN, LOC, T0 + timedelta(hours=10), 10 * 3600.0, 2, attempt_key="k", replicas=2),
    ]
    now = T0 + timedelta(hours=10)
    assert summarize(facts, now).restart_waits == 1800
    assert estimate(facts, LOC, now).share_available == pytest.approx((9.5 * 3600 + 1800) / (10 * 3600 + 3600))


def test_a_preemption_recorded_after_the_restart_that_answered_it_waited_nothing() -> None:
    # the kit's run_started first, then the preemption's service line; a later preemption of the
    # same one-replica job, no restart since: it waits to the end
    facts = [
        FleetFact(Kind.WAIT, LOC, T0, 0.0, attempt_key="k"),
        FleetFact(Kind.RESTART, LOC, T0 + timedelta(hours=1), attempt_key="k", index=1),
        FleetFact(Kind.PREEMPT, LOC, T0 + timedelta(hours=1.1), attempt_key="k", index=0),
        FleetFact(Kind.PREEMPT, LOC, T0 + timedelta(hours=4), attempt_key="k", index=1),
        FleetFact(Kind.RUN, LOC, T0 + timedelta(hours=5), 5 * 3600.0, 2, attempt_key="k"),
    ]
    assert summarize(facts, T0 + timedelta(hours=6)).restart_waits == 3600
