"""The ledger: one JSON document per request in the state bucket, changed only by compare-and-swap.

One module on purpose (over 450 lines): a record's compare-and-swap and every object that must stay
consistent with it (its active marker, its job index entries, the corrupt note) share one bucket
layout and one write path; split apart, the ordering rules below (marker before record,
referrers before removal) would span modules that each look safe. What keeps no such rule is
elsewhere: the record itself, plain data with no storage in it (`shared.ledger.records`), the
maintenance runs' cursors (`shared.ledger.cursors`) and the lines parked for a job not indexed
yet (`shared.ledger.parked`), both parts of `LedgerStore` in its bucket.

Layout in `gs://<state bucket>/`:
- `requests/<request_id>.json`: a `RequestRecord` (the request, its status and attempts).
  Its custom metadata carries `status`, `created_at` and the CustomJob's `labels`, so a listing
  tells which requests are still active, which are newest and which carry a label, without
  downloading every document.
- `jobs/<job_id>.json`: `{"request_id", "attempt", "location", "job"}`, written once per created
  job. A log entry names only the numeric job id; this index answers "is it ours, and where"
  with one read and no Vertex call.

Every change is `LedgerStore.update(request_id, transition)`: read (with generation), apply a pure
transition to a copy, write with `if_generation_match` (0 to create). A 412 means another delivery
won the race: re-read and decide again. Two deliveries can therefore never both make the same
transition, which is what makes claims and re-queue decisions exactly-once.

Publishing is not part of a write, so what a decision publishes (alerts, the prune request) is
at-least-once: it is recorded as pending in the same compare-and-swap as the decision, published
after the write, then cleared; whoever finds it still pending later (a redelivery, reconcile)
publishes it. A crash between a publish and its clearing can therefore repeat it. A record with
pending effects says so in its metadata (`pending_effects`), so reconcile lists it even once
finished.

The active index (docs/ARCHITECTURE.md, "The active index"): `active/<request_id>`, an empty
marker object for every request that needs reconciling (not terminal, or with effects pending), so
a reconcile pass lists the active few, not every request ever made. Its custom metadata carries the
record's `created_at` and `status` (noted by a metadata patch after each write that changes the
status), so `spotjobs status --status active` and the dashboard count and sort the active requests
from one listing and read only the records they show. The record's compare-and-swap stays the only
truth; a marker is a hint that may be stale in one direction only:
- a write that makes a record active (created, or terminal -> effects pending) first (re)writes
  its marker, unconditionally (a fresh generation and time), then compare-and-swaps the record;
  so an active record always has a marker, whatever crashes when;
- a marker is removed only by `remove_stale_marker`: the record, read after the marker was listed,
  no longer needs reconciling, the marker was written more than `INDEX_GRACE_SECONDS` ago (longer
  than any write can take between its marker and its compare-and-swap; a status patch does not
  count as a write: it neither moves the generation nor its creation time), and the delete is
  conditional on the generation listed. A write that re-activates the record meanwhile either rewrote the marker
  before that listing (then it is too young to remove, or its compare-and-swap landed before the
  record was read) or after it (then the generation no longer matches).
`maintenance/active-index.json` says the index was built: until then reconcile lists every record
once, writing the markers of the active ones (a ledger from before the index).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.clock import now_iso, utcnow
from shared.ledger.cursors import MAINTENANCE_PREFIX, MaintenanceCursors
from shared.ledger.parked import ParkedLines
from shared.ledger.records import CorruptRecord, RequestRecord, private_copy, shared_record
from shared.ledger.states import TERMINAL_STATUSES, check_transition
from shared.log import Logger
from shared.requests.envelope import manifest_path
from shared.swap import Decided, Swapped, Transition, compare_and_swap

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

REQUESTS_PREFIX = "requests/"
JOBS_PREFIX = "jobs/"
ACTIVE_PREFIX = "active/"
ARCHIVE_PREFIX = "archive/"
INDEX_BUILT = f"{MAINTENANCE_PREFIX}active-index.json"
# Longer than any ledger write can take between writing a marker and its compare-and-swap (a
# function's whole timeout, 540 s, with room): a younger marker is never removed.
INDEX_GRACE_SECONDS = 900.0
# How long a record read ahead by a reconcile pass's index check may stand in for a read.
PREFETCH_SECONDS = 60.0
# The largest `labels` metadata value written: GCS allows 8 KiB of custom metadata per object and
# 4 KiB per value (https://docs.cloud.google.com/storage/docs/reference/rpc/google.storage.v1,
# ServiceConstants), and a CustomJob's labels may take more (64-character keys and values). Larger
# label sets are left out: a listing then reads the record, as for one written before labels were kept.
LABELS_METADATA_BYTES = 2048

_log = Logger({"component": "ledger"})
# What `json.dumps` with these separators builds for each call, built once (every write encodes).
_DOCUMENT_JSON = json.JSONEncoder(separators=(",", ":"))
_LABELS_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class ListedRequest:
    """A ledger document as a listing shows it (object metadata, no download)."""

    request_id: str
    status: str | None
    pending_effects: bool
    updated: datetime | None = None  # the document's last write (listings only)
    created_at: str | None = None  # the record's; None for a document written before it was kept
    labels: dict[str, str] | None = None  # the CustomJob's; None when not kept (read the record)

    @property
    def needs_reconcile(self) -> bool:
        return self.status not in TERMINAL_STATUSES or self.pending_effects


def needs_reconcile(record: RequestRecord | None) -> bool:
    """Whether reconcile must visit `record`: what puts it in the active index."""
    return record is not None and (not record.is_terminal or record.has_pending_effects)


def marker_removable(entry: ActiveEntry, status: ListedRequest | None, now: datetime) -> bool:
    """Whether `remove_stale_marker` may remove a listed marker (if unchanged since listed): its
    record, read after the listing, needs no reconcile, and it is older than `INDEX_GRACE_SECONDS`."""
    if (status is not None and status.needs_reconcile) or entry.written is None:
        return False
    return (now - entry.written).total_seconds() >= INDEX_GRACE_SECONDS


@dataclass(frozen=True)
class ActiveEntry:
    """A marker of the active index as listed: its generation and time guard its removal; its
    status and creation (None on a marker written before it held them) are the record's hint."""

    request_id: str
    generation: int
    written: datetime | None  # this generation's creation (a status patch leaves it)
    status: str | None = None  # the record's as of its last status change
    created_at: str | None = None  # the record's

    @classmethod
    def of(cls, request_id: str, blob: Any) -> ActiveEntry:
        metadata = blob.metadata or {}
        written = getattr(blob, "time_created", None) or blob.updated
        return cls(request_id, int(blob.generation), written, metadata.get("status"), metadata.get("created_at"))


