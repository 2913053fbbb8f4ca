"""Exactly one job per request attempt, through the real stack, when Vertex, the ledger or the
publisher misbehave in the ways at-least-once delivery allows (the "exactly once" issue's
acceptance). The list-lag case needs a stack of its own: tests/e2e/test_list_lag.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devstack.samples import job_request
from shared.adapters.vertex import build_job_json, parent_path, to_custom_job
from shared.jobs import LABEL_ATTEMPT, is_terminal, state_name
from shared.ledger.states import RequestStatus
from shared.redeliveries import body_digest
from shared.requests.request_ids import derived_request_id
from tests.conftest import load_event
from tests.support.stack_submit import (
    DELIVERY_TIMEOUT,
    decided,
    decisions,
    jobs_of,
    unique,
    wait_for_job_recorded,
)

pytestmark = pytest.mark.stack

RECONCILE_PERIOD = 5.0  # seconds between the reconcile ticks these tests publish


def sleeper(request_id: str, seconds: float) -> bytes:
    """An envelope whose job runs `seconds` then exits 0."""
    return job_request(request_id, [sys.executable, "-c", f"import time; time.sleep({seconds})"])


def reconcile(stack: Any) -> None:
    stack.publish("maintenance", b'{"task": "reconcile"}', task="reconcile")


def drain_alerts(stack: Any, collected: list[dict[str, Any]], seconds: float) -> None:
    """Pull ops-alerts into `collected` for `seconds` (the reader is shared: pull, keep all)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        collected.extend(stack.pull_alerts(timeout=min(1.0, max(0.1, deadline - time.monotonic()))))


def alerts_of(collected: list[dict[str, Any]], request_id: str, kind: str | None = None) -> list[dict[str, Any]]:
    return [
        alert
        for alert in collected
        if alert.get("request_id") == request_id and (kind is None or alert["kind"] == kind)
    ]


def wait_for_alerts(
    stack: Any,
    collected: list[dict[str, Any]],
    request_id: str,
    kind: str,
    count: int = 1,
    timeout: float = DELIVERY_TIMEOUT,
) -> list[dict[str, Any]]:
    def enough() -> list[dict[str, Any]] | None:
        collected.extend(stack.pull_alerts(timeout=1))
        found = alerts_of(collected, request_id, kind)
        return found if len(found) >= count else None

    return stack.wait_for(enough, timeout, f"{count} {kind} alert(s) for {request_id}")


def wait_for_status(stack: Any, request_id: str, *statuses: str, timeout: float = 90) -> Any:
    """Wait for the request to reach one of `statuses`, publishing a reconcile tick every period
    as Cloud Scheduler would (some endings, a cancel among them, log no line on_job_event sees)."""
    next_tick = time.monotonic() + RECONCILE_PERIOD

    def reached() -> Any:
        nonlocal next_tick
        if time.monotonic() >= next_tick:
            reconcile(stack)
            next_tick = time.monotonic() + RECONCILE_PERIOD
        record = stack.ledger().get(request_id)
        return record if record is not None and record.status in statuses else None

    return stack.wait_for(reached, timeout, f"{request_id} to be {statuses}")


# ---- a create that succeeds on the server but answers UNKNOWN / CANCELLED / DATA_LOSS ----


@pytest.mark.parametrize(
    ("status", "rpc_status"),
    [(499, "CANCELLED"), (500, "UNKNOWN"), (500, "DATA_LOSS")],
    ids=["cancelled-499", "unknown-500", "data-loss-500"],
)
def test_a_create_done_on_the_server_but_answered_with_an_error_yields_one_recorded_job(
    stack: Any, status: int, rpc_status: str
) -> None:
    # Over REST the client raises by HTTP status: 499 -> Cancelled, 500 -> InternalServerError
    # whatever the body's google.rpc status (UNKNOWN and DATA_LOSS both travel as 500). Neither is
    # a verdict on the request: submit looks the job up by its labels and records it.
    request_id = unique(f"lost{status}-{rpc_status.lower().replace('_', '')}")
    stack.vertex_control(
        "POST",
        "/emulator/v1/faults",
        {"method": "create", "mode": "lost_response", "status": status, "rpc_status": rpc_status},
    )

    stack.publish("job_requests", sleeper(request_id, 0.2))

    record = wait_for_job_recorded(stack, request_id)
    [job] = jobs_of(stack, request_id)
    assert job.name == record.attempt(1).job
    [found] = decided(stack, request_id, "job_found")
    assert decisions(stack, request_id, "job_created", "submit_failed", "create_refused") == []
    assert found["job"] == job.name
    record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED)
    assert [a.outcome for a in record.attempts] == ["succeeded"]
    collected: list[dict[str, Any]] = []
    drain_alerts(stack, collected, 3)
    assert alerts_of(collected, request_id) == []  # no submit_failed, no stray, nothing
    assert len(jobs_of(stack, request_id)) == 1


