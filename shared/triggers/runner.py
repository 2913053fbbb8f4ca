"""on_trigger's logic: record notifications into windows, close due windows, publish one request each.

A message on the triggers topic is one of
- a Cloud Storage notification (attributes `eventType`, `bucketId`, `objectId`,
  `objectGeneration`, `eventTime`; data = the object's JSON, `payloadFormat=JSON_API_V1`);
- a tick, `{"task": "triggers"}` with attribute `task=triggers` (Cloud Scheduler, every minute):
  close every window due;
- a schedule trigger's fire (attribute `spotjobs_trigger=<name>`, Cloud Scheduler);
and a message pushed from a watched topic of a `pubsub` trigger (its push endpoint names the
topic, which becomes the CloudEvent source).

Windows (see docs/ARCHITECTURE.md, "Retraining triggers"): a notification belongs to the window
of its event time, `[k * coalesce, (k + 1) * coalesce)`, so every delivery of it maps to the same
window and the same member object, and is recorded once. A window closes at the first tick at
least `trigger_settle_seconds` after its end: sealed (compare-and-swap), listed, decided once in
the trigger's state document (fire, defer = carry forward for `min_objects`/`cooldown_seconds`,
skip), then its manifest is written, its request rendered, checked and published with request id
`trg-<trigger>-<window id>`. A crash anywhere is resumed by the next tick from the window
document's state; a second publish is absorbed by submit_job's ledger claim.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.alerts import Alert
from shared.clock import iso, parse_iso, parse_rfc3339
from shared.delivery import Message, maintenance_message
from shared.log import Logger
from shared.triggers import store as paths
from shared.triggers.definition import TriggerDefinition, read_definition, short_topic
from shared.triggers.render import (
    Window,
    check_rendered,
    manifest_uri_for,
    render,
    request_id_for,
)
from shared.triggers.store import TriggerStore

if TYPE_CHECKING:
    from shared.wiring import Ports

TICK_TASK = "triggers"
TRIGGER_ATTRIBUTE = "spotjobs_trigger"
FINALIZE = "OBJECT_FINALIZE"
# Clock skew allowed between instances (and GCS) when comparing times across them.
SKEW_SECONDS = 5.0
MANIFEST_SCHEMA_VERSION = 1
DECISIONS_KEPT = 200
_METADATA_TEXT_LIMIT = 1024
FINAL_STATES = ("closed", "skipped", "deferred", "failed")


# Definitions, cached per instance (a burst must not list the definitions per notification).

_cache_lock = threading.Lock()
_cache: dict[str, tuple[float, list[TriggerDefinition]]] = {}
# Windows this instance has seen open: the first notification of a window reads (and creates) its
# document; later ones only write their member object.
_open_windows: set[tuple[str, str]] = set()


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
        _open_windows.clear()


def trigger_store(ports: Ports) -> TriggerStore:
    return TriggerStore(ports.storage().bucket(ports.settings.state_bucket))


# Entry.


def handle_message(ports: Ports, message: Message, source_topic: str | None, log: Logger) -> None:
    store = trigger_store(ports)
    attributes = message.attributes
    if "eventType" in attributes and "bucketId" in attributes:
        handle_gcs(ports, store, message, log)
    elif attributes.get("task") == TICK_TASK or maintenance_message(message.data).get("task") == TICK_TASK:
        tick(ports, store, log)
    elif TRIGGER_ATTRIBUTE in attributes:
        fire_schedule(ports, store, message, attributes[TRIGGER_ATTRIBUTE], log)
    else:
        handle_pubsub(ports, store, message, source_topic, log)


def handle_gcs(ports: Ports, store: TriggerStore, message: Message, log: Logger) -> None:
    a = message.attributes
    bucket, name, generation = a.get("bucketId", ""), a.get("objectId", ""), a.get("objectGeneration", "")
    if a.get("eventType") != FINALIZE:
        log.debug("ignored a storage event that is not a finalize", event="trigger_ignored", event_type=a.get("eventType"), object=f"gs://{bucket}/{name}")
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
    moment = parse_rfc3339(a.get("eventTime")) or message.publish_time or ports.clock()
    key = _key(f"gs://{bucket}/{name}#{generation}")
    for definition in matching:
        record(ports, store, definition, moment, key, metadata, log)


def handle_pubsub(ports: Ports, store: TriggerStore, message: Message, source_topic: str | None, log: Logger) -> None:
    topic = short_topic(source_topic or "")
    matching = [d for d in definitions(ports, store, log) if d.matches_message(topic, message.attributes)]
    if not matching:
        log.debug("ignored a message no trigger matches", event="trigger_ignored", topic=topic, attributes=dict(message.attributes))
        return
    metadata = {
        "kind": "pubsub",
        "topic": topic,
        "message_id": message.message_id,
        "publish_time": iso(message.publish_time) if message.publish_time else "",
        "attributes": json.dumps(dict(message.attributes), sort_keys=True)[:_METADATA_TEXT_LIMIT],
        "data": base64.b64encode(message.data[:_METADATA_TEXT_LIMIT]).decode(),
    }
    moment = message.publish_time or ports.clock()
    key = _key(f"pubsub:{topic}:{message.message_id}")
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
    moment = message.publish_time or ports.clock()
    window = Window.containing(moment, definition.coalesce_seconds)
    metadata = {"kind": "schedule", "message_id": message.message_id, "publish_time": iso(moment)}
    if record(ports, store, definition, moment, _key(f"schedule:{message.message_id}"), metadata, log, carry_late=False):
        close_window(ports, store, definition, window.id, log)


# Recording.


def record(
    ports: Ports,
    store: TriggerStore,
    definition: TriggerDefinition,
    moment: datetime,
    key: str,
    metadata: dict[str, str],
    log: Logger,
    *,
    carry_late: bool = True,
) -> bool:
    """Record one notification in the window of `moment`. True if recorded now, False if it was
    already recorded (a redelivery) or dropped."""
    name = definition.name
    window = Window.containing(moment, definition.coalesce_seconds)
    log = log.bind(trigger=name, window_id=window.id)
    if (name, window.id) not in _open_windows:
        document = _ensure_window(store, definition, window, ports.clock())
        if document["state"] != "open":
            return _late(ports, store, definition, window, key, metadata, log, carry_late)
        if len(_open_windows) > 10_000:  # bounded: a forgotten entry only costs one read
            _open_windows.clear()
        _open_windows.add((name, window.id))
    if not store.touch(f"{paths.members_prefix(name, window.id)}{key}", metadata):
        log.debug("a notification already recorded", event="trigger_duplicate", key=key)
        return False
    now = ports.clock()
    if now + timedelta(seconds=SKEW_SECONDS) >= window.end + timedelta(seconds=ports.settings.trigger_settle_seconds):
        # The window may have been sealed meanwhile: if the member came after, it may be missing
        # from the manifest, so it is carried forward (at least once, never lost).
        document = store.read(paths.window_path(name, window.id))[0] or {}
        if document.get("state") not in (None, "open"):
            _open_windows.discard((name, window.id))
            return _late(ports, store, definition, window, key, metadata, log, carry_late)
    return True


def _ensure_window(store: TriggerStore, definition: TriggerDefinition, window: Window, now: datetime) -> dict[str, Any]:
    path = paths.window_path(definition.name, window.id)
    document = store.read(path)[0]
    if document is not None:
        return document
    # The open marker first: a window document without its marker would never be closed.
    store.touch(f"{paths.open_prefix(definition.name)}{window.id}")
    fresh = {
        "schema_version": 1,
        "trigger": definition.name,
        "window_id": window.id,
        "window_start": iso(window.start, timespec="seconds"),
        "window_end": iso(window.end, timespec="seconds"),
        "state": "open",
        "created_at": iso(now),
    }
    if store.create(path, fresh):
        return fresh
    return store.read(path)[0] or fresh


def _late(
    ports: Ports,
    store: TriggerStore,
    definition: TriggerDefinition,
    window: Window,
    key: str,
    metadata: dict[str, str],
    log: Logger,
    carry_late: bool,
) -> bool:
    """A notification for a window already sealed: a redelivery of one it listed, or new data
    late for it, which goes to the window open now."""
    name = definition.name
    member_path = f"{paths.members_prefix(name, window.id)}{key}"
    existing = store.member(member_path)
    document = store.read(paths.window_path(name, window.id))[0] or {}
    sealed_at = parse_rfc3339(document.get("sealed_at"))
    if existing is not None and (
        (existing.metadata or {}).get("carried_to")
        or (sealed_at and existing.time_created and existing.time_created < sealed_at - timedelta(seconds=SKEW_SECONDS))
    ):
        log.debug("a notification already recorded in a closed window", event="trigger_duplicate", key=key)
        return False
    if not carry_late:
        log.debug("a notification for a closed window, not carried", event="trigger_late_dropped", key=key)
        return False
    now = ports.clock()
    target = Window.containing(now, definition.coalesce_seconds)
    if target.id == window.id:
        target = Window(window.end, definition.coalesce_seconds)
    log.info("a notification arrived after its window closed; carried into the open window", event="trigger_late", key=key, carried_to=target.id)
    recorded = record(ports, store, definition, target.start, key, metadata, log, carry_late=False)
    store.touch(member_path, {**metadata, "carried_to": target.id})
    return recorded


# Closing.


def tick(ports: Ports, store: TriggerStore, log: Logger) -> dict[str, int]:
    """Close every window due, trigger by trigger, oldest first; then fire carried data whose
    cooldown is over. Returns counts by outcome."""
    counts: dict[str, int] = {}
    now = ports.clock()
    settle = timedelta(seconds=ports.settings.trigger_settle_seconds)
    for definition in definitions(ports, store, log):
        for window_id in sorted(store.list_names(paths.open_prefix(definition.name))):
            try:
                window = Window.from_id(window_id, definition.coalesce_seconds)
            except ValueError:
                store.delete(f"{paths.open_prefix(definition.name)}{window_id}")
                continue
            document = store.read(paths.window_path(definition.name, window_id))[0]
            end = parse_iso(document["window_end"]) if document else window.end
            if now < end + settle:
                break  # later windows end later still
            outcome = close_window(ports, store, definition, window_id, log)
            counts[outcome] = counts.get(outcome, 0) + 1
        if fire_carried(ports, store, definition, log):
            counts["closed"] = counts.get("closed", 0) + 1
    log.info("triggers tick", event="triggers_tick", **{f"windows_{k}": v for k, v in counts.items()})
    return counts


def close_window(ports: Ports, store: TriggerStore, definition: TriggerDefinition, window_id: str, log: Logger) -> str:
    """Move one window on from whatever state a previous (maybe crashed) close left it in."""
    name = definition.name
    path = paths.window_path(name, window_id)
    log = log.bind(trigger=name, window_id=window_id)
    now = ports.clock()
    document = store.read(path)[0]
    if document is None:
        window = Window.from_id(window_id, definition.coalesce_seconds)
        store.create(path, {
            "schema_version": 1, "trigger": name, "window_id": window_id,
            "window_start": iso(window.start, timespec="seconds"),
            "window_end": iso(window.end, timespec="seconds"),
            "state": "skipped", "reason": "no notification was recorded", "created_at": iso(now),
        })
        document = store.read(path)[0] or {}
    if document.get("state") == "open":
        document = store.update(path, lambda d: {**d, "state": "sealed", "sealed_at": iso(now)} if d and d["state"] == "open" else None) or document
        document = store.read(path)[0] or document
    if document.get("state") == "sealed":
        count = count_members(store, name, [window_id])
        decision = decide(ports, store, definition, window_id, count, log)
        state = {"fire": "closing", "defer": "deferred", "skip": "skipped"}[decision["action"]]

        def settle_decision(d: dict[str, Any] | None) -> dict[str, Any] | None:
            if d is None or d["state"] != "sealed":
                return None
            return {**d, "state": state, "object_count": count, "carried": decision.get("carried", []), "decided_at": iso(now), "reason": decision.get("reason")}

        store.update(path, settle_decision)
        document = store.read(path)[0] or document
        if state != "closing":
            log.info(
                f"window {state}: {decision.get('reason')}",
                event=f"trigger_window_{state}",
                object_count=count,
            )
    if document.get("state") == "closing":
        document = finish(ports, store, definition, document, log)
    if document.get("state") == "failed" and document.get("alert_pending"):
        _publish_failure(ports, store, definition, document, log)
        document = store.read(path)[0] or document
    if document.get("state") in FINAL_STATES and not document.get("alert_pending"):
        store.delete(f"{paths.open_prefix(name)}{window_id}")
    return str(document.get("state"))


def decide(ports: Ports, store: TriggerStore, definition: TriggerDefinition, window_id: str, count: int, log: Logger) -> dict[str, Any]:
    """Decide a sealed window once, in the trigger's state document (the one place that orders a
    trigger's windows, so carried data is consumed by exactly one request)."""
    now = ports.clock()
    result: dict[str, Any] = {}

    def transition(state: dict[str, Any] | None) -> dict[str, Any] | None:
        state = state or _new_state(definition.name)
        if window_id in state["decided"]:
            result.update(state["decided"][window_id])
            return None
        total = count + state["carry_count"]
        cooling = _cooling(state, definition, now)
        if count == 0 and definition.source_kind != "schedule":
            decision = {"action": "skip", "reason": "no new object"}
        elif total < definition.min_objects or cooling:
            reason = (
                f"in cooldown until {iso(parse_iso(state['last_fired_at']) + timedelta(seconds=definition.cooldown_seconds))}"
                if cooling
                else f"{total} objects, fewer than min_objects={definition.min_objects}"
            )
            decision = {"action": "defer", "reason": reason + "; carried forward"}
            state["carry"] = [*state["carry"], window_id]
            state["carry_count"] = total
        else:
            decision = {"action": "fire", "carried": list(state["carry"]), "reason": f"{total} objects"}
            _fired(state, window_id, now)
        state["decided"][window_id] = decision
        _trim(state)
        result.clear()
        result.update(decision)
        return state

    store.update(paths.state_path(definition.name), transition)
    return result


