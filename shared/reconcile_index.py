"""Which requests a reconcile pass takes (`shared.reconcile`): from the ledger's active index, at
the cursor, at most a pass's share; stale markers removed on the way, and the ledger's retention
and orphan sweeps given their bounded turns; after the pass, the cursor set at the first request
its budget or time deferred (`resume_at_deferred`). Also the pass's summary, which this selection
fills in first (what was listed, where the pass started, whether more are left)."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from weakref import WeakSet

from shared.clock import utcnow
from shared.errors import is_retryable
from shared.fleet.recording import close_waits
from shared.ledger.records import CorruptRecord
from shared.ledger.run_lock import ledger_bucket
from shared.ledger.store import ActiveEntry, LedgerStore, ListedRequest, marker_removable
from shared.log import Logger

RECONCILE_TASK = "reconcile"
_indexed: WeakSet[LedgerStore] = WeakSet()  # ledgers this process saw indexed


@dataclass
class ReconcileSummary:
    listed: int = 0  # ledger documents listed
    active: int = 0  # of those, not terminal or with effects pending: the ones reconciled
    truncated: bool = False  # more active requests remain for the next run
    started_at: str = ""  # the request the run started at ("" = the first)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    decisions: collections.Counter[str] = field(default_factory=collections.Counter)
    vertex: dict[str, Any] = field(default_factory=dict)  # its Vertex calls (shared/reconcile_vertex.py)

    def to_json(self) -> dict[str, Any]:
        return {
            "vertex": self.vertex,
            "listed": self.listed,
            "active": self.active,
            "truncated": self.truncated,
            "started_at": self.started_at,
            "outcomes": dict(sorted(self.outcomes.items())),
            "decisions": dict(sorted(self.decisions.items())),
        }


def requests_to_reconcile(
    ledger: LedgerStore,
    summary: ReconcileSummary,
    log: Logger,
    *,
    page_size: int,
    limit: int,
    on_corrupt: Callable[[CorruptRecord], None] | None = None,
    recordless: list[ActiveEntry] | None = None,
) -> list[str]:
    """Up to `limit` requests that need reconciling, from the cursor on, in the order of the
    active index (`active/<id>` markers; docs/ARCHITECTURE.md, "The active index"): a pass lists
    the active requests and those finished since the last passes, never every request ever made.
    A marker may be stale, so each one's record is read (in parallel, and kept for the
    `ledger.get` that reconciles it: one read per active request) and a stale one old enough is
    removed. The cursor then names the first one left over, or "" once the index ran out, so the
    next run starts from the first again. A ledger from before the index is listed in full once,
    writing the active records' markers (then the process remembers it is built). Then the
    retention sweep and the orphan sweep (`shared.ledger.retention`) take their bounded turns.
    `recordless`: where the stale markers of requests without a record go, not removed here: a job
    of such an id (its record deleted by a person) may live, which only the pass's stray sweep
    can tell (`remove_recordless_markers`, seed 54)."""
    from shared.ledger.retention import backfill_index, sweep_orphans_step, sweep_step

    if ledger not in _indexed and not ledger.index_built():
        backfill_index(ledger, log, page_size=page_size)
    _indexed.add(ledger)  # built, it stays built: every write keeps its markers
    summary.started_at = ledger.cursor(RECONCILE_TASK)
    active: list[str] = []
    stale: list[tuple[ActiveEntry, ListedRequest | None]] = []
    next_start = ""
    token: str | None = None
    with ThreadPoolExecutor(INDEX_CHECKERS, thread_name_prefix="reconcile-index") as pool:
        while not summary.truncated:
            entries, token = ledger.list_active(page_size=page_size, page_token=token, start_at=summary.started_at)
            for entry, status in zip(entries, pool.map(lambda e: _status(ledger, e), entries)):
                summary.listed += 1
                if status is not _UNKNOWN and (status is None or not status.needs_reconcile):
                    stale.append((entry, status))
                    continue
                if len(active) >= limit:
                    summary.truncated = True
                    next_start = entry.request_id
                    break
                active.append(entry.request_id)  # the status may be stale: the record tells
            if not token:
                break
        now = utcnow()
        retiring = [e.request_id for e, status in stale if status is not None and marker_removable(e, status, now)]
        ledger.keep_prefetched([*active, *retiring])  # a retired request's record closes its waits
        if recordless is not None:
            recordless.extend(entry for entry, status in stale if status is None)
            stale = [(entry, status) for entry, status in stale if status is not None]
        removed = sum(pool.map(lambda s: _retire(ledger, *s, now=now, log=log), stale))
    summary.active = len(active)
    if stale:
        log.info(
            "finished requests left the active index",
            event="active_index_pruned",
            stale=len(stale),
            removed=removed,
        )
    if next_start != summary.started_at:
        try:
            ledger.save_cursor(RECONCILE_TASK, next_start)
        except Exception as exc:  # noqa: BLE001 - the next run repeats this range: a line, no retry
            error = f"{type(exc).__name__}: {exc}"
            log.warning("could not save the reconcile cursor", event="reconcile_cursor_unsaved", error=error)
    sweeps = (
        ("retention", "ledger_sweep_failed", lambda: sweep_step(ledger, log, on_corrupt=on_corrupt)),
        ("orphan", "ledger_orphan_sweep_failed", lambda: sweep_orphans_step(ledger, log)),
    )
    for name, event, sweep in sweeps:
        try:
            sweep()
        except Exception as exc:  # noqa: BLE001 - a sweep waits for the next pass; never fails this one
            error = f"{type(exc).__name__}: {exc}"
            log.warning(f"the ledger {name} sweep failed; the next pass resumes it", event=event, error=error)
    return active


def remove_recordless_markers(
    ledger: LedgerStore, entries: Iterable[ActiveEntry], swept: dict[str, set[str]], locations: Iterable[str]
) -> None:
    """After the pass's stray sweep (`swept`: the request ids of the unfinished jobs it listed, per
    location): remove the stale markers of requests without a record (`requests_to_reconcile`'s
    `recordless`) whose id no job the sweep listed names, once it listed every location it sweeps.
    A marker stands while a job of its id lives (seed 10178: a fresh message of the id looks for
    that job only while the marker is there), and a pass that died before its sweep, or whose
    sweep missed a location, cannot say none lives (seed 54)."""
    if not set(locations) <= set(swept):
        return
    live = set().union(*swept.values())
    now = utcnow()
    for entry in entries:
        if entry.request_id not in live:
            _remove_stale(ledger, entry, None, now=now)


def resume_at_deferred(ledger: LedgerStore, task: str, deferred: Iterable[str], log: Logger) -> None:
    """Save `task`'s cursor at the first request the pass deferred for its budget or its time
    (`deferred`: their ids, in the active index's order), so the next pass starts there. Else a
    pass needing more gets than its budget (the listing refused: every job a get) reads the same
    first requests every time and defers the others for good, their jobs never read again, a hung
    one never said stuck (seed 659). A request deferred because its region stalled (`LocationStalled`,
    its own call's timeout) is not among them: the region may stall there again on every pass,
    each would start at it, and the requests before it in the index would never be read again."""
    first = next(iter(deferred), None)
    if first is None:
        return
    try:
        ledger.save_cursor(task, first)
    except Exception as exc:  # noqa: BLE001 - the next pass starts where its selection left off: a line
        error = f"{type(exc).__name__}: {exc}"
        log.warning("could not save the reconcile cursor", event="reconcile_cursor_unsaved", error=error)


# Markers checked at once (one read each, mostly waiting), and what a failed check gives: the
# request is reconciled (its record then tells), never skipped.
INDEX_CHECKERS = 32
_UNKNOWN = ListedRequest("", None, False)


def _retire(
    ledger: LedgerStore, entry: ActiveEntry, status: ListedRequest | None, *, now: datetime, log: Logger
) -> bool:
    """Remove a finished request's stale marker, once what closed its Spot attempts' waits is in
    the fleet store (`shared.fleet.recording.close_waits`): the pass that retires it is the last
    to meet it. A failed write keeps the marker, so the next pass writes them again."""
    if status is not None and marker_removable(entry, status, now):
        try:
            record = ledger.get(entry.request_id)
            if record is not None:
                close_waits(ledger_bucket(ledger), record)
        except Exception as exc:  # noqa: BLE001 - the marker stays: the next pass closes them
            error = f"{type(exc).__name__}: {exc}"
            log.log(
                "WARNING" if is_retryable(exc) else "ERROR",
                "the waits of a finished request were not closed in the fleet store; kept for the next pass",
                event="fleet_waits_not_closed",
                request_id=entry.request_id,
                error=error,
            )
            return False
    return _remove_stale(ledger, entry, status, now=now)


def _remove_stale(ledger: LedgerStore, entry: ActiveEntry, status: ListedRequest | None, *, now: datetime) -> bool:
    try:
        return ledger.remove_stale_marker(entry, status, now=now)
    except Exception:  # noqa: BLE001 - a stale marker costs a read per pass until removed
        return False


def _status(ledger: LedgerStore, entry: ActiveEntry) -> ListedRequest | None:
    try:
        return ledger.prefetch(entry.request_id)
    except Exception:  # noqa: BLE001 - see _UNKNOWN
        return _UNKNOWN
