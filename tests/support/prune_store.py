"""An in-memory checkpoint store that honours generation preconditions like GCS, layout writers,
and a prune run over it, shared by the prune tests. No tests here."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

from spotjobs_kit.layout import FolderListing, ListedObject

from shared.ledger.records import RequestRecord
from shared.ledger.states import RequestStatus
from shared.pruning.execute import prune_requests
from shared.pruning.folders import CheckpointLayout
from shared.pruning.report import PruneResult
from shared.pruning.retention import PrunePolicy
from shared.pruning.store import DeleteOutcome

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
LAYOUT = CheckpointLayout("ckpt-bucket", "requests/")


def policy(**overrides: object) -> PrunePolicy:
    values: dict[str, object] = {
        "keep_last": 2,
        "keep_last_ceiling": 20,
        "incomplete_grace_seconds": 3600.0,
        "finished_retention_seconds": 7 * 86400.0,
        "keep_final_checkpoint": True,
        "commit_markers": ("commit_success.txt", ".metadata", "checkpoint", "COMMITTED"),
    }
    values.update(overrides)
    return PrunePolicy(**values)  # type: ignore[arg-type]


class MemoryStore:
    """GCS semantics that matter here: listing with delimiter, generations, guarded deletes."""

    def __init__(self) -> None:
        self.objects: dict[str, ListedObject] = {}
        self.texts: dict[str, str] = {}
        self._generations = itertools.count(1000)
        self._lock = threading.Lock()
        self._calls = {"list": 0, "read": 0, "delete": 0}
        # Called with the object about to be deleted, before the precondition is checked.
        self.before_delete: Callable[[ListedObject], None] | None = None
        self.before_list_all: Callable[[str], None] | None = None

    def put(self, name: str, *, size: int = 10, at: datetime = NOW, text: str | None = None) -> ListedObject:
        with self._lock:
            obj = ListedObject(name, next(self._generations), size, at)
            self.objects[name] = obj
            if text is not None:
                self.texts[name] = text
            return obj

    def names(self) -> set[str]:
        with self._lock:
            return set(self.objects)

    def calls(self) -> dict[str, int]:
        with self._lock:
            return dict(self._calls)

    def _listing(self) -> list[tuple[str, ListedObject]]:
        """Every object, counted as one list call: a snapshot, so a prune worker's delete on
        another thread never changes the dict under an iteration (a RuntimeError, counted as a
        prune error: test_prune_properties failed so once in a run of the whole suite)."""
        with self._lock:
            self._calls["list"] += 1
            return sorted(self.objects.items())

    def list_folder(self, prefix: str) -> FolderListing:
        files, folders = [], set()
        for name, obj in self._listing():
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :]
            if "/" in rest:
                folders.add(prefix + rest.split("/", 1)[0] + "/")
            else:
                files.append(obj)
        return FolderListing(prefix, tuple(files), tuple(sorted(folders)))

    def list_all(self, prefix: str) -> list[ListedObject]:
        if self.before_list_all:
            self.before_list_all(prefix)
        return [o for n, o in self._listing() if n.startswith(prefix)]

    def stat(self, name: str) -> ListedObject | None:
        with self._lock:
            self._calls["list"] += 1
            return self.objects.get(name)

    def read_text(self, name: str) -> str | None:
        with self._lock:
            self._calls["read"] += 1
            return self.texts.get(name) if name in self.objects else None

    def delete(self, obj: ListedObject) -> DeleteOutcome:
        if self.before_delete:
            self.before_delete(obj)
        with self._lock:
            self._calls["delete"] += 1
            live = self.objects.get(obj.name)
            if live is None:
                return DeleteOutcome.GONE
            if live.generation != obj.generation:
                return DeleteOutcome.CHANGED
            del self.objects[obj.name]
            self.texts.pop(obj.name, None)
            return DeleteOutcome.DELETED

    def list_request_ids(self, root: str, *, after: str = "") -> Iterator[str]:
        # Like GCS: in the order of the folder prefixes ("a-1/" before "a/"), not of bare ids.
        with self._lock:
            names = list(self.objects)
        prefixes = {
            n[len(root) :].split("/", 1)[0] + "/" for n in names if n.startswith(root) and "/" in n[len(root) :]
        }
        yield from (p[:-1] for p in sorted(prefixes) if not after or p > f"{after}/")


# Layout writers: each returns the relative names it wrote.


def folder(request_id: str) -> str:
    return LAYOUT.folder_for(request_id)


def prefix_checkpoint(
    store: MemoryStore,
    request_id: str,
    name: str,
    *,
    marker: str | None = "COMMITTED",
    shards: int = 3,
    at: datetime = NOW,
) -> None:
    base = f"{folder(request_id)}{name}"
    for i in range(shards):
        store.put(f"{base}shard-{i}", at=at)
    if marker:
        store.put(f"{base}{marker}", at=at + timedelta(seconds=1))


def file_checkpoint(store: MemoryStore, request_id: str, name: str, *, at: datetime = NOW) -> None:
    store.put(f"{folder(request_id)}{name}", at=at)


def tf_checkpoint(
    store: MemoryStore,
    request_id: str,
    stem: str,
    *,
    shards: int = 2,
    index: bool = True,
    at: datetime = NOW,
) -> None:
    base = f"{folder(request_id)}{stem}"
    for i in range(shards):
        store.put(f"{base}.data-{i:05d}-of-{shards:05d}", at=at)
    if index:
        store.put(f"{base}.index", at=at)


def tf_index(store: MemoryStore, request_id: str, stems: list[str], *, at: datetime = NOW) -> None:
    lines = [f'model_checkpoint_path: "{stems[-1]}"'] + [f'all_model_checkpoint_paths: "{s}"' for s in stems]
    store.put(f"{folder(request_id)}checkpoint", at=at, text="\n".join(lines) + "\n")


# Running the pruner over a MemoryStore, and what survives.

HOUR = timedelta(hours=1)


def record(
    status: str = RequestStatus.RUNNING, *, finished_ago: timedelta | None = None, keep_last: object = None
) -> RequestRecord:
    request: dict = {}
    if keep_last is not None:
        request["checkpoints"] = {"keep_last": keep_last}
    rec = RequestRecord("r1", request, "gs://ckpt-bucket/requests/r1/", status=status)
    if finished_ago is not None:
        rec.finished_at = (NOW - finished_ago).isoformat().replace("+00:00", "Z")
    return rec


def run_prune(
    store: MemoryStore, records: dict[str, RequestRecord] | None = None, *, dry_run: bool = False, **overrides: object
) -> PruneResult:
    records = records or {}
    return prune_requests(
        store,
        store.list_request_ids(LAYOUT.root),
        read_record=records.get,
        layout=LAYOUT,
        policy=policy(**overrides),
        workers=4,
        dry_run=dry_run,
        now=NOW,
    )


def surviving(store: MemoryStore, request_id: str = "r1") -> set[str]:
    base = folder(request_id)
    return {n[len(base) :].split("/", 1)[0] for n in store.names() if n.startswith(base)}
