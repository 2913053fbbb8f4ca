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


def keyed_live_job(world: World, n: int, kit_key: str) -> None:
    from shared.jobs import ENV_KIT_KEY
    from sim.vertex import SimJob

    labels = {"spotjobs-request-id": "r1", "spotjobs-attempt": "1", "spotjobs-deployment": "sim"}
    env = [{"name": ENV_KIT_KEY, "value": kit_key}]
    request = {"labels": labels, "jobSpec": {"workerPoolSpecs": [{"containerSpec": {"env": env}}]}}
    name = f"projects/p/locations/us-central1/customJobs/{n}"
    now = world.clock.now()
    world.vertex.jobs[name] = SimJob(name, "us-central1", request, labels, "JOB_STATE_QUEUED", now, now)
    world.vertex._indexed += 1  # the jobs moved: the checker looks again


def test_the_deleted_claims_job_beside_the_new_claims_is_no_second_live_job_only_then() -> None:
    """Two creates no code can stop: the one out when the record went, and the new claim's."""
    from shared.ledger.records import Attempt
    from sim import invariants

    world = World(SEED)
    restore(world, "r1", RequestStatus.CLAIMED, Attempt(1, "us-central1", "SPOT", claimed_at="x", kit_key="ab" * 32))
    keyed_live_job(world, 1, "cd" * 32)  # the deleted claim's
    keyed_live_job(world, 2, "ab" * 32)  # the new claim's
    assert [v.invariant for v in invariants.one_live_job_per_request(world)] == ["one_live_job_per_request"]

    world.tampering.deleted_at_a_create = "r1"
    world.checked.clear()
    assert invariants.one_live_job_per_request(world) == []
