"""Ledger retention: finished records leave the ledger once nothing can refer to them; and the
upkeep of the active index (`shared.ledger.store`, docs/ARCHITECTURE.md "The active index").

Not to be confused with `shared.pruning.retention`, which decides which *checkpoints* stay.

The sweep walks `requests/` by its listing metadata, a few pages per reconcile pass, one round a
day (`SWEEP_INTERVAL_SECONDS`), resumed from `maintenance/ledger-sweep.json`. So a pass costs at
most `SWEEP_PAGES_PER_RUN` list calls and `SWEEP_RETIREMENTS_PER_RUN` removals more, and only
while a round is under way. On each record:
- one whose listing shows no status (its document written by hand, without metadata) is judged
  by its body, read once, as below; an unreadable one gets its marker, so reconcile meets it;
- one that needs reconciling gets its index marker if it has none (a write by an instance from
  before the index, a marker lost by hand): the index repairs itself within a round;
- one finished (terminal, nothing pending, no re-queue) longer than the retention is removed, its
  referrers first: its index marker (only if stale, see `LedgerStore.remove_stale_marker`), its
  job index entries (a late log line then finds the job is not ours), then, archived to
  `archive/<id>.json` unless `ledger_archive` is off, the record itself, conditional on the
  generation read: any write since (a late event, an effect made pending) keeps it for the next
  round; then the note that it was once found corrupt, if any (`maintenance/corrupt/<id>.json`);
- one whose body does not parse, or parses to another shape than a record's (a field null or of
  another type, a time that is none), while its metadata says finished, is skipped and handed to
  `on_corrupt` (reconcile alerts `ledger_corrupt` once); the sweep moves on and saves its
  position, so one bad record never stalls retention and index repair behind it. A sweep position
  that cannot be read starts the round afresh.

A second sweep (`sweep_orphans_step`, the same bounded turns and daily round, resumed from
`maintenance/ledger-orphan-sweep.json`) walks a record's referrers that name it, `jobs/` and
`manifests/`, and removes one whose record is gone (deleted by hand, or retired while a late
create indexed a second job): once the referrer is older than the retention, the record read after
it was listed is absent, and the delete is conditional on the generation listed. A referrer is
written after its record is claimed (a job's entry after the claim that precedes its create) or,
for a manifest, before a publish no claim can follow once Pub/Sub has dropped the message (31
days, less than any retention): so no record still being created can lose one.

The retention is `ledger_retention_seconds` (0: keep every record), never less than
`MIN_RETENTION_SECONDS` (longer than Pub/Sub keeps any message, so no redelivered request can
find its record gone and claim it anew) nor than the checkpoint pruner's
`finished_retention_seconds` plus a day (so the pruner has applied a finished request's final
policy before its record goes; a folder without a record is then kept as if active).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.clock import parse_rfc3339, utcnow
from shared.jobs import TRIGGER_ID_PREFIX
from shared.ledger.records import CorruptRecord
from shared.ledger.store import JOBS_PREFIX, LedgerStore, ListedObject, ListedRequest, needs_reconcile
from shared.requests.envelope import MANIFESTS_PREFIX

if TYPE_CHECKING:
    from shared.log import Logger
    from shared.settings import Settings

SWEEP_STATE = "ledger-sweep"
ORPHAN_SWEEP_STATE = "ledger-orphan-sweep"
# What names a record and outlives it if the record goes by hand, in listing order.
REFERRER_PREFIXES = (JOBS_PREFIX, MANIFESTS_PREFIX)
SWEEP_INTERVAL_SECONDS = 86400.0
SWEEP_PAGES_PER_RUN = 5
SWEEP_PAGE_SIZE = 1000
SWEEP_RETIREMENTS_PER_RUN = 500  # records removed per pass at most (~5 calls each)
SWEEP_WORKERS = 16
# Pub/Sub keeps a message at most 31 days (topic retention); a day more.
MIN_RETENTION_SECONDS = 32 * 86400.0


@dataclass
class SweepSummary:
    listed: int = 0
    markers_repaired: int = 0
    removed: int = 0
    kept: int = 0  # expired but referred to, or written since listed: the next round
    corrupt: int = 0  # its body does not parse, or is not a record's shape: skipped, to on_corrupt
    unchanged: int = 0
    finished_round: bool = False

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def effective_retention(settings: Settings) -> float:
    """Seconds a finished record stays; 0 = forever."""
    if settings.ledger_retention_seconds <= 0:
        return 0.0
    return max(
        settings.ledger_retention_seconds,
        MIN_RETENTION_SECONDS,
        settings.finished_retention_seconds + 86400.0,
    )


def backfill_index(ledger: LedgerStore, log: Logger, *, page_size: int = SWEEP_PAGE_SIZE) -> int:
    """Build the active index of a ledger from before it: list every record once and mark the
    active ones, then say the index is built. A crash before the end repeats it (markers are
    written only where absent). Returns the markers written."""
    written = 0
    token: str | None = None
    while True:
        rows, token = ledger.list_requests(page_size=page_size, page_token=token)
        for row in rows:
            if row.needs_reconcile:
                written += ledger.mark_active(
                    row.request_id, only_if_absent=True, status=row.status, created_at=row.created_at
                )
        if not token:
            break
    ledger.mark_index_built()
    log.info("built the active index", event="active_index_built", markers_written=written)
    return written


def sweep_step(
    ledger: LedgerStore,
    log: Logger,
    *,
    settings: Settings | None = None,
    now: datetime | None = None,
    pages: int = SWEEP_PAGES_PER_RUN,
    on_corrupt: Callable[[CorruptRecord], None] | None = None,
) -> SweepSummary | None:
    """One bounded turn of the sweep, if a round is due; None if not. A record that cannot be read
    (`CorruptRecord`) is skipped, logged and passed to `on_corrupt` (which alerts)."""
    if settings is None:
        from shared.settings import get_settings

        settings = get_settings()
    now = now or utcnow()
    state = ledger.maintenance_state(SWEEP_STATE)
    finished_at = parse_rfc3339(state.get("finished_at"))  # None when absent or unreadable
    if finished_at and (now - finished_at).total_seconds() < SWEEP_INTERVAL_SECONDS:
        return None
    retention = effective_retention(settings)
    position = state.get("position") if not finished_at else ""
    position = position if isinstance(position, str) else ""
    summary = SweepSummary()
    token: str | None = None
    next_position = position
    budget = SWEEP_RETIREMENTS_PER_RUN
    with ThreadPoolExecutor(SWEEP_WORKERS, thread_name_prefix="ledger-sweep") as pool:
        for _ in range(pages):
            rows, token = ledger.list_requests(page_size=SWEEP_PAGE_SIZE, page_token=token, start_at=position)
            work: list[tuple[str, ListedRequest]] = []
            for row in rows:
                action = _action(row, retention, now)
                if action in ("retire", "judge"):  # a judged record may be retired
                    if budget == 0:  # enough removals for one pass: the next turn starts here
                        token, next_position = "more", row.request_id
                        break
                    budget -= 1
                summary.listed += 1
                next_position = row.request_id  # inclusive: the next turn sees it once more
                if action:
                    work.append((action, row))

            def apply(item: tuple[str, ListedRequest]) -> str:
                try:
                    return _apply(ledger, *item, retention, settings.ledger_archive, now)
                except CorruptRecord as exc:
                    _report_corrupt(exc, log, on_corrupt)
                    return "corrupt"

            for outcome in pool.map(apply, work):
                setattr(summary, outcome, getattr(summary, outcome) + 1)
            if not token or budget == 0:
                break
    summary.finished_round = not token
    ledger.save_maintenance_state(
        SWEEP_STATE,
        {"position": "", "finished_at": now.isoformat()}
        if summary.finished_round
        else {"position": next_position, "finished_at": None},
    )
    log.info("ledger sweep turn", event="ledger_sweep", **summary.to_json())
    return summary


def _report_corrupt(error: CorruptRecord, log: Logger, on_corrupt: Callable[[CorruptRecord], None] | None) -> None:
    if on_corrupt is None:
        log.error(
            "a ledger document cannot be read; the retention sweep skips it",
            event="ledger_corrupt",
            request_id=error.request_id,
            error=str(error),
        )
        return
    try:
        on_corrupt(error)
    except Exception as exc:  # noqa: BLE001 - the alert is tried again when the next round meets it
        log.warning(
            "could not alert a corrupt ledger document; the next sweep round tries again",
            event="ledger_corrupt_unalerted",
            request_id=error.request_id,
            error=f"{type(exc).__name__}: {exc}",
        )


def _action(row: ListedRequest, retention: float, now: datetime) -> str | None:
    if row.status is None:
        return "judge"  # written without its metadata (by hand): only its body tells
    if row.needs_reconcile:
        return "repair"
    if not retention or row.updated is None:
        return None
    if (now - row.updated).total_seconds() < retention:
        return None  # its last write is recent: it cannot have finished long enough ago
    return "retire"


def _apply(
    ledger: LedgerStore,
    action: str,
    row: ListedRequest,
    retention: float,
    archive: bool,
    now: datetime,
) -> str:
    """Carry out one action; the summary field it counts in."""
    if action == "judge":
        judged = _judged(ledger, row)
        if judged is None:
            return "unchanged"  # removed since listed
        row, readable = judged
        action = _action(row, retention, now) if readable else "repair"
        if action is None:
            return "unchanged"
    if action == "repair":
        wrote = ledger.mark_active(row.request_id, only_if_absent=True, status=row.status, created_at=row.created_at)
        return "markers_repaired" if wrote else "unchanged"
    return "removed" if retire(ledger, row.request_id, retention, archive=archive, now=now) else "kept"


def _judged(ledger: LedgerStore, row: ListedRequest) -> tuple[ListedRequest, bool] | None:
    """`row` as its body tells, and whether the body could be read; None if the record is gone."""
    try:
        record, _ = ledger.read(row.request_id)
    except CorruptRecord:
        return row, False  # its marker lets reconcile meet it and say so
    if record is None:
        return None
    status = ListedRequest(row.request_id, record.status, record.has_pending_effects, row.updated)
    return replace(status, created_at=row.created_at or record.created_at, labels=row.labels), True


def retire(ledger: LedgerStore, request_id: str, retention: float, *, archive: bool, now: datetime) -> bool:
    """Remove one finished record past `retention`, its referrers first. False if it must stay."""
    got = ledger.read_raw(request_id)
    if got is None:
        return False
    raw, record, generation = got
    if needs_reconcile(record) or record.requeue is not None:
        return False
    ended_text = record.finished_at or record.updated_at
    ended = parse_rfc3339(ended_text)
    if ended is None:  # a hand-edited time: when it finished cannot be judged
        raise CorruptRecord(request_id, f"its finish time {ended_text!r} is not a time")
    if (now - ended).total_seconds() < retention:
        return False
    marker = ledger.active_entry(request_id)
    status = ListedRequest(request_id, record.status, record.has_pending_effects)
    if marker is not None and not ledger.remove_stale_marker(marker, status, now=now):
        return False  # a marker too young to judge: the next round
    for attempt in record.attempts:
        if attempt.job_id:
            ledger.forget_job(attempt.job_id)
    if archive:
        ledger.archive(request_id, raw)
    if not ledger.remove_record(request_id, generation):
        return False
    ledger.forget_corrupt(request_id)  # a note that it was once found corrupt (and repaired since)
    if request_id.startswith(TRIGGER_ID_PREFIX):
        ledger.forget_manifest(request_id)  # what its window's job trained on: no attempt is left to run
    return True


@dataclass
class OrphanSummary:
    listed: int = 0
    removed: int = 0
    kept: int = 0  # its record exists, or it changed since listed
    corrupt: int = 0  # a job index entry that does not name a request: left for an operator
    finished_round: bool = False

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def sweep_orphans_step(
    ledger: LedgerStore,
    log: Logger,
    *,
    settings: Settings | None = None,
    now: datetime | None = None,
    pages: int = SWEEP_PAGES_PER_RUN,
) -> OrphanSummary | None:
    """One bounded turn of the orphan sweep (the module docstring), if a round is due and records
    are retired at all; None if not."""
    if settings is None:
        from shared.settings import get_settings

        settings = get_settings()
    now = now or utcnow()
    retention = effective_retention(settings)
    if not retention:
        return None  # every record is kept, and so is everything that names one
    state = ledger.maintenance_state(ORPHAN_SWEEP_STATE)
    finished_at = parse_rfc3339(state.get("finished_at"))
    if finished_at and (now - finished_at).total_seconds() < SWEEP_INTERVAL_SECONDS:
        return None
    position = state.get("position") if not finished_at else ""
    position = position if isinstance(position, str) else ""
    summary = OrphanSummary(finished_round=True)
    pages_left = pages
    with ThreadPoolExecutor(SWEEP_WORKERS, thread_name_prefix="ledger-orphans") as pool:
        for prefix in REFERRER_PREFIXES:
            if position > prefix and not position.startswith(prefix):
                continue  # walked in an earlier turn of this round
            start_at = position if position.startswith(prefix) else ""
            token: str | None = None
            reached_end = False
            while pages_left and not reached_end:
                pages_left -= 1
                rows, token = ledger.list_objects(
                    prefix, page_size=SWEEP_PAGE_SIZE, page_token=token, start_at=start_at
                )
                summary.listed += len(rows)
                old = [row for row in rows if row.updated and (now - row.updated).total_seconds() >= retention]
                for outcome in pool.map(lambda row: _retire_orphan(ledger, row, log), old):
                    setattr(summary, outcome, getattr(summary, outcome) + 1)
                position = rows[-1].name if rows else position  # inclusive: seen once more next turn
                reached_end = not token
            if not reached_end:
                summary.finished_round = False
                break
    ledger.save_maintenance_state(
        ORPHAN_SWEEP_STATE,
        {"position": "", "finished_at": now.isoformat()}
        if summary.finished_round
        else {"position": position, "finished_at": None},
    )
    log.info("ledger orphan sweep turn", event="ledger_orphan_sweep", **summary.to_json())
    return summary


def _retire_orphan(ledger: LedgerStore, row: ListedObject, log: Logger) -> str:
    """Remove one old referrer if its record is gone; the summary field it counts in."""
    if row.name.startswith(MANIFESTS_PREFIX):
        request_id = row.name[len(MANIFESTS_PREFIX) : -len(".json")]
    else:
        try:
            entry = ledger.find_job(row.name[len(JOBS_PREFIX) : -len(".json")])
        except CorruptRecord:
            log.warning(
                "a job index entry does not name a request; the orphan sweep leaves it",
                event="ledger_orphan_unreadable",
                object=row.name,
            )
            return "corrupt"
        if entry is None:
            return "kept"  # removed since listed
        request_id = entry.request_id
    if ledger.listed_status(request_id) is not None:  # read after the listing: see the module docstring
        return "kept"
    return "removed" if ledger.remove_orphan(row) else "kept"
