"""The simulator's placement world and its move invariant: requests allowed in two or more
locations and Spot outages per location are drawn; `moves_allowed` reports a move planted in a
world (no handler runs) to a location the request or the deployment does not allow, back where the
job waited, or decided after the request's cancel or end, and leaves a move within the rules alone."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest

from shared.clock import iso
from shared.ledger.records import Attempt, CancelIntent, RequestRecord
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.ledger.store import LedgerStore
from sim import invariants
from sim.workload import EAST, HOME, OTHER_REGION
from sim.world import World


@pytest.fixture
def world() -> World:
    return World(0)


def moved_record(world: World, to: str, **fields: object) -> None:
    at = iso(world.clock.now())
    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
    attempts = [
        Attempt(1, HOME, "SPOT", claimed_at=at, outcome=AttemptOutcome.MOVED, cancel_decided_at=at),
        Attempt(2, to, "SPOT", claimed_at=at),
    ]
    request = {"custom_job": {}, "location": HOME, "locations": [HOME, EAST]}
    ledger.restore(RequestRecord("r1", request, "gs://c/", status=RequestStatus.SUBMITTED, attempts=attempts, **fields))


def test_a_move_within_the_request_and_the_deployment_is_allowed(world: World) -> None:
    moved_record(world, EAST)
    assert invariants.moves_allowed(world) == []


def test_a_move_out_of_the_requests_locations_is_caught(world: World) -> None:
    moved_record(world, OTHER_REGION)
    [found] = invariants.moves_allowed(world)
    assert found.invariant == "moves_allowed" and f"to {OTHER_REGION}, not in the request's locations" in found.detail


def test_a_move_whose_attempt_runs_where_it_waited_is_caught(world: World) -> None:
    moved_record(world, HOME)
    [found] = invariants.moves_allowed(world)
    assert f"to {HOME}, where it waited: attempt 2 runs there again" in found.detail


def test_a_move_the_deployment_does_not_allow_is_caught(world: World) -> None:
    world.settings = replace(world.settings, allowed_locations=(HOME,))
    moved_record(world, EAST)
    [found] = invariants.moves_allowed(world)
    assert "which the deployment does not allow" in found.detail


def test_a_move_after_the_cancel_or_the_end_is_caught(world: World) -> None:
    before = iso(world.clock.now() - timedelta(seconds=1))
    moved_record(world, EAST, cancel=CancelIntent("ana", before), finished_at=before)
    found = invariants.moves_allowed(world)
    assert [v.detail.split(", ")[1].split(" at ")[0] for v in found] == [
        "after the request's cancel",
        "after the request finished",
    ]


def test_the_workload_allows_some_h100_requests_two_locations_and_draws_spot_outages() -> None:
    drawn = [World(seed).workload for seed in range(12)]
    bodies = [json.loads(a.data) for w in drawn for a in w.arrivals if b"a3-highgpu-8g" in a.data]
    # (a request with capacity alternatives may have one location: its moves go to another machine)
    assert bodies and all(HOME in b["locations"] and EAST in b["locations"] for b in bodies if "capacity" not in b)
    outages = [o for w in drawn for spans in w.spot_outages.values() for o in spans]
    assert outages and all(end > start for start, end in outages)
    workload = next(w for w in drawn if w.spot_outages)
    location, [(start, end)] = next(iter(workload.spot_outages.items()))
    assert workload.spot_capacity_back(location, start) == end
    assert workload.spot_capacity_back(location, end) is None


def test_a_job_off_the_requests_capacity_alternatives_is_caught(world: World) -> None:
    from shared.requests.capacity import machine_spec
    from sim.vertex import Create
    from tests.support.sim_world import job

    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
    capacity = [
        {"machine": "a3-highgpu-8g", "strategies": ["SPOT"]},
        {"machine": "a2-ultragpu-8g", "strategies": ["SPOT"]},
    ]
    at = iso(world.clock.now())
    request = {"custom_job": {}, "location": HOME, "capacity": capacity}
    ledger.restore(RequestRecord("r1", request, "gs://c/", attempts=[Attempt(1, HOME, "SPOT", claimed_at=at)]))
    on_an_alternative = job(world, "r1", 1).request
    on_an_alternative["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] = machine_spec("a2-ultragpu-8g")
    world.vertex.created.append(Create(world.clock.now(), HOME, on_an_alternative, True))
    assert invariants.alternatives_kept(world) == []

    own_machine = job(world, "r1", 2).request  # the request's own n1 machine, not an alternative
    flex = json.loads(json.dumps(on_an_alternative))
    flex["jobSpec"]["scheduling"]["strategy"] = "FLEX_START"  # not listed for it
    world.vertex.created += [
        Create(world.clock.now(), HOME, own_machine, True),
        Create(world.clock.now(), HOME, flex, True),
    ]

    found = [v.detail for v in invariants.alternatives_kept(world)]
    assert len(found) == 2 and "runs n1-standard-4 SPOT: not listed" in found[0]
    assert "runs a2-ultragpu-8g FLEX_START: not listed" in found[1]


def test_the_workload_draws_capacity_alternatives_on_one_location_and_on_several() -> None:
    drawn = [
        json.loads(a.data)
        for seed in range(12)
        for a in World(seed).workload.arrivals
        if a.topic == "job_requests_topic" and b'"capacity"' in a.data
    ]
    assert drawn and {len(body["locations"]) for body in drawn} >= {1, 2}
