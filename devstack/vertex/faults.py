"""Scripted API failures: the next N calls of a method fail, or succeed with a lost response; and
a list that lags creates.

- `{"method": "create", "status": 503, "count": 2}`: the next two creates are refused with that
  HTTP status and nothing is stored.
- `{"method": "create", "mode": "lost_response", "count": 1}`: the next create is carried out (job
  stored and started) but the caller gets a 504 DEADLINE_EXCEEDED, as when a response is lost on
  the way back. Opt-in, for tests of "the server did it but the caller was told otherwise":
  `"status"` picks the answer among 499, 500, 503 and 504 (default 504), and `"rpc_status"` the
  google.rpc status name in the error body (`{"error": {"code", "message", "status"}}`), e.g.
  `{"method": "create", "mode": "lost_response", "status": 500, "rpc_status": "DATA_LOSS"}`.
  Over REST the client picks its exception from the HTTP status alone
  (`google.api_core.exceptions.from_http_response`): 499 -> Cancelled, 504 -> GatewayTimeout (a
  DeadlineExceeded), 503 -> ServiceUnavailable, and UNKNOWN, DATA_LOSS and INTERNAL all travel as
  HTTP 500 -> InternalServerError (google.rpc.Code's HTTP mapping); the name is only in the body.
  google.rpc.Code documents that DEADLINE_EXCEEDED may be returned although the operation
  completed, and with UNKNOWN, CANCELLED, DATA_LOSS or UNAVAILABLE the caller cannot tell either;
  an emulator that does the work and then answers one of them is what this fault is.
- `"rpc_status"` may also be given to an `error` fault, when it matches the HTTP status
  (`{"method": "create", "status": 400, "rpc_status": "FAILED_PRECONDITION"}`).
- `{"method": "list", "mode": "lag", "seconds": 30}`: from now on, jobs created less than 30 s ago
  are missing from customJobs.list results (get still finds them), until it is replaced by another
  lag fault, removed with `"seconds": 0`, or cleared (`DELETE /emulator/v1/faults`, reset).
  Invented and opt-in: Google does not document how far list results may lag a create, only that
  spotjobs must not assume they do not (`SPOTJOBS_LIST_LAG_SECONDS`).

Faults for a method are used in the order they were added.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from devstack.vertex.errors import STATUS_NAME_BY_HTTP, ApiError

METHODS = ("create", "get", "list", "cancel")
MODES = ("error", "lost_response", "lag")
_LOST_RESPONSE_STATUS = 504
# The answers a lost response may come back as: a call the server may have completed.
LOST_RESPONSE_STATUSES = (499, 500, 503, 504)
# google.rpc.Code names and the HTTP status each travels as (google/rpc/code.proto).
HTTP_BY_RPC_STATUS: dict[str, int] = {
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "UNAUTHENTICATED": 401,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "ABORTED": 409,
    "OUT_OF_RANGE": 400,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 500,
}
_FIELDS = {
    "error": {"method", "mode", "status", "rpc_status", "count", "message"},
    "lost_response": {"method", "mode", "status", "rpc_status", "count", "message"},
    "lag": {"method", "mode", "seconds"},
}


@dataclass
class Fault:
    method: str
    mode: str
    status: int
    remaining: int
    message: str
    rpc_status: str = ""
    seconds: float = 0.0  # lag only

    def error(self) -> ApiError:
        return ApiError(self.status, self.message, self.rpc_status or None)

    def to_json(self) -> dict[str, Any]:
        if self.mode == "lag":
            return {"method": self.method, "mode": self.mode, "seconds": self.seconds}
        return {
            "method": self.method,
            "mode": self.mode,
            "status": self.status,
            "rpc_status": self.rpc_status or STATUS_NAME_BY_HTTP[self.status],
            "remaining": self.remaining,
            "message": self.message,
        }


def parse_fault(body: Any) -> Fault:
    """Raises ValueError naming the offending field."""
    if not isinstance(body, dict):
        raise ValueError("a fault must be a JSON object")
    method, mode = body.get("method"), body.get("mode", "error")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}")
    unknown = set(body) - _FIELDS[mode]
    if unknown:
        raise ValueError(f"unknown field(s) in a {mode} fault: {sorted(unknown)}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}")
    if mode == "lag":
        return _parse_lag(method, body)
    count = body.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError("count must be a positive integer")
    if mode == "lost_response":
        status = body.get("status", _LOST_RESPONSE_STATUS)
        if status not in LOST_RESPONSE_STATUSES:
            raise ValueError(f"status of a lost_response must be one of {list(LOST_RESPONSE_STATUSES)}")
    else:
        status = body.get("status")
        if status not in STATUS_NAME_BY_HTTP:
            raise ValueError(f"status must be one of {sorted(STATUS_NAME_BY_HTTP)}")
    rpc_status = body.get("rpc_status", "")
    if rpc_status:
        if HTTP_BY_RPC_STATUS.get(rpc_status) != status:
            allowed = sorted(name for name, http in HTTP_BY_RPC_STATUS.items() if http == status)
            raise ValueError(f"rpc_status {rpc_status!r} does not travel as HTTP {status}; one of {allowed}")
    name = rpc_status or STATUS_NAME_BY_HTTP[status]
    default_message = (
        f"The emulator carried the call out and answered {status} {name} (a lost response)."
        if mode == "lost_response"
        else f"Injected fault: {name}."
    )
    message = body.get("message", default_message)
    if not isinstance(message, str):
        raise ValueError("message must be a string")
    return Fault(
        method=method,
        mode=mode,
        status=status,
        remaining=count,
        message=message,
        rpc_status=rpc_status,
    )


def _parse_lag(method: str, body: dict[str, Any]) -> Fault:
    if method != "list":
        raise ValueError("a lag fault applies to method list only")
    seconds = body.get("seconds")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not 0 <= seconds <= 3600:
        raise ValueError("seconds must be a number from 0 to 3600")
    return Fault(method=method, mode="lag", status=200, remaining=0, message="", seconds=float(seconds))


class FaultInjector:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._injected = 0
        self._list_lag: Fault | None = None

    def add(self, fault: Fault) -> None:
        with self._lock:
            if fault.mode == "lag":
                self._list_lag = fault if fault.seconds > 0 else None
                return
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

    def list_lag_seconds(self) -> float:
        """How long a created job stays missing from list results (0: it shows at once)."""
        with self._lock:
            return self._list_lag.seconds if self._list_lag else 0.0

    def visible_since(self) -> float | None:
        """The monotonic time after which created jobs are still hidden from lists, or None."""
        lag = self.list_lag_seconds()
        return time.monotonic() - lag if lag else None

    def pending(self) -> list[Fault]:
        with self._lock:
            return list(self._faults) + ([self._list_lag] if self._list_lag else [])

    @property
    def injected(self) -> int:
        with self._lock:
            return self._injected

    def clear_pending(self) -> int:
        """Drop every pending fault and the list lag; returns how many were dropped."""
        with self._lock:
            dropped = len(self._faults) + (1 if self._list_lag else 0)
            self._faults.clear()
            self._list_lag = None
            return dropped

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()
            self._list_lag = None
            self._injected = 0
