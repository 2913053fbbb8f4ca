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

Only invalid requests and settled outcomes (created, found, duplicate, refused by Vertex; refused
for a resource quota, which reconcile re-publishes with backoff) are acknowledged. Any other failure
is redelivered (`SubmitBlocked` for permanent ones) so that the dead-letter topic, not a silent
acknowledgement, ends a request that cannot be handled.

The ledger transitions (`shared.ledger.claims`) decide from the current record alone; `submit_request`
is the shell that runs them and calls the clients passed in through `Ports`. Alerts go through the
outbox like every other function's: written pending with the decision, published after.
What a delivery does besides creating a job is `shared.redeliveries`', and its look for a record
that was lost `shared.deleted_records`'.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from shared.adapters.vertex import attempt_custom_job, create_custom_job, may_have_created, parent_path
from shared.alerts import AlertKind
from shared.attempt_lookup import find_claim_job
from shared.create_lease import create_timeout, note_create_sent, wait_for_the_list
from shared.deciding.notices import publish_notices, telling_changes
from shared.deciding.outbox import Mine, alert_corrupt_record, alerts_of, flush
from shared.deleted_records import look_before_claiming
from shared.delivery import Message
from shared.errors import TransientError, is_retryable
from shared.fleet.capacity import place_attempt, refusing
from shared.fleet.placing import attempt_placer
from shared.found_jobs import adopt_job, observe_adopted
from shared.job_locations import remember_location
from shared.jobs import state_name
from shared.kept_lines import count_kept_preemptions
from shared.ledger.claims import Claim, ClaimInProgress, claim_attempt, fail_attempt, release_claim
from shared.ledger.dedupe import bare_request_id
from shared.ledger.records import Attempt, CorruptRecord, RequestRecord
from shared.ledger.run_lock import ledger_bucket
from shared.log import Logger
from shared.paced_submit import (
    WAITING_RESULT,
    SubmitSteps,
    left_to_reconcile,
    may_create_now,
    never_sent,
    stay_out_of_line,
    turned_away,
    wait_in_line,
    waits_for,
)
from shared.redeliveries import publish_what_is_pending, refuse_reserved_id, reject, settle_taken_id
from shared.requests.capacity import job_on_machine
from shared.requests.envelope import InvalidJobRequest, JobRequest, canonical_envelope
from shared.requests.job_policy import training_account_for
from shared.requests.policy import check_attempt_job, validate_request, warn_if_images_unrestricted
from shared.requests.request_ids import content_request_id
from shared.swap import Decided
from shared.wiring import Ports

if TYPE_CHECKING:
    from datetime import datetime

    from google.cloud.aiplatform_v1 import CustomJob, JobServiceClient


class SubmitResult(enum.StrEnum):
    """What a delivery did; the `event` of its decision log line says the same."""

    CREATED = "created"  # this delivery created the job
    FOUND = "found"  # the job already existed (lost response or crashed delivery), now recorded
    DUPLICATE = "duplicate"  # the attempt was already handled: nothing to do
    INVALID = "invalid"  # rejected: acknowledged, logged, alerted
    FAILED = "failed"  # Vertex refused the job permanently (e.g. INVALID_ARGUMENT): alerted
    WAITING = WAITING_RESULT  # in line for Vertex's submission quota (shared/pacing.py), or for a re-publish


class SubmitBlocked(TransientError):
    """Something other than the request itself failed for good (a ledger bucket that refuses us,
    credentials that cannot refresh, a bug). Redelivered, so the dead-letter topic, not a silent
    acknowledgement, ends it and an operator sees it; the cause is chained."""


@dataclass(frozen=True)
class SubmitOutcome:
    result: SubmitResult
    request_id: str | None = None
    attempt: int | None = None
    job: str | None = None


# The shell.