def fire_carried(ports: Ports, store: TriggerStore, definition: TriggerDefinition, log: Logger) -> bool:
    """Carried (deferred) data fires once its cooldown is over and there is enough of it, as the
    latest carried window, without waiting for another window."""
    now = ports.clock()
    state = store.read(paths.state_path(definition.name))[0]
    if not state or not state["carry"] or _cooling(state, definition, now) or state["carry_count"] < max(definition.min_objects, 1):
        return False
    chosen: dict[str, Any] = {}

    def transition(state: dict[str, Any] | None) -> dict[str, Any] | None:
        if not state or not state["carry"] or _cooling(state, definition, now) or state["carry_count"] < max(definition.min_objects, 1):
            return None
        latest = state["carry"][-1]
        decision = {"action": "fire", "carried": state["carry"][:-1], "reason": f"{state['carry_count']} carried objects, cooldown over"}
        state["decided"][latest] = decision
        _fired(state, latest, now)
        chosen.update(decision, window_id=latest)
        return state

    store.update(paths.state_path(definition.name), transition)
    if not chosen:
        return False
    path = paths.window_path(definition.name, chosen["window_id"])
    store.update(path, lambda d: {**d, "state": "closing", "carried": chosen["carried"], "reason": chosen["reason"]} if d and d["state"] == "deferred" else None)
    document = store.read(path)[0]
    if document and document.get("state") == "closing":
        finish(ports, store, definition, document, log.bind(trigger=definition.name, window_id=chosen["window_id"]))
    return True


