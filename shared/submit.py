"""submit_job's logic: one job request message becomes exactly one CustomJob per attempt.

The order of operations is what makes it exactly-once under at-least-once delivery:

1. validate (an invalid request is acknowledged, logged at ERROR and alerted, never retried; an
   invalid re-queue also fails its request in the ledger, so reconcile stops resending it);
2. claim attempt n in the ledger (compare-and-swap), or find that it was already handled;
3. create the job (labelled with request id and attempt), index it, record it in the ledger.

A delivery that finds attempt n claimed but without a job either waits (the claim is younger than
the lease: another delivery is probably creating it right now, so raise and be redelivered later)
or takes the claim over and looks the job up by its labels before creating it. A create whose
response is lost is settled the same way: look up, never blindly create again. The claim holder
itself sends its create only while the create (its timeout and a margin) still fits in the lease,
so no create is in flight when a redelivery may take the claim over; should two jobs exist anyway,
the one the ledger does not record is cancelled.

Only invalid requests and settled outcomes (created, found, duplicate, refused by Vertex) are
acknowledged. Any other failure is redelivered (`SubmitBlocked` for permanent ones) so that the
dead-letter topic, not a silent acknowledgement, ends a request that cannot be handled.

The pure parts (`claim_attempt`, `record_job`, `fail_attempt`, `release_claim`) decide from the
current ledger record alone; `submit_request` is the shell that runs them and calls the clients
passed in through `SubmitDeps`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.alerts import Alert
from shared.attempts import plan_attempt
from shared.clock import iso, parse_iso, utcnow
from shared.delivery import Message
from shared.errors import TransientError, Violation, is_retryable
from shared.ledger import Attempt, JobIndexEntry, LedgerStore, RequestRecord, Status
from shared.log import Logger
from shared.policy import validate_request, warn_if_images_unrestricted
from shared.request import InvalidJobRequest, canonical_envelope
from shared.settings import Settings
from shared.vertex import (
    build_job_json,
    cancel_job,
    create_custom_job,
    find_attempt_job,
    may_have_created,
    parent_path,
    state_name,
    to_custom_job,
)

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import CustomJob, JobServiceClient


class Decision:
    """What a delivery did; the `event` of its decision log line says the same."""

    CREATED = "created"  # this delivery created the job
    FOUND = (
        "found"  # the job already existed (lost response or crashed delivery) and is now recorded
    )
    DUPLICATE = "duplicate"  # the attempt was already handled: nothing to do
    INVALID = "invalid"  # rejected: acknowledged, logged, alerted
    FAILED = "failed"  # Vertex refused the job permanently (e.g. INVALID_ARGUMENT): alerted


class ClaimInProgress(TransientError):
    """Another delivery holds a fresh claim on this attempt, a create's outcome is still unknown, or
    this delivery's claim is too old for a create to end inside its lease."""


class SubmitBlocked(TransientError):
    """Something other than the request itself failed for good (a ledger bucket that refuses us,
    credentials that cannot refresh, a bug). Redelivered, so the dead-letter topic, not a silent
    acknowledgement, ends it and an operator sees it; the cause is chained."""


@dataclass(frozen=True)
class SubmitDeps:
    """Everything submit needs from the outside world, passed in so tests can substitute it."""

    settings: Settings
    ledger: LedgerStore
    job_service: Callable[[str], JobServiceClient]  # location -> client
    publish_alert: Callable[[Alert], object]
    clock: Callable[[], datetime] = utcnow
    # Called with (request_id, attempt, job, log) after recording a job this delivery found rather
    # than created: its log events may have come while the job was not yet indexed and been
    # dropped, so the job's current state is handed to the decision logic once (as reconcile does).
    observe_found: Callable[[str, int, CustomJob, Logger], object] | None = None


@dataclass(frozen=True)
class SubmitOutcome:
    decision: str
    request_id: str | None = None
    attempt: int | None = None
    job: str | None = None


@dataclass(frozen=True)
class Claim:
    """The result of `claim_attempt`: what to do and the record to write (when kind says so)."""

    kind: str  # "claimed" | "taken_over" | "duplicate"
    record: RequestRecord
    attempt: Attempt | None

    @property
    def writes(self) -> bool:
        return self.kind != "duplicate"


# Pure transitions over the ledger record.


