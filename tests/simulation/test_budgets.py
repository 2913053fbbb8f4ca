"""Budgets in the simulator (sim/budgets.py): the workload gives some requests a `max_cost_usd`
without moving the seed's other draws, and each promise catches a planted violation."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from shared.alerts import Alert, AlertKind
from shared.clock import iso
from shared.deciding.budget_watch import BUDGET_SOURCE
from shared.ledger.records import Attempt, CancelIntent, RequestRecord, Stray
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from sim import budgets, promises
from sim.world import World

A100 = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "a2-highgpu-1g"}, "replicaCount": 1}]}}


@pytest.fixture
def world() -> World:
    return World(0)


def ran(world: World, request_id: str, hours: float, limit: float, **fields: Any) -> None:
    """A record of one Spot attempt that ran `hours` in us-central1 and ended now."""
    now = world.clock.now()
    started = iso(now - timedelta(hours=hours))
    attempt = Attempt(
        1,
        "us-central1",
        "SPOT",
        claimed_at=started,
        job="j",
        state="JOB_STATE_CANCELLED",
        started_at=started,
        ended_at=iso(now),
    )
    request = {"request_id": request_id, "custom_job": A100, "max_cost_usd": limit}
    LedgerStore(world.storage.client().bucket(world.settings.state_bucket)).restore(
        RequestRecord(request_id, request, "gs://c/", status=RequestStatus.CANCELLED, attempts=[attempt], **fields)
    )


def publish_alert(world: World, request_id: str) -> None:
    alert = Alert.of(AlertKind.BUDGET_REACHED, "said", request_id=request_id).to_json()
    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})


def test_some_seeds_draw_budgets_and_the_draw_moves_nothing_else() -> None:
    drawn = [World(seed).workload for seed in range(12)]
    with_budget = [a for w in drawn for a in w.arrivals if b'"max_cost_usd"' in a.data]
    # GPU requests only (placement's world makes some of them H100s afterwards).
    assert with_budget and all(b'"a2-highgpu-1g"' in a.data or b'"a3-highgpu-8g"' in a.data for a in with_budget)
    body: dict[str, Any] = {"request_id": "r1"}
    at = drawn[0].arrivals[0].at
    budgets.with_budget(body, "r1", at)
    again: dict[str, Any] = {"request_id": "r1"}
    budgets.with_budget(again, "r1", at)
    assert body == again  # its own generator: the same request draws the same budget


def test_a_spend_past_the_budget_without_its_alert_is_caught(world: World) -> None:
    ran(world, "r-over", hours=1, limit=0.5)  # about $1.93 spent
    assert [e.request_id for e in budgets.budgets_reached(world)] == ["r-over"]
    assert [v.detail for v in promises.owed_alerts(world, [AlertKind.BUDGET_REACHED])] == [
        "no budget_reached alert for r-over: spent $1.9280 of its max_cost_usd $0.50"
    ]
    publish_alert(world, "r-over")
    assert promises.owed_alerts(world, [AlertKind.BUDGET_REACHED]) == []


def test_a_spend_past_the_budget_by_more_than_the_overshoot_is_caught(world: World) -> None:
    ran(world, "r-far", hours=2, limit=0.5)  # $3.86: far past $0.50 and the overshoot
    ran(world, "r-near", hours=0.3, limit=0.5)  # $0.58: within two intervals and the cancel
    assert [v.detail.split(",")[0] for v in budgets.budgets_held(world)] == ["r-far spent $3.8560"]


def test_a_request_its_budget_stopped_is_excused_as_an_operators_cancel(world: World) -> None:
    intent = CancelIntent(by="spotjobs", at=iso(world.clock.now()), reason="budget", source=BUDGET_SOURCE)
    ran(world, "r-stopped", hours=0.2, limit=0.3, cancel=intent)
    assert "r-stopped" in promises.cancelled_by_operator(world)


def test_a_reconcile_pass_that_died_widens_the_overshoot_by_its_lease(world: World) -> None:
    # Seed 54: a pass whose instance died holds the run lock for its lease, so the ticks within it
    # reconcile nothing and the stop waits for the first pass after it.
    ran(world, "r-late", hours=0.45, limit=0.02)  # $0.87: 1580 s past its budget, 1200 s allowed
    assert [v.detail.split(",")[0] for v in budgets.budgets_held(world)] == ["r-late spent $0.8676"]
    world.dead_reconciles.append(world.clock.now() - timedelta(hours=2))  # its lease ended long before
    assert len(budgets.budgets_held(world)) == 1
    world.dead_reconciles.append(world.clock.now() - timedelta(minutes=20))
    assert budgets.budgets_held(world) == []


def test_a_pass_that_died_while_only_a_stray_of_the_request_ran_widens_the_overshoot(world: World) -> None:
    # Seed 10261: the attempt's job never started; a person's console re-run of it ran 1242 s, and
    # the passes within two dead passes' leases reconciled nothing. The stray's run is the spend
    # (docs/requests.md), so the dead passes are counted from its start too.
    now = world.clock.now()
    started = iso(now - timedelta(hours=0.345))
    waited = Attempt(
        1, "us-central1", "SPOT", claimed_at=started, job="j", state="JOB_STATE_CANCELLED", ended_at=iso(now)
    )
    copy = Stray("j2", 1, "us-central1", "SPOT", [], seen_until=iso(now), started_at=started)
    request = {"request_id": "r-stray", "custom_job": A100, "max_cost_usd": 0.02}
    LedgerStore(world.storage.client().bucket(world.settings.state_bucket)).restore(
        RequestRecord("r-stray", request, "gs://c/", status=RequestStatus.CANCELLED, attempts=[waited], strays=[copy])
    )
    assert [v.detail.split(",")[0] for v in budgets.budgets_held(world)] == ["r-stray spent $0.6652"]
    world.dead_reconciles.append(now - timedelta(minutes=15))  # while only the stray ran
    assert budgets.budgets_held(world) == []


def test_a_pass_that_died_while_a_stray_ran_on_after_its_request_ended_widens_the_overshoot(world: World) -> None:
    # Seed 11986: the budget stopped the request and its job ended; a person's console re-run of
    # it, begun a minute before, ran on, and a pass died while it did (its lease's ticks did
    # nothing) before the sweep found it. The stray's run is the spend (docs/requests.md), so the
    # dead passes count to the last read that found it, not only to its attempts' end.
    now = world.clock.now()
    stopped_at = now - timedelta(minutes=25)
    stopped = Attempt(
        1,
        "us-central1",
        "SPOT",
        claimed_at=iso(stopped_at - timedelta(minutes=10)),
        job="j",
        state="JOB_STATE_CANCELLED",
        started_at=iso(stopped_at - timedelta(minutes=10)),
        ended_at=iso(stopped_at),
    )
    copy = Stray("j2", 1, "us-central1", "", [], seen_until=iso(now), started_at=iso(stopped_at - timedelta(minutes=1)))
    request = {"request_id": "r-after", "custom_job": A100, "max_cost_usd": 0.1}
    LedgerStore(world.storage.client().bucket(world.settings.state_bucket)).restore(
        RequestRecord("r-after", request, "gs://c/", status=RequestStatus.CANCELLED, attempts=[stopped], strays=[copy])
    )
    assert len(budgets.budgets_held(world)) == 1
    world.dead_reconciles.append(now - timedelta(minutes=15))  # after the attempt's end, while the stray ran
    assert budgets.budgets_held(world) == []


def test_a_stray_the_sweep_could_not_list_widens_the_overshoot_once_its_blindness_was_alerted(world: World) -> None:
    # Seed 10994: the budget stopped the request, and a person's console re-run of its job ran on
    # for two hours in a location whose listing Vertex refused (403): the sweep was blind to it
    # (docs/ARCHITECTURE.md) and cancelled it on its first pass once the permission was back.
    from sim.faults import Refusal

    now = world.clock.now()
    began = now - timedelta(hours=2)
    stopped = Attempt(
        1, "us-central1", "SPOT", claimed_at=iso(began), job="j", state="JOB_STATE_CANCELLED", ended_at=iso(began)
    )
    copy = Stray("j2", 1, "us-central1", "", [], seen_until=iso(now), started_at=iso(began))
    request = {"request_id": "r-blind", "custom_job": A100, "max_cost_usd": 0.1}
    LedgerStore(world.storage.client().bucket(world.settings.state_bucket)).restore(
        RequestRecord("r-blind", request, "gs://c/", status=RequestStatus.CANCELLED, attempts=[stopped], strays=[copy])
    )
    assert [v.detail.split(",")[0] for v in budgets.budgets_held(world)] == ["r-blind spent $3.8560"]
    world.vertex.refusals.append(Refusal("list", "us-east4", began, now))  # not where the stray ran
    world.vertex.refusals.append(Refusal("list", "us-central1", began + timedelta(minutes=5), now))
    assert len(budgets.budgets_held(world)) == 1  # blind, but nobody was told
    said = Alert.of(AlertKind.STRAY_SWEEP_REFUSED, "blind", details={"location": "us-central1", "call": "list"})
    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(said.to_json()).encode(), {})
    assert budgets.budgets_held(world) == []


def test_a_budget_run_on_a_price_row_a_deployment_dropped_owes_one_budget_unpriced_alert(world: World) -> None:
    """`sim.faults.drop_price_row`: the functions' table loses a2-highgpu-1g in us-central1; a
    budgeted request whose job ran there and was not over owes the alert, one that ended before
    the redeploy or carries no budget owes nothing, and the bills stay priced as shipped."""
    from sim.faults import drop_price_row
    from tests.support.sim_world import job

    now = world.clock.now()

    def on_a100(request_id: str, ended: timedelta | None, limit: float | None) -> None:
        sim_job = job(world, request_id, 1, state="JOB_STATE_RUNNING" if ended is None else "JOB_STATE_SUCCEEDED")
        sim_job.request["jobSpec"]["workerPoolSpecs"] = A100["jobSpec"]["workerPoolSpecs"]
        sim_job.start_time = now - timedelta(hours=1)
        sim_job.end_time = None if ended is None else now + ended
        attempt = Attempt(1, "us-central1", "SPOT", claimed_at=iso(now), job=sim_job.name, started_at=iso(now))
        request = {"request_id": request_id, "custom_job": A100, **({"max_cost_usd": limit} if limit else {})}
        LedgerStore(world.storage.client().bucket(world.settings.state_bucket)).restore(
            RequestRecord(request_id, request, "gs://c/", status=RequestStatus.RUNNING, attempts=[attempt])
        )

    on_a100("r1", None, 5.0)  # runs through the redeploy
    on_a100("r2", -timedelta(minutes=1), 5.0)  # over before it
    on_a100("r3", None, None)  # no budget: its cost is only unknown
    world.clock.advance(60)
    drop_price_row(world, machine="a2-highgpu-1g", location="us-central1")

    assert [e.request_id for e in budgets.budgets_unpriced(world)] == ["r1"]
    assert budgets.shipped_price("a2-highgpu-1g", "us-central1") is not None
    assert "us-central1" not in world.deployed_prices["machine_types"]["a2-highgpu-1g"]["locations"]
    [missing] = promises.owed_alerts(world, [AlertKind.BUDGET_UNPRICED])
    assert missing.detail.startswith("no budget_unpriced alert for r1: it ran on a2-highgpu-1g in us-central1")
    alert = Alert.of(AlertKind.BUDGET_UNPRICED, "said", request_id="r1").to_json()
    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})
    assert promises.owed_alerts(world, [AlertKind.BUDGET_UNPRICED]) == []


def test_a_job_that_ran_in_the_stalled_region_widens_the_overshoot_by_the_stall(world: World) -> None:
    # Seed 11612: r0-envelope's create answered nothing in us-east4, whose Vertex API stalled for
    # the faulty phase; its job ran there an hour, unnamed by the record and unlistable, until the
    # region answered again and the first pass found it and the budget stopped it.
    from sim.faults import Stall
    from tests.support.sim_world import job

    now = world.clock.now()
    ran = job(world, "r-stall", 1, state="JOB_STATE_CANCELLED")
    ran.start_time, ran.end_time = now - timedelta(hours=1), now
    stopped = Attempt(
        1,
        "us-central1",
        "SPOT",
        claimed_at=iso(ran.start_time),
        job=ran.name,
        started_at=iso(ran.start_time),
        state="JOB_STATE_CANCELLED",
        ended_at=iso(now),
    )
    request = {"request_id": "r-stall", "custom_job": A100, "max_cost_usd": 0.1}
    LedgerStore(world.storage.client().bucket(world.settings.state_bucket)).restore(
        RequestRecord("r-stall", request, "gs://c/", status=RequestStatus.CANCELLED, attempts=[stopped])
    )
    assert [v.detail.split(",")[0] for v in budgets.budgets_held(world)] == ["r-stall spent $1.9280"]
    world.permanent.stall = Stall("us-east4", 1.0)  # not where it ran
    assert len(budgets.budgets_held(world)) == 1
    world.permanent.stall = Stall("us-central1", 1.0)
    world.faults_stopped_at = now - timedelta(minutes=5)
    assert budgets.budgets_held(world) == []


def test_a_stray_the_code_cancelled_of_a_request_its_budget_stopped_owes_its_alert(world: World) -> None:
    # Seed 10994: the budget stopped the request, and the sweep cancelled a person's console copy
    # of its job. Only a person's cancel of the request asked its late jobs to stop (no alert).
    from tests.support.sim_world import job, record

    now = world.clock.now()
    for request_id, source in (("r-budget", BUDGET_SOURCE), ("r-person", "operator")):
        recorded = job(world, request_id, 1, state="JOB_STATE_CANCELLED")
        copy = job(world, request_id, 1)
        stopped = Attempt(1, "us-central1", "SPOT", claimed_at=iso(now), job=recorded.name, ended_at=iso(now))
        intent = CancelIntent(by="x", at=iso(now), source=source)
        record(world, request_id, RequestStatus.CANCELLED, stopped, cancel=intent)
        world.vertex.cancels.append((now, copy.name, "reconcile"))
    [owed] = promises.owed_alerts(world, [AlertKind.STRAY_JOB])
    assert owed.detail.startswith("no stray_job alert for r-budget")
