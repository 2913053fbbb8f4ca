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

    assert fault.error().body() == {
        "error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}
    }


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ({"method": "delete", "status": 503}, "method"),
        ({"method": "create", "status": 418}, "status"),
        ({"method": "create", "status": 503, "count": 0}, "count"),
        ({"method": "create", "mode": "slow"}, "mode"),
        ({"method": "create", "status": 503, "times": 2}, "unknown field"),
    ],
)
def test_malformed_faults_are_refused(body: Any, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_fault(body)
