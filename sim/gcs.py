"""Cloud Storage in memory: the subset of google-cloud-storage the functions call, with its semantics.

- every write of an object gives it a new generation (the microsecond of the write on the virtual
  clock, strictly increasing: `shared.pacing` reads a generation as its commit time) and
  metageneration 1; a metadata patch bumps the metageneration;
- `if_generation_match` / `if_metageneration_match` are checked on every write, read and delete
  (0: the object must not exist) and fail with 412 PreconditionFailed; a missing object is 404;
- listings are in lexicographic name order, paged (`max_results`, `page_token`), from
  `start_offset`, with `delimiter` prefixes;
- `updated` / `time_created` are the server's (virtual) time;
- every call goes through the world's `io` hook first, which may crash the handler (before or
  after the call), fail it with a 503 before it happens, or lose the response after it happened;
- lifecycle rules are applied by `apply_lifecycle`, judged by tests/support/lifecycle.py (age, the
  object's Custom-Time, name prefixes and suffixes), the evaluator the retention tests use.

A stored object is never changed in place (a write or a patch stores a new one), so reads and
listings hand out the stored object itself, not a copy: a `Blob` copies what it keeps of it.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as api

if TYPE_CHECKING:
    from tests.support.lifecycle import Rule


class ObjectTable(dict[str, "StoredObject"]):
    """A bucket's objects by name, with the names kept sorted for listings."""

    def __init__(self) -> None:
        super().__init__()
        self._names: list[str] = []
        self.changes = 0  # writes and deletes so far: a checker that read the table knows if it moved

    def __setitem__(self, name: str, obj: StoredObject) -> None:
        if name not in self:
            bisect.insort(self._names, name)
        super().__setitem__(name, obj)
        self.changes += 1

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name)
        del self._names[bisect.bisect_left(self._names, name)]
        self.changes += 1

    def names_from(self, low: str) -> Iterator[str]:
        """The names from `low` on, in order (a snapshot: safe against writes meanwhile)."""
        names = self._names
        for i in range(bisect.bisect_left(names, low), len(names)):
            yield names[i]

    def listed(self, low: str, prefix: str, max_results: int | None) -> list[tuple[str, StoredObject | None]]:
        """The objects from `low` on whose names start with `prefix` (`low` is not before it), in
        order, at most one more than `max_results`: a listing without a delimiter or an end."""
        names = self._names
        start = bisect.bisect_left(names, low)
        end = len(names) if not prefix else self._prefix_end(prefix, start)
        if max_results is not None:
            end = min(end, start + max_results + 1)
        return [(name, self[name]) for name in names[start:end]]

    def _prefix_end(self, prefix: str, start: int) -> int:
        """The index after the last name from `start` on that starts with `prefix` (they are
        contiguous in sorted order)."""
        names = self._names
        last = prefix[-1]
        if last == chr(0x10FFFF):  # no next character: walk
            end = start
            while end < len(names) and names[end].startswith(prefix):
                end += 1
            return end
        return bisect.bisect_left(names, prefix[:-1] + chr(ord(last) + 1), start)

    def names_under(self, prefix: str) -> list[str]:
        """The names that start with `prefix`, in order."""
        names = self._names
        start = bisect.bisect_left(names, prefix)
        end = start
        while end < len(names) and names[end].startswith(prefix):
            end += 1
        return names[start:end]


@dataclass(slots=True)
class StoredObject:
    data: bytes
    generation: int
    metageneration: int
    metadata: dict[str, str] | None
    content_type: str | None
    time_created: datetime
    updated: datetime
    custom_time: datetime | None = None  # what `days_since_custom_time` lifecycle rules count from


IoHook = Callable[[str, str, Callable[[], Any]], Any]  # (service, operation, perform) -> result


def _direct(_service: str, _operation: str, perform: Callable[[], Any]) -> Any:
    return perform()


@dataclass
class MemoryStorage:
    """The whole of Cloud Storage: buckets of objects, one virtual clock, one io hook."""

    clock: Callable[[], datetime]
    io: IoHook = _direct
    buckets: dict[str, ObjectTable] = field(default_factory=dict)
    _last_generation: int = 0

    def objects(self, bucket: str) -> ObjectTable:
        table = self.buckets.get(bucket)
        if table is None:
            table = self.buckets[bucket] = ObjectTable()
        return table

    def next_generation(self) -> int:
        now = int(self.clock().timestamp() * 1_000_000)
        self._last_generation = max(self._last_generation + 1, now)
        return self._last_generation

    def client(self) -> Client:
        return Client(self)

    def apply_lifecycle(self, bucket: str, rules: Sequence[Rule]) -> list[str]:
        """Delete what the Delete rules match at the current time; the names deleted (in order)."""
        now = self.clock()
        objects = self.objects(bucket)
        acting = [r for r in rules if r.action == "Delete" and r.for_live_objects]
        gone = sorted(
            {
                name
                for rule in acting
                for name in _lifecycle_candidates(objects, rule)
                if rule.deletes(name, created=(obj := objects[name]).time_created, custom_time=obj.custom_time, now=now)
            }
        )
        for name in gone:
            del objects[name]
        return gone


