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

import functools
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.alerts import Alert, AlertKind
from shared.clock import iso, parse_iso, parse_rfc3339
from shared.errors import is_retryable
from shared.log import Logger
from shared.swap import Decided
from shared.triggers import store as paths
from shared.triggers.definition import TriggerDefinition
from shared.triggers.publishing import alert_corrupt_state, finish, publish_failure_alert
from shared.triggers.render import Window
from shared.triggers.retention import retire_deleted_triggers, retire_windows
from shared.triggers.store import FINAL_STATES, TriggerStore

if TYPE_CHECKING:
    from shared.wiring import Ports

# Clock skew allowed between instances (and GCS) when comparing times across them.
SKEW_SECONDS = 5.0
DECISIONS_KEPT = 200
CLOSE_ATTEMPTS_BEFORE_ALERT = 5  # failed ticks in a row on one window before trigger_failed
# A tick begins no close (dozens of storage calls) this long in: it ends inside on_trigger's 60 s.
CLOSING_SECONDS = 20.0

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
    created = store.create_empty(f"{paths.members_prefix(name, window.id)}{key}", metadata)
    if created is None:
        log.debug("a notification already recorded", event="trigger_duplicate", key=key)
        return False
    now = ports.clock()
    if now + timedelta(seconds=SKEW_SECONDS) >= window.end + timedelta(seconds=ports.settings.trigger_settle_seconds):
        # The window may have been sealed meanwhile: a member created after its seal object is
        # not in its listing, so it is carried forward (exactly once: see _late).
        if _after_seal(store, name, window.id, created.time_created):
            _open_windows.discard((name, window.id))
            return _late(ports, store, definition, window, key, metadata, log, carry_late)
    return True


def _after_seal(store: TriggerStore, name: str, window_id: str, created: datetime | None) -> bool:
    """Whether a member created at `created` (the server's clock) missed the window's listing."""
    sealed = store.sealed_time(name, window_id)
    if sealed is not None:
        return created is None or created >= sealed
    # Sealed by a version without the seal object: the window document says it.
    return (store.read(paths.window_path(name, window_id))[0] or {}).get("state") not in (None, "open")


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
    carried_to = (existing.metadata or {}).get("carried_to") if existing is not None else None
    sealed = store.sealed_time(name, window.id)
    listed = (
        (
            existing.time_created < sealed
            if sealed is not None
            # Sealed by a version without the seal object: by the function's clock, with a margin.
            else bool(sealed_at and existing.time_created < sealed_at - timedelta(seconds=SKEW_SECONDS))
        )
        if existing is not None and existing.time_created
        else False
    )
    if existing is not None and not carried_to and listed:
        log.debug("a notification already recorded in a closed window", event="trigger_duplicate", key=key)
        return False
    if not carry_late:
        log.debug("a notification for a closed window, not carried", event="trigger_late_dropped", key=key)
        return False
    now = ports.clock()
    target = Window.containing(now, definition.coalesce_seconds)
    if target.id == window.id:
        target = Window(window.end, definition.coalesce_seconds)
    # The carry is recorded on the member first, where it cannot be skipped: a redelivery (or a
    # crash before the next line) goes to the same target, never to a new one, and a target
    # sealed meanwhile carries it on from there (its own record says whether it was listed).
    target_id = store.claim_carry(member_path, metadata, carried_to or target.id)
    if target_id != carried_to:
        log.info(
            "a notification arrived after its window closed; carried into the open window",
            event="trigger_late",
            key=key,
            carried_to=target_id,
        )
    target = Window.from_id(target_id, definition.coalesce_seconds)
    return record(ports, store, definition, target.start, key, metadata, log)


# Closing.


