"""submit_job in the embedded stack: published requests become exactly one SPOT CustomJob on the
Vertex emulator per attempt, whatever Pub/Sub and Vertex do; invalid requests become alerts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.jobs import LABEL_ATTEMPT, LABEL_DEPLOYMENT, LABEL_REQUEST_ID
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import TERMINAL_STATUSES, RequestStatus
from shared.requests.envelope import canonical_envelope, read_request
from shared.requests.request_ids import derived_request_id
from tests.conftest import EVENTS_DIR, load_event
from tests.support.stack_submit import DELIVERY_TIMEOUT, decided, decisions, jobs_of, unique, wait_for_job_recorded

pytestmark = pytest.mark.stack


def envelope(request_id: str, fixture: str = "requests/bare_quick.json", **fields: Any) -> bytes:
    return json.dumps({"request_id": request_id, "custom_job": json.loads(load_event(fixture)), **fields}).encode()


def alerts_matching(stack: Any, collected: list[dict[str, Any]], predicate: Any, count: int) -> list[dict[str, Any]]:
    """Drain ops-alerts into `collected` until `count` alerts match `predicate`."""

    def enough() -> list[dict[str, Any]] | None:
        collected.extend(stack.pull_alerts(timeout=1))
        found = [a for a in collected if predicate(a)]
        return found if len(found) >= count else None

    return stack.wait_for(enough, DELIVERY_TIMEOUT, f"{count} matching alert(s)")


def test_the_docs_body_published_as_is_becomes_one_spot_job(stack: Any) -> None:
    body = load_event("requests/bare_docs.json")
    # published without an id: named by its content and the minute of its schedule_time
    scheduled = datetime.now(UTC)
    message_id = stack.publish("job_requests", body, schedule_time=scheduled.isoformat())
    request_id = derived_request_id(json.loads(body), scheduled)

    record = wait_for_job_recorded(stack, request_id)

    [job] = jobs_of(stack, request_id)
    assert job.name == record.attempt(1).job
    assert job.job_spec.scheduling.strategy.name == "SPOT"
    assert dict(job.labels) == {
        LABEL_REQUEST_ID: request_id,
        LABEL_ATTEMPT: "1",
        LABEL_DEPLOYMENT: stack.settings.deployment_label,
    }
    assert job.job_spec.base_output_directory.output_uri_prefix == stack.settings.output_dir_for(request_id)
    submitted = json.loads(load_event("requests/bare_docs.json"))["jobSpec"]["workerPoolSpecs"][0]
    pool = job.job_spec.worker_pool_specs[0]
    assert pool.machine_spec.machine_type == submitted["machineSpec"]["machineType"]
    assert pool.machine_spec.accelerator_type.name == submitted["machineSpec"]["acceleratorType"]
    assert pool.machine_spec.accelerator_count == submitted["machineSpec"]["acceleratorCount"]
    assert pool.replica_count == submitted["replicaCount"]
    assert pool.container_spec.image_uri == submitted["containerSpec"]["imageUri"]
    assert job.display_name == "spot-training-job"
    assert record.attempt(1).state and record.attempt(1).state.startswith("JOB_STATE_")
    [line] = decided(stack, request_id, "job_created")
    assert line["attempt"] == 1 and line["job"] == job.name and line["event_id"] == message_id


def test_one_request_published_five_times_concurrently_yields_one_job(stack: Any) -> None:
    request_id = unique("five")
    body = envelope(request_id)
    message_ids: list[str] = []
    threads = [
        threading.Thread(target=lambda: message_ids.append(stack.publish("job_requests", body))) for _ in range(5)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Every one of the five messages ends in a decision: one creates, four are duplicates.
    stack.wait_for(
        lambda: len({line["message_id"] for line in decisions(stack, request_id, "job_created", "duplicate")}) == 5,
        DELIVERY_TIMEOUT,
        "all five deliveries to be decided",
    )
    assert len(jobs_of(stack, request_id)) == 1
    assert len(decisions(stack, request_id, "job_created")) == 1
    assert stack.ledger().get(request_id).status in (set(RequestStatus) - TERMINAL_STATUSES) | TERMINAL_STATUSES


def test_a_redelivery_after_a_crash_between_claim_and_create_yields_one_job(stack: Any) -> None:
    request_id = unique("crashed")
    body = envelope(request_id)
    request, _ = read_request(body, attributes={}, max_bytes=stack.settings.max_request_bytes)
    claimed_at = datetime.now(UTC) - timedelta(seconds=stack.settings.claim_lease_seconds + 1)
    crashed = RequestRecord(
        request_id,
        canonical_envelope(request, default_location=stack.settings.location, default_max_attempts=3),
        stack.settings.output_dir_for(request_id),
        attempts=[Attempt(1, stack.settings.location, "SPOT", claimed_at.isoformat().replace("+00:00", "Z"))],
    )
    stack.ledger().update(request_id, lambda current: crashed)  # the claim a crashed delivery left

    stack.publish("job_requests", body)  # its redelivery

    record = wait_for_job_recorded(stack, request_id)
    assert [j.name for j in jobs_of(stack, request_id)] == [record.attempt(1).job]
    assert decisions(stack, request_id, "claim_taken_over")


def test_a_create_whose_response_is_lost_yields_one_job(stack: Any) -> None:
    request_id = unique("lost")
    stack.vertex_control("POST", "/emulator/v1/faults", {"method": "create", "mode": "lost_response", "count": 1})

    stack.publish("job_requests", envelope(request_id))

    record = wait_for_job_recorded(stack, request_id)
    assert [j.name for j in jobs_of(stack, request_id)] == [record.attempt(1).job]
    assert decided(stack, request_id, "job_found")


def test_a_quota_refused_create_is_redelivered_and_ends_with_one_job(stack: Any) -> None:
    request_id = unique("refused429")
    stack.vertex_control("POST", "/emulator/v1/faults", {"method": "create", "status": 429, "count": 2})

    stack.publish("job_requests", envelope(request_id))

    record = wait_for_job_recorded(stack, request_id)
    assert [j.name for j in jobs_of(stack, request_id)] == [record.attempt(1).job]
    assert len(decided(stack, request_id, "job_created")) == 1
    assert len(decisions(stack, request_id, "create_refused")) == 2  # redelivered twice, then created


def test_a_503_on_create_keeps_the_claim_and_ends_with_one_job_after_the_lease(stack: Any) -> None:
    # UNAVAILABLE may come after the server accepted the create: the claim is kept (never released
    # early), so the redelivery that creates is the one that takes it over after the lease. (One
    # 503 only: waiting out a lease per 503 spends deliveries; past max_delivery_attempts, the
    # message dead-letters and reconcile re-publishes the abandoned claim.)
    request_id = unique("unavailable")
    stack.vertex_control("POST", "/emulator/v1/faults", {"method": "create", "status": 503, "count": 1})

    stack.publish("job_requests", envelope(request_id))

    record = wait_for_job_recorded(stack, request_id)
    assert [j.name for j in jobs_of(stack, request_id)] == [record.attempt(1).job]
    assert len(decisions(stack, request_id, "create_unknown")) == 1
    assert decisions(stack, request_id, "claim_taken_over")
    assert decisions(stack, request_id, "create_refused") == []
    assert len(decided(stack, request_id, "job_created")) == 1


INVALID_FIXTURES = [
    (
        "invalid_machine_family.json",
        "custom_job.jobSpec.workerPoolSpecs[0].machineSpec.machineType",
    ),
    ("invalid_tpu.json", "custom_job.jobSpec.workerPoolSpecs[0].machineSpec.tpuTopology"),
    ("invalid_replicas.json", "custom_job.jobSpec.workerPoolSpecs[1].replicaCount"),
    ("invalid_request_id.json", "request_id"),
    ("invalid_unknown_field.json", "jobSpec.workerPoolSpecs[0].machineSpec.machineTyp"),
    ("invalid_wrong_type.json", "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount"),
    ("invalid_image.json", "custom_job.jobSpec.workerPoolSpecs[0].containerSpec.imageUri"),
]
INVALID_BYTES = [
    (b"this is not JSON", "body"),
    (b"", "body"),
    (b"[1, 2, 3]", "body"),
    (b"{}" + b" " * (256 * 1024), "body"),  # over SPOTJOBS_MAX_REQUEST_BYTES
]


def test_invalid_requests_are_acknowledged_alerted_once_each_and_create_no_job(stack: Any) -> None:
    published: dict[str, str] = {}  # message id -> the violation path its alert must name
    for fixture, path in INVALID_FIXTURES:
        published[stack.publish("job_requests", load_event(f"requests/{fixture}"))] = path
    for data, path in INVALID_BYTES:
        # Pub/Sub refuses a message with neither data nor attributes, so each carries one.
        published[stack.publish("job_requests", data, origin="test")] = path

    collected: list[dict[str, Any]] = []
    alerts = alerts_matching(
        stack,
        collected,
        lambda a: a["kind"] == "invalid_request" and a["details"].get("message_id") in published,
        count=len(published),
    )

    by_message = {a["details"]["message_id"]: a for a in alerts}
    assert len(alerts) == len(by_message) == len(published)  # one alert each, none repeated
    for message_id, path in published.items():
        violations = by_message[message_id]["details"]["violations"]
        assert any(v.startswith(f"{path}: ") or v.startswith(f"{path}[") for v in violations), (
            message_id,
            violations,
        )
    for fixture in ("invalid_machine_family", "invalid_tpu", "invalid_replicas"):
        request_id = {
            "invalid_machine_family": "bad-machine-family",
            "invalid_tpu": "bad-tpu",
            "invalid_replicas": "bad-replicas",
        }[fixture]
        assert jobs_of(stack, request_id) == [] and stack.ledger().get(request_id) is None
    # Never a crash: each message was logged as an ERROR decision and the function still serves.
    rejected = {
        line["message_id"] for line in stack.function_logs("submit_job") if line.get("event") == "invalid_request"
    }
    assert set(published) <= rejected
    assert not [
        line
        for line in stack.function_logs("submit_job")
        if line.get("event") in ("retry", "permanent_failure") and line.get("message_id") in published
    ]


def test_the_cli_submits_and_reports_status(stack: Any) -> None:
    env = {**os.environ, **stack.env}
    submitted = subprocess.run(
        [
            sys.executable,
            "-m",
            "spotjobs.cli",
            "submit",
            str(EVENTS_DIR / "requests/bare_quick.json"),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert submitted.returncode == 0, submitted.stderr
    receipt = json.loads(submitted.stdout)
    request_id = receipt["request_id"]
    assert request_id.startswith("cli-") and receipt["message_id"]

    record = wait_for_job_recorded(stack, request_id)

    status = subprocess.run(
        [sys.executable, "-m", "spotjobs.cli", "status", request_id, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    document = json.loads(status.stdout)
    assert document["request_id"] == request_id and document["attempts"][0]["job"] == record.attempt(1).job

    table = subprocess.run(
        [sys.executable, "-m", "spotjobs.cli", "status"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert table.returncode == 0 and any(line.startswith(request_id) for line in table.stdout.splitlines())
