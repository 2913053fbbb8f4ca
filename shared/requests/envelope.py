"""The job request envelope: its two accepted shapes, how a message is read, the canonical form.

A message on `job-requests` is either

- an **envelope** `{"request_id", "custom_job", "location"?, "locations"?, "max_attempts"?,
  "fallback"?, "capacity"?, "checkpoints"?, "deadline"?, "total_steps"?, "expected_step_seconds"?,
  "changeover_seconds"?, "priority"?, "max_cost_usd"?, "max_runtime"?, "notify"?, "schema_version"?, "attempt"?}`, or
- a **bare CustomJob body**, exactly what the Vertex AI REST docs POST to `customJobs`. Its request
  id is the `request_id` message attribute, else derived from its content and the dedupe window
  its moment (`schedule_time`, else the original publish time a redrive carries, else the publish
  time) falls in: a redelivery, a redrive, a publisher's retry or a scheduler's double fire maps
  to the same request and is de-duplicated. Reading names the window opening at that moment
  (`shared.requests.request_ids.derived_request_id`); submit_job places it among the content's windows
  (`shared.ledger.dedupe`), kept exactly once by compare-and-swap.

The CustomJob part is checked against the aiplatform_v1 schema by `shared.requests.job_schema`. Reading
never judges what a deployment allows: `shared.requests.policy.validate_request` reads with this module,
then checks its policy on the result (read, then check; nothing here calls back into policy).

System fields (`attempt`) are read only from the system's own re-queue messages, those carrying
the message attribute `spotjobs_origin: requeue` (`REQUEUE_ATTRIBUTES`); from anyone else they are
a violation naming the field. The attribute marks, it does not prove: anyone who may publish can
set it, so submit honours a re-queued attempt only when the ledger says that attempt is due, and
a request's `attempt` is set (never None) exactly when it came marked as a re-queue.

`canonical_envelope` is the contract with the events function: the normalized request stored in
the ledger and re-published, with `attempt` and `location` added, on re-queue. The re-queue
message is written here too (`requeue_message`, its body and attributes), next to its reader, so
its wire format is one module's: every envelope key (the deadline's among them) is named
(`ENVELOPE_FIELDS`), read, canonicalised and re-published here, and a key added in one of those
places and not the others would be lost on re-queue. How each optional field's value is read and
bounded is `shared.requests.envelope_options`; the request id's rule, `shared.requests.request_ids`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.clock import (
    PUBLISHER_TIME_EARLIEST,
    PUBLISHER_TIME_LATEST,
    iso,
    parse_rfc3339,
    utcnow,
    within_publish_range,
)
from shared.errors import InvalidRequest, Violation
from shared.requests.capacity import Alternative, read_capacity
from shared.requests.envelope_options import (
    Deadline,
    Fallback,
    read_deadline,
    read_fallback,
    read_int,
    read_keep_last,
    read_location,
    read_locations,
    read_max_cost,
    read_max_runtime,
    read_notify,
    read_priority,
)
from shared.requests.job_schema import BODY, field_path, json_type, read_custom_job
from shared.requests.request_ids import content_digest, derived_request_id, is_valid_request_id, read_request_id

ENVELOPE_SCHEMA_VERSION = 1
# A trigger request's manifest, in the state bucket: on_trigger writes it, the training account
# may only read it (terraform/iam.tf), so no job can plant or overwrite one (docs/security.md).
# Removed with its request's record (shared/ledger/retention.py).
MANIFESTS_PREFIX = "manifests/"


def manifest_path(request_id: str) -> str:
    return f"{MANIFESTS_PREFIX}{request_id}.json"


ENVELOPE_FIELDS = (
    "schema_version",
    "request_id",
    "custom_job",
    "location",
    "locations",
    "max_attempts",
    "fallback",
    "capacity",
    "checkpoints",
    "deadline",
    "total_steps",
    "expected_step_seconds",
    "changeover_seconds",
    "priority",
    "max_cost_usd",
    "max_runtime",
    "notify",
    "attempt",
)
REQUEST_ID_ATTRIBUTE = "request_id"
# When a scheduler meant the message to fire (RFC 3339): names a bare body published without a
# request id, so a double fire of one schedule is one request.
SCHEDULE_TIME_ATTRIBUTE = "schedule_time"
# When the message was first published (RFC 3339), set by `spotjobs dead-letters redrive` from
# Pub/Sub's CloudPubSubDeadLetterSourceTopicPublishTime: a redriven message is the message it was.
ORIGINAL_PUBLISH_TIME_ATTRIBUTE = "spotjobs_original_publish_time"
ORIGIN_ATTRIBUTE = "spotjobs_origin"
REQUEUE_ORIGIN = "requeue"
# The attributes the system publishes its re-queues with (`requeue_message`).
REQUEUE_ATTRIBUTES = {ORIGIN_ATTRIBUTE: REQUEUE_ORIGIN}
# Envelope fields only the system sets, on re-queue messages.
SYSTEM_FIELDS = ("attempt",)
# The size limit is for what publishers send. A re-queue (attempt 1 too: the quota line hands over
# by re-publishing its head) carries the canonical envelope, bigger than the body first accepted:
# a bare body gains the envelope's fields, and the compact JSON it is re-published as escapes
# every non-ASCII character as \uXXXX, up to three times its UTF-8 bytes. So a message marked as a
# re-queue may exceed the limit, by a bounded amount so that not every oversized body is parsed.
# Whether the ledger expects that attempt is checked before anything is created.
REQUEUE_SIZE_ALLOWANCE = 3


def requeue_message(request: dict[str, Any], attempt: int, location: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The body and attributes attempt `attempt` of the canonical envelope `request` is
    re-published with, to run in `location` (what `read_request` reads back as a re-queue).

    Optional fields that are empty are left out, as a publisher would write them: absent means
    the same to the reader, which rejects an empty `locations` list.
    """
    present = {key: value for key, value in request.items() if value is not None and value != []}
    body = {**present, "attempt": attempt, "location": location}
    return body, {REQUEST_ID_ATTRIBUTE: str(request["request_id"]), **REQUEUE_ATTRIBUTES}