@dataclass(frozen=True)
class ListedObject:
    """An object of the state bucket as listed: its generation guards its removal."""

    name: str
    generation: int
    updated: datetime | None


@dataclass(frozen=True)
class JobIndexEntry:
    request_id: str
    attempt: int
    location: str
    job: str


class LedgerStore(MaintenanceCursors, ParkedLines):
    """Reads and compare-and-swap writes of ledger documents in one bucket; its maintenance
    cursors (`MaintenanceCursors`) and the lines parked for jobs not indexed yet (`ParkedLines`)
    are kept in the same bucket."""

    def __init__(self, bucket: Bucket, *, max_conflicts: int = 20) -> None:
        self._bucket = bucket
        self._max_conflicts = max_conflicts
        # Records read ahead by `prefetch`, each handed out once by `get` (see there).
        self._prefetched: dict[str, tuple[float, RequestRecord]] = {}
        self._prefetch_lock = threading.Lock()

    # Reading.

    def read(self, request_id: str) -> tuple[RequestRecord | None, int]:
        """The record and its generation; (None, 0) when absent (0 is then the create guard)."""
        record, generation = self._read_shared(request_id)
        return (None if record is None else private_copy(record)), generation

    def _read_shared(self, request_id: str) -> tuple[RequestRecord | None, int]:
        """`read`, with the parse's shared record (`shared_record`): only to be looked at."""
        from google.api_core.exceptions import NotFound

        blob = self._bucket.blob(_request_path(request_id))
        try:
            raw = blob.download_as_bytes()
        except NotFound:
            return None, 0
        try:
            return shared_record(raw), int(blob.generation)
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            raise CorruptRecord(request_id, f"{type(exc).__name__}: {exc}") from exc

    def note_corrupt(self, request_id: str) -> None:
        """Note that `request_id`'s document was found corrupt and reported (idempotent)."""
        from google.api_core.exceptions import PreconditionFailed

        with contextlib.suppress(PreconditionFailed):
            self._bucket.blob(_corrupt_path(request_id)).upload_from_string(
                json.dumps({"request_id": request_id, "noted_at": now_iso()}),
                content_type="application/json",
                if_generation_match=0,
            )

    def is_noted_corrupt(self, request_id: str) -> bool:
        return self._bucket.blob(_corrupt_path(request_id)).exists()

    def forget_manifest(self, request_id: str) -> None:
        """Remove a trigger request's manifest with its record (ledger retention)."""
        from google.api_core.exceptions import NotFound

        with contextlib.suppress(NotFound):
            self._bucket.delete_blob(manifest_path(request_id))

    def forget_corrupt(self, request_id: str) -> None:
        """Remove the note with the record it was about (ledger retention)."""
        from google.api_core.exceptions import NotFound

        with contextlib.suppress(NotFound):
            self._bucket.delete_blob(_corrupt_path(request_id))

    def get(self, request_id: str) -> RequestRecord | None:
        """The record as read now, or as `prefetch` read it less than `PREFETCH_SECONDS` ago
        (handed out once): no caller can tell it from a read that took that long, and every
        change re-reads under compare-and-swap (`update`)."""
        with self._prefetch_lock:
            ahead = self._prefetched.pop(request_id, None)
        if ahead is not None and time.monotonic() - ahead[0] < PREFETCH_SECONDS:
            return private_copy(ahead[1])  # the caller's own; one read ahead and never asked for costs no copy
        return self.read(request_id)[0]

    def prefetch(self, request_id: str) -> ListedRequest | None:
        """Read the record (one download) for the next `get` of it, and return what a listing
        would show of it; None if absent. The active index's check: a pass then reads each
        active record once, not twice."""
        record = self._read_shared(request_id)[0]
        if record is None:
            return None
        with self._prefetch_lock:
            self._prefetched[request_id] = (time.monotonic(), record)
        return ListedRequest(request_id, record.status, record.has_pending_effects)

    def keep_prefetched(self, request_ids: Collection[str]) -> None:
        """Drop what was read ahead except for `request_ids` (those about to be read)."""
        keep = set(request_ids)
        with self._prefetch_lock:
            for request_id in [r for r in self._prefetched if r not in keep]:
                del self._prefetched[request_id]

    def list_requests(
        self, *, page_size: int = 1000, page_token: str | None = None, start_at: str = ""
    ) -> tuple[list[ListedRequest], str | None]:
        """One page of requests in the listing's (byte) order, from `start_at`'s document on
        (inclusive; "" = from the first), and the next page token."""
        iterator = self._bucket.client.list_blobs(
            self._bucket,
            prefix=REQUESTS_PREFIX,
            start_offset=_request_path(start_at) if start_at else None,
            max_results=page_size,
            page_token=page_token,
        )
        page = next(iterator.pages, None)
        rows = []
        for blob in page or ():
            metadata = blob.metadata or {}
            rows.append(
                ListedRequest(
                    blob.name[len(REQUESTS_PREFIX) : -len(".json")],
                    metadata.get("status"),
                    metadata.get("pending_effects") == "true",
                    blob.updated,
                    metadata.get("created_at"),
                    _listed_labels(metadata.get("labels")),
                )
            )
        return rows, iterator.next_page_token

    def list_statuses(
        self, *, page_size: int = 1000, page_token: str | None = None
    ) -> tuple[list[tuple[str, str | None]], str | None]:
        """One page of (request_id, status) from object metadata, and the next page token."""
        rows, token = self.list_requests(page_size=page_size, page_token=page_token)
        return [(row.request_id, row.status) for row in rows], token

    def iter_statuses(self, *, page_size: int = 1000) -> Iterator[tuple[str, str | None]]:
        token: str | None = None
        while True:
            rows, token = self.list_statuses(page_size=page_size, page_token=token)
            yield from rows
            if not token:
                return

    # Writing.

    def update(self, request_id: str, transition: Transition[RequestRecord]) -> RequestRecord | None:
        """Apply `transition` under compare-and-swap and return the record as stored (`swap`)."""
        return self.swap(request_id, transition).value

    def swap(self, request_id: str, transition: Transition[RequestRecord]) -> Swapped[RequestRecord]:
        """Apply `transition` under compare-and-swap (`shared.swap`): the record as stored, whether
        this call wrote it, and what the transition's last run decided.

        `transition` gets a private copy of the current record (or None) and returns the new
        record, or the same object unchanged / None to write nothing (or either as a `Decided`).
        It must be pure: it may run several times when deliveries race. A proposal the state
        machine forbids (`shared.ledger.states.check_transition`) raises `IllegalTransition` and
        writes nothing.
        """

        def write(current: RequestRecord | None, proposed: RequestRecord, generation: int) -> bool:
            from google.api_core.exceptions import PreconditionFailed

            check_transition(current, proposed)
            proposed.updated_at = now_iso()
            if needs_reconcile(proposed) and not needs_reconcile(current):
                # before the record: see the module docstring
                self.mark_active(request_id, status=proposed.status, created_at=proposed.created_at)
            try:
                self._write(proposed, generation)
            except PreconditionFailed:
                return False
            if current is not None and current.status != proposed.status:
                self._note_marker_status(request_id, proposed.status)
            return True

        # The last run's private copy and its proposal: left unchanged, the caller's own record.
        last_run: list[RequestRecord | None] = [None, None]

        def run(given: RequestRecord | None) -> RequestRecord | Decided[RequestRecord] | None:
            outcome = transition(given)
            last_run[:] = [given, outcome.value if isinstance(outcome, Decided) else outcome]
            return outcome

        # The transition gets a private copy; the record it started from is only compared with.
        swapped = compare_and_swap(
            lambda: self._read_shared(request_id),
            write,
            run,
            private_copy=private_copy,
            what=f"ledger record {request_id}",
            max_conflicts=self._max_conflicts,
        )
        if swapped.wrote or swapped.value is None:
            return swapped
        given, proposed = last_run
        # A proposal that wrote nothing was found equal to the record stored; the copy it was given
        # (when it proposed nothing) may have been changed.
        unchanged = proposed if proposed is not None else given if given == swapped.value else None
        if unchanged is not None and _same_kit_keys(unchanged, swapped.value):
            return replace(swapped, value=unchanged)
        return replace(swapped, value=private_copy(swapped.value))  # the caller's own

    def restore(self, record: RequestRecord) -> None:
        """Write `record` as it is where no document exists yet (an operator restoring a lost
        document from a backup, a benchmark seeding a ledger): the state machine governs changes,
        not a record's first appearance. Raises PreconditionFailed if a document exists."""
        if needs_reconcile(record):
            self.mark_active(record.request_id, status=record.status, created_at=record.created_at)
        self._write(record, 0)

    def _write(self, record: RequestRecord, generation: int) -> None:
        blob = self._bucket.blob(_request_path(record.request_id))
        # What a listing needs without a download: reconcile's selection, status's newest first
        # and its label filter.
        metadata = {"status": record.status, "created_at": record.created_at}
        labels = _LABELS_JSON.encode(job_labels(record))
        if len(labels.encode()) <= LABELS_METADATA_BYTES:
            metadata["labels"] = labels
        if record.has_pending_effects:
            metadata["pending_effects"] = "true"
        blob.metadata = metadata
        blob.upload_from_string(
            _DOCUMENT_JSON.encode(record.to_document()),
            content_type="application/json",
            if_generation_match=generation,
        )

    # The active index (see the module docstring).

    def list_active(
        self, *, page_size: int = 1000, page_token: str | None = None, start_at: str = ""
    ) -> tuple[list[ActiveEntry], str | None]:
        """One page of the active index from `start_at`'s marker on (inclusive), and the next
        page token. A marker may be stale: `listed_status` tells."""
        iterator = self._bucket.client.list_blobs(
            self._bucket,
            prefix=ACTIVE_PREFIX,
            start_offset=_active_path(start_at) if start_at else None,
            max_results=page_size,
            page_token=page_token,
            fields="items(name,generation,timeCreated,updated,metadata),nextPageToken",
        )
        page = next(iterator.pages, None)
        rows = [ActiveEntry.of(blob.name[len(ACTIVE_PREFIX) :], blob) for blob in page or ()]
        return rows, iterator.next_page_token

    def listed_status(self, request_id: str) -> ListedRequest | None:
        """What a listing would show of the record (its metadata, no download); None if absent."""
        blob = self._bucket.get_blob(_request_path(request_id))
        if blob is None:
            return None
        metadata = blob.metadata or {}
        return ListedRequest(request_id, metadata.get("status"), metadata.get("pending_effects") == "true")

    def mark_active(
        self,
        request_id: str,
        *,
        only_if_absent: bool = False,
        status: str | None = None,
        created_at: str | None = None,
    ) -> bool:
        """(Re)write the request's marker, with the record's `status` and `created_at` when known:
        unconditionally before a write that activates the record (a fresh generation and time);
        only if absent when repairing the index."""
        from google.api_core.exceptions import PreconditionFailed

        blob = self._bucket.blob(_active_path(request_id))
        known = {"status": status, "created_at": created_at}
        blob.metadata = {name: str(value) for name, value in known.items() if value} or None
        try:
            blob.upload_from_string(
                b"",
                content_type="application/octet-stream",
                if_generation_match=0 if only_if_absent else None,
            )
        except PreconditionFailed:
            return False  # there already
        return True

    def _note_marker_status(self, request_id: str, status: str) -> None:
        """Note a record's new status on its marker (a metadata patch: the generation and the
        marker's age stay), after the write that changed it. Best effort: the marker is a hint and
        the record the truth; a marker gone (removed, or never written for a ledger from before the
        index) is not written again here."""
        from google.api_core.exceptions import GoogleAPIError, NotFound

        blob = self._bucket.blob(_active_path(request_id))
        blob.metadata = {"status": str(status)}
        try:
            blob.patch()
        except NotFound:
            return
        except (GoogleAPIError, OSError) as exc:
            _log.warning(
                "the active marker's status was not noted; it shows the previous one until the next change",
                event="active_marker_status_not_noted",
                request_id=request_id,
                status=str(status),
                error=f"{type(exc).__name__}: {exc}",
            )

    def active_entry(self, request_id: str) -> ActiveEntry | None:
        blob = self._bucket.get_blob(_active_path(request_id))
        return ActiveEntry.of(request_id, blob) if blob else None

    def remove_stale_marker(
        self, entry: ActiveEntry, status: ListedRequest | None, *, now: datetime | None = None
    ) -> bool:
        """Remove a listed marker that is stale: `status` (the record's, read after the marker was
        listed) says it needs no reconcile, the marker is older than `INDEX_GRACE_SECONDS`, and
        it is unchanged since listed. True if removed."""
        if not marker_removable(entry, status, now or utcnow()):
            return False
        return self._delete_if_generation(_active_path(entry.request_id), entry.generation)

    def _delete_if_generation(self, name: str, generation: int) -> bool:
        """Delete `name` if it is still at `generation`; False if it changed or is gone."""
        from google.api_core.exceptions import NotFound, PreconditionFailed

        if _emulator_in_use():  # fake-gcs-server ignores ifGenerationMatch on a DELETE
            live = self._bucket.get_blob(name)
            if live is None or int(live.generation) != generation:
                return False
        try:
            self._bucket.delete_blob(name, if_generation_match=generation)
        except (NotFound, PreconditionFailed):
            return False  # rewritten (e.g. re-activated) or removed by another run
        return True

    def index_built(self) -> bool:
        return self._bucket.get_blob(INDEX_BUILT) is not None

    def mark_index_built(self) -> None:
        self._bucket.blob(INDEX_BUILT).upload_from_string(
            json.dumps({"built_at": now_iso()}), content_type="application/json"
        )

    # Retention (shared/ledger/retention.py): a finished record's removal.

    def read_raw(self, request_id: str) -> tuple[bytes, RequestRecord, int] | None:
        from google.api_core.exceptions import NotFound

        blob = self._bucket.blob(_request_path(request_id))
        try:
            raw = blob.download_as_bytes()
        except NotFound:
            return None
        try:
            return raw, RequestRecord.from_json(json.loads(raw)), int(blob.generation)
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            raise CorruptRecord(request_id, f"{type(exc).__name__}: {exc}") from exc

    def archive(self, request_id: str, raw: bytes) -> None:
        """Copy a record out of the ledger's prefixes (`archive/<id>.json`), before its removal."""
        self._bucket.blob(f"{ARCHIVE_PREFIX}{request_id}.json").upload_from_string(raw, content_type="application/json")

    def forget_job(self, job_id: str) -> None:
        from google.api_core.exceptions import NotFound

        try:
            self._bucket.delete_blob(_job_path(job_id))
        except NotFound:
            pass

    def list_objects(
        self, prefix: str, *, page_size: int = 1000, page_token: str | None = None, start_at: str = ""
    ) -> tuple[list[ListedObject], str | None]:
        """One page of the objects under `prefix` from the name `start_at` on (inclusive), and the
        next page token (a record's referrers, for the orphan sweep)."""
        iterator = self._bucket.client.list_blobs(
            self._bucket,
            prefix=prefix,
            start_offset=start_at or None,
            max_results=page_size,
            page_token=page_token,
            fields="items(name,generation,updated),nextPageToken",
        )
        page = next(iterator.pages, None)
        rows = [ListedObject(blob.name, int(blob.generation), blob.updated) for blob in page or ()]
        return rows, iterator.next_page_token

    def remove_orphan(self, listed: ListedObject) -> bool:
        """Delete a referrer whose record is gone if it is unchanged since listed."""
        return self._delete_if_generation(listed.name, listed.generation)

    def remove_record(self, request_id: str, generation: int) -> bool:
        """Delete the record if it is still at `generation`; False if anyone wrote since."""
        return self._delete_if_generation(_request_path(request_id), generation)

    # The job index.

    def index_job(self, entry: JobIndexEntry) -> None:
        """Record which request a job belongs to. Idempotent: an existing entry is left as is."""
        from google.api_core.exceptions import PreconditionFailed

        blob = self._bucket.blob(_job_path(entry.job.rsplit("/", 1)[-1]))
        try:
            blob.upload_from_string(json.dumps(asdict(entry)), content_type="application/json", if_generation_match=0)
        except PreconditionFailed:
            pass  # already indexed, by us or by a redelivery

    def find_job(self, job_id: str) -> JobIndexEntry | None:
        from google.api_core.exceptions import NotFound

        try:
            raw = self._bucket.blob(_job_path(job_id)).download_as_bytes()
        except NotFound:
            return None
        try:
            entry = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise CorruptRecord(_job_path(job_id), f"{type(exc).__name__}: {exc}") from exc
        if not _is_job_index_entry(entry):  # a hand edit, or another version's layout
            named = entry.get("request_id") if isinstance(entry, dict) else None
            raise CorruptRecord(
                named if isinstance(named, str) else _job_path(job_id), f"not a job index entry: {raw[:80]!r}"
            )
        return JobIndexEntry(**{name: entry[name] for name in _JOB_INDEX_FIELDS})


