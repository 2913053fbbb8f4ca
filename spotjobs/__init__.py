"""spotjobs for publishers: validate a job request, publish it, ask how it is doing.

    import spotjobs

    request = {"request_id": "resnet-nightly-001", "custom_job": {...}, "max_attempts": 4}
    problems = spotjobs.validate(request)          # offline: every violation, [] when valid
    message_id = spotjobs.publish(request)          # validated first; raises InvalidRequest
    print(spotjobs.status("resnet-nightly-001"))    # None until submit_job has claimed it
    spotjobs.cancel("resnet-nightly-001", reason="wrong data")  # no attempt is created after it

`publish`, `status` and `cancel` talk to the emulators when PUBSUB_EMULATOR_HOST / STORAGE_EMULATOR_HOST
are set (as after `spotjobs local up`), else to Google Cloud with Application Default
Credentials, exactly like the `spotjobs` CLI; the project, topic and state bucket are the
`SPOTJOBS_*` settings (`GOOGLE_CLOUD_PROJECT`, `SPOTJOBS_STATE_BUCKET`, ...) unless passed.

Importing this package is cheap: Google client libraries and the request schema are loaded by the
first call that needs them. The implementation lives in `shared/` (the functions' own code), so a
request this API accepts is a request submit_job accepts under the same settings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# The one exception for a request that can never succeed as sent (submit_job raises it too):
# `violations` names every problem, each a Violation (`path: message` as text).
from shared.errors import InvalidRequest, Violation

if TYPE_CHECKING:
    from shared.ledger.store import LedgerStore
    from shared.settings import Settings

__all__ = [
    "AttemptStatus",
    "CancelOutcome",
    "InvalidRequest",
    "RequestStatus",
    "cancel",
    "publish",
    "status",
    "validate",
]

Request = Mapping[str, Any] | str | bytes
"""A job request: the envelope or a bare CustomJob body, as a mapping or its JSON text."""

PUBLISH_TIMEOUT_SECONDS = 60.0
_PLACEHOLDER_ID = "req-validate"


@dataclass(frozen=True)
class AttemptStatus:
    """One attempt of a request, as the ledger records it."""

    n: int
    location: str
    strategy: str  # "SPOT", or the fallback strategy
    state: str | None  # Vertex's job state as last seen, e.g. "JOB_STATE_RUNNING"
    preemptions: int
    job: str | None  # the CustomJob's resource name, once created
    outcome: str | None  # "succeeded", "requeued", "failed", ... once ended
    claimed_at: str
    ended_at: str | None


@dataclass(frozen=True)
class RequestStatus:
    """Where a request stands: `status` is CLAIMED, SUBMITTED, RUNNING, REQUEUED, SUCCEEDED,
    FAILED, GAVE_UP or CANCELLED; `record` is the whole ledger document."""

    request_id: str
    status: str
    attempts: tuple[AttemptStatus, ...]
    created_at: str
    updated_at: str
    finished_at: str | None
    record: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def done(self) -> bool:
        return self.status in {"SUCCEEDED", "FAILED", "GAVE_UP", "CANCELLED"}

    @property
    def preemptions(self) -> int:
        return sum(attempt.preemptions for attempt in self.attempts)


def validate(request: Request, *, request_id: str | None = None, settings: Settings | None = None) -> list[str]:
    """Every violation of `request` under the request policy, offline; [] when it is valid.

    `request_id` names a bare CustomJob body (an envelope carries its own); without one, a bare
    body is checked as if it had a valid id. `settings` default to the environment's."""
    return [str(violation) for violation in _check(request, request_id, settings)[1]]


def publish(
    request: Request,
    request_id: str | None = None,
    *,
    attributes: Mapping[str, str] | None = None,
    project: str | None = None,
    settings: Settings | None = None,
    timeout: float = PUBLISH_TIMEOUT_SECONDS,
) -> str:
    """Validate `request`, then publish it to job-requests; returns the Pub/Sub message id.

    A bare CustomJob body needs `request_id` (its idempotency key); an envelope's own id is used
    otherwise. Raises InvalidRequest, publishing nothing, when the request has any violation."""
    attributes = dict(attributes or {})
    if request_id is not None:
        attributes["request_id"] = request_id
    settings = settings or _settings()
    data = _encode(request)
    checked, violations = _check(data, request_id, settings, attributes=attributes)
    if violations:
        raise InvalidRequest(violations)
    if checked is not None and checked.shape == "bare" and "request_id" not in attributes:
        raise InvalidRequest([Violation("request_id", "a bare CustomJob body needs request_id=...")])
    from google.cloud import pubsub_v1

    topic = f"projects/{project or settings.project}/topics/{settings.job_requests_topic}"
    future = pubsub_v1.PublisherClient().publish(topic, data, **attributes)
    return str(future.result(timeout=timeout))