# ---- a job created with the request's labels behind the ledger's back ----


def test_a_job_with_the_requests_labels_the_ledger_does_not_record_is_cancelled_once(
    stack: Any,
) -> None:
    request_id = unique("stray")
    stack.publish("job_requests", sleeper(request_id, 60))
    record = wait_for_job_recorded(stack, request_id)
    recorded_job = record.attempt(1).job
    # What a create whose response was lost after a takeover would leave: a second job labelled
    # for attempt 1, which the ledger does not record.
    stray_json = build_job_json(
        record.request["custom_job"],
        request_id=request_id,
        attempt=1,
        strategy="SPOT",
        output_dir=record.output_dir,
        deployment=stack.settings.deployment_label,
        commit_markers=stack.settings.commit_markers,
    )
    client = stack.job_service()
    parent = parent_path(stack.settings.project, stack.settings.location)
    stray = client.create_custom_job(parent=parent, custom_job=to_custom_job(stray_json))
    assert len(jobs_of(stack, request_id, attempt=1)) == 2

    reconcile(stack)

    stack.wait_for(
        lambda: (
            state_name(client.get_custom_job(name=stray.name).state) in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")
        ),
        DELIVERY_TIMEOUT,
        "the stray job to be cancelled",
    )
    collected: list[dict[str, Any]] = []
    [alert] = wait_for_alerts(stack, collected, request_id, "stray_job")
    assert alert["details"]["stray_job"] == stray.name
    # Another pass and more events: still one alert, and the recorded job runs on untouched.
    reconcile(stack)
    drain_alerts(stack, collected, RECONCILE_PERIOD)
    assert len(alerts_of(collected, request_id, "stray_job")) == 1
    assert alerts_of(collected, request_id, "submit_failed") == []
    recorded = client.get_custom_job(name=recorded_job)
    assert state_name(recorded.state) == "JOB_STATE_RUNNING"
    record = stack.ledger().get(request_id)
    assert record.attempt(1).job == recorded_job and record.status == RequestStatus.RUNNING
    assert len(record.attempts) == 1
    cancellers = [
        (function, line["event"])
        for function in ("reconcile", "on_job_event")
        for line in stack.function_logs(function)
        if line.get("event") == "stray_job_cancelled" and line.get("job") == stray.name
    ]
    assert cancellers, "the stray was cancelled by neither reconcile nor on_job_event"
    client.cancel_custom_job(name=recorded_job)  # the test is over: stop the 60 s worker
    wait_for_status(stack, request_id, RequestStatus.CANCELLED)


# ---- Vertex answering 429 for ten reconcile periods ----


def test_a_create_refused_with_429_for_ten_reconcile_periods_waits_then_runs(stack: Any) -> None:
    request_id = unique("quota429")
    stack.vertex_control("POST", "/emulator/v1/faults", {"method": "create", "status": 429, "count": 100_000})
    seen: list[str] = []
    try:
        stack.publish("job_requests", sleeper(request_id, 0.2))
        for _ in range(10):  # ten reconcile periods, a tick each, as Cloud Scheduler would
            deadline = time.monotonic() + RECONCILE_PERIOD
            reconcile(stack)
            while time.monotonic() < deadline:
                record = stack.ledger().get(request_id)
                if record is not None:
                    seen.append(record.status)
                time.sleep(0.5)
        record = stack.ledger().get(request_id)
        assert record.attempt(1).job is None and jobs_of(stack, request_id) == []
        assert record.attempt(1).last_create_error["code"] == 429
        refused = len(decisions(stack, request_id, "create_refused"))
        assert refused >= 2, refused
    finally:
        cleared = stack.vertex_control("DELETE", "/emulator/v1/faults")
    assert cleared == {"cleared": 1}

    next_tick = 0.0

    def succeeded() -> Any:
        nonlocal next_tick
        if time.monotonic() >= next_tick:
            reconcile(stack)
            next_tick = time.monotonic() + RECONCILE_PERIOD
        record = stack.ledger().get(request_id)
        if record is not None:
            seen.append(record.status)
        return record if record and record.status == RequestStatus.SUCCEEDED else None

    # The claim's re-publishes back off (lease x 2^k); the next one after the fault clears runs.
    record = stack.wait_for(succeeded, 240, f"{request_id} to succeed once Vertex accepts")
    assert RequestStatus.FAILED not in seen, sorted(set(seen))
    assert [a.outcome for a in record.attempts] == ["succeeded"] and len(record.attempts) == 1
    [job] = jobs_of(stack, request_id)
    assert job.name == record.attempt(1).job
    assert len(decisions(stack, request_id, "job_created")) == 1
    collected: list[dict[str, Any]] = []
    drain_alerts(stack, collected, 2)
    kinds = {alert["kind"] for alert in alerts_of(collected, request_id)}
    assert "submit_failed" not in kinds, kinds
    assert kinds <= {"claim_stalled"}, kinds  # a busy Vertex is told once, never failed


