"""on_trigger's entry: route each message, and record a notification in its triggers' windows.

A message on the triggers topic is one of
- a Cloud Storage notification (attributes `eventType`, `bucketId`, `objectId`,
  `objectGeneration`, `eventTime`; data = the object's JSON, `payloadFormat=JSON_API_V1`);
- a tick, `{"task": "triggers"}` with attribute `task=triggers` (Cloud Scheduler, every minute):
  close every window due;
- a schedule trigger's fire (attribute `spotjobs_trigger=<name>`, Cloud Scheduler);
and a message pushed from a watched topic of a `pubsub` trigger (its push endpoint names the
topic, which becomes the CloudEvent source).

How windows are recorded and closed is shared/triggers/windows.py; how a closed window's request
is published, shared/triggers/publishing.py (see docs/ARCHITECTURE.md, "Retraining triggers").
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.clock import iso, parse_rfc3339, within_publish_range
from shared.delivery import Message, maintenance_message
from shared.log import Logger
from shared.requests.envelope import ORIGINAL_PUBLISH_TIME_ATTRIBUTE
from shared.triggers.definition import SOURCE_TOPIC_ATTRIBUTE, TriggerDefinition, read_definition, short_topic
from shared.triggers.publishing import TRIGGER_ATTRIBUTE
from shared.triggers.render import Window
from shared.triggers.store import TriggerStore
from shared.triggers.windows import close_window, forget_open_windows, record, tick

if TYPE_CHECKING:
    from shared.wiring import Ports

TICK_TASK = "triggers"
FINALIZE = "OBJECT_FINALIZE"
_METADATA_TEXT_LIMIT = 1024


# Definitions, cached per instance (a burst must not list the definitions per notification).

_cache_lock = threading.Lock()
_cache: dict[str, tuple[float, list[TriggerDefinition]]] = {}


def definitions(ports: Ports, store: TriggerStore, log: Logger) -> list[TriggerDefinition]:
    key = ports.settings.state_bucket
    with _cache_lock:
        cached = _cache.get(key)
        if cached and time.monotonic() - cached[0] < ports.settings.trigger_cache_seconds:
            return cached[1]
    loaded = []
    for document in store.list_definitions():
        definition, violations = read_definition(document)
        if definition is None:
            log.error(
                "a stored trigger definition is invalid; it is ignored",
                event="trigger_definition_invalid",
                trigger=document.get("name") if isinstance(document, dict) else None,
                violations=[str(v) for v in violations],
            )
            continue
        loaded.append(definition)
    with _cache_lock:
        _cache[key] = (time.monotonic(), loaded)
    return loaded


def clear_caches() -> None:
    with _cache_lock:
        _cache.clear()
    forget_open_windows()


def trigger_store(ports: Ports) -> TriggerStore:
    return TriggerStore(ports.storage().bucket(ports.settings.state_bucket))


# Entry.


def handle_message(ports: Ports, message: Message, source_topic: str | None, log: Logger) -> None:
    """Route by the topic the message came through (its push endpoint's path, set by the
    deployment, not by a publisher): a watched topic's message is a watched message whatever its
    attributes say. Only on our own topic (the storage notifications, the scheduler's ticks and
    fires, and what an operator redrives) do attributes say what a message is."""
    store = trigger_store(ports)
    attributes = message.attributes
    if short_topic(source_topic or "") not in ("", own_topic(ports)):
        handle_pubsub(ports, store, message, source_topic, log, redriven=False)
        return
    if attributes.get(SOURCE_TOPIC_ATTRIBUTE):  # a watched message redriven through our own topic
        handle_pubsub(ports, store, message, attributes[SOURCE_TOPIC_ATTRIBUTE], log, redriven=True)
    elif "eventType" in attributes and "bucketId" in attributes:
        handle_gcs(ports, store, message, log)
    elif attributes.get("task") == TICK_TASK or maintenance_message(message.data).get("task") == TICK_TASK:
        tick(ports, store, definitions(ports, store, log), log)
    elif TRIGGER_ATTRIBUTE in attributes:
        fire_schedule(ports, store, message, attributes[TRIGGER_ATTRIBUTE], log)
    else:
        handle_pubsub(ports, store, message, source_topic, log)


def handle_gcs(ports: Ports, store: TriggerStore, message: Message, log: Logger) -> None:
    a = message.attributes
    bucket, name, generation = a.get("bucketId", ""), a.get("objectId", ""), a.get("objectGeneration", "")
    if a.get("eventType") != FINALIZE:
        log.debug(
            "ignored a storage event that is not a finalize",
            event="trigger_ignored",
            event_type=a.get("eventType"),
            object=f"gs://{bucket}/{name}",
        )
        return
    matching = [d for d in definitions(ports, store, log) if d.matches_object(bucket, name)]
    if not matching:
        log.debug("ignored an object no trigger watches", event="trigger_ignored", object=f"gs://{bucket}/{name}")
        return
    resource = _json_object(message.data)
    metadata = {
        "kind": "gcs",
        "bucket": bucket,
        "name": name,
        "generation": generation,
        "size": str(resource.get("size", "")),
        "md5Hash": str(resource.get("md5Hash", "")),
        "crc32c": str(resource.get("crc32c", "")),
        "contentType": str(resource.get("contentType", "")),
        "timeCreated": str(resource.get("timeCreated", "")),
    }
    moment = given_time(message, "eventTime", log) or ports.clock()
    key = _key(f"gs://{bucket}/{name}#{generation}")
    for definition in matching:
        record(ports, store, definition, moment, key, metadata, log)


def handle_pubsub(
    ports: Ports, store: TriggerStore, message: Message, source_topic: str | None, log: Logger, *, redriven: bool
) -> None:
    """A watched message; its first publish time is a redrive's (through our own topic) only: on
    a watched topic, that attribute is its publisher's to set."""
    topic = short_topic(source_topic or "")
    matching = [d for d in definitions(ports, store, log) if d.matches_message(topic, message.attributes)]
    if not matching:
        log.debug(
            "ignored a message no trigger matches",
            event="trigger_ignored",
            topic=topic,
            attributes=dict(message.attributes),
        )
        return
    published = first_published(message, log) if redriven else message.publish_time
    attributes = {k: v for k, v in message.attributes.items() if k not in _REDRIVE_ATTRIBUTES}
    metadata = {
        "kind": "pubsub",
        "topic": topic,
        "message_id": message.message_id,
        "publish_time": iso(published) if published else "",
        "attributes": json.dumps(attributes, sort_keys=True)[:_METADATA_TEXT_LIMIT],
        "data": base64.b64encode(message.data[:_METADATA_TEXT_LIMIT]).decode(),
    }
    moment = published or ports.clock()
    key = _key(pubsub_identity(topic, published, message.data, attributes))
    for definition in matching:
        record(ports, store, definition, moment, key, metadata, log)


