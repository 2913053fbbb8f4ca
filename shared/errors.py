"""The spotjobs error hierarchy and the one retryable-or-not predicate.

A handler acknowledges a message by returning and asks for redelivery by raising. Which it does
for a failure is decided here, in one place: `is_retryable`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class SpotjobsError(Exception):
    """Root of every error spotjobs raises on purpose."""


class ConfigurationError(SpotjobsError):
    """The deployment's settings are wrong; retrying will not help."""


@dataclass(frozen=True)
class Violation:
    """One reason a request is rejected: where (a field path) and why (what is allowed)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class InvalidRequest(SpotjobsError):
    """A job request that can never succeed as sent. Carries every violation, not just the first."""

    def __init__(self, violations: Sequence[Violation]) -> None:
        self.violations = tuple(violations)
        super().__init__("; ".join(str(v) for v in self.violations) or "invalid request")


class TransientError(SpotjobsError):
    """A failure that a later delivery may not meet (lost race, dependency briefly unavailable)."""


class ConflictError(TransientError):
    """A read-modify-write lost its generation race more often than it is allowed to retry."""


def _retryable_api_exceptions() -> tuple[type[BaseException], ...]:
    # Imported on first use: the predicate is cheap to import for functions that never call it.
    from google.api_core import exceptions as api

    return (
        api.TooManyRequests,  # 429: quota; Pub/Sub's backoff supplies the wait
        api.InternalServerError,  # 500
        api.BadGateway,  # 502
        api.ServiceUnavailable,  # 503
        api.GatewayTimeout,  # 504
        api.DeadlineExceeded,
        api.Aborted,  # concurrency conflict on the server side
        api.RetryError,  # api_core's own retry gave up: still a transient cause
    )


def _retryable_transport_exceptions() -> tuple[type[BaseException], ...]:
    import requests

    return (ConnectionError, TimeoutError, requests.ConnectionError, requests.Timeout)


def is_retryable(exc: BaseException) -> bool:
    """True when redelivering the same message may succeed; False when it never will."""
    if isinstance(exc, TransientError):
        return True
    if isinstance(exc, SpotjobsError):
        return False
    if isinstance(exc, _retryable_api_exceptions()):
        return True
    from google.api_core import exceptions as api

    if isinstance(exc, api.GoogleAPICallError):
        # 400, 401, 403, 404, 409, 412 and the rest: the same call will fail the same way.
        return False
    if isinstance(exc, _retryable_transport_exceptions()):
        return True
    from google.auth import exceptions as auth

    if isinstance(exc, auth.TransportError):
        return True
    if isinstance(exc, auth.RefreshError):
        # A token refresh that could not reach its endpoint (the metadata server, STS) says so by
        # wrapping a TransportError, as its cause or its argument; google-auth flags 5xx replies.
        causes = (exc.__cause__, *exc.args)
        return exc.retryable or any(isinstance(c, auth.TransportError) for c in causes)
    return False
