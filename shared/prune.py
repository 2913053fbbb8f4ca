"""Checkpoint pruning: the policy (pure), the plan per request, and parallel guarded deletion.

Policy (settings, `keep_last` overridable per request within [1, keep_last_ceiling]):
- keep the newest `keep_last` complete checkpoints; so the newest complete one always survives
  while a request is active, finished within its retention, or has no ledger record (a folder
  published by hand, or from before the ledger, counts as active);
- delete an incomplete checkpoint only when it is older than the newest complete one (a newer one
  may still be being written) and nothing in it was written for `incomplete_grace_seconds`;
- a request finished (terminal status) longer than `finished_retention_seconds` ago keeps only
  its final complete checkpoint, or none when `keep_final_checkpoint` is false;
- children with no step number are never deleted, and nothing outside the request's
  `checkpoints/` folder under the managed bucket and prefix is ever deleted (checked again
  before every single delete).

Deletion: every delete carries `if_generation_match` with the generation listed; 412 (rewritten)
or 404 (someone else deleted it) is skipped and counted. (fake-gcs-server ignores preconditions
on DELETE, so against an emulator each delete first re-reads the live generation.) A prefix
checkpoint loses its commit marker first, so a trainer looking for a checkpoint to resume from
never sees a committed one with shards missing; if the marker changed since planning, or the
checkpoint is being written again, it is left alone. Deletes run on a bounded pool
(settings.prune_workers); transient errors are retried with backoff by the storage client (every
delete is generation-guarded, hence idempotent), and a later run finishes what a failed one left.
No JSON batch API: fake-gcs-server lacks it, so it could not be tested here, and a bucket's
initial ~1000 writes/s bounds deletes whichever way they are sent.

Permissions: storage.objects.list and .delete on the checkpoint bucket (markers are found by
one-item listings, not reads); storage.objects.get there only for TensorFlow `checkpoint` index
files; ledger reads, and writing one cursor object, in the state bucket.
"""

from __future__ import annotations

import enum
import json
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from spotjobs_kit.layout import (
    CHECKPOINTS_FOLDER,
    Checkpoint,
    FolderListing,
    Kind,
    ListedObject,
    Unmanaged,
    sorted_checkpoints,
    with_contents,
)

from shared.alerts import Alert
from shared.checkpoints import CheckpointStore, discover
from shared.clock import parse_iso, utcnow
from shared.delivery import maintenance_message, maintenance_task
from shared.errors import SpotjobsError, is_retryable
from shared.ledger import RequestRecord, Status
from shared.log import Logger, logger
from shared.settings import Settings

if TYPE_CHECKING:
    from google.cloud.storage import Bucket, Client

    from shared.delivery import Message
    from shared.ledger import LedgerStore

PRUNE_TASK = "prune"
CURSOR_OBJECT = "maintenance/prune-cursor.json"
_REQUEST_ID = re.compile(r"^[^/\x00-\x1f]+$")


class OutOfScope(SpotjobsError):
    """A delete aimed outside the request's checkpoints folder: a bug, never attempted."""


# Policy (pure).


class Lifecycle:
    ACTIVE = "active"
    FINISHED = "finished"  # terminal, within the retention period: the normal policy applies
    RETENTION_EXPIRED = "retention_expired"  # terminal for longer: only the final checkpoint stays
    UNTRACKED = "untracked"  # no ledger record: treated as active


@dataclass(frozen=True)
class PrunePolicy:
    keep_last: int
    keep_last_ceiling: int
    incomplete_grace_seconds: float
    finished_retention_seconds: float
    keep_final_checkpoint: bool
    commit_markers: tuple[str, ...]

    @classmethod
    def from_settings(cls, settings: Settings) -> PrunePolicy:
        return cls(
            keep_last=settings.keep_last,
            keep_last_ceiling=settings.keep_last_ceiling,
            incomplete_grace_seconds=settings.incomplete_grace_seconds,
            finished_retention_seconds=settings.finished_retention_seconds,
            keep_final_checkpoint=settings.keep_final_checkpoint,
            commit_markers=settings.commit_markers,
        )

    def keep_last_for(self, record: RequestRecord | None) -> int:
        """The request's `checkpoints.keep_last` override, bounded to [1, ceiling]."""
        wanted: Any = self.keep_last
        if record is not None:
            overrides = record.request.get("checkpoints")
            if isinstance(overrides, dict) and overrides.get("keep_last") is not None:
                wanted = overrides["keep_last"]
        if isinstance(wanted, bool) or not isinstance(wanted, int):
            wanted = self.keep_last
        return max(1, min(wanted, max(1, self.keep_last_ceiling)))

    def lifecycle_of(self, record: RequestRecord | None, now: datetime) -> str:
        if record is None:
            return Lifecycle.UNTRACKED
        if record.status not in Status.TERMINAL:
            return Lifecycle.ACTIVE
        if record.finished_at is None:
            return Lifecycle.FINISHED  # no end time to measure the retention from: be generous
        age = (now - parse_iso(record.finished_at)).total_seconds()
        if age > self.finished_retention_seconds:
            return Lifecycle.RETENTION_EXPIRED
        return Lifecycle.FINISHED


