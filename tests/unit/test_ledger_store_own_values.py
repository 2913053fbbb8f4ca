"""What the ledger store hands back is the caller's own (shared/ledger/store.py): a swap that wrote
nothing returns a copy of the record, never the parse every later read shares; and a job index
entry that is no entry is named in its error by its first 80 bytes."""

from __future__ import annotations

from typing import Any

import pytest

from shared.ledger.records import CorruptRecord, RequestRecord
from shared.ledger.store import LedgerStore
from sim.gcs import MemoryStorage
from tests.support.interleave import Clock


@pytest.fixture
def bucket() -> Any:
    return MemoryStorage(clock=Clock()).client().bucket("state")


def test_a_swap_that_writes_nothing_returns_the_callers_own_record(bucket: Any) -> None:
    ledger = LedgerStore(bucket)
    ledger.restore(RequestRecord("r1", {"request_id": "r1"}, "gs://b/r1/"))
    unchanged = ledger.swap("r1", lambda current: current)
    assert not unchanged.wrote and unchanged.value is not None
    unchanged.value.markers.append("changed by the caller")
    assert ledger.read("r1")[0].markers == []


def test_a_corrupt_job_index_entry_is_shown_by_its_first_80_bytes(bucket: Any) -> None:
    body = b'["' + b"x" * 200 + b'"]'
    bucket.blob("jobs/42.json").upload_from_string(body)
    with pytest.raises(CorruptRecord) as raised:
        LedgerStore(bucket).find_job("42")
    assert str(raised.value).endswith(f"not a job index entry: {body[:80]!r}")
