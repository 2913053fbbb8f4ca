"""A request with a deadline (issue 25): the envelope fields, their checks, and the refusal of a
deadline that on-demand from the start could not meet, with the numbers."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.requests.envelope import REQUEUE_ATTRIBUTES, InvalidJobRequest, canonical_envelope, read_request
from shared.requests.policy import check_policy, describe_policy, validate_request
from shared.settings import Settings
from tests.conftest import load_event

# A deadline may need an on-demand attempt: the deployment allows STANDARD.
SETTINGS = Settings.from_env({"SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD"})
PUBLISHED = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
JOB: dict[str, Any] = json.loads(load_event("requests/bare_docs.json"))


def envelope(**fields: Any) -> dict[str, Any]:
    return {"request_id": "retrain-monday", "custom_job": JOB, **fields}


def read(body: dict[str, Any], **attributes: str):
    return read_request(json.dumps(body).encode(), attributes=attributes, max_bytes=1 << 20)


def paths(body: dict[str, Any]) -> list[str]:
    return [v.path for v in read(body)[1]]


def test_a_deadline_with_its_work_reads_and_survives_the_canonical_envelope() -> None:
    body = envelope(
        deadline="2026-12-07T09:00:00+01:00", total_steps=50_000, expected_step_seconds=1.5, changeover_seconds=900
    )
    request, violations = read(body)
    assert violations == []
    assert request.deadline is not None
    assert request.deadline.at == datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
    assert (request.deadline.total_steps, request.deadline.expected_step_seconds) == (50_000, 1.5)
    stored = canonical_envelope(request, default_location="us-central1", default_max_attempts=3)
    assert stored["deadline"] == "2026-12-07T08:00:00Z" and stored["changeover_seconds"] == 900.0
    again, violations = read({**stored, "attempt": 2}, **REQUEUE_ATTRIBUTES)
    assert violations == [] and again.deadline == request.deadline


def test_without_a_deadline_the_canonical_envelope_keeps_its_old_form() -> None:
    request, _ = read(envelope())
    assert request.deadline is None
    assert "deadline" not in canonical_envelope(request, default_location="us-central1", default_max_attempts=3)


def test_the_work_fields_without_a_deadline_are_refused_by_name() -> None:
    assert paths(envelope(total_steps=10, changeover_seconds=60)) == ["total_steps", "changeover_seconds"]


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"deadline": "next monday"}, "deadline"),
        ({"deadline": 1733000000}, "deadline"),
        ({"deadline": "2026-12-07T09:00:00Z", "total_steps": 0}, "total_steps"),
        ({"deadline": "2026-12-07T09:00:00Z", "total_steps": True}, "total_steps"),
        ({"deadline": "2026-12-07T09:00:00Z", "expected_step_seconds": 0}, "expected_step_seconds"),
        ({"deadline": "2026-12-07T09:00:00Z", "expected_step_seconds": "1s"}, "expected_step_seconds"),
        ({"deadline": "2026-12-07T09:00:00Z", "changeover_seconds": -1}, "changeover_seconds"),
        ({"deadline": "2026-12-07T09:00:00Z", "changeover_seconds": float("nan")}, "changeover_seconds"),
    ],
)
def test_bad_deadline_fields_are_refused_by_name(fields: dict[str, Any], path: str) -> None:
    assert paths(envelope(**fields)) == [path]


def validate(body: dict[str, Any], **attributes: str):
    return validate_request(json.dumps(body).encode(), attributes=attributes, settings=SETTINGS, published_at=PUBLISHED)


def test_a_deadline_on_demand_could_not_meet_is_refused_naming_the_numbers() -> None:
    # 10 h away; 10,000 steps x 3.6 s = 10 h, plus the changeover: cannot be met.
    body = envelope(deadline="2026-12-01T19:00:00Z", total_steps=10_000, expected_step_seconds=3.6)
    with pytest.raises(InvalidJobRequest) as refused:
        validate(body)
    (violation,) = refused.value.violations
    assert violation.path == "deadline"
    needed = 36_000 + SETTINGS.changeover_prior_seconds
    for figure in ("36000 s after 2026-12-01T09:00:00Z", f"needs {needed:.0f} s", "10000 steps x 3.6 s", "1200 s"):
        assert figure in violation.message
    # With a changeover the publisher knows to be short, and a step a bit faster, it fits.
    validate({**body, "expected_step_seconds": 3.5, "changeover_seconds": 300})


def test_a_deadline_without_the_work_is_refused_only_when_closer_than_a_changeover() -> None:
    validate(envelope(deadline="2026-12-01T10:00:00Z"))
    with pytest.raises(InvalidJobRequest) as refused:
        validate(envelope(deadline="2026-12-01T08:00:00Z"))
    assert "less than one changeover" in refused.value.violations[0].message


def test_a_requeued_attempt_is_not_refused_for_a_deadline_that_has_come_close() -> None:
    request, _ = read(
        {**envelope(deadline="2026-12-01T09:10:00Z", total_steps=10, expected_step_seconds=3600), "attempt": 2},
        **REQUEUE_ATTRIBUTES,
    )
    assert [v.path for v in check_policy(request, SETTINGS, now=PUBLISHED)] == []
    first, _ = read(envelope(deadline="2026-12-01T09:10:00Z", total_steps=10, expected_step_seconds=3600))
    assert [v.path for v in check_policy(first, SETTINGS, now=PUBLISHED)] == ["deadline"]


def test_a_deadline_is_refused_where_the_deployment_allows_no_on_demand() -> None:
    spot_only = Settings.from_env({})
    body = envelope(deadline="2026-12-01T19:00:00Z", total_steps=10, expected_step_seconds=1)
    with pytest.raises(InvalidJobRequest) as refused:
        validate_request(json.dumps(body).encode(), attributes={}, settings=spot_only, published_at=PUBLISHED)
    [violation] = refused.value.violations
    assert violation.path == "deadline" and "SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES" in violation.message
    validate(body)


def test_a_message_marked_as_attempt_1_gets_every_deadline_check() -> None:
    # Attempt 1 is what publishers send, whatever attribute or field says it is a re-queue.
    spot_only = Settings.from_env({})
    body = {**envelope(deadline="2026-12-01T19:00:00Z", total_steps=10, expected_step_seconds=1), "attempt": 1}
    request, _ = read(body, **REQUEUE_ATTRIBUTES)
    assert request.attempt == 1
    [violation] = check_policy(request, spot_only, now=PUBLISHED)
    assert violation.path == "deadline" and "SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES" in violation.message
    # Lateness is judged at the publisher's publish: the system's re-publication of attempt 1
    # (a hand-over, reconcile's re-send of a claim) comes later and is not refused for it; a
    # forged one names no claim the ledger holds and is never claimed (tests/functional/test_submit.py).
    late, _ = read({**body, "deadline": "2026-12-01T09:10:00Z"}, **REQUEUE_ATTRIBUTES)
    assert check_policy(late, SETTINGS, now=PUBLISHED) == []
    published_late, _ = read({k: v for k, v in body.items() if k != "attempt"} | {"deadline": "2026-12-01T09:10:00Z"})
    assert [v.path for v in check_policy(published_late, SETTINGS, now=PUBLISHED)] == ["deadline"]


def test_the_effective_policy_shows_the_deadline_fields() -> None:
    shown = describe_policy(SETTINGS)["deadline"]
    assert set(shown["fields"]) == {"deadline", "total_steps", "expected_step_seconds", "changeover_seconds"}
    assert "1200 s" in shown["refused"]
    assert shown["on_demand"].startswith("only after 1 Spot attempts")