def claim_attempt(
    current: RequestRecord | None,
    *,
    envelope: dict[str, Any],
    n: int,
    now: datetime,
    lease_seconds: float,
    output_dir: str,
) -> Claim:
    """Decide what a delivery of attempt `n` does, from the current record alone.

    Raises ClaimInProgress when another delivery's fresh claim is pending, and InvalidJobRequest
    for an attempt the ledger does not expect (only the system sets `attempt`, on re-queue).
    """
    request_id = envelope["request_id"]
    if current is None:
        if n != 1:
            raise _unexpected_attempt(request_id, n, "the request has no record")
        location, strategy = plan_attempt(envelope, 1, None, after_stockout=False)
        attempt = Attempt(1, location, strategy, claimed_at=iso(now))
        record = RequestRecord(
            request_id,
            request=envelope,
            output_dir=output_dir,
            status=Status.CLAIMED,
            attempts=[attempt],
        )
        return Claim("claimed", record, attempt)
    existing = current.attempt(n)
    if existing is None:
        if n == 1 or current.is_terminal:
            return Claim("duplicate", current, current.latest)
        requeue = current.requeue
        if requeue is None or requeue.attempt != n:
            expected = (
                f"attempt {requeue.attempt} is queued" if requeue else "no re-queue is pending"
            )
            raise _unexpected_attempt(request_id, n, expected)
        attempt = Attempt(n, requeue.location, requeue.strategy, claimed_at=iso(now))
        current.attempts.append(attempt)
        current.requeue = None
        current.status = Status.CLAIMED
        return Claim("claimed", current, attempt)
    if existing.job or existing.outcome or current.is_terminal:
        return Claim("duplicate", current, existing)
    age = (now - parse_iso(existing.claimed_at)).total_seconds()
    if age < lease_seconds:
        raise ClaimInProgress(
            f"attempt {n} of {request_id} was claimed {age:.0f}s ago and has no job yet; "
            f"re-checking after the {lease_seconds:.0f}s lease"
        )
    existing.claimed_at = iso(now)
    return Claim("taken_over", current, existing)


def record_job(
    current: RequestRecord | None, *, n: int, job_name: str, state: str, created_at: str
) -> RequestRecord | None:
    """Record attempt n's job (once); None when there is nothing to write."""
    attempt = current.attempt(n) if current else None
    if current is None or attempt is None or attempt.job is not None:
        return None
    attempt.job = job_name
    attempt.created_at = created_at
    attempt.state = attempt.state or state
    if current.status == Status.CLAIMED and current.latest is attempt:
        current.status = Status.SUBMITTED
    return current


def fail_attempt(
    current: RequestRecord | None, *, n: int, error: dict[str, Any], now: datetime
) -> RequestRecord | None:
    """Vertex refused attempt n for good: the request FAILED, with its alert marked as sent."""
    attempt = current.attempt(n) if current else None
    if current is None or attempt is None or attempt.job is not None or attempt.outcome:
        return None
    attempt.outcome = "failed"
    attempt.error = error
    attempt.ended_at = iso(now)
    current.status = Status.FAILED
    current.finished_at = iso(now)
    key = submit_failed_alert_key(n)
    if key not in current.markers:
        current.markers.append(key)
    return current


def release_claim(
    current: RequestRecord | None, *, n: int, claimed_at: str, now: datetime, lease_seconds: float
) -> RequestRecord | None:
    """Vertex refused the create before doing anything: backdate our claim by one lease so the
    redelivery may take it over at once instead of waiting the lease out. Only our own claim."""
    attempt = current.attempt(n) if current else None
    if (
        current is None
        or attempt is None
        or attempt.job is not None
        or attempt.claimed_at != claimed_at
    ):
        return None
    attempt.claimed_at = iso(now - timedelta(seconds=lease_seconds))
    return current


def fail_invalid_requeue(
    current: RequestRecord | None, *, n: int, now: datetime
) -> RequestRecord | None:
    """Re-queued attempt n was rejected by validation (the policy changed since attempt 1): the
    request FAILED, its re-queue dropped so reconcile stops resending it, its alert marked sent."""
    if current is None or current.is_terminal:
        return None
    requeue = current.requeue
    if requeue is None or requeue.attempt != n:
        return None
    current.requeue = None
    current.status = Status.FAILED
    current.finished_at = iso(now)
    current.markers.append(invalid_request_alert_key(n))
    return current


