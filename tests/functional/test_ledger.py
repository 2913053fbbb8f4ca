"""The ledger's compare-and-swap against a real fake-gcs-server (which enforces preconditions)."""

from __future__ import annotations

import threading

import pytest

from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import JobIndexEntry, LedgerStore


def _new_record(request_id: str) -> RequestRecord:
    return RequestRecord(request_id=request_id, request={"request_id": request_id}, output_dir="gs://b/r/")


def test_create_once_then_read_back_with_status_in_metadata(gcs_bucket) -> None:
    ledger = LedgerStore(gcs_bucket)
    assert ledger.read("r1") == (None, 0)

    stored = ledger.update("r1", lambda current: current or _new_record("r1"))

    record, generation = ledger.read("r1")
    assert record == stored and generation > 0
    assert ledger.list_statuses() == ([("r1", RequestStatus.CLAIMED)], None)


def test_a_transition_that_changes_nothing_writes_nothing(gcs_bucket) -> None:
    ledger = LedgerStore(gcs_bucket)
    ledger.update("r1", lambda current: current or _new_record("r1"))
    _, generation = ledger.read("r1")

    ledger.update("r1", lambda current: current)

    assert ledger.read("r1")[1] == generation


def test_concurrent_claims_of_one_attempt_have_exactly_one_winner(gcs_bucket) -> None:
    ledger = LedgerStore(gcs_bucket)
    winners: list[int] = []
    lock = threading.Lock()

    def claim(worker: int) -> None:
        def transition(current: RequestRecord | None) -> RequestRecord | None:
            if current is not None:
                return current  # already claimed by someone: nothing to do
            record = _new_record("r1")
            record.attempts.append(Attempt(n=1, location="l", strategy="SPOT", claimed_at=str(worker)))
            return record

        stored = ledger.update("r1", transition)
        if stored is not None and stored.attempts[0].claimed_at == str(worker):
            with lock:
                winners.append(worker)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    record = ledger.get("r1")
    assert len(record.attempts) == 1
    assert winners == [int(record.attempts[0].claimed_at)]


def test_concurrent_increments_are_all_kept(gcs_bucket) -> None:
    ledger = LedgerStore(gcs_bucket)
    ledger.update("r1", lambda _: _new_record("r1") if _ is None else _)

    def bump(current: RequestRecord | None) -> RequestRecord:
        assert current is not None
        current.markers.append("x")
        return current

    threads = [threading.Thread(target=ledger.update, args=("r1", bump)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(ledger.get("r1").markers) == 8


def test_job_index_is_written_once_and_found_by_job_id(gcs_bucket) -> None:
    ledger = LedgerStore(gcs_bucket)
    entry = JobIndexEntry("r1", 1, "us-central1", "projects/p/locations/us-central1/customJobs/42")

    ledger.index_job(entry)
    ledger.index_job(JobIndexEntry("other", 9, "x", entry.job))  # a later write never replaces it

    assert ledger.find_job("42") == entry
    assert ledger.find_job("43") is None


def test_records_from_a_newer_schema_still_load(gcs_bucket) -> None:
    data = _new_record("r1").to_json() | {"field_from_the_future": 1}
    data["attempts"] = [{"n": 1, "location": "l", "strategy": "SPOT", "claimed_at": "t", "new": 2}]

    record = RequestRecord.from_json(data)

    assert record.attempts[0].n == 1 and record.request_id == "r1"


def test_the_ledger_refuses_an_illegal_move_and_writes_nothing(gcs_bucket) -> None:
    from shared.ledger.states import IllegalTransition

    ledger = LedgerStore(gcs_bucket)
    ledger.update("r1", lambda current: current or _new_record("r1"))
    _, generation = ledger.read("r1")

    def finish_without_a_job(current: RequestRecord | None) -> RequestRecord | None:
        assert current is not None
        current.status = RequestStatus.SUCCEEDED  # CLAIMED has no edge to SUCCEEDED
        return current

    with pytest.raises(IllegalTransition, match="CLAIMED -> SUCCEEDED"):
        ledger.update("r1", finish_without_a_job)
    record, unchanged = ledger.read("r1")
    assert (record.status, unchanged) == (RequestStatus.CLAIMED, generation)


def test_restore_writes_a_record_as_it_is_only_where_none_exists(gcs_bucket) -> None:
    from google.api_core.exceptions import PreconditionFailed

    ledger = LedgerStore(gcs_bucket)
    finished = _new_record("r1")
    finished.status = RequestStatus.SUCCEEDED
    ledger.restore(finished)
    assert ledger.get("r1").status == RequestStatus.SUCCEEDED
    with pytest.raises(PreconditionFailed):
        ledger.restore(_new_record("r1"))
    assert ledger.get("r1").status == RequestStatus.SUCCEEDED


def test_a_dedupe_document_goes_by_lifecycle_rule_once_no_delivery_can_name_its_windows(gcs_bucket) -> None:
    from datetime import UTC, datetime, timedelta

    from shared.ledger.dedupe import HORIZON_SECONDS, bare_request_id
    from tests.support.lifecycle import deleted_by_lifecycle

    t0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    for moment in (t0, t0 + timedelta(minutes=10)):  # two windows of one content
        bare_request_id(gcs_bucket, "d1", moment, 300.0, lambda opened: f"req-{opened:%H%M}")
    document = gcs_bucket.get_blob("dedupe/d1.json")
    newest_end = t0 + timedelta(minutes=15)
    assert document.custom_time == newest_end

    def deleted(now: datetime) -> bool:
        return deleted_by_lifecycle(
            document.name, created=document.time_created, custom_time=document.custom_time, now=now
        )

    # A redelivery of the newest window's message may come until the horizon: the document stays.
    assert not deleted(newest_end + timedelta(seconds=HORIZON_SECONDS))
    assert deleted(newest_end + timedelta(seconds=HORIZON_SECONDS, days=1))


def test_a_dedupe_document_of_a_message_scheduled_ahead_stays_until_its_window_is_past(gcs_bucket) -> None:
    from datetime import timedelta

    from shared.clock import utcnow
    from shared.ledger.dedupe import HORIZON_SECONDS, bare_request_id
    from tests.support.lifecycle import deleted_by_lifecycle

    scheduled = utcnow() + timedelta(days=60)  # schedule_time two months ahead
    bare_request_id(gcs_bucket, "d2", scheduled, 300.0, lambda opened: "req-later")
    document = gcs_bucket.get_blob("dedupe/d2.json")
    # Its age counts from its write; it is needed until the horizon after its window's end.
    assert not deleted_by_lifecycle(
        document.name,
        created=document.time_created,
        custom_time=document.custom_time,
        now=scheduled + timedelta(seconds=HORIZON_SECONDS),
    )
