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
  (`derived_request_id`); submit_job places it among the content's windows
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
its wire format is one module's. That is why it is over 450 lines: every envelope key (the
deadline's among them) is read, canonicalised and re-published here, and a key added in one of
those places and not the others would be lost on re-queue.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
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
from shared.jobs import DERIVED_ID_PREFIX
from shared.requests.attempts import FALLBACK_STRATEGIES
from shared.requests.capacity import Alternative, read_capacity
from shared.requests.job_schema import BODY, field_path, json_type, read_custom_job

ENVELOPE_SCHEMA_VERSION = 1
# Label-safe (a Vertex label value) and usable as a GCS path segment: the one rule for request ids
# (the pruner lists request folders with it too).
REQUEST_ID_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
# A trigger request's manifest, in the state bucket: on_trigger writes it, the training account
# may only read it (terraform/iam.tf), so no job can plant or overwrite one (docs/security.md).
# Removed with its request's record (shared/ledger/retention.py).
MANIFESTS_PREFIX = "manifests/"


def manifest_path(request_id: str) -> str:
    return f"{MANIFESTS_PREFIX}{request_id}.json"


LOCATION_PATTERN = re.compile(r"^[a-z]+(-[a-z]+)+[0-9]+$")
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
# What a deadline comes with: the work and, optionally, overrides of the estimates.
DEADLINE_DETAILS = ("total_steps", "expected_step_seconds", "changeover_seconds")
# A request's `priority` orders it among those waiting for Vertex's submission quota (higher first).
MAX_PRIORITY = 1_000_000
# Bounds on what a deadline comes with, so that no arithmetic on them overflows or means nothing:
# a deadline within a year of its publish, at most a trillion steps, no step or changeover longer
# than a year.
MAX_DEADLINE_AHEAD = timedelta(days=366)
MAX_TOTAL_STEPS = 10**12
MAX_SECONDS = MAX_DEADLINE_AHEAD.total_seconds()
# A request's budget in US dollars (`max_cost_usd`): bounded so that no arithmetic on it means nothing.
MAX_COST_USD = 10.0**9
# `notify.topic`: a Pub/Sub topic's full path, never an address (no request makes the functions
# call a URL). Project ids and topic names as Pub/Sub documents them
# (https://cloud.google.com/pubsub/docs/create-topic#resource_names).
NOTIFY_TOPIC_PATTERN = re.compile(
    r"^projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/topics/(?!goog)[A-Za-z][A-Za-z0-9._~+%-]{2,254}$"
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
class Fallback:
    """After `after_spot_attempts` Spot attempts, run the remaining ones with `strategy`."""

    after_spot_attempts: int
    strategy: str

    def to_json(self) -> dict[str, Any]:
        return {"after_spot_attempts": self.after_spot_attempts, "strategy": self.strategy}


@dataclass(frozen=True)
class Deadline:
    """Finish by `at`. The work is `total_steps` (else the trainer kit's, once it runs); the step
    time and the changeover override what spotjobs would estimate (shared/deciding/deadline.py)."""

    at: datetime
    total_steps: int | None = None
    expected_step_seconds: float | None = None
    changeover_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The envelope fields, as the canonical envelope carries them."""
        return {
            "deadline": iso(self.at, timespec="seconds"),
            "total_steps": self.total_steps,
            "expected_step_seconds": self.expected_step_seconds,
            "changeover_seconds": self.changeover_seconds,
        }


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


def is_valid_request_id(value: object) -> bool:
    return isinstance(value, str) and REQUEST_ID_PATTERN.fullmatch(value) is not None


def content_digest(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def derived_request_id(body: Mapping[str, Any], opened: datetime | None) -> str:
    """The request id of a bare body published without one whose dedupe window opened at
    `opened`: its content and that second. Never the Pub/Sub message id: a publisher's retry, a
    redrive or a scheduler's double fire is a new message with the same content, and must not
    start a second job (shared.ledger.dedupe says which window a moment belongs to)."""
    return content_request_id(content_digest(body), opened or utcnow())


def content_request_id(digest: str, opened: datetime) -> str:
    return f"{DERIVED_ID_PREFIX}{digest[:16]}-{opened.astimezone(UTC):%Y%m%d%H%M%S}"


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
        request_id = _checked_request_id(attribute_id, "attributes.request_id", violations)
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
    request_id = _checked_request_id(body.get("request_id"), "request_id", violations)
    if request_id and attribute_id is not None and attribute_id != request_id:
        violations.append(Violation("attributes.request_id", f"is {attribute_id!r} but the body says {request_id!r}"))
    custom_job = None
    if body.get("custom_job") is None:
        violations.append(Violation("custom_job", "is required (a CustomJob in Vertex REST JSON)"))
    else:
        custom_job = read_custom_job(body["custom_job"], "custom_job", violations)
    locations = _read_locations(body.get("locations"), violations)
    location = _read_location(body.get("location"), "location", violations)
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
        max_attempts=_read_int(body.get("max_attempts"), "max_attempts", 1, violations),
        fallback=_read_fallback(body.get("fallback"), violations),
        capacity=read_capacity(body.get("capacity"), violations),
        keep_last=_read_keep_last(body.get("checkpoints"), violations),
        deadline=_read_deadline(body, published_at, violations),
        priority=_read_priority(body.get("priority"), violations),
        max_cost_usd=_read_max_cost(body.get("max_cost_usd"), violations),
        max_runtime=read_max_runtime(body.get("max_runtime"), violations),
        notify_topic=_read_notify(body.get("notify"), violations),
        attempt=_read_int(body.get("attempt"), "attempt", 1, violations) if requeue else None,
    )
    return request, violations


def _checked_request_id(value: object, path: str, violations: list[Violation]) -> str | None:
    if value is None:
        violations.append(Violation(path, "is required"))
        return None
    if not is_valid_request_id(value):
        violations.append(
            Violation(
                path,
                f"is {value!r}; a request id is 1-63 characters of lowercase letters, digits, '-' "
                "and '_', starting with a letter (it becomes a Vertex label value)",
            )
        )
        return None
    return value  # type: ignore[return-value]  # checked by is_valid_request_id


def _read_location(value: object, path: str, violations: list[Violation]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not LOCATION_PATTERN.fullmatch(value):
        violations.append(Violation(path, f"is {value!r}; expected a region such as 'us-central1'"))
        return None
    return value


def _read_locations(value: object, violations: list[Violation]) -> tuple[str, ...]:
    if value is None or value == []:  # the canonical envelope writes [] for "no failover"
        return ()
    if not isinstance(value, list):
        violations.append(Violation("locations", "must be a list of regions in failover order"))
        return ()
    locations = [_read_location(item, f"locations[{i}]", violations) for i, item in enumerate(value)]
    if len(set(locations)) != len(locations):
        violations.append(Violation("locations", "lists a region more than once"))
    return tuple(loc for loc in locations if loc)


def _read_int(
    value: object, path: str, minimum: int, violations: list[Violation], maximum: int | None = None
) -> int | None:
    if value is None:
        return None
    too_big = maximum is not None and isinstance(value, int) and value > maximum
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum or too_big:
        expected = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
        violations.append(Violation(path, f"is {_shown(value)}; expected an integer {expected}"))
        return None
    return value


def _shown(value: object) -> str:
    """A value as a violation quotes it: a 400-digit number is not repeated whole."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def _read_priority(value: object, violations: list[Violation]) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > MAX_PRIORITY:
        violations.append(
            Violation("priority", f"is {value!r}; expected an integer from -{MAX_PRIORITY} to {MAX_PRIORITY}")
        )
        return 0
    return value


def _read_fallback(value: object, violations: list[Violation]) -> Fallback | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        violations.append(Violation("fallback", 'expected {"after_spot_attempts": k, "strategy": "STANDARD"}'))
        return None
    for key in value:
        if key not in ("after_spot_attempts", "strategy"):
            violations.append(
                Violation(
                    field_path("fallback", key),
                    "unknown field; expected after_spot_attempts, strategy",
                )
            )
    after = _read_int(value.get("after_spot_attempts"), "fallback.after_spot_attempts", 0, violations)
    if "after_spot_attempts" not in value:
        violations.append(Violation("fallback.after_spot_attempts", "is required"))
    strategy = value.get("strategy", "STANDARD")
    if strategy not in FALLBACK_STRATEGIES:
        violations.append(Violation("fallback.strategy", f"is {strategy!r}; allowed: {', '.join(FALLBACK_STRATEGIES)}"))
        return None
    return Fallback(after, strategy) if after is not None else None


def _read_deadline(body: Mapping[str, Any], published_at: datetime, violations: list[Violation]) -> Deadline | None:
    value = body.get("deadline")
    if value is None:
        for key in DEADLINE_DETAILS:
            if body.get(key) is not None:
                violations.append(Violation(key, "is used only with a deadline (an RFC 3339 time)"))
        return None
    at = parse_rfc3339(value)
    if at is None:
        violations.append(
            Violation("deadline", f"is {_shown(value)}; expected an RFC 3339 time such as 2026-12-07T09:00:00Z")
        )
    elif at > published_at + MAX_DEADLINE_AHEAD:
        violations.append(
            Violation(
                "deadline", f"is {value!r}; at most {MAX_DEADLINE_AHEAD.days} days after the request is published"
            )
        )
        at = None
    steps = _read_int(body.get("total_steps"), "total_steps", 1, violations, MAX_TOTAL_STEPS)
    step_seconds = _read_seconds(body.get("expected_step_seconds"), "expected_step_seconds", violations, positive=True)
    changeover = _read_seconds(body.get("changeover_seconds"), "changeover_seconds", violations, positive=False)
    return Deadline(at, steps, step_seconds, changeover) if at is not None else None


def _read_seconds(value: object, path: str, violations: list[Violation], *, positive: bool) -> float | None:
    if value is None:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    # NaN fails every comparison; infinity and huge integers fail the maximum (compared, never
    # converted: float() of a 400-digit integer raises).
    if not number or not (0 <= value <= MAX_SECONDS) or (positive and value == 0):  # type: ignore[operator]
        low = "> 0" if positive else ">= 0"
        violations.append(
            Violation(path, f"is {_shown(value)}; expected a number of seconds {low} and at most {MAX_SECONDS:.0f}")
        )
        return None
    return float(value)  # type: ignore[arg-type]  # checked above


def _read_max_cost(value: object, violations: list[Violation]) -> float | None:
    if value is None:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    # NaN fails every comparison; infinity and huge integers fail the maximum (compared, never converted).
    if not number or not (0 < value <= MAX_COST_USD):  # type: ignore[operator]
        violations.append(
            Violation(
                "max_cost_usd",
                f"is {_shown(value)}; expected a number of US dollars > 0 and at most {MAX_COST_USD:.0f}",
            )
        )
        return None
    return float(value)  # type: ignore[arg-type]  # checked above


def read_max_runtime(value: object, violations: list[Violation]) -> float | None:
    """`max_runtime`: seconds, as a number or a duration string ("1209600s") as Vertex's
    `scheduling.timeout` is written; more than 0."""
    if value is None:
        return None
    text = value.strip() if isinstance(value, str) else None
    if text is not None and re.fullmatch(r"[0-9]+(\.[0-9]{1,9})?s", text):
        value = float(text[:-1])
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not (0 < value <= MAX_SECONDS):  # type: ignore[operator]
        violations.append(
            Violation(
                "max_runtime",
                f"is {_shown(value)}; expected seconds > 0 and at most {MAX_SECONDS:.0f}, "
                'as a number or a duration string such as "1209600s"',
            )
        )
        return None
    return float(value)  # type: ignore[arg-type]  # checked above


def _read_notify(value: object, violations: list[Violation]) -> str | None:
    """`notify: {"topic": "projects/P/topics/T"}`: the topic path, or None with a violation."""
    if value is None:
        return None
    if not isinstance(value, dict) or "topic" not in value:
        violations.append(Violation("notify", 'expected {"topic": "projects/PROJECT/topics/TOPIC"}'))
        return None
    for key in value:
        if key != "topic":
            violations.append(Violation(field_path("notify", key), "unknown field; expected topic"))
    topic = value["topic"]
    if not isinstance(topic, str) or not NOTIFY_TOPIC_PATTERN.fullmatch(topic):
        violations.append(
            Violation(
                "notify.topic",
                f"is {_shown(topic)}; expected a Pub/Sub topic path projects/PROJECT/topics/TOPIC (a project id of 6-30 "
                "characters, a topic name of 3-255 not starting with goog; never a URL)",
            )
        )
        return None
    return topic


def _read_keep_last(value: object, violations: list[Violation]) -> int | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        violations.append(Violation("checkpoints", 'expected {"keep_last": n}'))
        return None
    for key in value:
        if key != "keep_last":
            violations.append(Violation(field_path("checkpoints", key), "unknown field; expected keep_last"))
    return _read_int(value.get("keep_last"), "checkpoints.keep_last", 1, violations)


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
