"""reconcile's logic over a real ledger (fake-gcs-server) with Vertex and Pub/Sub in memory: the
same decisions as on_job_event without any event, settling abandoned claims and re-queues."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from functions import reconcile as reconcile_entry
from shared.delivery import Message, maintenance_task
from shared.errors import TransientError
from shared.ledger.claims import claim_attempt
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.ledger.store import LedgerStore
from shared.log import Logger
from shared.observe import EventOutcome, handle_job_event
from shared.reconcile import RequestResult, run_reconcile
from shared.requests.envelope import canonical_envelope
from shared.requests.policy import validate_request
from shared.topology import TOPOLOGY
from shared.wiring import Ports
from tests.support.decisions import (
    STOCKOUT,
    CapturedLog,
    FakePublisher,
    FakeVertex,
    World,
    log_entry,
    make_settings,
)

QUEUED, PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED = 1, 2, 3, 4, 5, 7


@pytest.fixture
def world(gcs_bucket) -> World:
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))


def reconcile(world: World, log: CapturedLog | None = None, **kwargs):
    return run_reconcile(world.ports, (log or CapturedLog()).logger, **kwargs)


def ago(seconds: float) -> str:
    moment = datetime.now(UTC) - timedelta(seconds=seconds)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_maintenance_task_is_read_from_the_body() -> None:
    assert maintenance_task(b'{"task": "reconcile"}') == "reconcile"
    assert maintenance_task(b'{"task": "prune", "request_id": "x"}') == "prune"
    assert maintenance_task(b"[]") is None and maintenance_task(b"\xff") is None


def test_other_maintenance_tasks_are_ignored_with_a_debug_line() -> None:
    log = CapturedLog()
    reconcile_entry._handle(Message(b'{"task": "prune"}', "m-1"), log.logger)  # noqa: SLF001
    [line] = log.lines
    assert (line["severity"], line["event"], line["task"]) == ("DEBUG", "ignored_task", "prune")


def test_reconcile_alone_decides_what_events_would_have(world: World) -> None:
    _, failed = world.submitted("req-stockout", state=RUNNING)
    _, succeeded = world.submitted("req-done", state=RUNNING)
    _, running = world.submitted("req-running", state=RUNNING)
    world.vertex.set_state(failed, FAILED, STOCKOUT)
    world.vertex.set_state(succeeded, SUCCEEDED)
    log = CapturedLog()

    summary = reconcile(world, log)

    assert (summary.listed, summary.active) == (3, 3)
    assert summary.decisions == {"requeue": 1, "job_succeeded": 1}
    [requeue] = world.publisher.on("job-requests")
    assert (requeue.data["request_id"], requeue.data["attempt"]) == ("req-stockout", 2)
    assert world.ledger.get("req-running").status == RequestStatus.RUNNING
    [line] = log.events("reconcile_summary")
    assert line["listed"] == 3 and line["outcomes"]["observed"] == 3

    again = reconcile(world)  # the finished request is skipped on its listing metadata
    assert again.active == 2 and again.outcomes == {"idle": 1, "observed": 1} and again.decisions == {}
    assert len(world.publisher.on("job-requests")) == 1 and len(world.publisher.on("maintenance")) == 1


def test_reconcile_counts_a_running_job_seen_back_in_pending(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    log = CapturedLog()
    for state in (RUNNING, PENDING, RUNNING, PENDING, RUNNING):
        world.vertex.set_state(job, state)
        reconcile(world, log)
    assert world.ledger.get("req-1").attempts[0].preemptions == 2
    assert [line["preemptions"] for line in log.events("preemption")] == [1, 2]
    assert {line["source"] for line in log.events("preemption")} == {"state"}


def _indexed_but_unrecorded(world: World) -> str:
    """req-1's claim whose job the adopting delivery indexed and died before recording: its job
    runs, indexed, and the record does not name it."""
    _, job = world.submitted(state=RUNNING)

    def crash_before_recording(current: RequestRecord) -> RequestRecord:
        current.attempts[0] = Attempt(1, "us-central1", "SPOT", claimed_at=ago(600))
        current.status = RequestStatus.CLAIMED
        return current

    world.rewrite("req-1", crash_before_recording)
    return job


def _lost_create(world: World) -> str:
    """req-1's claim whose create went out but whose answer was lost: its job runs, unrecorded
    and not indexed."""
    job = _indexed_but_unrecorded(world)
    world.ledger._bucket.blob(f"jobs/{job.rsplit('/', 1)[-1]}.json").delete()  # noqa: SLF001
    return job


def _delivered(world: World, line: bytes, message_id: str) -> EventOutcome | None:
    """A job-events message as Pub/Sub delivers it: again while nacked, until the dead-letter
    topic takes it (None)."""
    for _ in range(TOPOLOGY.trigger_subscription["max_delivery_attempts"]):
        try:
            return handle_job_event(
                Message(line, message_id), CapturedLog().logger, settings=world.settings, ports=lambda: world.ports
            )
        except TransientError:
            continue
    return None


def test_a_preemption_announced_before_its_job_was_indexed_is_counted_when_adopted(world: World) -> None:
    """Vertex's preemption line of our job whose create's answer was lost comes before reconcile
    adopts the job: kept, and counted once the adoption says whose job it is."""
    job = _lost_create(world)
    line = log_entry(job, "The Spot VM was preempted. Restarting the job (restart 1 of 6).", insert_id="ins-1")
    for _ in range(2):  # and its redelivery
        outcome = handle_job_event(
            Message(line, "m-1"), CapturedLog().logger, settings=world.settings, ports=lambda: world.ports
        )
        assert outcome is EventOutcome.PARKED
    assert world.vertex.gets == 0  # a foreign job's line buys no Vertex call
    log = CapturedLog()

    assert reconcile(world, log).outcomes == {"claim_adopted": 1}

    assert world.ledger.get("req-1").attempts[0].preemptions == 1
    [counted] = log.events("preemption")
    assert (counted["request_id"], counted["attempt"], counted["job"]) == ("req-1", 1, job)
    assert not list(world.ledger._bucket.client.list_blobs(world.ledger._bucket, prefix="unindexed/"))  # noqa: SLF001


def test_a_preemption_kept_before_the_index_is_counted_by_the_jobs_next_line_when_its_adoption_died(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reconcile's adoption records the job and dies before counting the line kept while the job
    was not indexed: nothing adopts a recorded job again, so the job's next service line counts
    it, once, before its own decision."""
    job = _lost_create(world)
    preempted = log_entry(job, "The Spot VM was preempted. Restarting the job (restart 1 of 6).", insert_id="ins-1")
    assert _delivered(world, preempted, "m-1") is EventOutcome.PARKED

    def dies(*_: object) -> tuple[str, ...]:
        raise RuntimeError("the instance died")

    with monkeypatch.context() as crash:
        crash.setattr("shared.found_jobs.observe_adopted", dies)
        reconcile(world)  # its pass goes on with the next request
    recorded = world.ledger.get("req-1").attempts[0]
    assert (recorded.job, recorded.preemptions) == (job, 0)  # recorded, the kept line not counted
    log = CapturedLog()

    for _ in range(2):  # the job's next line, and its redelivery
        running = log_entry(job, "Job is running.", insert_id="ins-2")
        assert (
            handle_job_event(Message(running, "m-2"), log.logger, settings=world.settings, ports=lambda: world.ports)
            is EventOutcome.OBSERVED
        )

    assert world.ledger.get("req-1").attempts[0].preemptions == 1
    assert [line["preemptions"] for line in log.events("preemption")] == [1]
    assert not list(world.ledger._bucket.client.list_blobs(world.ledger._bucket, prefix="unindexed/"))  # noqa: SLF001


