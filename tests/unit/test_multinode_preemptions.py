"""Preemptions of a multi-replica job (issue 44): each reclaimed VM is one preemption, and what
Vertex can have done grows with the replicas, so a job of several replicas is not cut off at a
one-replica job's seven.

How Vertex counts restarts for a job of several replicas is not documented (six per job, per VM
or per replica: the emulator's `spot_restart_count` modes, docs/local.md); the bound is the most
any reading allows: six restarts and seven preemptions per replica."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from spotjobs_kit.lines import KitRecord

from shared.clock import parse_iso
from shared.deciding.deadline import Placement, Situation, Work, preempted_often
from shared.deciding.decisions import Decision, Observation, decide
from shared.deciding.events import Signal
from shared.jobs import MAX_SPOT_PREEMPTIONS, MAX_SPOT_RESTARTS, JobState, job_replicas
from shared.ledger.records import RequestRecord
from tests.support.decide import JOB1, NOW, POLICY, job, make_record

MACHINE = {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8}


def layout(*replicas: int) -> dict[str, Any]:
    """A CustomJob whose pools hold these replicas (0: an empty placeholder pool)."""
    pools = [{"machineSpec": MACHINE, "replicaCount": str(n)} if n else {} for n in replicas]
    return {"displayName": "train", "jobSpec": {"workerPoolSpecs": pools}}


def running(*replicas: int) -> RequestRecord:
    record = make_record(request={"custom_job": layout(*replicas)})
    return decide(record, Observation(1, job(JobState.RUNNING, update=100)), POLICY, NOW).record


def service_line(record: RequestRecord, identity: str, update: float) -> Decision:
    observation = Observation(1, job(JobState.RUNNING, update=update), Signal.PREEMPTION, identity)
    return decide(copy.deepcopy(record), observation, POLICY, NOW)


def kit(event: str, run: int) -> KitRecord:
    return KitRecord(event=event, request_id="req-1", attempt=1, run=run, job_id="111", fields={"run": run})


def refused(decision: Decision) -> list[str]:
    return [l.event for l in decision.effects.lines if l.event in ("preemption_evidence_refused", "kit_line_refused")]


def test_replicas_are_counted_over_every_pool_skipping_placeholders() -> None:
    assert job_replicas(layout(1, 0, 3)) == 4
    assert job_replicas(layout(1)) == 1
    assert job_replicas({"displayName": "no pools"}) == 1


def test_each_reclaimed_vm_of_a_two_replica_job_counts_past_a_single_replicas_seven() -> None:
    # Four "every replica at once" reclaims of a 1 + 1 job: eight VMs, one service line each.
    record = running(1, 1)
    for k in range(8):
        decision = service_line(record, f"insert-{k}", 200 + k)
        assert refused(decision) == []
        record = decision.record
    assert record.attempts[0].preemptions == 8


def test_what_a_two_replica_job_can_claim_is_still_bounded() -> None:
    record = running(1, 1)
    for k in range(40):
        record = service_line(record, f"forged-{k}", 200 + k).record
    assert record.attempts[0].preemptions == 2 * MAX_SPOT_PREEMPTIONS
    # a one-replica job keeps its seven
    single = running(1)
    for k in range(10):
        single = service_line(single, f"forged-{k}", 200 + k).record
    assert single.attempts[0].preemptions == MAX_SPOT_PREEMPTIONS


def test_the_primarys_runs_of_a_two_replica_job_may_pass_six_restarts() -> None:
    # Counted per replica (six restarts each), the primary restarts with every whole-job restart.
    run = MAX_SPOT_RESTARTS + 1
    record = decide(
        running(1, 1), Observation(1, None, Signal.KIT, kit=kit("run_started", run), job_name=JOB1), POLICY, NOW
    )
    assert refused(record) == [] and record.record.attempts[0].preemptions == run
    past = 2 * MAX_SPOT_RESTARTS + 1
    beyond = decide(
        running(1, 1), Observation(1, None, Signal.KIT, kit=kit("run_started", past), job_name=JOB1), POLICY, NOW
    )
    assert refused(beyond) == ["kit_line_refused"]


def waiting_for_spot(hours_after: float) -> Situation:
    """A deadline request waiting for Spot `hours_after` the reclaim, with a changeover of slack
    beyond its net: where a preemption within `QUICK_PREEMPTION_HOURS` places it again at once."""
    now = NOW + timedelta(hours=hours_after)
    changeover, hour = 600.0, 3600.0
    return Situation(
        now=now,
        deadline=now + timedelta(seconds=5 * hour + 4 * changeover + 300.0),
        started=NOW - timedelta(hours=1),
        work=Work.in_seconds(int(10 * hour), int(5 * hour)),
        placement=Placement.WAITING_FOR_SPOT,
        placed_at=now - timedelta(minutes=1),
        changeover_seconds=changeover,
        review_seconds=300.0,
    )


def test_a_reclaim_of_both_vms_told_line_by_line_moves_the_job_as_one_vm_told_once() -> None:
    # One reclaim of a 1 + 1 job's two VMs is two preemptions (a service line each, the emulator's
    # `rich` profile; the kit tells one run), two times kept; the deadline rule's quick move asks
    # whether the job was preempted `QUICK_PREEMPTIONS` (one) times lately, so it reads the one
    # reclaim as a one-replica job's one preemption, never as two.
    one = service_line(running(1), "insert-0", 200).record
    both = running(1, 1)
    for k in range(2):
        both = service_line(both, f"insert-{k}", 200 + k).record
    one_vm = [parse_iso(t) for t in one.attempts[0].preempted_at]
    two_vms = [parse_iso(t) for t in both.attempts[0].preempted_at]
    assert (len(one_vm), len(two_vms)) == (1, 2)
    moved = [preempted_often(waiting_for_spot(hours), two_vms) for hours in (0.5, 3.9, 4.1)]
    assert moved == [preempted_often(waiting_for_spot(hours), one_vm) for hours in (0.5, 3.9, 4.1)]
    assert moved == [True, True, False]
