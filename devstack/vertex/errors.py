"""Errors the Vertex emulator returns, in the google.rpc JSON shape Google's REST APIs use.

`{"error": {"code": <HTTP status>, "message": ..., "status": <google.rpc.Code name>}}` is what
`google.api_core.exceptions.from_http_response` reads: the HTTP status picks the exception class
(503 -> ServiceUnavailable, 429 -> TooManyRequests, 404 -> NotFound, 504 -> GatewayTimeout) and
`message` becomes its text.
"""

from __future__ import annotations

from typing import Any

# The canonical google.rpc.Code name for each HTTP status the emulator can send
# (https://cloud.google.com/apis/design/errors#handling_errors).
STATUS_NAME_BY_HTTP: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class ApiError(Exception):
    """A failed API call: an HTTP status, its google.rpc status name and a message."""

    def __init__(
        self,
        http_status: int,
        message: str,
        status: str | None = None,
        *,
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.message = message
        self.status = status or STATUS_NAME_BY_HTTP.get(http_status, "UNKNOWN")
        self.details = details or []  # google.rpc error details, each with its "@type"

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.http_status, "message": self.message, "status": self.status}
        if self.details:
            error["details"] = self.details
        return {"error": error}


def invalid_argument(message: str) -> ApiError:
    return ApiError(400, message)


def failed_precondition(message: str) -> ApiError:
    # google.rpc FAILED_PRECONDITION travels as HTTP 400, as on the real API.
    return ApiError(400, message, "FAILED_PRECONDITION")


def not_found(message: str) -> ApiError:
    return ApiError(404, message)


def permission_denied(message: str) -> ApiError:
    return ApiError(403, message)
