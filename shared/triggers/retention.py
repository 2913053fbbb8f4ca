"""A trigger's windows leave the state bucket once done with: state grows with open windows, never
with the notifications of the past (docs/ARCHITECTURE.md, "What the state bucket keeps").

A window's objects (its document, one member per notification, its seal) are needed until its
request is published and no notification can name the window any more: a redelivery of one it
listed must find it closed (or the notification would open it again and be published twice). Pub/Sub
keeps a message at most 31 days, so a window is removed `RETENTION_SECONDS` after its end, and only
- if its document is done with (`FINAL_STATES`, no alert pending), or it has none (a removal cut
  short: its document goes last);
- unless it is still wanted for a manifest: carried forward by the trigger's state, a window still
  closing (its open marker), or carried by one (its decision and document name what it carries).
  A state that cannot be read (`trigger_corrupt`, alerted once by the tick) names nothing: every
  deferred window is kept then, the only kind a state carries.

A deleted trigger records no notification and closes no window: its objects all go once none has
been written for `RETENTION_SECONDS` (its windows ended before that, and a trigger applied again
under its name meanwhile is not deleted any more).

The tick sweeps each trigger at most once every `SWEEP_EVERY_SECONDS` (noted in its state
document, so once in all, whatever the instances): a listing of the windows older than the
retention (bounded by the listing's end, so it costs the old windows only), at most
`REMOVALS_PER_SWEEP` objects removed; what is left is removed by the next tick's sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from shared.clock import iso, parse_rfc3339
from shared.log import Logger
from shared.triggers import store as paths
from shared.triggers.definition import TriggerDefinition
from shared.triggers.render import Window
from shared.triggers.store import FINAL_STATES, CorruptTriggerDocument, TriggerStore

# Pub/Sub keeps a message at most 31 days (topic retention); a day more.
RETENTION_SECONDS = 32 * 86400.0
SWEEP_EVERY_SECONDS = 3600.0
REMOVALS_PER_SWEEP = 1000  # a tick's worth of deletes; the next tick carries on
# In the trigger's state document: when its last sweep finished (one sweep an hour in all).
SWEPT_FIELD = "windows_retired_at"
# When the objects of deleted triggers were last looked for.
DELETED_SWEEP_PATH = f"{paths.PREFIX}_retention.json"


def retire_windows(
    store: TriggerStore,
    definition: TriggerDefinition,
    now: datetime,
    log: Logger,
    on_corrupt: Callable[[CorruptTriggerDocument], None] | None = None,
) -> int:
    """Remove the trigger's windows that are done with and past the retention, if a sweep is due.
    Returns the objects removed. A state that cannot be read is handed to `on_corrupt` (the tick
    alerts it once) and the sweep goes on without it, keeping every deferred window (the state
    may still carry it); it sweeps every tick then, having nowhere to note its sweep. A failure
    is logged and left to the next sweep: housekeeping never fails the tick that closes windows."""
    path = paths.state_path(definition.name)
    try:
        try:
            state: dict[str, Any] | None = store.read(path)[0]
            if state is None:
                return 0  # no window was ever decided
        except CorruptTriggerDocument as exc:
            _report_corrupt(exc, log, on_corrupt)
            state = None
        swept = parse_rfc3339(state.get(SWEPT_FIELD)) if state else None  # None when unreadable: due
        if swept and timedelta(0) <= now - swept < timedelta(seconds=SWEEP_EVERY_SECONDS):
            return 0
        removed, finished = _sweep(store, definition, state, now, log)
        if finished and state is not None:
            store.update(path, lambda current: {**current, SWEPT_FIELD: iso(now)} if current else None)
    except Exception as exc:  # noqa: BLE001 - the next sweep tries again
        log.warning(
            "could not remove old trigger windows; the next sweep tries again",
            event="trigger_retention_failed",
            trigger=definition.name,
            error=f"{type(exc).__name__}: {exc}",
        )
        return 0
    if removed:
        log.info(
            "removed trigger windows past their retention",
            event="trigger_windows_retired",
            trigger=definition.name,
            objects_removed=removed,
        )
    return removed


def _report_corrupt(
    error: CorruptTriggerDocument, log: Logger, on_corrupt: Callable[[CorruptTriggerDocument], None] | None
) -> None:
    if on_corrupt is None:
        log.error(
            "a trigger's state cannot be read; the retention sweep keeps its deferred windows",
            event="trigger_corrupt",
            error=str(error),
        )
        return
    try:
        on_corrupt(error)
    except Exception as exc:  # noqa: BLE001 - the next sweep meets it again and tries again
        log.warning(
            "could not alert a corrupt trigger state; the next sweep tries again",
            event="trigger_corrupt_unalerted",
            error=f"{type(exc).__name__}: {exc}",
        )


def _sweep(
    store: TriggerStore, definition: TriggerDefinition, state: dict[str, Any] | None, now: datetime, log: Logger
) -> tuple[int, bool]:
    """(objects removed, whether every window due was looked at). A window whose document cannot
    be read is kept (what it still names is unknown) and the windows behind it are swept; with
    no readable `state`, so is every deferred window."""
    name = definition.name
    horizon = now - timedelta(seconds=RETENTION_SECONDS)
    # Windows starting before the one containing the horizon ended by it (the document's own end
    # is checked too: the coalescing may have been changed since the window was cut).
    candidates = store.window_ids_before(name, Window.containing(horizon, definition.coalesce_seconds).id)
    if not candidates:
        return 0, True
    wanted = _still_wanted(store, name, state)
    removed = 0
    for window_id in candidates:
        if window_id in wanted:
            continue
        try:
            document = store.read(paths.window_path(name, window_id))[0]
            if document is not None and not _done_by(document, horizon):
                continue
            if document is not None and state is None and document["state"] == "deferred":
                continue  # an unreadable state may still carry it
        except (CorruptTriggerDocument, ValueError) as exc:
            log.warning(
                "a trigger window's document cannot be read; it is kept, the windows behind it are swept",
                event="trigger_window_unreadable",
                trigger=name,
                window_id=window_id,
                error=f"{type(exc).__name__}: {exc}",
            )
            continue
        removed += store.delete_window(name, window_id, REMOVALS_PER_SWEEP - removed)
        if removed >= REMOVALS_PER_SWEEP:
            return removed, False  # the next tick carries on
    return removed, True


def _done_by(document: dict[str, Any], horizon: datetime) -> bool:
    """Whether a window document is done with and ended before `horizon`; ValueError when it has
    no such state or end."""
    state, end = document.get("state"), parse_rfc3339(document.get("window_end"))
    if not isinstance(state, str) or end is None:
        raise ValueError(f"state {state!r} and window_end {document.get('window_end')!r} are not a window's")
    return state in FINAL_STATES and not document.get("alert_pending") and end <= horizon


def _still_wanted(store: TriggerStore, name: str, state: dict[str, Any] | None) -> set[str]:
    """Windows a manifest may still list: carried forward, still closing, or carried by one. The
    state is read before the open markers are listed: a window fired since carried its windows
    in the state read, or has its marker listed (written before its decision, removed after its
    close) with its decision or document naming them. A list of another shape raises ValueError:
    what it names is unknown, so nothing is removed. Without a readable state, the closing
    windows' documents alone name what they carry."""
    closing = set(store.list_names(paths.open_prefix(name)))
    decided = state.get("decided", {}) if state is not None else {}
    wanted = (_window_ids(state, "carry") if state is not None else set()) | closing
    for window_id in closing:
        decision = decided.get(window_id, {}) if isinstance(decided, dict) else None
        if not isinstance(decision, dict):
            raise ValueError(f"trigger {name}'s decision of {window_id} is {str(decision)[:60]}, not an object")
        wanted |= _window_ids(decision, "carried")
        wanted |= _window_ids(store.read(paths.window_path(name, window_id))[0] or {}, "carried")
    return wanted