def submit_failed_alert_key(n: int) -> str:
    return f"submit_failed:{n}"


def invalid_request_alert_key(n: int) -> str:
    return f"invalid_request:{n}"


# The shell.


def submit_request(message: Message, log: Logger, deps: SubmitDeps) -> SubmitOutcome:
    """Handle one job-request message. Returns to acknowledge; raises (transient) to be redelivered."""
    settings = deps.settings
    with redelivered_unless_settled(log):
        warn_if_images_unrestricted(settings, log)
        try:
            request = validate_request(
                message.data,
                message_id=message.message_id,
                attributes=message.attributes,
                settings=settings,
            )
        except InvalidJobRequest as exc:
            return _reject(exc, message, log, deps)
    n = request.attempt or 1
    log = log.bind(request_id=request.request_id, attempt=n)
    with redelivered_unless_settled(log):
        envelope = canonical_envelope(
            request,
            default_location=settings.location,
            default_max_attempts=settings.default_max_attempts,
        )
        try:
            claim = _claim(envelope, n, log, deps)
        except InvalidJobRequest as exc:
            return _reject(exc, message, log, deps)
        if claim.kind == "duplicate":
            job = claim.attempt.job if claim.attempt else None
            same_body = claim.record.request == envelope
            # The same request id with other content is a publisher mistake worth seeing.
            log.log(
                "INFO" if same_body else "WARNING",
                "duplicate delivery: this attempt was already handled; nothing created",
                event="duplicate",
                job=job,
                status=claim.record.status,
                same_body=same_body,
            )
            return SubmitOutcome(Decision.DUPLICATE, request.request_id, n, job)
        assert claim.attempt is not None  # a claim that writes always names its attempt
        return _ensure_job(claim.record, claim.attempt, claim.kind == "taken_over", log, deps)


@contextmanager
def redelivered_unless_settled(log: Logger) -> Iterator[None]:
    """Turn a permanent failure that is not the request's fault into a redelivery.

    Returning acknowledges; the shell in shared.delivery also acknowledges non-retryable errors, so
    a refusing state bucket, credentials that cannot refresh or a bug would lose the request with
    no ledger record and no alert. Redelivered instead, it ends on the dead-letter topic."""
    try:
        yield
    except Exception as exc:
        if is_retryable(exc):
            raise
        log.error(
            "could not handle the job request; it is redelivered until it dead-letters",
            event="submit_blocked",
            error=f"{type(exc).__name__}: {exc}",
        )
        raise SubmitBlocked(f"{type(exc).__name__}: {exc}") from exc


def _claim(envelope: dict[str, Any], n: int, log: Logger, deps: SubmitDeps) -> Claim:
    request_id = envelope["request_id"]
    decided: list[Claim] = []

    def transition(current: RequestRecord | None) -> RequestRecord | None:
        claim = claim_attempt(
            current,
            envelope=envelope,
            n=n,
            now=deps.clock(),
            lease_seconds=deps.settings.claim_lease_seconds,
            output_dir=deps.settings.output_dir_for(request_id),
        )
        decided.append(claim)
        return claim.record if claim.writes else None

    try:
        deps.ledger.update(request_id, transition)
    except ClaimInProgress as exc:
        log.info(
            "attempt is being created by another delivery; retry later",
            event="claim_in_progress",
            reason=str(exc),
        )
        raise
    claim = decided[-1]  # the run whose outcome was written (or found nothing to write)
    if claim.kind == "taken_over":
        log.warning(
            "took over a stale claim; looking for its job before creating", event="claim_taken_over"
        )
    return claim


def _ensure_job(
    record: RequestRecord, attempt: Attempt, taken_over: bool, log: Logger, deps: SubmitDeps
) -> SubmitOutcome:
    settings = deps.settings
    request_id, n = record.request_id, attempt.n
    log = log.bind(location=attempt.location, strategy=attempt.strategy)
    client = deps.job_service(attempt.location)
    parent = parent_path(settings.project, attempt.location)
    if taken_over:
        found = find_attempt_job(client, parent, request_id, n)
        if found is not None:
            return _record_created(record, attempt, found, Decision.FOUND, client, log, deps)
    job_json = build_job_json(
        record.request["custom_job"],
        request_id=request_id,
        attempt=n,
        strategy=attempt.strategy,
        output_dir=record.output_dir,
        service_account=settings.training_service_account,
    )
    custom_job = to_custom_job(job_json)
    _check_claim_covers_create(attempt, log, deps)
    try:
        job = create_custom_job(client, parent, custom_job, timeout=settings.create_timeout_seconds)
    except Exception as exc:
        return _after_failed_create(exc, record, attempt, client, parent, log, deps)
    return _record_created(record, attempt, job, Decision.CREATED, client, log, deps)


