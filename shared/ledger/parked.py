"""Lines of a job not indexed yet, kept in the state bucket until its adoption counts them
(`unindexed/<job id>/<sha256 of the line's identity>.json`): a Vertex preemption line and a kit
line signed with its attempt's key, which on_job_event parks (`park_preemption`, `park_kit_line`)
and the delivery that records the job reads and forgets (shared/found_jobs.py). A foreign job's
are removed by a lifecycle rule (docs/ARCHITECTURE.md, "What the state bucket keeps").

`ParkedLines` is a part of `shared.ledger.store.LedgerStore`, in its bucket.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

# Vertex's preemption lines and the kit's signed lines of a job not indexed yet, kept until its
# adoption counts them (`park_preemption`, `park_kit_line`); a lifecycle rule removes a foreign job's
# (docs/ARCHITECTURE.md).
UNINDEXED_PREFIX = "unindexed/"


class ParkedLines:
    """The parked lines of `_bucket` (`LedgerStore` sets it)."""

    _bucket: Bucket

    def park_preemption(self, job_id: str, identity: str) -> None:
        """Keep a preemption line of a job not indexed yet, by its identity (idempotent)."""
        self._park(job_id, identity, {"identity": identity})

    def park_kit_line(self, job_id: str, identity: str, fields: dict[str, Any]) -> None:
        """Keep a kit line of a job not indexed yet (its fields as sent, signature included), by
        its log entry's identity (idempotent)."""
        self._park(job_id, identity, {"identity": identity, "kit": fields})

    def _park(self, job_id: str, identity: str, body: dict[str, Any]) -> None:
        from google.api_core.exceptions import PreconditionFailed

        blob = self._bucket.blob(_parked_path(job_id, identity))
        try:
            blob.upload_from_string(json.dumps(body), content_type="application/json", if_generation_match=0)
        except PreconditionFailed:
            pass  # kept by a redelivery before

    def parked_preemptions(self, job_id: str) -> dict[str, str]:
        """The preemption lines kept for `job_id`: object name -> the line's identity (one that
        does not read, a hand edit, is left out: it says nothing)."""
        return _preemptions(self._parked(job_id))

    def parked_kit_lines(self, job_id: str) -> dict[str, dict[str, Any]]:
        """The kit lines kept for `job_id`: object name -> the line's fields as sent."""
        return _kit_lines(self._parked(job_id))

    def parked_lines(self, job_id: str) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        """`parked_kit_lines` and `parked_preemptions` of `job_id`, from one listing."""
        parked = self._parked(job_id)
        return _kit_lines(parked), _preemptions(parked)

    def _parked(self, job_id: str) -> dict[str, dict[str, Any]]:
        from google.api_core.exceptions import NotFound

        parked = {}
        for blob in self._bucket.client.list_blobs(self._bucket, prefix=f"{UNINDEXED_PREFIX}{job_id}/"):
            try:
                body = json.loads(blob.download_as_bytes())
            except NotFound:
                continue  # forgotten since the listing: counted by a concurrent delivery (or a lifecycle rule's)
            except (ValueError, RecursionError):
                continue
            if isinstance(body, dict):
                parked[blob.name] = body
        return parked

    def forget_parked(self, names: Collection[str]) -> None:
        from google.api_core.exceptions import NotFound

        for name in names:
            try:
                self._bucket.blob(name).delete()
            except NotFound:
                pass  # forgotten by a concurrent adoption


def _parked_path(job_id: str, identity: str) -> str:
    return f"{UNINDEXED_PREFIX}{job_id}/{hashlib.sha256(identity.encode()).hexdigest()[:32]}.json"


def _preemptions(parked: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {
        name: body["identity"]
        for name, body in parked.items()
        if isinstance(body.get("identity"), str) and "kit" not in body
    }


def _kit_lines(parked: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: body["kit"] for name, body in parked.items() if isinstance(body.get("kit"), dict)}
