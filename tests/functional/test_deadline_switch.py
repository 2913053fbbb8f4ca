"""The deadline rule wired in (shared/deciding/deadline_watch.py), over a real ledger
(fake-gcs-server) with Vertex and Pub/Sub in memory: one switch to on-demand, one cancel and one
STANDARD attempt, however often and however concurrently the request is observed."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta

import pytest
from spotjobs_kit.lines import format_line

import bench.bench_deadline as bench
import shared.deciding.deadline_watch as deadline_watch
from shared.clock import iso
from shared.delivery import Message
from shared.errors import TransientError
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.ledger.store import LedgerStore
from shared.observe import handle_job_event
from shared.reconcile import run_reconcile
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, log_entry, make_settings

QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED = 1, 3, 4, 5, 7
STEPS, STEP_SECONDS, CHANGEOVER = 1000, 1.0, 60.0


@pytest.fixture
def world(gcs_bucket) -> World:
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))


def deadline_request(slack_seconds: float) -> dict[str, object]:
    """A request whose deadline leaves `slack_seconds` once on-demand did all the work from now."""
    at = datetime.now(UTC) + timedelta(seconds=STEPS * STEP_SECONDS + CHANGEOVER + slack_seconds)
    return {
        "deadline": iso(at, timespec="seconds"),
        "total_steps": STEPS,
        "expected_step_seconds": STEP_SECONDS,
        "changeover_seconds": CHANGEOVER,
    }


def waited(world: World, seconds: float) -> None:
    """As if attempt 1 had been queued for `seconds` (past its changeover: waiting for Spot)."""
    asked = iso(datetime.now(UTC) - timedelta(seconds=seconds))
    world.rewrite("req-1", lambda r: setattr(r.attempt(1), "created_at", asked))


def deliver(world: World, data: bytes, log: CapturedLog) -> None:
    try:
        handle_job_event(Message(data, "m-1"), log.logger, settings=world.settings, ports=lambda: world.ports)
    except TransientError:
        pass  # left to the delivery that decided it: the redelivery comes later


def kit_progress(job: str, step: int, key: str | None) -> bytes:
    fields = {"request_id": "req-1", "attempt": 1, "run": 0, "step": step, "total_steps": STEPS}
    line = json.loads(format_line("progress", {**fields, "steps_per_second": 1 / STEP_SECONDS}, key=key))
    return log_entry(job, line["message"], task="workerpool0-0")


def test_redelivered_and_reconciled_concurrently_one_switch_one_standard_attempt(world: World) -> None:
    # Waiting for Spot with a slack below the safety net (2d + the reconcile interval).
    _, job = world.submitted(state=QUEUED, request=deadline_request(slack_seconds=100))
    waited(world, 5 * CHANGEOVER)
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
    spot = record.attempt(1)
    assert spot.outcome is AttemptOutcome.SWITCHED_TO_ON_DEMAND and spot.cancel_sent_at is not None
    assert world.vertex.cancelled == [job]
    assert record.status is RequestStatus.REQUEUED
    assert (record.requeue.attempt, record.requeue.strategy, record.requeue.reason) == (2, "STANDARD", "deadline")
    assert world.publisher.on("job-requests") == []  # the Spot job is CANCELLING, not ended
    world.vertex.set_state(job, CANCELLED)
    run_reconcile(world.ports, log.logger)  # its event lost: reconcile sees the end
    [requeue] = world.publisher.on("job-requests")
    assert requeue.data["attempt"] == 2
    [switch] = log.events("deadline_switch")
    assert switch["action"] == "switch_to_on_demand" and switch["slack_seconds"] < 2 * CHANGEOVER + 300

    # The STANDARD attempt runs; neither the cancelled Spot job's end nor more passes switch again.
    standard = world.claim_requeue("req-1")
    world.vertex.set_state(standard, RUNNING)
    deliver(world, log_entry(job, "Job was cancelled.", insert_id="cancelled"), log)
    deliver(world, service_line, log)
    run_reconcile(world.ports, log.logger)
    record = world.ledger.get("req-1")
    assert [(a.n, a.strategy) for a in record.attempts] == [(1, "SPOT"), (2, "STANDARD")]
    assert record.attempt(1).outcome is AttemptOutcome.SWITCHED_TO_ON_DEMAND
    assert record.status is RequestStatus.RUNNING and record.attempt(2).outcome is None
    assert len(world.publisher.on("job-requests")) == 1 and world.vertex.cancelled == [job]
    assert len(log.events("deadline_switch")) == 1


def test_a_loose_deadline_stays_on_spot_and_a_failed_cancel_holds_the_requeue(world: World) -> None:
    _, job = world.submitted(state=QUEUED, request=deadline_request(slack_seconds=10 * 3600))
    log = CapturedLog()
    run_reconcile(world.ports, log.logger)  # queued within its changeover: on Spot, however late
    assert world.ledger.get("req-1").attempt(1).outcome is None and world.vertex.cancelled == []
    waited(world, 5 * CHANGEOVER)

    # Now the deadline is tight; the first cancel fails: nothing is re-queued until it went out.
    world.rewrite("req-1", lambda r: r.request.update(deadline_request(slack_seconds=100)))
    failing = world.vertex.cancel_custom_job

    def unavailable(name: str, **_: object) -> None:
        from google.api_core.exceptions import ServiceUnavailable

        raise ServiceUnavailable("cancel failed")

    world.vertex.cancel_custom_job = unavailable  # type: ignore[method-assign]
    run_reconcile(world.ports, log.logger)
    record = world.ledger.get("req-1")
    assert record.attempt(1).cancel_pending and world.publisher.on("job-requests") == []
    world.vertex.cancel_custom_job = failing  # type: ignore[method-assign]
    long_ago = iso(datetime.now(UTC) - timedelta(seconds=world.settings.claim_lease_seconds + 1))

    def decided_long_ago(record) -> None:
        record.attempt(1).cancel_decided_at = record.requeue.decided_at = long_ago

    world.rewrite("req-1", decided_long_ago)
    run_reconcile(world.ports, log.logger)  # the decider is presumed dead: reconcile sends the cancel
    assert world.vertex.cancelled == [job] and world.publisher.on("job-requests") == []
    world.vertex.set_state(job, CANCELLED)
    run_reconcile(world.ports, log.logger)  # and publishes the re-queue once the job ended
    assert len(world.publisher.on("job-requests")) == 1


@pytest.mark.parametrize("seen_by", ["event", "reconcile"])
def test_the_next_attempt_is_published_only_once_vertex_reports_the_cancelled_job_ended(
    world: World, seen_by: str
) -> None:
    """Issue 28, break 7: a cancel is asynchronous (JOB_STATE_CANCELLING first); attempt 2 must
    not start while attempt 1's job still runs, and a lost event must not stall it."""
    _, job = world.submitted(state=RUNNING, request=deadline_request(slack_seconds=-CHANGEOVER / 2))
    world.rewrite("req-1", lambda r: setattr(r.attempt(1), "started_at", iso(datetime.now(UTC))))
    log = CapturedLog()
    run_reconcile(world.ports, log.logger)  # on Spot with too little slack to pay its changeover
    assert world.vertex.cancelled == [job]
    cancelling = log_entry(job, "Job is being cancelled.", insert_id="cancelling")
    for _ in range(2):
        deliver(world, cancelling, log)
        run_reconcile(world.ports, log.logger)
    assert world.publisher.on("job-requests") == []  # still CANCELLING: both would train

    world.vertex.set_state(job, CANCELLED)
    if seen_by == "event":
        deliver(world, log_entry(job, "Job was cancelled.", insert_id="cancelled"), log)
    run_reconcile(world.ports, log.logger)
    deliver(world, log_entry(job, "Job was cancelled.", insert_id="cancelled"), log)  # late, or again
    [requeue] = world.publisher.on("job-requests")
    assert (requeue.data["attempt"], requeue.data["location"]) == (2, "us-central1")
    record = world.ledger.get("req-1")
    assert record.attempt(1).state == "JOB_STATE_CANCELLED" and record.attempt(1).ended_at is not None
    assert record.requeue.message_id is not None
    assert len(log.events("switched_job_ended")) == 1