@dataclass(frozen=True)
class Decision:
    checkpoint: Checkpoint
    delete: bool
    reason: str


def _older(candidate: Checkpoint, than: Checkpoint) -> bool:
    if candidate.step != than.step:
        return candidate.step < than.step
    if candidate.updated is None or than.updated is None:
        return False  # same step, unknown age: not provably older
    return candidate.updated < than.updated


def contents_needed(checkpoints: Sequence[Checkpoint], lifecycle: str) -> list[Checkpoint]:
    """Incomplete prefix checkpoints whose last write decides their fate, so must be listed."""
    complete = [c for c in checkpoints if c.complete]
    newest = max(complete, key=Checkpoint.sort_key, default=None)
    return [
        c
        for c in checkpoints
        if c.kind == Kind.PREFIX
        and not c.complete
        and c.contents is None
        and (
            lifecycle == Lifecycle.RETENTION_EXPIRED
            or (newest is not None and c.step <= newest.step)
        )
    ]


def decide(
    checkpoints: Sequence[Checkpoint],
    *,
    lifecycle: str,
    keep_last: int,
    policy: PrunePolicy,
    now: datetime,
) -> list[Decision]:
    """Keep or delete each checkpoint of one request, with the reason (pure)."""
    ordered = sorted_checkpoints(checkpoints)
    complete = [c for c in ordered if c.complete]
    newest = complete[-1] if complete else None
    expired = lifecycle == Lifecycle.RETENTION_EXPIRED
    if expired:
        kept_complete = complete[-1:] if policy.keep_final_checkpoint else []
    else:
        kept_complete = complete[-max(1, keep_last) :]
    kept_ids = {id(c) for c in kept_complete}

    decisions = []
    for c in ordered:
        if c.complete:
            kept = id(c) in kept_ids
            decisions.append(_decide_complete(c, c is newest, kept, expired, keep_last))
        else:
            decisions.append(_decide_incomplete(c, newest, expired, policy, now))
    return decisions


def _decide_complete(
    c: Checkpoint, is_newest: bool, kept: bool, expired: bool, keep_last: int
) -> Decision:
    if expired:
        if kept:
            return Decision(c, False, "final checkpoint of a request past its retention")
        if is_newest:
            return Decision(c, True, "request past its retention; final checkpoint not kept")
        return Decision(c, True, "request past its retention; only the final checkpoint is kept")
    if kept:
        return Decision(c, False, f"among the {keep_last} newest complete checkpoints")
    return Decision(c, True, f"complete, but {keep_last} newer complete checkpoints are kept")


def _decide_incomplete(
    c: Checkpoint, newest: Checkpoint | None, expired: bool, policy: PrunePolicy, now: datetime
) -> Decision:
    if not expired:
        if newest is None:
            return Decision(c, False, "incomplete, no complete checkpoint yet: may be in progress")
        if not _older(c, newest):
            return Decision(c, False, "incomplete, newer than the newest complete: in progress?")
    updated = c.updated
    if updated is None:
        return Decision(c, False, "incomplete, last write unknown")
    idle = (now - updated).total_seconds()
    if idle < policy.incomplete_grace_seconds:
        return Decision(c, False, "incomplete, written within the grace period")
    if expired:
        return Decision(c, True, "incomplete, request past its retention")
    return Decision(c, True, "incomplete, older than the newest complete, idle past grace period")


# Where things are.


