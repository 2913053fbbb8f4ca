"""A job speaks only for itself (issue 32, item 1): on_job_event counts a kit line as evidence only
if it is signed with the key of the attempt it names; any other kit line moves nothing, not even a
Vertex read at a moment its writer chose.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from spotjobs_kit.lines import format_line

from shared.deciding.preemptions import kit_runs
from shared.delivery import Message
from shared.found_jobs import adopt_job
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.observe import EventOutcome, handle_job_event
from shared.reconcile import run_reconcile
from tests.support.decisions import CapturedLog, FakePublisher, World, log_entry, make_settings
from tests.support.vertex import FakeVertex

RUNNING, SUCCEEDED = 3, 4


@pytest.fixture
def world(gcs_bucket) -> World:
    # Settled at once: a success is decided on the kit lines already counted, with no wait.
    settings = make_settings(gcs_bucket.name, SPOTJOBS_KIT_LINES_SETTLE_SECONDS="0")
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), settings)


def deliver(world: World, data: bytes) -> EventOutcome:
    return handle_job_event(
        Message(data, "m-1"), CapturedLog().logger, settings=world.settings, ports=lambda: world.ports
    )


def kit_entry(
    job_name: str,
    event: str,
    run: int,
    key: str | None,
    *,
    request_id: str,
    insert_id: str | None = None,
    **fields: object,
) -> bytes:
    """A kit line in the job's log, as the sink publishes it: whoever wrote the entry chose every
    field of it, the job id in its resource labels included."""
    line = format_line(event, {"request_id": request_id, "attempt": 1, "run": run, **fields}, key=key)
    entry = json.loads(log_entry(job_name, "", task="workerpool0-0", insert_id=insert_id))
    return json.dumps({**entry, "jsonPayload": json.loads(line)}).encode()


def parked_lines(world: World) -> list[str]:
    bucket = world.ledger._bucket  # noqa: SLF001
    return [blob.name for blob in bucket.client.list_blobs(bucket, prefix="unindexed/")]


def preempted_then_succeeded(world: World, job: str, key: str | None, request_id: str) -> RequestRecord:
    """A run that started, got the SIGTERM and never finished, then Vertex's SUCCEEDED."""
    deliver(world, kit_entry(job, "run_started", 0, key, request_id=request_id, resumed_step=0))
    deliver(world, kit_entry(job, "preempted", 0, key, request_id=request_id, step=30))
    world.vertex.set_state(job, SUCCEEDED)
    deliver(world, log_entry(job, "Job completed successfully."))
    record = world.ledger.get(request_id)
    assert record is not None
    return record


def test_a_line_another_job_forged_for_a_victim_is_ignored(world: World) -> None:
    """The issue's attack: the attacker's job reads the victim's job id (its run objects) and
    writes a `preempted` line for it; the victim's SUCCEEDED was then taken for an incomplete
    success and re-run. The attacker holds its own attempt's key, not the victim's."""
    _, victim_job = world.submitted("victim", state=RUNNING)
    world.submitted("attacker", state=RUNNING)
    attacker_key = world.kit_key("attacker")

    record = preempted_then_succeeded(world, victim_job, attacker_key, "victim")

    assert record.status == RequestStatus.SUCCEEDED and record.requeue is None
    assert record.attempts[0].preemptions == 0 and not record.markers
    assert world.publisher.on("job-requests") == [] and world.publisher.on("ops-alerts") == []


def test_a_line_signed_with_its_attempts_key_counts_without_a_vertex_read(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    gets = world.vertex.gets

    record = preempted_then_succeeded(world, job, world.kit_key(), "req-1")

    assert world.vertex.gets == gets + 1  # only for the service line
    assert record.attempts[0].preemptions == 1
    assert record.status == RequestStatus.REQUEUED and record.requeue.attempt == 2
    [alert] = world.publisher.on("ops-alerts")
    assert alert.data["kind"] == "incomplete_success"


def test_an_unsigned_line_moves_nothing_not_even_a_vertex_read(world: World) -> None:
    """Any job may write an unsigned line for any other: a read and a decision at a moment of its
    writer's choosing would let it time a victim's deadline switch or stuck marker."""
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, SUCCEEDED)
    gets = world.vertex.gets
    before = world.ledger.get("req-1")

    outcome = deliver(world, kit_entry(job, "preempted", 0, None, request_id="req-1", step=30))

    assert outcome == EventOutcome.UNTRUSTED and world.vertex.gets == gets
    assert world.ledger.get("req-1") == before
    assert world.publisher.on("job-requests") == [] and world.publisher.on("ops-alerts") == []