def test_on_job_event_asks_the_simulators_policy_function(world: World, monkeypatch) -> None:
    """The bench (bench/bench_deadline.py) and on_job_event run one function object."""
    asked: list[object] = []
    production = deadline_watch.decide_deadline
    assert production is bench.decide_deadline

    def spy(situation, *args, **kwargs):
        asked.append(situation)
        return production(situation, *args, **kwargs)

    monkeypatch.setattr(deadline_watch, "decide_deadline", spy)
    _, job = world.submitted(state=RUNNING, request=deadline_request(slack_seconds=10 * 3600))
    deliver(world, kit_progress(job, 10, world.kit_key()), CapturedLog())
    [situation] = asked
    assert situation.work.total_steps == STEPS and situation.placement.value == "on_spot"
    assert world.ledger.get("req-1").attempt(1).steps_per_second == 1 / STEP_SECONDS


def test_reconcile_observes_a_claimed_successor_even_while_the_cancelled_job_still_ends(world: World) -> None:
    # A record from before the hold: attempt 2 was claimed while attempt 1 was still CANCELLING.
    _, job = world.submitted(state=QUEUED, request=deadline_request(slack_seconds=100))
    waited(world, 5 * CHANGEOVER)
    log = CapturedLog()
    run_reconcile(world.ports, log.logger)
    assert world.vertex.cancelled == [job]
    standard = world.claim_requeue("req-1")
    world.vertex.set_state(standard, SUCCEEDED)
    run_reconcile(world.ports, log.logger)
    assert world.ledger.get("req-1").status is RequestStatus.SUCCEEDED


