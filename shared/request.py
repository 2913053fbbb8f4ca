"""The job request: its two accepted shapes, how it is read, and the canonical envelope.

A message on `job-requests` is either

- an **envelope** `{"request_id", "custom_job", "location"?, "locations"?, "max_attempts"?,
  "fallback"?, "checkpoints"?, "schema_version"?, "attempt"?}` (`attempt` is set only by the
  system, on re-queue), or
- a **bare CustomJob body**, exactly what the Vertex AI REST docs POST to `customJobs`. Its request
  id is the `request_id` message attribute, else `msg-<message id>`: a redelivery of the same
  message then maps to the same request and is de-duplicated.

The CustomJob part is checked against the `google.cloud.aiplatform_v1` CustomJob descriptor, the
same schema the API parses with, so unknown or mistyped fields are rejected as the API would
reject them, in camelCase or snake_case. Reading collects every violation with its field path
instead of stopping at the first (protobuf's own parser stops at the first). Policy (what this
deployment allows) is applied on top by `shared.policy`.

`canonical_envelope` is the contract with the events function: the normalized request stored in
the ledger and re-published, with `attempt` and `location` added, on re-queue. `plan_attempt`
decides where and how an attempt runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shared.errors import InvalidRequest, Violation

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor, FieldDescriptor

    from shared.ledger import Attempt

ENVELOPE_SCHEMA_VERSION = 1
# Label-safe (a Vertex label value) and usable as a GCS path segment.
REQUEST_ID_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LOCATION_PATTERN = re.compile(r"^[a-z]+(-[a-z]+)+[0-9]+$")
SPOT = "SPOT"
FALLBACK_STRATEGIES = ("STANDARD", "FLEX_START")
ENVELOPE_FIELDS = (
    "schema_version",
    "request_id",
    "custom_job",
    "location",
    "locations",
    "max_attempts",
    "fallback",
    "checkpoints",
    "attempt",
)
REQUEST_ID_ATTRIBUTE = "request_id"
# The size limit is for what publishers send (attempt 1). A re-queue carries the canonical
# envelope, bigger than the body first accepted (a bare body gains the envelope's fields), so it may
# exceed the limit, by a bounded amount so that not every oversized body is parsed. Whether the
# ledger expects that attempt is checked before anything is created: setting it gains nothing.
REQUEUE_SIZE_ALLOWANCE = 2
BODY = "body"  # the path of a violation about the message as a whole
# CustomJob fields Vertex sets; a request that sets them is confused about what it is sending.
OUTPUT_ONLY_FIELDS = frozenset(
    {
        "name",
        "state",
        "createTime",
        "startTime",
        "endTime",
        "updateTime",
        "error",
        "webAccessUris",
        "satisfiesPzs",
        "satisfiesPzi",
    }
)


@dataclass(frozen=True)
class Fallback:
    """After `after_spot_attempts` Spot attempts, run the remaining ones with `strategy`."""

    after_spot_attempts: int
    strategy: str

    def to_json(self) -> dict[str, Any]:
        return {"after_spot_attempts": self.after_spot_attempts, "strategy": self.strategy}


@dataclass(frozen=True)
class JobRequest:
    """A job request as read from a message.

    After `shared.policy.validate_request` succeeds, `request_id` and `custom_job` are set. While
    reading, a part that failed to parse is None so the remaining parts can still be checked.
    """

    request_id: str | None
    custom_job: dict[str, Any] | None  # REST JSON, camelCase, enum names, as submitted
    shape: str  # "envelope" | "bare"
    location: str | None = None
    locations: tuple[str, ...] = ()
    max_attempts: int | None = None
    fallback: Fallback | None = None
    keep_last: int | None = None
    attempt: int | None = None  # only on system re-queues

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
    data: bytes, *, message_id: str, attributes: Mapping[str, str], max_bytes: int
) -> tuple[JobRequest, list[Violation]]:
    """Read a message body into a (possibly partial) JobRequest and every violation found.

    Never raises for bad input: whatever the bytes are, the answer is a request and a list.
    """
    attribute_id = attributes.get(REQUEST_ID_ATTRIBUTE)
    body, problem = _decode_body(data, max_bytes)
    if problem is not None:
        # Name the request in the rejection when the publisher told us which one it is.
        hint = attribute_id if is_valid_request_id(attribute_id) else None
        return JobRequest(hint, None, "unknown"), [problem]
    if any(key in ENVELOPE_FIELDS for key in body):
        return _read_envelope(body, attribute_id)
    return _read_bare(body, attribute_id, message_id)


def is_valid_request_id(value: object) -> bool:
    return isinstance(value, str) and REQUEST_ID_PATTERN.fullmatch(value) is not None


def request_id_from_message_id(message_id: str) -> str:
    """A label-safe request id for a bare body published without a `request_id` attribute."""
    safe = re.sub(r"[^a-z0-9_-]", "-", message_id.lower())
    return f"msg-{safe}"[:63]


def _decode_body(data: bytes, max_bytes: int) -> tuple[dict[str, Any], Violation | None]:
    if not data or not data.strip():
        return {}, Violation(BODY, "is empty; expected a JSON object (a job request)")
    if len(data) > max_bytes and not _is_requeue_within_allowance(data, max_bytes):
        return {}, Violation(BODY, f"is {len(data)} bytes; at most {max_bytes} are accepted")
    try:
        body = json.loads(data.decode("utf-8"))
    # JSONDecodeError and UnicodeDecodeError are ValueErrors; deep nesting is a RecursionError.
    except (ValueError, RecursionError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return {}, Violation(BODY, f"is not valid UTF-8 JSON ({reason})")
    if not isinstance(body, dict):
        return {}, Violation(BODY, f"is {_json_type(body)}; expected an object (a job request)")
    return body, None


def _is_requeue_within_allowance(data: bytes, max_bytes: int) -> bool:
    """An oversized body that is attempt n+1 as the system re-publishes it, within its allowance.
    (Whether the ledger expects that attempt is checked before anything is created.)"""
    if len(data) > REQUEUE_SIZE_ALLOWANCE * max_bytes:
        return False
    try:
        body = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return False
    attempt = body.get("attempt") if isinstance(body, dict) else None
    return isinstance(attempt, int) and not isinstance(attempt, bool) and attempt > 1


def _read_bare(
    body: dict[str, Any], attribute_id: str | None, message_id: str
) -> tuple[JobRequest, list[Violation]]:
    violations: list[Violation] = []
    if attribute_id is not None:
        request_id = _checked_request_id(attribute_id, "attributes.request_id", violations)
    else:
        request_id = request_id_from_message_id(message_id)
    custom_job = read_custom_job(body, "", violations)
    return JobRequest(request_id, custom_job, "bare"), violations


def _read_envelope(
    body: dict[str, Any], attribute_id: str | None
) -> tuple[JobRequest, list[Violation]]:
    violations: list[Violation] = []
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
        violations.append(
            Violation(
                "schema_version", f"is {version!r}; this version reads {ENVELOPE_SCHEMA_VERSION}"
            )
        )
    request_id = _checked_request_id(body.get("request_id"), "request_id", violations)
    if request_id and attribute_id is not None and attribute_id != request_id:
        violations.append(
            Violation(
                "attributes.request_id", f"is {attribute_id!r} but the body says {request_id!r}"
            )
        )
    custom_job = None
    if body.get("custom_job") is None:
        violations.append(Violation("custom_job", "is required (a CustomJob in Vertex REST JSON)"))
    else:
        custom_job = read_custom_job(body["custom_job"], "custom_job", violations)
    locations = _read_locations(body.get("locations"), violations)
    location = _read_location(body.get("location"), "location", violations)
    if location and locations and location not in locations:
        violations.append(Violation("location", f"is {location!r}, which is not in locations"))
    request = JobRequest(
        request_id=request_id,
        custom_job=custom_job,
        shape="envelope",
        location=location,
        locations=locations,
        max_attempts=_read_int(body.get("max_attempts"), "max_attempts", 1, violations),
        fallback=_read_fallback(body.get("fallback"), violations),
        keep_last=_read_keep_last(body.get("checkpoints"), violations),
        attempt=_read_int(body.get("attempt"), "attempt", 1, violations),
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
        violations.append(
            Violation("locations", "must be a list of regions in failover order")
        )
        return ()
    locations = [
        _read_location(item, f"locations[{i}]", violations) for i, item in enumerate(value)
    ]
    if len(set(locations)) != len(locations):
        violations.append(Violation("locations", "lists a region more than once"))
    return tuple(loc for loc in locations if loc)


def _read_int(value: object, path: str, minimum: int, violations: list[Violation]) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        violations.append(Violation(path, f"is {value!r}; expected an integer >= {minimum}"))
        return None
    return value


def _read_fallback(value: object, violations: list[Violation]) -> Fallback | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        violations.append(
            Violation("fallback", 'expected {"after_spot_attempts": k, "strategy": "STANDARD"}')
        )
        return None
    for key in value:
        if key not in ("after_spot_attempts", "strategy"):
            violations.append(
                Violation(
                    field_path("fallback", key),
                    "unknown field; expected after_spot_attempts, strategy",
                )
            )
    after = _read_int(
        value.get("after_spot_attempts"), "fallback.after_spot_attempts", 0, violations
    )
    if "after_spot_attempts" not in value:
        violations.append(Violation("fallback.after_spot_attempts", "is required"))
    strategy = value.get("strategy", "STANDARD")
    if strategy not in FALLBACK_STRATEGIES:
        violations.append(
            Violation(
                "fallback.strategy", f"is {strategy!r}; allowed: {', '.join(FALLBACK_STRATEGIES)}"
            )
        )
        return None
    return Fallback(after, strategy) if after is not None else None


def _read_keep_last(value: object, violations: list[Violation]) -> int | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        violations.append(Violation("checkpoints", 'expected {"keep_last": n}'))
        return None
    for key in value:
        if key != "keep_last":
            violations.append(
                Violation(field_path("checkpoints", key), "unknown field; expected keep_last")
            )
    return _read_int(value.get("keep_last"), "checkpoints.keep_last", 1, violations)


def _json_type(value: object) -> str:
    names = {
        dict: "a JSON object",
        list: "a JSON array",
        str: "a JSON string",
        bool: "a JSON boolean",
    }
    return "JSON null" if value is None else names.get(type(value), "a JSON number")


# The CustomJob part: the aiplatform_v1 schema, every violation at once.


def read_custom_job(value: object, path: str, violations: list[Violation]) -> dict[str, Any] | None:
    """Check `value` against the CustomJob schema; return its canonical REST JSON, or None.

    The canonical form is what `CustomJob.to_json` prints: camelCase, enum names, int64 as strings,
    no default values. It keeps only what the request said.
    """
    from google.cloud.aiplatform_v1.types import CustomJob
    from google.protobuf import json_format

    found: list[Violation] = []
    if not isinstance(value, dict):
        found.append(
            Violation(path or BODY, f"is {_json_type(value)}; expected a CustomJob object")
        )
    else:
        _check_message(CustomJob.pb().DESCRIPTOR, value, path, found)
        for key in value:
            if key in OUTPUT_ONLY_FIELDS or _camel(key) in OUTPUT_ONLY_FIELDS:
                found.append(Violation(field_path(path, key), "is output only; Vertex AI sets it"))
    if not found:
        try:
            job = CustomJob.pb()()
            json_format.ParseDict(value, job)
        except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
            # The walk above mirrors the parser; this keeps parity if protobuf's rules drift.
            found.append(Violation(path or BODY, _clean_parse_error(exc)))
        else:
            text = json_format.MessageToJson(job, indent=None)
            violations.extend(found)
            return json.loads(text)
    violations.extend(found)
    return None


def _check_message(descriptor: Descriptor, value: object, path: str, out: list[Violation]) -> None:
    if not isinstance(value, dict):
        out.append(
            Violation(path, f"is {_json_type(value)}; expected an object ({descriptor.name})")
        )
        return
    seen_fields: dict[str, str] = {}
    seen_oneofs: dict[str, str] = {}
    for key, item in value.items():
        item_path = field_path(path, key)
        field = _field_named(descriptor, key)
        if field is None:
            allowed = ", ".join(f.json_name for f in descriptor.fields)
            out.append(
                Violation(item_path, f"unknown field of {descriptor.name}; known fields: {allowed}")
            )
            continue
        if field.name in seen_fields:
            out.append(
                Violation(
                    item_path, f"repeats {seen_fields[field.name]} (camelCase and snake_case)"
                )
            )
            continue
        seen_fields[field.name] = key
        oneof = field.containing_oneof
        if oneof is not None and item is not None:
            if oneof.name in seen_oneofs:
                out.append(
                    Violation(
                        item_path, f"only one of {seen_oneofs[oneof.name]} and {key} may be set"
                    )
                )
            seen_oneofs[oneof.name] = key
        if item is not None:
            _check_field(descriptor, field, key, item, item_path, out)


def _check_field(
    parent: Descriptor,
    field: FieldDescriptor,
    key: str,
    value: object,
    path: str,
    out: list[Violation],
) -> None:
    message_type = field.message_type
    if message_type is not None and message_type.GetOptions().map_entry:
        value_type = message_type.fields_by_name["value"].message_type
        if not isinstance(value, dict):
            out.append(Violation(path, f"is {_json_type(value)}; expected an object (a map)"))
        elif value_type is not None and not _is_leaf_message(value_type):
            for map_key, map_value in value.items():
                _check_message(value_type, map_value, field_path(path, map_key), out)
        else:
            _check_leaf(parent, key, value, path, out)
        return
    if _is_repeated(field):
        if not isinstance(value, list):
            out.append(Violation(path, f"is {_json_type(value)}; expected an array"))
        elif message_type is not None and not _is_leaf_message(message_type):
            for index, element in enumerate(value):
                _check_message(message_type, element, f"{path}[{index}]", out)
        else:
            _check_leaf(parent, key, value, path, out)
        return
    if message_type is not None and not _is_leaf_message(message_type):
        _check_message(message_type, value, path, out)
    else:
        _check_leaf(parent, key, value, path, out)


def _check_leaf(
    parent: Descriptor, key: str, value: object, path: str, out: list[Violation]
) -> None:
    """Scalars, enums and well-known types: let protobuf's JSON parser judge the one field."""
    from google.protobuf import json_format, message_factory

    try:
        json_format.ParseDict({key: value}, message_factory.GetMessageClass(parent)())
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        field = _field_named(parent, key)
        expected = _describe(field) if field is not None else "a valid value"
        out.append(Violation(path, f"expected {expected} ({_clean_parse_error(exc)})"))


