"""Carrying out plans: every request planned, and every delete done, on a bounded thread pool.

Every delete carries `if_generation_match` with the generation listed; 412 (rewritten) or 404
(someone else deleted it) is skipped and counted. A prefix checkpoint loses what makes it
complete first (its commit marker, a Hugging Face trainer_state.json: layout.completion_objects), so a trainer looking for a checkpoint to resume from never sees a committed one with
shards missing; if the marker changed since planning, or the checkpoint is being written again,
it is left alone. Transient errors are retried with backoff by the storage client (every delete
is generation-guarded, hence idempotent), and a later run finishes what a failed one left. Before
every single delete the object is checked to lie inside the request's checkpoints folder.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime, timedelta
from typing import Any

from spotjobs_kit.layout import Checkpoint, Kind, ListedObject, completion_objects

from shared.clock import utcnow
from shared.ledger.records import CorruptRecord, RequestRecord
from shared.pruning.folders import CheckpointLayout, OutOfScope
from shared.pruning.plan import RequestPlan, plan_request
from shared.pruning.report import PruneResult, RequestReport, checkpoint_entry
from shared.pruning.retention import PrunePolicy
from shared.pruning.store import DeleteOutcome, PruneStore

UNREADABLE_RECORD = "its ledger record cannot be read: nothing is pruned until it is repaired"

# A unit of work for the pool; it returns its follow-ups (a planned request: its deletes).
Task = Callable[[], Iterable["Task"]]


def prune_requests(
    store: PruneStore,
    request_ids: Iterable[str],
    *,
    read_record: Callable[[str], RequestRecord | None],
    layout: CheckpointLayout,
    policy: PrunePolicy,
    workers: int,
    dry_run: bool = False,
    now: datetime | None = None,
    on_corrupt: Callable[[CorruptRecord], None] | None = None,
    before_deleting: Callable[[str, list[dict[str, Any]]], None] | None = None,
) -> PruneResult:
    """Plan and (unless `dry_run`) carry out the pruning of each request, in parallel.
    `on_corrupt` is told of each request whose ledger record cannot be read (it is skipped);
    `before_deleting` of what will be deleted from a request, before its first delete (the
    report's outbox, shared/pruning/journal.py; if it raises, nothing of that request is)."""
    started = time.monotonic()
    now = now or utcnow()
    execution = _Execution(
        store, layout, policy, dry_run=dry_run, now=now, on_corrupt=on_corrupt, before_deleting=before_deleting
    )
    reports: list[RequestReport] = []

    def tasks() -> Iterator[Task]:
        for request_id in request_ids:
            report = RequestReport(request_id, dry_run)
            reports.append(report)
            yield execution.request_task(request_id, report, read_record)

    run_tasks(tasks(), workers)
    return PruneResult(reports, dry_run, time.monotonic() - started, store.calls())


def run_tasks(first: Iterable[Task], workers: int) -> None:
    """Run tasks on `workers` threads. A task returns follow-up tasks, which run before more of
    `first` is drawn: memory stays bounded by the work in flight, not by the work in total."""
    backlog: deque[Task] = deque()
    source = iter(first)
    limit = max(1, workers) * 2
    # In submission order (a dict, not a set): the follow-ups of tasks done together queue in the
    # order of their tasks, not of the futures' addresses, so one run's order of work is the
    # same in every process (the simulator replays a seed by it).
    running: dict[Future[Iterable[Task]], None] = {}
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="prune") as pool:
        while True:
            while len(running) < limit and (task := backlog.popleft() if backlog else next(source, None)) is not None:
                running[pool.submit(task)] = None
            if not running:
                return
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in [future for future in running if future in done]:
                del running[future]
                backlog.extend(future.result())