@dataclass(frozen=True)
class CheckpointLayout:
    """The managed bucket and the object prefix under which every request's folder lives."""

    bucket: str
    root: str  # "requests/" (ends with "/"), or "" for the whole bucket

    @classmethod
    def from_settings(cls, settings: Settings) -> CheckpointLayout:
        prefix = settings.checkpoint_prefix.strip("/")
        return cls(settings.checkpoint_bucket, f"{prefix}/" if prefix else "")

    def folder_for(self, request_id: str) -> str:
        """Object-name prefix of a request's checkpoints: `<root><request_id>/checkpoints/`."""
        if not is_valid_request_id(request_id):
            raise OutOfScope(f"{request_id!r} cannot name a request folder")
        return f"{self.root}{request_id}/{CHECKPOINTS_FOLDER}"

    def in_scope(self, name: str, folder: str) -> bool:
        return (
            folder.startswith(self.root)
            and folder.endswith(f"/{CHECKPOINTS_FOLDER}")
            and name.startswith(folder)
            and len(name) > len(folder)
        )


def is_valid_request_id(request_id: str) -> bool:
    return bool(_REQUEST_ID.match(request_id)) and request_id not in {".", ".."}


# The plan for one request.


@dataclass(frozen=True)
class RequestPlan:
    request_id: str
    folder: str
    status: str | None
    lifecycle: str
    keep_last: int
    decisions: tuple[Decision, ...]
    unmanaged: tuple[Unmanaged, ...]
    marker_hit: str | None = None

    @property
    def deletions(self) -> list[Decision]:
        return [d for d in self.decisions if d.delete]


class PruneStore(CheckpointStore, Protocol):
    def delete(self, obj: ListedObject) -> DeleteOutcome: ...

    def list_request_ids(self, root: str, *, after: str = "") -> Iterator[str]: ...

    def calls(self) -> dict[str, int]: ...


def plan_request(
    store: CheckpointStore,
    request_id: str,
    record: RequestRecord | None,
    *,
    layout: CheckpointLayout,
    policy: PrunePolicy,
    now: datetime,
    marker_hint: str | None = None,
) -> RequestPlan:
    """Discover one request's checkpoints and decide each one."""
    folder = layout.folder_for(request_id)
    lifecycle = policy.lifecycle_of(record, now)
    keep_last = policy.keep_last_for(record)
    found = discover(store, folder, policy.commit_markers, try_first=marker_hint)
    checkpoints = list(found.checkpoints)
    for c in contents_needed(checkpoints, lifecycle):
        listed = with_contents(c, folder, store.list_all(folder + c.name), policy.commit_markers)
        checkpoints[checkpoints.index(c)] = listed
    decisions = decide(
        checkpoints, lifecycle=lifecycle, keep_last=keep_last, policy=policy, now=now
    )
    return RequestPlan(
        request_id,
        folder,
        record.status if record else None,
        lifecycle,
        keep_last,
        tuple(decisions),
        found.unmanaged,
        found.marker_hit,
    )


# Deletion.


class DeleteOutcome(enum.Enum):
    DELETED = "deleted"
    GONE = "gone"  # 404: someone else deleted it
    CHANGED = "changed"  # 412: rewritten since it was listed


@dataclass
class RequestReport:
    """What happened to one request's checkpoints (filled from several threads)."""

    request_id: str
    dry_run: bool
    status: str | None = None
    lifecycle: str | None = None
    keep_last: int | None = None
    kept: list[dict[str, Any]] = field(default_factory=list)
    deleted: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    retryable_errors: int = 0
    objects_deleted: int = 0
    objects_skipped: int = 0
    bytes_freed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "status": self.status,
            "lifecycle": self.lifecycle,
            "keep_last": self.keep_last,
            "dry_run": self.dry_run,
            "kept": self.kept,
            "deleted": self.deleted,
            "skipped": self.skipped,
            "objects_deleted": self.objects_deleted,
            "objects_skipped": self.objects_skipped,
            "bytes_freed": self.bytes_freed,
            "errors": self.errors,
        }

    @property
    def permanent_errors(self) -> int:
        """Errors a redelivery would meet again (403, OutOfScope...): someone has to act."""
        return len(self.errors) - self.retryable_errors

    def record_error(self, what: str, exc: BaseException) -> None:
        with self.lock:
            self.errors.append(f"{what}: {type(exc).__name__}: {exc}")
            self.retryable_errors += int(is_retryable(exc))