def _window_ids(document: dict[str, Any], field: str) -> set[str]:
    """The window ids a document's `field` lists; ValueError when it is no list of them."""
    ids = document.get(field, [])
    if not isinstance(ids, list) or not all(isinstance(window_id, str) for window_id in ids):
        raise ValueError(f"{field} is {str(ids)[:60]}, not a list of window ids")
    return set(ids)


def retire_deleted_triggers(store: TriggerStore, now: datetime, log: Logger) -> int:
    """Remove the objects of triggers without a stored definition (one this version cannot read
    is still a definition) once none was written for the retention, if a sweep is due (hourly,
    noted in `DELETED_SWEEP_PATH`). Returns the objects removed; a failure is logged and left to
    the next sweep."""
    horizon = now - timedelta(seconds=RETENTION_SECONDS)
    removed = 0
    try:
        swept = _deleted_swept_at(store)
        if swept and timedelta(0) <= now - swept < timedelta(seconds=SWEEP_EVERY_SECONDS):
            return 0
        defined = {stored.removesuffix(".json") for stored in store.list_names(paths.DEFINITIONS_PREFIX)}
        for name in store.trigger_names():
            if name in defined:
                continue
            prefix = f"{paths.PREFIX}{name}/"
            objects = [(key, created) for key, _metadata, created in store.iter_members(prefix)]
            if any(created is None or created > horizon for _key, created in objects):
                continue
            for key, _created in objects[: REMOVALS_PER_SWEEP - removed]:
                store.delete(prefix + key)
            removed = min(removed + len(objects), REMOVALS_PER_SWEEP)
            if removed == REMOVALS_PER_SWEEP:
                break  # the next tick carries on
        else:
            store.put(DELETED_SWEEP_PATH, {"swept_at": iso(now)})
    except Exception as exc:  # noqa: BLE001 - the next sweep tries again
        log.warning(
            "could not remove a deleted trigger's objects; the next sweep tries again",
            event="trigger_retention_failed",
            error=f"{type(exc).__name__}: {exc}",
        )
        return 0
    if removed:
        log.info("removed the objects of deleted triggers", event="trigger_deleted_retired", objects_removed=removed)
    return removed


def _deleted_swept_at(store: TriggerStore) -> datetime | None:
    """When deleted triggers were last looked for; None when never, or when the note cannot be
    read (the sweep then rewrites it)."""
    try:
        note = store.read(DELETED_SWEEP_PATH)[0] or {}
    except CorruptTriggerDocument:
        return None
    return parse_rfc3339(note.get("swept_at"))