def submit_request(message: Message, log: Logger, ports: Ports) -> SubmitOutcome:
    """Handle one job-request message. Returns to acknowledge; raises (transient) to be redelivered."""
    ports = replace(ports, started_at=ports.clock().timestamp())  # the drainer's run counts from here
    settings = ports.settings
    with redelivered_unless_settled(log):
        warn_if_images_unrestricted(settings, log)
        try:
            request = validate_request(
                message.data,
                attributes=message.attributes,
                settings=settings,
                published_at=message.publish_time,
            )
            refuse_reserved_id(request, message.data, ports)
        except InvalidJobRequest as exc:
            reject(exc, message, log, ports)
            return SubmitOutcome(SubmitResult.INVALID, exc.request_id, exc.attempt)
        request = _named_by_content(request, ports)
    n = request.attempt or 1
    log = log.bind(request_id=request.request_id, attempt=n)
    with redelivered_unless_settled(log):
        envelope = canonical_envelope(
            request,
            default_location=settings.location,
            default_max_attempts=settings.default_max_attempts,
        )
        if n == 1 and look_before_claiming(message, envelope, log, ports):
            return SubmitOutcome(SubmitResult.DUPLICATE, request.request_id, n)
        try:
            claim = _claim(envelope, n, log, ports, requeued=request.attempt is not None, sent=message.publish_time)
        except InvalidJobRequest as exc:
            reject(exc, message, log, ports)
            return SubmitOutcome(SubmitResult.INVALID, exc.request_id, exc.attempt)
        except CorruptRecord as exc:
            alert_corrupt_record(ports, exc, log)
            raise  # redelivered until the document is repaired: the request is not lost
        if claim.kind == "cancelled":
            log.info(
                "the request was cancelled; nothing created",
                event="cancelled_request",
                status=claim.record.status,
                cancelled_by=claim.record.cancel.by if claim.record.cancel else None,
            )
            settle_taken_id(claim.record, envelope, request, log, ports)
            return SubmitOutcome(SubmitResult.DUPLICATE, request.request_id, n)
        if claim.kind in ("duplicate", "superseded"):  # superseded: re-published since (`claims.superseded`)
            job = claim.attempt.job if claim.attempt else None
            same_body = claim.record.request == envelope
            # The same request id with other content is a publisher mistake worth seeing.
            log.log(
                "INFO" if same_body else "WARNING",
                "duplicate delivery: this attempt was already handled or re-published since; nothing created",
                event=claim.kind,
                job=job,
                status=claim.record.status,
                same_body=same_body,
            )
            count_kept_preemptions(ports, request.request_id, claim.attempt.n if claim.attempt else n, job, log)
            settle_taken_id(claim.record, envelope, request, log, ports)
            return SubmitOutcome(SubmitResult.DUPLICATE, request.request_id, n, job)
        assert claim.attempt is not None  # a claim that writes always names its attempt
        return _ensure_job(claim.record, claim.attempt, claim.kind == "taken_over", log, ports)


def _named_by_content(request: JobRequest, ports: Ports) -> JobRequest:
    """A bare body without an id gets the id of its content's dedupe window (one compare-and-swap
    document per content, so concurrent deliveries agree); any other request keeps its id."""
    if request.content_digest is None or request.moment is None:
        return request
    digest = request.content_digest
    request_id = bare_request_id(
        ledger_bucket(ports.ledger),
        digest,
        request.moment,
        ports.settings.bare_dedupe_seconds,
        lambda opened: content_request_id(digest, opened),
    )
    return replace(request, request_id=request_id)


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


def _claim(
    envelope: dict[str, Any], n: int, log: Logger, ports: Ports, *, requeued: bool, sent: datetime | None = None
) -> Claim:
    """Claim attempt n for a message published at `sent` (None: the line's drainer, no message)."""
    request_id = envelope["request_id"]
    placer = attempt_placer(ports)

    def transition(current: RequestRecord | None) -> Decided[RequestRecord]:
        replaced = current.attempt(n - 1) if current else None
        cancelled = current is not None and current.cancel is not None  # claim_attempt says so
        if replaced is not None and replaced.ending and not cancelled:  # however it came: never two at once
            raise ClaimInProgress(f"attempt {n} waits for the job of attempt {n - 1} to end (it was cancelled)")
        claim = claim_attempt(
            current,
            envelope=envelope,
            n=n,
            now=ports.clock(),
            lease_seconds=ports.settings.claim_lease_seconds,
            output_dir=ports.settings.output_dir_for(request_id),
            requeued=requeued,
            published_at=sent,
        )
        if claim.kind == "claimed" and claim.attempt is not None:  # a new attempt: where it runs
            refuses = refusing(ports.settings, claim.record.spot_attempts_before(n))
            place_attempt(placer, claim.record, claim.attempt, refuses, ports.clock())
        return Decided(claim.record if claim.writes else None, claim)

    try:
        swapped = ports.ledger.swap(request_id, telling_changes(transition, ports.clock))
    except ClaimInProgress as exc:
        log.info(
            "attempt cannot be claimed yet; retry later",
            event="claim_in_progress",
            reason=str(exc),
        )
        raise
    claim: Claim = swapped.decided  # the run whose outcome was written (or found nothing to write)
    if swapped.wrote and swapped.value is not None and swapped.value.pending_notices:
        publish_notices(ports, swapped.value, log)  # `accepted`, before the create
    if claim.kind == "taken_over" and not never_sent(claim.attempt):  # a waiting attempt's turn is no news
        log.warning("took over a stale claim; looking for its job before creating", event="claim_taken_over")
    return claim