def test_a_preemption_kept_before_the_index_is_counted_by_reconcile_when_its_adoption_died_and_no_line_follows(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reconcile's adoption records the job and dies before counting the line kept while the job
    was not indexed, and the job sends no line after it (it ended before the adoption, or its
    lines were lost): no submit redelivery comes for a claim reconcile adopted, nor a next
    line, so the pass that next reads the job counts it, once."""
    job = _lost_create(world)
    preempted = log_entry(job, "The Spot VM was preempted. Restarting the job (restart 1 of 6).", insert_id="ins-1")
    assert _delivered(world, preempted, "m-1") is EventOutcome.PARKED
    world.vertex.set_state(job, SUCCEEDED)

    def dies(*_: object) -> tuple[str, ...]:
        raise RuntimeError("the instance died")

    with monkeypatch.context() as crash:
        crash.setattr("shared.found_jobs.observe_adopted", dies)
        reconcile(world)
    assert world.ledger.get("req-1").attempts[0].preemptions == 0  # recorded, the kept line not counted

    for _ in range(2):  # the next pass decides on the ended job; the one after finds it decided
        reconcile(world)

    record = world.ledger.get("req-1")
    assert record.status == RequestStatus.SUCCEEDED
    assert record.attempts[0].preemptions == 1


def test_a_foreign_jobs_preemption_line_is_kept_once_and_decides_nothing(world: World) -> None:
    world.submitted(state=RUNNING)
    foreign = "projects/p/locations/us-central1/customJobs/999"
    line = log_entry(foreign, "The Spot VM was preempted. Restarting the job (restart 1 of 6).", insert_id="ins-9")
    before = world.ledger.get("req-1")

    for _ in range(2):
        handle_job_event(Message(line, "m-9"), CapturedLog().logger, settings=world.settings, ports=lambda: world.ports)

    kept = list(world.ledger._bucket.client.list_blobs(world.ledger._bucket, prefix="unindexed/999/"))  # noqa: SLF001
    assert len(kept) == 1 and world.ledger.get("req-1") == before and world.vertex.gets == 0


def test_preemptions_announced_while_the_job_is_indexed_but_not_recorded_are_counted(world: World) -> None:
    """The delivery adopting req-1's job indexed it and died before recording it; the claim waits
    for reconcile (seed 31: its submit message dead-lettered, reconcile's passes locked out for
    25 minutes). Vertex's preemption lines of that time are counted and their storm alerted, not
    nacked until the dead-letter topic takes them while the record names no job."""
    job = _indexed_but_unrecorded(world)
    threshold = world.settings.preemption_storm_threshold
    outcomes = [
        _delivered(
            world,
            log_entry(job, f"The Spot VM was preempted. Restarting the job (restart {k} of 6).", insert_id=f"ins-{k}"),
            f"m-{k}",
        )
        for k in range(1, threshold + 1)
    ]
    reconcile(world)  # adopts the claim, if nothing did

    assert world.ledger.get("req-1").attempts[0].preemptions == threshold
    assert [m.data["kind"] for m in world.publisher.on("ops-alerts")] == ["preemption_storm"]
    assert outcomes == [EventOutcome.OBSERVED] * threshold  # none dead-lettered


def test_abandoned_claim_with_a_job_is_adopted(world: World) -> None:
    record, job = world.submitted(state=RUNNING)

    def crash_before_recording(current: RequestRecord) -> RequestRecord:
        current.attempts[0] = Attempt(1, "us-central1", "SPOT", claimed_at=ago(600))
        current.status = RequestStatus.CLAIMED
        return current

    world.rewrite("req-1", crash_before_recording)
    world.ledger._bucket.blob(f"jobs/{job.rsplit('/', 1)[-1]}.json").delete()  # noqa: SLF001
    log = CapturedLog()

    summary = reconcile(world, log)

    assert summary.outcomes == {"claim_adopted": 1}
    stored = world.ledger.get("req-1")
    assert stored.attempts[0].job == job and stored.status == RequestStatus.RUNNING
    assert world.ledger.find_job(job.rsplit("/", 1)[-1]).request_id == "req-1"
    assert world.publisher.on("job-requests") == []


def test_an_abandoned_claim_adopts_its_own_job_not_one_of_the_requests_deleted_record(world: World) -> None:
    """A person deleted the record; the stray sweep cancelled its job; a redelivery claimed the id
    anew, and its create's answer was lost. Both jobs carry attempt 1's labels: the claim's is the
    one created after its record, never the older one, whose cancel is not this record's to end
    it with (simulator seed 1771: the request ended CANCELLED and its own job was cancelled)."""
    earlier_life = world.vertex.add("req-1", 1, state=CANCELLED)
    world.vertex.jobs[earlier_life].create_time = datetime.now(UTC) - timedelta(hours=2)
    record, _ = world.submitted(state=QUEUED)

    def created_unrecorded(current: RequestRecord) -> RequestRecord:
        current.created_at = ago(600)
        current.attempts[0] = Attempt(
            1, "us-central1", "SPOT", claimed_at=ago(600), create_sent_at=ago(600), kit_key=record.latest.kit_key
        )
        current.status = RequestStatus.CLAIMED
        return current

    world.rewrite("req-1", created_unrecorded)
    [own] = [name for name in world.vertex.jobs if name != earlier_life]
    world.ledger._bucket.blob(f"jobs/{own.rsplit('/', 1)[-1]}.json").delete()  # noqa: SLF001

    summary = reconcile(world)

    assert summary.outcomes == {"claim_adopted": 1}
    stored = world.ledger.get("req-1")
    assert stored.attempts[0].job == own and stored.cancel is None
    assert stored.status == RequestStatus.SUBMITTED and world.vertex.cancelled == []


def test_abandoned_claim_without_a_job_is_republished_and_a_young_one_left_alone(
    world: World,
) -> None:
    envelope = {
        "schema_version": 1,
        "request_id": "req-1",
        "custom_job": {},
        "location": "us-central1",
        "locations": [],
        "max_attempts": 3,
        "fallback": None,
        "checkpoints": None,
    }
    young = RequestRecord("req-1", envelope, "gs://c/r/req-1/", attempts=[Attempt(1, "us-central1", "SPOT", ago(1))])
    world.ledger.restore(young)
    assert reconcile(world).outcomes == {"idle": 1}
    assert world.publisher.on("job-requests") == []

    def age(current: RequestRecord) -> RequestRecord:
        current.attempts[0].claimed_at = ago(600)
        return current

    world.ledger.update("req-1", age)
    assert reconcile(world).outcomes == {"claim_republished": 1}
    [message] = world.publisher.on("job-requests")
    assert message.data == {
        "schema_version": 1,
        "request_id": "req-1",
        "custom_job": {},
        "location": "us-central1",
        "max_attempts": 3,
        "attempt": 1,
    }
    assert message.attributes == {"request_id": "req-1", "spotjobs_origin": "requeue"}


def test_a_claim_that_never_gets_a_job_is_republished_with_backoff_and_alerted_once_never_failed(
    world: World,
) -> None:
    # Vertex keeps answering 429 (submit recorded it releasing the claim): our side waits.
    world.settings = replace(world.settings, max_claim_republishes=2)
    envelope = {"schema_version": 1, "request_id": "req-1", "custom_job": {}, "location": "us-central1"}
    busy = Attempt(1, "us-central1", "SPOT", ago(600))
    busy.last_create_error = {"code": 429, "message": "TooManyRequests: quota", "at": ago(600)}
    world.ledger.restore(RequestRecord("req-1", envelope, "gs://c/r/req-1/", attempts=[busy]))

    def backoff_passes(current: RequestRecord) -> RequestRecord:
        current.attempts[0].republished_at = ago(7200)
        return current

    assert reconcile(world).outcomes == {"claim_republished": 1}
    assert reconcile(world).outcomes == {"idle": 1}  # the re-publish gets its turn first
    for _ in range(4):
        world.rewrite("req-1", backoff_passes)
        assert reconcile(world).outcomes == {"claim_republished": 1}

    record = world.ledger.get("req-1")
    assert record.status == RequestStatus.CLAIMED and record.attempts[0].outcome is None
    assert record.attempts[0].republished == 5
    assert len(world.publisher.on("job-requests")) == 5
    [alert] = world.publisher.on("ops-alerts")  # once, past the bound, naming the evidence
    assert alert.data["kind"] == "claim_stalled" and "turning the create away" in alert.data["message"]
    assert alert.data["details"]["last_create_error"]["code"] == 429
    assert record.pending_alerts == []


def test_the_republish_interval_doubles_up_to_an_hour() -> None:
    from shared.reconcile import _backoff

    assert [_backoff(60, k) for k in (0, 1, 2, 6, 20)] == [60, 120, 240, 3600, 3600]


def test_delayed_requeue_is_published_by_reconcile_once_due(world: World) -> None:
    world.settings = replace(world.settings, requeue_delay_seconds=3600)
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, FAILED, STOCKOUT)
    reconcile(world)
    record = world.ledger.get("req-1")
    assert record.status == RequestStatus.REQUEUED and record.requeue.not_before is not None
    assert world.publisher.on("job-requests") == []
    assert reconcile(world).outcomes == {"idle": 1}

    def due(current: RequestRecord) -> RequestRecord:
        current.requeue.not_before = ago(1)
        return current

    world.ledger.update("req-1", due)
    assert reconcile(world).outcomes == {"requeue_published": 1}
    reconcile(world)
    assert len(world.publisher.on("job-requests")) == 1
    assert world.ledger.get("req-1").requeue.message_id == "1"


def test_abandoned_unconfirmed_requeue_is_republished(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, FAILED, STOCKOUT)
    world.publisher.fail_next = 1  # the decider's publish fails and it never comes back
    reconcile(world)
    assert world.publisher.on("job-requests") == []
    assert reconcile(world).outcomes == {"waiting": 1}  # within the lease: the decider's business

    world.settings = replace(world.settings, claim_lease_seconds=0)
    assert reconcile(world).outcomes == {"requeue_published": 1}
    assert len(world.publisher.on("job-requests")) == 1


def test_published_requeue_that_is_never_claimed_is_published_again(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, FAILED, STOCKOUT)
    reconcile(world)  # decides and publishes attempt 2; that message is then lost (dead-lettered)
    assert len(world.publisher.on("job-requests")) == 1
    assert reconcile(world).outcomes == {"idle": 1}  # recently published: give submit its time

    world.settings = replace(world.settings, unclaimed_requeue_seconds=0)
    assert reconcile(world).outcomes == {"requeue_published": 1}
    resent = world.publisher.on("job-requests")
    assert len(resent) == 2 and resent[1].data["attempt"] == 2
    assert world.ledger.get("req-1").requeue.message_id == "2"

    world.claim_requeue("req-1")  # the resent message is claimed: nothing more to resend
    assert "requeue_published" not in reconcile(world).outcomes
    assert len(world.publisher.on("job-requests")) == 2


def test_concurrent_reconcile_runs_requeue_once(world: World) -> None:
    for k in range(5):
        _, job = world.submitted(f"req-{k}", state=RUNNING)
        world.vertex.set_state(job, FAILED, STOCKOUT)
    runs = [threading.Thread(target=reconcile, args=(world,)) for _ in range(4)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    published = sorted(m.data["request_id"] for m in world.publisher.on("job-requests"))
    assert published == [f"req-{k}" for k in range(5)]


def test_stuck_waiting_job_alerts_once(world: World) -> None:
    world.settings = replace(world.settings, stuck_after_seconds=0)
    world.submitted(state=QUEUED)
    reconcile(world)
    reconcile(world)
    [alert] = world.publisher.on("ops-alerts")
    assert (alert.data["kind"], alert.data["details"]["state"]) == ("job_stuck", "JOB_STATE_QUEUED")


def test_a_run_is_bounded_and_one_failing_request_does_not_stop_it(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.api_core.exceptions import PermissionDenied

    for k in range(3):
        world.submitted(f"req-{k}", state=RUNNING)
    unreadable = world.ledger.get("req-0").attempts[0].job
    world.vertex.set_state(unreadable, SUCCEEDED)  # ended: left the listing, so it takes a get
    real_get = world.vertex.get_custom_job

    def forbidden(name: str, **kwargs: object) -> object:
        if name == unreadable:
            raise PermissionDenied(f"aiplatform.customJobs.get denied on {name}")
        return real_get(name, **kwargs)

    monkeypatch.setattr(world.vertex, "get_custom_job", forbidden)
    log = CapturedLog()
    summary = reconcile(world, log, limit=2)
    assert summary.truncated and summary.active == 2
    assert summary.outcomes == {"error": 1, "observed": 1}
    [error] = log.events("lookup_failed")  # refused for good: said once (an alert), not retried as an error
    assert error["request_id"] == "req-0" and "PermissionDenied" in error["error"]


def test_a_request_a_transient_failure_stopped_is_deferred_with_a_warning_not_an_error(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure the next pass may not meet (a 503 from storage) is a deferral, said at WARNING; one
    it will meet again (a 403) is an error, said at ERROR: a summary that counts a busy storage
    call as an error, with an ERROR line, says something is broken that is not (issue 43). Nor
    does the next pass start at a request deferred for its own failure."""
    from google.api_core.exceptions import Forbidden, ServiceUnavailable

    from shared.reconcile import RECONCILE_TASK

    for k in range(3):
        world.submitted(f"req-{k}", state=RUNNING)
    real_get = world.ledger.get
    failures = {"req-0": ServiceUnavailable("storage busy"), "req-1": Forbidden("storage.objects.get denied")}

    def failing(request_id: str) -> object:
        if request_id in failures:
            raise failures[request_id]
        return real_get(request_id)

    monkeypatch.setattr(world.ledger, "get", failing)
    log = CapturedLog()

    summary = reconcile(world, log)

    assert (summary.outcomes["deferred"], summary.outcomes["error"]) == (1, 1)
    [deferred] = log.events("reconcile_request_deferred")
    assert (deferred["request_id"], deferred["severity"]) == ("req-0", "WARNING")
    [error] = log.events("reconcile_error")
    assert (error["request_id"], error["severity"]) == ("req-1", "ERROR")
    assert world.ledger.cursor(RECONCILE_TASK) == ""


def test_republished_claim_is_taken_over_by_submit(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.vertex.forget(job)

    def crash_before_create(current: RequestRecord) -> RequestRecord:
        current.attempts[0] = Attempt(1, "us-central1", "SPOT", claimed_at=ago(600))
        current.status = RequestStatus.CLAIMED
        return current

    world.rewrite("req-1", crash_before_create)
    reconcile(world)
    [message] = world.publisher.on("job-requests")
    request = validate_request(
        json.dumps(message.data).encode(),
        attributes=message.attributes,
        settings=world.settings,
    )
    envelope = canonical_envelope(
        request,
        default_location=world.settings.location,
        default_max_attempts=world.settings.default_max_attempts,
    )
    claim = claim_attempt(
        world.ledger.get("req-1"),
        envelope=envelope,
        n=request.attempt or 1,
        now=datetime.now(UTC),
        lease_seconds=world.settings.claim_lease_seconds,
        output_dir=world.settings.output_dir_for("req-1"),
    )
    assert (claim.kind, claim.attempt.n) == ("taken_over", 1)


def test_bounded_runs_rotate_through_every_active_request(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from shared import reconcile as reconcile_module

    for k in range(5):
        world.submitted(f"req-{k}", state=RUNNING)
    seen: list[list[str]] = []
    real = reconcile_module.reconcile_request

    def recording(ports: Ports, request_id: str, log: Logger) -> RequestResult:
        seen[-1].append(request_id)
        return real(ports, request_id, log)

    monkeypatch.setattr(reconcile_module, "reconcile_request", recording)
    for _ in range(4):
        seen.append([])
        reconcile(world, limit=2)
    assert [sorted(run) for run in seen] == [
        ["req-0", "req-1"],
        ["req-2", "req-3"],
        ["req-4"],
        ["req-0", "req-1"],
    ]


def test_a_finished_request_with_an_unpublished_alert_is_reconciled(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, FAILED, {"code": 3, "message": "exit 1"})
    world.publisher.fail_next = 1  # the decider's alert publish fails and it never comes back
    reconcile(world)
    assert world.ledger.get("req-1").status == RequestStatus.FAILED
    assert world.publisher.on("ops-alerts") == []

    assert reconcile(world).outcomes == {"waiting": 1}  # within the lease: the decider's business
    world.settings = replace(world.settings, claim_lease_seconds=0)
    assert reconcile(world).outcomes == {"effects_published": 1}
    assert [m.data["kind"] for m in world.publisher.on("ops-alerts")] == ["job_failed"]
    assert reconcile(world).active == 0  # nothing pending any more: finished for good


def test_a_claim_taken_over_meanwhile_is_not_reported_as_adopted(world: World) -> None:
    from shared.reconcile import _settle_claim

    record, _ = world.submitted(state=QUEUED)
    abandoned = Attempt(1, "us-central1", "SPOT", claimed_at=ago(600))
    record.attempts[0] = abandoned  # what reconcile read, before submit took the claim over
    log = CapturedLog()

    result = _settle_claim(world.ports, record, abandoned, log.logger)

    assert result.outcome != "claim_adopted" and log.events("claim_adopted") == []
    assert world.ledger.get("req-1").attempts[0].claimed_at != abandoned.claimed_at


def test_a_job_created_behind_the_ledgers_back_is_cancelled_with_one_alert(world: World) -> None:
    _, recorded = world.submitted(state=RUNNING)
    stray = world.vertex.add("req-1", 1, state=RUNNING)  # as a lost create response leaves it
    log = CapturedLog()

    first = reconcile(world, log)
    second = reconcile(world, log)  # the stray is CANCELLING now: cancelled again, alerted once

    assert world.vertex.cancelled[0] == stray and recorded not in world.vertex.cancelled
    assert first.decisions["stray_job_cancelled"] == 1
    [alert] = [m.data for m in world.publisher.on("ops-alerts")]
    assert (alert["kind"], alert["attempt"], alert["details"]["stray_job"]) == ("stray_job", 1, stray)
    assert world.ledger.get("req-1").attempt(1).job == recorded
    assert second.outcomes["observed"] == 1


def test_the_stray_sweep_is_one_list_per_location_whatever_the_number_of_requests(
    world: World,
) -> None:
    for k in range(6):
        world.submitted(f"req-{k}", state=RUNNING)
    world.submitted("req-eu", state=RUNNING, location="europe-west4")
    world.vertex.lists = 0

    summary = reconcile(world)

    assert summary.active == 7
    assert world.vertex.lists == 2  # us-central1 and europe-west4; none per request
    assert world.vertex.cancelled == []


def test_a_stray_of_a_finished_request_is_cancelled(world: World) -> None:
    _, recorded = world.submitted(state=RUNNING)
    world.vertex.set_state(recorded, SUCCEEDED)
    reconcile(world)
    assert world.ledger.get("req-1").status == RequestStatus.SUCCEEDED
    stray = world.vertex.add("req-1", 1, state=RUNNING)  # a create that completed too late

    summary = reconcile(world)

    assert world.vertex.cancelled == [stray]
    assert summary.decisions["stray_job_cancelled"] == 1
    kinds = [m.data["kind"] for m in world.publisher.on("ops-alerts")]
    assert kinds.count("stray_job") == 1


def _finished_in(world: World, region: str) -> str:
    """req-1 ran its attempt in `region` and succeeded; reconcile saw it finish."""
    _, recorded = world.submitted(state=RUNNING, location=region)
    world.vertex.set_state(recorded, SUCCEEDED)
    reconcile(world)
    assert world.ledger.get("req-1").status == RequestStatus.SUCCEEDED
    return recorded


def test_a_stray_of_a_finished_request_in_a_failover_region_is_cancelled_on_the_next_pass(world: World) -> None:
    from shared.job_locations import remember_location

    remember_location(world.ports, "europe-west4")  # what submit did before creating there
    _finished_in(world, "europe-west4")
    stray = world.vertex.add("req-1", 1, "europe-west4", state=RUNNING)  # a create that completed late
    world.vertex.lists = 0

    summary = reconcile(world)

    assert world.vertex.cancelled == [stray]
    assert summary.decisions["stray_job_cancelled"] == 1
    assert world.vertex.lists == 2  # us-central1 (the default) and europe-west4: one each


def test_the_stray_sweep_lists_every_allowed_location(world: World) -> None:
    world.settings = replace(world.settings, allowed_locations=("us-central1", "asia-east1"))
    _finished_in(world, "asia-east1")
    stray = world.vertex.add("req-1", 1, "asia-east1", state=RUNNING)

    reconcile(world)

    assert world.vertex.cancelled == [stray]


def test_a_job_created_for_the_next_attempt_during_the_sweep_is_no_stray(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """submit claims and creates attempt 2 between the pass's decision and its sweep: the sweep
    checks the listing the pass took (before that create) against records read after it, so the
    new job is found recorded, never cancelled."""
    _, first_job = world.submitted(state=RUNNING)
    world.vertex.set_state(first_job, FAILED, STOCKOUT)
    real_publish = world.publisher.publish
    created: list[str] = []

    def submit_claims_on_the_requeue(topic, data, **attributes):
        future = real_publish(topic, data, **attributes)
        if topic.endswith("/job-requests") and not created:
            created.append(world.claim_requeue("req-1"))
        return future

    monkeypatch.setattr(world.publisher, "publish", submit_claims_on_the_requeue)
    world.vertex.lists = 0

    summary = reconcile(world)

    assert summary.decisions["requeue"] == 1 and len(created) == 1
    assert world.vertex.lists == 1  # the pass's one listing, which the sweep reuses
    assert world.vertex.cancelled == []
    assert world.ledger.get("req-1").attempt(2).job == created[0]


def test_a_job_of_an_attempt_still_being_created_is_not_a_stray(world: World) -> None:
    from shared.deciding.strays import is_stray

    record, _ = world.submitted(state=RUNNING)
    record.attempts[0].job = None  # attempt 1 claimed, its job not recorded yet
    fresh = world.vertex.get_custom_job(world.vertex.add("req-1", 1, state=RUNNING))
    unknown_attempt = world.vertex.get_custom_job(world.vertex.add("req-1", 5, state=RUNNING))
    assert not is_stray(record, fresh) and is_stray(record, unknown_attempt)


def test_a_lookup_that_keeps_failing_for_our_own_reasons_alerts_once_and_keeps_the_claim(
    world: World,
) -> None:
    from google.api_core.exceptions import PermissionDenied

    envelope = {"schema_version": 1, "request_id": "req-1", "custom_job": {}, "location": "us-central1"}
    world.ledger.restore(
        RequestRecord("req-1", envelope, "gs://c/r/req-1/", attempts=[Attempt(1, "us-central1", "SPOT", ago(600))])
    )

    def forbidden(request: dict, **_: object) -> list:
        raise PermissionDenied("aiplatform.customJobs.list denied")

    world.vertex.list_custom_jobs = forbidden  # type: ignore[method-assign]
    assert reconcile(world).outcomes == {"error": 1}
    assert reconcile(world).outcomes == {"error": 1}

    record = world.ledger.get("req-1")
    assert record.status == RequestStatus.CLAIMED
    # The stray sweep's listing is refused too: said once as well (`stray_sweep_refused`).
    [alert, blind] = world.publisher.on("ops-alerts")
    assert alert.data["kind"] == "lookup_failed" and "PermissionDenied" in alert.data["message"]
    assert (blind.data["kind"], blind.data["details"]["location"]) == ("stray_sweep_refused", "us-central1")


def test_a_followed_job_whose_reads_are_refused_for_good_alerts_once_and_keeps_the_request(
    world: World,
) -> None:
    """A get refused for our own reasons (a permission removed in the job's location) leaves the
    request where it is, but not silently: one `lookup_failed` names it (seed 167)."""
    from google.api_core.exceptions import PermissionDenied

    _, job = world.submitted(state=RUNNING)
    reconcile(world)  # seen running
    world.vertex.set_state(job, FAILED)  # ended: gone from the unfinished listing, a get is needed

    def forbidden(name: str, **_: object) -> None:
        raise PermissionDenied("Permission 'aiplatform.customJobs.get' denied")

    world.vertex.get_custom_job = forbidden  # type: ignore[method-assign]
    assert reconcile(world).outcomes == {"error": 1}
    assert reconcile(world).outcomes == {"error": 1}

    assert world.ledger.get("req-1").status == RequestStatus.RUNNING
    [alert] = world.publisher.on("ops-alerts")
    assert (alert.data["kind"], alert.data["request_id"]) == ("lookup_failed", "req-1")
    assert "PermissionDenied" in alert.data["message"] and job in alert.data["message"]


def test_a_job_deleted_at_vertex_fails_its_request_once_with_an_alert_naming_it(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    reconcile(world)  # seen running
    world.vertex.forget(job)  # deleted at Vertex: every get of it answers NotFound from now on
    log = CapturedLog()

    first = reconcile(world, log)
    world.vertex.gets = 0
    second = reconcile(world, log)

    assert log.events("reconcile_error") == []
    record = world.ledger.get("req-1")
    assert record.status == RequestStatus.FAILED and record.attempts[0].outcome == AttemptOutcome.FAILED
    assert first.decisions["job_failed"] == 1
    [alert] = [m.data for m in world.publisher.on("ops-alerts")]
    assert (alert["kind"], alert["request_id"], alert["job"]) == ("job_failed", "req-1", job)
    assert "not found at Vertex AI" in alert["message"] and alert["details"]["error"]["code"] == 5
    # Settled for good: no longer reconciled, no get spent on it, nothing alerted again.
    assert second.active == 0 and world.vertex.gets == 0
    assert len(world.publisher.on("ops-alerts")) == 1


def test_a_deleted_jobs_end_tells_no_fleet_fact_vertex_never_reported(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    reconcile(world)
    seen_running_since = world.ledger.get("req-1").attempts[0].state_changed_at
    world.vertex.forget(job)

    reconcile(world)

    # When it really ended is unknown: its end is the last moment Vertex vouched for it.
    attempt = world.ledger.get("req-1").attempts[0]
    assert attempt.state == "JOB_STATE_FAILED" and attempt.ended_at == seen_running_since
    assert attempt.preemptions == 0 and not attempt.preemptions_unknown


def test_a_deleted_jobs_alert_whose_publish_fails_is_sent_by_a_later_pass_once(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.vertex.forget(job)
    world.publisher.fail_next = 1  # the decider's publish fails and it never comes back

    reconcile(world)
    assert world.ledger.get("req-1").status == RequestStatus.FAILED
    assert world.publisher.on("ops-alerts") == []
    world.settings = replace(world.settings, claim_lease_seconds=0)  # its decider is presumed dead
    assert reconcile(world).outcomes == {"effects_published": 1}
    reconcile(world)

    assert [m.data["kind"] for m in world.publisher.on("ops-alerts")] == ["job_failed"]
    assert world.ledger.get("req-1").pending_alerts == []


def test_a_cancelled_requests_job_deleted_at_vertex_ends_it_cancelled_without_an_alert(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.api_core.exceptions import NotFound

    from shared.ledger.cancelling import cancel_request

    _, job = world.submitted(state=RUNNING)
    world.ledger.swap("req-1", lambda current: cancel_request(current, by="ops", reason=None, now=datetime.now(UTC)))
    world.vertex.forget(job)  # deleted before the cancel was sent

    def cancel_missing(name: str, **_: object) -> None:
        raise NotFound(f"{name} does not exist")  # as Vertex answers a cancel of a deleted job

    monkeypatch.setattr(world.vertex, "cancel_custom_job", cancel_missing)
    log = CapturedLog()

    reconcile(world, log)

    assert log.events("reconcile_error") == []
    record = world.ledger.get("req-1")
    assert record.status == RequestStatus.CANCELLED and record.attempts[0].outcome == AttemptOutcome.CANCELLED
    assert world.publisher.on("ops-alerts") == []


def test_a_claim_backing_off_is_not_looked_up_unless_its_request_was_cancelled(world: World) -> None:
    from shared.ledger.cancelling import cancel_request

    envelope = {"schema_version": 1, "request_id": "req-1", "custom_job": {}, "location": "us-central1"}
    claim = Attempt(1, "us-central1", "SPOT", ago(600))
    claim.create_sent_at = ago(590)  # its create may have landed: only a lookup can end it
    claim.republished, claim.republished_at = 1, ago(5)
    world.ledger.restore(RequestRecord("req-1", envelope, "gs://c/r/req-1/", attempts=[claim]))
    world.vertex.lists = 0

    assert reconcile(world).outcomes == {"idle": 1}
    assert world.vertex.lists == 1  # the pass's own listing for the sweep; no lookup of the claim

    world.ledger.swap("req-1", lambda current: cancel_request(current, by="ops", reason=None, now=datetime.now(UTC)))
    assert reconcile(world).outcomes == {"cancelled": 1}  # a cancel does not wait for the backoff
    assert world.ledger.get("req-1").status == RequestStatus.CANCELLED


def vertex_ends_the_cancelled(world: World) -> None:
    """CANCELLING turns CANCELLED, as Vertex does soon after a cancel: no list shows it again."""
    for name in world.vertex.cancelled:
        world.vertex.set_state(name, CANCELLED)


def fail_the_stray_alerts_write_once(world: World, monkeypatch: pytest.MonkeyPatch, *, after_cancel: bool) -> None:
    """The first ledger write that would add a `stray_job` alert fails (a 503), once; with
    `after_cancel`, only once the stray's cancel was sent."""
    from google.api_core.exceptions import ServiceUnavailable

    from shared.swap import Decided

    real_swap = world.ledger.swap
    failed: list[bool] = []

    def strays_alerted(record: RequestRecord | None) -> int:
        return sum(alert["kind"] == "stray_job" for alert in record.pending_alerts) if record else 0

    def swap(request_id: str, transition):  # noqa: ANN001, ANN202 - the ledger's own signature
        def checked(current: RequestRecord | None):  # noqa: ANN202
            before = strays_alerted(current)
            result = transition(current)
            proposed = result.value if isinstance(result, Decided) else result
            due = not failed and (world.vertex.cancelled or not after_cancel)
            if due and strays_alerted(proposed) > before:
                failed.append(True)
                raise ServiceUnavailable("the ledger write failed")
            return result

        return real_swap(request_id, checked)

    monkeypatch.setattr(world.ledger, "swap", swap)


@pytest.mark.parametrize("after_cancel", [True, False], ids=["after_the_cancel", "before_the_cancel"])
def test_a_stray_is_alerted_once_even_when_its_alerts_ledger_write_fails(
    world: World, monkeypatch: pytest.MonkeyPatch, after_cancel: bool
) -> None:
    """Issue 43, defect 6: the alert's write failing right after the cancel lost it for good (the
    next pass no longer lists a cancelled job). The alert is decided before the cancel is sent."""
    _, recorded = world.submitted(state=RUNNING)
    stray = world.vertex.add("req-1", 1, state=RUNNING)
    fail_the_stray_alerts_write_once(world, monkeypatch, after_cancel=after_cancel)
    log = CapturedLog()

    for _ in range(2):
        reconcile(world, log)
        vertex_ends_the_cancelled(world)
    world.settings = replace(world.settings, claim_lease_seconds=0)  # a decider presumed dead
    reconcile(world, log)

    [alert] = [m.data for m in world.publisher.on("ops-alerts")]
    assert (alert["kind"], alert["details"]["stray_job"]) == ("stray_job", stray)
    assert stray in world.vertex.cancelled and recorded not in world.vertex.cancelled
    assert world.ledger.get("req-1").pending_alerts == []


def test_a_stray_whose_cancel_fails_after_its_alert_was_decided_is_cancelled_and_alerted_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.api_core.exceptions import ServiceUnavailable

    _, recorded = world.submitted(state=RUNNING)
    stray = world.vertex.add("req-1", 1, state=RUNNING)
    real_cancel = world.vertex.cancel_custom_job
    refused: list[str] = []

    def cancel_fails_once(name: str, **kwargs: object) -> None:
        if not refused:
            refused.append(name)
            raise ServiceUnavailable("cancel failed")  # or the instance died right before it
        real_cancel(name, **kwargs)

    monkeypatch.setattr(world.vertex, "cancel_custom_job", cancel_fails_once)
    log = CapturedLog()

    for _ in range(2):
        reconcile(world, log)
        vertex_ends_the_cancelled(world)
    world.settings = replace(world.settings, claim_lease_seconds=0)
    reconcile(world, log)

    assert refused == [stray] and world.vertex.cancelled[0] == stray
    kinds = [m.data["kind"] for m in world.publisher.on("ops-alerts")]
    assert kinds == ["stray_job"]


def test_a_live_job_whose_record_a_person_deleted_is_cancelled_with_one_alert(world: World, gcs_bucket) -> None:
    """The claim writes the record before its create, so a live job labelled for a request the
    ledger no longer has (a person deleted its record) has nothing that will ever manage it."""
    _, orphan = world.submitted(state=PENDING)
    gcs_bucket.delete_blob("requests/req-1.json")
    log = CapturedLog()

    first = reconcile(world, log)
    reconcile(world, log)  # the job is CANCELLING now: cancelled again, never alerted twice

    assert world.vertex.cancelled[0] == orphan
    assert first.decisions["stray_job_cancelled"] == 1
    [alert] = [m.data for m in world.publisher.on("ops-alerts")]
    assert (alert["kind"], alert["request_id"], alert["details"]["stray_job"]) == ("stray_job", "req-1", orphan)
    assert alert["details"]["record"] == "missing"
    [line, *_] = log.events("stray_job_cancelled")
    assert line["severity"] == "WARNING" and line["job"] == orphan


def test_a_recordless_strays_alert_is_sent_before_its_cancel_and_once_while_the_cancel_fails(
    world: World, gcs_bucket, monkeypatch
) -> None:
    """A cancelled job leaves the sweep's listing: its alert must be out before the cancel, and a
    cancel refused on every pass (a 403) must not alert again on every pass."""
    from google.api_core.exceptions import PermissionDenied

    _, orphan = world.submitted(state=PENDING)
    gcs_bucket.delete_blob("requests/req-1.json")

    def refuse(*args, **kwargs):
        raise PermissionDenied("cancel refused")

    monkeypatch.setattr(world.vertex, "cancel_custom_job", refuse)
    reconcile(world)
    reconcile(world)

    assert world.vertex.jobs[orphan].state == PENDING  # both passes tried, and were refused
    [alert, refused] = [m.data for m in world.publisher.on("ops-alerts")]
    assert (alert["kind"], alert["details"]["stray_job"]) == ("stray_job", orphan)
    assert (refused["kind"], refused["details"]["job"]) == ("stray_sweep_refused", orphan)  # runs on: said once