_JOB_INDEX_FIELDS = ("request_id", "attempt", "location", "job")


def _is_job_index_entry(entry: Any) -> bool:
    """What `index_job` writes: its fields, of their types (others a newer version adds are left)."""
    return (
        isinstance(entry, dict)
        and all(isinstance(entry.get(name), str) for name in ("request_id", "location", "job"))
        and isinstance(entry.get("attempt"), int)
        and not isinstance(entry["attempt"], bool)
    )


def _same_kit_keys(copy: RequestRecord, stored: RequestRecord) -> bool:
    """What equality leaves out of a record: a copy equal to `stored` and with its kit keys can be
    handed back for a copy of it."""
    return [attempt.kit_key for attempt in copy.attempts] == [attempt.kit_key for attempt in stored.attempts]


def job_labels(record: RequestRecord) -> dict[str, str]:
    """The labels the request gives its CustomJob (the user's; spotjobs adds its own at creation)."""
    labels = (record.request.get("custom_job") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def _listed_labels(value: str | None) -> dict[str, str] | None:
    """The `labels` metadata as written by `_write`; None when absent or unreadable."""
    if not value:
        return None
    try:
        labels = json.loads(value)
    except ValueError:
        return None
    return labels if isinstance(labels, dict) else None


def _emulator_in_use() -> bool:
    import os

    return bool(os.environ.get("STORAGE_EMULATOR_HOST"))


def _corrupt_path(request_id: str) -> str:
    return f"{MAINTENANCE_PREFIX}corrupt/{request_id}.json"


def _active_path(request_id: str) -> str:
    return f"{ACTIVE_PREFIX}{request_id}"


def _request_path(request_id: str) -> str:
    return f"{REQUESTS_PREFIX}{request_id}.json"


def _job_path(job_id: str) -> str:
    return f"{JOBS_PREFIX}{job_id}.json"