def _new_state(name: str) -> dict[str, Any]:
    return {"schema_version": 1, "trigger": name, "decided": {}, "carry": [], "carry_count": 0, "last_fired_at": None, "last_fired_window": None}


def _cooling(state: dict[str, Any], definition: TriggerDefinition, now: datetime) -> bool:
    last = state.get("last_fired_at")
    return bool(last and definition.cooldown_seconds and now < parse_iso(last) + timedelta(seconds=definition.cooldown_seconds))


def _fired(state: dict[str, Any], window_id: str, now: datetime) -> None:
    state["carry"], state["carry_count"] = [], 0
    state["last_fired_at"], state["last_fired_window"] = iso(now), window_id


def _trim(state: dict[str, Any]) -> None:
    decided = state["decided"]
    for old in sorted(decided)[: max(0, len(decided) - DECISIONS_KEPT)]:
        del decided[old]


def count_members(store: TriggerStore, name: str, window_ids: Iterable[str]) -> int:
    return sum(1 for _ in _members(store, name, window_ids))


def _members(store: TriggerStore, name: str, window_ids: Iterable[str]) -> Iterable[dict[str, str]]:
    for window_id in window_ids:
        for _key_, metadata in store.iter_members(paths.members_prefix(name, window_id)):
            if not metadata.get("carried_to"):
                yield metadata


