"""`spotjobs cancel` through the embedded stack (issue 30, item 1): a request cancelled while it
waits in the quota line, while it runs, while its re-queue is in flight and during a deadline
switch ends CANCELLED with no job left alive at the Vertex emulator and none created after the
cancel, while its message comes back and reconcile passes run concurrently.

What is asserted is what the design guarantees: every job the emulator holds for the request has
ended, and each belongs to an attempt whose create was sent before the cancel was recorded (a
create in flight when the cancel landed is the only one that may land after it, and it is
cancelled when recorded); no attempt was claimed after the cancel."""

from __future__ import annotations

import json
import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest

import spotjobs
from devstack.samples import job_request
from shared.clock import iso, parse_iso
from shared.jobs import LABEL_ATTEMPT, JobState, state_name
from shared.ledger.claims import claim_attempt
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.pacing import Pacer, generation_time, hold_for_quota, is_settled, waiting_entry
from shared.requests.envelope import canonical_envelope, requeue_message
from shared.requests.policy import validate_request
from tests.support.reconcile_passes import passes_until, reconcile_pass, reconcile_until
from tests.support.stack_events import jobs_of, new_request_id, submit, training_request, wait_for_status

# Bounds are what a loaded machine may need, not what a quiet one takes: a wait ends when its
# condition holds. Each test may use several of them, hence the test's own timeout. What reconcile
# must do is counted in passes (tests/support/reconcile_passes.py), never in seconds.
pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]

LONG = {"steps": 100_000}  # runs far longer than any test waits: only the cancel ends it


def reconcile(stack) -> None:
    stack.publish("maintenance", json.dumps({"task": "reconcile"}).encode(), task="reconcile")


def cancel(stack, request_id: str) -> spotjobs.CancelOutcome:
    return spotjobs.cancel(request_id, reason="stack test", by="stack-test", settings=stack.settings)


