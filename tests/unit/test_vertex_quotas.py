"""The Vertex emulator's request quotas (devstack/vertex/quotas.py): a sliding minute per project
and region, a refused call not counted, 0 = off, and the 429 body Google's APIs send."""

from __future__ import annotations

import pytest

from devstack.vertex.emulator import _config_from, _parse_args
from devstack.vertex.errors import ApiError
from devstack.vertex.quotas import CRUD, SUBMISSIONS, QuotaEnforcer, SlidingWindow, quota_exceeded
from devstack.vertex.service import EmulatorConfig


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_window_admits_its_limit_then_refuses_until_the_oldest_call_is_a_minute_old() -> None:
    clock = FakeClock()
    window = SlidingWindow(3, clock=clock)
    assert [window.try_acquire("k") for _ in range(3)] == [True, True, True]
    clock.now += 10
    assert window.try_acquire("k") is False
    clock.now += 49.9  # 59.9 s after the first three
    assert window.try_acquire("k") is False
    clock.now += 0.1  # exactly a minute: the first three leave the window together
    assert [window.try_acquire("k") for _ in range(4)] == [True, True, True, False]
    assert window.used("k") == 3


def test_refused_calls_are_not_counted_and_keys_are_independent() -> None:
    clock = FakeClock()
    window = SlidingWindow(1, clock=clock)
    assert window.try_acquire(("p", "us-central1"))
    for _ in range(50):
        clock.now += 1
        assert not window.try_acquire(("p", "us-central1"))
    assert window.try_acquire(("p", "europe-west4"))  # another region has its own minute
    assert window.try_acquire(("q", "us-central1"))  # and so has another project
    clock.now += 10  # 60 s after the only admitted call: the 50 refusals left no trace
    assert window.try_acquire(("p", "us-central1"))


def test_zero_turns_a_quota_off_and_a_negative_one_is_refused() -> None:
    window = SlidingWindow(0, clock=FakeClock())
    assert all(window.try_acquire("k") for _ in range(10_000))
    with pytest.raises(ValueError):
        SlidingWindow(-1)
    with pytest.raises(ValueError):
        EmulatorConfig(quota_crud_per_minute=-5)


def test_create_counts_against_submissions_and_get_list_cancel_against_crud() -> None:
    clock = FakeClock()
    quotas = QuotaEnforcer(submissions_per_minute=1, crud_per_minute=3, clock=clock)
    quotas.check("create", "p", "us-central1", "projects/p")
    for method in ("get", "list", "cancel"):
        quotas.check(method, "p", "us-central1", "projects/p")
    with pytest.raises(ApiError) as crud:
        quotas.check("get", "p", "us-central1", "projects/p")
    with pytest.raises(ApiError) as create:
        quotas.check("create", "p", "us-central1", "projects/p")
    assert CRUD.metric in crud.value.message and SUBMISSIONS.metric in create.value.message
    assert quotas.stats() == {"per_minute": {"submissions": 1, "crud": 3}, "refused": {"submissions": 1, "crud": 1}}
    quotas.reset()
    quotas.check("create", "p", "us-central1", "projects/p")


def test_the_429_names_the_quota_as_googles_apis_do() -> None:
    body = quota_exceeded(SUBMISSIONS, "projects/123").body()["error"]
    assert body["code"] == 429 and body["status"] == "RESOURCE_EXHAUSTED"
    assert body["message"] == (
        "Quota exceeded for quota metric 'aiplatform.googleapis.com/job_submission_requests' and limit "
        "'Job or LRO submission requests per minute per region' of service 'aiplatform.googleapis.com' "
        "for consumer 'projects/123'."
    )
    [info] = body["details"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert info["reason"] == "RATE_LIMIT_EXCEEDED"
    assert info["metadata"]["quota_metric"] == SUBMISSIONS.metric


def test_the_command_line_enforces_the_documented_quotas_unless_told_otherwise() -> None:
    default = _config_from(_parse_args([]))
    assert (default.quota_submissions_per_minute, default.quota_crud_per_minute) == (60, 600)
    off = _config_from(_parse_args(["--quota-submissions-per-minute", "0", "--quota-crud-per-minute=7"]))
    assert (off.quota_submissions_per_minute, off.quota_crud_per_minute) == (0, 7)
