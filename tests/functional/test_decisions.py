"""on_job_event's logic end to end over a real ledger (fake-gcs-server) with Vertex and Pub/Sub
faked in memory: exactly-once decisions under duplicates, concurrency and reordering."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.delivery import Message
from shared.errors import TransientError, is_retryable
from shared.ledger.claims import claim_attempt
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.observe import EventOutcome, handle_job_event
from shared.requests.envelope import canonical_envelope
from shared.requests.policy import validate_request
from tests.support.decisions import (
    STOCKOUT,
    USER_ERROR,
    CapturedLog,
    FakePublisher,
    FakeVertex,
    World,
    log_entry,
    make_settings,
)

RUNNING, FAILED, SUCCEEDED, CANCELLED = 3, 5, 4, 7


@pytest.fixture
def world(gcs_bucket) -> World:
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))


def deliver(world: World, data: bytes, log: CapturedLog | None = None) -> EventOutcome:
    log = log or CapturedLog()
    return handle_job_event(Message(data, "m-1"), log.logger, settings=world.settings, ports=lambda: world.ports)


def ledger_objects(world: World) -> dict[str, int]:
    bucket = world.ledger._bucket  # noqa: SLF001 - the test inspects what the store wrote
    return {blob.name: blob.generation for blob in bucket.client.list_blobs(bucket)}


def fleet_objects(world: World) -> list[str]:
    return sorted(name for name in ledger_objects(world) if name.startswith("fleet/"))


def test_running_line_reads_the_job_and_marks_the_request_running(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    assert deliver(world, log_entry(job, "Job is running.")) is EventOutcome.OBSERVED
    record = world.ledger.get("req-1")
    assert record.status == RequestStatus.RUNNING and record.attempts[0].state == "JOB_STATE_RUNNING"
    assert world.vertex.gets == 1


def test_irrelevant_lines_and_garbage_build_no_client() -> None:
    def no_ports():
        raise AssertionError("an irrelevant entry must not touch the ledger or Vertex")

    settings_ = make_settings("unused")
    cases = {
        b"not json": EventOutcome.IGNORED,
        json.dumps({"resource": {"type": "gce_instance"}}).encode(): EventOutcome.IGNORED,
        log_entry(
            "projects/p/locations/l/customJobs/1", "step 10 loss 0.5", task="workerpool0-0"
        ): EventOutcome.IRRELEVANT,
        log_entry(
            "projects/p/locations/l/customJobs/1", "Finished tearing down training program."
        ): EventOutcome.IRRELEVANT,
    }
    for data, outcome in cases.items():
        log = CapturedLog()
        assert handle_job_event(Message(data, "m"), log.logger, settings=settings_, ports=no_ports) is outcome
        [line] = log.lines
        assert line["severity"] == "DEBUG"


def test_foreign_job_costs_one_ledger_read_and_no_vertex_call(world: World) -> None:
    log = CapturedLog()
    outcome = deliver(
        world,
        log_entry("projects/x/locations/l/customJobs/999", "Job failed.", severity="ERROR"),
        log,
    )
    assert outcome is EventOutcome.FOREIGN and world.vertex.gets == 0
    [line] = log.lines
    assert (line["severity"], line["event"]) == ("INFO", "foreign_job")


def test_too_old_entry_is_dropped_with_a_warning(world: World) -> None:
    _, job = world.submitted()
    old = (datetime.now(UTC) - timedelta(days=2)).isoformat()
    log = CapturedLog()
    assert deliver(world, log_entry(job, "Job failed.", timestamp=old), log) is EventOutcome.STALE
    assert log.events("stale_event")[0]["severity"] == "WARNING" and world.vertex.gets == 0


def test_a_preemption_line_delivered_twice_counts_once(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    deliver(world, log_entry(job, "Job is running."))
    log = CapturedLog()
    preempted = log_entry(job, "The Spot VM was preempted. Restarting the job (restart 1 of 6).", insert_id="ins-1")
    for _ in range(2):
        deliver(world, preempted, log)
    assert world.ledger.get("req-1").attempts[0].preemptions == 1
    [line] = log.events("preemption")
    assert (
        line["severity"],
        line["request_id"],
        line["attempt"],
        line["job"],
        line["location"],
        line["preemptions"],
    ) == ("WARNING", "req-1", 1, job, "us-central1", 1)


def test_ten_concurrent_deliveries_of_the_terminal_event_requeue_once(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, FAILED, STOCKOUT)
    terminal = log_entry(job, "Job failed.", insert_id="final", severity="ERROR")
    log = CapturedLog()
    retried: list[BaseException] = []
    barrier = threading.Barrier(10)

    def one_delivery() -> None:
        barrier.wait()
        try:
            deliver(world, terminal, log)
        except TransientError as exc:  # "being re-queued by another delivery": redelivered later
            retried.append(exc)

    threads = [threading.Thread(target=one_delivery) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for _ in retried:  # the redeliveries of the ones that asked for it
        deliver(world, terminal, log)

    [requeue] = world.publisher.on("job-requests")
    assert (requeue.data["attempt"], requeue.attributes) == (
        2,
        {"request_id": "req-1", "spotjobs_origin": "requeue"},
    )
    record = world.ledger.get("req-1")
    assert record.status == RequestStatus.REQUEUED and record.requeue.message_id is not None
    assert len(log.events("requeue")) == 1 and len(log.events("requeue_published")) == 1


def test_terminal_event_first_then_earlier_events_still_one_requeue(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, FAILED, STOCKOUT)
    deliver(world, log_entry(job, "Job failed.", insert_id="final"))
    earlier = [
        log_entry(
            job,
            f"The Spot VM was preempted. Restarting the job (restart {k} of 6).",
            insert_id=f"p{k}",
        )
        for k in (3, 2, 1)
    ] + [log_entry(job, "Job is running."), log_entry(job, "Waiting for job to be provisioned.")]
    for data in earlier:
        deliver(world, data)
    assert len(world.publisher.on("job-requests")) == 1
    record = world.ledger.get("req-1")
    assert record.status == RequestStatus.REQUEUED
    assert (record.attempts[0].state, record.attempts[0].preemptions) == ("JOB_STATE_FAILED", 3)

    second_job = world.claim_requeue("req-1")  # submit took attempt 2
    for data in earlier + [log_entry(job, "Job failed.", insert_id="final")]:
        deliver(world, data)  # attempt 1's late lines
    record = world.ledger.get("req-1")
    assert record.status == RequestStatus.SUBMITTED and record.requeue is None
    assert record.attempts[1].job == second_job and record.attempts[1].outcome is None
    assert len(world.publisher.on("job-requests")) == 1


def test_a_failed_publish_is_redelivered_and_published_once(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, FAILED, STOCKOUT)
    terminal = log_entry(job, "Job failed.", insert_id="final")
    world.publisher.fail_next = 1
    with pytest.raises(Exception) as failure:
        deliver(world, terminal)
    assert is_retryable(failure.value)
    record = world.ledger.get("req-1")
    assert record.status == RequestStatus.REQUEUED and record.requeue.message_id is None

    with pytest.raises(TransientError, match="being re-queued"):
        deliver(world, terminal)  # within the lease the decider may still be publishing
    assert world.publisher.on("job-requests") == []

    world.settings = replace(world.settings, claim_lease_seconds=0)  # the decider is presumed dead
    deliver(world, terminal)
    deliver(world, terminal)
    assert len(world.publisher.on("job-requests")) == 1
    assert world.ledger.get("req-1").requeue.message_id == "1"


@pytest.mark.parametrize(
    ("request_options", "location", "strategy"),
    [
        ({}, "us-central1", "SPOT"),
        (
            {
                "locations": ["us-central1", "europe-west4"],
                "fallback": {"after_spot_attempts": 1, "strategy": "STANDARD"},
                "checkpoints": {"keep_last": 3},
            },
            "europe-west4",
            "STANDARD",
        ),
    ],
)
def test_requeued_envelope_is_what_submit_accepts_for_the_next_attempt(
    world: World, request_options: dict, location: str, strategy: str
) -> None:
    _, job = world.submitted(state=RUNNING, request=request_options)
    world.vertex.set_state(job, FAILED, STOCKOUT)
    deliver(world, log_entry(job, "Job failed."))
    [published] = world.publisher.on("job-requests")
    request = validate_request(
        json.dumps(published.data).encode(),
        attributes=published.attributes,
        settings=world.settings,
    )
    assert (request.request_id, request.attempt, request.location) == ("req-1", 2, location)
    record = world.ledger.get("req-1")
    same_request = canonical_envelope(
        request,
        default_location=world.settings.location,
        default_max_attempts=world.settings.default_max_attempts,
    )
    assert {**same_request, "location": "us-central1"} == record.request
    claim = claim_attempt(
        record,
        envelope=same_request,
        n=2,
        now=datetime.now(UTC),
        lease_seconds=world.settings.claim_lease_seconds,
        output_dir=world.settings.output_dir_for("req-1"),
    )
    assert claim.kind == "claimed"
    assert (claim.attempt.location, claim.attempt.strategy) == (location, strategy)
    assert claim.record.output_dir == world.settings.output_dir_for("req-1")


def test_success_requests_one_prune(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, SUCCEEDED)
    for _ in range(3):
        deliver(world, log_entry(job, "Job completed successfully."))
    [prune] = world.publisher.on("maintenance")
    assert prune.data == {"task": "prune", "request_id": "req-1"}
    record = world.ledger.get("req-1")
    assert record.status == RequestStatus.SUCCEEDED and record.finished_at and record.attempts[0].ended_at


def kit_entry(job_name: str, event: str, run: int, key: str | None, **fields: object) -> bytes:
    """A trainer kit line of the job's primary replica, as the sink publishes it (jsonPayload),
    signed with `key`."""
    from spotjobs_kit.lines import format_line

    line = format_line(event, {"request_id": "req-1", "attempt": 1, "run": run, **fields}, key=key)
    entry = json.loads(log_entry(job_name, "", task="workerpool0-0"))
    return json.dumps({**entry, "jsonPayload": json.loads(line)}).encode()


def test_a_success_after_an_unfinished_preemption_requeues_once_with_one_alert(gcs_bucket) -> None:
    world = World(
        LedgerStore(gcs_bucket),
        FakeVertex(),
        FakePublisher(),
        make_settings(gcs_bucket.name, SPOTJOBS_KIT_LINES_SETTLE_SECONDS="0.5"),
    )
    _, job = world.submitted(state=RUNNING)
    key = world.kit_key()
    for line in (kit_entry(job, "run_started", 0, key, resumed_step=0), kit_entry(job, "preempted", 0, key, step=30)):
        deliver(world, line)
    world.vertex.set_state(job, SUCCEEDED)  # the process exited 0 after its SIGTERM
    success = log_entry(job, "Job completed successfully.")
    with pytest.raises(TransientError, match="waiting for its last run.s kit lines"):
        deliver(world, success)  # just ended: a later run's line may still be on its way
    assert world.ledger.get("req-1").attempts[0].outcome is None
    time.sleep(0.6)
    log = CapturedLog()
    barrier = threading.Barrier(8)
    retried: list[BaseException] = []

    def one_delivery() -> None:
        barrier.wait()
        try:
            deliver(world, success, log)
        except TransientError as exc:
            retried.append(exc)

    threads = [threading.Thread(target=one_delivery) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for _ in retried:
        deliver(world, success, log)

    record = world.ledger.get("req-1")
    assert record.status == RequestStatus.REQUEUED and record.requeue.attempt == 2
    assert record.prune_requested_at is None and record.pending_alerts == []
    [requeue] = world.publisher.on("job-requests")
    assert requeue.data["attempt"] == 2
    [alert] = world.publisher.on("ops-alerts")
    assert (alert.data["kind"], alert.data["attempt"], alert.data["job"]) == ("incomplete_success", 1, job)
    assert world.publisher.on("maintenance") == []  # no prune of a request that is not done
    assert len(log.events("incomplete_success")) == 1 and len(log.events("requeue")) == 1


def test_user_error_fails_with_one_alert_and_no_requeue(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, FAILED, USER_ERROR)
    log = CapturedLog()
    for data in (
        log_entry(job, "The replica workerpool0-0 exited with a non-zero status of 1.", severity="ERROR"),
        log_entry(job, "Job failed.", severity="ERROR"),
    ):
        deliver(world, data, log)
    [alert] = world.publisher.on("ops-alerts")
    assert (alert.data["kind"], alert.data["severity"], alert.data["details"]["error"]) == (
        "job_failed",
        "ERROR",
        USER_ERROR,
    )
    assert alert.attributes == {"kind": "job_failed", "severity": "ERROR", "request_id": "req-1"}
    assert world.publisher.on("job-requests") == []
    assert world.ledger.get("req-1").status == RequestStatus.FAILED
    assert [line["severity"] for line in log.events("job_failed")] == ["ERROR"]


def test_last_attempt_gives_up_with_one_alert(world: World) -> None:
    _, job = world.submitted(state=RUNNING, request={"max_attempts": 1})
    world.vertex.set_state(job, FAILED, STOCKOUT)
    for _ in range(3):
        deliver(world, log_entry(job, "Job failed."))
    kinds = [m.data["kind"] for m in world.publisher.on("ops-alerts")]
    assert kinds == ["attempts_exhausted"] and world.publisher.on("job-requests") == []
    assert world.ledger.get("req-1").status == RequestStatus.GAVE_UP


def test_failed_job_without_its_error_yet_is_redelivered(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, FAILED)
    before = ledger_objects(world)
    with pytest.raises(TransientError, match="error is not published"):
        deliver(world, log_entry(job, "Job failed."))
    after = ledger_objects(world)
    assert after.keys() - set(fleet_objects(world)) == before.keys()  # only the open wait is new
    assert world.ledger.get("req-1").attempts[0].outcome is None


def test_line_before_submit_recorded_the_job_finishes_its_adoption(world: World) -> None:
    """The job is indexed and its record does not name it: the delivery adopting it is between
    its two writes, or died there. The index is the adoption's word: the line finishes it and is
    decided, rather than nacked until reconcile adopts the claim (simulator seed 31)."""
    record, job = world.submitted(state=RUNNING)

    def unrecord(current):
        current.attempts[0].job = None
        return current

    world.ledger.update("req-1", unrecord)
    assert deliver(world, log_entry(job, "Job is running.")) is EventOutcome.OBSERVED
    assert world.ledger.get("req-1").attempts[0].job == job


def test_a_line_of_a_job_of_the_requests_deleted_record_does_not_finish_a_new_claims_adoption(world: World) -> None:
    """A person deleted req-1's record while attempt 1's job ran; its index entry stayed, and the
    stray sweep cancelled the job. A redelivery claimed the id anew and its create is on its way.
    The old job's last line finds it indexed for attempt 1 and the claim without a job, but the
    job was created before the record: it is not the claim's (as `find_attempt_job` reads it, seed
    1771, where adopting it ended the request CANCELLED), so the line adopts nothing."""
    _, earlier_life = world.submitted(state=CANCELLED)
    world.vertex.jobs[earlier_life].create_time = datetime.now(UTC) - timedelta(hours=2)

    def claimed_anew(current: RequestRecord) -> RequestRecord:
        fresh = _iso(datetime.now(UTC) - timedelta(seconds=30))
        current.created_at = fresh
        current.status = RequestStatus.CLAIMED
        current.attempts[0] = Attempt(1, "us-central1", "SPOT", claimed_at=fresh, create_sent_at=fresh)
        return current

    world.rewrite("req-1", claimed_anew)
    with contextlib.suppress(TransientError):  # redelivered until the claim records its own job
        deliver(world, log_entry(earlier_life, "Job was cancelled."))
    stored = world.ledger.get("req-1")
    assert stored.attempts[0].job is None and stored.status == RequestStatus.CLAIMED


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


garbage = st.binary(max_size=300) | st.builds(
    lambda job_id, task, text, resource: json.dumps(
        {
            "resource": {"type": resource, "labels": {"job_id": job_id, "task_name": task}},
            "textPayload": text,
            "insertId": "x",
        }
    ).encode(),
    st.from_regex(r"[0-9]{1,19}", fullmatch=True) | st.text(max_size=30),
    st.sampled_from(["service", "workerpool0-0", ""]),
    st.sampled_from(["Job failed.", "Job is running.", "preempted", "STOCKOUT", "hello"]) | st.text(max_size=40),
    st.sampled_from(["ml_job", "gce_instance", "cloud_run_revision"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=garbage)
def test_garbage_and_foreign_events_are_acknowledged_without_ledger_change(world: World, data: bytes) -> None:
    if not ledger_objects(world):
        world.submitted(state=RUNNING)  # one real request, so there is something to disturb

    # A Vertex preemption line of a job the index does not name may be ours, not adopted yet: it is
    # kept under unindexed/ (docs/signals.md), and nothing else changes. Hypothesis shares the
    # world between examples, so an earlier example's parked line may be there before.
    def indexed() -> dict:
        return {name: gen for name, gen in ledger_objects(world).items() if not name.startswith("unindexed/")}

    before = indexed()
    outcome = deliver(world, data)
    assert outcome in {EventOutcome.IGNORED, EventOutcome.IRRELEVANT, EventOutcome.FOREIGN, EventOutcome.PARKED}
    assert indexed() == before and world.publisher.messages == []


def test_a_failed_alert_publish_is_kept_and_published_once_after_redelivery(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, FAILED, USER_ERROR)
    terminal = log_entry(job, "Job failed.", insert_id="final", severity="ERROR")
    world.publisher.fail_next = 1
    with pytest.raises(Exception) as failure:
        deliver(world, terminal)
    assert is_retryable(failure.value)
    record = world.ledger.get("req-1")
    assert record.status == RequestStatus.FAILED
    assert [alert["kind"] for alert in record.pending_alerts] == ["job_failed"]

    with pytest.raises(TransientError, match="being published"):
        deliver(world, terminal)  # within the lease the decider may still be publishing
    assert world.publisher.on("ops-alerts") == []

    world.settings = replace(world.settings, claim_lease_seconds=0)  # the decider is presumed dead
    deliver(world, terminal)
    deliver(world, terminal)
    [alert] = world.publisher.on("ops-alerts")
    assert (alert.data["kind"], alert.data["request_id"]) == ("job_failed", "req-1")
    assert world.ledger.get("req-1").pending_alerts == []


def test_two_deliveries_that_find_the_decider_dead_at_once_publish_its_alert_once(world: World) -> None:
    """Pub/Sub may push one message to two instances at once: of two deliveries that find an alert
    left by a decider presumed dead, one takes it over and publishes (issue 43: found by the
    simulator's interleaved deliveries, both used to publish)."""
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, FAILED, USER_ERROR)
    terminal = log_entry(job, "Job failed.", insert_id="final", severity="ERROR")
    world.publisher.fail_next = 1
    with pytest.raises(Exception):  # noqa: B017 - the publish fails; the alert stays pending
        deliver(world, terminal)
    long_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat()

    def decided_long_ago(current: RequestRecord | None) -> RequestRecord | None:
        assert current is not None
        current.pending_alerts = [{**alert, "time": long_ago} for alert in current.pending_alerts]
        return current

    world.ledger.update("req-1", decided_long_ago)  # its decider died an hour ago
    publish = world.publisher.publish
    second: list[object] = []

    def publish_while_another_instance_delivers(*args, **kwargs):
        if not second:
            second.append("running")
            try:
                second.append(deliver(world, terminal))
            except TransientError as exc:
                second.append(exc)
        return publish(*args, **kwargs)

    world.publisher.publish = publish_while_another_instance_delivers
    deliver(world, terminal)
    [_, told] = second
    assert isinstance(told, TransientError) and "being published" in str(told)
    [alert] = world.publisher.on("ops-alerts")
    assert (alert.data["kind"], alert.data["request_id"]) == ("job_failed", "req-1")
    assert world.ledger.get("req-1").pending_alerts == []


