"""Multi-replica jobs in the simulator (sim/replicas.py, issue 44 item 5): their draws leave other
seeds alone, Vertex reclaims replicas and counts restarts in each mode, and each new invariant
catches a planted violation."""

from __future__ import annotations

import copy
import random
from datetime import timedelta

import pytest

from shared.fleet.observations import AttemptSummary, FleetFact, Kind, attempt_key
from shared.ledger.states import RequestStatus
from sim import flex, invariants, replicas
from sim.budgets import with_work_budgets
from sim.continuations import with_max_runtimes
from sim.vertex import Create, SimJob
from sim.workload import generate, with_cancels, with_crud_budget, with_locations
from sim.world import World
from tests.support.sim_world import attempt_of, job, restore, write_fact

SINGLE_SEEDS = [seed for seed in range(40) if not replicas.draw(seed).active][:3]
MULTI_SEEDS = [seed for seed in range(40) if replicas.draw(seed).active][:3]


def two_pools(sim_job: SimJob, pool1_replicas: int = 1) -> SimJob:
    pools = sim_job.request["jobSpec"]["workerPoolSpecs"]
    pools.append({**copy.deepcopy(pools[0]), "replicaCount": pool1_replicas})
    return sim_job


def unchanged_workload(seed: int) -> list[tuple[object, ...]]:
    workload = flex.with_flex_start(
        with_max_runtimes(with_crud_budget(with_locations(with_cancels(generate(random.Random(seed * 104729 + 2))))))
    )
    workload = with_work_budgets(workload)  # the world's last step, on requests with a deadline or a fallback
    return [(a.at, a.label, a.data, a.attributes) for a in workload.arrivals]


@pytest.mark.parametrize("seed", SINGLE_SEEDS)
def test_a_seed_without_multi_replica_draws_keeps_its_workload(seed: int) -> None:
    arrivals = World(seed).workload.arrivals
    assert [(a.at, a.label, a.data, a.attributes) for a in arrivals] == unchanged_workload(seed)


@pytest.mark.parametrize("seed", MULTI_SEEDS)
def test_a_multi_replica_seed_changes_only_envelope_deadline_and_fallback_bodies(seed: int) -> None:
    world = World(seed)
    before = unchanged_workload(seed)
    after = [(a.at, a.label, a.data, a.attributes) for a in world.workload.arrivals]
    assert [(at, label) for at, label, _, _ in after] == [(at, label) for at, label, _, _ in before]
    changed = [label for (_, label, data, _), (_, _, old, _) in zip(after, before, strict=True) if data != old]
    kinds = ("envelope ", "deadline ", "fallback ")
    assert all(label.startswith((*kinds, *(f"retry of {kind}" for kind in kinds))) for label in changed)
    assert len({label.split()[-1] for label in changed}) == len(world.vertex.replicas.requests)


@pytest.mark.parametrize(
    ("counting", "reached", "restarts"), [("per_event", 1, 1), ("per_vm", 3, 3), ("per_replica", 1, 0)]
)
def test_restarts_count_towards_the_six_in_each_mode(counting: str, reached: int, restarts: int) -> None:
    sim_job = two_pools(job(World(0), "r1", 1), pool1_replicas=2)
    every = replicas.replica_names(sim_job.request)
    assert every == ["workerpool0-0", "workerpool1-0", "workerpool1-1"]

    assert replicas.restarts_reached(sim_job, every, counting) == reached
    assert (sim_job.restarts, sim_job.vms_reclaimed) == (restarts, 3)