def is_requeue_of(data: bytes, request: dict[str, Any], attempt: int, location: str) -> bool:
    """Whether `data` is the body the system publishes for the re-queue the ledger holds (its
    stored request, attempt and location): the marker attribute is anyone's to set, the body
    the ledger confirms. Empty optional fields count as absent, as the reader takes them."""
    try:
        body = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return False
    if not isinstance(body, dict):
        return False
    present = {key: value for key, value in body.items() if value is not None and value != []}
    return present == requeue_message(request, attempt, location)[0]


@dataclass(frozen=True)
class JobRequest:
    """A job request as read from a message.

    After `shared.requests.policy.validate_request` succeeds, `request_id` and `custom_job` are set. While
    reading, a part that failed to parse is None so the remaining parts can still be checked.
    """

    request_id: str | None
    custom_job: dict[str, Any] | None  # REST JSON, camelCase, enum names, as submitted
    shape: str  # "envelope" | "bare"
    location: str | None = None
    locations: tuple[str, ...] = ()
    max_attempts: int | None = None
    fallback: Fallback | None = None
    # The machine types and strategies its attempts may run on (shared/requests/capacity.py).
    capacity: tuple[Alternative, ...] = ()
    keep_last: int | None = None
    deadline: Deadline | None = None
    priority: int = 0  # higher goes first when creates wait for the quota (shared/pacing.py)
    max_cost_usd: float | None = None  # the request is stopped once it spent this (shared/deciding/budget_watch.py)
    notify_topic: str | None = None  # the topic its notifications go to (shared/deciding/notices.py)
    attempt: int | None = None  # set exactly on messages marked as the system's re-queues
    # Seconds of running time the request may take over its continuations after Vertex's job
    # timeout (shared/deciding/continuations.py); None: the deployment's ceiling.
    max_runtime: float | None = None
    # A bare body without an id: its content digest and moment, which name it (shared.ledger.dedupe).
    content_digest: str | None = None
    moment: datetime | None = None

    @property
    def job_path(self) -> str:
        """The field path of the CustomJob inside the message, for violation messages."""
        return "custom_job" if self.shape == "envelope" else ""


class InvalidJobRequest(InvalidRequest):
    """An InvalidRequest that also names the request (when it could be determined)."""

    def __init__(
        self,
        violations: list[Violation],
        *,
        request_id: str | None = None,
        attempt: int | None = None,
    ) -> None:
        super().__init__(violations)
        self.request_id = request_id
        self.attempt = attempt


# Reading a message.


