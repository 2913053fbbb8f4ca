"""Scripted API failures: the next N calls of a method fail, or succeed with a lost response.

`{"method": "create", "status": 503, "count": 2}`: the next two creates are refused with that
HTTP status and nothing is stored. `{"method": "create", "mode": "lost_response", "count": 1}`:
the next create is carried out (job stored and started) but the caller gets a 504
DEADLINE_EXCEEDED, as when a response is lost on the way back. Faults for a method are used in
the order they were added.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from devstack.vertex.errors import STATUS_NAME_BY_HTTP, ApiError

METHODS = ("create", "get", "list", "cancel")
MODES = ("error", "lost_response")
_LOST_RESPONSE_STATUS = 504


@dataclass
class Fault:
    method: str
    mode: str
    status: int
    remaining: int
    message: str

    def error(self) -> ApiError:
        return ApiError(self.status, self.message)

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "mode": self.mode,
            "status": self.status,
            "remaining": self.remaining,
            "message": self.message,
        }


def parse_fault(body: Any) -> Fault:
    """Raises ValueError naming the offending field."""
    if not isinstance(body, dict):
        raise ValueError("a fault must be a JSON object")
    unknown = set(body) - {"method", "mode", "status", "count", "message"}
    if unknown:
        raise ValueError(f"unknown field(s) in fault: {sorted(unknown)}")
    method, mode = body.get("method"), body.get("mode", "error")
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}")
    count = body.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError("count must be a positive integer")
    status = _LOST_RESPONSE_STATUS if mode == "lost_response" else body.get("status")
    if status not in STATUS_NAME_BY_HTTP:
        raise ValueError(f"status must be one of {sorted(STATUS_NAME_BY_HTTP)}")
    default_message = (
        "Deadline exceeded (the emulator dropped the response)."
        if mode == "lost_response"
        else f"Injected fault: {STATUS_NAME_BY_HTTP[status]}."
    )
    message = body.get("message", default_message)
    if not isinstance(message, str):
        raise ValueError("message must be a string")
    return Fault(method=method, mode=mode, status=status, remaining=count, message=message)


class FaultInjector:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._injected = 0

    def add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def take(self, method: str) -> Fault | None:
        """The fault to apply to this call of `method`, consuming one of its uses."""
        with self._lock:
            for fault in self._faults:
                if fault.method == method and fault.remaining > 0:
                    fault.remaining -= 1
                    self._injected += 1
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                    return fault
            return None

    def pending(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    @property
    def injected(self) -> int:
        with self._lock:
            return self._injected

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()
            self._injected = 0
