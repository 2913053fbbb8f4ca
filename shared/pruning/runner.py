"""What the prune_checkpoints function and `spotjobs prune` call: the maintenance-message
handler, and one run over one request or every request (bounded per run, resumed by a cursor).
Clients come in as arguments; google.* loads only when a run builds its store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shared.deciding.outbox import alert_corrupt_record, publish_alert
from shared.delivery import maintenance_message, maintenance_task
from shared.errors import TransientError
from shared.ledger.records import CorruptRecord
from shared.ledger.run_lock import run_lock
from shared.ledger.store import LedgerStore
from shared.log import Logger, logger
from shared.pruning.execute import prune_requests
from shared.pruning.folders import CheckpointLayout, is_request_folder_name
from shared.pruning.journal import ReportJournal
from shared.pruning.report import REPORT_LIMIT, PruneResult, log_report, report_alert
from shared.pruning.retention import PrunePolicy
from shared.pruning.store import (
    GcsPruneStore,
    emulator_in_use,
    widen_connection_pool,
)
from shared.settings import Settings
from shared.wiring import Ports

if TYPE_CHECKING:
    from datetime import datetime

    from google.cloud.storage import Bucket, Client

    from shared.delivery import Message

PRUNE_TASK = "prune"


@dataclass(frozen=True)
class PruneTask:
    request_id: str | None = None  # None: every request, bounded per run


def parse_maintenance_task(data: bytes) -> tuple[str | None, PruneTask | None]:
    """The message's `task`, and the prune task it asks for (None if not a valid prune task)."""
    body = maintenance_message(data)
    task = maintenance_task(data)
    if task != PRUNE_TASK:
        return task, None
    request_id = body.get("request_id")
    if request_id is None:
        return task, PruneTask()
    if isinstance(request_id, str) and is_request_folder_name(request_id):
        return task, PruneTask(request_id)
    return task, None


def bounded(request_ids: Iterable[str], limit: int) -> tuple[list[str], bool]:
    """At most `limit` ids, and whether the listing ended within them."""
    taken: list[str] = []
    for request_id in request_ids:
        if len(taken) >= limit:
            return taken, False
        taken.append(request_id)
    return taken, True


def run_prune(
    storage: Client,
    settings: Settings,
    *,
    request_id: str | None = None,
    bounded_run: bool = False,
    dry_run: bool = False,
    workers: int | None = None,
    verify_generation: bool | None = None,
    log: Logger = logger,
    on_corrupt: Callable[[CorruptRecord], None] | None = None,
    journal: ReportJournal | None = None,
) -> PruneResult:
    """Prune one request, or every request (bounded per run and resumed by a cursor when
    `bounded_run`), in the managed checkpoint bucket. `verify_generation` defaults to
    `emulator_in_use()`. `on_corrupt`: told of each request skipped for an unreadable record;
    `journal`: records what is deleted before it is, until the report is out (the handler's)."""
    workers = workers or settings.prune_workers
    widen_connection_pool(storage, workers)
    layout = CheckpointLayout.from_settings(settings)
    if verify_generation is None:
        verify_generation = emulator_in_use()
    store = GcsPruneStore(storage.bucket(layout.bucket), verify_generation=verify_generation)
    state_bucket = storage.bucket(settings.state_bucket)
    ledger = LedgerStore(state_bucket)
    cursor: str | None = None
    if request_id is not None:
        ids: Iterable[str] = [request_id]
    elif bounded_run:
        start = ledger.cursor(PRUNE_TASK)
        ids, finished = bounded(store.list_request_ids(layout.root, after=start), settings.prune_requests_per_run)
        cursor = "" if finished or not ids else ids[-1]
    else:
        ids = store.list_request_ids(layout.root)
    result = prune_requests(
        store,
        ids,
        read_record=ledger.get,
        layout=layout,
        policy=PrunePolicy.from_settings(settings),
        workers=workers,
        dry_run=dry_run,
        on_corrupt=on_corrupt,
        before_deleting=journal.record if journal is not None else None,
    )
    if cursor is not None and not dry_run:
        result.next_cursor = cursor
        try:
            ledger.save_cursor(PRUNE_TASK, cursor)
        except Exception as exc:  # without it the next run starts over: worth a line, not a retry
            log.warning("could not save the prune cursor", event="prune_cursor_unsaved", error=str(exc))
    return result