def test_a_cancelled_job_never_seen_ending_holds_back_only_its_own_successor(world: World) -> None:
    # A record from before the hold: attempt 2 claimed while attempt 1 was CANCELLING, and
    # attempt 1 never observed again. Attempt 2's own re-queue, and attempt 3's claim, go ahead.
    from tests.support.decisions import STOCKOUT

    _, job = world.submitted(state=QUEUED, request=deadline_request(slack_seconds=100))
    waited(world, 5 * CHANGEOVER)
    log = CapturedLog()
    run_reconcile(world.ports, log.logger)
    standard = world.claim_requeue("req-1")
    world.vertex.set_state(standard, FAILED, STOCKOUT)
    run_reconcile(world.ports, log.logger)
    [requeue] = world.publisher.on("job-requests")
    assert requeue.data["attempt"] == 3 and world.ledger.get("req-1").attempt(1).ending
    world.claim_requeue("req-1")
    assert [a.n for a in world.ledger.get("req-1").attempts] == [1, 2, 3]


def test_a_switched_job_deleted_at_vertex_while_cancelling_releases_its_successor(world: World) -> None:
    """Deleted at Vertex before anyone saw it end: reconcile's NotFound is its end for good, so
    the on-demand attempt the switch decided is published, once, instead of waiting forever."""
    _, job = world.submitted(state=QUEUED, request=deadline_request(slack_seconds=100))
    waited(world, 5 * CHANGEOVER)
    log = CapturedLog()
    run_reconcile(world.ports, log.logger)  # switched: the Spot job is cancelled, attempt 2 held
    assert world.vertex.cancelled == [job] and world.publisher.on("job-requests") == []
    world.vertex.forget(job)

    run_reconcile(world.ports, log.logger)
    run_reconcile(world.ports, log.logger)

    [requeue] = world.publisher.on("job-requests")
    record = world.ledger.get("req-1")
    assert requeue.data["attempt"] == 2 and record.requeue.strategy == "STANDARD"
    assert not record.attempt(1).ending and record.attempt(1).outcome is AttemptOutcome.SWITCHED_TO_ON_DEMAND
    assert log.events("reconcile_error") == [] and world.publisher.on("ops-alerts") == []


def test_a_switch_whose_cancel_vertex_refuses_for_good_is_said_stuck_and_its_missed_deadline_too(
    world: World,
) -> None:
    """Seed 707: a hand-over's cancel refused with a 403 on every pass is never sent, so the job
    never ends and the next attempt never starts. Reconcile logs the refusal each pass; once the
    job has waited `stuck_after_seconds` since the cancel's decision, and once the deadline passed,
    one `job_stuck` and one `deadline_missed` name the request."""
    from google.api_core.exceptions import PermissionDenied

    _, job = world.submitted(state=QUEUED, request=deadline_request(slack_seconds=100))
    waited(world, 5 * CHANGEOVER)

    def refused(name: str, **_: object) -> None:
        raise PermissionDenied("Permission 'aiplatform.customJobs.cancel' denied")

    world.vertex.cancel_custom_job = refused  # type: ignore[method-assign]
    log = CapturedLog()
    run_reconcile(world.ports, log.logger)  # switched; its cancel refused
    assert world.ledger.get("req-1").attempt(1).cancel_pending
    [error] = log.events("reconcile_error")
    assert "PermissionDenied" in error["error"] and world.publisher.on("ops-alerts") == []

    now = datetime.now(UTC)
    decided = iso(now - timedelta(seconds=world.settings.stuck_after_seconds + 1))

    def long_refused_and_past_its_deadline(record) -> None:
        record.attempt(1).cancel_decided_at = decided
        record.request["deadline"] = iso(now - timedelta(seconds=60), timespec="seconds")

    world.rewrite("req-1", long_refused_and_past_its_deadline)
    for _ in range(2):
        run_reconcile(world.ports, log.logger)
    alerts = world.publisher.on("ops-alerts")
    assert sorted(a.data["kind"] for a in alerts) == ["deadline_missed", "job_stuck"]
    assert {a.data["request_id"] for a in alerts} == {"req-1"}
    assert world.publisher.on("job-requests") == [] and world.vertex.jobs[job].state == QUEUED  # never two jobs


