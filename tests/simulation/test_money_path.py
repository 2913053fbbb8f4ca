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
    assert preemptions_told_within_reclaimed_vms(world) == []

    tell(world, "r1", 1, 1)

    [caught] = preemptions_told_within_reclaimed_vms(world)
    assert caught.detail == "r1 was told 1 preemption(s) of attempt 1; Vertex reclaimed 0 VMs of its job (timeout)"
    stopped.vms_reclaimed = 1  # a real preemption is told truthfully
    assert preemptions_told_within_reclaimed_vms(world) == []
