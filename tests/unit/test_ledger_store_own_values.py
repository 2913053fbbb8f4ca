"""What the ledger store hands back is the caller's own (shared/ledger/store.py): a swap that wrote
nothing returns a copy of the record, never the parse every later read shares (the transition's own
copy when it left it unchanged: no second copy); and a job index
entry that is no entry is named in its error by its first 80 bytes."""

from __future__ import annotations

from typing import Any

import pytest

from shared.ledger import store
from shared.ledger.records import Attempt, CorruptRecord, RequestRecord, private_copy
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


@pytest.mark.parametrize("transition", [lambda current: current, lambda current: None], ids=["unchanged", "none"])
def test_a_swap_that_writes_nothing_copies_the_record_once_for_its_transition_only(
    bucket: Any, transition: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = LedgerStore(bucket)
    ledger.restore(RequestRecord("r1", {"request_id": "r1"}, "gs://b/r1/"))
    copies: list[object] = []

    def counted_copy(value: Any) -> Any:
        copies.append(value)
        return private_copy(value)

    monkeypatch.setattr(store, "private_copy", counted_copy)
    unchanged = ledger.swap("r1", transition)
    assert not unchanged.wrote and unchanged.value == ledger.read("r1")[0]
    assert len(copies) == 2  # the transition's copy, then `read`'s: the caller's is the transition's own
    unchanged.value.markers.append("changed by the caller")
    assert ledger.read("r1")[0].markers == []


def test_a_transition_that_changed_its_copy_and_proposed_nothing_leaves_the_caller_a_fresh_copy(
    bucket: Any,
) -> None:
    ledger = LedgerStore(bucket)
    ledger.restore(RequestRecord("r1", {"request_id": "r1"}, "gs://b/r1/"))

    def changed_then_declined(current: RequestRecord | None) -> None:
        assert current is not None
        current.markers.append("changed, not proposed")

    declined = ledger.swap("r1", changed_then_declined)
    assert not declined.wrote and declined.value is not None and declined.value.markers == []


def test_a_proposal_that_differs_only_in_a_kit_key_writes_nothing_and_hands_back_the_stored_key(
    bucket: Any,
) -> None:
    ledger = LedgerStore(bucket)
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-06T12:00:00Z", kit_key="stored")
    ledger.restore(RequestRecord("r1", {"request_id": "r1"}, "gs://b/r1/", attempts=[attempt]))

    def new_key(current: RequestRecord | None) -> RequestRecord | None:
        assert current is not None
        current.attempts[0].kit_key = "never written"  # equality leaves kit keys out: no write
        return current

    swapped = ledger.swap("r1", new_key)
    assert not swapped.wrote and swapped.value is not None and swapped.value.attempts[0].kit_key == "stored"
