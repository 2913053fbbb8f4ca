"""List results that lag creates, through a stack of its own (its functions run with
SPOTJOBS_LIST_LAG_SECONDS set): a create whose response is lost, then a takeover whose label
lookup does not show the job yet, still ends with one job."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.samples import job_request
from shared.adapters.vertex import find_jobs, parent_path
from shared.jobs import LABEL_REQUEST_ID
from shared.ledger.states import RequestStatus
from tests.conftest import TEST_FUNCTION_ENV, isolated_stack

pytestmark = pytest.mark.stack

LEASE_SECONDS = float(TEST_FUNCTION_ENV["SPOTJOBS_CLAIM_LEASE_SECONDS"])
# The emulator's lag is three claim leases, so the first takeovers' lookups miss the
# job; spotjobs is told the list may lag a little more than that.
EMULATOR_LAG_SECONDS = 15.0
LIST_LAG_SECONDS = 20.0


@pytest.fixture(scope="module")
def lagging() -> Iterator[Any]:
    env = {**TEST_FUNCTION_ENV, "SPOTJOBS_LIST_LAG_SECONDS": str(LIST_LAG_SECONDS)}
    with isolated_stack(function_env=env) as stack:
        yield stack


def test_a_lost_create_response_with_a_lagging_list_still_yields_one_job(lagging: Any) -> None:
    stack = lagging
    assert EMULATOR_LAG_SECONDS > LEASE_SECONDS and LIST_LAG_SECONDS >= EMULATOR_LAG_SECONDS
    request_id = f"lag-{uuid.uuid4().hex[:8]}"
    stack.vertex_control(
        "POST", "/emulator/v1/faults", {"method": "list", "mode": "lag", "seconds": EMULATOR_LAG_SECONDS}
    )
    stack.vertex_control("POST", "/emulator/v1/faults", {"method": "create", "mode": "lost_response", "count": 1})
    parent = parent_path(stack.settings.project, stack.settings.location)

    def jobs() -> list[Any]:
        return find_jobs(
            stack.job_service(),
            parent,
            {LABEL_REQUEST_ID: request_id},
            timeout=stack.settings.vertex_call_timeout_seconds,
        )

    try:
        stack.publish(
            "job_requests",
            job_request(request_id, [sys.executable, "-c", "import time; time.sleep(0.2)"]),
        )
        # Redeliveries (and reconcile, as Cloud Scheduler runs it) until the request ends.
        next_tick = 0.0

        def finished() -> Any:
            nonlocal next_tick
            if time.monotonic() >= next_tick:
                stack.publish("maintenance", b'{"task": "reconcile"}', task="reconcile")
                next_tick = time.monotonic() + 5
            record = stack.ledger().get(request_id)
            return record if record and record.is_terminal else None

        record = stack.wait_for(finished, 120, f"{request_id} to finish")
        # The lag is still on: list what there is now that every job is older than it.
        time.sleep(EMULATOR_LAG_SECONDS)
        listed = jobs()
    finally:
        stack.vertex_control("DELETE", "/emulator/v1/faults")
    assert record.status == RequestStatus.SUCCEEDED
    assert [job.name for job in jobs()] == [job.name for job in listed]
    assert [job.name for job in listed] == [record.attempt(1).job]
    assert len(record.attempts) == 1
    stats = stack.vertex_control("GET", "/emulator/v1/stats")
    assert stats["jobs_created"] == 1
    logs = [
        line
        for name in ("submit_job", "reconcile")
        for line in stack.function_logs(name)
        if line.get("request_id") == request_id
    ]
    events = [line.get("event") for line in logs]
    # The path under test was taken: the response was lost, the job not listed yet, a takeover
    # waited for the list instead of creating a second job.
    assert "create_unknown" in events and "list_lag_wait" in events, events
    assert "job_created" not in events
