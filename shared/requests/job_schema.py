"""The CustomJob part of a request, walked over the `google.cloud.aiplatform_v1` CustomJob proto.

The same schema the API parses with, so unknown or mistyped fields are rejected as the API would
reject them, in camelCase or snake_case. The walk collects every violation with its field path
instead of stopping at the first (protobuf's own parser stops at the first). What a deployment
allows inside a valid CustomJob is `shared.requests.policy`'s business, not this module's.
"""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING, Any

from shared.errors import Violation

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor, FieldDescriptor

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


def json_type(value: object) -> str:
    names = {
        dict: "a JSON object",
        list: "a JSON array",
        str: "a JSON string",
        bool: "a JSON boolean",
    }
    return "JSON null" if value is None else names.get(type(value), "a JSON number")


def read_custom_job(value: object, path: str, violations: list[Violation]) -> dict[str, Any] | None:
    """Check `value` against the CustomJob schema; return its canonical REST JSON, or None.

    The canonical form is what `CustomJob.to_json` prints: camelCase, enum names, int64 as strings,
    no default values, its keys sorted (the same bytes in every process). It keeps only what the
    request said.
    """
    # Redeliveries and re-queues bring the same job again and again; the walk and protobuf's
    # parse cost a millisecond, its JSON text a few microseconds.
    try:
        text = json.dumps(value)
    except (RecursionError, ValueError, TypeError):
        return _canonical_custom_job(value, path, violations)  # garbage the walk reports as such
    found, canonical = _read_custom_job(text, path)
    violations.extend(found)
    return None if canonical is None else json.loads(canonical)


@functools.lru_cache(maxsize=256)
def _read_custom_job(text: str, path: str) -> tuple[tuple[Violation, ...], str | None]:
    found: list[Violation] = []
    canonical = _canonical_custom_job(json.loads(text), path, found)
    return tuple(found), None if canonical is None else json.dumps(canonical)


def _canonical_custom_job(value: object, path: str, violations: list[Violation]) -> dict[str, Any] | None:
    from google.cloud.aiplatform_v1.types import CustomJob
    from google.protobuf import json_format

    found: list[Violation] = []
    if not isinstance(value, dict):
        found.append(Violation(path or BODY, f"is {json_type(value)}; expected a CustomJob object"))
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
            # Keys sorted: a map field's order (`labels`) varies with the process's hash seed.
            canonical = json.loads(json_format.MessageToJson(job, indent=None, sort_keys=True))
            # JSON accepts any enum number; one this library does not know is not a value.
            for concrete, _, field, item in set_fields(canonical, path):
                if field.enum_type is not None and not isinstance(item, str):
                    found.append(Violation(concrete, f"is {item}, not a known {field.enum_type.name} value"))
            violations.extend(found)
            return None if found else canonical
    violations.extend(found)
    return None


# Field paths: `jobSpec.workerPoolSpecs[].machineSpec.machineType` names a field of the schema
# wherever it occurs ("[]" for any element of a repeated field, "{}" for any value of a map).


def schema_paths() -> list[str]:
    """Every field path of the CustomJob schema, walked from the installed proto (so a library
    upgrade that adds a field adds a path here)."""
    from google.cloud.aiplatform_v1.types import CustomJob

    paths: list[str] = []

    def walk(descriptor: Descriptor, prefix: str, seen: frozenset[str]) -> None:
        for field in descriptor.fields:
            path = _schema_path(prefix, field)
            paths.append(path)
            message = _walked_message(field)
            if message is not None and message.full_name not in seen:
                walk(message, path, seen | {message.full_name})

    walk(CustomJob.pb().DESCRIPTOR, "", frozenset())
    return paths


def set_fields(job: dict[str, Any], path: str = "") -> list[tuple[str, str, FieldDescriptor, Any]]:
    """(concrete path, schema path, field, value) of every field set in a canonical CustomJob,
    parents before their children."""
    from google.cloud.aiplatform_v1.types import CustomJob

    out: list[tuple[str, str, FieldDescriptor, Any]] = []

    def walk(descriptor: Descriptor, value: dict[str, Any], concrete: str, schema: str) -> None:
        for key, item in value.items():
            field = _field_named(descriptor, key)
            if field is None:
                continue
            here, pattern = field_path(concrete, key), _schema_path(schema, field)
            out.append((here, pattern, field, item))
            message = _walked_message(field)
            if message is None:
                continue
            if _is_map(field):
                for map_key, map_value in item.items():
                    walk(message, map_value, field_path(here, map_key), pattern)
            elif _is_repeated(field):
                for index, element in enumerate(item):
                    walk(message, element, f"{here}[{index}]", pattern)
            else:
                walk(message, item, here, pattern)

    walk(CustomJob.pb().DESCRIPTOR, job, path, "")
    return out


