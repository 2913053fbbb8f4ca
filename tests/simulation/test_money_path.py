"""The money path's promises in the simulator (docs/simulator.md, "A review of the money path"):
each invariant catches a planted violation and passes the truth beside it."""

from __future__ import annotations

import json
from typing import Any

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


def test_budgets_beside_deadlines_and_fallbacks_leave_every_other_draw_as_it_was() -> None:
    from sim.budgets import WORK_BUDGET_FACTORS, with_work_budgets
    from sim.workload import Workload

    def cost_on_spot(body: dict[str, Any]) -> float:
        from shared.requests.pricing import layout_hourly

        hours = body["total_steps"] * body["expected_step_seconds"] / 3600
        locations = body.get("locations") or [body.get("location") or "us-central1"]
        return min(p[0] for loc in locations if (p := layout_hourly(body, loc)) is not None) * hours

    budgeted: dict[str, int] = {"deadline": 0, "fallback": 0}
    for seed in range(20):
        workload: Workload = World(seed).workload
        sent = [json.loads(a.data) for a in workload.arrivals if a.topic == "job_requests_topic"]
        for arrival in workload.arrivals:
            kind = arrival.label.removeprefix("retry of ").split()[0]
            if kind not in budgeted or b'"max_cost_usd"' not in arrival.data:
                continue
            budgeted[kind] += 1
            body = json.loads(arrival.data)
            if kind == "deadline":  # sized to its work: payable on Spot, on demand only at the larger factors
                factor = body["max_cost_usd"] / cost_on_spot(body)
                assert min(WORK_BUDGET_FACTORS) - 0.1 < factor < max(WORK_BUDGET_FACTORS) + 0.1
            del body["max_cost_usd"]
            arrival.data = json.dumps(body, separators=(",", ":")).encode()
        with_work_budgets(workload)  # drawn again: the same budgets, nothing else touched
        assert [json.loads(a.data) for a in workload.arrivals if a.topic == "job_requests_topic"] == sent
    assert budgeted["deadline"] and budgeted["fallback"]


def test_a_bill_that_leaves_out_more_than_the_waits_after_a_preemption_is_caught(world: World) -> None:
    from datetime import timedelta

    from shared.clock import iso
    from shared.ledger.records import Attempt, RequestRecord
    from shared.ledger.store import LedgerStore
    from sim.budgets import billed_as_vertex_ran

    now = world.clock.now()
    a100 = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "a2-highgpu-1g"}, "replicaCount": 1}]}}

    def waited_half_an_hour(request_id: str, rewaited_seconds: float) -> None:
        """Two hours from its start to its end, half an hour of it waiting for a machine after a
        preemption; its record leaves `rewaited_seconds` out of its run time."""
        ran = job(world, request_id, 1, state="JOB_STATE_SUCCEEDED")
        ran.request["jobSpec"]["workerPoolSpecs"] = a100["jobSpec"]["workerPoolSpecs"]
        ran.start_time, ran.end_time = now - timedelta(hours=2), now
        ran.restart_waits = [(now - timedelta(hours=1), now - timedelta(minutes=30))]
        attempt = Attempt(1, "us-central1", "SPOT", claimed_at=iso(now), job=ran.name)
        attempt.state, attempt.started_at, attempt.ended_at = ran.state, iso(ran.start_time), iso(now)
        attempt.rewaited_seconds = rewaited_seconds
        request = {"request_id": request_id, "custom_job": a100}
        record = RequestRecord(request_id, request, "gs://c/", RequestStatus.SUCCEEDED, attempts=[attempt])
        LedgerStore(world.storage.client().bucket(world.settings.state_bucket)).restore(record)

    waited_half_an_hour("r4", 0)  # no read saw the wait: all of it billed
    waited_half_an_hour("r5", 1800)  # a read saw it all
    assert billed_as_vertex_ran(world) == []
    waited_half_an_hour("r6", 3600)  # an hour left out: more than Vertex waited
    [caught] = billed_as_vertex_ran(world)
    assert caught.detail == (
        "r6 is billed $1.9280; Vertex ran its jobs for $2.8920 to $3.8560 (its waits after a preemption, its strays)"
    )


def test_a_bill_that_leaves_out_a_stray_the_code_cancelled_or_bills_it_past_its_run_is_caught(world: World) -> None:
    """A second job of attempt 1 (a create whose answer was lost, then another) ran an hour on an
    A100 beside the attempt's own before the stray sweep cancelled it: Vertex billed both."""
    from datetime import timedelta

    from shared.clock import iso
    from shared.ledger.records import Attempt, RequestRecord, Stray
    from shared.ledger.store import LedgerStore
    from sim.budgets import billed_as_vertex_ran

    now = world.clock.now()
    a100 = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "a2-highgpu-1g"}, "replicaCount": 1}]}}

    def ran_an_hour(request_id: str) -> Any:
        ran = job(world, request_id, 1, state="JOB_STATE_SUCCEEDED")
        ran.request["jobSpec"]["workerPoolSpecs"] = a100["jobSpec"]["workerPoolSpecs"]
        ran.start_time, ran.end_time = now - timedelta(hours=1), now
        return ran

    def with_a_stray(request_id: str, noted: bool, seen_until: timedelta) -> None:
        own, stray = ran_an_hour(request_id), ran_an_hour(request_id)
        stray.state = "JOB_STATE_CANCELLED"
        world.vertex.cancels.append((now, stray.name, "reconcile"))
        attempt = Attempt(1, "us-central1", "SPOT", claimed_at=iso(now), job=own.name)
        attempt.state, attempt.started_at, attempt.ended_at = own.state, iso(own.start_time), iso(now)
        request = {"request_id": request_id, "custom_job": a100}
        record = RequestRecord(request_id, request, "gs://c/", RequestStatus.SUCCEEDED, attempts=[attempt])
        if noted:
            pools = a100["jobSpec"]["workerPoolSpecs"]
            seen = iso(now - timedelta(hours=1) + seen_until)
            record.strays = [Stray(stray.name, 1, "us-central1", "SPOT", pools, seen, iso(stray.start_time))]
        LedgerStore(world.storage.client().bucket(world.settings.state_bucket)).restore(record)

    with_a_stray("r7", True, timedelta(minutes=50))  # billed to a read 10 minutes before its end
    assert billed_as_vertex_ran(world) == []

    with_a_stray("r8", False, timedelta(0))  # in no bill, as before 2026-12-07
    [caught] = billed_as_vertex_ran(world)
    assert caught.detail.startswith("r8's bill leaves out its stray job projects/")
    assert caught.detail.endswith("which the code cancelled and Vertex billed")

    world.storage.objects(world.settings.state_bucket).pop("requests/r8.json")
    with_a_stray("r9", True, timedelta(hours=2))  # billed an hour past its end
    [caught] = billed_as_vertex_ran(world)
    assert caught.detail.startswith("r9 is billed $5.7841; Vertex ran its jobs for $1.9280 to $3.8560")
