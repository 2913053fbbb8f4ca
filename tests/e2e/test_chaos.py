"""Chaos: processes die, dependencies go away, messages repeat. Nothing is lost, nothing doubles.

Each test drives requests through the real wiring (Pub/Sub emulator push → functions-framework →
ledger on fake-gcs-server behind a fault proxy → Vertex emulator) while breaking one part, then
checks the two invariants that matter to a team paying for GPUs:
- nothing lost: every request reaches a terminal status;
- nothing doubled: exactly one Vertex job per request attempt.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from devstack.samples import job_request
from shared.ledger.states import TERMINAL_STATUSES, RequestStatus
from tests.conftest import OUTAGE_FUNCTION_ENV, isolated_stack

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def chaos() -> Iterator[Stack]:  # noqa: F821
    with isolated_stack(storage_fault_proxy=True, function_env=OUTAGE_FUNCTION_ENV) as stack:
        # One request end to end first, so no test's wait for a claim includes the functions'
        # cold start, which a parallel run's start-up (every worker's stack) slows.
        warm = _new_id("warm")
        stack.publish("job_requests", _request(warm))
        _wait_terminal(stack, [warm])
        yield stack


# A fresh delivery's first step is its claim (the stack's claim lease keeps a first delivery fresh
# on a loaded machine: OUTAGE_FUNCTION_ENV). What is asserted is that it comes, not how fast.
CLAIM_SECONDS = 120


def _request(request_id: str, seconds: float = 0.2) -> bytes:
    """A valid envelope whose job exits 0 after `seconds`."""
    return job_request(request_id, [sys.executable, "-c", f"import time; time.sleep({seconds})"])


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _jobs_per_attempt(stack, request_id: str) -> Counter:
    """How many Vertex jobs carry each attempt label of this request."""
    from shared.jobs import LABEL_ATTEMPT, LABEL_REQUEST_ID

    client = stack.job_service()
    parent = f"projects/{stack.options.project}/locations/{stack.options.location}"
    jobs = client.list_custom_jobs(request={"parent": parent, "filter": f'labels.{LABEL_REQUEST_ID}="{request_id}"'})
    return Counter(job.labels[LABEL_ATTEMPT] for job in jobs)


def _wait_terminal(stack, request_ids: list[str], timeout: float = 120) -> dict[str, str]:
    """Wait for every request to finish, running reconcile every few seconds as Cloud Scheduler
    would: a message that ran out of deliveries during an outage is dead-lettered, and the
    scheduled reconcile is what picks its request up again."""
    ledger = stack.ledger()
    next_reconcile = 0.0
    seen: dict[str, str | None] = dict.fromkeys(request_ids)

    def statuses() -> dict[str, str] | None:
        nonlocal next_reconcile
        if time.monotonic() >= next_reconcile:
            stack.publish("maintenance", b'{"task": "reconcile"}', task="reconcile")
            next_reconcile = time.monotonic() + 5
        # Only the requests not yet finished, one read each (a terminal status is final): forty
        # requests read twice at every poll kept the machine the functions run on busy.
        for rid in [rid for rid, status in seen.items() if status not in TERMINAL_STATUSES]:
            record = ledger.get(rid)
            seen[rid] = record.status if record else None
        return dict(seen) if all(status in TERMINAL_STATUSES for status in seen.values()) else None

    return stack.wait_for(statuses, timeout=timeout, message=f"{request_ids} to finish")


def _assert_nothing_lost_nothing_doubled(stack, request_ids: list[str]) -> None:
    statuses = _wait_terminal(stack, request_ids)
    assert set(statuses.values()) == {RequestStatus.SUCCEEDED}, statuses
    for request_id in request_ids:
        record = stack.ledger().get(request_id)
        per_attempt = _jobs_per_attempt(stack, request_id)
        assert per_attempt == Counter({str(a.n): 1 for a in record.attempts}), (request_id, per_attempt)


def test_submit_killed_between_create_and_record_is_redelivered_without_a_second_job(chaos) -> None:
    request_id = _new_id("killed")
    vertex = chaos.processes["vertex-emulator"].popen
    # Freeze Vertex so the function is caught inside create_custom_job, after its ledger claim.
    os.kill(vertex.pid, signal.SIGSTOP)
    try:
        chaos.publish("job_requests", _request(request_id))
        chaos.wait_for(lambda: chaos.ledger().get(request_id), timeout=CLAIM_SECONDS, message="the claim")
        time.sleep(0.5)  # the create request is now on the wire
        chaos.functions.kill("submit_job")
    finally:
        os.kill(vertex.pid, signal.SIGCONT)  # Vertex now creates the job for a caller that is gone
    chaos.functions.restart("submit_job")

    _assert_nothing_lost_nothing_doubled(chaos, [request_id])
    record = chaos.ledger().get(request_id)
    assert len(record.attempts) == 1 and record.attempts[0].job


def test_requests_published_while_vertex_is_down_wait_and_then_complete(chaos) -> None:
    chaos.stop_vertex()
    request_ids = [_new_id("outage") for _ in range(3)]
    try:
        for request_id in request_ids:
            chaos.publish("job_requests", _request(request_id))
        # While Vertex is down the claims exist but no job does; the messages keep coming back.
        chaos.wait_for(lambda: all(chaos.ledger().get(r) for r in request_ids), timeout=CLAIM_SECONDS, message="claims")
        time.sleep(3)
        assert all(chaos.ledger().get(r).attempts[0].job is None for r in request_ids)
    finally:
        chaos.start_vertex_again()

    _assert_nothing_lost_nothing_doubled(chaos, request_ids)


def test_gcs_answering_503_for_a_while_delays_but_loses_nothing(chaos) -> None:
    request_ids = [_new_id("gcs503") for _ in range(3)]
    chaos.storage_fault(503, seconds=6)
    for request_id in request_ids:
        chaos.publish("job_requests", _request(request_id))
    time.sleep(6)

    _assert_nothing_lost_nothing_doubled(chaos, request_ids)


def test_the_same_message_redelivered_many_times_creates_one_job(chaos) -> None:
    request_id = _new_id("redeliver")
    body = _request(request_id, seconds=1)
    # Redeliveries of one message: the same push body posted to the function 20 times, at once.
    import base64
    import concurrent.futures
    import urllib.request

    push = json.dumps(
        {
            "message": {
                "data": base64.b64encode(body).decode(),
                "messageId": f"m-{request_id}",
                "publishTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            "subscription": chaos.subscription_path("submit-job-push"),
        }
    ).encode()
    url = f"{chaos.function_urls['submit_job']}/{chaos.topic_path('job_requests')}"

    def deliver(_: int) -> int:
        request = urllib.request.Request(url, data=push, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code  # a 500 is "redeliver later", as Pub/Sub would

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        statuses = list(pool.map(deliver, range(20)))
    # Deliveries that met the in-progress claim asked for redelivery; deliver those again.
    deadline = time.monotonic() + 60
    while any(status >= 500 for status in statuses) and time.monotonic() < deadline:
        time.sleep(1)
        statuses = [deliver(0) if status >= 500 else status for status in statuses]

    assert all(status < 300 for status in statuses), statuses
    _assert_nothing_lost_nothing_doubled(chaos, [request_id])


def test_submit_job_sigkilled_while_40_requests_arrive_is_restarted_and_each_gets_one_job(chaos) -> None:
    """As an operator would try it: 40 requests published while submit_job's process group is
    SIGKILLed, and nothing else done. The stack's supervisor starts the function again, as Cloud
    Run starts a new instance (one line in the stack's log); the pushes that failed meanwhile are
    redelivered; every request ends with exactly one job."""
    import concurrent.futures

    request_ids = [_new_id("sigkill") for _ in range(40)]
    restarts_before = [line for line in chaos.stack_logs() if line["event"] == "function_restarted"]
    old_pid = chaos.functions.pid("submit_job")
    assert old_pid is not None

    def publish(request_id: str) -> str:
        return chaos.publish("job_requests", _request(request_id))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(publish, request_ids[:20]))
        os.killpg(old_pid, signal.SIGKILL)  # the function's own process group (its session)
        list(pool.map(publish, request_ids[20:]))

    restarted = chaos.wait_for(
        lambda: [line for line in chaos.stack_logs() if line["event"] == "function_restarted"][len(restarts_before) :],
        60,
        "the supervisor to restart submit_job",
    )
    assert [(line["function"], line["exit_code"]) for line in restarted] == [("submit_job", -signal.SIGKILL)]
    assert restarted[0]["pid"] != old_pid

    statuses = _wait_terminal(chaos, request_ids, timeout=300)
    assert set(statuses.values()) == {RequestStatus.SUCCEEDED}, statuses
    for request_id in request_ids:
        record = chaos.ledger().get(request_id)
        per_attempt = _jobs_per_attempt(chaos, request_id)
        assert per_attempt == Counter({str(a.n): 1 for a in record.attempts}), (request_id, per_attempt)