class LostReplyLedger(LedgerStore):
    """A ledger whose next write lands but answers 412, as a retried write whose first try
    already succeeded does."""

    lose_next_reply = False

    def _write(self, record: RequestRecord, generation: int) -> None:
        from google.api_core.exceptions import PreconditionFailed

        super()._write(record, generation)
        if self.lose_next_reply:
            self.lose_next_reply = False
            raise PreconditionFailed("the first try of this write already landed")


def test_a_decision_whose_write_reply_was_lost_still_publishes_its_effects(gcs_bucket) -> None:
    ledger = LostReplyLedger(gcs_bucket)
    world = World(ledger, FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))
    _, job = world.submitted(state=RUNNING, request={"max_attempts": 1})
    world.vertex.set_state(job, FAILED, STOCKOUT)
    terminal = log_entry(job, "Job failed.", insert_id="final")
    ledger.lose_next_reply = True
    with pytest.raises(TransientError, match="being published"):
        deliver(world, terminal)  # its own write landed: the re-run decides nothing new
    assert world.ledger.get("req-1").status == RequestStatus.GAVE_UP

    world.settings = replace(world.settings, claim_lease_seconds=0)
    deliver(world, terminal)
    assert [m.data["kind"] for m in world.publisher.on("ops-alerts")] == ["attempts_exhausted"]