def _deadline_passed_while_waiting_for_a_create(world: World, change: object) -> None:
    past = {**deadline_request(slack_seconds=0), "deadline": iso(datetime.now(UTC) - timedelta(minutes=5))}
    world.submitted(state=QUEUED, request=past)
    world.rewrite("req-1", change)  # type: ignore[arg-type]


def _deadline_alerts(world: World) -> list[dict[str, object]]:
    return [m.data for m in world.publisher.on(world.settings.ops_alerts_topic) if m.data["kind"] == "deadline_missed"]


def test_a_deadline_that_passes_while_the_claim_waits_for_its_create_is_said_missed_once(world: World) -> None:
    """Vertex refused attempt 1's create for a resource quota: its claim, re-published, backs off
    (for up to an hour at a time) with no job for any read to find. Its deadline passes: the
    request did not finish by it, and no job's read will say so until a create lands, which may be
    never (review s10)."""
    ago = iso(datetime.now(UTC) - timedelta(minutes=30))

    def a_claim_backing_off(record: object) -> None:
        attempt = record.attempt(1)  # type: ignore[attr-defined]
        attempt.job, attempt.state, attempt.claimed_at = None, None, ago
        attempt.republished, attempt.republished_at = 1, iso(datetime.now(UTC))
        record.status = RequestStatus.CLAIMED  # type: ignore[attr-defined]

    _deadline_passed_while_waiting_for_a_create(world, a_claim_backing_off)
    log = CapturedLog()
    run_reconcile(world.ports, log.logger)
    run_reconcile(world.ports, log.logger)

    [alert] = _deadline_alerts(world)
    assert alert["request_id"] == "req-1" and alert["attempt"] == 1
    assert world.vertex.gets == 0 and world.vertex.creates == 0  # said without a look-up


def test_a_deadline_that_passes_while_the_requeue_waits_is_said_missed(world: World) -> None:
    """Attempt 1 was preempted and re-queued with a delay: no job until attempt 2 is created."""
    from shared.ledger.records import Requeue

    def requeued_later(record: object) -> None:
        record.attempt(1).outcome = AttemptOutcome.REQUEUED  # type: ignore[attr-defined]
        record.status = RequestStatus.REQUEUED  # type: ignore[attr-defined]
        later = iso(datetime.now(UTC) + timedelta(hours=1))
        record.requeue = Requeue(2, "us-central1", "SPOT", "preemption", iso(datetime.now(UTC)), not_before=later)  # type: ignore[attr-defined]

    _deadline_passed_while_waiting_for_a_create(world, requeued_later)
    run_reconcile(world.ports, CapturedLog().logger)

    [alert] = _deadline_alerts(world)
    assert alert["request_id"] == "req-1"


def test_a_deadline_that_passes_while_a_switch_waits_for_a_job_it_cannot_read_is_said_missed(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulator seed 167 (review s10): a deadline switch cancelled the Spot job and holds attempt 2
    for its end, but Vertex refuses the job's get for good (a 403: `lookup_failed` is said), so no
    read ever sees the end, nor says the deadline it passes meanwhile."""
    from google.api_core import exceptions as api

    from shared.ledger.records import Requeue

    def switched(record: object) -> None:
        attempt = record.attempt(1)  # type: ignore[attr-defined]
        attempt.outcome, attempt.state = AttemptOutcome.SWITCHED_TO_ON_DEMAND, "JOB_STATE_PENDING"
        attempt.cancel_decided_at = attempt.cancel_sent_at = iso(datetime.now(UTC) - timedelta(minutes=20))
        record.status = RequestStatus.REQUEUED  # type: ignore[attr-defined]
        record.requeue = Requeue(2, "us-central1", "STANDARD", "deadline", attempt.cancel_decided_at)  # type: ignore[attr-defined]

    _deadline_passed_while_waiting_for_a_create(world, switched)
    for job in world.vertex.jobs:
        world.vertex.set_state(job, CANCELLED)

    def refused(*args: object, **kwargs: object) -> object:
        raise api.PermissionDenied("403 Permission 'aiplatform.customJobs.get' denied")

    monkeypatch.setattr(world.vertex, "get_custom_job", refused)
    run_reconcile(world.ports, CapturedLog().logger)

    [alert] = _deadline_alerts(world)
    assert alert["request_id"] == "req-1"
    assert world.publisher.on("job-requests") == []  # attempt 2 still waits for the end
