"""A bucket in memory with the calls `shared.ledger.store.LedgerStore` makes, counting each call and
the bytes a real one would carry (a listing's JSON object resources, a download's body), with an
optional latency per call. For benchmarks at a size fake-gcs-server cannot hold (its backends scan
every object on each call: docs/performance.md, "How to read it", prune) and for tests that count calls."""

from __future__ import annotations

import bisect
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass
class _Stored:
    data: bytes
    metadata: dict[str, str] | None
    content_type: str
    generation: int
    updated: datetime = field(default_factory=lambda: datetime.now(UTC))
    metageneration: int = 1
    time_created: datetime = field(default_factory=lambda: datetime.now(UTC))


class MemoryBucket:
    """One bucket; `client` is the bucket itself (the store lists through `bucket.client`)."""

    def __init__(self, name: str = "state", *, latency_seconds: float = 0.0) -> None:
        self.name = name
        self.client = self
        self.latency_seconds = latency_seconds
        self.calls: Counter[str] = Counter()  # by kind: list, download, get, upload, patch, delete
        self.bytes: Counter[str] = Counter()  # the response bytes, by kind
        self._objects: dict[str, _Stored] = {}
        self._names: list[str] = []  # sorted, as GCS lists
        self._generation = 0
        self._lock = threading.Lock()

    def reset_counts(self) -> None:
        self.calls.clear()
        self.bytes.clear()

    def set_updated(self, name: str, moment: datetime) -> None:
        """Backdate an object's last write (a ledger with history)."""
        self._objects[name].updated = moment

    def objects(self) -> Iterator[tuple[str, bytes, dict[str, str] | None, datetime]]:
        """Every object (name, body, custom metadata, last write), in name order: to copy elsewhere."""
        for name in self._names:
            stored = self._objects[name]
            yield name, stored.data, stored.metadata, stored.updated

    def _call(self, kind: str, size: int) -> None:
        with self._lock:
            self.calls[kind] += 1
            self.bytes[kind] += size
        if self.latency_seconds:
            time.sleep(self.latency_seconds)

    # The storage.Client and Bucket surface the store uses.

    def blob(self, name: str) -> MemoryBlob:
        return MemoryBlob(self, name)

    def get_blob(self, name: str) -> MemoryBlob | None:
        stored = self._objects.get(name)
        self._call("get", len(json.dumps(_resource(self.name, name, stored))) if stored else 0)
        return MemoryBlob(self, name, stored) if stored else None

    def delete_blob(self, name: str, if_generation_match: int | None = None) -> None:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        self._call("delete", 0)
        with self._lock:
            stored = self._objects.get(name)
            if stored is None:
                raise NotFound(name)
            if if_generation_match is not None and stored.generation != if_generation_match:
                raise PreconditionFailed(name)
            del self._objects[name]
            self._names.pop(bisect.bisect_left(self._names, name))

    def list_blobs(
        self,
        bucket: Any,
        *,
        prefix: str = "",
        start_offset: str | None = None,
        max_results: int = 1000,
        page_token: str | None = None,
        fields: str | None = None,
    ) -> _Listing:
        at = bisect.bisect_left(self._names, max(prefix, start_offset or ""))
        if page_token:  # the last name the previous page listed
            at = max(at, bisect.bisect_right(self._names, page_token))
        names = [n for n in self._names[at : at + max_results] if n.startswith(prefix)]
        more = at + max_results < len(self._names) and self._names[at + max_results].startswith(prefix)
        blobs = [MemoryBlob(self, n, self._objects[n]) for n in names]
        wanted = fields.split("(", 1)[1].split(")", 1)[0].split(",") if fields else None
        size = sum(len(json.dumps(_resource(self.name, b.name, b._stored, wanted))) for b in blobs)
        self._call("list", size)
        return _Listing(blobs, names[-1] if more and names else None)

    def _upload(
        self, name: str, data: bytes, metadata: dict[str, str] | None, content_type: str, match: int | None
    ) -> int:
        from google.api_core.exceptions import PreconditionFailed

        self._call("upload", 0)
        with self._lock:
            stored = self._objects.get(name)
            if match is not None and (stored.generation if stored else 0) != match:
                raise PreconditionFailed(name)
            self._generation += 1
            if stored is None:
                bisect.insort(self._names, name)
            self._objects[name] = _Stored(data, dict(metadata) if metadata else None, content_type, self._generation)
            return self._generation

    def _patch(self, name: str, metadata: dict[str, str] | None) -> _Stored:
        """Merge custom metadata into an object, as GCS's PATCH does: the generation stays."""
        from google.api_core.exceptions import NotFound

        self._call("patch", 0)
        with self._lock:
            stored = self._objects.get(name)
            if stored is None:
                raise NotFound(name)
            stored.metadata = {**(stored.metadata or {}), **(metadata or {})}
            stored.metageneration += 1
            stored.updated = datetime.now(UTC)
            return stored


