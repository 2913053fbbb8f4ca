"""Moves of a Spot job waiting for capacity (shared/deciding/moves.py) over a real ledger
(fake-gcs-server) with Vertex and Pub/Sub in memory: one move, one cancel and one attempt in the
other location, published once the old job ended, however concurrently the request is observed."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from shared.clock import iso
from shared.deciding.deadline import Action, decide_deadline, longest_unasked_seconds
from shared.deciding.deadline_watch import deadline_situation
from shared.deciding.decision_policy import DecisionPolicy
from shared.delivery import Message
from shared.errors import TransientError
from shared.fleet import store
from shared.fleet.observations import FleetFact, Kind, MachineClass
from shared.ledger.cancelling import cancel_request
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.ledger.store import LedgerStore
from shared.observe import handle_job_event
from shared.reconcile import run_reconcile
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, log_entry, make_settings

QUEUED, RUNNING, CANCELLED = 1, 3, 7
H100 = MachineClass("a3-highgpu-8g", "NVIDIA_H100_80GB", 8)
TWO_REGIONS = {
    "custom_job": {
        "displayName": "train",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {
                        "machineType": H100.machine_type,
                        "acceleratorType": H100.accelerator_type,
                        "acceleratorCount": H100.accelerator_count,
                    },
                    "replicaCount": "1",
                    "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/trainer:1", "command": ["python"]},
                }
            ]
        },
    },
    "locations": ["us-central1", "us-east4"],
    "max_attempts": 4,
}


@pytest.fixture
def world(gcs_bucket) -> World:
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))


def waiting_for_spot(world: World, hours: float) -> str:
    """Attempt 1 queued in us-central1 for `hours`, where the fleet's H100 Spot jobs wait, while
    one in us-east4 got capacity half an hour ago."""
    _, job = world.submitted(state=QUEUED, request=TWO_REGIONS)
    asked = datetime.now(UTC) - timedelta(hours=hours)
    world.rewrite("req-1", lambda r: setattr(r.attempt(1), "created_at", iso(asked)))
    store.write_facts(
        world.ledger._bucket,  # noqa: SLF001
        H100,
        [
            FleetFact(Kind.WAITING, "us-central1", datetime.now(UTC) - timedelta(hours=3), attempt_key="other"),
            FleetFact(Kind.WAIT, "us-east4", datetime.now(UTC) - timedelta(minutes=30), 300.0, attempt_key="got"),
        ],
    )
    return job


def deliver(world: World, data: bytes, log: CapturedLog) -> None:
    try:
        handle_job_event(Message(data, "m-1"), log.logger, settings=world.settings, ports=lambda: world.ports)
    except TransientError:
        pass  # left to the delivery that decided it: the redelivery comes later


def test_redelivered_and_reconciled_concurrently_one_move(world: World) -> None:
    job = waiting_for_spot(world, hours=2)
    log = CapturedLog()
    service_line = log_entry(job, "Waiting for job to be provisioned.", insert_id="queued")
    barrier = threading.Barrier(8)

    def one(kind: int) -> None:
        barrier.wait()
        if kind % 2:
            deliver(world, service_line, log)
        else:
            run_reconcile(world.ports, log.logger)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    deliver(world, service_line, log)  # a late redelivery
    run_reconcile(world.ports, log.logger)

    record = world.ledger.get("req-1")
    queued = record.attempt(1)
    assert queued.outcome is AttemptOutcome.MOVED and queued.cancel_sent_at is not None
    assert world.vertex.cancelled == [job]
    assert record.status is RequestStatus.REQUEUED
    requeue = record.requeue
    assert (requeue.attempt, requeue.location, requeue.strategy, requeue.reason) == (2, "us-east4", "SPOT", "move")
    assert world.publisher.on("job-requests") == []  # the old job is CANCELLING, not ended
    world.vertex.set_state(job, CANCELLED)
    run_reconcile(world.ports, log.logger)  # its event lost: reconcile sees the end
    [published] = world.publisher.on("job-requests")
    assert (published.data["attempt"], published.data["location"]) == (2, "us-east4")
    [move] = log.events("moved")
    assert move["next_location"] == "us-east4" and move["waited_seconds"] > 3600

    # Attempt 2 runs in us-east4; the old job's end and more passes move nothing again.
    moved = world.claim_requeue("req-1")
    world.vertex.set_state(moved, RUNNING)
    deliver(world, log_entry(job, "Job was cancelled.", insert_id="cancelled"), log)
    run_reconcile(world.ports, log.logger)
    record = world.ledger.get("req-1")
    assert [(a.n, a.location) for a in record.attempts] == [(1, "us-central1"), (2, "us-east4")]
    assert record.status is RequestStatus.RUNNING and record.attempt(2).outcome is None
    assert len(world.publisher.on("job-requests")) == 1 and world.vertex.cancelled == [job]
    assert len(log.events("moved")) == 1


def test_a_job_waiting_less_than_its_changeover_or_cancelled_is_not_moved(world: World) -> None:
    job = waiting_for_spot(world, hours=0.1)  # 6 min < the 20 min changeover prior
    log = CapturedLog()
    run_reconcile(world.ports, log.logger)
    assert world.ledger.get("req-1").attempt(1).outcome is None and world.vertex.cancelled == []

    world.rewrite("req-1", lambda r: setattr(r.attempt(1), "created_at", iso(datetime.now(UTC) - timedelta(hours=2))))
    world.ledger.swap(
        "req-1", lambda current: cancel_request(current, by="ana", reason="wrong data", now=datetime.now(UTC))
    )
    run_reconcile(world.ports, log.logger)
    record = world.ledger.get("req-1")
    assert record.attempt(1).outcome is not AttemptOutcome.MOVED and record.requeue is None
    assert world.vertex.cancelled == [job]  # the operator's cancel, not a move
    assert log.events("moved") == []


@pytest.mark.parametrize(("terabytes", "moved"), [(2, True), (200, False)])
def test_a_move_weighs_reading_the_checkpoint_from_the_buckets_location(
    gcs_bucket, terabytes: int, moved: bool
) -> None:
    # The deployment's checkpoint bucket is in us-central1, where the job waits: reading its
    # checkpoint in us-east4 is data transfer between two regions, which a big one outweighs.
    # The fleet's observations alone (no region prior): what it saw of us-east4 against us-central1.
    settings = make_settings(
        gcs_bucket.name, SPOTJOBS_CHECKPOINT_BUCKET_LOCATION="US-CENTRAL1", SPOTJOBS_REGION_PRIOR="false"
    )
    world = World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), settings)
    job = waiting_for_spot(world, hours=2)

    def committed(record) -> None:
        record.attempt(1).last_checkpoint, record.attempt(1).last_checkpoint_bytes = [0, 100], terabytes * 10**12

    world.rewrite("req-1", committed)
    log = CapturedLog()
    run_reconcile(world.ports, log.logger)
    record = world.ledger.get("req-1")
    if not moved:
        assert record.attempt(1).outcome is None and world.vertex.cancelled == [] and log.events("moved") == []
        return
    assert record.attempt(1).outcome is AttemptOutcome.MOVED and world.vertex.cancelled == [job]
    [move] = log.events("moved")
    assert move["next_location"] == "us-east4"
    assert "reading its 2,000 GB checkpoint there $40.00" in move["reason"]


STEPS, STEP_SECONDS, CHANGEOVER = 1000, 1.0, 60.0


def deadline_request(slack_seconds: float, steps_left: int = STEPS) -> dict[str, object]:
    """A deadline leaving `slack_seconds` once on-demand did the `steps_left` from now."""
    at = datetime.now(UTC) + timedelta(seconds=steps_left * STEP_SECONDS + CHANGEOVER + slack_seconds)
    return {
        "deadline": iso(at, timespec="seconds"),
        "total_steps": STEPS,
        "expected_step_seconds": STEP_SECONDS,
        "changeover_seconds": CHANGEOVER,
    }


def rule_holds(world: World) -> float | None:
    """How long the deadline rule holds the wait for Spot now (None: it would not wait)."""
    policy = DecisionPolicy.from_settings(world.settings)
    situation = deadline_situation(
        world.ledger.get("req-1"),
        datetime.now(UTC),
        prior_seconds=policy.changeover_prior_seconds,
        review_seconds=policy.reconcile_interval_seconds,
        checkpoint_prior_seconds=policy.checkpoint_prior_seconds,
    )
    decision = decide_deadline(situation)
    return decision.holds_seconds if decision.action is Action.STAY else None


def test_a_deadline_request_is_moved_only_while_the_rule_spares_the_moves_changeover(world: World) -> None:
    job = waiting_for_spot(world, hours=2)
    # Half the work committed (by a run before a restart): ahead of Uniform Progress's line, so the
    # rule waits for Spot rather than switch (behind it, it goes to on-demand and nothing moves).
    world.rewrite("req-1", lambda r: setattr(r.attempt(1), "last_checkpoint", [0, STEPS // 2]))
    unasked = longest_unasked_seconds(world.settings.reconcile_interval_seconds)
    net = 2 * CHANGEOVER + unasked + world.settings.checkpoint_prior_seconds
    # The rule waits for Spot, but by less than a changeover beyond its safety net: no move.
    world.rewrite("req-1", lambda r: r.request.update(deadline_request(net + CHANGEOVER / 2, STEPS // 2)))
    assert 0 < rule_holds(world) < CHANGEOVER
    log = CapturedLog()
    run_reconcile(world.ports, log.logger)
    assert world.ledger.get("req-1").attempt(1).outcome is None and world.vertex.cancelled == []

    world.rewrite("req-1", lambda r: r.request.update(deadline_request(slack_seconds=10 * 3600)))
    run_reconcile(world.ports, log.logger)
    record = world.ledger.get("req-1")
    assert record.attempt(1).outcome is AttemptOutcome.MOVED and world.vertex.cancelled == [job]
    assert (record.requeue.location, record.requeue.reason) == ("us-east4", "move")


def test_on_demand_ahead_of_the_line_goes_back_to_spot_only_once_the_fleet_sees_capacity(world: World) -> None:
    # Attempt 1 on on-demand for an hour with 90% of the work committed, 10 h of slack: the rule's
    # hysteresis is done, and it would go back to Spot.
    world.submitted(state=RUNNING, request={**TWO_REGIONS, **deadline_request(10 * 3600)})
    an_hour_ago = iso(datetime.now(UTC) - timedelta(hours=1))

    def on_demand(record) -> None:
        record.created_at = an_hour_ago
        attempt = record.attempt(1)
        attempt.strategy, attempt.created_at, attempt.started_at = "STANDARD", an_hour_ago, an_hour_ago
        attempt.last_checkpoint = [0, STEPS * 9 // 10]

    world.rewrite("req-1", on_demand)
    # The fleet's H100 Spot jobs where it runs have waited three hours: no capacity now.
    three_hours_ago = datetime.now(UTC) - timedelta(hours=3)
    bucket = world.ledger._bucket  # noqa: SLF001
    store.write_facts(bucket, H100, [FleetFact(Kind.WAITING, "us-central1", three_hours_ago, attempt_key="waits")])
    log = CapturedLog()
    run_reconcile(world.ports, log.logger)
    record = world.ledger.get("req-1")
    assert record.attempt(1).outcome is None and record.requeue is None and world.vertex.cancelled == []

    # A Spot job there got capacity: the next pass sends the request back to Spot.
    store.write_facts(bucket, H100, [FleetFact(Kind.WAIT, "us-central1", datetime.now(UTC), 600.0, attempt_key="got")])
    run_reconcile(world.ports, log.logger)
    record = world.ledger.get("req-1")
    assert record.attempt(1).outcome is AttemptOutcome.SWITCHED_TO_SPOT and record.requeue.strategy == "SPOT"
