"""Capacity alternatives through the embedded stack (issue 45, item 3): a request lists two
machines, the first on Spot, the second on FLEX_START (Dynamic Workload Scheduler); the Vertex
emulator has no Spot capacity (devstack/vertex/capacity.py, invented, opt-in) and models FLEX_START
as documented (devstack/vertex/flex.py: it waits for capacity, here always there, then runs without
preemption). Reconcile runs every second as Cloud Scheduler would, and the demo trainer trains.

The first attempt runs on the cheaper Spot machine (nothing observed: the hourly price decides),
waits past its changeover (the deployment's prior, here 5 s), is moved, and the second attempt runs
on the other machine with FLEX_START, created only once Vertex reported the first job's cancel done:
the emulator never holds two live jobs of the request."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator

import pytest

from devstack.samples import custom_job
from shared.clock import parse_iso
from shared.jobs import JobState, state_name
from shared.ledger.states import AttemptOutcome, RequestStatus
from spotjobs.cli.status import format_request
from tests.conftest import TEST_FUNCTION_ENV, isolated_stack
from tests.support.stack_events import jobs_of, new_request_id, spot_capacity, wait_for_status

pytestmark = pytest.mark.stack

LOCATION = "us-central1"  # both machines priced there (shared/price_table.json)
CAPACITY = [
    {"machine": "a3-highgpu-8g", "strategies": ["SPOT"]},
    {"machine": "a2-ultragpu-8g", "strategies": ["FLEX_START"]},
]


@pytest.fixture(scope="module")
def stack() -> Iterator[object]:
    # The fleet's observations alone (no region prior), a short changeover prior so the wait for
    # Spot ends in seconds, and FLEX_START allowed besides STANDARD.
    function_env = {
        **TEST_FUNCTION_ENV,
        "SPOTJOBS_CHANGEOVER_PRIOR_SECONDS": "5",
        "SPOTJOBS_REGION_PRIOR": "false",
        "SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD,FLEX_START",
    }
    with isolated_stack(function_env=function_env) as running:
        yield running


def test_no_spot_for_the_first_machine_ends_on_the_flex_start_alternative_with_one_live_job(stack) -> None:
    request_id = new_request_id("capacity")
    job = custom_job(request_id, [sys.executable, "-m", "devstack.trainer", "--steps", "40", "--step-seconds", "0.05"])
    body = {"request_id": request_id, "custom_job": job, "location": LOCATION, "capacity": CAPACITY, "max_attempts": 3}
    most_live: list[int] = [0]
    stop = threading.Event()

    def watch_live_jobs() -> None:  # the emulator's own list, polled through the whole run
        while not stop.wait(0.2):
            live = [j for j in jobs_of(stack, request_id, LOCATION) if state_name(j.state) not in JobState.TERMINAL]
            most_live[0] = max(most_live[0], len(live))

    watcher = threading.Thread(target=watch_live_jobs, daemon=True)
    with spot_capacity(stack, [0], tick_seconds=3600, location=LOCATION):
        watcher.start()
        try:
            stack.publish("job_requests", json.dumps(body).encode())
            record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED, RequestStatus.FAILED, timeout=240)
        finally:
            stop.set()
            watcher.join()

    assert record.status is RequestStatus.SUCCEEDED
    first, second = record.attempts
    assert (first.machine, first.strategy, first.outcome) == ("a3-highgpu-8g", "SPOT", AttemptOutcome.MOVED)
    assert first.started_at is None  # it never got Spot capacity
    assert (second.machine, second.strategy, second.outcome) == (
        "a2-ultragpu-8g",
        "FLEX_START",
        AttemptOutcome.SUCCEEDED,
    )
    assert second.placed is not None and "decided when the attempt before was moved" in second.placed
    [moved] = [
        line
        for name in ("on_job_event", "reconcile")
        for line in stack.function_logs(name)
        if line.get("request_id") == request_id and line.get("event") == "moved"
    ]
    assert (moved["next_machine"], moved["next_strategy"]) == ("a2-ultragpu-8g", "FLEX_START")
    assert "not a3-highgpu-8g SPOT in us-central1: no capacity there before" in moved["reason"]
    assert parse_iso(second.created_at) >= parse_iso(first.ended_at)
    assert most_live[0] == 1
    # The submitted CustomJobs carry each attempt's machine spec and strategy.
    by_attempt = {j.labels["spotjobs-attempt"]: j for j in jobs_of(stack, request_id, LOCATION)}
    assert set(by_attempt) == {"1", "2"}
    spec = by_attempt["2"].job_spec
    machine = spec.worker_pool_specs[0].machine_spec
    assert (machine.machine_type, machine.accelerator_type.name, machine.accelerator_count) == (
        "a2-ultragpu-8g",
        "NVIDIA_A100_80GB",
        8,
    )
    assert spec.scheduling.strategy.name == "FLEX_START"
    assert by_attempt["1"].job_spec.worker_pool_specs[0].machine_spec.machine_type == "a3-highgpu-8g"
    # `spotjobs status` says on what each attempt ran and why.
    placed = format_request(record).splitlines()[-2:]
    assert placed[0].startswith("placed      attempt 1 in us-central1 on a3-highgpu-8g: a3-highgpu-8g SPOT: ")
    assert placed[1].startswith(
        "placed      attempt 2 in us-central1 on a2-ultragpu-8g: a2-ultragpu-8g FLEX_START, decided when"
    )