def _entry(c: Checkpoint, reason: str) -> dict[str, Any]:
    return {"checkpoint": c.name, "step": c.step, "complete": c.complete, "reason": reason}


Task = Callable[[], Iterable["Task"]]


def run_tasks(first: Iterable[Task], workers: int) -> None:
    """Run tasks on `workers` threads. A task returns follow-up tasks, which run before more of
    `first` is drawn: memory stays bounded by the work in flight, not by the work in total."""
    backlog: deque[Task] = deque()
    source = iter(first)
    limit = max(1, workers) * 2
    running: set[Future[Iterable[Task]]] = set()
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="prune") as pool:
        while True:
            while len(running) < limit and (
                task := backlog.popleft() if backlog else next(source, None)
            ) is not None:
                running.add(pool.submit(task))
            if not running:
                return
            done, not_done = wait(running, return_when=FIRST_COMPLETED)
            running = set(not_done)
            for future in done:
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
    ) -> None:
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
            except Exception as exc:  # one request's failure must not end the run
                report.record_error("planning", exc)
                return ()
            self.marker_hint = request_plan.marker_hit or self.marker_hint
            return self._report_plan(request_plan, report)

        return plan

    def _report_plan(self, plan: RequestPlan, report: RequestReport) -> list[Task]:
        report.status, report.lifecycle = plan.status, plan.lifecycle
        report.keep_last = plan.keep_last
        report.kept.extend(_entry(d.checkpoint, d.reason) for d in plan.decisions if not d.delete)
        report.kept.extend(
            {"checkpoint": u.name, "step": None, "complete": None, "reason": u.reason}
            for u in plan.unmanaged
        )
        tasks: list[Task] = []
        for decision in plan.deletions:
            entry = {**_entry(decision.checkpoint, decision.reason), "objects": 0, "bytes": 0}
            if self.dry_run:
                report.deleted.append(entry)
                tasks.append(self._measure_task(plan.folder, decision.checkpoint, entry, report))
            else:
                tasks.append(self._unit_task(plan.folder, decision.checkpoint, entry, report))
        return tasks

    def _measure_task(
        self, folder: str, checkpoint: Checkpoint, entry: dict[str, Any], report: RequestReport
    ) -> Task:
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

    def _unit_task(
        self, folder: str, checkpoint: Checkpoint, entry: dict[str, Any], report: RequestReport
    ) -> Task:
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
                problem = _changed_since_planned(checkpoint, contents, quiet_since=quiet_since)
                if problem:
                    return self._skip(report, checkpoint, problem)
            marker_names = {f"{folder}{checkpoint.name}{m}" for m in self.policy.commit_markers}
            gates = [o for o in contents if o.name in marker_names]
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

    def _object_task(
        self, folder: str, obj: ListedObject, entry: dict[str, Any], report: RequestReport
    ) -> Task:
        def delete_object() -> Iterable[Task]:
            try:
                self._delete(folder, obj, entry, report)
            except Exception as exc:
                report.record_error(obj.name, exc)
            return ()

        return delete_object

    def _delete(
        self, folder: str, obj: ListedObject, entry: dict[str, Any], report: RequestReport
    ) -> DeleteOutcome:
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
    checkpoint: Checkpoint, contents: Sequence[ListedObject], *, quiet_since: datetime
) -> str | None:
    """Why a complete prefix checkpoint listed for deletion must be left alone, if it must: its
    marker changed, or something in it was written after the marker and lately (a rewrite under
    way; a late write long ago is just how that framework finishes)."""
    by_name = {o.name: o for o in contents}
    for marker in checkpoint.objects:
        now_listed = by_name.get(marker.name)
        if now_listed is None:
            return "its commit marker is gone (another prune run got there first)"
        if now_listed.generation != marker.generation:
            return "its commit marker was rewritten since planning"
    committed_at = max(m.updated for m in checkpoint.objects)
    if any(o.updated > committed_at and o.updated > quiet_since for o in contents):
        return "written after its commit marker, within the grace period: being rewritten"
    return None


# A run over many requests.