def _describe(field: FieldDescriptor) -> str:
    """What a JSON value for `field` looks like, in words."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        return f"a map of {_describe(field.message_type.fields_by_name['value'])}"
    if field.enum_type is not None:
        names = [v.name for v in field.enum_type.values]
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        kind = f"a {field.enum_type.name} name ({shown}) or number"
    elif field.message_type is not None:
        kind = _WELL_KNOWN_JSON.get(
            field.message_type.full_name, f"a {field.message_type.name} object"
        )
    elif field.type == F.TYPE_STRING:
        kind = "a string"
    elif field.type == F.TYPE_BOOL:
        kind = "true or false"
    elif field.type in (F.TYPE_FLOAT, F.TYPE_DOUBLE):
        kind = "a number"
    elif field.type == F.TYPE_BYTES:
        kind = "a base64 string"
    else:
        kind = "an integer"
    return f"an array of {kind}s" if _is_repeated(field) else kind


_WELL_KNOWN_JSON = {
    "google.protobuf.Duration": 'a duration such as "3600s"',
    "google.protobuf.Timestamp": 'an RFC 3339 time such as "2024-01-01T00:00:00Z"',
}


def _is_leaf_message(descriptor: Descriptor) -> bool:
    # Well-known types (Duration, Timestamp, Struct, ...) and google.rpc.Status have special JSON.
    return descriptor.full_name.startswith(("google.protobuf.", "google.rpc."))


def _is_repeated(field: FieldDescriptor) -> bool:
    repeated = getattr(field, "is_repeated", None)
    if repeated is not None:
        return bool(repeated)
    return field.label == field.LABEL_REPEATED  # protobuf < 5.28


def _field_named(descriptor: Descriptor, key: str) -> FieldDescriptor | None:
    field = descriptor.fields_by_name.get(key)
    if field is not None:
        return field
    return next((f for f in descriptor.fields if f.json_name == key), None)


_PARSE_PREFIX = re.compile(r"^(Failed to parse \w+ field: )+")
_PARSE_SUFFIX = re.compile(r"\s+at\s+\S+\.?$|\.\.\.$")


def _clean_parse_error(exc: BaseException) -> str:
    """protobuf's message without its nesting prefix and location suffix (the path says where)."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = _PARSE_PREFIX.sub("", text)
    return _PARSE_SUFFIX.sub("", text).rstrip(".")[:300] or type(exc).__name__


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.title() for part in rest)


