"""`spotjobs cancel` through the real shells (submit_request, on_job_event, reconcile, the quota
line's drainer) over a real ledger (fake-gcs-server), with Vertex and Pub/Sub in memory: once the
cancel is recorded, nothing creates an attempt however the request's messages come back, its job
is cancelled, and it ends CANCELLED once Vertex reports that job ended."""

from __future__ import annotations

import getpass
import json
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import spotjobs
from shared.clock import iso
from shared.create_lease import note_create_sent
from shared.delivery import Message
from shared.errors import TransientError
from shared.found_jobs import adopt_job
from shared.ledger.claims import ClaimInProgress
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.ledger.store import LedgerStore
from shared.observe import handle_job_event
from shared.paced_submit import drain_line
from shared.pacing import pacer_for, waiting_entry
from shared.reconcile import run_reconcile
from shared.requests.envelope import requeue_message
from shared.submit import SUBMIT_STEPS, submit_request
from spotjobs.cli import main
from tests.support.decisions import STOCKOUT, CapturedLog, FakePublisher, FakeVertex, World, log_entry, make_settings

QUEUED, RUNNING, FAILED, CANCELLED = 1, 3, 5, 7
SUBMITTABLE = {
    "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": "us-docker.pkg.dev/p/",
    "SPOTJOBS_TRAINING_SERVICE_ACCOUNT": "trainer@p.iam.gserviceaccount.com",
    "SPOTJOBS_ALLOWED_SERVICE_ACCOUNTS": "trainer@p.iam.gserviceaccount.com",
}


@pytest.fixture
def world(gcs_bucket, fake_gcs: str, monkeypatch: pytest.MonkeyPatch) -> World:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs)  # spotjobs.cancel's client: the same ledger
    settings = make_settings(gcs_bucket.name, SPOTJOBS_VERTEX_CREATES_PER_MINUTE="0", **SUBMITTABLE)
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), settings)


def cancel(world: World, request_id: str = "run-1") -> spotjobs.CancelOutcome:
    return spotjobs.cancel(request_id, reason="wrong data", by="ana", settings=world.settings)


def deliver_request(world: World, body: dict[str, Any], attributes: dict[str, str], log: CapturedLog) -> None:
    message = Message(json.dumps(body).encode(), "m-req", attributes, publish_time=datetime.now(UTC))
    try:
        submit_request(message, log.logger, world.ports)
    except TransientError:
        pass  # redelivered later: what matters is what it created
    assert not log.events("invalid_request")  # it reached the ledger's claim


def first_message(record: RequestRecord) -> tuple[dict[str, Any], dict[str, str]]:
    body, attributes = requeue_message(record.request, 1, record.request["location"])
    body.pop("attempt")
    return body, {"request_id": attributes["request_id"]}


def deliver_event(world: World, job: str, text: str, log: CapturedLog) -> None:
    data = log_entry(job, text, insert_id=text)
    try:
        handle_job_event(Message(data, "m-ev"), log.logger, settings=world.settings, ports=lambda: world.ports)
    except TransientError:
        pass


