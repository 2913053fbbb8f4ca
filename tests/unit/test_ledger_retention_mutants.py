"""The retention sweep's judgement of a record written without its metadata
(shared/ledger/retention.py `_judged`): the marker it repairs carries the created time its body
keeps, as every marker does (`spotjobs find` reads it from the marker: spotjobs/cli/find.py). The
mutation pass found the marker's created time untested."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from shared.ledger.records import RequestRecord
from shared.ledger.retention import sweep_step
from shared.ledger.states import RequestStatus
from shared.ledger.store import ACTIVE_PREFIX, LedgerStore
from sim.gcs import MemoryStorage
from tests.support.decisions import CapturedLog, make_settings
from tests.support.interleave import Clock

RETENTION = 90 * 86400.0


def test_a_marker_repaired_from_a_record_written_without_metadata_has_the_bodys_created_time(
    monkeypatch: Any,
) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    clock = Clock()
    bucket: Any = MemoryStorage(clock=clock).client().bucket("state")
    ledger = LedgerStore(bucket)
    ledger.restore(RequestRecord("running", {"request_id": "running"}, "gs://b/running/", RequestStatus.RUNNING))
    stored = ledger.get("running")
    assert stored is not None and stored.created_at
    bucket.blob(f"{ACTIVE_PREFIX}running").delete()
    document = bucket.blob("requests/running.json")  # rewritten as a person does: its body, no metadata
    body = document.download_as_bytes()
    document.metadata = None
    document.upload_from_string(body)

    turn = sweep_step(
        ledger, CapturedLog().logger, settings=make_settings("state"), now=clock.now + timedelta(seconds=2 * RETENTION)
    )

    entry = ledger.active_entry("running")
    assert turn.markers_repaired == 1 and entry is not None
    assert (entry.status, entry.created_at) == ("RUNNING", stored.created_at)