def read_request(
    data: bytes,
    *,
    attributes: Mapping[str, str],
    max_bytes: int,
    published_at: datetime | None = None,
) -> tuple[JobRequest, list[Violation]]:
    """Read a message body into a (possibly partial) JobRequest and every violation found.

    Never raises for bad input: whatever the bytes are, the answer is a request and a list.
    `published_at` (the Pub/Sub publish time) names a bare body published without a request id.
    """
    attribute_id = attributes.get(REQUEST_ID_ATTRIBUTE)
    origin = attributes.get(ORIGIN_ATTRIBUTE)
    requeue = origin == REQUEUE_ORIGIN
    found: list[Violation] = []
    if origin is not None and not requeue:
        found.append(
            Violation(
                f"attributes.{ORIGIN_ATTRIBUTE}",
                f"is {origin!r}; only the system sets it, to {REQUEUE_ORIGIN!r}",
            )
        )
    allowance = REQUEUE_SIZE_ALLOWANCE if requeue else 1
    body, problem = _decode_body(data, max_bytes, allowance)
    if problem is not None:
        # Name the request in the rejection when the publisher told us which one it is.
        hint = attribute_id if is_valid_request_id(attribute_id) else None
        return JobRequest(hint, None, "unknown"), [*found, problem]
    published_at = published_at or utcnow()
    if any(key in ENVELOPE_FIELDS for key in body):
        request, violations = _read_envelope(body, attribute_id, requeue, published_at)
    else:
        request, violations = _read_bare(body, attribute_id, attributes, published_at)
        if requeue:
            found.append(Violation(f"attributes.{ORIGIN_ATTRIBUTE}", "marks a re-queue, which is an envelope"))
    return request, [*found, *violations]