def _check_claim_covers_create(attempt: Attempt, log: Logger, deps: SubmitDeps) -> None:
    """Raise ClaimInProgress unless the create, sent now, ends before the claim's lease does.

    The lease only bounds how long other deliveries wait. Slow ledger writes, a cold client build or
    the takeover lookup can eat it; a create still in flight when a redelivery takes the claim over
    and finds no job yet would become a second job for the attempt."""
    held_for = (deps.clock() - parse_iso(attempt.claimed_at)).total_seconds()
    deadline = deps.settings.create_deadline_seconds
    if held_for < deadline:
        return
    log.warning(
        "the claim is too old to create within its lease; a redelivery takes it over",
        event="claim_expiring",
        held_seconds=round(held_for, 1),
        deadline_seconds=deadline,
    )
    raise ClaimInProgress(
        f"attempt {attempt.n} was claimed {held_for:.0f}s ago; a create must be sent within "
        f"{deadline:.0f}s of the claim to end inside its lease"
    )


def _after_failed_create(
    exc: Exception,
    record: RequestRecord,
    attempt: Attempt,
    client: JobServiceClient,
    parent: str,
    log: Logger,
    deps: SubmitDeps,
) -> SubmitOutcome:
    from google.api_core.exceptions import GoogleAPICallError

    request_id, n = record.request_id, attempt.n
    error = f"{type(exc).__name__}: {exc}"
    if may_have_created(exc):
        found = find_attempt_job(client, parent, request_id, n)
        if found is not None:
            return _record_created(record, attempt, found, Decision.FOUND, client, log, deps)
        # Keep the claim: the create may still land. The redelivery after the lease looks again.
        log.warning(
            "create outcome unknown and no job found yet; will look again",
            event="create_unknown",
            error=error,
        )
        raise ClaimInProgress(
            f"create of attempt {n} of {request_id} has an unknown outcome"
        ) from exc
    if is_retryable(exc):
        deps.ledger.update(
            request_id,
            lambda current: release_claim(
                current,
                n=n,
                claimed_at=attempt.claimed_at,
                now=deps.clock(),
                lease_seconds=deps.settings.claim_lease_seconds,
            ),
        )
        log.warning(
            "Vertex refused the create for now; released the claim for the redelivery",
            event="create_refused",
            error=error,
        )
        raise exc
    if not isinstance(exc, GoogleAPICallError):
        # A bug, not a verdict on the request: keep the claim, and let submit_request have the
        # message redelivered (SubmitBlocked) until it dead-letters.
        raise exc
    return _fail(record, attempt, exc, log, deps)


def _fail(
    record: RequestRecord, attempt: Attempt, exc: Exception, log: Logger, deps: SubmitDeps
) -> SubmitOutcome:
    request_id, n = record.request_id, attempt.n
    code = getattr(exc, "code", None)
    error = {
        "code": int(code) if code is not None else None,
        "message": str(getattr(exc, "message", exc)),
    }
    wrote: list[bool] = []

    def transition(current: RequestRecord | None) -> RequestRecord | None:
        failed = fail_attempt(current, n=n, error=error, now=deps.clock())
        wrote.append(failed is not None)
        return failed

    deps.ledger.update(request_id, transition)
    if not wrote[-1]:
        # Another delivery settled the attempt first (recorded a job, or failed it and alerted).
        log.warning(
            "Vertex AI refused the job, but the attempt was already settled; nothing recorded",
            event="refusal_ignored",
            error=error,
        )
        return SubmitOutcome(Decision.DUPLICATE, request_id, n)
    log.error("Vertex AI refused the job; the request failed", event="submit_failed", error=error)
    deps.publish_alert(  # only the delivery that marked the alert as sent publishes it
        Alert(
            kind="submit_failed",
            severity="ERROR",
            message=f"Vertex AI refused to create attempt {n} of request {request_id}: {error['message']}",
            request_id=request_id,
            attempt=n,
            details={
                "error": error,
                "location": attempt.location,
                "strategy": attempt.strategy,
            },
        )
    )
    return SubmitOutcome(Decision.FAILED, request_id, n)


