"""The prune report's outbox: what a run is about to delete, recorded before it deletes, kept
until the run's prune_report is published.

A run's report belongs to no ledger record (and the prune function may not write records), so
it is kept in the state bucket, under `maintenance/prune-reports/<run>/<request_id>.json`: one
document per request the run deletes from, written before its first delete (if the write fails,
nothing of that request is deleted and the redelivery tries again). Once the run's report is
published, its documents are removed. A run that deleted and then failed to publish, or died,
leaves them behind; a later run reports them with its own: at once when it is a redelivery of
the same message, else once their writer is presumed dead (older than any run may take,
`LEASE_SECONDS`). So what was deleted is reported at least once: a run that dies between its
publish and the removal repeats a report, never loses one.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.clock import iso, parse_iso
from shared.ledger.run_lock import LEASE_SECONDS
from shared.log import Logger

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

JOURNAL_PREFIX = "maintenance/prune-reports/"


@dataclass(frozen=True)
class LeftBehind:
    """What an earlier run recorded it was deleting from one request, and never reported."""

    name: str  # the journal document
    request_id: str
    checkpoints: tuple[str, ...]
    recorded_at: str

    def to_json(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "checkpoints": list(self.checkpoints), "recorded_at": self.recorded_at}


class ReportJournal:
    """One run's journal documents, and the ones earlier runs left behind."""

    def __init__(self, bucket: Bucket, message_id: str, clock: Callable[[], datetime]) -> None:
        self.bucket = bucket
        self.message_id = message_id
        self.clock = clock
        self.run_prefix = f"{JOURNAL_PREFIX}{uuid.uuid4().hex}/"
        self._written: list[str] = []
        self._lock = threading.Lock()

    def record(self, request_id: str, deleting: list[dict[str, Any]]) -> None:
        """Before the first delete of `request_id`: what the run is about to delete from it."""
        name = f"{self.run_prefix}{request_id}.json"
        document = {
            "message_id": self.message_id,
            "recorded_at": iso(self.clock()),
            "request_id": request_id,
            "checkpoints": [entry["checkpoint"] for entry in deleting],
        }
        self.bucket.blob(name).upload_from_string(json.dumps(document), content_type="application/json")
        with self._lock:
            self._written.append(name)

    def left_behind(self, log: Logger) -> list[LeftBehind]:
        """Documents of earlier runs this run reports: its own message's, or any older than a run
        may take. One that does not read is reported by its name alone."""
        now = self.clock()
        found = []
        for blob in self.bucket.client.list_blobs(self.bucket, prefix=JOURNAL_PREFIX):
            if blob.name.startswith(self.run_prefix):
                continue
            try:
                document = json.loads(blob.download_as_bytes())
                entry = LeftBehind(
                    blob.name,
                    str(document["request_id"]),
                    tuple(str(c) for c in document["checkpoints"]),
                    str(document["recorded_at"]),
                )
                ours = document.get("message_id") == self.message_id
                age = (now - parse_iso(entry.recorded_at)).total_seconds()
            except (ValueError, KeyError, TypeError) as exc:
                log.warning(
                    "a prune report journal document does not read", event="prune_journal_unreadable", error=str(exc)
                )
                request_id = blob.name.rsplit("/", 1)[-1].removesuffix(".json")
                entry, ours, age = LeftBehind(blob.name, request_id, (), ""), False, LEASE_SECONDS
            if ours or age >= LEASE_SECONDS:
                found.append(entry)
        return found

    def settle(self, reported: list[LeftBehind], log: Logger) -> None:
        """Remove this run's documents and the earlier ones it reported, now that the report is
        out (or had nothing to say). One left behind is reported again by a later run."""
        from google.api_core.exceptions import NotFound

        with self._lock:
            names = [*self._written, *(r.name for r in reported)]
        for name in names:
            try:
                self.bucket.delete_blob(name)
            except NotFound:
                continue  # another run reported it too and removed it first
            except Exception as exc:  # a later run reports it again: a repeat, not a loss
                log.warning(
                    "could not remove a prune report journal document", event="prune_journal_unremoved", error=str(exc)
                )
