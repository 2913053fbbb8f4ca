"""The money path's promises in the simulator (docs/simulator.md, "A review of the money path"):
each invariant catches a planted violation and passes the truth beside it."""

from __future__ import annotations

import json

import pytest

from shared.deciding.notices import event_id
from shared.ledger.states import RequestStatus
from sim.invariants import preemptions_told_within_reclaimed_vms
from sim.world import World
from tests.support.sim_world import attempt_of, job, restore

TOPIC = "projects/sim-project/topics/notify-r1"


@pytest.fixture
def world() -> World:
    return World(0)


def tell(world: World, request_id: str, attempt: int, preemptions: int) -> None:
    """The `preempted` notification the product publishes to the request's own topic."""
    notice = {
        "version": 1,
        "event_id": event_id(request_id, attempt, "preempted", preemptions - 1),
        "request_id": request_id,
        "attempt": attempt,
        "kind": "preempted",
        "preemptions": preemptions,
    }
    world.pubsub.accept(TOPIC.rsplit("/", 1)[-1], json.dumps(notice).encode(), {"kind": "preempted"})


def test_a_stop_at_the_job_timeout_told_as_a_preemption_is_caught(world: World) -> None:
    stopped = job(world, "r1", 1, state="JOB_STATE_FAILED")
    stopped.fate = "timeout"  # Vertex stopped it at its timeout: no VM reclaimed
    restore(world, "r1", RequestStatus.REQUEUED, attempt_of(stopped), notify={"topic": TOPIC})
    tell(world, "r1-r2", 1, 1)  # its resubmit's, on the topic it copied: not r1's
    assert preemptions_told_within_reclaimed_vms(world) == []

    tell(world, "r1", 1, 1)

    [caught] = preemptions_told_within_reclaimed_vms(world)
    assert caught.detail == "r1 was told 1 preemption(s) of attempt 1; Vertex reclaimed 0 VMs of its job (timeout)"
    stopped.vms_reclaimed = 1  # a real preemption is told truthfully
    assert preemptions_told_within_reclaimed_vms(world) == []


def test_a_bill_other_than_what_vertex_ran_is_caught(world: World) -> None:
    from datetime import timedelta

    from shared.clock import iso
    from shared.ledger.records import Attempt, RequestRecord
    from shared.ledger.store import LedgerStore
    from sim.budgets import billed_as_vertex_ran

    now = world.clock.now()
    h100 = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "a3-highgpu-8g"}, "replicaCount": 2}]}}

    def ran_on_a100(request_id: str, machine: str | None) -> None:
        """An hour of a capacity alternative's two A100 80GB nodes on Spot, and its record naming
        `machine` as the one its attempt ran on."""
        ran = job(world, request_id, 1, state="JOB_STATE_SUCCEEDED")
        pool = ran.request["jobSpec"]["workerPoolSpecs"][0]
        pool["machineSpec"], pool["replicaCount"] = {"machineType": "a2-ultragpu-8g"}, 2
        ran.start_time, ran.end_time = now - timedelta(hours=1), now
        attempt = Attempt(1, "us-central1", "SPOT", claimed_at=iso(now), job=ran.name, machine=machine)
        attempt.state, attempt.started_at, attempt.ended_at = ran.state, iso(ran.start_time), iso(now)
        request = {"request_id": request_id, "custom_job": h100}
        record = RequestRecord(request_id, request, "gs://c/", RequestStatus.SUCCEEDED, attempts=[attempt])
        LedgerStore(world.storage.client().bucket(world.settings.state_bucket)).restore(record)

    ran_on_a100("r2", "a2-ultragpu-8g")
    assert billed_as_vertex_ran(world) == []
    ran_on_a100("r3", None)  # billed on the request's own H100s, as the report read a record before 2026-12-07
    [caught] = billed_as_vertex_ran(world)
    assert caught.detail == "r3 is billed $37.9580; Vertex ran its jobs for $44.1527"
