"""`is_retryable`, table-style over every exception it can meet: raise (redeliver) or acknowledge."""

from __future__ import annotations

import inspect

import google.auth.exceptions
import pytest
import requests
from google.api_core import exceptions as api

from shared.errors import (
    ConfigurationError,
    ConflictError,
    InvalidRequest,
    SpotjobsError,
    TransientError,
    Violation,
    is_retryable,
)
from shared.ledger.claims import ClaimInProgress
from shared.requests.envelope import InvalidJobRequest

# Every exception class google.api_core.exceptions defines, and what redelivery would achieve.
API_EXCEPTIONS: dict[str, bool] = {
    # Transient: the same call may succeed later.
    "TooManyRequests": True,  # 429 (quota): Pub/Sub's backoff supplies the wait
    "ResourceExhausted": True,  # gRPC's 429
    "InternalServerError": True,
    "BadGateway": True,
    "ServiceUnavailable": True,
    "GatewayTimeout": True,
    "DeadlineExceeded": True,
    "Aborted": True,
    # Permanent: the same call fails the same way.
    "AlreadyExists": False,
    "BadRequest": False,
    "Cancelled": False,
    "ClientError": False,
    "Conflict": False,
    "DataLoss": False,
    "FailedPrecondition": False,
    "Forbidden": False,
    "GoogleAPICallError": False,
    "InvalidArgument": False,
    "LengthRequired": False,
    "MethodNotAllowed": False,
    "MethodNotImplemented": False,
    "MissingStatusHeaderError": False,
    "MovedPermanently": False,
    "NotFound": False,
    "NotModified": False,
    "OutOfRange": False,
    "PermissionDenied": False,
    "PreconditionFailed": False,
    "Redirection": False,
    "RequestRangeNotSatisfiable": False,
    "ResumableTransferError": False,
    "ResumeIncomplete": False,
    "ServerError": False,
    "TemporaryRedirect": False,
    "TransferStalledError": False,
    "Unauthenticated": False,
    "Unauthorized": False,
    "Unknown": False,
    "UnseekableStreamError": False,
    "UploadCancelledError": False,
    # Not call errors at all.
    "GoogleAPIError": False,
    "DuplicateCredentialArgs": False,
    "AsyncRestUnsupportedParameterError": False,
}


def _api_exception(name: str) -> BaseException:
    cls = getattr(api, name)
    return cls("boom") if name != "RetryError" else cls("gave up", cause=api.ServiceUnavailable("x"))


def test_the_table_covers_every_api_core_exception() -> None:
    defined = {
        name
        for name, value in vars(api).items()
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == api.__name__
    }
    assert defined - {"RetryError"} == set(API_EXCEPTIONS), "a new google.api_core exception needs a decision"


@pytest.mark.parametrize("name, retryable", sorted(API_EXCEPTIONS.items()))
def test_api_core_exceptions(name: str, retryable: bool) -> None:
    assert is_retryable(_api_exception(name)) is retryable


def _refresh_error_from(cause: BaseException) -> google.auth.exceptions.RefreshError:
    """A RefreshError raised `from` its cause, as google-auth's credentials raise them."""
    try:
        raise google.auth.exceptions.RefreshError("could not refresh the token") from cause
    except google.auth.exceptions.RefreshError as exc:
        return exc


@pytest.mark.parametrize(
    "exc, retryable",
    [
        (api.RetryError("api_core's own retry gave up", cause=api.ServiceUnavailable("x")), True),
        (api.from_http_status(429, "quota"), True),
        (api.from_http_status(503, "down"), True),
        (api.from_http_status(504, "lost"), True),
        (api.from_http_status(400, "bad"), False),
        (api.from_http_status(403, "denied"), False),
        (api.from_http_status(404, "gone"), False),
        (api.from_http_status(412, "precondition"), False),
        (ConnectionError("reset"), True),
        (ConnectionRefusedError("refused"), True),
        (TimeoutError("slow"), True),
        (requests.ConnectionError("reset"), True),
        (requests.ConnectTimeout("slow connect"), True),
        (requests.ReadTimeout("slow read"), True),
        (google.auth.exceptions.TransportError("token endpoint down"), True),
        (_refresh_error_from(google.auth.exceptions.TransportError("metadata server down")), True),
        (google.auth.exceptions.RefreshError(google.auth.exceptions.TransportError("down")), True),
        (google.auth.exceptions.RefreshError("token endpoint 503", retryable=True), True),
        (google.auth.exceptions.RefreshError("invalid_grant: account deleted"), False),
        (_refresh_error_from(ValueError("malformed token response")), False),
        (TransientError("try later"), True),
        (ConflictError("lost the CAS race too often"), True),
        (ClaimInProgress("another delivery is creating the job"), True),
        (SpotjobsError("ours"), False),
        (ConfigurationError("bad settings"), False),
        (InvalidRequest([Violation("body", "is empty")]), False),
        (InvalidJobRequest([Violation("body", "is empty")], request_id="r1"), False),
        (ValueError("a bug"), False),
        (KeyError("a bug"), False),
        (requests.HTTPError("an HTTP error without a retryable class"), False),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else str(value),
)
def test_other_exceptions(exc: BaseException, retryable: bool) -> None:
    assert is_retryable(exc) is retryable
