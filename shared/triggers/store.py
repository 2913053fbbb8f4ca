"""Where trigger state lives, and its compare-and-swap writes (the ledger's rules: read with the
generation, write with `if_generation_match`, 0 to create; a 412 means another delivery won).

In the state bucket, under `triggers/`:

- `_definitions/<name>.json`       the definitions (`spotjobs triggers apply`, Terraform)
- `<name>/state.json`              per trigger: windows decided, data carried forward, last fire
- `<name>/open/<window id>`        an empty marker per window still to close (what a tick lists)
- `<name>/windows/<window id>.json`        the window document (open -> sealed -> closing -> closed...)
- `<name>/windows/<window id>/objects/<k>`  one empty object per notification; what it notified
                                   is in its custom metadata, so the manifest is one listing
- `<name>/windows/<window id>/sealed`  created at the seal: members created before it are the
                                   window's, later ones are carried forward (GCS times both)
- `_retention.json`                when the objects of deleted triggers were last looked for

A window's document, members and seal are removed once it is done and no notification can name it
any more, and a deleted trigger's objects once none was written for as long
(`shared.triggers.retention`); definitions and state documents are one per trigger.

One notification is one create of its own member object (`if_generation_match=0`): a redelivery
is a 412, and a burst of 10,000 notifications is 10,000 writes to 10,000 names, never a queue of
writes to one document (GCS sustains about one write per second per object name).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from shared.errors import SpotjobsError
from shared.swap import Swapped, Transition, compare_and_swap

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

PREFIX = "triggers/"
DEFINITIONS_PREFIX = f"{PREFIX}_definitions/"
# A window document in one of these states is done with (a request published, or nothing to
# publish); "deferred" is done once the trigger's state no longer carries it.
FINAL_STATES = ("closed", "skipped", "deferred", "failed")

Doc = dict[str, Any]


def definition_path(name: str) -> str:
    return f"{DEFINITIONS_PREFIX}{name}.json"


def state_path(name: str) -> str:
    return f"{PREFIX}{name}/state.json"


def open_prefix(name: str) -> str:
    return f"{PREFIX}{name}/open/"


def windows_prefix(name: str) -> str:
    return f"{PREFIX}{name}/windows/"


def window_path(name: str, window_id: str) -> str:
    return f"{windows_prefix(name)}{window_id}.json"


def members_prefix(name: str, window_id: str) -> str:
    return f"{windows_prefix(name)}{window_id}/objects/"


def seal_path(name: str, window_id: str) -> str:
    """An empty object created when the window is sealed: its creation time (the server's clock,
    as its members' are) divides the members the window lists from those it carries forward."""
    return f"{windows_prefix(name)}{window_id}/sealed"


# A trigger's state document: each field this version reads, and whether a JSON value has its
# shape (a field absent is read as empty; one this version does not know is kept as it is).
_STATE_FIELDS: dict[str, Callable[[Any], bool]] = {
    "schema_version": lambda v: type(v) is int,
    "trigger": lambda v: isinstance(v, str),
    "decided": lambda v: isinstance(v, dict) and all(isinstance(d, dict) for d in v.values()),
    "carry": lambda v: isinstance(v, list) and all(isinstance(w, str) for w in v),
    "carry_count": lambda v: type(v) is int,
    "last_fired_at": lambda v: v is None or isinstance(v, str),
    "last_fired_window": lambda v: v is None or isinstance(v, str),
    "windows_retired_at": lambda v: v is None or isinstance(v, str),
}
# Custom metadata on a corrupt document: the generation whose corruption was alerted.
CORRUPT_ALERTED_KEY = "spotjobs-corrupt-alerted"


def unreadable(path: str, raw: bytes) -> str | None:
    """Why the trigger document stored at `path` as `raw` cannot be read, or None (pure): not
    JSON, not an object, or a state document of another shape (a past or future version's layout,
    a field null or of another type), which the ledger's records reject alike."""
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return f"{type(exc).__name__}: {exc}"
    if not isinstance(document, dict):
        return f"{type(document).__name__}, not an object"
    if path.startswith(PREFIX) and path.endswith("/state.json"):
        for name, fits in _STATE_FIELDS.items():
            if name in document and not fits(document[name]):
                return f"its {name} is {str(document[name])[:60]}, not of a trigger state's shape"
    return None


class CorruptTriggerDocument(SpotjobsError):
    """A trigger document that cannot be read (`unreadable`: hand-edited, truncated, another
    version's layout): nothing is decided on it, and no housekeeping removes what it may still
    name."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"trigger document {path} cannot be read: {reason}")
        self.path = path


class TriggerStore:
    def __init__(self, bucket: Bucket, *, max_conflicts: int = 20) -> None:
        self._bucket = bucket
        self._max_conflicts = max_conflicts

    # Definitions.

    def list_definitions(self) -> list[Any]:
        """Every stored definition as stored: its JSON value, or its text when it is not JSON
        (`read_definition` judges either, so one bad definition never hides the others)."""
        from google.api_core.exceptions import NotFound

        out = []
        for blob in self._bucket.client.list_blobs(self._bucket, prefix=DEFINITIONS_PREFIX):
            try:
                raw = self._bucket.blob(blob.name).download_as_bytes()
            except NotFound:
                continue  # deleted since listed
            try:
                out.append(json.loads(raw))
            except (ValueError, RecursionError):
                out.append(raw.decode(errors="replace"))
        return out

    def get_definition(self, name: str) -> Doc | None:
        return self._read_blob(definition_path(name))[0]

    def put_definition(self, document: Doc) -> None:
        self._bucket.blob(definition_path(document["name"])).upload_from_string(
            json.dumps(document, indent=2, sort_keys=True), content_type="application/json"
        )

    def delete_definition(self, name: str) -> bool:
        from google.api_core.exceptions import NotFound

        try:
            self._bucket.blob(definition_path(name)).delete()
        except NotFound:
            return False
        return True

    # Documents (window and trigger state) by compare-and-swap.

    def read(self, path: str) -> tuple[Doc | None, int]:
        """The document and its generation; (None, 0) when absent. One that cannot be read
        (`unreadable`) raises `CorruptTriggerDocument`."""
        return self._read_blob(path)

    def corrupt_alerted(self, path: str) -> bool:
        """Whether the stored version of corrupt document `path` was alerted (`note_corrupt_alerted`);
        True when it is gone."""
        blob = self._bucket.get_blob(path)
        return blob is None or (blob.metadata or {}).get(CORRUPT_ALERTED_KEY) == str(blob.generation)

    def note_corrupt_alerted(self, path: str) -> None:
        """Note on corrupt document `path` that its stored version was alerted: the note names the
        generation, so a version written later is alerted again."""
        from google.api_core.exceptions import NotFound, PreconditionFailed

        blob = self._bucket.get_blob(path)
        if blob is None:
            return
        blob.metadata = {**(blob.metadata or {}), CORRUPT_ALERTED_KEY: str(blob.generation)}
        with contextlib.suppress(NotFound, PreconditionFailed):  # gone or changed: judged again
            blob.patch(if_metageneration_match=blob.metageneration)

    def create(self, path: str, doc: Doc) -> bool:
        """Create `path` if absent; False if it existed (another delivery made it first)."""
        from google.api_core.exceptions import PreconditionFailed

        try:
            self._write(path, doc, 0)
        except PreconditionFailed:
            return False
        return True

    def put(self, path: str, doc: Doc) -> None:
        """Write `path` whatever is there (last writer wins)."""
        self._write(path, doc, None)

    def update(self, path: str, transition: Transition[Doc]) -> Doc | None:
        """Apply `transition` under compare-and-swap and return the document as stored (`swap`)."""
        return self.swap(path, transition).value

    def swap(self, path: str, transition: Transition[Doc]) -> Swapped[Doc]:
        """Read, apply `transition` to a copy, write with the generation; again on a 412
        (`shared.swap`). A transition returning None writes nothing."""

        def write(_current: Doc | None, changed: Doc, generation: int) -> bool:
            from google.api_core.exceptions import PreconditionFailed

            try:
                self._write(path, changed, generation)
            except PreconditionFailed:
                return False
            return True

        return compare_and_swap(
            lambda: self._read_blob(path),
            write,
            transition,
            private_copy=lambda doc: json.loads(json.dumps(doc)),
            what=path,
            max_conflicts=self._max_conflicts,
        )

    # Markers and members.

    def touch(self, path: str, metadata: dict[str, str] | None = None) -> bool:
        """Create an empty object (with custom metadata) if absent; False if it existed."""
        return self.create_empty(path, metadata) is not None

    def create_empty(self, path: str, metadata: dict[str, str] | None = None) -> Any | None:
        """`touch`, returning the object created (with its creation time), or None if it existed."""
        from google.api_core.exceptions import PreconditionFailed

        blob = self._bucket.blob(path)
        if metadata:
            blob.metadata = metadata
        try:
            blob.upload_from_string(b"", content_type="application/octet-stream", if_generation_match=0)
        except PreconditionFailed:
            return None
        return blob

    def sealed_time(self, name: str, window_id: str) -> Any | None:
        """When the window was sealed, by the server's clock (its seal object), or None."""
        blob = self._bucket.get_blob(seal_path(name, window_id))
        return blob.time_created if blob is not None else None

    def claim_carry(self, path: str, metadata: dict[str, str], target: str) -> str:
        """Record on member `path` (created if absent) that it is carried to window `target`,
        unless a carry is recorded already; returns the target in force. A compare-and-swap on the
        member's own metadata (its metageneration; 0 = create): the record cannot be skipped
        because the member exists (a create-if-absent would be), and two instances agree on one
        target."""

        def read() -> tuple[dict[str, str] | None, int]:
            blob = self._bucket.get_blob(path)
            return (None, 0) if blob is None else (dict(blob.metadata or {}), int(blob.metageneration))

        def write(_current: dict[str, str] | None, proposed: dict[str, str], metageneration: int) -> bool:
            from google.api_core.exceptions import NotFound, PreconditionFailed

            if metageneration == 0:
                return self.touch(path, proposed)
            blob = self._bucket.blob(path)
            blob.metadata = proposed
            try:
                blob.patch(if_metageneration_match=metageneration)
            except (PreconditionFailed, NotFound):
                return False
            return True

        def carry(current: dict[str, str] | None) -> dict[str, str] | None:
            if current is not None and current.get("carried_to"):
                return None  # carried already: that target stands
            return {**(current if current is not None else metadata), "carried_to": target}

        stored = compare_and_swap(read, write, carry, private_copy=dict, what=path, max_conflicts=self._max_conflicts)
        return stored.value["carried_to"] if stored.value else target

    def member(self, path: str) -> Any | None:
        """The member object (with metadata and creation time), or None."""
        return self._bucket.get_blob(path)

    def delete(self, path: str) -> None:
        from google.api_core.exceptions import NotFound

        try:
            self._bucket.blob(path).delete()
        except NotFound:
            pass

    def trigger_names(self) -> list[str]:
        """Every trigger with objects under `triggers/` (defined or not)."""
        listing = self._bucket.client.list_blobs(
            self._bucket, prefix=PREFIX, delimiter="/", fields="prefixes,nextPageToken"
        )
        names = {folder[len(PREFIX) :].rstrip("/") for page in listing.pages for folder in page.prefixes}
        return sorted(names - {DEFINITIONS_PREFIX[len(PREFIX) :].rstrip("/")})

    def window_ids_before(self, name: str, end: str) -> list[str]:
        """The ids of trigger `name`'s windows (a document, or objects under the window) that sort
        before window id `end`, oldest first: window ids sort like their start, so one listing
        bounded by `end` costs the old windows only."""
        prefix = windows_prefix(name)
        listing = self._bucket.client.list_blobs(
            self._bucket, prefix=prefix, delimiter="/", end_offset=f"{prefix}{end}"
        )
        ids = {blob.name[len(prefix) :].removesuffix(".json") for blob in listing}
        ids |= {folder[len(prefix) :].rstrip("/") for folder in listing.prefixes}
        return sorted(ids)

    def delete_window(self, name: str, window_id: str, limit: int) -> int:
        """Remove up to `limit` objects of a window: its members and seal, then, once they are
        gone, its document (last, so a removal cut short is still listed and finished later).
        Returns the objects removed."""
        from google.api_core.exceptions import NotFound

        folder = f"{windows_prefix(name)}{window_id}/"
        doomed = [folder + key for key in self.list_names(folder)]
        doomed = doomed[:limit] if len(doomed) >= limit else [*doomed, window_path(name, window_id)]
        removed = 0
        for path in doomed:
            try:
                self._bucket.blob(path).delete()
            except NotFound:
                continue
            removed += 1
        return removed

    def list_names(self, prefix: str) -> list[str]:
        return [
            blob.name[len(prefix) :]
            for blob in self._bucket.client.list_blobs(self._bucket, prefix=prefix, fields="items(name),nextPageToken")
        ]

    def iter_members(self, prefix: str) -> Iterator[tuple[str, dict[str, str], Any]]:
        """(key, custom metadata, creation time) of every member under `prefix`, in name order
        (one listing)."""
        for blob in self._bucket.client.list_blobs(self._bucket, prefix=prefix):
            yield blob.name[len(prefix) :], dict(blob.metadata or {}), blob.time_created

    def window_members(self, name: str, window_ids: Iterable[str]) -> Iterator[dict[str, str]]:
        """What the windows list: the metadata of their members created before the seal, less
        those carried forward to a later window (they are listed there); a member created after
        the seal is carried by whoever wrote it."""
        for window_id in window_ids:
            sealed = self.sealed_time(name, window_id)
            for _key, metadata, created in self.iter_members(members_prefix(name, window_id)):
                if metadata.get("carried_to") or (sealed is not None and created is not None and created >= sealed):
                    continue
                yield metadata

    # Internals.

    def _read_blob(self, path: str) -> tuple[Doc | None, int]:
        from google.api_core.exceptions import NotFound

        blob = self._bucket.blob(path)
        try:
            raw = blob.download_as_bytes()
        except NotFound:
            return None, 0
        reason = unreadable(path, raw)
        if reason is not None:
            raise CorruptTriggerDocument(path, reason)
        return json.loads(raw), int(blob.generation)

    def _write(self, path: str, doc: Doc, generation: int | None) -> None:
        self._bucket.blob(path).upload_from_string(
            json.dumps(doc, separators=(",", ":"), sort_keys=True),
            content_type="application/json",
            if_generation_match=generation,
        )