def test_a_preemption_writes_one_service_line_per_reclaimed_vm(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(0)
    world.vertex.replicas = replicas.Replicas(active=True, rng=random.Random(0))
    monkeypatch.setattr(replicas, "ALL_AT_ONCE_SHARE", 1.0)
    sim_job = two_pools(job(world, "r1", 1))
    sim_job.preemptions = 1
    world.vertex.advance(sim_job)
    lines = [m.json()["textPayload"] for m in world.pubsub.on(world.settings.job_events_topic)]
    assert [line.split(" was ")[0] for line in lines if "was preempted" in line] == [
        "The Spot VM of replica workerpool0-0",
        "The Spot VM of replica workerpool1-0",
    ]
    assert (sim_job.restarts, sim_job.vms_reclaimed) == (1, 2)


def test_preemptions_past_the_reclaimed_vms_or_seven_per_replica_are_caught() -> None:
    world = World(0)
    held = two_pools(job(world, "r1", 1))
    held.vms_reclaimed = 3
    restore(world, "r1", RequestStatus.RUNNING, attempt_of(held, preemptions=3))
    assert replicas.preemptions_within_reclaimed_vms(world) == []

    past_reclaimed = two_pools(job(world, "r2", 1))
    past_reclaimed.vms_reclaimed = 3
    restore(world, "r2", RequestStatus.RUNNING, attempt_of(past_reclaimed, preemptions=4))
    past_bound = two_pools(job(world, "r3", 1))
    past_bound.vms_reclaimed = 20  # a world gone wrong: still no more than 7 per replica may be counted
    restore(world, "r3", RequestStatus.RUNNING, attempt_of(past_bound, preemptions=15))

    details = sorted(v.detail for v in replicas.preemptions_within_reclaimed_vms(world))
    assert details == [
        "r2 attempt 1 counts 4 preemptions; Vertex reclaimed 3 VMs of its 2 replicas",
        "r3 attempt 1 counts 15 preemptions; Vertex reclaimed 20 VMs of its 2 replicas",
    ]


def test_an_attempt_created_with_another_layout_is_caught() -> None:
    world = World(0)
    first = two_pools(job(world, "r1", 1)).request
    again = two_pools(job(world, "r1", 2)).request
    world.vertex.created += [Create(world.clock.now(), "us-central1", r, True) for r in (first, again)]
    assert replicas.same_layout_every_attempt(world) == []

    shrunk = job(world, "r1", 3).request  # pool 1 lost on a re-queue
    world.vertex.created.append(Create(world.clock.now(), "us-central1", shrunk, True))
    [found] = replicas.same_layout_every_attempt(world)
    assert found.invariant == "same_layout_every_attempt" and found.detail.startswith("r1: a create with layout")


def test_the_new_invariants_are_checked_at_quiescence() -> None:
    assert {replicas.preemptions_within_reclaimed_vms, replicas.same_layout_every_attempt} <= set(invariants.QUIESCENCE)


def test_a_fleet_fact_naming_more_replicas_than_its_job_had_is_caught() -> None:
    world = World(0)
    two_pools(job(world, "r1", 1))
    key = attempt_key("r1", 1)
    write_fact(world, FleetFact(Kind.RUN, "us-central1", world.clock.now(), attempt_key=key, seconds=60, replicas=2))
    assert replicas.fleet_facts_replicas_bounded(world) == []

    name = write_fact(
        world, FleetFact(Kind.WAIT, "us-central1", world.clock.now(), attempt_key=key, seconds=60, replicas=3)
    )
    [found] = replicas.fleet_facts_replicas_bounded(world)
    assert found.detail == f"{name}: 3 replicas, its attempt's jobs had 2"


def test_a_survivor_s_exit_after_a_peer_s_reclaim_restarts_the_job_three_times_then_fails_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/local.md "Replicas and worker pools": an exit of 134 or 139 (a survivor whose peer was
    stopped) is restarted at most three times per job; the fourth fails it, as the emulator does."""
    world = World(0)
    world.vertex.replicas = replicas.Replicas(active=True, rng=random.Random(0))
    monkeypatch.setattr(replicas, "ALL_AT_ONCE_SHARE", 0.0)
    monkeypatch.setattr(replicas, "PEER_EXIT_SHARE", 1.0)
    sim_job = two_pools(job(world, "r1", 1), pool1_replicas=2)
    sim_job.preemptions = 4
    for _ in range(replicas.TRANSIENT_EXIT_RESTARTS):
        world.vertex.advance(sim_job)
        assert sim_job.state == "JOB_STATE_RUNNING"
    world.vertex.advance(sim_job)

    assert sim_job.transient_exits == replicas.TRANSIENT_EXIT_RESTARTS + 1
    assert sim_job.state == "JOB_STATE_FAILED"
    assert "exited with a non-zero status of 134" in sim_job.error["message"]
    assert replicas.transient_exits_bounded(world) == []


def test_a_job_restarted_past_three_transient_exits_is_caught() -> None:
    world = World(0)
    restarted = two_pools(job(world, "r1", 1))
    restarted.transient_exits = replicas.TRANSIENT_EXIT_RESTARTS
    assert replicas.transient_exits_bounded(world) == []

    restarted.transient_exits += 1  # the fourth exit: the emulator fails the job, this one runs on
    [found] = replicas.transient_exits_bounded(world)
    assert found.invariant == "transient_exits_bounded" and "4 exits of 134 or 139" in found.detail
    assert replicas.transient_exits_bounded in invariants.QUIESCENCE


def test_a_request_with_capacity_alternatives_keeps_its_replicas_on_another_machine() -> None:
    from shared.ledger.records import RequestRecord
    from shared.ledger.store import LedgerStore
    from shared.requests.capacity import machine_spec

    world = World(0)
    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
    capacity = [
        {"machine": "a3-highgpu-8g", "strategies": ["SPOT"]},
        {"machine": "a2-ultragpu-8g", "strategies": ["SPOT"]},
    ]
    ledger.restore(RequestRecord("r1", {"custom_job": {}, "capacity": capacity}, "gs://c/"))
    first = two_pools(job(world, "r1", 1)).request
    elsewhere = two_pools(job(world, "r1", 2)).request
    for pool in elsewhere["jobSpec"]["workerPoolSpecs"]:
        pool["machineSpec"] = machine_spec("a2-ultragpu-8g")
    world.vertex.created += [Create(world.clock.now(), "us-central1", r, True) for r in (first, elsewhere)]
    assert replicas.same_layout_every_attempt(world) == []

    shrunk = job(world, "r1", 3).request  # pool 1 lost
    world.vertex.created.append(Create(world.clock.now(), "us-central1", shrunk, True))
    [found] = replicas.same_layout_every_attempt(world)
    assert found.detail.startswith("r1: a create with layout")


def test_a_new_body_under_an_id_whose_record_a_person_deleted_starts_its_own_layout() -> None:
    """Seed 6300: a hostile body took burst35's id (n1-standard-4), a person deleted its record, and
    burst35's own body (an A100) was then claimed afresh as a new request (docs/ARCHITECTURE.md:
    an earlier record's of the id, deleted by hand): its attempts keep its own first layout."""
    world = World(0)
    earlier = job(world, "r1", 1).request
    world.vertex.created.append(Create(world.clock.now(), "us-central1", earlier, True))
    world.clock.advance(600)
    world.tampering.deleted_records.add("r1")
    world.tampering.records_deleted_at["r1"] = world.clock.now()
    world.clock.advance(600)
    a100 = {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
    anew = [job(world, "r1", attempt).request for attempt in (1, 2)]
    for request in anew:
        request["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] = dict(a100)
    world.vertex.created += [Create(world.clock.now(), "us-central1", r, True) for r in anew]
    assert replicas.same_layout_every_attempt(world) == []

    shrunk = job(world, "r1", 3).request  # the new request's re-queue on the earlier body's machine
    world.vertex.created.append(Create(world.clock.now(), "us-central1", shrunk, True))
    [found] = replicas.same_layout_every_attempt(world)
    assert found.detail.startswith("r1: a create with layout")


def test_waits_after_a_preemption_longer_than_the_jobs_life_since_are_caught() -> None:
    # A two-replica job reclaimed whole (two `preempt` facts) and back half an hour later (one
    # restart), running on: one wait of 30 min. Its facts are read by the estimate's `summarize`.
    world = World(0)
    sim_job = two_pools(job(world, "r1", 1))
    start = world.clock.now()
    sim_job.reclaimed_at.append(start + timedelta(hours=1))
    key = attempt_key("r1", 1)
    facts = [
        FleetFact(Kind.WAIT, "us-central1", start, attempt_key=key, replicas=2),
        FleetFact(Kind.PREEMPT, "us-central1", start + timedelta(hours=1), attempt_key=key, index=0),
        FleetFact(Kind.PREEMPT, "us-central1", start + timedelta(hours=1), attempt_key=key, index=1),
        FleetFact(Kind.RESTART, "us-central1", start + timedelta(hours=1.5), attempt_key=key, index=1),
    ]
    for fact in facts:
        write_fact(world, fact)
    world.clock.advance(10 * 3600)
    assert replicas.fleet_restart_waits_within_the_jobs_life(world) == []
    assert replicas.fleet_restart_waits_within_the_jobs_life in invariants.QUIESCENCE

    # a summary that says the job waited longer than it lived since its first preemption (the
    # second VM's preemption paired with a restart of its own, none: waited to now)
    summary = AttemptSummary(exposure=36000, preemptions=2, restart_waits=34200, replicas=2)
    write_fact(world, FleetFact(Kind.ATTEMPT, "us-central1", world.clock.now(), attempt_key=key, summary=summary))
    [found] = replicas.fleet_restart_waits_within_the_jobs_life(world)
    assert (
        found.detail
        == f"attempt {key}: 34200 s of waits after a preemption; its jobs lived 32400 s after their first preemption"
    )


def test_the_kit_counts_its_own_starts_whatever_vertex_counts_towards_its_six() -> None:
    # Per replica, Vertex's count stays 0 until one replica's own reclaims pass six; the kit's run
    # is a restart index of its own (spotjobs_kit.run: one run object per start of the primary).
    world = World(0)
    world.vertex.replicas = replicas.Replicas(active=True, spot_restart_count="per_replica", rng=random.Random(0))
    world.vertex.restart_state = "running"  # restarted at once, a new run each time
    world.trainer.kit_lines = True
    sim_job = two_pools(job(world, "r1", 1))
    world.trainer.start(sim_job)
    sim_job.preemptions = 2
    world.vertex.advance(sim_job)
    world.vertex.advance(sim_job)
    runs = sorted(
        n.rsplit("-run-", 1)[1] for n in world.storage.objects(world.settings.checkpoint_bucket) if "-run-" in n
    )
    assert runs == ["0000.json", "0001.json", "0002.json"]
    assert sim_job.restarts == 0 and sim_job.vms_reclaimed >= 2


def test_a_resubmitted_request_with_alternatives_whose_record_a_person_deleted_may_move_machine() -> None:
    """Seed 11027: `spotjobs resubmit` published r10's body, capacity alternatives and all, as
    r10-r2 (not a publisher's arrival); its Spot job waited past its changeover on the first
    machine and was moved to the second (docs/placement.md "Where and on what"), and after it
    succeeded a person deleted its record. Its alternatives are still its published body's."""
    import json

    from shared.requests.capacity import machine_spec

    world = World(0)
    capacity = [
        {"machine": "a3-highgpu-8g", "strategies": ["SPOT"]},
        {"machine": "a2-ultragpu-8g", "strategies": ["SPOT"]},
    ]
    body = {"request_id": "r1-r2", "custom_job": {}, "capacity": capacity}
    world.pubsub.accept(world.settings.job_requests_topic, json.dumps(body).encode(), {"request_id": "r1-r2"})
    first = job(world, "r1-r2", 1).request
    first["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] = machine_spec("a3-highgpu-8g")
    moved = job(world, "r1-r2", 2).request
    moved["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] = machine_spec("a2-ultragpu-8g")
    world.vertex.created += [Create(world.clock.now(), "us-central1", r, True) for r in (first, moved)]
    world.clock.advance(600)
    world.tampering.deleted_records.add("r1-r2")
    world.tampering.records_deleted_at["r1-r2"] = world.clock.now()
    assert replicas.same_layout_every_attempt(world) == []

    grown = two_pools(job(world, "r1-r2", 3)).request  # a second pool on a re-queue: still caught
    world.vertex.created.append(Create(world.clock.now(), "us-central1", grown, True))
    [found] = replicas.same_layout_every_attempt(world)
    assert found.detail.startswith("r1-r2: a create with layout")
