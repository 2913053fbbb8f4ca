"""One request's checkpoints folder as one listing saw it: what discovery asks, answered from a
single full listing instead of a delimiter listing plus one call per checkpoint.

Discovery (`spotjobs_kit.layout.discover`) lists the folder with a delimiter, then checks each
prefix checkpoint: a one-item listing per marker it tries, a read of the kit's `COMMITTED` (often
absent), a listing of a Hugging Face or Orbax folder, of the folders a `COMMITTED` names. Every
one of those answers is in a listing of the whole folder, taken once. So when the folder fits in
one page of a full listing (`SNAPSHOT_OBJECTS`, GCS's largest page: most folders, a few
checkpoints of tens of shards each), discovery runs over that listing; a read of an object it
shows is still a read (its contents are not in a listing), of one it does not show is None. A
bigger folder is judged as before, over the live store (the one page listed is then a call more).

Why this is as safe as the calls it replaces: each of those calls was one moment's view too, taken
a few calls after the folder's listing; the snapshot is one consistent moment before them. What
decides a delete is not taken from it: the contents of an incomplete checkpoint whose age decides
its fate are listed live (`list_all`, so a marker that appeared since counts, as before), and a
complete one is listed again right before its delete (shared/pruning/execute.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from spotjobs_kit.layout import FolderListing, ListedObject

from shared.pruning.checkpoints import CheckpointStore

# Objects a snapshot may hold: one page of a listing (the most GCS returns in one).
SNAPSHOT_OBJECTS = 1000


@runtime_checkable
class TreeListingStore(Protocol):
    def list_tree(self, prefix: str, *, limit: int) -> list[ListedObject] | None:
        """Every object under `prefix` in name order, from one listing of at most `limit`
        objects; None when more remain."""
        ...

    def read_listed(self, obj: ListedObject) -> str | None:
        """The text of `obj` at the generation listed (or, changed since, as it is now)."""
        ...


class FolderSnapshot:
    """Discovery's `ListingStore` over one listing of `prefix`; `list_all` goes to `live`."""

    def __init__(self, live: TreeStore, prefix: str, objects: Sequence[ListedObject]) -> None:
        self._live = live
        self._prefix = prefix
        self._objects = sorted(objects, key=lambda o: o.name)
        self._names = [o.name for o in self._objects]  # for bisection: a prefix's names are contiguous
        self._by_name = {o.name: o for o in self._objects}

    def _within(self, name: str) -> bool:
        return name.startswith(self._prefix)

    def list_folder(self, prefix: str) -> FolderListing:
        if not self._within(prefix):
            return self._live.list_folder(prefix)
        files: list[ListedObject] = []
        subfolders: set[str] = set()
        # Discovery lists each checkpoint's prefix of the one folder: only the names under it
        # are walked, not the whole listing each time.
        for obj in self._objects[bisect.bisect_left(self._names, prefix) :]:
            if not obj.name.startswith(prefix):
                break
            rest = obj.name[len(prefix) :]
            if "/" in rest:
                subfolders.add(prefix + rest[: rest.index("/") + 1])
            else:
                files.append(obj)
        return FolderListing(prefix, tuple(files), tuple(sorted(subfolders)))

    def stat(self, name: str) -> ListedObject | None:
        if not self._within(name):
            return self._live.stat(name)
        return self._by_name.get(name)

    def read_text(self, name: str) -> str | None:
        if not self._within(name):
            return self._live.read_text(name)
        listed = self._by_name.get(name)
        if listed is None:
            return None  # the listing shows it absent: a read would answer NotFound
        return self._live.read_listed(listed)

    def list_all(self, prefix: str) -> list[ListedObject]:
        return self._live.list_all(prefix)


class TreeStore(CheckpointStore, TreeListingStore, Protocol):
    """A store a snapshot can be taken of (`GcsPruneStore`)."""


def discovery_store(store: CheckpointStore, folder: str) -> CheckpointStore:
    """What to run discovery of `folder` over: a `FolderSnapshot` of it when `store` can list it
    in one page, else `store` itself."""
    if not lists_trees(store):
        return store
    objects = store.list_tree(folder, limit=SNAPSHOT_OBJECTS)
    if objects is None:
        return store
    return FolderSnapshot(store, folder, objects)


def lists_trees(store: object) -> bool:
    """`isinstance(store, TreeListingStore)` as typing's runtime check decides it (each method
    present and not None, on the class or else on the instance), without its cost: about 9 us a
    call, once per request of every run."""
    return _has_tree_methods(type(store)) or _has_tree_methods(store)


def _has_tree_methods(holder: object) -> bool:
    return getattr(holder, "list_tree", None) is not None and getattr(holder, "read_listed", None) is not None