def concurrently(*steps) -> None:
    threads = [threading.Thread(target=step) for step in steps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def created(world: World) -> int:
    return len(world.vertex.jobs)


def test_a_running_request_has_its_job_cancelled_and_ends_cancelled_with_nothing_created(world: World) -> None:
    record, job = world.submitted("run-1", state=RUNNING)
    log = CapturedLog()
    outcome = cancel(world)
    assert (outcome.result, outcome.status, outcome.cancel["by"]) == ("recorded", "SUBMITTED", "ana")
    body, attributes = first_message(record)
    concurrently(
        lambda: deliver_request(world, body, attributes, log),  # the old message, redelivered
        lambda: run_reconcile(world.ports, log.logger),
        lambda: deliver_event(world, job, "Job is running.", log),
    )
    assert world.vertex.cancelled == [job] and created(world) == 1
    assert not world.ledger.get("run-1").is_terminal  # until Vertex reports the end
    world.vertex.set_state(job, CANCELLED)
    run_reconcile(world.ports, log.logger)
    deliver_request(world, body, attributes, log)
    stored = world.ledger.get("run-1")
    assert stored.status is RequestStatus.CANCELLED and stored.attempt(1).outcome is AttemptOutcome.CANCELLED
    assert created(world) == 1 and world.publisher.on("job-requests") == []
    assert cancel(world).result == "already_cancelled"
    assert log.events("cancelled_request")  # the redeliveries reached the claim, which refused


def test_a_requeue_in_flight_is_never_claimed(world: World) -> None:
    record, job = world.submitted("run-1", state=RUNNING)
    log = CapturedLog()
    world.vertex.set_state(job, FAILED, error=STOCKOUT)
    run_reconcile(world.ports, log.logger)
    [requeue] = world.publisher.on("job-requests")  # attempt 2 is on its way to submit
    assert cancel(world).status == "CANCELLED"  # nothing of it runs: cancelled at once
    concurrently(
        lambda: deliver_request(world, requeue.data, requeue.attributes, log),
        lambda: deliver_request(world, requeue.data, requeue.attributes, log),
        lambda: run_reconcile(world.ports, log.logger),
    )
    stored = world.ledger.get("run-1")
    assert [a.n for a in stored.attempts] == [1] and stored.status is RequestStatus.CANCELLED
    assert len(log.events("cancelled_request")) == 2
    assert created(world) == 1 and len(world.publisher.on("job-requests")) == 1


def test_a_cancel_during_a_deadline_switch_creates_no_on_demand_attempt(world: World) -> None:
    slack, steps, changeover = 100, 1000, 60.0
    due = datetime.now(UTC) + timedelta(seconds=steps + changeover + slack)
    request = {"deadline": iso(due, timespec="seconds"), "total_steps": steps, "expected_step_seconds": 1.0}
    _, job = world.submitted("run-1", state=QUEUED, request={**request, "changeover_seconds": changeover})
    asked = iso(datetime.now(UTC) - timedelta(seconds=5 * changeover))
    world.rewrite("run-1", lambda r: setattr(r.attempt(1), "created_at", asked))  # waiting for Spot
    log = CapturedLog()
    run_reconcile(world.ports, log.logger)
    assert world.ledger.get("run-1").requeue is not None and world.vertex.cancelled == [job]
    assert cancel(world).status == "REQUEUED"  # the switched job still ends
    world.vertex.set_state(job, CANCELLED)
    concurrently(
        lambda: deliver_event(world, job, "Job was cancelled.", log),
        lambda: run_reconcile(world.ports, log.logger),
    )
    stored = world.ledger.get("run-1")
    assert stored.status is RequestStatus.CANCELLED and stored.requeue is None
    assert world.publisher.on("job-requests") == [] and created(world) == 1


def test_a_job_created_by_a_submit_in_flight_is_cancelled_when_recorded(world: World) -> None:
    record, _ = world.submitted("run-1", state=RUNNING)
    sent = iso(datetime.now(UTC))
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at=sent, create_sent_at=sent)
    world.rewrite("run-1", lambda r: (setattr(r, "attempts", [attempt]), setattr(r, "status", RequestStatus.CLAIMED)))
    assert cancel(world).status == "CLAIMED"  # its create may land: not over yet
    job = world.vertex.add("run-1", 1, "us-central1", QUEUED)  # ... and it does
    ports = replace(world.ports, cancel_job=None)  # submit's own ports
    adopt_job(ports, "run-1", 1, "us-central1", world.vertex.get_custom_job(job), CapturedLog().logger)
    assert job in world.vertex.cancelled
    world.vertex.set_state(job, CANCELLED)
    run_reconcile(world.ports, CapturedLog().logger)
    assert world.ledger.get("run-1").status is RequestStatus.CANCELLED


def test_a_claim_held_when_the_cancel_lands_never_sends_its_create(world: World) -> None:
    world.submitted("run-1", state=RUNNING)
    claim = Attempt(1, "us-central1", "SPOT", claimed_at=iso(datetime.now(UTC)))
    world.rewrite("run-1", lambda r: (setattr(r, "attempts", [claim]), setattr(r, "status", RequestStatus.CLAIMED)))
    held = world.ledger.get("run-1")  # what the claim's holder read, before the cancel
    assert cancel(world).status == "CANCELLED"
    with pytest.raises(ClaimInProgress):  # the holder notes its send first: refused
        note_create_sent(held, held.attempt(1), CapturedLog().logger, world.ports)
    assert world.ledger.get("run-1").attempt(1).create_sent_at is None


