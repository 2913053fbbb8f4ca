"""Storage: what a prune run needs of it (`PruneStore`), the one adapter over
google-cloud-storage (list, stat, read, generation-guarded delete, with call counts). The cursor
that bounded all-requests runs resume from is the ledger's (`LedgerStore.cursor`).

No JSON batch API for deletes: fake-gcs-server lacks it, so it could not be tested here, and a
bucket's initial ~1000 writes/s bounds deletes whichever way they are sent. Deletes come from
settings.prune_workers threads sharing one client, whose connection pool is widened to match.

Permissions: storage.objects.list and .delete on the checkpoint bucket (markers are found by
listings, not reads: one listing of a request's whole folder when it fits a page,
shared/pruning/snapshot.py, else one-item listings); storage.objects.get there only for the small files some frameworks
complete a checkpoint with (TensorFlow's `checkpoint` index, DeepSpeed's `latest`, Orbax's
`_CHECKPOINT_METADATA`, the kit's `COMMITTED` with the files it lists); ledger reads, and writing one cursor object, in the state bucket. google.* loads on first
use, so importing this module costs the function's cold start nothing.
"""

from __future__ import annotations

import enum
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from spotjobs_kit.layout import FolderListing, ListedObject

from shared.pruning.checkpoints import CheckpointStore
from shared.pruning.folders import is_request_folder_name

if TYPE_CHECKING:
    from google.cloud.storage import Bucket, Client


class DeleteOutcome(enum.Enum):
    DELETED = "deleted"
    GONE = "gone"  # 404: someone else deleted it
    CHANGED = "changed"  # 412: rewritten since it was listed


class PruneStore(CheckpointStore, Protocol):
    """What a run needs of storage beyond discovery; `GcsPruneStore` below is the real one."""

    def delete(self, obj: ListedObject) -> DeleteOutcome: ...

    def list_request_ids(self, root: str, *, after: str = "") -> Iterator[str]: ...

    def calls(self) -> dict[str, int]: ...


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
        return [_listed(blob) for page in self._pages(prefix=prefix, fields=self._LIST_FIELDS) for blob in page]

    def list_request_ids(self, root: str, *, after: str = "") -> Iterator[str]:
        """Request folder names under `root`, in listing order, starting after `after`.

        GCS orders the folder prefixes, not the bare ids: `a-1/` comes before `a/` ("-" sorts
        before "/") although "a-1" > "a". So `after` is compared as the prefix `<root><after>/`.
        """
        # "<after>0" sorts after every "<after>/..." name ("0" follows "/").
        start = f"{root}{after}0" if after else None
        after_prefix = f"{root}{after}/"
        for page in self._pages(prefix=root, delimiter="/", start_offset=start, fields="prefixes,nextPageToken"):
            for prefix in sorted(page.prefixes):
                request_id = prefix[len(root) :].rstrip("/")
                if (not after or prefix > after_prefix) and is_request_folder_name(request_id):
                    yield request_id

    def list_tree(self, prefix: str, *, limit: int) -> list[ListedObject] | None:
        """Every object under `prefix`, from one page of at most `limit`; None when more remain
        (shared/pruning/snapshot.py)."""
        iterator = self._bucket.client.list_blobs(
            self._bucket, prefix=prefix, max_results=limit, page_size=limit, fields=self._LIST_FIELDS
        )
        self._count("list")
        objects = [_listed(blob) for blob in iterator]
        return None if iterator.next_page_token else objects

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

    def read_listed(self, obj: ListedObject) -> str | None:
        """`read_text` of `obj` as listed: a generation's contents never change, so what was read
        of it once (by any run of this process) is not read again. A newer generation since the
        listing is read as `read_text` reads it, and not remembered."""
        from google.api_core.exceptions import NotFound, PreconditionFailed

        key = (self._bucket.name, obj.name, obj.generation)
        known = _listed_texts.get(self._bucket.client, key)
        if known is not None:
            return known
        self._count("read")
        try:
            text = self._bucket.blob(obj.name).download_as_text(if_generation_match=obj.generation)
        except NotFound:
            return None
        except PreconditionFailed:
            return self.read_text(obj.name)
        _listed_texts.put(self._bucket.client, key, text)
        return text

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
            self._bucket.delete_blob(obj.name, if_generation_match=obj.generation, retry=DEFAULT_RETRY)
        except NotFound:
            return DeleteOutcome.GONE
        except PreconditionFailed:
            return DeleteOutcome.CHANGED
        return DeleteOutcome.DELETED


class _ListedTexts:
    """The contents of small objects by generation, per storage client (so a simulated world's
    client never sees another's), the most recent `LISTED_TEXTS_KEPT` of each."""

    def __init__(self) -> None:
        self._by_client: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[str, str, int], str]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def get(self, client: Any, key: tuple[str, str, int]) -> str | None:
        with self._lock:
            texts = self._by_client.get(client)
            if texts is None or key not in texts:
                return None
            texts.move_to_end(key)
            return texts[key]

    def put(self, client: Any, key: tuple[str, str, int], text: str) -> None:
        with self._lock:
            texts = self._by_client.setdefault(client, OrderedDict())
            texts[key] = text
            while len(texts) > LISTED_TEXTS_KEPT:
                texts.popitem(last=False)


# Marker and index texts remembered per client: a few KB each, read again every hourly run.
LISTED_TEXTS_KEPT = 4096
_listed_texts = _ListedTexts()


def _listed(blob: Any) -> ListedObject:
    return ListedObject(blob.name, int(blob.generation), int(blob.size or 0), blob.updated)


def widen_connection_pool(client: Client, size: int) -> None:
    """Let `size` threads share the client's HTTP session without discarding connections
    (requests keeps 10 per host by default)."""
    from requests.adapters import HTTPAdapter

    session = getattr(client, "_http", None)  # the AuthorizedSession every call of this client goes through
    if session is None:
        return  # a client without one (the simulator's in-memory storage) has no pool to widen
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=max(10, size))
    session.mount("https://", adapter)
    session.mount("http://", adapter)