def status(request_id: str, *, project: str | None = None, settings: Settings | None = None) -> RequestStatus | None:
    """The request's status and attempts from the ledger; None when it has no record (not yet
    claimed, or rejected as invalid: its `invalid_request` alert says why)."""
    from google.cloud import storage

    from shared.ledger.store import LedgerStore

    settings = settings or _settings()
    client = storage.Client(project=project or settings.project)
    record = LedgerStore(client.bucket(settings.state_bucket)).get(request_id)
    if record is None:
        return None
    return RequestStatus(
        request_id=record.request_id,
        status=str(record.status),
        attempts=tuple(
            AttemptStatus(
                n=a.n,
                location=a.location,
                strategy=a.strategy,
                state=a.state,
                preemptions=a.preemptions,
                job=a.job,
                outcome=str(a.outcome) if a.outcome is not None else None,
                claimed_at=a.claimed_at,
                ended_at=a.ended_at,
            )
            for a in record.attempts
        ),
        created_at=record.created_at,
        updated_at=record.updated_at,
        finished_at=record.finished_at,
        record=record.to_json(),
    )


@dataclass(frozen=True)
class CancelOutcome:
    """What `cancel` did: `result` is "recorded" (cancelled now), "already_cancelled" (a no-op),
    "finished" (it ended before: nothing to cancel) or "unknown" (no such request); `cancel` is
    who cancelled it, when and why, as the ledger records it."""

    request_id: str
    result: str
    status: str | None
    cancel: dict[str, Any] | None = None


def cancel(
    request_id: str,
    *,
    reason: str | None = None,
    by: str | None = None,
    project: str | None = None,
    settings: Settings | None = None,
    ledger: LedgerStore | None = None,
) -> CancelOutcome:
    """Cancel a request: its intent is recorded in the ledger (once, under compare-and-swap), and
    from then on no attempt of it is created; its live job is cancelled by the functions, and it
    ends CANCELLED once Vertex reports that job ended (at once when none runs). Its checkpoints
    stay (`spotjobs resubmit` resumes from them). `by` defaults to the caller's account; `ledger`
    to the state bucket's, through Google Cloud (or the emulator).

    Needs the role on the state bucket's `requests/` prefix that Terraform grants `cancellers`."""
    from shared.clock import utcnow
    from shared.deciding.notices import telling_changes
    from shared.ledger.cancelling import cancel_request
    from shared.ledger.store import LedgerStore

    if ledger is None:
        from google.cloud import storage

        settings = settings or _settings()
        # As the functions' client (shared/adapters/clients.py): no bucket metadata read, which a
        # canceller is not granted (the ledger's records are all it may touch).
        os.environ.setdefault("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
        client = storage.Client(project=project or settings.project)
        ledger = LedgerStore(client.bucket(settings.state_bucket))
    who = by or caller_identity()
    # A request that ends at once (nothing of it runs) tells its `cancelled` notification in this
    # write; the functions publish it (reconcile, for every record with effects pending).
    swapped = ledger.swap(
        request_id,
        telling_changes(lambda current: cancel_request(current, by=who, reason=reason, now=utcnow()), utcnow),
    )
    record = swapped.value
    return CancelOutcome(
        request_id,
        str(swapped.decided),
        str(record.status) if record is not None else None,
        record.to_json()["cancel"] if record is not None and record.cancel is not None else None,
    )


def caller_identity() -> str:
    """Who is asking: the local user against the emulators; in the cloud, the account of the
    Application Default Credentials (a service account's email, or a user's from the token's
    tokeninfo, which names it when the token has the email scope:
    https://hexdocs.pm/google_api_o_auth2/api-reference.html, Tokeninfo)."""
    import getpass

    local = getpass.getuser()
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return local
    try:
        import google.auth
        from google.auth.transport.requests import AuthorizedSession, Request

        credentials, _ = google.auth.default()
        email = getattr(credentials, "service_account_email", None)
        if email and "@" in email:
            return str(email)
        credentials.refresh(Request())
        answer = AuthorizedSession(credentials).get(
            "https://oauth2.googleapis.com/tokeninfo", params={"access_token": credentials.token}, timeout=10
        )
        email = answer.json().get("email") if answer.ok else None
    except Exception:  # noqa: BLE001 - who asked is worth recording, not worth failing the cancel for
        email = None
    return str(email) if email else f"{local} (account unknown)"


def _settings() -> Settings:
    from shared.settings import get_settings

    return get_settings()


def _encode(request: Request) -> bytes:
    if isinstance(request, bytes):
        return request
    if isinstance(request, str):
        return request.encode()
    return json.dumps(request, separators=(",", ":")).encode()


def _check(
    request: Request,
    request_id: str | None,
    settings: Settings | None,
    *,
    attributes: Mapping[str, str] | None = None,
) -> tuple[Any, list[Violation]]:
    """(the request as read, or None; its violations)."""
    from shared.requests.envelope import InvalidJobRequest, read_request
    from shared.requests.policy import validate_request

    settings = settings or _settings()
    data = _encode(request)
    attributes = dict(attributes or {})
    if request_id is not None:
        attributes["request_id"] = request_id
    if "request_id" not in attributes:
        shape = read_request(data, attributes=attributes, max_bytes=settings.max_request_bytes)[0]
        if shape.shape == "bare":
            attributes["request_id"] = _PLACEHOLDER_ID
    try:
        checked = validate_request(data, attributes=attributes, settings=settings)
    except InvalidJobRequest as exc:
        return None, list(exc.violations)
    return checked, []
