"""`object_deleted` at its worst moment (sim/faults.py, `delete_record_at_a_create`; review s10): a
person deletes the record of a request whose create is on its way to Vertex while another delivery
of the request runs, once a seed; never without such a delivery beside it, nor in a seed that did
not draw `object_deleted`."""

from __future__ import annotations

import json

import pytest

from shared.ledger.states import RequestStatus
from sim import faults
from sim.world import Task, World
from tests.support.sim_world import restore

SEED = 0  # its own generator draws the deletion for this seed (DELETED_AT_A_CREATE_RATE)


@pytest.fixture
def world() -> World:
    world = World(SEED)
    world.permanent = faults.PermanentFaults(kinds=frozenset({"object_deleted"}))
    restore(world, "r1", RequestStatus.CLAIMED)
    return world


def another_delivery_of(world: World, request_id: str) -> None:
    body = json.dumps({"request_id": request_id, "custom_job": {}}).encode()
    message_id = world.pubsub.accept(world.settings.job_requests_topic, body, {})
    task = Task("submit_job", lambda: None, faulty=True)
    task.origin = message_id
    world.tasks.append(task)


def record_exists(world: World) -> bool:
    return "requests/r1.json" in world.storage.objects(world.settings.state_bucket)


def test_the_record_goes_while_its_create_is_out_beside_another_delivery_of_it(world: World) -> None:
    another_delivery_of(world, "r1")
    faults.delete_record_at_a_create(world, "r1")
    assert not record_exists(world)
    assert world.tampering.deleted_at_a_create == "r1" and "r1" in world.tampering.deleted_records


def test_nothing_goes_without_another_delivery_or_the_fault(world: World) -> None:
    another_delivery_of(world, "r2")
    faults.delete_record_at_a_create(world, "r1")
    assert record_exists(world)
    world.permanent = faults.PermanentFaults()
    another_delivery_of(world, "r1")
    faults.delete_record_at_a_create(world, "r1")
    assert record_exists(world)