def _lifecycle_candidates(objects: ObjectTable, rule: Rule) -> list[str]:
    """The names `rule` may delete: those under its `matches_prefix`, or every name for a rule
    without one (a rule acts only when all its conditions hold)."""
    prefixes = rule.condition.get("matches_prefix")
    if not prefixes:
        return list(objects._names)  # noqa: SLF001
    return [name for prefix in prefixes for name in objects.names_under(prefix)]


class Client:
    def __init__(self, storage: MemoryStorage) -> None:
        self._storage = storage
        self.project = "sim"

    def bucket(self, name: str) -> Bucket:
        return Bucket(self, name)

    def list_blobs(
        self,
        bucket: Bucket | str,
        *,
        prefix: str | None = None,
        start_offset: str | None = None,
        end_offset: str | None = None,
        max_results: int | None = None,
        page_token: str | None = None,
        page_size: int | None = None,
        delimiter: str | None = None,
        fields: str | None = None,
        **_: Any,
    ) -> BlobIterator:
        bucket = bucket if isinstance(bucket, Bucket) else self.bucket(bucket)

        def perform() -> list[tuple[str, StoredObject | None]]:
            table = self._storage.objects(bucket.name)
            low = max(prefix or "", start_offset or "", (page_token + "\0") if page_token else "")
            if not delimiter and not end_offset:
                return table.listed(low, prefix or "", max_results)
            items: list[tuple[str, StoredObject | None]] = []
            seen_prefixes: set[str] = set()
            for name in table.names_from(low):
                if prefix and not name.startswith(prefix):
                    break
                if end_offset and name >= end_offset:
                    break
                if max_results is not None and len(items) > max_results:
                    break  # one more than asked: enough to know a next page exists
                if delimiter:
                    rest = name[len(prefix or "") :]
                    if delimiter in rest:
                        sub = (prefix or "") + rest[: rest.index(delimiter) + len(delimiter)]
                        if sub not in seen_prefixes:
                            seen_prefixes.add(sub)
                            items.append((sub, None))
                        continue
                items.append((name, table[name]))
            return items

        items = self._storage.io("gcs", "list", perform)
        return BlobIterator(bucket, items, max_results, page_size)


class BlobIterator:
    """The listing: `pages` (each with `prefixes`), iteration over every blob, `next_page_token`
    (the name after which the next page starts) once `max_results` cut it short."""

    def __init__(
        self,
        bucket: Bucket,
        items: list[tuple[str, StoredObject | None]],
        max_results: int | None,
        page_size: int | None,
    ) -> None:
        self.next_page_token: str | None = None
        if max_results is not None and len(items) > max_results:
            items = items[:max_results]
            self.next_page_token = items[-1][0]
        size = page_size or 1000
        self._pages = [items[i : i + size] for i in range(0, len(items), size)] or [[]]
        self._bucket = bucket
        self.prefixes: set[str] = set()

    @property
    def pages(self) -> Iterator[Page]:
        for chunk in self._pages:
            page = Page(
                [Blob._listed(self._bucket, name, obj) for name, obj in chunk if obj is not None],
                {name for name, obj in chunk if obj is None},
            )
            self.prefixes |= page.prefixes
            yield page

    def __iter__(self) -> Iterator[Blob]:
        for page in self.pages:
            yield from page


class Page:
    def __init__(self, blobs: list[Blob], prefixes: set[str]) -> None:
        self._blobs = blobs
        self.prefixes = prefixes
        self.num_items = len(blobs)

    def __iter__(self) -> Iterator[Blob]:
        return iter(self._blobs)


class Bucket:
    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name
        self._storage = client._storage  # noqa: SLF001

    def blob(self, name: str, **_: Any) -> Blob:
        return Blob(self, name)

    def get_blob(self, name: str, **_: Any) -> Blob | None:
        def perform() -> StoredObject | None:
            obj = self._storage.objects(self.name).get(name)
            return obj

        obj = self._storage.io("gcs", "get", perform)
        return Blob._listed(self, name, obj) if obj is not None else None

    def delete_blob(self, name: str, *, if_generation_match: int | None = None, **_: Any) -> None:
        Blob(self, name).delete(if_generation_match=if_generation_match)

    def copy_blob(self, blob: Blob, destination_bucket: Bucket, new_name: str | None = None, **_: Any) -> Blob:
        def perform() -> StoredObject:
            source = self._storage.objects(self.name).get(blob.name)
            if source is None:
                raise api.NotFound(f"{blob.name} does not exist")
            now = self._storage.clock()
            copied = StoredObject(
                source.data,
                self._storage.next_generation(),
                1,
                dict(source.metadata) if source.metadata else None,
                source.content_type,
                now,
                now,
            )
            self._storage.objects(destination_bucket.name)[new_name or blob.name] = copied
            return copied

        obj = self._storage.io("gcs", "copy", perform)
        return Blob._listed(destination_bucket, new_name or blob.name, obj)