def test_a_claim_taken_over_after_an_unlanded_send_never_sends_its_create_once_cancelled(world: World) -> None:
    # Seed 48: the first holder noted its send and died before it; the cancel leaves the attempt
    # open (that create might land); the delivery that took the claim over sends none.
    world.submitted("run-1", state=RUNNING)
    now = datetime.now(UTC)
    earlier = iso(now - timedelta(seconds=world.settings.claim_lease_seconds + 5))
    claim = Attempt(1, "us-central1", "SPOT", claimed_at=iso(now), create_sent_at=earlier)
    world.rewrite("run-1", lambda r: (setattr(r, "attempts", [claim]), setattr(r, "status", RequestStatus.CLAIMED)))
    held = world.ledger.get("run-1")  # what the claim's new holder read, before the cancel
    assert cancel(world).status == "CLAIMED"  # the first send might land: not over yet
    with pytest.raises(ClaimInProgress):
        note_create_sent(held, held.attempt(1), CapturedLog().logger, world.ports)
    assert world.ledger.get("run-1").attempt(1).create_sent_at == earlier


def test_a_claim_whose_create_never_landed_ends_cancelled_after_its_lease(world: World) -> None:
    _, job = world.submitted("run-1", state=RUNNING)
    sent = iso(datetime.now(UTC) - timedelta(seconds=world.settings.claim_lease_seconds + 1))
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at=sent, create_sent_at=sent)
    world.rewrite("run-1", lambda r: (setattr(r, "attempts", [attempt]), setattr(r, "status", RequestStatus.CLAIMED)))
    world.vertex.forget(job)  # its create never landed
    cancel(world)
    run_reconcile(world.ports, CapturedLog().logger)  # looks it up, finds none, re-publishes nothing
    assert world.ledger.get("run-1").status is RequestStatus.CANCELLED
    assert world.publisher.on("job-requests") == [] and created(world) == 0


def test_a_request_waiting_in_the_quota_line_is_never_created(world: World) -> None:
    paced = make_settings(world.settings.state_bucket, SPOTJOBS_VERTEX_CREATES_PER_MINUTE="1200", **SUBMITTABLE)
    world = replace(world, settings=paced)
    template, job = world.submitted("template", state=RUNNING)
    body, _ = first_message(template)
    body["request_id"] = "run-1"
    pacer = pacer_for(world.ports)
    pacer.enqueue(waiting_entry("us-central1", 0, "someone-else", 1))  # a line: run-1 joins it
    lease = pacer.acquire("us-central1")  # held by a drainer that died: run-1 stays in line
    log = CapturedLog()
    deliver_request(world, body, {"request_id": "run-1"}, log)
    waiting = world.ledger.get("run-1").attempt(1)
    assert waiting.waiting_since is not None and waiting.job is None
    assert cancel(world).status == "CANCELLED"
    pacer.release("us-central1", lease)
    concurrently(
        lambda: drain_line("us-central1", log.logger, world.ports, SUBMIT_STEPS),
        lambda: deliver_request(world, body, {"request_id": "run-1"}, log),
        lambda: run_reconcile(world.ports, log.logger),  # restarts the line, republishes nothing
    )
    assert world.ledger.get("run-1").status is RequestStatus.CANCELLED
    assert [j for j in world.vertex.jobs if j != job] == [] and pacer.waiting("us-central1") == []
    assert all(m.data["request_id"] != "run-1" for m in world.publisher.on("job-requests"))


def test_a_job_cancelled_by_hand_at_vertex_stops_every_path(world: World) -> None:
    record, job = world.submitted("run-1", state=RUNNING)
    log = CapturedLog()
    world.vertex.set_state(job, CANCELLED)
    deliver_event(world, job, "Job was cancelled.", log)
    stored = world.ledger.get("run-1")
    assert stored.status is RequestStatus.CANCELLED and stored.cancel.source == "vertex"
    body, attributes = first_message(record)
    deliver_request(world, body, attributes, log)
    run_reconcile(world.ports, log.logger)
    assert created(world) == 1 and world.publisher.on("job-requests") == []