def fire_schedule(ports: Ports, store: TriggerStore, message: Message, name: str, log: Logger) -> None:
    """A schedule's fire is its window: recorded and closed at once. A second fire of the same
    schedule time (Cloud Scheduler delivers at least once) lands in the same window: recorded,
    and the window's close is already decided."""
    definition = next((d for d in definitions(ports, store, log) if d.name == name), None)
    if definition is None or definition.source_kind != "schedule":
        log.warning("a schedule fired for no schedule trigger", event="trigger_ignored", trigger=name)
        return
    moment = first_published(message, log) or ports.clock()  # a redriven fire is the fire it was
    window = Window.containing(moment, definition.coalesce_seconds)
    metadata = {"kind": "schedule", "message_id": message.message_id, "publish_time": iso(moment)}
    if record(
        ports, store, definition, moment, _key(f"schedule:{message.message_id}"), metadata, log, carry_late=False
    ):
        close_window(ports, store, definition, window.id, log)


# Helpers.


def own_topic(ports: Ports) -> str:
    return short_topic(ports.settings.triggers_topic)


_REDRIVE_ATTRIBUTES = (ORIGINAL_PUBLISH_TIME_ATTRIBUTE, SOURCE_TOPIC_ATTRIBUTE)


def first_published(message: Message, log: Logger) -> datetime | None:
    """When the message was first published: the original publish time a redrive carries, else
    its own."""
    return given_time(message, ORIGINAL_PUBLISH_TIME_ATTRIBUTE, log)


def given_time(message: Message, attribute: str, log: Logger) -> datetime | None:
    """The time `attribute` gives, if it is one the message can have (shared.clock's range around
    its publish time), else its publish time: a year-9999 time would overflow its window's end,
    and one weeks old would land in a window that fires at once."""
    value = message.attributes.get(attribute)
    moment = parse_rfc3339(value)
    published = message.publish_time
    if moment is not None and (published is None or within_publish_range(moment, published)):
        return moment
    if value is not None:
        log.warning(
            "a message's time attribute is refused; its publish time counts",
            event="trigger_time_refused",
            attribute=attribute,
            value=value[:64],
            publish_time=iso(published) if published else None,
        )
    return published


def pubsub_identity(topic: str, published: datetime | None, data: bytes, attributes: dict[str, str]) -> str:
    """A watched message's member identity: what survives a dead-letter redrive (its topic, first
    publish time, data and publisher's attributes), never its message id, which the forwarding
    to the dead-letter topic replaces (docs/ARCHITECTURE.md, "Retraining triggers")."""
    content = hashlib.sha256(data + b"\0" + json.dumps(attributes, sort_keys=True).encode()).hexdigest()
    return f"pubsub:{topic}:{iso(published) if published else ''}:{content}"


def _key(identity: str) -> str:
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def _json_object(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data or b"{}")
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}