def _ensure_job(
    record: RequestRecord, attempt: Attempt, taken_over: bool, log: Logger, ports: Ports, *, paced: bool = False
) -> SubmitOutcome:
    settings = ports.settings
    request_id, n = record.request_id, attempt.n
    log = log.bind(location=attempt.location, strategy=attempt.strategy)
    client = ports.job_service(attempt.location)
    parent = parent_path(settings.project, attempt.location)
    if taken_over and not never_sent(attempt):
        found = find_claim_job(ports, record, attempt, client, parent, log)
        if found is not None:
            return _record_created(record, attempt, found, SubmitResult.FOUND, log, ports)
        wait_for_the_list(attempt, log, ports)
    # On the machine its capacity alternative names (shared/fleet/capacity.py), else as submitted.
    custom_job = record.request["custom_job"]
    custom_job = job_on_machine(custom_job, attempt.machine) if attempt.machine else custom_job
    violations = check_attempt_job(
        custom_job,
        request_id=request_id,
        strategy=attempt.strategy,
        location=attempt.location,
        spot_attempts_before=record.spot_attempts_before(n),
        settings=settings,
    )
    if violations:  # whichever path planned it: nothing the deployment refuses is created
        error = {"code": None, "message": "the deployment's policy refuses it: " + "; ".join(map(str, violations))}
        why = f"spotjobs did not create attempt {n} ({attempt.strategy} in {attempt.location})"
        return _refused(record, attempt, error, why, log, ports)
    if not paced and turned_away(ports, record, attempt):
        stay_out_of_line(record, attempt, log, ports, SUBMIT_STEPS)
        return SubmitOutcome(SubmitResult.WAITING, request_id, n)
    if not paced and not may_create_now(ports, attempt.location):  # paced: the drainer holds a slot
        return _wait_in_line(record, attempt, log, ports, paced=False)
    timeout = create_timeout(attempt, log, ports)  # refuses a claim too old to send at all
    remember_location(ports, attempt.location)  # the stray sweep lists it from now on
    note_create_sent(record, attempt, log, ports)
    try:
        job = attempt_custom_job(
            custom_job,
            request_id=request_id,
            attempt=n,
            strategy=attempt.strategy,
            output_dir=record.output_dir,
            deployment=settings.deployment_label,
            commit_markers=settings.commit_markers,
            service_account=training_account_for(settings, request_id),
            kit_key=attempt.kit_key,
        )
        created = create_custom_job(client, parent, job, timeout=timeout)
    except Exception as exc:
        return _after_failed_create(exc, record, attempt, client, parent, log, ports, paced=paced)
    return _record_created(record, attempt, created, SubmitResult.CREATED, log, ports)


def _wait_in_line(record: RequestRecord, attempt: Attempt, log: Logger, ports: Ports, *, paced: bool) -> SubmitOutcome:
    already = wait_in_line(record, attempt, log, ports, SUBMIT_STEPS, paced=paced)
    result = SubmitResult.DUPLICATE if already and not paced else SubmitResult.WAITING
    return SubmitOutcome(result, record.request_id, attempt.n)