def tick(ports: Ports, store: TriggerStore, definitions: Sequence[TriggerDefinition], log: Logger) -> dict[str, int]:
    """Close every window due, trigger by trigger, oldest first; then fire carried data whose
    cooldown is over. Returns counts by outcome."""
    counts: dict[str, int] = {}
    now = ports.clock()
    settle = timedelta(seconds=ports.settings.trigger_settle_seconds)
    closing_ends = now + timedelta(seconds=CLOSING_SECONDS)
    for definition in definitions:
        for window_id in sorted(store.list_names(paths.open_prefix(definition.name))):
            if ports.clock() >= closing_ends:  # this window and the later ones wait for the next tick
                counts["left_for_next_tick"] = counts.get("left_for_next_tick", 0) + 1
                break
            try:
                window = Window.from_id(window_id, definition.coalesce_seconds)
            except ValueError:
                store.delete(f"{paths.open_prefix(definition.name)}{window_id}")
                continue
            document = store.read(paths.window_path(definition.name, window_id))[0]
            end = parse_iso(document["window_end"]) if document else window.end
            if now < end + settle:
                break  # later windows end later still
            outcome = _close_or_retry_later(ports, store, definition, window_id, log)
            counts[outcome] = counts.get(outcome, 0) + 1
        try:
            if fire_carried(ports, store, definition, log):
                counts["closed"] = counts.get("closed", 0) + 1
        except Exception as exc:  # noqa: BLE001 - its open marker is written first: the next tick resumes it
            log.warning(
                "firing carried data failed; the next tick resumes it",
                event="trigger_close_failed",
                trigger=definition.name,
                error=f"{type(exc).__name__}: {exc}",
            )
        retire_windows(
            store, definition, now, log, on_corrupt=functools.partial(alert_corrupt_state, ports, store, log=log)
        )
    retire_deleted_triggers(store, now, log)
    log.info("triggers tick", event="triggers_tick", **{f"windows_{k}": v for k, v in counts.items()})
    return counts


def _close_or_retry_later(
    ports: Ports, store: TriggerStore, definition: TriggerDefinition, window_id: str, log: Logger
) -> str:
    """close_window, and on a failure (Pub/Sub refusing the request, GCS) leave the open marker
    for the next tick; `trigger_failed` is alerted once when CLOSE_ATTEMPTS_BEFORE_ALERT ticks
    in a row have failed on the window."""
    try:
        return close_window(ports, store, definition, window_id, log)
    except Exception as exc:  # noqa: BLE001 - one window must not stop the tick; the next resumes it
        error = f"{type(exc).__name__}: {exc}"
        transient = is_retryable(exc)
    path = paths.window_path(definition.name, window_id)
    document = store.update(path, lambda d: {**d, "close_failures": d.get("close_failures", 0) + 1} if d else None)
    failures = (document or {}).get("close_failures", 0)
    # What a retry may mend (a 503) is a WARNING; `trigger_failed` says a window that keeps failing.
    log.log(
        "WARNING" if transient else "ERROR",
        "could not close a trigger window; the next tick resumes it",
        event="trigger_close_failed",
        trigger=definition.name,
        window_id=window_id,
        attempts=failures,
        error=error,
    )
    if document and failures >= CLOSE_ATTEMPTS_BEFORE_ALERT and not document.get("failure_alerted"):
        alert = Alert.of(
            AlertKind.TRIGGER_FAILED,
            f"trigger {definition.name}: window {window_id} could not be closed after {failures} "
            f"ticks ({error}); it is retried every tick",
            request_id=document.get("request_id"),
            details={"trigger": definition.name, "window_id": window_id, "error": error},
        )
        try:
            ports.publish(ports.settings.ops_alerts_topic, alert.to_json(), **alert.attributes())
        except Exception:  # noqa: BLE001 - alerted on a later tick instead
            return "retrying"
        store.update(path, lambda d: {**d, "failure_alerted": True} if d else None)
    return "retrying"


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
        store.touch(paths.seal_path(name, window_id))  # first: what divides listed from carried
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
    if document.get("state") == "deferred":
        document = _resume_fired(store, definition, window_id, document)
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
    # The open marker first, so the tick after a failed publish or a crash at any later step
    # resumes this window (close_window: deferred and decided to fire -> closing -> published).
    store.touch(f"{paths.open_prefix(definition.name)}{state['carry'][-1]}")

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
    close_window(ports, store, definition, fired.decided["window_id"], log)
    return True


def _resume_fired(
    store: TriggerStore, definition: TriggerDefinition, window_id: str, document: dict[str, Any]
) -> dict[str, Any]:
    """A deferred window the trigger's state decided to fire (its carried data, cooldown over)
    goes to closing with what it carries; any other deferred window stays as it is."""
    state = store.read(paths.state_path(definition.name))[0] or {}
    decision = state.get("decided", {}).get(window_id, {})
    if decision.get("action") != "fire":
        return document
    path = paths.window_path(definition.name, window_id)
    store.update(
        path,
        lambda d: (
            {**d, "state": "closing", "carried": decision.get("carried", []), "reason": decision.get("reason")}
            if d and d["state"] == "deferred"
            else None
        ),
    )
    return store.read(path)[0] or document


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