class _Execution:
    """Turns plans into delete tasks for one run; every delete passes through `_delete`."""

    def __init__(
        self,
        store: PruneStore,
        layout: CheckpointLayout,
        policy: PrunePolicy,
        *,
        dry_run: bool,
        now: datetime,
        on_corrupt: Callable[[CorruptRecord], None] | None = None,
        before_deleting: Callable[[str, list[dict[str, Any]]], None] | None = None,
    ) -> None:
        self.on_corrupt = on_corrupt
        self.before_deleting = before_deleting
        self.store = store
        self.layout = layout
        self.policy = policy
        self.dry_run = dry_run
        self.now = now
        # Requests are usually written by one framework: its marker is tried first everywhere.
        self.marker_hint: str | None = None

    def request_task(
        self,
        request_id: str,
        report: RequestReport,
        read_record: Callable[[str], RequestRecord | None],
    ) -> Task:
        def plan() -> Iterable[Task]:
            try:
                record = read_record(request_id)
                request_plan = plan_request(
                    self.store,
                    request_id,
                    record,
                    layout=self.layout,
                    policy=self.policy,
                    now=self.now,
                    marker_hint=self.marker_hint,
                )
            except CorruptRecord as exc:
                return self._leave_unreadable(report, exc)
            except Exception as exc:  # one request's failure must not end the run
                report.record_error("planning", exc)
                return ()
            self.marker_hint = request_plan.marker_hit or self.marker_hint
            return self._report_plan(request_plan, report)

        return plan

    def _leave_unreadable(self, report: RequestReport, error: CorruptRecord) -> Iterable[Task]:
        """A request whose ledger record cannot be read keeps every checkpoint (nothing is decided
        on it until it is repaired); `on_corrupt` alerts that once, as everywhere else, rather
        than this run's report raising it again every hour."""
        with report.lock:
            report.skipped.append({"checkpoint": "(every checkpoint)", "reason": UNREADABLE_RECORD})
        if self.on_corrupt is not None:
            try:
                self.on_corrupt(error)
            except Exception as exc:  # the redelivery alerts it again
                report.record_error("alerting its unreadable ledger record", exc)
        return ()

    def _report_plan(self, plan: RequestPlan, report: RequestReport) -> list[Task]:
        report.status, report.lifecycle = plan.status, plan.lifecycle
        report.keep_last = plan.keep_last
        report.kept.extend(checkpoint_entry(v.checkpoint, v.reason) for v in plan.verdicts if not v.delete)
        report.kept.extend(
            {"checkpoint": u.name, "step": None, "complete": None, "reason": u.reason} for u in plan.unmanaged
        )
        entries = [
            (verdict.checkpoint, {**checkpoint_entry(verdict.checkpoint, verdict.reason), "objects": 0, "bytes": 0})
            for verdict in plan.deletions
        ]
        if self.dry_run:
            report.deleted.extend(entry for _, entry in entries)
            return [self._measure_task(plan.folder, checkpoint, entry, report) for checkpoint, entry in entries]
        if entries and self.before_deleting is not None:
            try:
                self.before_deleting(plan.request_id, [entry for _, entry in entries])
            except Exception as exc:  # unrecorded, a delete could go unreported: none is done
                report.record_error("recording what it deletes", exc)
                return []
        return [self._unit_task(plan.folder, checkpoint, entry, report) for checkpoint, entry in entries]

    def _measure_task(self, folder: str, checkpoint: Checkpoint, entry: dict[str, Any], report: RequestReport) -> Task:
        """Dry run: fill in what deleting the checkpoint would free, so the plan can tell."""

        def measure() -> Iterable[Task]:
            known = checkpoint.objects if checkpoint.kind == Kind.FILES else checkpoint.contents
            try:
                if known is None:  # a complete prefix checkpoint: its shards were never listed
                    known = self.store.list_all(folder + checkpoint.name)
            except Exception as exc:
                report.record_error(checkpoint.name, exc)
                return ()
            with report.lock:
                entry.update(objects=len(known), bytes=sum(o.size for o in known))
            return ()

        return measure

    def _unit_task(self, folder: str, checkpoint: Checkpoint, entry: dict[str, Any], report: RequestReport) -> Task:
        def delete_unit() -> Iterable[Task]:
            try:
                return self._delete_unit(folder, checkpoint, entry, report)
            except Exception as exc:
                report.record_error(checkpoint.name, exc)
                return ()

        return delete_unit

    def _delete_unit(
        self, folder: str, checkpoint: Checkpoint, entry: dict[str, Any], report: RequestReport
    ) -> list[Task]:
        if checkpoint.kind == Kind.PREFIX:
            contents = checkpoint.contents
            if contents is None:
                contents = tuple(self.store.list_all(folder + checkpoint.name))
                quiet_since = self.now - timedelta(seconds=self.policy.incomplete_grace_seconds)
                problem = _changed_since_planned(checkpoint, folder, contents, quiet_since=quiet_since)
                if problem:
                    return self._skip(report, checkpoint, problem)
            gates = completion_objects(checkpoint, folder, contents, self.policy.commit_markers)
        else:
            contents = checkpoint.objects
            # TensorFlow's .index names the data; a plain file is its own gate.
            gates = [o for o in contents if o.name.endswith(".index")] or list(contents[:1])
        # The gate goes first, so what is left is an incomplete checkpoint, never a broken one.
        for gate in gates:
            outcome = self._delete(folder, gate, entry, report)
            if outcome is not DeleteOutcome.DELETED:
                leaf = gate.name.rsplit("/", 1)[-1]
                return self._skip(report, checkpoint, f"its {leaf} was {outcome.value}")
        with report.lock:
            report.deleted.append(entry)
        rest = [o for o in contents if o not in gates]
        return [self._object_task(folder, o, entry, report) for o in rest]

    def _skip(self, report: RequestReport, checkpoint: Checkpoint, reason: str) -> list[Task]:
        with report.lock:
            report.skipped.append({"checkpoint": checkpoint.name, "reason": reason})
        return []

    def _object_task(self, folder: str, obj: ListedObject, entry: dict[str, Any], report: RequestReport) -> Task:
        def delete_object() -> Iterable[Task]:
            try:
                self._delete(folder, obj, entry, report)
            except Exception as exc:
                report.record_error(obj.name, exc)
            return ()

        return delete_object

    def _delete(self, folder: str, obj: ListedObject, entry: dict[str, Any], report: RequestReport) -> DeleteOutcome:
        if not self.layout.in_scope(obj.name, folder):
            raise OutOfScope(f"refusing to delete {obj.name!r}: outside {folder!r}")
        outcome = self.store.delete(obj)
        with report.lock:
            if outcome is DeleteOutcome.DELETED:
                report.objects_deleted += 1
                report.bytes_freed += obj.size
                entry["objects"] += 1
                entry["bytes"] += obj.size
            else:
                report.objects_skipped += 1
        return outcome


def _changed_since_planned(
    checkpoint: Checkpoint, folder: str, contents: Sequence[ListedObject], *, quiet_since: datetime
) -> str | None:
    """Why a complete prefix checkpoint listed for deletion must be left alone, if it must: its
    marker changed, or something in it was written after the marker and lately (a rewrite under
    way; a late write long ago is just how that framework finishes)."""
    by_name = {o.name: o for o in contents}
    # DeepSpeed's `latest` lies beside the checkpoint, not in it: only what is inside is compared.
    inside = [m for m in checkpoint.objects if m.name.startswith(folder + checkpoint.name)]
    for marker in inside:
        now_listed = by_name.get(marker.name)
        if now_listed is None:
            return "its commit marker is gone (another prune run got there first)"
        if now_listed.generation != marker.generation:
            return "its commit marker was rewritten since planning"
    if not inside:
        return None
    committed_at = max(m.updated for m in inside)
    if any(o.updated > committed_at and o.updated > quiet_since for o in contents):
        return "written after its commit marker, within the grace period: being rewritten"
    return None
