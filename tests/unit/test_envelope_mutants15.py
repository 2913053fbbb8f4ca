"""The envelope's integer bounds at edges the fifteenth mutation pass found: one is the least a
request may ask for in `max_attempts` (a request that must not be retried), `total_steps` and
`checkpoints.keep_last`, and a re-queue names an attempt from 1 (attempt 0 is none a claim made)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from shared.clock import iso, utcnow
from shared.requests.envelope import REQUEUE_ATTRIBUTES, read_request

JOB = {
    "display_name": "train",
    "job_spec": {"worker_pool_specs": [{"machine_spec": {"machine_type": "n1-standard-8"}}]},
}


def read(body: dict[str, Any], attributes: dict[str, str] | None = None) -> tuple[Any, list[str]]:
    data = json.dumps({"request_id": "req-1", "custom_job": JOB, **body}).encode()
    request, violations = read_request(data, attributes=attributes or {}, max_bytes=1 << 20)
    return request, [violation.path for violation in violations]


def test_a_request_of_one_attempt_is_read_as_one_and_two_as_two() -> None:
    assert [read({"max_attempts": n})[0].max_attempts for n in (1, 2)] == [1, 2]
    assert read({"max_attempts": 1})[1] == []
    assert read({"max_attempts": 0})[1] == ["max_attempts"]


def test_a_requeue_names_an_attempt_from_one() -> None:
    request, paths = read({"attempt": 1, "location": "us-central1"}, REQUEUE_ATTRIBUTES)
    assert (request.attempt, paths) == (1, [])
    assert read({"attempt": 0, "location": "us-central1"}, REQUEUE_ATTRIBUTES)[1] == ["attempt"]


def test_one_step_is_a_deadline_requests_least_total_steps() -> None:
    deadline = iso(utcnow() + timedelta(days=1))
    assert "total_steps" not in read({"deadline": deadline, "total_steps": 1})[1]
    assert "total_steps" in read({"deadline": deadline, "total_steps": 0})[1]


def test_one_checkpoint_is_the_least_a_request_may_keep() -> None:
    request, paths = read({"checkpoints": {"keep_last": 1}})
    assert (request.keep_last, paths) == (1, [])
    assert read({"checkpoints": {"keep_last": 0}})[1] == ["checkpoints.keep_last"]