def finish(ports: Ports, store: TriggerStore, definition: TriggerDefinition, document: dict[str, Any], log: Logger) -> dict[str, Any]:
    """closing -> closed (request published) or failed (alert): manifest, render, check, publish."""
    settings = ports.settings
    name, window_id = definition.name, document["window_id"]
    window = Window(parse_iso(document["window_start"]), int((parse_iso(document["window_end"]) - parse_iso(document["window_start"])).total_seconds()))
    path = paths.window_path(name, window_id)
    request_id = request_id_for(name, window_id)
    manifest_uri = manifest_uri_for(settings, name, window_id)
    windows = [*document.get("carried", []), window_id]
    manifest = write_manifest(ports, definition, window, windows, request_id, manifest_uri, store)
    count = manifest["object_count"]
    envelope = render(definition.request, trigger=name, window=window, manifest_uri=manifest_uri, object_count=count)
    violations = check_rendered(envelope, settings)
    if violations:
        store.update(path, lambda d: {**d, "state": "failed", "alert_pending": True, "request_id": request_id, "violations": [str(v) for v in violations]} if d and d["state"] == "closing" else None)
        log.error("a trigger's request fails validation; nothing published", event="trigger_failed", request_id=request_id, violations=[str(v) for v in violations])
        return store.read(path)[0] or document
    message_id = ports.publish(settings.job_requests_topic, envelope, request_id=request_id, **{TRIGGER_ATTRIBUTE: name})
    log.info(
        "a trigger published its window's job request",
        event="trigger_fired",
        request_id=request_id,
        object_count=count,
        windows=windows,
        manifest_uri=manifest_uri,
        published_message_id=message_id,
    )

    def closed(d: dict[str, Any] | None) -> dict[str, Any] | None:
        if d is None or d["state"] != "closing":
            return None
        return {**d, "state": "closed", "request_id": request_id, "manifest_uri": manifest_uri, "manifest_objects": count, "message_id": message_id, "published_at": iso(ports.clock())}

    store.update(path, closed)
    return store.read(path)[0] or document


