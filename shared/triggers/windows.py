"""A trigger's windows: record a notification in the window of its event time, close due windows.

Windows (see docs/ARCHITECTURE.md, "Retraining triggers"): a notification belongs to the window
of its event time, `[k * coalesce, (k + 1) * coalesce)`, so every delivery of it maps to the same
window and the same member object, and is recorded once. A window closes at the first tick at
least `trigger_settle_seconds` after its end: sealed (compare-and-swap), listed, decided once in
the trigger's state document (fire, defer = carry forward for `min_objects`/`cooldown_seconds`,
skip), then published (shared/triggers/publishing.py). A crash anywhere is resumed by the next
tick from the window document's state; a second publish is absorbed by submit_job's ledger claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.clock import iso, parse_iso, parse_rfc3339
from shared.log import Logger
from shared.swap import Decided
from shared.triggers import store as paths
from shared.triggers.definition import TriggerDefinition
from shared.triggers.publishing import finish, publish_failure_alert
from shared.triggers.render import Window
from shared.triggers.store import TriggerStore

if TYPE_CHECKING:
    from shared.wiring import Ports

# Clock skew allowed between instances (and GCS) when comparing times across them.
SKEW_SECONDS = 5.0
DECISIONS_KEPT = 200
FINAL_STATES = ("closed", "skipped", "deferred", "failed")

# Windows this instance has seen open: the first notification of a window reads (and creates) its
# document; later ones only write their member object.
_open_windows: set[tuple[str, str]] = set()


def forget_open_windows() -> None:
    _open_windows.clear()


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
    log.info(
        "a notification arrived after its window closed; carried into the open window",
        event="trigger_late",
        key=key,
        carried_to=target.id,
    )
    recorded = record(ports, store, definition, target.start, key, metadata, log, carry_late=False)
    store.touch(member_path, {**metadata, "carried_to": target.id})
    return recorded


# Closing.


def tick(ports: Ports, store: TriggerStore, definitions: Sequence[TriggerDefinition], log: Logger) -> dict[str, int]:
    """Close every window due, trigger by trigger, oldest first; then fire carried data whose
    cooldown is over. Returns counts by outcome."""
    counts: dict[str, int] = {}
    now = ports.clock()
    settle = timedelta(seconds=ports.settings.trigger_settle_seconds)
    for definition in definitions:
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
        store.create(
            path,
            {
                "schema_version": 1,
                "trigger": name,
                "window_id": window_id,
                "window_start": iso(window.start, timespec="seconds"),
                "window_end": iso(window.end, timespec="seconds"),
                "state": "skipped",
                "reason": "no notification was recorded",
                "created_at": iso(now),
            },
        )
        document = store.read(path)[0] or {}
    if document.get("state") == "open":
        document = (
            store.update(
                path, lambda d: {**d, "state": "sealed", "sealed_at": iso(now)} if d and d["state"] == "open" else None
            )
            or document
        )
        document = store.read(path)[0] or document
    if document.get("state") == "sealed":
        count = sum(1 for _ in store.window_members(name, [window_id]))
        decision = decide_window(ports, store, definition, window_id, count, log)
        state = {"fire": "closing", "defer": "deferred", "skip": "skipped"}[decision["action"]]

        def settle_decision(d: dict[str, Any] | None) -> dict[str, Any] | None:
            if d is None or d["state"] != "sealed":
                return None
            return {
                **d,
                "state": state,
                "object_count": count,
                "carried": decision.get("carried", []),
                "decided_at": iso(now),
                "reason": decision.get("reason"),
            }

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
        publish_failure_alert(ports, store, definition, document, log)
        document = store.read(path)[0] or document
    if document.get("state") in FINAL_STATES and not document.get("alert_pending"):
        store.delete(f"{paths.open_prefix(name)}{window_id}")
    return str(document.get("state"))


def decide_window(
    ports: Ports, store: TriggerStore, definition: TriggerDefinition, window_id: str, count: int, log: Logger
) -> dict[str, Any]:
    """Decide a sealed window once, in the trigger's state document (the one place that orders a
    trigger's windows, so carried data is consumed by exactly one request)."""
    now = ports.clock()

    def transition(state: dict[str, Any] | None) -> Decided[dict[str, Any]]:
        state = state or _new_state(definition.name)
        if window_id in state["decided"]:
            return Decided(None, state["decided"][window_id])
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
        return Decided(state, decision)

    return dict(store.swap(paths.state_path(definition.name), transition).decided)


def fire_carried(ports: Ports, store: TriggerStore, definition: TriggerDefinition, log: Logger) -> bool:
    """Carried (deferred) data fires once its cooldown is over and there is enough of it, as the
    latest carried window, without waiting for another window."""
    now = ports.clock()
    state = store.read(paths.state_path(definition.name))[0]
    if (
        not state
        or not state["carry"]
        or _cooling(state, definition, now)
        or state["carry_count"] < max(definition.min_objects, 1)
    ):
        return False

    def transition(state: dict[str, Any] | None) -> Decided[dict[str, Any]] | None:
        if (
            not state
            or not state["carry"]
            or _cooling(state, definition, now)
            or state["carry_count"] < max(definition.min_objects, 1)
        ):
            return None
        latest = state["carry"][-1]
        decision = {
            "action": "fire",
            "carried": state["carry"][:-1],
            "reason": f"{state['carry_count']} carried objects, cooldown over",
        }
        state["decided"][latest] = decision
        _fired(state, latest, now)
        return Decided(state, {**decision, "window_id": latest})

    fired = store.swap(paths.state_path(definition.name), transition)
    if not fired.wrote:
        return False
    chosen = fired.decided
    path = paths.window_path(definition.name, chosen["window_id"])
    store.update(
        path,
        lambda d: (
            {**d, "state": "closing", "carried": chosen["carried"], "reason": chosen["reason"]}
            if d and d["state"] == "deferred"
            else None
        ),
    )
    document = store.read(path)[0]
    if document and document.get("state") == "closing":
        finish(ports, store, definition, document, log.bind(trigger=definition.name, window_id=chosen["window_id"]))
    return True


def _new_state(name: str) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "trigger": name,
        "decided": {},
        "carry": [],
        "carry_count": 0,
        "last_fired_at": None,
        "last_fired_window": None,
    }


def _cooling(state: dict[str, Any], definition: TriggerDefinition, now: datetime) -> bool:
    last = state.get("last_fired_at")
    return bool(
        last and definition.cooldown_seconds and now < parse_iso(last) + timedelta(seconds=definition.cooldown_seconds)
    )


def _fired(state: dict[str, Any], window_id: str, now: datetime) -> None:
    state["carry"], state["carry_count"] = [], 0
    state["last_fired_at"], state["last_fired_window"] = iso(now), window_id


def _trim(state: dict[str, Any]) -> None:
    decided = state["decided"]
    for old in sorted(decided)[: max(0, len(decided) - DECISIONS_KEPT)]:
        del decided[old]
