"""Retraining trigger definitions: data, read and checked like job requests (every violation at once).

    {"schema_version": 1, "name": "daily-data",
     "source": {"gcs": {"bucket": "my-data", "prefix": "incoming/", "suffixes": [".parquet"]}},
     "coalesce_seconds": 300, "min_objects": 1, "cooldown_seconds": 0,
     "request": {"custom_job": {...}, "max_attempts": 3}}

Exactly one source: `gcs` (object finalize notifications of a bucket, under a prefix, optionally
ending in one of `suffixes`), `pubsub` (any message on `topic`, optionally only those whose
attributes include every pair of `attributes`), `schedule` (`cron` and `time_zone`, fired by Cloud
Scheduler). `request` is a job-request envelope without `request_id` (derived from the trigger and
the window); its strings may hold the placeholders of `shared.triggers.render.PLACEHOLDERS`.

The same JSON is what `spotjobs triggers apply` stores and what Terraform writes
(`retraining_triggers`), at `triggers/_definitions/<name>.json` in the state bucket.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.errors import InvalidRequest, Violation

TRIGGER_SCHEMA_VERSION = 1
# A label value and a path segment; short enough that "trg-<name>-w<window id>" is a request id.
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
DEFINITION_FIELDS = (
    "schema_version",
    "name",
    "description",
    "source",
    "coalesce_seconds",
    "min_objects",
    "cooldown_seconds",
    "request",
)
SOURCES = ("gcs", "pubsub", "schedule")
DEFAULT_COALESCE_SECONDS = 300
MAX_COALESCE_SECONDS = 7 * 86400
BUCKET_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
TOPIC_PATTERN = re.compile(r"^(projects/[a-z][a-z0-9-]{4,29}/topics/)?[A-Za-z][A-Za-z0-9._~+%-]{2,254}$")
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,?-]+$")


class InvalidTrigger(InvalidRequest):
    """A trigger definition that cannot be stored: every violation, by field path."""


@dataclass(frozen=True)
class TriggerDefinition:
    name: str
    source_kind: str  # gcs | pubsub | schedule
    source: dict[str, Any]
    request: dict[str, Any]
    coalesce_seconds: int = DEFAULT_COALESCE_SECONDS
    min_objects: int = 1
    cooldown_seconds: int = 0
    description: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False)

    # Matching.

    def matches_object(self, bucket: str, name: str) -> bool:
        if self.source_kind != "gcs" or bucket != self.source["bucket"]:
            return False
        if not name.startswith(self.source.get("prefix", "")):
            return False
        suffixes = self.source.get("suffixes") or ()
        return not suffixes or any(name.endswith(s) for s in suffixes)

    def matches_message(self, topic: str, attributes: Mapping[str, str]) -> bool:
        if self.source_kind != "pubsub" or short_topic(self.source["topic"]) != short_topic(topic):
            return False
        wanted = self.source.get("attributes") or {}
        return all(attributes.get(k) == v for k, v in wanted.items())

    @property
    def watched_bucket(self) -> str | None:
        return self.source["bucket"] if self.source_kind == "gcs" else None

    def to_json(self) -> dict[str, Any]:
        return dict(self.raw)


# Set by `spotjobs dead-letters redrive` on a watched topic's message it sends back through
# on_trigger's own topic (never to the watched topic: its other subscribers would get it twice).
SOURCE_TOPIC_ATTRIBUTE = "spotjobs_source_topic"


def short_topic(topic: str) -> str:
    """`projects/P/topics/T` or `T` -> `T` (one spotjobs per project: topics are named, not pathed)."""
    return topic.rsplit("/", 1)[-1]


def parse_definition(document: object) -> TriggerDefinition:
    """A checked definition, or InvalidTrigger naming every violation. The request's job-policy
    check needs settings and is `shared.triggers.render.check_request_template`."""
    definition, violations = read_definition(document)
    if violations or definition is None:
        raise InvalidTrigger(violations)
    return definition


def read_definition(document: object) -> tuple[TriggerDefinition | None, list[Violation]]:
    """Read without raising: the definition (None when unusable) and every violation found."""
    from shared.triggers.render import template_violations

    out: list[Violation] = []
    if isinstance(document, (bytes, str)):
        try:
            document = json.loads(document)
        except (ValueError, RecursionError) as exc:
            return None, [Violation("(body)", f"is not valid JSON ({str(exc)[:120]})")]
    if not isinstance(document, dict):
        return None, [Violation("(body)", "expected a JSON object (a trigger definition)")]
    for key in document:
        if key not in DEFINITION_FIELDS:
            out.append(Violation(key, f"unknown field; a trigger has {', '.join(DEFINITION_FIELDS)}"))
    version = document.get("schema_version")
    if version != TRIGGER_SCHEMA_VERSION or isinstance(version, bool):
        out.append(Violation("schema_version", f"is {version!r}; this version reads {TRIGGER_SCHEMA_VERSION}"))
    name = document.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        out.append(
            Violation(
                "name",
                f"is {name!r}; 1-40 lowercase letters, digits and '-', starting with a letter",
            )
        )
    description = document.get("description", "")
    if not isinstance(description, str):
        out.append(Violation("description", "must be a string"))
    kind, source = _read_source(document.get("source"), out)
    coalesce = _int(document, "coalesce_seconds", DEFAULT_COALESCE_SECONDS, 1, MAX_COALESCE_SECONDS, out)
    min_objects = _int(document, "min_objects", 0 if kind == "schedule" else 1, 0, 10**9, out)
    cooldown = _int(document, "cooldown_seconds", 0, 0, 30 * 86400, out)
    request = document.get("request")
    if not isinstance(request, dict):
        out.append(Violation("request", "is required: a job-request envelope without request_id"))
        request = None
    else:
        if "request_id" in request:
            out.append(Violation("request.request_id", "is derived from the trigger and the window; leave it out"))
        if "custom_job" not in request:
            out.append(Violation("request.custom_job", "is required (a CustomJob in Vertex REST JSON)"))
        out.extend(template_violations(request, "request"))
    if out or kind is None or request is None:
        return None, out
    return (
        TriggerDefinition(
            name=name,  # type: ignore[arg-type]  # checked above
            source_kind=kind,
            source=source,
            request=request,
            coalesce_seconds=coalesce,
            min_objects=min_objects,
            cooldown_seconds=cooldown,
            description=description,
            raw=document,
        ),
        out,
    )


def _int(doc: Mapping[str, Any], key: str, default: int, low: int, high: int, out: list[Violation]) -> int:
    value = doc.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        out.append(Violation(key, f"is {value!r}; expected an integer from {low} to {high}"))
        return default
    return value


def _read_source(value: object, out: list[Violation]) -> tuple[str | None, dict[str, Any]]:
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in SOURCES:
        out.append(Violation("source", f"must be an object with exactly one of {', '.join(SOURCES)}"))
        return None, {}
    kind, body = next(iter(value.items()))
    path = f"source.{kind}"
    if not isinstance(body, dict):
        out.append(Violation(path, "must be an object"))
        return None, {}
    allowed = {
        "gcs": ("bucket", "prefix", "suffixes"),
        "pubsub": ("topic", "attributes"),
        "schedule": ("cron", "time_zone"),
    }[kind]
    for key in body:
        if key not in allowed:
            out.append(Violation(f"{path}.{key}", f"unknown field; expected {', '.join(allowed)}"))
    before = len(out)
    if kind == "gcs":
        bucket = body.get("bucket")
        if not isinstance(bucket, str) or not BUCKET_PATTERN.fullmatch(bucket):
            out.append(Violation(f"{path}.bucket", f"is {bucket!r}; expected a bucket name"))
        if not isinstance(body.get("prefix", ""), str):
            out.append(Violation(f"{path}.prefix", "must be a string"))
        suffixes = body.get("suffixes", [])
        if not isinstance(suffixes, list) or not all(isinstance(s, str) and s for s in suffixes):
            out.append(Violation(f"{path}.suffixes", "must be a list of non-empty strings"))
    elif kind == "pubsub":
        topic = body.get("topic")
        if not isinstance(topic, str) or not TOPIC_PATTERN.fullmatch(topic):
            out.append(Violation(f"{path}.topic", f"is {topic!r}; expected a topic name or projects/P/topics/T"))
        attributes = body.get("attributes", {})
        if not isinstance(attributes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
        ):
            out.append(Violation(f"{path}.attributes", "must map attribute names to string values"))
    else:
        cron = body.get("cron")
        parts = cron.split() if isinstance(cron, str) else []
        if len(parts) != 5 or not all(_CRON_FIELD.fullmatch(p) for p in parts):
            out.append(Violation(f"{path}.cron", f"is {cron!r}; expected five cron fields"))
        if not isinstance(body.get("time_zone", "Etc/UTC"), str):
            out.append(Violation(f"{path}.time_zone", "must be an IANA time zone name"))
    if len(out) > before:
        return None, {}
    return kind, dict(body)