@dataclass
class PruneResult:
    reports: list[RequestReport]
    dry_run: bool
    duration_seconds: float
    calls: dict[str, int]
    next_cursor: str | None = None  # where the next bounded run starts ("" = from the top)

    @property
    def summary(self) -> dict[str, Any]:
        return {
            "requests_scanned": len(self.reports),
            "checkpoints_deleted": sum(len(r.deleted) for r in self.reports),  # dry run: planned
            "objects_deleted": sum(r.objects_deleted for r in self.reports),
            "bytes_freed": sum(r.bytes_freed for r in self.reports),
            "skipped": sum(len(r.skipped) + r.objects_skipped for r in self.reports),
            "errors": sum(len(r.errors) for r in self.reports),
            "dry_run": self.dry_run,
            "duration_seconds": round(self.duration_seconds, 3),
            "calls": self.calls,
        }

    @property
    def retryable_errors(self) -> int:
        return sum(r.retryable_errors for r in self.reports)


def prune(
    store: PruneStore,
    request_ids: Iterable[str],
    *,
    read_record: Callable[[str], RequestRecord | None],
    layout: CheckpointLayout,
    policy: PrunePolicy,
    workers: int,
    dry_run: bool = False,
    now: datetime | None = None,
) -> PruneResult:
    """Plan and (unless `dry_run`) carry out the pruning of each request, in parallel."""
    started = time.monotonic()
    now = now or utcnow()
    execution = _Execution(store, layout, policy, dry_run=dry_run, now=now)
    reports: list[RequestReport] = []

    def tasks() -> Iterator[Task]:
        for request_id in request_ids:
            report = RequestReport(request_id, dry_run)
            reports.append(report)
            yield execution.request_task(request_id, report, read_record)

    run_tasks(tasks(), workers)
    return PruneResult(reports, dry_run, time.monotonic() - started, store.calls())


def bounded(request_ids: Iterable[str], limit: int) -> tuple[list[str], bool]:
    """At most `limit` ids, and whether the listing ended within them."""
    taken: list[str] = []
    for request_id in request_ids:
        if len(taken) >= limit:
            return taken, False
        taken.append(request_id)
    return taken, True


# Storage: the one adapter over google-cloud-storage.


def emulator_in_use() -> bool:
    """True when the storage library talks to an emulator (it reads the same variable).

    fake-gcs-server (1.54, the version the embedded stack ships) accepts ifGenerationMatch on a
    DELETE and ignores it, so against it each delete first checks the live generation.
    """
    return bool(os.environ.get("STORAGE_EMULATOR_HOST"))


