"""The ledger's store (shared/ledger/store.py) on the simulator's in-memory Cloud Storage with a
clock of the test's: what a record's metadata tells a listing (status, pending effects, labels up
to their bound), the pages of a listing, the read-ahead a pass hands out once, the active index's
markers and their guarded removal (the grace and the generation listed), the job index, the
maintenance documents read whatever their shape, and the removals of ledger retention.
tests/functional/test_ledger.py and test_ledger_index.py drive the same on fake-gcs-server."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from shared.ledger import store as store_module
from shared.ledger.cursors import cursor_path
from shared.ledger.records import Attempt, CorruptRecord, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import (
    ACTIVE_PREFIX,
    INDEX_GRACE_SECONDS,
    LABELS_METADATA_BYTES,
    PREFETCH_SECONDS,
    ActiveEntry,
    JobIndexEntry,
    LedgerStore,
    ListedObject,
    ListedRequest,
    job_labels,
    needs_reconcile,
)
from sim.gcs import MemoryStorage
from tests.support.interleave import Clock, Interleaved


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def bucket(clock: Clock) -> Any:
    return MemoryStorage(clock=clock).client().bucket("state")


@pytest.fixture
def ledger(bucket: Any) -> LedgerStore:
    return LedgerStore(bucket)


@pytest.fixture(autouse=True)
def _no_emulator(monkeypatch) -> None:
    # MemoryStorage checks a delete's generation itself, as GCS does.
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)


def record(request_id: str, status: RequestStatus = RequestStatus.CLAIMED, **fields: Any) -> RequestRecord:
    return RequestRecord(request_id, {"request_id": request_id}, f"gs://b/{request_id}/", status=status, **fields)


def labelled(request_id: str, labels: Any) -> RequestRecord:
    return RequestRecord(request_id, {"custom_job": {"labels": labels}}, "gs://b/x/")


def markers(bucket: Any) -> list[str]:
    return [b.name[len(ACTIVE_PREFIX) :] for b in bucket.client.list_blobs(bucket, prefix=ACTIVE_PREFIX)]


# ---- what a listing shows ------------------------------------------------------------------------


def test_a_listing_shows_status_creation_pending_effects_and_labels_without_a_download(ledger: LedgerStore) -> None:
    ledger.restore(labelled("r1", {"team": "vision", "run": 7}))
    finished = record("r2", RequestStatus.SUCCEEDED, pending_alerts=[{"kind": "x"}], created_at="2026-01-01T00:00:00Z")
    ledger.restore(finished)

    rows, token = ledger.list_requests()
    assert token is None
    assert [row.request_id for row in rows] == ["r1", "r2"]
    first, second = rows
    assert first.status == "CLAIMED" and not first.pending_effects and first.labels == {"run": "7", "team": "vision"}
    assert second.status == "SUCCEEDED" and second.pending_effects and second.created_at == "2026-01-01T00:00:00Z"
    assert second.labels == {}
    assert first.updated is not None
    assert [row.needs_reconcile for row in rows] == [True, True]  # active; finished with effects pending


def test_labels_are_kept_up_to_their_bound_and_a_larger_set_is_left_for_a_read(ledger: LedgerStore) -> None:
    # docs/ARCHITECTURE.md: a listing's metadata carries "the CustomJob's labels up to 2 KiB".
    def labels_of_size(size: int) -> dict[str, str]:
        # {"k":"vvv..."} is 8 bytes of JSON around the value
        return {"k": "v" * (size - 8)}

    at_bound, over = labels_of_size(2048), labels_of_size(2049)
    assert len(json.dumps(at_bound, separators=(",", ":")).encode()) == LABELS_METADATA_BYTES
    ledger.restore(labelled("at", at_bound))
    ledger.restore(labelled("over", over))
    rows = {row.request_id: row for row in ledger.list_requests()[0]}
    assert rows["at"].labels == at_bound
    assert rows["over"].labels is None  # not kept: a listing reads the record


def test_the_bound_on_kept_labels_is_well_inside_what_gcs_allows_per_value() -> None:
    # GCS allows 4 KiB per custom metadata value and 8 KiB in all: labels, status and times fit.
    assert 1024 <= LABELS_METADATA_BYTES <= 4096 - 256


@pytest.mark.parametrize("labels", [None, ["a"], "team=vision"])
def test_a_request_whose_labels_are_no_object_has_none(labels: Any) -> None:
    assert job_labels(labelled("r", labels)) == {}


def test_a_request_without_a_custom_job_has_no_labels() -> None:
    assert job_labels(RequestRecord("r", {}, "gs://b/r/")) == {}
    assert job_labels(RequestRecord("r", {"custom_job": None}, "gs://b/r/")) == {}


@pytest.mark.parametrize("written", ["", "not json", "[1]", '"x"'])
def test_labels_metadata_that_is_absent_or_unreadable_reads_as_not_kept(
    bucket: Any, ledger: LedgerStore, written
) -> None:
    ledger.restore(record("r1"))
    blob = bucket.get_blob("requests/r1.json")
    blob.metadata = {**blob.metadata, "labels": written}
    blob.patch()
    assert ledger.list_requests()[0][0].labels is None


def test_a_listing_pages_from_a_position_inclusive(ledger: LedgerStore) -> None:
    for request_id in ("a", "b", "c", "d", "e"):
        ledger.restore(record(request_id, RequestStatus.SUCCEEDED))
    rows, token = ledger.list_requests(page_size=2)
    assert [r.request_id for r in rows] == ["a", "b"] and token
    rows, token = ledger.list_requests(page_size=2, page_token=token)
    assert [r.request_id for r in rows] == ["c", "d"] and token
    rows, token = ledger.list_requests(page_size=2, page_token=token)
    assert [r.request_id for r in rows] == ["e"] and token is None
    assert [r.request_id for r in ledger.list_requests(start_at="c")[0]] == ["c", "d", "e"]
    assert list(ledger.iter_statuses(page_size=2)) == [(r, "SUCCEEDED") for r in "abcde"]
    assert ledger.list_statuses(page_size=1) == ([("a", "SUCCEEDED")], "requests/a.json")


def test_an_empty_ledger_lists_nothing(ledger: LedgerStore) -> None:
    assert ledger.list_requests() == ([], None)
    assert ledger.list_active() == ([], None)
    assert list(ledger.iter_statuses()) == []


def test_listed_status_is_the_metadatas_and_none_without_a_record(ledger: LedgerStore) -> None:
    assert ledger.listed_status("r1") is None
    ledger.restore(record("r1", RequestStatus.FAILED, pending_alerts=[{"kind": "x"}]))
    assert ledger.listed_status("r1") == ListedRequest("r1", "FAILED", True)


def test_needs_reconcile_is_active_or_finished_with_effects_pending() -> None:
    assert not needs_reconcile(None)
    assert needs_reconcile(record("r", RequestStatus.RUNNING))
    assert not needs_reconcile(record("r", RequestStatus.SUCCEEDED))
    assert needs_reconcile(record("r", RequestStatus.SUCCEEDED, prune_pending=True))
    assert ListedRequest("r", None, False).needs_reconcile  # a status not kept: visit it
    assert not ListedRequest("r", "CANCELLED", False).needs_reconcile
    assert ListedRequest("r", "CANCELLED", True).needs_reconcile


# ---- reading and writing a record ------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"{", b"[]", b'{"request_id": 1}', b"[" * 100_000])
def test_a_document_that_is_not_a_record_reads_as_corrupt(bucket: Any, ledger: LedgerStore, body: bytes) -> None:
    bucket.blob("requests/r1.json").upload_from_string(body)
    with pytest.raises(CorruptRecord) as raised:
        ledger.read("r1")
    assert raised.value.request_id == "r1"
    with pytest.raises(CorruptRecord):
        ledger.read_raw("r1")


def test_read_raw_gives_the_bytes_the_record_and_its_generation(bucket: Any, ledger: LedgerStore) -> None:
    assert ledger.read_raw("r1") is None
    ledger.restore(record("r1"))
    raw, read, generation = ledger.read_raw("r1")
    assert raw == bucket.blob("requests/r1.json").download_as_bytes()
    assert read.request_id == "r1" and generation == bucket.get_blob("requests/r1.json").generation


def test_a_write_that_activates_a_record_marks_it_and_one_that_does_not_leaves_the_index(
    bucket: Any, ledger: LedgerStore
) -> None:
    ledger.restore(record("r1", RequestStatus.SUCCEEDED))
    assert markers(bucket) == []

    def pending(current: RequestRecord | None) -> RequestRecord:
        current.prune_pending = True
        return current

    ledger.update("r1", pending)  # terminal -> effects pending: active again
    assert markers(bucket) == ["r1"]
    marker = bucket.get_blob(f"{ACTIVE_PREFIX}r1").generation

    def note(current: RequestRecord | None) -> RequestRecord:
        current.markers.append("seen")
        return current

    ledger.update("r1", note)  # already active: the marker stays as it was
    assert bucket.get_blob(f"{ACTIVE_PREFIX}r1").generation == marker


def test_restoring_a_finished_record_writes_no_marker(bucket: Any, ledger: LedgerStore) -> None:
    ledger.restore(record("done", RequestStatus.CANCELLED))
    ledger.restore(record("live", RequestStatus.RUNNING))
    assert markers(bucket) == ["live"]


def test_a_swap_reports_whether_it_wrote_and_stamps_the_write(ledger: LedgerStore, clock: Clock) -> None:
    created = ledger.swap("r1", lambda current: current or record("r1"))
    assert created.wrote and created.value.request_id == "r1"
    again = ledger.swap("r1", lambda current: current)
    assert not again.wrote and again.value == ledger.read("r1")[0]


def test_a_record_written_by_another_between_our_read_and_our_write_is_decided_again(
    bucket: Any, ledger: LedgerStore, monkeypatch
) -> None:
    monkeypatch.setattr("shared.swap.time.sleep", lambda _seconds: None)
    ledger.restore(record("r1", RequestStatus.CLAIMED))

    def add(marker: str):
        def transition(current: RequestRecord | None) -> RequestRecord:
            current.markers.append(marker)
            return current

        return transition

    racing = LedgerStore(Interleaved(bucket, "requests/r1.json", write=lambda: ledger.update("r1", add("theirs"))))
    racing.update("r1", add("ours"))
    assert ledger.read("r1")[0].markers == ["theirs", "ours"]


def test_a_ledger_gives_up_after_its_allowed_conflicts(bucket: Any, monkeypatch) -> None:
    from shared.errors import ConflictError

    monkeypatch.setattr("shared.swap.time.sleep", lambda _seconds: None)
    rounds: list[int] = []

    def always_lose(current: RequestRecord | None) -> RequestRecord:
        rounds.append(1)
        other = LedgerStore(bucket)
        other.swap("r1", lambda c: (c.markers.append(str(len(rounds))), c)[1] if c else record("r1"))
        fresh = current or record("r1")
        fresh.markers.append("ours")
        return fresh

    ledger = LedgerStore(bucket, max_conflicts=3)
    with pytest.raises(ConflictError):
        ledger.update("r1", always_lose)
    assert len(rounds) == 3


# ---- the read-ahead ----------------------------------------------------------------------------------


def test_a_record_read_ahead_is_handed_out_once_while_fresh(ledger: LedgerStore, monkeypatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(store_module.time, "monotonic", lambda: now[0])
    ledger.restore(record("r1", RequestStatus.RUNNING))
    assert ledger.prefetch("r1") == ListedRequest("r1", RequestStatus.RUNNING, False)
    assert ledger.prefetch("absent") is None
    reads: list[str] = []
    real_read = ledger.read
    monkeypatch.setattr(ledger, "read", lambda request_id: reads.append(request_id) or real_read(request_id))

    now[0] += PREFETCH_SECONDS - 0.001
    assert ledger.get("r1").status is RequestStatus.RUNNING
    assert reads == []  # the read ahead stood in
    assert ledger.get("r1") is not None
    assert reads == ["r1"]  # handed out once: then read again


def test_a_record_read_ahead_too_long_ago_is_read_again(ledger: LedgerStore, monkeypatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(store_module.time, "monotonic", lambda: now[0])
    ledger.restore(record("r1", RequestStatus.CLAIMED))
    ledger.prefetch("r1")

    def finished(current: RequestRecord | None) -> RequestRecord:
        current.attempts.append(Attempt(1, "l", "SPOT", "t", job="projects/p/locations/l/customJobs/1"))
        current.status = RequestStatus.SUBMITTED
        return current

    ledger.update("r1", finished)
    now[0] += PREFETCH_SECONDS
    assert ledger.get("r1").status is RequestStatus.SUBMITTED


def test_only_the_records_about_to_be_read_stay_read_ahead(ledger: LedgerStore, monkeypatch) -> None:
    for request_id in ("a", "b", "c"):
        ledger.restore(record(request_id, RequestStatus.RUNNING))
        ledger.prefetch(request_id)
    ledger.keep_prefetched(["b", "z"])
    reads: list[str] = []
    real_read = ledger.read
    monkeypatch.setattr(ledger, "read", lambda request_id: reads.append(request_id) or real_read(request_id))
    for request_id in ("a", "b", "c"):
        ledger.get(request_id)
    assert reads == ["a", "c"]


# ---- the active index --------------------------------------------------------------------------------


def test_a_marker_is_rewritten_before_an_activating_write_and_only_written_if_absent_when_repairing(
    bucket: Any, ledger: LedgerStore, clock: Clock
) -> None:
    assert ledger.mark_active("r1")
    first = ledger.active_entry("r1")
    assert first == ActiveEntry("r1", bucket.get_blob(f"{ACTIVE_PREFIX}r1").generation, clock.now)
    clock.advance(1)
    assert not ledger.mark_active("r1", only_if_absent=True)
    assert ledger.active_entry("r1") == first
    assert ledger.mark_active("r1")
    assert ledger.active_entry("r1").generation != first.generation
    assert ledger.active_entry("r2") is None


def test_the_active_index_lists_markers_in_pages_from_a_position(ledger: LedgerStore, clock: Clock) -> None:
    for request_id in ("a", "b", "c"):
        ledger.mark_active(request_id)
    rows, token = ledger.list_active(page_size=2)
    assert [row.request_id for row in rows] == ["a", "b"] and token
    assert all(row.written == clock.now and row.generation > 0 for row in rows)
    assert [row.request_id for row in ledger.list_active(page_token=token)[0]] == ["c"]
    assert [row.request_id for row in ledger.list_active(start_at="b")[0]] == ["b", "c"]


def test_a_stale_marker_goes_once_older_than_the_grace_and_not_a_moment_before(
    bucket: Any, ledger: LedgerStore, clock: Clock
) -> None:
    # docs/ARCHITECTURE.md: a marker is removed once older than `INDEX_GRACE_SECONDS` (15 min).
    ledger.mark_active("r1")
    entry = ledger.active_entry("r1")
    finished = ListedRequest("r1", "SUCCEEDED", False)
    young = entry.written + timedelta(minutes=15, milliseconds=-1)
    assert not ledger.remove_stale_marker(entry, finished, now=young)
    assert ledger.remove_stale_marker(entry, finished, now=entry.written + timedelta(minutes=15))
    assert markers(bucket) == []


def test_a_marker_carries_its_records_status_and_creation_and_follows_each_status_change(
    bucket: Any, ledger: LedgerStore, clock: Clock
) -> None:
    created = ledger.update("r1", lambda current: record("r1"))
    entry = ledger.active_entry("r1")
    assert (entry.status, entry.created_at) == ("CLAIMED", created.created_at)
    writes = bucket.get_blob(f"{ACTIVE_PREFIX}r1")

    def to(status: RequestStatus) -> Any:
        def move(current: RequestRecord | None) -> RequestRecord:
            current.status = status
            return current

        return move

    def note(current: RequestRecord | None) -> RequestRecord:
        current.markers.append("seen")
        return current

    clock.advance(60)
    ledger.update("r1", to(RequestStatus.SUBMITTED))
    ledger.update("r1", note)  # no status change: the marker is not written
    listed = ledger.list_active()[0]
    assert [(row.request_id, row.status, row.created_at) for row in listed] == [("r1", "SUBMITTED", created.created_at)]
    patched = bucket.get_blob(f"{ACTIVE_PREFIX}r1")
    assert patched.generation == writes.generation and patched.metageneration == writes.metageneration + 1
    # Its age for removal is its writing's: a status noted later does not make it young again.
    assert listed[0].written == entry.written
    ledger.update("r1", to(RequestStatus.FAILED))
    assert ledger.active_entry("r1").status == "FAILED"
    assert ledger.remove_stale_marker(
        ledger.active_entry("r1"), ListedRequest("r1", "FAILED", False), now=entry.written + timedelta(minutes=15)
    )


def test_a_status_change_of_a_record_without_a_marker_writes_none(bucket: Any, ledger: LedgerStore) -> None:
    bucket.blob("requests/old.json").upload_from_string(json.dumps(record("old", RequestStatus.RUNNING).to_json()))

    def finish(current: RequestRecord | None) -> RequestRecord:
        current.status = RequestStatus.SUCCEEDED
        return current

    assert ledger.update("old", finish).status == RequestStatus.SUCCEEDED
    assert markers(bucket) == []  # a marker is written only by an activating write (or a repair)


def test_the_grace_outlasts_any_write_between_its_marker_and_its_swap() -> None:
    # A function's whole timeout (540 s) must fit between a marker and its compare-and-swap.
    assert INDEX_GRACE_SECONDS > 540


def test_a_marker_goes_by_the_clock_when_no_time_is_given(bucket: Any, ledger: LedgerStore, clock: Clock) -> None:
    ledger.mark_active("r1")
    entry = ledger.active_entry("r1")
    old = ActiveEntry("r1", entry.generation, entry.written - timedelta(days=1))
    assert ledger.remove_stale_marker(old, None)  # no record at all: a crash before the write
    assert markers(bucket) == []


def test_a_marker_of_a_record_that_needs_reconcile_or_of_unknown_age_stays(ledger: LedgerStore, clock: Clock) -> None:
    ledger.mark_active("r1")
    entry = ledger.active_entry("r1")
    later = clock.now + timedelta(days=1)
    assert not ledger.remove_stale_marker(entry, ListedRequest("r1", "RUNNING", False), now=later)
    assert not ledger.remove_stale_marker(entry, ListedRequest("r1", "SUCCEEDED", True), now=later)
    assert not ledger.remove_stale_marker(ActiveEntry("r1", entry.generation, None), None, now=later)
    assert ledger.active_entry("r1") is not None


def test_a_marker_rewritten_since_it_was_listed_stays(ledger: LedgerStore, clock: Clock) -> None:
    ledger.mark_active("r1")
    listed = ledger.active_entry("r1")
    clock.advance(1)
    ledger.mark_active("r1")  # a write re-activated the record
    assert not ledger.remove_stale_marker(listed, None, now=clock.now + timedelta(days=1))
    assert ledger.active_entry("r1") is not None


@pytest.mark.parametrize("emulator", [False, True])
def test_a_guarded_delete_on_an_emulator_checks_the_generation_itself(
    bucket: Any, ledger: LedgerStore, clock: Clock, monkeypatch, emulator: bool
) -> None:
    if emulator:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://localhost:1")
    ledger.mark_active("r1")
    listed = ledger.active_entry("r1")
    clock.advance(1)
    ledger.mark_active("r1")
    assert not ledger.remove_stale_marker(listed, None, now=clock.now + timedelta(days=1))
    bucket.delete_blob(f"{ACTIVE_PREFIX}r1")
    assert not ledger.remove_stale_marker(listed, None, now=clock.now + timedelta(days=1))


def test_on_an_emulator_a_guarded_delete_reads_first_and_spares_a_changed_object(
    bucket: Any, ledger: LedgerStore, clock: Clock, monkeypatch
) -> None:
    # fake-gcs-server ignores ifGenerationMatch on a DELETE: the ledger's own look is the guard.
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://localhost:1")
    deletes: list[Any] = []

    class IgnoresPreconditionOnDelete:
        def __getattr__(self, attribute: str) -> Any:
            return getattr(bucket, attribute)

        def delete_blob(self, name: str, **kwargs: Any) -> None:
            deletes.append(kwargs.get("if_generation_match"))
            bucket.delete_blob(name)

    emulated = LedgerStore(IgnoresPreconditionOnDelete())
    emulated.mark_active("r1")
    listed = emulated.active_entry("r1")
    clock.advance(1)
    emulated.mark_active("r1")
    later = clock.now + timedelta(days=1)
    assert not emulated.remove_stale_marker(listed, None, now=later)
    assert emulated.active_entry("r1") is not None and deletes == []
    current = emulated.active_entry("r1")
    assert emulated.remove_stale_marker(current, None, now=later)
    assert deletes == [current.generation]


def test_the_index_is_built_once_said_so(ledger: LedgerStore) -> None:
    assert not ledger.index_built()
    ledger.mark_index_built()
    assert ledger.index_built()


# ---- the job index -----------------------------------------------------------------------------------


def test_a_job_is_indexed_once_under_its_numeric_id(ledger: LedgerStore) -> None:
    entry = JobIndexEntry("r1", 1, "us-central1", "projects/p/locations/us-central1/customJobs/42")
    ledger.index_job(entry)
    ledger.index_job(JobIndexEntry("r2", 2, "europe-west4", entry.job))  # a later claim of the same id: kept first
    assert ledger.find_job("42") == entry
    assert ledger.find_job("43") is None
    ledger.forget_job("42")
    ledger.forget_job("42")  # gone already: no error
    assert ledger.find_job("42") is None


@pytest.mark.parametrize(
    "body",
    [
        '{"request_id": "r1", "attempt": true, "location": "l", "job": "j"}',
        '{"request_id": "r1", "attempt": "1", "location": "l", "job": "j"}',
        '{"request_id": "r1", "attempt": 1, "location": 5, "job": "j"}',
        '{"request_id": "r1", "attempt": 1, "location": "l"}',
        '["r1"]',
        "{",
        "[" * 100_000,
    ],
)
def test_a_job_index_entry_not_of_its_shape_reads_as_corrupt(bucket: Any, ledger: LedgerStore, body: str) -> None:
    bucket.blob("jobs/42.json").upload_from_string(body)
    with pytest.raises(CorruptRecord) as raised:
        ledger.find_job("42")
    assert raised.value.request_id in ("r1", "jobs/42.json")


def test_a_corrupt_job_index_entry_names_its_request_when_it_can(bucket: Any, ledger: LedgerStore) -> None:
    bucket.blob("jobs/42.json").upload_from_string('{"request_id": "r1", "attempt": true}')
    with pytest.raises(CorruptRecord) as named:
        ledger.find_job("42")
    assert named.value.request_id == "r1"
    bucket.blob("jobs/42.json").upload_from_string('{"request_id": 7}')
    with pytest.raises(CorruptRecord) as unnamed:
        ledger.find_job("42")
    assert unnamed.value.request_id == "jobs/42.json"


# ---- maintenance documents ---------------------------------------------------------------------------


# JSON nested deeper than the parser goes (it raises RecursionError): a hand edit too, which
# every reconcile pass, reading its cursor first, would fail on until a person removed it.
TOO_DEEP = "[" * 100_000


@pytest.mark.parametrize("body", ["not json", "[1, 2]", '"x"', TOO_DEEP])
def test_a_maintenance_state_that_cannot_be_read_is_empty(bucket: Any, ledger: LedgerStore, body: str) -> None:
    assert ledger.maintenance_state("ledger-sweep") == {}
    bucket.blob("maintenance/ledger-sweep.json").upload_from_string(body)
    assert ledger.maintenance_state("ledger-sweep") == {}
    ledger.save_maintenance_state("ledger-sweep", {"position": "r9"})
    assert ledger.maintenance_state("ledger-sweep") == {"position": "r9"}


@pytest.mark.parametrize("body", ["not json", "[1]", '{"position": 5}', "{}", TOO_DEEP])
def test_a_cursor_that_cannot_be_read_starts_at_the_beginning(bucket: Any, ledger: LedgerStore, body: str) -> None:
    assert ledger.cursor("reconcile") == ""
    bucket.blob(cursor_path("reconcile")).upload_from_string(body)
    assert ledger.cursor("reconcile") == ""
    ledger.save_cursor("reconcile", "r7")
    assert ledger.cursor("reconcile") == "r7"
    assert cursor_path("reconcile") == "maintenance/reconcile-cursor.json"


def test_a_corrupt_note_is_written_once_and_forgotten_with_its_record(ledger: LedgerStore, bucket: Any) -> None:
    assert not ledger.is_noted_corrupt("r1")
    ledger.note_corrupt("r1")
    first = bucket.get_blob("maintenance/corrupt/r1.json").generation
    ledger.note_corrupt("r1")  # idempotent: the first note stays
    assert bucket.get_blob("maintenance/corrupt/r1.json").generation == first
    assert ledger.is_noted_corrupt("r1")
    ledger.forget_corrupt("r1")
    ledger.forget_corrupt("r1")
    assert not ledger.is_noted_corrupt("r1")


# ---- retention's removals ----------------------------------------------------------------------------


def test_a_record_is_removed_only_at_the_generation_read(ledger: LedgerStore, bucket: Any) -> None:
    ledger.restore(record("r1", RequestStatus.SUCCEEDED))
    _, _, generation = ledger.read_raw("r1")
    ledger.update("r1", lambda current: (current.markers.append("late"), current)[1])
    assert not ledger.remove_record("r1", generation)
    _, _, generation = ledger.read_raw("r1")
    assert ledger.remove_record("r1", generation)
    assert ledger.read("r1") == (None, 0)
    assert not ledger.remove_record("r1", generation)


def test_an_archived_record_is_its_bytes_outside_the_ledger(ledger: LedgerStore, bucket: Any) -> None:
    ledger.archive("r1", b'{"request_id": "r1"}')
    assert bucket.blob("archive/r1.json").download_as_bytes() == b'{"request_id": "r1"}'
    assert ledger.list_requests() == ([], None)


def test_a_trigger_requests_manifest_goes_with_it_once(ledger: LedgerStore, bucket: Any) -> None:
    bucket.blob("manifests/trg-1.json").upload_from_string("{}")
    ledger.forget_manifest("trg-1")
    ledger.forget_manifest("trg-1")
    assert bucket.get_blob("manifests/trg-1.json") is None


def test_referrers_are_listed_in_pages_and_removed_only_unchanged(
    ledger: LedgerStore, bucket: Any, clock: Clock
) -> None:
    for name in ("jobs/1.json", "jobs/2.json", "jobs/3.json", "manifests/m.json"):
        bucket.blob(name).upload_from_string("{}")
    rows, token = ledger.list_objects("jobs/", page_size=2)
    assert [row.name for row in rows] == ["jobs/1.json", "jobs/2.json"] and token
    assert rows[0] == ListedObject("jobs/1.json", bucket.get_blob("jobs/1.json").generation, clock.now)
    assert [row.name for row in ledger.list_objects("jobs/", page_token=token)[0]] == ["jobs/3.json"]
    assert [row.name for row in ledger.list_objects("jobs/", start_at="jobs/2.json")[0]] == [
        "jobs/2.json",
        "jobs/3.json",
    ]
    bucket.blob("jobs/1.json").upload_from_string('{"again": 1}')
    assert not ledger.remove_orphan(rows[0])
    assert ledger.remove_orphan(rows[1])
    assert bucket.get_blob("jobs/2.json") is None


# ---- preemption and kit lines of jobs not indexed yet ----------------------------------------------------------


def test_parked_lines_that_do_not_read_are_left_out_and_the_rest_still_read(bucket: Any, ledger: LedgerStore) -> None:
    # Hand edits: not JSON, JSON of another shape, JSON nested past the recursion limit. Named so
    # they list before the line that reads: one that does not read must not end the listing.
    for name, body in (("0-not-json", "{"), ("1-a-list", "[1]"), ("2-deep", "[" * 100_000)):
        bucket.blob(f"unindexed/42/{name}.json").upload_from_string(body)
    ledger.park_preemption("42", "line-1")
    parked = ledger.parked_preemptions("42")
    assert list(parked.values()) == ["line-1"]
    ledger.forget_parked(list(parked))
    ledger.forget_parked(list(parked))  # forgotten by a concurrent adoption: nothing to do
    assert set(ledger.parked_preemptions("42").values()) == set()


def test_a_parked_line_a_concurrent_count_forgot_after_the_listing_is_left_out(clock: Clock) -> None:
    """Two deliveries count the lines kept for one job (a submit redelivery and the job's next
    service line, shared/kept_lines.py): one forgets a line between the other's listing and its
    read. Counted already, it is left out; a NotFound raised instead failed the other delivery,
    and on_job_event acknowledges a permanent failure: its own line went uncounted."""
    storage = MemoryStorage(clock=clock)
    ledger = LedgerStore(storage.client().bucket("state"))
    ledger.park_preemption("42", "line-1")
    ledger.park_preemption("42", "line-2")
    [first, _] = ledger.parked_preemptions("42")
    reads = 0

    def forget_before_the_first_read(service: str, operation: str, perform: Any) -> Any:
        nonlocal reads
        if operation == "read" and (reads := reads + 1) == 1:
            ledger.forget_parked([first])  # the concurrent count, done
        return perform()

    storage.io = forget_before_the_first_read
    assert sorted(ledger.parked_preemptions("42").values()) == ["line-2"]


def test_a_parked_kit_line_is_kept_once_with_its_fields_and_is_no_preemption(ledger: LedgerStore) -> None:
    fields = {"event": "checkpoint_committed", "run": 0, "step": 500, "sig": "ab"}
    ledger.park_preemption("42", "line-1")
    ledger.park_kit_line("42", "line-2", fields)
    ledger.park_kit_line("42", "line-2", {"event": "run_started"})  # a redelivery keeps the first
    assert list(ledger.parked_preemptions("42").values()) == ["line-1"]
    assert list(ledger.parked_kit_lines("42").values()) == [fields]
