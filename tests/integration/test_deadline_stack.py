"""Deadlines through the embedded stack (issue 25, item 4): the Vertex emulator replays a Spot
availability trace (devstack/vertex/capacity.py, invented, opt-in), reconcile runs every second
as Cloud Scheduler would, and the demo trainer reports its progress with the kit.

What is asserted is what the design guarantees, not what timing usually gives: with no Spot
capacity the request is switched once to STANDARD and its on-demand attempt finishes before the
deadline (the request's changeover estimate is several times what the stack takes, which is the
rule's assumption: d is not underestimated); with capacity and a loose deadline it never leaves
Spot, however the capacity gap falls on its run."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import pytest

from devstack.samples import job_request
from shared.clock import iso, parse_iso
from shared.ledger.states import AttemptOutcome, RequestStatus
from tests.support.stack_events import new_request_id, spot_capacity, wait_for_status

pytestmark = pytest.mark.stack

STEPS, STEP_SECONDS = 400, 0.05  # 20 s of training
CHANGEOVER = 20.0  # the stack's create-to-running is about a second


def deadline_request(request_id: str, slack_seconds: float) -> tuple[bytes, datetime]:
    at = datetime.now(UTC) + timedelta(seconds=STEPS * STEP_SECONDS + CHANGEOVER + slack_seconds)
    command = [sys.executable, "-m", "devstack.trainer", "--steps", str(STEPS), "--checkpoint-every", "20"]
    command += ["--step-seconds", str(STEP_SECONDS)]
    body = job_request(
        request_id,
        command,
        deadline=iso(at, timespec="seconds"),
        total_steps=STEPS,
        expected_step_seconds=STEP_SECONDS,
        changeover_seconds=CHANGEOVER,
    )
    return body, at.replace(microsecond=0)


def switches(stack, request_id: str) -> list[dict[str, object]]:
    return [
        line
        for name in ("on_job_event", "reconcile")
        for line in stack.function_logs(name)
        if line.get("request_id") == request_id and line.get("event") == "deadline_switch"
    ]


def test_a_tight_deadline_without_spot_capacity_switches_once_and_finishes_on_standard_in_time(stack) -> None:
    request_id = new_request_id("deadline-tight")
    body, deadline = deadline_request(request_id, slack_seconds=60)
    with spot_capacity(stack, [0], tick_seconds=3600):
        stack.publish("job_requests", body)
        record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED, RequestStatus.FAILED, timeout=240)

    assert record.status is RequestStatus.SUCCEEDED
    spot, standard = record.attempts
    assert (spot.strategy, spot.outcome) == ("SPOT", AttemptOutcome.SWITCHED_TO_ON_DEMAND)
    assert spot.cancel_sent_at is not None and spot.started_at is None  # it never got capacity
    # The STANDARD job was created only once Vertex reported the Spot job's cancel done.
    assert spot.state == "JOB_STATE_CANCELLED" and parse_iso(standard.created_at) >= parse_iso(spot.ended_at)
    assert (standard.strategy, standard.outcome) == ("STANDARD", AttemptOutcome.SUCCEEDED)
    assert parse_iso(standard.ended_at) <= deadline
    [switch] = switches(stack, request_id)
    assert switch["next_strategy"] == "STANDARD" and switch["attempt"] == 1


def test_a_loose_deadline_with_spot_capacity_never_leaves_spot(stack) -> None:
    request_id = new_request_id("deadline-loose")
    body, _ = deadline_request(request_id, slack_seconds=3600)
    # Spot for 5 s, gone for 5 s, then back: a run on it may be preempted, and stays on Spot.
    with spot_capacity(stack, [1, 0, 1], tick_seconds=5):
        stack.publish("job_requests", body)
        record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED, RequestStatus.FAILED, timeout=240)

    assert record.status is RequestStatus.SUCCEEDED
    assert [(a.strategy, a.outcome) for a in record.attempts] == [("SPOT", AttemptOutcome.SUCCEEDED)]
    assert switches(stack, request_id) == []