# ---- the same request id with a different body ----


def test_the_same_request_id_with_another_body_keeps_the_first_and_alerts_once(
    stack: Any,
) -> None:
    request_id = unique("conflict")
    first, second = sleeper(request_id, 0.2), sleeper(request_id, 0.3)
    stack.publish("job_requests", first)
    record = wait_for_job_recorded(stack, request_id)

    acknowledged = stack.publish("job_requests", second)
    stack.publish("job_requests", second)  # the same other body again: no second alert

    collected: list[dict[str, Any]] = []
    [alert] = wait_for_alerts(stack, collected, request_id, "request_id_conflict")
    stack.wait_for(
        lambda: len(decisions(stack, request_id, "duplicate")) >= 2,
        DELIVERY_TIMEOUT,
        "both conflicting deliveries to be acknowledged",
    )
    assert alert["details"]["kept_digest"] == body_digest(record.request)
    assert alert["details"]["refused_digest"] != alert["details"]["kept_digest"]
    conflicting = [line for line in decisions(stack, request_id, "duplicate") if line["same_body"] is False]
    assert acknowledged in {line["message_id"] for line in conflicting}
    drain_alerts(stack, collected, 3)
    assert len(alerts_of(collected, request_id, "request_id_conflict")) == 1
    [job] = jobs_of(stack, request_id)
    assert job.name == record.attempt(1).job
    assert len(decisions(stack, request_id, "job_created")) == 1
    kept = stack.ledger().get(request_id).request
    assert kept["custom_job"] == json.loads(first)["custom_job"]


# ---- the ledger document lost after SUCCEEDED, the topic replayed ----


def seek(stack: Any, subscription: str, moment: datetime) -> None:
    """Seek a subscription back to `moment`: what it delivered since is delivered again, with its
    original publish time (the stack's topics retain messages, as Terraform's do)."""
    from google.cloud import pubsub_v1
    from google.protobuf import timestamp_pb2

    at = timestamp_pb2.Timestamp()
    at.FromDatetime(moment)
    pubsub_v1.SubscriberClient().seek(request={"subscription": stack.subscription_path(subscription), "time": at})


def test_a_replay_after_the_ledger_document_was_deleted_creates_nothing_and_alerts_once(
    stack: Any,
) -> None:
    request_id = unique("lostdoc")
    before_publish = datetime.now(UTC) - timedelta(milliseconds=200)
    first_message = stack.publish("job_requests", sleeper(request_id, 0.2))
    record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED)
    [job] = jobs_of(stack, request_id)
    assert job.name == record.attempt(1).job
    stack.storage().bucket(stack.settings.state_bucket).blob(f"requests/{request_id}.json").delete()
    assert stack.ledger().get(request_id) is None
    time.sleep(stack.settings.claim_lease_seconds + 1)  # a replay is older than the claim lease

    # The operator's replay: the submit subscription sought back to before the first publish.
    seek(stack, "submit-job-push", before_publish)

    collected: list[dict[str, Any]] = []
    [alert] = wait_for_alerts(stack, collected, request_id, "ledger_missing")
    assert alert["details"]["jobs"] == [job.name]
    assert alert["details"]["message_id"] == first_message
    [line] = decisions(stack, request_id, "ledger_missing")
    assert line["message_id"] == first_message
    drain_alerts(stack, collected, 3)
    assert len(alerts_of(collected, request_id, "ledger_missing")) == 1
    assert [j.name for j in jobs_of(stack, request_id)] == [job.name]
    assert stack.ledger().get(request_id) is None  # nothing claimed: no record, no second job
    assert len(decisions(stack, request_id, "job_created")) == 1