def _after_failed_create(
    exc: Exception,
    record: RequestRecord,
    attempt: Attempt,
    client: JobServiceClient,
    parent: str,
    log: Logger,
    ports: Ports,
    *,
    paced: bool,
) -> SubmitOutcome:
    from google.api_core.exceptions import GoogleAPICallError

    request_id, n = record.request_id, attempt.n
    error = f"{type(exc).__name__}: {exc}"
    if waits_for(exc, ports):  # the rate, not the request (a verdict: nothing was created)
        return _wait_in_line(record, attempt, log, ports, paced=paced)
    if may_have_created(exc):
        found = find_claim_job(ports, record, attempt, client, parent, log)
        if found is not None:
            return _record_created(record, attempt, found, SubmitResult.FOUND, log, ports)
        # Keep the claim: the create may still land. The redelivery after the lease looks again.
        log.warning(
            "create outcome unknown and no job found yet; will look again",
            event="create_unknown",
            error=error,
        )
        raise ClaimInProgress(f"create of attempt {n} of {request_id} has an unknown outcome") from exc
    if is_retryable(exc):
        code = getattr(exc, "code", None)
        ports.ledger.update(
            request_id,
            lambda current: release_claim(
                current,
                n=n,
                claimed_at=attempt.claimed_at,
                now=ports.clock(),
                lease_seconds=ports.settings.claim_lease_seconds,
                error={"code": int(code) if code is not None else None, "message": error},
            ),
        )
        to_reconcile = left_to_reconcile(exc, paced=paced)  # acknowledged: reconcile re-publishes it
        log.warning(
            "Vertex refused the create for a resource quota; reconcile re-publishes it with backoff"
            if to_reconcile
            else "Vertex refused the create for now; released the claim for the redelivery",
            event="create_refused",
            error=error,
        )
        if to_reconcile:
            return SubmitOutcome(SubmitResult.WAITING, request_id, n)
        raise exc
    if not isinstance(exc, GoogleAPICallError):
        # A bug, not a verdict on the request: keep the claim, and let submit_request have the
        # message redelivered (SubmitBlocked) until it dead-letters.
        raise exc
    code = getattr(exc, "code", None)
    error = {"code": int(code) if code is not None else None, "message": str(getattr(exc, "message", exc))}
    return _refused(record, attempt, error, f"Vertex AI refused to create attempt {n}", log, ports)


def _refused(
    record: RequestRecord, attempt: Attempt, error: dict[str, Any], why: str, log: Logger, ports: Ports
) -> SubmitOutcome:
    """Attempt n is not created (`why`: who refused it): the request fails with one alert."""
    request_id, n = record.request_id, attempt.n
    reason = f"{why}: {error['message']}"
    swapped = ports.ledger.swap(
        request_id,
        telling_changes(
            lambda current: fail_attempt(
                current,
                n=n,
                error=error,
                now=ports.clock(),
                reason=reason,
                strategy=attempt.strategy,
            ),
            ports.clock,
        ),
    )
    stored = swapped.value
    if not swapped.wrote or stored is None:
        # Another delivery settled the attempt first (recorded a job, or failed it and alerted).
        log.warning(
            "the job was not created, but the attempt was already settled; nothing recorded",
            event="refusal_ignored",
            error=error,
        )
        publish_what_is_pending(stored, log, ports)
        recorded = stored.attempt(n) if stored else None
        return SubmitOutcome(SubmitResult.DUPLICATE, request_id, n, recorded.job if recorded else None)
    log.error(f"{reason}; the request failed", event="submit_failed", error=error)
    flush(ports, stored, log, mine=Mine.EFFECTS, own_alerts=alerts_of(stored, AlertKind.SUBMIT_FAILED, n))
    return SubmitOutcome(SubmitResult.FAILED, request_id, n)


def _record_created(
    record: RequestRecord,
    attempt: Attempt,
    job: CustomJob,
    result: SubmitResult,
    log: Logger,
    ports: Ports,
) -> SubmitOutcome:
    request_id, n = record.request_id, attempt.n
    adoption = adopt_job(ports, request_id, n, attempt.location, job, log)
    if not adoption.adopted:
        return SubmitOutcome(SubmitResult.DUPLICATE, request_id, n, adoption.job)
    state = state_name(job.state)
    if result == SubmitResult.CREATED:
        log.info("created the Spot CustomJob", event="job_created", job=job.name, state=state)
    else:
        log.info("found the job an earlier delivery created", event="job_found", job=job.name, state=state)
        # Its log events may have come while it was not yet indexed and been dropped: decide on
        # its current state once, as reconcile would. What this function may not publish (a
        # re-queue, a prune request) stays pending for on_job_event and reconcile.
        observe_adopted(ports, request_id, adoption, n, log)
    return SubmitOutcome(result, request_id, n, job.name)


# What the drainer runs for a waiting attempt. Its claim is never a new request's (an attempt waits
# in line only once its record has it): a record deleted since the drainer read it is not written
# anew with a job created for it, as for a replayed message (simulator seed 1771).
SUBMIT_STEPS = SubmitSteps(partial(_claim, requeued=True), _ensure_job)