def _record_created(
    record: RequestRecord,
    attempt: Attempt,
    job: CustomJob,
    decision: str,
    client: JobServiceClient,
    log: Logger,
    deps: SubmitDeps,
) -> SubmitOutcome:
    request_id, n = record.request_id, attempt.n
    deps.ledger.index_job(JobIndexEntry(request_id, n, attempt.location, job.name))
    state = state_name(job.state)
    created_at = iso(job.create_time) if job.create_time else iso(deps.clock())
    stored = deps.ledger.update(
        request_id,
        lambda current: record_job(
            current, n=n, job_name=job.name, state=state, created_at=created_at
        ),
    )
    recorded = stored.attempt(n) if stored else None
    if recorded is not None and recorded.job not in (None, job.name):
        # Two jobs for one attempt would mean the claim protocol failed; say so loudly.
        log.error(
            "attempt already records a different job",
            event="duplicate_job",
            job=job.name,
            recorded_job=recorded.job,
        )
        _cancel_unrecorded(client, job.name, log)
        return SubmitOutcome(Decision.DUPLICATE, request_id, n, recorded.job)
    event = "job_created" if decision == Decision.CREATED else "job_found"
    message = (
        "created the Spot CustomJob"
        if decision == Decision.CREATED
        else "found the job an earlier delivery created"
    )
    log.info(message, event=event, job=job.name, state=state)
    if decision == Decision.FOUND and deps.observe_found is not None:
        deps.observe_found(request_id, n, job, log)
    return SubmitOutcome(decision, request_id, n, job.name)


def _cancel_unrecorded(client: JobServiceClient, job_name: str, log: Logger) -> None:
    """Cancel a second job of an attempt: unrecorded, nothing would manage it, and it would train
    into the same checkpoint directory as the recorded one. Best effort: an operator has the log."""
    try:
        cancel_job(client, job_name)
    except Exception as exc:
        log.error(
            "could not cancel the job the ledger does not record; cancel it by hand",
            event="duplicate_job_cancel_failed",
            job=job_name,
            error=f"{type(exc).__name__}: {exc}",
        )
        return
    log.warning(
        "cancelled the job the ledger does not record",
        event="duplicate_job_cancelled",
        job=job_name,
    )


def _reject(
    exc: InvalidJobRequest, message: Message, log: Logger, deps: SubmitDeps
) -> SubmitOutcome:
    violations = [str(v) for v in exc.violations]
    log.error(
        "rejected an invalid job request",
        event="invalid_request",
        request_id=exc.request_id,
        attempt=exc.attempt,
        violations=violations,
    )
    if not _fail_rejected_requeue(exc, deps):
        return SubmitOutcome(Decision.INVALID, exc.request_id, exc.attempt)  # alerted already
    deps.publish_alert(
        Alert(
            kind="invalid_request",
            severity="ERROR",
            message=f"Job request {exc.request_id or '(unnamed)'} rejected: "
            + "; ".join(violations),
            request_id=exc.request_id,
            attempt=exc.attempt,
            details={"violations": violations, "message_id": message.message_id},
        )
    )
    return SubmitOutcome(Decision.INVALID, exc.request_id, exc.attempt)


def _fail_rejected_requeue(exc: InvalidJobRequest, deps: SubmitDeps) -> bool:
    """Whether to alert. A rejected re-queue the ledger has pending fails its request (else
    reconcile would resend it, to be rejected and alerted again, forever); its alert goes out once."""
    request_id, n = exc.request_id, exc.attempt
    if request_id is None or n is None or n == 1:
        return True
    wrote: list[bool] = []

    def transition(current: RequestRecord | None) -> RequestRecord | None:
        failed = fail_invalid_requeue(current, n=n, now=deps.clock())
        wrote.append(failed is not None)
        return failed

    stored = deps.ledger.update(request_id, transition)
    already_alerted = stored is not None and invalid_request_alert_key(n) in stored.markers
    return wrote[-1] or not already_alerted


def _unexpected_attempt(request_id: str, n: int, why: str) -> InvalidJobRequest:
    return InvalidJobRequest(
        [
            Violation(
                "attempt",
                f"is {n} but the ledger does not expect it ({why}); attempt is set by the system",
            )
        ],
        request_id=request_id,
        attempt=n,
    )