# ---- a Cloud Scheduler-style message published twice for the same scheduled time ----


def test_a_scheduler_message_fired_twice_for_one_scheduled_time_yields_one_job(
    stack: Any,
) -> None:
    body = json.loads(load_event("requests/bare_quick.json"))
    body["displayName"] = unique("nightly")  # a body no other test publishes
    data = json.dumps(body).encode()
    scheduled = datetime.now(UTC).replace(second=0, microsecond=0)
    schedule_time = scheduled.strftime("%Y-%m-%dT%H:%M:%SZ")
    request_id = derived_request_id(body, scheduled)

    first = stack.publish("job_requests", data, schedule_time=schedule_time)
    time.sleep(1)
    second = stack.publish("job_requests", data, schedule_time=schedule_time)

    assert first != second
    record = wait_for_job_recorded(stack, request_id)
    stack.wait_for(
        lambda: (
            {line["message_id"] for line in decisions(stack, request_id, "job_created", "duplicate")} == {first, second}
        ),
        DELIVERY_TIMEOUT,
        "both fires to be decided",
    )
    [job] = jobs_of(stack, request_id)
    assert job.name == record.attempt(1).job and job.labels[LABEL_ATTEMPT] == "1"
    assert len(decisions(stack, request_id, "job_created")) == 1
    assert not is_terminal(job.state) or state_name(job.state) == "JOB_STATE_SUCCEEDED"


# ---- resubmitting a FAILED request: a new request id ----


def spotjobs(stack: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spotjobs.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **stack.env},
        timeout=60,
        check=False,
    )


def test_a_failed_request_is_resubmitted_under_a_new_id_by_the_cli(stack: Any) -> None:
    request_id = unique("refused")
    stack.vertex_control("POST", "/emulator/v1/faults", {"method": "create", "status": 400, "count": 1})
    stack.publish("job_requests", sleeper(request_id, 0.2))
    failed = wait_for_status(stack, request_id, RequestStatus.FAILED)
    assert failed.attempt(1).job is None

    resubmitted = spotjobs(stack, "resubmit", request_id, "--json")

    assert resubmitted.returncode == 0, resubmitted.stderr
    receipt = json.loads(resubmitted.stdout)
    assert receipt["request_id"] == f"{request_id}-r2" and receipt["message_id"]
    assert receipt["resubmitted_from"] == request_id
    record = wait_for_status(stack, f"{request_id}-r2", RequestStatus.SUCCEEDED)
    assert record.request == {**failed.request, "request_id": f"{request_id}-r2"}
    [job] = jobs_of(stack, f"{request_id}-r2")
    assert job.name == record.attempt(1).job
    assert jobs_of(stack, request_id) == []  # the old request: as it ended
    assert stack.ledger().get(request_id).status == RequestStatus.FAILED

    again = spotjobs(stack, "resubmit", request_id)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == f"request_id: {request_id}-r3"
    assert again.stdout.splitlines()[1].startswith("message_id: ")
    wait_for_job_recorded(stack, f"{request_id}-r3")

    not_ended = spotjobs(stack, "resubmit", f"{request_id}-r2")  # SUCCEEDED: nothing to redo
    assert not_ended.returncode == 2 and len(not_ended.stderr.strip().splitlines()) == 1
    assert "SUCCEEDED" in not_ended.stderr and not_ended.stdout == ""
    taken = spotjobs(stack, "resubmit", request_id, "--new-id", f"{request_id}-r2")
    assert taken.returncode == 2 and "already in the ledger" in taken.stderr
    invalid = spotjobs(stack, "resubmit", request_id, "--new-id", "Not_Valid")
    assert invalid.returncode == 2 and "not a valid request id" in invalid.stderr
    unknown = spotjobs(stack, "resubmit", unique("never-published"))
    assert unknown.returncode == 1
    assert stack.ledger().get(f"{request_id}-r4") is None  # the refusals published nothing
