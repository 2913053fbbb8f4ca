"""Pacing's pure parts (shared/pacing.py) and the envelope's `priority`: the line's order, which
429s wait in line, the hold of a claim, and what a request may say about its priority."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from google.api_core import exceptions as api

from devstack.vertex.quotas import CRUD, SUBMISSIONS, quota_exceeded
from shared.clock import iso
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.pacing import (
    Waiting,
    generation_time,
    hold_for_quota,
    is_rate_limited,
    is_resource_quota,
    is_settled,
    waiting_entry,
)
from shared.requests.envelope import canonical_envelope, read_request
from shared.requests.envelope_options import MAX_PRIORITY
from tests.conftest import load_event

NOW = datetime(2026, 12, 1, 15, 0, tzinfo=UTC)


def envelope(**fields: object) -> bytes:
    return json.dumps(
        {"request_id": "r1", "custom_job": json.loads(load_event("requests/bare_docs.json")), **fields}
    ).encode()


def test_the_line_is_priority_first_then_arrival_then_name() -> None:
    def waiting(priority: int, request_id: str, attempt: int, generation: int) -> Waiting:
        return Waiting("us-central1", waiting_entry("us-central1", priority, request_id, attempt).key, generation)

    entries = [
        waiting(0, "early", 1, 100),
        waiting(0, "late", 1, 300),
        waiting(9, "urgent", 2, 900),
        waiting(-3, "whenever", 1, 1),
    ]
    in_turn = sorted(entries, key=lambda entry: entry.turn)
    assert [(e.request_id, e.attempt) for e in in_turn] == [("urgent", 2), ("early", 1), ("late", 1), ("whenever", 1)]
    # The same attempt always names the same entry: it is written once whatever delivery writes it.
    assert waiting_entry("us-central1", 0, "early", 1) == waiting_entry("us-central1", 0, "early", 1)
    assert generation_time(1_764_601_200_123_456) == "2025-12-01T15:00:00.123456Z"


def test_a_rate_limit_429_waits_in_line_a_resource_quota_429_does_not() -> None:
    for quota in (SUBMISSIONS, CRUD):
        error = quota_exceeded(quota, "projects/p")
        assert is_rate_limited(api.TooManyRequests(error.message, error_info=error.details[0]))
    assert is_rate_limited(api.TooManyRequests("Quota exceeded ... limit 'Job submission requests per minute'"))
    gpus = "The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus"
    assert not is_rate_limited(api.TooManyRequests(gpus))
    assert not is_rate_limited(api.ServiceUnavailable("per minute"))
    # Only the resource quota's 429 makes a waiting head leave the line.
    assert is_resource_quota(api.TooManyRequests(gpus))
    assert not is_resource_quota(api.TooManyRequests("Quota exceeded ... 'Job submission requests per minute'"))
    assert not is_resource_quota(api.ServiceUnavailable(gpus))
    # A 429 that names no quota (the emulator's injected fault) is no verdict on GPUs: it stays in line.
    assert not is_resource_quota(api.TooManyRequests("Injected fault: RESOURCE_EXHAUSTED."))


def test_a_waiting_attempt_is_settled_once_it_has_a_job_or_an_outcome_or_its_request_ended() -> None:
    def record(**fields: object) -> RequestRecord:
        attempt = Attempt(1, "us-central1", "SPOT", iso(NOW), waiting_since=iso(NOW))
        for name, value in fields.items():
            setattr(attempt, name, value)
        return RequestRecord("r1", {}, "gs://b/r1/", attempts=[attempt])

    assert not is_settled(record(), 1)
    assert is_settled(record(job="projects/p/locations/l/customJobs/1"), 1)
    assert is_settled(record(outcome="failed"), 1)
    ended = record()
    ended.status = RequestStatus.CANCELLED
    assert is_settled(ended, 1)
    assert is_settled(None, 1) and is_settled(record(), 2)  # gone, or an attempt it never had


def test_holding_for_the_quota_hands_our_claim_back_and_keeps_the_first_arrival() -> None:
    claimed_at = iso(NOW)
    record = RequestRecord(
        "r1", {}, "gs://b/r1/", attempts=[Attempt(1, "us-central1", "SPOT", claimed_at, create_sent_at=claimed_at)]
    )

    held = hold_for_quota(record, n=1, claimed_at=claimed_at, now=NOW, lease_seconds=120, waiting_since="A")

    assert held is not None
    attempt = held.attempt(1)
    assert attempt.waiting_since == "A" and attempt.create_sent_at is None
    assert attempt.claimed_at == iso(NOW - timedelta(seconds=120))  # a takeover may take it at once
    again = hold_for_quota(held, n=1, claimed_at=attempt.claimed_at, now=NOW, lease_seconds=120, waiting_since="B")
    assert again is not None and again.attempt(1).waiting_since == "A"
    # Not ours any more (taken over), or created meanwhile: nothing written.
    assert hold_for_quota(held, n=1, claimed_at="someone else's", now=NOW, lease_seconds=120, waiting_since="C") is None
    held.attempt(1).job = "projects/p/locations/l/customJobs/1"
    assert (
        hold_for_quota(held, n=1, claimed_at=held.attempt(1).claimed_at, now=NOW, lease_seconds=120, waiting_since="C")
        is None
    )


@pytest.mark.parametrize("priority", ["high", 1.5, True, MAX_PRIORITY + 1, -MAX_PRIORITY - 1])
def test_a_priority_is_an_integer_within_bounds(priority: object) -> None:
    _, violations = read_request(envelope(priority=priority), attributes={}, max_bytes=1 << 20)
    assert [v.path for v in violations] == ["priority"]


def test_a_priority_is_kept_in_the_stored_envelope_only_when_set() -> None:
    urgent, _ = read_request(envelope(priority=7), attributes={}, max_bytes=1 << 20)
    plain, _ = read_request(envelope(), attributes={}, max_bytes=1 << 20)
    stored = canonical_envelope(urgent, default_location="us-central1", default_max_attempts=3)
    assert stored["priority"] == 7
    # Priority 0 stores the envelope as before it existed: a redelivered old request is the same.
    assert "priority" not in canonical_envelope(plain, default_location="us-central1", default_max_attempts=3)