def test_the_cli_says_already_cancelled_finished_or_unknown_with_its_exit_status(
    world: World, capsys, monkeypatch
) -> None:
    from shared.settings import get_settings

    world.submitted("run-1", state=RUNNING)
    done, job = world.submitted("run-2", state=RUNNING)
    world.vertex.set_state(job, 4)
    run_reconcile(world.ports, CapturedLog().logger)
    assert world.ledger.get("run-2").status is RequestStatus.SUCCEEDED
    monkeypatch.setenv("SPOTJOBS_STATE_BUCKET", world.settings.state_bucket)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", world.settings.project)
    get_settings.cache_clear()  # the command reads its settings from this environment
    try:
        assert main(["cancel", "run-1", "--reason", "wrong data"]) == 0
        assert main(["cancel", "run-1"]) == 0
        assert main(["cancel", "run-2"]) == 1
        assert main(["cancel", "nope"]) == 1
    finally:
        get_settings.cache_clear()
    out, err = capsys.readouterr()
    assert "run-1: cancel recorded" in out and "run-1: already cancelled" in out
    assert "run-2: already finished (SUCCEEDED)" in err and "nope: no such request" in err
    intent = world.ledger.get("run-1").cancel
    assert (intent.by, intent.reason) == (getpass.getuser(), "wrong data")  # the local user, locally


def test_a_record_that_cannot_be_read_gets_a_clear_error_and_the_other_cancels_go_on(
    world: World, gcs_bucket, capsys, monkeypatch
) -> None:
    """A ledger document a person hand-edited (a field in another version's shape): `spotjobs
    cancel` says it cannot be read and what to do, changes nothing, and still cancels the rest."""
    from shared.settings import get_settings

    world.submitted("run-bad", state=RUNNING)
    world.submitted("run-ok", state=RUNNING)
    blob = gcs_bucket.blob("requests/run-bad.json")
    document = json.loads(blob.download_as_bytes())
    document["markers"] = {"0": ["notice:accepted:1:0"]}
    blob.upload_from_string(json.dumps(document), content_type="application/json")
    monkeypatch.setenv("SPOTJOBS_STATE_BUCKET", world.settings.state_bucket)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", world.settings.project)
    get_settings.cache_clear()
    try:
        assert main(["cancel", "run-bad", "run-ok"]) == 1
        assert main(["status", "run-bad"]) == 1  # every command that reads it says so, not a traceback
    finally:
        get_settings.cache_clear()
    out, err = capsys.readouterr()
    assert "run-bad: its ledger record cannot be read" in err and "Traceback" not in err
    assert "run-ok: cancel recorded" in out
    assert "spotjobs: ledger document of run-bad cannot be read" in err
    assert json.loads(blob.download_as_bytes())["markers"] == {"0": ["notice:accepted:1:0"]}  # untouched
    assert world.ledger.get("run-ok").cancel is not None


# The storage permissions a recorded call needs (https://cloud.google.com/storage/docs/access-control/iam-json,
# as tests/integration/test_permissions.py maps them; a read of a missing record counts list too).
NEEDS = {
    "objects.get": {"storage.objects.get"},
    "objects.get_missing": {"storage.objects.get", "storage.objects.list"},
    "objects.create": {"storage.objects.create"},
    "objects.overwrite": {"storage.objects.delete"},
}


def test_cancellers_are_granted_exactly_what_spotjobs_cancel_calls(world: World, tmp_path, monkeypatch) -> None:
    from google.cloud import storage

    from shared.adapters.api_recording import ENV, record_storage
    from shared.ledger.store import REQUESTS_PREFIX
    from tests.support.terraform import module_config

    world.submitted("run-1", state=RUNNING)
    calls_file = tmp_path / "calls.jsonl"
    monkeypatch.setenv(ENV, str(calls_file))
    client = storage.Client
    monkeypatch.setattr(storage, "Client", lambda *args, **kwargs: record_storage(client(*args, **kwargs)))
    for request_id in ("run-1", "run-1", "nope"):  # recorded, already cancelled, unknown
        cancel(world, request_id)
    calls = [json.loads(line) for line in calls_file.read_text().splitlines()]
    assert {call["resource"] for call in calls} == {world.settings.state_bucket}
    assert all(call["prefix"].startswith(REQUESTS_PREFIX) for call in calls), calls
    needed = set().union(*(NEEDS[call["method"]] for call in calls))

    config = module_config()
    grant = config.resource("google_storage_bucket_iam_member", "cancellers")
    assert grant["role"] == "${google_project_iam_custom_role.ledger_writer.id}"
    assert set(config.resource("google_project_iam_custom_role", "ledger_writer")["permissions"]) == needed
    assert config.locals["ledger_records_prefix"] == REQUESTS_PREFIX
    [condition] = [block["expression"] for block in grant["condition"]]
    assert "/objects/${local.ledger_records_prefix}" in condition and "objectListPrefix" in condition
