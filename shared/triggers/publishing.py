"""A closed window's request: its manifest written once, the request rendered, checked, published.

`closing -> closed` (the request published to job-requests with request id
`trg-<trigger>-<window id>`) or `closing -> failed` with `trigger_failed` pending in the window
document until Pub/Sub accepts it (see docs/ARCHITECTURE.md, "Retraining triggers").
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from shared.alerts import Alert, AlertKind
from shared.clock import iso, parse_iso
from shared.errors import Violation
from shared.log import Logger
from shared.requests.request_ids import content_digest
from shared.triggers import store as paths
from shared.triggers.definition import TriggerDefinition
from shared.triggers.render import REQUEST_ID_PREFIX, Window, check_rendered, manifest_uri_for, render, request_id_for
from shared.triggers.store import CorruptTriggerDocument, TriggerStore

if TYPE_CHECKING:
    from shared.wiring import Ports

# The attribute naming the trigger: on a schedule's fire (what on_trigger routes it by) and on the
# job request a window publishes.
TRIGGER_ATTRIBUTE = "spotjobs_trigger"
MANIFEST_SCHEMA_VERSION = 1
# `trg-<trigger>-<window id>` (render.request_id_for; a window id is Window.id's format).
_TRIGGER_REQUEST_ID = re.compile(re.escape(REQUEST_ID_PREFIX) + r"(?P<trigger>.+)-(?P<window>w\d{8}t\d{6}z)")


def finish(
    ports: Ports, store: TriggerStore, definition: TriggerDefinition, document: dict[str, Any], log: Logger
) -> dict[str, Any]:
    """closing -> closed (request published) or failed (alert): manifest, render, check, publish."""
    settings = ports.settings
    name, window_id = definition.name, document["window_id"]
    window = Window(
        parse_iso(document["window_start"]),
        int((parse_iso(document["window_end"]) - parse_iso(document["window_start"])).total_seconds()),
    )
    path = paths.window_path(name, window_id)
    request_id = request_id_for(name, window_id)
    manifest_uri = manifest_uri_for(settings, name, window_id)
    windows = [*document.get("carried", []), window_id]
    manifest = write_manifest(ports, definition, window, windows, request_id, manifest_uri, store)
    if manifest is None:
        violations = [
            Violation(
                "manifest",
                f"{manifest_uri} holds an object this window did not write: not adopted, and nothing is "
                "published for this window",
            )
        ]
    else:
        count = manifest["object_count"]
        envelope = render(
            definition.request, trigger=name, window=window, manifest_uri=manifest_uri, object_count=count
        )
        violations = check_rendered(envelope, settings)
    if violations:
        store.update(
            path,
            lambda d: (
                {
                    **d,
                    "state": "failed",
                    "alert_pending": True,
                    "request_id": request_id,
                    "violations": [str(v) for v in violations],
                }
                if d and d["state"] == "closing"
                else None
            ),
        )
        log.error(
            "a trigger's request fails validation; nothing published",
            event="trigger_failed",
            request_id=request_id,
            violations=[str(v) for v in violations],
        )
        return store.read(path)[0] or document
    # What submit_job accepts under this window's request id: this request, by its digest, written
    # before it is published (a publisher who computes the id in advance gains nothing).
    digest = content_digest(envelope)
    store.update(path, lambda d: {**d, "request_digest": digest} if d and d.get("request_digest") != digest else None)
    message_id = ports.publish(
        settings.job_requests_topic, envelope, request_id=request_id, **{TRIGGER_ATTRIBUTE: name}
    )
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
        return {
            **d,
            "state": "closed",
            "request_id": request_id,
            "manifest_uri": manifest_uri,
            "manifest_objects": count,
            "message_id": message_id,
            "published_at": iso(ports.clock()),
        }

    store.update(path, closed)
    return store.read(path)[0] or document


def published_by_window(store: TriggerStore, request_id: str, body: dict[str, Any]) -> bool:
    """Whether `body`, published under `request_id`, is the request a trigger's window publishes
    under that id: its window document holds the request's digest (`finish`)."""
    match = _TRIGGER_REQUEST_ID.fullmatch(request_id)
    if match is None:
        return False
    document, _ = store.read(paths.window_path(match["trigger"], match["window"]))
    return document is not None and document.get("request_digest") == content_digest(body)


def write_manifest(
    ports: Ports,
    definition: TriggerDefinition,
    window: Window,
    windows: list[str],
    request_id: str,
    uri: str,
    store: TriggerStore,
) -> dict[str, Any] | None:
    """The window's manifest, written once (create-if-absent). An object already there is adopted
    only if it is the manifest this window lists (a resumed close): its path is predictable, so
    presence proves nothing (no job may write there, but a hand or a bug could); None otherwise."""
    from google.api_core.exceptions import PreconditionFailed

    bucket_name, _, object_name = uri.removeprefix("gs://").partition("/")
    blob = ports.storage().bucket(bucket_name).blob(object_name)
    entries = []
    for metadata in store.window_members(definition.name, windows):
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
        blob.upload_from_string(
            json.dumps(manifest, separators=(",", ":")), content_type="application/json", if_generation_match=0
        )
    except PreconditionFailed:
        try:
            found = json.loads(blob.download_as_bytes())
        except (ValueError, RecursionError):
            return None
        return found if found == manifest else None
    return manifest


def publish_failure_alert(
    ports: Ports, store: TriggerStore, definition: TriggerDefinition, document: dict[str, Any], log: Logger
) -> None:
    """trigger_failed, decided once per window (the window document's state) and kept pending there
    until Pub/Sub accepts it: at least once."""
    violations = document.get("violations", [])
    alert = Alert.of(
        AlertKind.TRIGGER_FAILED,
        f"trigger {definition.name}: the request of window {document['window_id']} is invalid; nothing was published",
        request_id=document.get("request_id"),
        details={"trigger": definition.name, "window_id": document["window_id"], "violations": violations},
    )
    ports.publish(ports.settings.ops_alerts_topic, alert.to_json(), **alert.attributes())
    store.update(
        paths.window_path(definition.name, document["window_id"]),
        lambda d: {**d, "alert_pending": False} if d and d.get("alert_pending") else None,
    )


def alert_corrupt_state(ports: Ports, store: TriggerStore, error: CorruptTriggerDocument, log: Logger) -> None:
    """Tell the operators, once per stored version, that a trigger's state document cannot be
    read. No readable document can hold the decision, so it is published first and noted after
    on the corrupt object's metadata: at least once."""
    trigger = error.path[len(paths.PREFIX) :].split("/", 1)[0]
    log.error(
        "a trigger's state cannot be read; nothing is decided on it until it is repaired",
        event="trigger_corrupt",
        trigger=trigger,
        error=str(error),
    )
    if store.corrupt_alerted(error.path):
        return
    alert = Alert.of(
        AlertKind.TRIGGER_CORRUPT,
        f"{error}; repair or restore it (its windows done with are still removed, its deferred ones kept)",
        details={"trigger": trigger, "path": error.path},
        time=iso(ports.clock()),
    )
    ports.publish(ports.settings.ops_alerts_topic, alert.to_json(), **alert.attributes())
    store.note_corrupt_alerted(error.path)