def come_back_concurrently(stack, request_id: str, *messages: tuple[bytes, dict[str, str]]) -> None:
    """Its messages again (as a redelivery would bring them) and reconcile passes, all at once."""
    steps = [lambda m=m: stack.publish("job_requests", m[0], **m[1]) for m in messages]
    steps += [lambda: reconcile(stack)] * 2
    threads = [threading.Thread(target=step) for step in steps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def ended_at_vertex(stack, request_id: str, location: str) -> bool:
    """Every job of the request has ended at Vertex, and no create of it may still land (an
    attempt whose create was sent has its job recorded, or has ended)."""
    record = stack.ledger().get(request_id)
    in_flight = [a.n for a in record.attempts if a.create_sent_at and a.job is None and a.outcome is None]
    jobs = jobs_of(stack, request_id, location)
    return not in_flight and all(state_name(job.state) in JobState.TERMINAL for job in jobs)


def assert_ended_cancelled(stack, request_id: str, location: str) -> None:
    """Each pass begun after the cancel was recorded cancels the request's live jobs; Vertex ends
    them on its own clock; a pass begun once they have all ended records CANCELLED."""

    def settled() -> bool:
        record = stack.ledger().get(request_id)
        return record.status is RequestStatus.CANCELLED and ended_at_vertex(stack, request_id, location)

    passes_until(stack, lambda: ended_at_vertex(stack, request_id, location), f"{request_id}'s jobs ended", timeout=240)
    reconcile_until(stack, settled, f"{request_id} CANCELLED with every job ended", passes=2)
    record = stack.ledger().get(request_id)
    cancelled_at = parse_iso(record.cancel.at)
    assert record.cancel.by == "stack-test" and record.cancel.reason == "stack test"
    assert all(parse_iso(a.claimed_at) <= cancelled_at for a in record.attempts)
    for job in jobs_of(stack, request_id, location):
        attempt = record.attempt(int(job.labels[LABEL_ATTEMPT]))
        assert attempt is not None and attempt.job == job.name, job.name
        assert parse_iso(attempt.create_sent_at) <= cancelled_at, (job.name, attempt.create_sent_at)


def test_cancelled_while_running(stack) -> None:
    request_id = new_request_id("cancel-running")
    body = training_request(request_id, **LONG)
    stack.publish("job_requests", body)
    wait_for_status(stack, request_id, RequestStatus.RUNNING)
    assert cancel(stack, request_id).result == "recorded"
    come_back_concurrently(stack, request_id, (body, {}))
    assert_ended_cancelled(stack, request_id, stack.settings.location)
    record = stack.ledger().get(request_id)
    assert [a.outcome for a in record.attempts] == [AttemptOutcome.CANCELLED]
    assert cancel(stack, request_id).result == "already_cancelled"


def test_cancelled_while_its_requeue_is_in_flight(stack) -> None:
    request_id = new_request_id("cancel-requeue")
    # Attempt 1 is preempted until Vertex fails it: attempt 2 is decided and published.
    submit(stack, request_id, preemptions=7, after_seconds=0.3, **LONG)

    def requeued():
        record = stack.ledger().get(request_id)
        first = record.attempt(1) if record else None
        return record if first and first.outcome is AttemptOutcome.REQUEUED else None

    record = stack.wait_for(requeued, 240, f"{request_id} re-queued")
    cancel(stack, request_id)
    body, attributes = requeue_message(record.request, 2, record.request["location"])
    come_back_concurrently(stack, request_id, (json.dumps(body).encode(), attributes))
    assert_ended_cancelled(stack, request_id, stack.settings.location)


def wait_in_line_unserved(stack, pacer: Pacer, request_id: str, body: bytes) -> None:
    """Put `request_id` in its region's line as submit leaves a request no drainer serves: its
    entry and its record, waiting (a record, not only an entry: a drainer handing the line over,
    or a reconcile pass restarting it, removes an entry whose request has no record as settled)."""
    settings = stack.settings
    request = validate_request(body, attributes={}, settings=settings)
    envelope = canonical_envelope(
        request, default_location=settings.location, default_max_attempts=settings.default_max_attempts
    )
    since = generation_time(pacer.enqueue(waiting_entry(envelope["location"], 0, request_id, 1)))

    def waiting(current):
        now = datetime.now(UTC)
        claim = claim_attempt(
            current,
            envelope=envelope,
            n=1,
            now=now,
            lease_seconds=settings.claim_lease_seconds,
            output_dir=settings.output_dir_for(request_id),
        )
        held = claim.attempt.claimed_at if claim.writes and claim.attempt else None
        return hold_for_quota(
            claim.record, n=1, claimed_at=held, now=now, lease_seconds=settings.claim_lease_seconds, waiting_since=since
        )

    assert stack.ledger().update(request_id, waiting).latest.waiting_since == since


def test_cancelled_while_waiting_in_the_quota_line(stack) -> None:
    location = stack.settings.location
    pacer = Pacer(stack.storage().bucket(stack.settings.state_bucket), stack.settings)
    lease = pacer.acquire(location)  # its drainer "died": the line waits (reconcile restarts it once free)
    assert lease is not None
    ahead = new_request_id("cancel-ahead")
    wait_in_line_unserved(stack, pacer, ahead, training_request(ahead))  # a line to join
    for head in pacer.waiting(location):  # what a drainer handing over, or reconcile, does meanwhile
        if is_settled(stack.ledger().get(head.request_id), head.attempt):
            pacer.remove(head)
    request_id = new_request_id("cancel-waiting")
    body = training_request(request_id, **LONG)

    def in_line() -> bool:
        nonlocal lease
        lease = pacer.renew(location, lease)  # held however long the delivery takes
        assert lease is not None, "the test's drainer lease was taken over"
        record = stack.ledger().get(request_id)
        return record is not None and bool(record.latest.waiting_since)

    try:
        stack.publish("job_requests", body)
        stack.wait_for(in_line, 240, f"{request_id} in line")
        assert cancel(stack, request_id).status == "CANCELLED"  # nothing of it ran
    finally:
        if lease is not None:
            pacer.release(location, lease)  # reconcile restarts the line: it creates the request ahead
    come_back_concurrently(stack, request_id, (body, {}))
    assert_ended_cancelled(stack, request_id, location)
    assert jobs_of(stack, request_id, location) == []
    # A pass restarts a line its drainer left (the test's lease, released above): passes meanwhile.
    passes_until(
        stack, lambda: not any(e.request_id == request_id for e in pacer.waiting(location)), "line left", timeout=240
    )
    passes_until(  # the line goes on after a cancelled request
        stack, lambda: stack.ledger().get(ahead).status is RequestStatus.SUCCEEDED, f"{ahead} SUCCEEDED", timeout=240
    )


def test_cancelled_during_a_deadline_switch(stack) -> None:
    request_id = new_request_id("cancel-switch")
    steps, step_seconds, changeover = 400, 0.05, 20.0  # as tests/integration/test_deadline_stack.py
    due = datetime.now(UTC) + timedelta(seconds=steps * step_seconds + changeover + 60)
    command = [sys.executable, "-m", "devstack.trainer", "--steps", str(steps), "--step-seconds", str(step_seconds)]
    body = job_request(
        request_id,
        command,
        deadline=iso(due, timespec="seconds"),
        total_steps=steps,
        expected_step_seconds=step_seconds,
        changeover_seconds=changeover,
    )
    stack.vertex_control("POST", "/emulator/v1/spot-capacity", {"data": [0], "tick_seconds": 3600})  # no Spot
    try:
        stack.publish("job_requests", body)

        def switched():
            record = stack.ledger().get(request_id)
            spot = record.attempt(1) if record else None
            return record if spot and spot.outcome is AttemptOutcome.SWITCHED_TO_ON_DEMAND else None

        # The scheduler's stand-in: the rule is asked on every pass.
        record = passes_until(stack, switched, f"{request_id} switched to STANDARD", timeout=240)
        cancel(stack, request_id)
        requeue, attributes = requeue_message(record.request, 2, record.request["location"])
        come_back_concurrently(stack, request_id, (body, {}), (json.dumps(requeue).encode(), attributes))
        assert_ended_cancelled(stack, request_id, stack.settings.location)
    finally:
        stack.vertex_control("POST", "/emulator/v1/spot-capacity", {"data": []})


def test_a_job_cancelled_by_hand_at_vertex_is_the_requests_cancel(stack) -> None:
    """A hand cancel at Vertex is the request's cancel too: nothing runs it again."""
    request_id = new_request_id("cancel-by-hand")
    body = training_request(request_id, **LONG)
    stack.publish("job_requests", body)
    record = wait_for_status(stack, request_id, RequestStatus.RUNNING)
    stack.job_service().cancel_custom_job(name=record.latest.job)

    def cancelled():
        record = stack.ledger().get(request_id)
        return record if record.status is RequestStatus.CANCELLED else None

    # Vertex writes no line for a cancel: the first pass begun once the job has ended sees it.
    passes_until(
        stack, lambda: ended_at_vertex(stack, request_id, stack.settings.location), "the job ended", timeout=240
    )
    record = reconcile_until(stack, cancelled, f"{request_id} CANCELLED", passes=2)
    assert record.cancel is not None and record.cancel.source == "vertex"
    stack.publish("job_requests", body)
    reconcile_pass(stack)
    assert cancel(stack, request_id).result == "already_cancelled"
    assert len(jobs_of(stack, request_id, stack.settings.location)) == 1
