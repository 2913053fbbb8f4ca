"""Times and numbers a publisher gives are range-checked: a clear violation naming the field,
never an exception from arithmetic on them (issue 32 items 5 and 9)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.requests.envelope import read_request
from tests.conftest import load_event

PUBLISHED = datetime(2026, 11, 30, 21, 5, 42, tzinfo=UTC)
FAR = "9999-12-31T23:59:59Z"
HUGE = 10**400


def read(body: dict[str, Any], **attributes: str) -> list[str]:
    data = json.dumps(body).encode()
    _, violations = read_request(data, attributes=attributes, max_bytes=1_000_000, published_at=PUBLISHED)
    return [str(v) for v in violations]


def docs_body() -> dict[str, Any]:
    return json.loads(load_event("requests/bare_docs.json"))


def envelope(**fields: Any) -> dict[str, Any]:
    return {"request_id": "r1", "custom_job": docs_body(), **fields}


@pytest.mark.parametrize("attribute", ["schedule_time", "spotjobs_original_publish_time"])
@pytest.mark.parametrize("value", [FAR, "1970-01-01T00:00:00Z"])
def test_a_bare_body_moment_far_from_its_publish_time_is_refused_by_name(attribute: str, value: str) -> None:
    (violation,) = read(docs_body(), **{attribute: value})
    assert violation.startswith(f"attributes.{attribute}: is {value!r}")


def test_a_moment_a_scheduler_or_a_redrive_gives_is_kept_within_the_range() -> None:
    assert read(docs_body(), schedule_time="2026-11-30T21:30:00Z") == []
    assert read(docs_body(), spotjobs_original_publish_time="2026-10-30T21:05:42Z") == []


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"deadline": FAR}, "deadline"),
        ({"deadline": "2026-12-07T09:00:00Z", "total_steps": HUGE}, "total_steps"),
        ({"deadline": "2026-12-07T09:00:00Z", "expected_step_seconds": HUGE}, "expected_step_seconds"),
        ({"deadline": "2026-12-07T09:00:00Z", "changeover_seconds": HUGE}, "changeover_seconds"),
        ({"deadline": "2026-12-07T09:00:00Z", "expected_step_seconds": 1e308}, "expected_step_seconds"),
    ],
)
def test_huge_numbers_and_far_deadlines_are_refused_by_name(fields: dict[str, Any], path: str) -> None:
    violations = read(envelope(**fields))
    assert [v.split(":")[0] for v in violations] == [path]