class GcsPruneStore:
    """List, stat, read and generation-guarded delete in the checkpoint bucket, with call counts."""

    _LIST_FIELDS = "items(name,generation,size,updated),prefixes,nextPageToken"

    def __init__(self, bucket: Bucket, *, verify_generation: bool, page_size: int = 1000) -> None:
        self._bucket = bucket
        self._verify_generation = verify_generation
        self._page_size = page_size
        self._calls: dict[str, int] = {"list": 0, "read": 0, "delete": 0, "verify": 0}
        self._lock = threading.Lock()

    def calls(self) -> dict[str, int]:
        with self._lock:
            return dict(self._calls)

    def _count(self, kind: str) -> None:
        with self._lock:
            self._calls[kind] += 1

    def _pages(self, **kwargs: Any) -> Iterator[Any]:
        iterator = self._bucket.client.list_blobs(self._bucket, page_size=self._page_size, **kwargs)
        for page in iterator.pages:
            self._count("list")
            yield page

    def list_folder(self, prefix: str) -> FolderListing:
        files: list[ListedObject] = []
        subfolders: list[str] = []
        for page in self._pages(prefix=prefix, delimiter="/", fields=self._LIST_FIELDS):
            files.extend(_listed(blob) for blob in page)
            subfolders.extend(page.prefixes)
        return FolderListing(prefix, tuple(files), tuple(subfolders))

    def list_all(self, prefix: str) -> list[ListedObject]:
        return [
            _listed(blob)
            for page in self._pages(prefix=prefix, fields=self._LIST_FIELDS)
            for blob in page
        ]

    def list_request_ids(self, root: str, *, after: str = "") -> Iterator[str]:
        """Request folder names under `root`, in listing order, starting after `after`.

        GCS orders the folder prefixes, not the bare ids: `a-1/` comes before `a/` ("-" sorts
        before "/") although "a-1" > "a". So `after` is compared as the prefix `<root><after>/`.
        """
        # "<after>0" sorts after every "<after>/..." name ("0" follows "/").
        start = f"{root}{after}0" if after else None
        after_prefix = f"{root}{after}/"
        for page in self._pages(
            prefix=root, delimiter="/", start_offset=start, fields="prefixes,nextPageToken"
        ):
            for prefix in sorted(page.prefixes):
                request_id = prefix[len(root) :].rstrip("/")
                if (not after or prefix > after_prefix) and is_valid_request_id(request_id):
                    yield request_id

    def stat(self, name: str, *, counted_as: str = "list") -> ListedObject | None:
        """One object's metadata, by a one-item listing: the exact name sorts before any longer
        name it prefixes, and the pruner's role needs no read access to checkpoint contents."""
        iterator = self._bucket.client.list_blobs(
            self._bucket, prefix=name, max_results=1, page_size=1, fields=self._LIST_FIELDS
        )
        self._count(counted_as)
        blob = next(iter(iterator), None)
        return _listed(blob) if blob is not None and blob.name == name else None

    def read_text(self, name: str) -> str | None:
        from google.api_core.exceptions import NotFound

        self._count("read")
        try:
            return self._bucket.blob(name).download_as_text()
        except NotFound:
            return None

    def delete(self, obj: ListedObject) -> DeleteOutcome:
        from google.api_core.exceptions import NotFound, PreconditionFailed
        from google.cloud.storage.retry import DEFAULT_RETRY

        if self._verify_generation:
            live = self.stat(obj.name, counted_as="verify")
            if live is None:
                return DeleteOutcome.GONE
            if live.generation != obj.generation:
                return DeleteOutcome.CHANGED
        self._count("delete")
        try:
            # Generation-guarded, hence safe to retry: a retry after a lost reply answers 404.
            self._bucket.delete_blob(
                obj.name, if_generation_match=obj.generation, retry=DEFAULT_RETRY
            )
        except NotFound:
            return DeleteOutcome.GONE
        except PreconditionFailed:
            return DeleteOutcome.CHANGED
        return DeleteOutcome.DELETED


def _listed(blob: Any) -> ListedObject:
    return ListedObject(blob.name, int(blob.generation), int(blob.size or 0), blob.updated)


def widen_connection_pool(client: Client, size: int) -> None:
    """Let `size` threads share the client's HTTP session without discarding connections
    (requests keeps 10 per host by default)."""
    from requests.adapters import HTTPAdapter

    session = client._http  # the AuthorizedSession every call of this client goes through
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=max(10, size))
    session.mount("https://", adapter)
    session.mount("http://", adapter)


# The cursor of bounded all-requests runs.


def read_cursor(state_bucket: Bucket) -> str:
    from google.api_core.exceptions import NotFound

    try:
        return json.loads(state_bucket.blob(CURSOR_OBJECT).download_as_bytes()).get("after", "")
    except NotFound:
        return ""


def write_cursor(state_bucket: Bucket, after: str) -> None:
    # Advisory: a lost race between two runs only means one range is scanned twice.
    state_bucket.blob(CURSOR_OBJECT).upload_from_string(
        json.dumps({"after": after}), content_type="application/json"
    )


# What the function and the CLI call.


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
    if isinstance(request_id, str) and is_valid_request_id(request_id):
        return task, PruneTask(request_id)
    return task, None


def run(
    storage: Client,
    settings: Settings,
    *,
    request_id: str | None = None,
    bounded_run: bool = False,
    dry_run: bool = False,
    workers: int | None = None,
    verify_generation: bool | None = None,
    log: Logger = logger,
) -> PruneResult:
    """Prune one request, or every request (bounded per run and resumed by a cursor when
    `bounded_run`), in the managed checkpoint bucket. `verify_generation` defaults to
    `emulator_in_use()`."""
    from shared.ledger import LedgerStore

    workers = workers or settings.prune_workers
    widen_connection_pool(storage, workers)
    layout = CheckpointLayout.from_settings(settings)
    if verify_generation is None:
        verify_generation = emulator_in_use()
    store = GcsPruneStore(storage.bucket(layout.bucket), verify_generation=verify_generation)
    state_bucket = storage.bucket(settings.state_bucket)
    ledger: LedgerStore = LedgerStore(state_bucket)
    cursor: str | None = None
    if request_id is not None:
        ids: Iterable[str] = [request_id]
    elif bounded_run:
        start = read_cursor(state_bucket)
        ids, finished = bounded(
            store.list_request_ids(layout.root, after=start), settings.prune_requests_per_run
        )
        cursor = "" if finished or not ids else ids[-1]
    else:
        ids = store.list_request_ids(layout.root)
    result = prune(
        store,
        ids,
        read_record=ledger.get,
        layout=layout,
        policy=PrunePolicy.from_settings(settings),
        workers=workers,
        dry_run=dry_run,
    )
    if cursor is not None and not dry_run:
        result.next_cursor = cursor
        try:
            write_cursor(state_bucket, cursor)
        except Exception as exc:  # without it the next run starts over: worth a line, not a retry
            log.warning(
                "could not save the prune cursor", event="prune_cursor_unsaved", error=str(exc)
            )
    return result