def _decode_body(data: bytes, max_bytes: int, allowance: int) -> tuple[dict[str, Any], Violation | None]:
    if not data or not data.strip():
        return {}, Violation(BODY, "is empty; expected a JSON object (a job request)")
    if len(data) > max_bytes and not (len(data) <= allowance * max_bytes and _is_requeue(data)):
        return {}, Violation(BODY, f"is {len(data)} bytes; at most {max_bytes} are accepted")
    try:
        body = json.loads(data.decode("utf-8"))
    # JSONDecodeError and UnicodeDecodeError are ValueErrors; deep nesting is a RecursionError.
    except (ValueError, RecursionError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return {}, Violation(BODY, f"is not valid UTF-8 JSON ({reason})")
    if not isinstance(body, dict):
        return {}, Violation(BODY, f"is {json_type(body)}; expected an object (a job request)")
    return body, None


def _is_requeue(data: bytes) -> bool:
    """A body that is an attempt as the system re-publishes it (the caller checked the marker)."""
    try:
        body = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return False
    attempt = body.get("attempt") if isinstance(body, dict) else None
    return isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 1


def _read_bare(
    body: dict[str, Any],
    attribute_id: str | None,
    attributes: Mapping[str, str],
    published_at: datetime,
) -> tuple[JobRequest, list[Violation]]:
    violations: list[Violation] = []
    if attribute_id is not None:
        request_id = read_request_id(attribute_id, "attributes.request_id", violations)
        custom_job = read_custom_job(body, "", violations)
        return JobRequest(request_id, custom_job, "bare"), violations
    moment = _given_moment(attributes, published_at, violations) or published_at
    custom_job = read_custom_job(body, "", violations)
    request = JobRequest(
        derived_request_id(body, moment), custom_job, "bare", content_digest=content_digest(body), moment=moment
    )
    return request, violations


def _given_moment(
    attributes: Mapping[str, str], published_at: datetime, violations: list[Violation]
) -> datetime | None:
    """The moment a scheduler (`schedule_time`) or a redrive (the first publish time) gives a bare
    body, range-checked against its publish time; None when neither is given or it is refused."""
    for name in (SCHEDULE_TIME_ATTRIBUTE, ORIGINAL_PUBLISH_TIME_ATTRIBUTE):
        value = attributes.get(name)
        if value is None:
            continue
        moment = parse_rfc3339(value)
        if moment is None:
            violations.append(Violation(f"attributes.{name}", "is not an RFC 3339 time"))
        elif not within_publish_range(moment, published_at):
            violations.append(
                Violation(
                    f"attributes.{name}",
                    f"is {value!r}; expected a time from {PUBLISHER_TIME_EARLIEST.days} days before to "
                    f"{PUBLISHER_TIME_LATEST.total_seconds() / 3600:.0f} h after the message was published "
                    f"({iso(published_at, timespec='seconds')})",
                )
            )
            return None
        return moment
    return None


def _read_envelope(
    body: dict[str, Any], attribute_id: str | None, requeue: bool, published_at: datetime
) -> tuple[JobRequest, list[Violation]]:
    violations: list[Violation] = []
    if not requeue:
        for key in SYSTEM_FIELDS:
            if key in body:
                violations.append(
                    Violation(
                        key,
                        "is set only by spotjobs, on its own re-queue messages; a published "
                        "request is attempt 1 (leave it out)",
                    )
                )
    elif "attempt" not in body:
        violations.append(Violation("attempt", "is required on a re-queue message"))
    for key in body:
        if key not in ENVELOPE_FIELDS:
            violations.append(
                Violation(
                    field_path("", key),
                    f"unknown field; an envelope has {', '.join(ENVELOPE_FIELDS)}",
                )
            )
    version = body.get("schema_version", ENVELOPE_SCHEMA_VERSION)
    if version != ENVELOPE_SCHEMA_VERSION or isinstance(version, bool):
        violations.append(Violation("schema_version", f"is {version!r}; this version reads {ENVELOPE_SCHEMA_VERSION}"))
    request_id = read_request_id(body.get("request_id"), "request_id", violations)
    if request_id and attribute_id is not None and attribute_id != request_id:
        violations.append(Violation("attributes.request_id", f"is {attribute_id!r} but the body says {request_id!r}"))
    custom_job = None
    if body.get("custom_job") is None:
        violations.append(Violation("custom_job", "is required (a CustomJob in Vertex REST JSON)"))
    else:
        custom_job = read_custom_job(body["custom_job"], "custom_job", violations)
    locations = read_locations(body.get("locations"), violations)
    location = read_location(body.get("location"), "location", violations)
    if location and locations and location not in locations:
        violations.append(Violation("location", f"is {location!r}, which is not in locations"))
    if body.get("capacity") is not None and body.get("fallback") is not None:
        # Both say when an attempt leaves Spot: one of the two answers would go unkept.
        violations.append(Violation("fallback", "is set with capacity; list the strategies in capacity instead"))
    request = JobRequest(
        request_id=request_id,
        custom_job=custom_job,
        shape="envelope",
        location=location,
        locations=locations,
        max_attempts=read_int(body.get("max_attempts"), "max_attempts", 1, violations),
        fallback=read_fallback(body.get("fallback"), violations),
        capacity=read_capacity(body.get("capacity"), violations),
        keep_last=read_keep_last(body.get("checkpoints"), violations),
        deadline=read_deadline(body, published_at, violations),
        priority=read_priority(body.get("priority"), violations),
        max_cost_usd=read_max_cost(body.get("max_cost_usd"), violations),
        max_runtime=read_max_runtime(body.get("max_runtime"), violations),
        notify_topic=read_notify(body.get("notify"), violations),
        attempt=read_int(body.get("attempt"), "attempt", 1, violations) if requeue else None,
    )
    return request, violations


# The canonical envelope (shared with the events function).


def canonical_envelope(request: JobRequest, *, default_location: str, default_max_attempts: int) -> dict[str, Any]:
    """The normalized request stored as `record.request` and re-published on re-queue.

    Defaults are resolved here so every reader sees the same values: `location` is the first
    attempt's region (`location`, else `locations[0]`, else the deployment's), `max_attempts` is
    the request's or the deployment default. `custom_job` is the user's CustomJob as submitted,
    before spotjobs adds SPOT, labels and the output directory.
    """
    if request.request_id is None or request.custom_job is None:
        raise ValueError("canonical_envelope needs a validated request")
    location = request.location or (request.locations[0] if request.locations else default_location)
    return {
        "schema_version": ENVELOPE_SCHEMA_VERSION,
        "request_id": request.request_id,
        "custom_job": request.custom_job,
        "location": location,
        "locations": list(request.locations),
        "max_attempts": request.max_attempts or default_max_attempts,
        "fallback": request.fallback.to_json() if request.fallback else None,
        **({"capacity": [a.to_json() for a in request.capacity]} if request.capacity else {}),
        "checkpoints": {"keep_last": request.keep_last} if request.keep_last else None,
        # Only with a deadline, so that requests without one keep the form they always had.
        **(request.deadline.to_json() if request.deadline else {}),
        # Only when set: a default-priority request's stored envelope is the one stored before.
        **({"priority": request.priority} if request.priority else {}),
        **({"max_cost_usd": request.max_cost_usd} if request.max_cost_usd is not None else {}),
        **({"max_runtime": request.max_runtime} if request.max_runtime is not None else {}),
        **({"notify": {"topic": request.notify_topic}} if request.notify_topic else {}),
    }