def write_manifest(ports: Ports, definition: TriggerDefinition, window: Window, windows: list[str], request_id: str, uri: str, store: TriggerStore) -> dict[str, Any]:
    """The window's manifest, written once (create-if-absent: a resumed close reads the first)."""
    from google.api_core.exceptions import PreconditionFailed

    bucket_name, _, object_name = uri.removeprefix("gs://").partition("/")
    blob = ports.storage().bucket(bucket_name).blob(object_name)
    entries = []
    for metadata in _members(store, definition.name, windows):
        entry = {k: v for k, v in metadata.items() if v != ""}
        if metadata.get("kind") == "gcs":
            entry = {"uri": f"gs://{metadata['bucket']}/{metadata['name']}", **entry}
            if "size" in entry:
                entry["size"] = int(entry["size"])
        entries.append(entry)
    entries.sort(key=lambda e: (e.get("uri", ""), e.get("generation", ""), e.get("message_id", "")))
    manifest = {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "trigger": definition.name,
        "source": {definition.source_kind: definition.source},
        "request_id": request_id,
        "window_id": window.id,
        "window_start": iso(window.start, timespec="seconds"),
        "window_end": iso(window.end, timespec="seconds"),
        "windows": windows,
        "object_count": len(entries),
        "total_bytes": sum(e.get("size", 0) for e in entries if isinstance(e.get("size"), int)),
        "objects": entries,
    }
    try:
        blob.upload_from_string(json.dumps(manifest, separators=(",", ":")), content_type="application/json", if_generation_match=0)
    except PreconditionFailed:
        return json.loads(blob.download_as_bytes())
    return manifest


def _publish_failure(ports: Ports, store: TriggerStore, definition: TriggerDefinition, document: dict[str, Any], log: Logger) -> None:
    """trigger_failed, decided once per window (the window document's state) and kept pending there
    until Pub/Sub accepts it: at least once."""
    violations = document.get("violations", [])
    alert = Alert(
        kind="trigger_failed",
        severity="ERROR",
        message=f"trigger {definition.name}: the request of window {document['window_id']} is invalid; nothing was published",
        request_id=document.get("request_id"),
        details={"trigger": definition.name, "window_id": document["window_id"], "violations": violations},
    )
    ports.publish(ports.settings.ops_alerts_topic, alert.to_json(), **alert.attributes())
    store.update(paths.window_path(definition.name, document["window_id"]), lambda d: {**d, "alert_pending": False} if d and d.get("alert_pending") else None)


# Helpers.


def _key(identity: str) -> str:
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def _json_object(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data or b"{}")
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}