_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")


def field_path(path: str, key: str) -> str:
    """`path.key`, or `path["key"]` when the key would not read as a name (empty, dotted, ...)."""
    if not _PLAIN_KEY.fullmatch(key):
        return f"{path}[{json.dumps(key)}]"
    return f"{path}.{key}" if path else key


# The canonical envelope and attempt planning (shared with the events function).


def canonical_envelope(
    request: JobRequest, *, default_location: str, default_max_attempts: int
) -> dict[str, Any]:
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
        "checkpoints": {"keep_last": request.keep_last} if request.keep_last else None,
    }


def plan_attempt(
    request: Mapping[str, Any], n: int, previous: Attempt | None, after_stockout: bool
) -> tuple[str, str]:
    """(location, strategy) for attempt `n` of a canonical envelope.

    Strategy: SPOT, unless `fallback` is set and `n > fallback.after_spot_attempts` (so
    `after_spot_attempts: 0` means no Spot at all).

    Location: attempt 1 runs in `request["location"]`. A later attempt stays where the previous one
    ran, unless that attempt ended in a stockout and `locations` lists alternatives: then it moves to
    the next region in `locations`, wrapping around after the last. Wrapping rather than staying on
    the last region is deliberate: stockouts are transient, an earlier region has had time to
    recover, and `max_attempts` bounds the tour anyway.
    """
    fallback = request.get("fallback")
    if fallback and n > int(fallback["after_spot_attempts"]):
        strategy = str(fallback.get("strategy") or "STANDARD")
    else:
        strategy = SPOT
    locations: list[str] = list(request.get("locations") or [])
    first = str(request.get("location") or (locations[0] if locations else ""))
    if n == 1 or previous is None:
        return first, strategy
    if not after_stockout or len(locations) < 2:
        return previous.location, strategy
    if previous.location not in locations:
        return locations[0], strategy
    following = (locations.index(previous.location) + 1) % len(locations)
    return locations[following], strategy