class MemoryBlob:
    def __init__(self, bucket: MemoryBucket, name: str, stored: _Stored | None = None) -> None:
        self._bucket = bucket
        self.name = name
        self._stored = stored
        self.metadata = dict(stored.metadata) if stored and stored.metadata else None
        self.generation = stored.generation if stored else None
        self.metageneration = stored.metageneration if stored else None
        self.updated = stored.updated if stored else None
        self.time_created = stored.time_created if stored else None

    def download_as_bytes(self) -> bytes:
        from google.api_core.exceptions import NotFound

        stored = self._bucket._objects.get(self.name)
        self._bucket._call("download", len(stored.data) if stored else 0)
        if stored is None:
            raise NotFound(self.name)
        self.generation = stored.generation
        return stored.data

    def upload_from_string(
        self, data: str | bytes, content_type: str = "text/plain", if_generation_match: int | None = None
    ) -> None:
        raw = data.encode() if isinstance(data, str) else data
        self.generation = self._bucket._upload(self.name, raw, self.metadata, content_type, if_generation_match)

    def patch(self) -> None:
        stored = self._bucket._patch(self.name, self.metadata)
        self.metageneration = stored.metageneration
        self.updated = stored.updated


class _Listing:
    """One page of a listing, as the store reads it (`next(iterator.pages)`, `next_page_token`)."""

    def __init__(self, blobs: list[MemoryBlob], next_page_token: str | None) -> None:
        self.pages: Iterator[list[MemoryBlob]] = iter([blobs])
        self.next_page_token = next_page_token


def _resource(bucket: str, name: str, stored: _Stored, wanted: list[str] | None = None) -> dict[str, Any]:
    """The JSON object resource GCS returns for an object (its fields, about their sizes)."""
    updated = stored.updated.isoformat().replace("+00:00", "Z")
    resource = {
        "kind": "storage#object",
        "id": f"{bucket}/{name}/{stored.generation}",
        "selfLink": f"https://www.googleapis.com/storage/v1/b/{bucket}/o/{name}",
        "mediaLink": f"https://storage.googleapis.com/download/storage/v1/b/{bucket}/o/{name}?generation={stored.generation}&alt=media",
        "name": name,
        "bucket": bucket,
        "generation": str(stored.generation),
        "metageneration": str(stored.metageneration),
        "contentType": stored.content_type,
        "storageClass": "STANDARD",
        "size": str(len(stored.data)),
        "md5Hash": "x" * 24,
        "crc32c": "x" * 8,
        "etag": "x" * 16,
        "timeCreated": stored.time_created.isoformat().replace("+00:00", "Z"),
        "updated": updated,
        "timeStorageClassUpdated": updated,
    }
    if stored.metadata:
        resource["metadata"] = stored.metadata
    return {k: v for k, v in resource.items() if k in wanted} if wanted else resource