def test_a_signed_line_altered_after_signing_moves_nothing(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    signed = json.loads(kit_entry(job, "run_started", 0, world.kit_key(), request_id="req-1", resumed_step=0))
    signed["jsonPayload"]["spotjobs_kit"]["run"] = 5  # "runs 0..4 ended": five preemptions
    gets = world.vertex.gets

    outcome = deliver(world, json.dumps(signed).encode())

    assert outcome == EventOutcome.UNTRUSTED and world.vertex.gets == gets
    assert world.ledger.get("req-1").attempts[0].preemptions == 0


def test_only_a_signed_line_of_a_job_not_indexed_yet_is_kept(world: World) -> None:
    """A run's first line may come before submit indexes its job: it is kept for the adoption
    (redeliveries could outlast a submit that died before recording the job). A forged line naming
    an attempt being created is not worth keeping: it is acknowledged as foreign."""
    world.submitted(state=RUNNING)
    world.submitted("attacker", state=RUNNING)

    def being_created(current: RequestRecord) -> RequestRecord:
        current.attempts[0].job = None  # claimed, its create under way
        return current

    world.ledger.update("req-1", being_created)
    job = world.vertex.add("req-1", 1)  # created, not indexed yet

    forged = kit_entry(job, "run_started", 0, world.kit_key("attacker"), request_id="req-1", resumed_step=0)
    assert deliver(world, forged) == EventOutcome.FOREIGN
    assert deliver(world, kit_entry(job, "run_started", 0, world.kit_key(), request_id="req-1")) == EventOutcome.PARKED
    assert len(parked_lines(world)) == 1

    # Submit records the job it created: the kept line counts in that write, the forged one nowhere.
    adopt_job(world.ports, "req-1", 1, "us-central1", world.vertex.get_custom_job(job), CapturedLog().logger)
    assert kit_runs(world.ledger.get("req-1"), 1) == {0} and parked_lines(world) == []


def crashed_before_recording(key: str) -> Callable[[RequestRecord], RequestRecord]:
    """The record of a delivery that created req-1's job and died before recording it: attempt 1
    claimed 10 minutes ago with its kit key, no job."""

    def crash(current: RequestRecord) -> RequestRecord:
        claimed_at = (datetime.now(UTC) - timedelta(seconds=600)).isoformat().replace("+00:00", "Z")
        current.attempts[0] = Attempt(1, "us-central1", "SPOT", claimed_at=claimed_at, kit_key=key)
        current.status = RequestStatus.CLAIMED
        return current

    return crash


def test_the_kit_lines_of_a_job_not_indexed_yet_count_when_reconcile_adopts_it(world: World) -> None:
    """Simulator seed 63: the submit delivery that created the job died before recording it, so
    reconcile adopts it minutes later. Its run's signed lines came meanwhile: kept, and counted in
    the compare-and-swap that records the job, so a timeout is judged with the checkpoint it
    committed (they were dead-lettered, and the request failed `timeout_without_progress`)."""
    _, job = world.submitted(state=RUNNING)
    key = world.kit_key()

    world.rewrite("req-1", crashed_before_recording(key))
    world.ledger._bucket.blob(f"jobs/{job.rsplit('/', 1)[-1]}.json").delete()  # noqa: SLF001
    lines = [
        kit_entry(job, "run_started", 0, key, request_id="req-1", insert_id="k-1", resumed_step=0),
        kit_entry(job, "checkpoint_committed", 0, key, request_id="req-1", insert_id="k-2", step=500, seconds=3.0),
    ]
    for line in [*lines, lines[1]]:  # and a redelivery
        assert deliver(world, line) == EventOutcome.PARKED
    assert len(parked_lines(world)) == 2 and world.vertex.gets == 0

    assert run_reconcile(world.ports, CapturedLog().logger).outcomes == {"claim_adopted": 1}

    attempt = world.ledger.get("req-1").attempts[0]
    assert (attempt.job, attempt.checkpoints_committed, attempt.last_checkpoint) == (job, 1, [0, 500])
    assert attempt.preemptions == 0  # a kept kit line is no Vertex preemption line
    assert parked_lines(world) == []


def test_the_kit_lines_of_a_job_indexed_but_not_recorded_count_at_once(world: World) -> None:
    """The delivery adopting req-1's job indexed it and died before recording it (simulator seed 31,
    a preemption line the same way). Its run's signed lines finish that adoption and count: they
    were nacked while the record named no job, until the dead-letter topic took them."""
    _, job = world.submitted(state=RUNNING)
    key = world.kit_key()

    world.rewrite("req-1", crashed_before_recording(key))
    committed = kit_entry(
        job, "checkpoint_committed", 0, key, request_id="req-1", insert_id="k-2", step=500, seconds=3.0
    )

    assert deliver(world, committed) == EventOutcome.OBSERVED

    attempt = world.ledger.get("req-1").attempts[0]
    assert (attempt.job, attempt.checkpoints_committed, attempt.last_checkpoint) == (job, 1, [0, 500])
    assert parked_lines(world) == []