def handle_maintenance(message: Message, log: Logger, ports: Ports) -> None:
    """The prune_checkpoints handler: prune on a prune task, ignore other maintenance tasks.

    Its report alert belongs to a run, not to one request's record: what the run deletes is
    recorded in the state bucket before it is deleted and kept until the report is published
    (shared/pruning/journal.py), so a failed publish fails the delivery and the redelivered run
    reports it, though it finds nothing left to delete."""
    settings = ports.settings
    name, task = parse_maintenance_task(message.data)
    if name != PRUNE_TASK:
        log.debug("ignored a maintenance message for another task", event="ignored_task", task=name)
        return
    if task is None:
        log.warning("ignored a prune task without a valid request_id", event="invalid_prune_task")
        return
    log = log.bind(request_id=task.request_id)
    assert ports.storage is not None, "prune_checkpoints is wired with a storage client"
    if task.request_id is not None:  # one request: idempotent and short, may overlap anything
        _prune_and_report(ports, task, message.message_id, log)
        return
    # Every request: one run at a time; a tick during a run ends quietly (shared/ledger/run_lock.py).
    state_bucket = ports.storage().bucket(settings.state_bucket)
    with run_lock(state_bucket, PRUNE_TASK, log, clock=ports.clock) as held:
        if held:
            _prune_and_report(ports, task, message.message_id, log)
            compact_fleet(state_bucket, ports.clock(), log)


def compact_fleet(state_bucket: Bucket, now: datetime, log: Logger) -> None:
    """Fold every machine class's old attempts into one observation each (`shared.fleet.store.compact`).
    Advisory, as the observations are: a failure is a warning, and the next hourly run folds them."""
    from google.api_core.exceptions import GoogleAPICallError

    from shared.errors import is_retryable
    from shared.fleet import store

    try:
        for machine_class in store.classes(state_bucket):
            folded = store.compact(state_bucket, machine_class, now)
            if folded:
                log.info(
                    "fleet observations compacted",
                    event="fleet_compacted",
                    machine_class=machine_class.key,
                    attempts=folded,
                )
    except Exception as exc:
        if not (is_retryable(exc) or isinstance(exc, GoogleAPICallError)):
            raise
        log.warning("could not compact the fleet observations", event="fleet_compaction_failed", error=str(exc))


def _prune_and_report(ports: Ports, task: PruneTask, message_id: str, log: Logger) -> None:
    assert ports.storage is not None
    every_request = task.request_id is None
    storage = ports.storage()
    journal = ReportJournal(storage.bucket(ports.settings.state_bucket), message_id, ports.clock)
    result = run_prune(
        storage,
        ports.settings,
        request_id=task.request_id,
        bounded_run=every_request,
        log=log,
        on_corrupt=lambda error: alert_corrupt_record(ports, error, log),
        journal=journal,
    )
    for report in result.reports:
        log_report(log, report)
    log.info(
        "prune run finished",
        event="prune_summary",
        next_cursor=result.next_cursor,
        **result.summary,
    )
    # As many as one report names: the rest stay for the next run to report (settled only once named).
    earlier = journal.left_behind(log)[:REPORT_LIMIT]
    alert = report_alert(result, earlier=earlier)
    if alert is not None:
        publish_alert(ports, alert)
    journal.settle(earlier, log)
    if result.retryable_errors:
        raise TransientError(f"{result.retryable_errors} transient failures; the run is idempotent")
