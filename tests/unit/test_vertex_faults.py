"""Scripted API faults of the Vertex emulator."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.vertex.faults import FaultInjector, parse_fault


def test_faults_are_used_in_order_then_run_out() -> None:
    faults = FaultInjector()
    faults.add(parse_fault({"method": "create", "status": 503, "count": 2}))
    faults.add(parse_fault({"method": "create", "mode": "lost_response"}))

    taken = [faults.take("create") for _ in range(4)]

    assert [(fault.mode, fault.status) if fault else None for fault in taken] == [
        ("error", 503),
        ("error", 503),
        ("lost_response", 504),
        None,
    ]
    assert faults.take("get") is None
    assert faults.injected == 3 and faults.pending() == []


def test_a_fault_becomes_a_google_rpc_error() -> None:
    fault = parse_fault({"method": "get", "status": 429, "message": "quota"})

    assert fault.error().body() == {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ({"method": "delete", "status": 503}, "method"),
        ({"method": "create", "status": 418}, "status"),
        ({"method": "create", "status": 503, "count": 0}, "count"),
        ({"method": "create", "mode": "slow"}, "mode"),
        ({"method": "create", "status": 503, "times": 2}, "unknown field"),
        ({"method": "create", "mode": "lost_response", "status": 429}, "status of a lost_response"),
        ({"method": "create", "mode": "lost_response", "status": 500, "rpc_status": "CANCELLED"}, "rpc_status"),
        ({"method": "create", "mode": "lost_response", "rpc_status": "NOPE"}, "rpc_status"),
        ({"method": "create", "mode": "lag", "seconds": 5}, "list only"),
        ({"method": "list", "mode": "lag", "seconds": -1}, "seconds"),
        ({"method": "list", "mode": "lag", "seconds": 5, "count": 2}, "unknown field"),
    ],
)
def test_malformed_faults_are_refused(body: Any, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_fault(body)


@pytest.mark.parametrize(
    ("body", "status", "rpc_status"),
    [
        ({}, 504, "DEADLINE_EXCEEDED"),
        ({"status": 499}, 499, "CANCELLED"),
        ({"status": 503}, 503, "UNAVAILABLE"),
        ({"status": 500}, 500, "INTERNAL"),
        ({"status": 500, "rpc_status": "UNKNOWN"}, 500, "UNKNOWN"),
        ({"status": 500, "rpc_status": "DATA_LOSS"}, 500, "DATA_LOSS"),
    ],
)
def test_a_lost_response_answers_the_status_and_rpc_status_asked_for(
    body: dict[str, Any], status: int, rpc_status: str
) -> None:
    fault = parse_fault({"method": "create", "mode": "lost_response", **body})

    error = fault.error().body()["error"]
    assert (fault.mode, error["code"], error["status"]) == ("lost_response", status, rpc_status)
    assert fault.to_json()["rpc_status"] == rpc_status


def test_an_error_fault_may_name_a_matching_rpc_status() -> None:
    fault = parse_fault({"method": "create", "status": 400, "rpc_status": "FAILED_PRECONDITION"})

    assert fault.error().body()["error"]["status"] == "FAILED_PRECONDITION"


def test_a_list_lag_is_standing_until_replaced_removed_or_cleared() -> None:
    faults = FaultInjector()
    assert faults.list_lag_seconds() == 0 and faults.visible_since() is None

    faults.add(parse_fault({"method": "list", "mode": "lag", "seconds": 30}))
    faults.add(parse_fault({"method": "list", "status": 503}))

    assert faults.list_lag_seconds() == 30
    assert faults.take("list").status == 503  # a lag is not a queued fault: never taken
    assert faults.take("list") is None and faults.list_lag_seconds() == 30
    assert [f.to_json() for f in faults.pending()] == [{"method": "list", "mode": "lag", "seconds": 30.0}]
    faults.add(parse_fault({"method": "list", "mode": "lag", "seconds": 2.5}))
    assert faults.list_lag_seconds() == 2.5
    faults.add(parse_fault({"method": "list", "mode": "lag", "seconds": 0}))
    assert faults.list_lag_seconds() == 0 and faults.pending() == []

    faults.add(parse_fault({"method": "list", "mode": "lag", "seconds": 30}))
    faults.add(parse_fault({"method": "create", "status": 429, "count": 100}))
    assert faults.clear_pending() == 2
    assert faults.pending() == [] and faults.list_lag_seconds() == 0
    assert faults.injected == 1  # clearing pending faults keeps the count of those injected