class Blob:
    def __init__(self, bucket: Bucket, name: str) -> None:
        self.bucket = bucket
        self.name = name
        self._storage = bucket._storage  # noqa: SLF001
        self.generation: int | None = None
        self.metageneration: int | None = None
        self.metadata: dict[str, str] | None = None
        self.updated: datetime | None = None
        self.time_created: datetime | None = None
        self.size: int | None = None
        self.content_type: str | None = None
        self.custom_time: datetime | None = None

    @classmethod
    def _listed(cls, bucket: Bucket, name: str, obj: StoredObject) -> Blob:
        blob = cls(bucket, name)
        blob._load(obj)
        return blob

    def _load(self, obj: StoredObject) -> None:
        self.generation = obj.generation
        self.metageneration = obj.metageneration
        self.metadata = dict(obj.metadata) if obj.metadata is not None else None
        self.updated = obj.updated
        self.time_created = obj.time_created
        self.size = len(obj.data)
        self.content_type = obj.content_type
        self.custom_time = obj.custom_time

    def _objects(self) -> dict[str, StoredObject]:
        return self._storage.objects(self.bucket.name)

    def _check(self, obj: StoredObject | None, generation: int | None, metageneration: int | None = None) -> None:
        if generation is not None and (obj.generation if obj else 0) != generation:
            raise api.PreconditionFailed(f"{self.name}: generation does not match {generation}")
        if metageneration is not None and (obj is None or obj.metageneration != metageneration):
            raise api.PreconditionFailed(f"{self.name}: metageneration does not match {metageneration}")

    def upload_from_string(
        self,
        data: bytes | str,
        content_type: str = "text/plain",
        *,
        if_generation_match: int | None = None,
        if_metageneration_match: int | None = None,
        **_: Any,
    ) -> None:
        payload = data.encode() if isinstance(data, str) else bytes(data)

        def perform() -> StoredObject:
            current = self._objects().get(self.name)
            self._check(current, if_generation_match, if_metageneration_match)
            now = self._storage.clock()
            obj = StoredObject(
                payload,
                self._storage.next_generation(),
                1,
                dict(self.metadata) if self.metadata else None,
                content_type,
                now,
                now,
                self.custom_time,
            )
            self._objects()[self.name] = obj
            return obj

        self._load(self._storage.io("gcs", "write", perform))

    def download_as_bytes(self, *, if_generation_match: int | None = None, **_: Any) -> bytes:
        def perform() -> StoredObject:
            obj = self._objects().get(self.name)
            if obj is None:
                raise api.NotFound(f"{self.name} does not exist")
            self._check(obj, if_generation_match)
            return obj

        obj = self._storage.io("gcs", "read", perform)
        self._load(obj)
        return obj.data

    def download_as_text(self, **kwargs: Any) -> str:
        return self.download_as_bytes(**kwargs).decode()

    def exists(self, **_: Any) -> bool:
        return self._storage.io("gcs", "get", lambda: self.name in self._objects())

    def reload(self, **_: Any) -> None:
        def perform() -> StoredObject:
            obj = self._objects().get(self.name)
            if obj is None:
                raise api.NotFound(f"{self.name} does not exist")
            return obj

        self._load(self._storage.io("gcs", "get", perform))

    def patch(self, *, if_metageneration_match: int | None = None, **_: Any) -> None:
        metadata = dict(self.metadata) if self.metadata else None

        def perform() -> StoredObject:
            obj = self._objects().get(self.name)
            if obj is None:
                raise api.NotFound(f"{self.name} does not exist")
            self._check(obj, None, if_metageneration_match)
            patched = dataclasses.replace(
                obj,
                metadata={**(obj.metadata or {}), **(metadata or {})},
                metageneration=obj.metageneration + 1,
                updated=self._storage.clock(),
            )
            self._objects()[self.name] = patched
            return patched

        self._load(self._storage.io("gcs", "patch", perform))

    def delete(self, *, if_generation_match: int | None = None, **_: Any) -> None:
        def perform() -> None:
            obj = self._objects().get(self.name)
            if obj is None:
                raise api.NotFound(f"{self.name} does not exist")
            self._check(obj, if_generation_match)
            del self._objects()[self.name]

        self._storage.io("gcs", "delete", perform)

    def open(self, mode: str = "r", **_: Any) -> Any:
        import io

        return io.StringIO(self.download_as_text()) if "b" not in mode else io.BytesIO(self.download_as_bytes())
