"""Placement through the embedded stack (issue 29, Deliver 5): the Vertex emulator replays a Spot
availability trace per location (devstack/vertex/capacity.py, invented, opt-in), reconcile runs
every second as Cloud Scheduler would, and the demo trainer trains.

Two allowed locations, no Spot capacity in the first: the request is placed in the first (the
fleet has observed nothing of its class there yet: today's order), waits past its changeover,
is moved once to the second and finishes there, its second job created only once Vertex reported
the first one's cancel done (one live job at any time). A deadline request with Spot in neither
goes on-demand in time, in the location placement picks for its STANDARD attempt. A stack of its own: a request names a
changeover only with a deadline, so the wait is measured against the deployment's prior, here 5 s
(production: 20 min)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from devstack.samples import custom_job
from shared.clock import iso, parse_iso
from shared.ledger.states import AttemptOutcome, RequestStatus
from tests.conftest import TEST_FUNCTION_ENV, isolated_stack
from tests.support.stack_events import new_request_id, spot_capacity, wait_for_status

pytestmark = pytest.mark.stack

FIRST, SECOND = "us-central1", "us-east4"  # both priced for H100 (shared/price_table.json)
H100 = {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8}


@pytest.fixture(scope="module")
def stack() -> Iterator[object]:
    # The fleet's observations alone: with the shipped region prior (shared/fleet/region_prior.json)
    # the first attempt would start in us-east4, the prior's pick, and nothing would move.
    function_env = {**TEST_FUNCTION_ENV, "SPOTJOBS_CHANGEOVER_PRIOR_SECONDS": "5", "SPOTJOBS_REGION_PRIOR": "false"}
    with isolated_stack(function_env=function_env) as running:
        yield running


def moves(stack, request_id: str) -> list[dict[str, object]]:
    return [
        line
        for name in ("on_job_event", "reconcile")
        for line in stack.function_logs(name)
        if line.get("request_id") == request_id and line.get("event") == "moved"
    ]


def test_a_spot_job_waiting_where_there_is_no_capacity_is_moved_once_and_finishes_in_the_second(stack) -> None:
    request_id = new_request_id("placement-move")
    job = custom_job(request_id, [sys.executable, "-m", "devstack.trainer", "--steps", "40", "--step-seconds", "0.05"])
    job["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] = H100
    body = {"request_id": request_id, "custom_job": job, "locations": [FIRST, SECOND], "max_attempts": 3}
    with spot_capacity(stack, [0], tick_seconds=3600, location=FIRST):
        stack.publish("job_requests", json.dumps(body).encode())
        record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED, RequestStatus.FAILED, timeout=240)

    assert record.status is RequestStatus.SUCCEEDED
    first, second = record.attempts
    assert (first.location, first.strategy, first.outcome) == (FIRST, "SPOT", AttemptOutcome.MOVED)
    assert first.placed == "no observations" and first.started_at is None  # it never got capacity
    assert first.state == "JOB_STATE_CANCELLED" and parse_iso(second.created_at) >= parse_iso(first.ended_at)
    assert (second.location, second.strategy, second.outcome) == (SECOND, "SPOT", AttemptOutcome.SUCCEEDED)
    [move] = moves(stack, request_id)
    assert move["next_location"] == SECOND and move["attempt"] == 1


def test_a_deadline_request_with_spot_in_neither_location_goes_on_demand_in_time_where_placed(stack) -> None:
    request_id = new_request_id("placement-deadline")
    steps, step_seconds, changeover = 400, 0.05, 20.0
    command = [sys.executable, "-m", "devstack.trainer", "--steps", str(steps), "--checkpoint-every", "20"]
    job = custom_job(request_id, [*command, "--step-seconds", str(step_seconds)])
    job["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] = H100
    at = datetime.now(UTC) + timedelta(seconds=steps * step_seconds + changeover + 60)
    body = {
        "request_id": request_id,
        "custom_job": job,
        "locations": [FIRST, SECOND],
        "max_attempts": 3,
        "deadline": iso(at, timespec="seconds"),
        "total_steps": steps,
        "expected_step_seconds": step_seconds,
        "changeover_seconds": changeover,
    }
    with spot_capacity(stack, [0], tick_seconds=3600):  # no Spot anywhere
        stack.publish("job_requests", json.dumps(body).encode())
        record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED, RequestStatus.FAILED, timeout=240)

    assert record.status is RequestStatus.SUCCEEDED
    spot, standard = record.attempts
    assert (spot.strategy, spot.outcome) == ("SPOT", AttemptOutcome.SWITCHED_TO_ON_DEMAND)
    assert (standard.strategy, standard.outcome) == ("STANDARD", AttemptOutcome.SUCCEEDED)
    assert standard.location in (FIRST, SECOND) and standard.placed  # placed by the model, and says why
    assert parse_iso(standard.created_at) >= parse_iso(spot.ended_at)
    assert parse_iso(standard.ended_at) <= at.replace(microsecond=0)
    assert moves(stack, request_id) == []  # the rule switched it: a deadline behind its line is not moved