def test_a_failed_prune_request_is_kept_and_published_once(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, SUCCEEDED)
    done = log_entry(job, "Job completed successfully.")
    world.publisher.fail_next = 1
    with pytest.raises(Exception) as failure:
        deliver(world, done)
    assert is_retryable(failure.value) and world.ledger.get("req-1").prune_pending

    world.settings = replace(world.settings, claim_lease_seconds=0)
    deliver(world, done)
    deliver(world, done)
    [prune] = world.publisher.on("maintenance")
    assert prune.data == {"task": "prune", "request_id": "req-1"}
    assert not world.ledger.get("req-1").prune_pending


def test_ledger_timestamps_written_by_decisions_have_the_ledger_format(world: World) -> None:
    import re

    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, SUCCEEDED)
    deliver(world, log_entry(job, "Job completed successfully."))
    record = world.ledger.get("req-1")
    ledger_format = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
    assert ledger_format.fullmatch(record.finished_at)
    assert ledger_format.fullmatch(record.prune_requested_at)


def test_concurrent_deliveries_record_each_fleet_fact_once(world: World) -> None:
    # The decisions' facts (shared/fleet): the Spot wait once it runs, then
    # the stockout, the run and its preemption at the end: each one object however many decide.
    _, job = world.submitted(state=1)
    world.vertex.set_state(job, RUNNING)
    deliver(world, log_entry(job, "Job is running."))
    world.vertex.set_state(job, FAILED, STOCKOUT)
    terminal = log_entry(job, "Job failed.", insert_id="final", severity="ERROR")
    barrier = threading.Barrier(5)

    def one_delivery() -> None:
        barrier.wait()
        for _ in range(5):  # a delivery told to come back is redelivered
            try:
                deliver(world, terminal)
                return
            except TransientError:
                continue

    threads = [threading.Thread(target=one_delivery) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    facts = fleet_objects(world)
    kinds = sorted(name.split("/")[3].split("~")[0] for name in facts)
    assert kinds == ["preempt", "run", "stockout", "wait"]
    assert all(name.startswith("fleet/a2-highgpu-1g+none+0/us-central1/") for name in facts)
