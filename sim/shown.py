"""What `spotjobs dashboard` and `spotjobs status` show, as invariants of the world once quiet
(registered in `sim.invariants`; docs/simulator.md, "Promises checked"):

- `alerts_logged`: every alert the outbox published on the ops-alerts topic is in the alerts log
  (`alerts/<day>/...`, shared/deciding/alert_log.py) the dashboard's Alerts page reads. The log
  entry is written before the publish, so no fault excuses a missing one. A trigger's own alerts
  (`trigger_failed`, `trigger_corrupt`) do not go through the outbox: they are left out;
- `active_query_finds_the_active`: the active query (`find_records`, `status --status active` and
  the Requests page as it opens: one listing of the active index, its markers' status and creation
  deciding which records are read) finds every request whose record is not terminal, and no other.
  The markers' status is a hint noted after each status change; a fault may leave it one change
  behind, which may miscount the statuses on top (not checked) but never hides an active request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.alerts import AlertKind

if TYPE_CHECKING:
    from sim.world import Violation, World

# Published by shared/triggers/ itself, not through the outbox (see the module docstring).
NOT_LOGGED = frozenset({AlertKind.TRIGGER_FAILED.value, AlertKind.TRIGGER_CORRUPT.value})


def alerts_logged(world: World) -> list[Violation]:
    from shared.alerts import Alert
    from shared.deciding.alert_log import entry_name
    from sim.invariants import violation

    stored = world.storage.objects(world.settings.state_bucket)
    out = []
    for message in world.pubsub.on(world.settings.ops_alerts_topic):
        payload = message.json()
        if not isinstance(payload, dict) or payload.get("kind") in NOT_LOGGED:
            continue
        name = entry_name(Alert(**payload))
        if name not in stored:
            out.append(
                violation(
                    "alerts_logged",
                    f"alert {payload.get('kind')} of {payload.get('request_id')} was published "
                    f"(message {message.message_id}) and is not in the alerts log ({name})",
                )
            )
    return out


def active_query_finds_the_active(world: World) -> list[Violation]:
    from shared.ledger.records import CorruptRecord
    from shared.ledger.store import LedgerStore
    from sim.invariants import left_unreadable, records, violation
    from spotjobs.cli.find import ACTIVE, Query, find_records

    if left_unreadable(world):
        return []  # a record a person made unreadable stops the query itself (`ledger_corrupt` says so)
    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
    try:
        found = find_records(ledger, Query(frozenset({ACTIVE})), limit=1_000_000)
    except CorruptRecord:
        return []
    active = {record.request_id for record in records(world) if not record.is_terminal}
    shown = {record.request_id for record in found.records}
    return [
        violation("active_query_finds_the_active", f"{request_id}: {why}")
        for request_ids, why in (
            (active - shown, "active, and not found by the active query"),
            (shown - active, "found by the active query, and not active"),
        )
        for request_id in sorted(request_ids)
    ]


QUIESCENCE = [alerts_logged, active_query_finds_the_active]