def _schema_path(prefix: str, field: FieldDescriptor) -> str:
    suffix = "{}" if _is_map(field) else "[]" if _is_repeated(field) else ""
    name = f"{field.json_name}{suffix}"
    return f"{prefix}.{name}" if prefix else name


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _walked_message(field: FieldDescriptor) -> Descriptor | None:
    """The message a walk descends into: the field's own, a map's value's, none for leaves."""
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        message = message.fields_by_name["value"].message_type
    if message is None or _is_leaf_message(message):
        return None
    return message


def _check_message(descriptor: Descriptor, value: object, path: str, out: list[Violation]) -> None:
    if not isinstance(value, dict):
        out.append(Violation(path, f"is {json_type(value)}; expected an object ({descriptor.name})"))
        return
    seen_fields: dict[str, str] = {}
    seen_oneofs: dict[str, str] = {}
    for key, item in value.items():
        item_path = field_path(path, key)
        field = _field_named(descriptor, key)
        if field is None:
            allowed = ", ".join(f.json_name for f in descriptor.fields)
            out.append(Violation(item_path, f"unknown field of {descriptor.name}; known fields: {allowed}"))
            continue
        if field.name in seen_fields:
            out.append(Violation(item_path, f"repeats {seen_fields[field.name]} (camelCase and snake_case)"))
            continue
        seen_fields[field.name] = key
        oneof = field.containing_oneof
        if oneof is not None and item is not None:
            if oneof.name in seen_oneofs:
                out.append(Violation(item_path, f"only one of {seen_oneofs[oneof.name]} and {key} may be set"))
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
            out.append(Violation(path, f"is {json_type(value)}; expected an object (a map)"))
        elif value_type is not None and not _is_leaf_message(value_type):
            for map_key, map_value in value.items():
                _check_message(value_type, map_value, field_path(path, map_key), out)
        else:
            _check_leaf(parent, key, value, path, out)
        return
    if _is_repeated(field):
        if not isinstance(value, list):
            out.append(Violation(path, f"is {json_type(value)}; expected an array"))
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


def _check_leaf(parent: Descriptor, key: str, value: object, path: str, out: list[Violation]) -> None:
    """Scalars, enums and well-known types: let protobuf's JSON parser judge the one field."""
    # A new job mostly repeats values other jobs had (an image, a machine type, a count): a
    # short string, an integer or a boolean is judged once per field (its type in the key: True
    # is not 1); anything else (a list, a float: -0.0 == 0.0) each time.
    kind = type(value)
    if kind in _REMEMBERED_LEAF_TYPES and not (isinstance(value, str) and len(value) > _REMEMBERED_STRING_LENGTH):
        problem = _remembered_leaf_problem(parent, key, kind, value)
    else:
        problem = _leaf_problem(parent, key, value)
    if problem is not None:
        out.append(Violation(path, problem))


_REMEMBERED_LEAF_TYPES = frozenset({str, int, bool})
_REMEMBERED_STRING_LENGTH = 1024  # the memo stays small whatever a request holds


@functools.lru_cache(maxsize=1024)
def _remembered_leaf_problem(parent: Descriptor, key: str, kind: type, value: object) -> str | None:
    del kind  # in the key only
    return _leaf_problem(parent, key, value)


def _leaf_problem(parent: Descriptor, key: str, value: object) -> str | None:
    from google.protobuf import json_format, message_factory

    try:
        json_format.ParseDict({key: value}, message_factory.GetMessageClass(parent)())
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        field = _field_named(parent, key)
        expected = _describe(field) if field is not None else "a valid value"
        return f"expected {expected} ({_clean_parse_error(exc)})"
    return None


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
        kind = _WELL_KNOWN_JSON.get(field.message_type.full_name, f"a {field.message_type.name} object")
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