def report_alert(result: PruneResult, *, limit: int = 50) -> Alert | None:
    """The prune_report alert of a run that deleted something or met errors; None otherwise.
    Severity: ERROR with permanent errors (403, OutOfScope: someone must act), WARNING with only
    transient ones, else INFO."""
    summary = result.summary
    if not summary["objects_deleted"] and not summary["errors"]:
        return None
    requests = [
        {
            "request_id": r.request_id,
            "checkpoints_deleted": len(r.deleted),
            "objects_deleted": r.objects_deleted,
            "bytes_freed": r.bytes_freed,
            "errors": r.errors[:5],
        }
        for r in result.reports
        if r.objects_deleted or r.errors
    ]
    only = requests[0]["request_id"] if len(requests) == 1 else None
    if any(r.permanent_errors for r in result.reports):
        severity = "ERROR"
    elif summary["errors"]:
        severity = "WARNING"
    else:
        severity = "INFO"
    return Alert(
        kind="prune_report",
        severity=severity,
        message=(
            f"Pruned {summary['checkpoints_deleted']} checkpoints "
            f"({summary['objects_deleted']} objects, {summary['bytes_freed']} bytes) "
            f"in {len(requests)} requests"
            + (f"; {summary['errors']} errors." if summary["errors"] else ".")
        ),
        request_id=only,
        details={
            **summary,
            "requests": requests[:limit],
            "requests_truncated": len(requests) > limit,
        },
    )


def log_report(log: Logger, report: RequestReport) -> None:
    """One line per request that something happened to: ERROR when it had permanent errors,
    WARNING when only transient ones (the redelivery retries them), else INFO."""
    if not (report.deleted or report.skipped or report.errors):
        return
    fields: dict[str, Any] = {
        "deleted": [d["checkpoint"] for d in report.deleted],
        "skipped": report.skipped,
        "errors": report.errors,
        "objects_deleted": report.objects_deleted,
        "bytes_freed": report.bytes_freed,
    }
    request_log = log.bind(request_id=report.request_id, event="checkpoints_pruned")
    if report.permanent_errors:
        request_log.error("pruning a request failed; a retry would fail the same way", **fields)
    elif report.errors:
        request_log.warning("pruning a request failed for now; the redelivery retries", **fields)
    else:
        request_log.info("pruned checkpoints", **fields)


def handle_maintenance(
    message: Message,
    log: Logger,
    *,
    settings: Settings,
    storage: Callable[[], Client],
    publish_alert: Callable[[Alert], object],
) -> None:
    """The prune_checkpoints handler: prune on a prune task, ignore other maintenance tasks."""
    from shared.errors import TransientError

    name, task = parse_maintenance_task(message.data)
    if name != PRUNE_TASK:
        log.debug("ignored a maintenance message for another task", event="ignored_task", task=name)
        return
    if task is None:
        log.warning("ignored a prune task without a valid request_id", event="invalid_prune_task")
        return
    log = log.bind(request_id=task.request_id)
    every_request = task.request_id is None
    result = run(
        storage(), settings, request_id=task.request_id, bounded_run=every_request, log=log
    )
    for report in result.reports:
        log_report(log, report)
    log.info(
        "prune run finished",
        event="prune_summary",
        next_cursor=result.next_cursor,
        **result.summary,
    )
    alert = report_alert(result)
    if alert is not None:
        publish_alert(alert)
    if result.retryable_errors:
        raise TransientError(f"{result.retryable_errors} transient failures; the run is idempotent")
