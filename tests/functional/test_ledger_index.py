"""The active index and ledger retention against a real fake-gcs-server (preconditions enforced):
a reconcile pass lists only what may be active, a stale marker leaves only when it is safe, a
ledger from before the index is indexed once, and finished records leave after their retention,
their referrers first, never while written to."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.clock import now_iso, utcnow
from shared.ledger import store as ledger_module
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.retention import MIN_RETENTION_SECONDS, retire, sweep_step
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.ledger.store import ACTIVE_PREFIX, ARCHIVE_PREFIX, JobIndexEntry, LedgerStore, ListedRequest
from shared.log import Logger
from shared.reconcile_index import ReconcileSummary, requests_to_reconcile
from tests.support.decisions import CapturedLog, make_settings

FAR = timedelta(days=400)


def _record(request_id: str, status: RequestStatus = RequestStatus.CLAIMED, **fields) -> RequestRecord:
    record = RequestRecord(request_id, {"request_id": request_id}, f"gs://b/{request_id}/", status=status, **fields)
    if status.is_terminal:
        record.finished_at = record.finished_at or now_iso()
    return record


def _finish(current: RequestRecord) -> RequestRecord:
    current.attempts.append(Attempt(1, "l", "SPOT", now_iso(), job="projects/p/locations/l/customJobs/7"))
    current.status = RequestStatus.SUBMITTED
    return current


def _markers(bucket) -> list[str]:
    return sorted(b.name[len(ACTIVE_PREFIX) :] for b in bucket.client.list_blobs(bucket, prefix=ACTIVE_PREFIX))


def _select(ledger: LedgerStore, log: Logger, limit: int = 100) -> tuple[list[str], ReconcileSummary]:
    summary = ReconcileSummary()
    return requests_to_reconcile(ledger, summary, log, page_size=2, limit=limit), summary


def _seed(ledger: LedgerStore, record: RequestRecord) -> None:
    """A record written as a ledger from before the index wrote it: no marker."""
    ledger._write(record, 0)  # noqa: SLF001


@pytest.fixture(autouse=True)
def _on_the_emulator(monkeypatch, fake_gcs: str) -> None:
    # What tells the ledger that deletes' generation preconditions need checking by hand
    # (fake-gcs-server ignores them on a DELETE), as the functions do on the local stack.
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs)


@pytest.fixture
def ledger(gcs_bucket) -> LedgerStore:
    ledger = LedgerStore(gcs_bucket)
    ledger.mark_index_built()
    return ledger


def test_a_write_that_activates_a_record_marks_it_first(ledger: LedgerStore, gcs_bucket) -> None:
    ledger.update("r1", lambda current: current or _record("r1"))
    assert _markers(gcs_bucket) == ["r1"]
    generation = ledger.active_entry("r1").generation

    ledger.update("r1", _finish)  # active -> active: the marker is left as it is
    assert ledger.active_entry("r1").generation == generation


def test_finished_requests_leave_the_scanned_set(ledger: LedgerStore, gcs_bucket, monkeypatch) -> None:
    for rid in ("a", "b", "c"):
        ledger.update(rid, lambda current, rid=rid: current or _record(rid))
    _finished(ledger, "b")
    log = CapturedLog()

    selected, summary = _select(ledger, log.logger)
    assert selected == ["a", "c"] and summary.listed == 3
    assert _markers(gcs_bucket) == ["a", "b", "c"]  # too young to judge: kept, skipped

    monkeypatch.setattr(ledger_module, "INDEX_GRACE_SECONDS", 0.0)
    selected, summary = _select(ledger, log.logger)
    assert selected == ["a", "c"] and _markers(gcs_bucket) == ["a", "c"]
    assert log.events("active_index_pruned")[-1]["removed"] == 1
    selected, summary = _select(ledger, log.logger)
    assert summary.listed == 2


def _succeed(current: RequestRecord) -> RequestRecord:
    current.attempts[-1].outcome = AttemptOutcome.SUCCEEDED
    current.status = RequestStatus.SUCCEEDED
    current.finished_at = now_iso()
    return current


def _finished(ledger: LedgerStore, request_id: str) -> None:
    ledger.update(request_id, _finish)
    ledger.update(request_id, _succeed)


def test_a_marker_rewritten_after_its_listing_is_never_removed(ledger: LedgerStore, gcs_bucket) -> None:
    ledger.update("r1", lambda current: current or _record("r1"))
    _finished(ledger, "r1")
    [listed], _ = ledger.list_active()
    stale = ledger.listed_status("r1")
    assert not stale.needs_reconcile
    ledger.mark_active("r1")  # a writer re-activating the record, before its compare-and-swap

    assert not ledger.remove_stale_marker(listed, stale, now=utcnow() + FAR)
    assert _markers(gcs_bucket) == ["r1"]


def test_a_marker_whose_record_needs_reconcile_or_is_young_stays(ledger: LedgerStore, gcs_bucket) -> None:
    ledger.update("r1", lambda current: current or _record("r1"))
    [listed], _ = ledger.list_active()
    assert not ledger.remove_stale_marker(listed, ledger.listed_status("r1"), now=utcnow() + FAR)
    _finished(ledger, "r1")
    assert not ledger.remove_stale_marker(listed, ledger.listed_status("r1"))  # young
    assert ledger.remove_stale_marker(listed, ledger.listed_status("r1"), now=utcnow() + FAR)
    assert _markers(gcs_bucket) == []


def test_a_marker_without_a_record_is_a_crash_before_the_write(ledger: LedgerStore, gcs_bucket, monkeypatch) -> None:
    ledger.mark_active("ghost")  # the writer died between its marker and its compare-and-swap
    monkeypatch.setattr(ledger_module, "INDEX_GRACE_SECONDS", 0.0)
    selected, _ = _select(ledger, CapturedLog().logger)
    assert selected == [] and _markers(gcs_bucket) == []


def test_a_failed_marker_check_reconciles_the_request(ledger: LedgerStore, monkeypatch) -> None:
    ledger.update("r1", lambda current: current or _record("r1"))

    def broken(_: str) -> ListedRequest:
        raise ConnectionError("GCS hiccup")

    monkeypatch.setattr(ledger, "prefetch", broken)
    selected, _ = _select(ledger, CapturedLog().logger)
    assert selected == ["r1"]


def test_a_ledger_from_before_the_index_is_indexed_once(gcs_bucket) -> None:
    ledger = LedgerStore(gcs_bucket)
    _seed(ledger, _record("old-active", RequestStatus.RUNNING))
    _seed(ledger, _record("old-done", RequestStatus.SUCCEEDED))
    _seed(ledger, _record("old-pending", RequestStatus.FAILED, pending_alerts=[{"kind": "x"}]))
    log = CapturedLog()

    selected, _ = _select(ledger, log.logger)

    assert selected == ["old-active", "old-pending"]
    assert _markers(gcs_bucket) == ["old-active", "old-pending"] and ledger.index_built()
    [built] = log.events("active_index_built")
    assert built["markers_written"] == 2
    _select(ledger, log.logger)
    assert len(log.events("active_index_built")) == 1


def test_a_pass_reads_the_index_marker_only_until_it_has_seen_it(ledger: LedgerStore, monkeypatch) -> None:
    asked: list[LedgerStore] = []
    index_built = LedgerStore.index_built

    def counted(self: LedgerStore) -> bool:
        asked.append(self)
        return index_built(self)

    monkeypatch.setattr(LedgerStore, "index_built", counted)
    log = CapturedLog().logger
    _select(ledger, log)
    _select(ledger, log)
    assert asked == [ledger]  # a built index stays built: the next pass does not ask again
    another = LedgerStore(ledger._bucket)  # noqa: SLF001 - another process's view of the same ledger
    _select(another, log)
    assert asked == [ledger, another]


def test_the_sweep_removes_expired_records_referrers_first_and_repairs_the_index(
    ledger: LedgerStore, gcs_bucket
) -> None:
    settings = make_settings(gcs_bucket.name)
    ledger.update("done", lambda current: current or _record("done"))
    _finished(ledger, "done")
    ledger.index_job(JobIndexEntry("done", 1, "l", "projects/p/locations/l/customJobs/7"))
    _seed(ledger, _record("unmarked", RequestStatus.RUNNING))
    _seed(ledger, _record("alerting", RequestStatus.FAILED, pending_alerts=[{"kind": "x"}]))
    log = CapturedLog()

    assert sweep_step(ledger, log.logger, settings=settings) is not None  # now: nothing expired
    assert ledger.get("done") is not None and _markers(gcs_bucket) == ["alerting", "done", "unmarked"]
    assert sweep_step(ledger, log.logger, settings=settings) is None  # the round is done for today

    later = utcnow() + FAR
    ledger.save_maintenance_state("ledger-sweep", {})
    summary = sweep_step(ledger, log.logger, settings=settings, now=later)

    assert summary.removed == 1 and summary.finished_round
    assert ledger.get("done") is None and ledger.find_job("7") is None
    assert _markers(gcs_bucket) == ["alerting", "unmarked"]
    assert gcs_bucket.blob(f"{ARCHIVE_PREFIX}done.json").exists()
    assert ledger.get("alerting") is not None and ledger.get("unmarked") is not None


def test_a_record_written_since_it_was_read_is_kept(ledger: LedgerStore, gcs_bucket, monkeypatch) -> None:
    ledger.update("done", lambda current: current or _record("done"))
    _finished(ledger, "done")
    read_raw = ledger.read_raw

    def late_event_meanwhile(request_id: str):
        got = read_raw(request_id)
        ledger.update(request_id, lambda current: current.mark("late:1:x") and current)
        return got

    monkeypatch.setattr(ledger, "read_raw", late_event_meanwhile)
    assert not retire(ledger, "done", MIN_RETENTION_SECONDS, archive=False, now=utcnow() + FAR)
    assert ledger.get("done").markers == ["late:1:x"]


def test_retention_is_never_shorter_than_pubsub_keeps_a_message(gcs_bucket) -> None:
    from shared.ledger.retention import effective_retention

    assert (
        effective_retention(make_settings(gcs_bucket.name, SPOTJOBS_LEDGER_RETENTION_SECONDS="60"))
        == MIN_RETENTION_SECONDS
    )
    assert effective_retention(make_settings(gcs_bucket.name, SPOTJOBS_LEDGER_RETENTION_SECONDS="0")) == 0


def test_a_sweep_turn_removes_a_bounded_number_and_the_next_resumes(
    ledger: LedgerStore, gcs_bucket, monkeypatch
) -> None:
    from shared.ledger import retention as ledger_retention

    monkeypatch.setattr(ledger_retention, "SWEEP_RETIREMENTS_PER_RUN", 1)
    settings = make_settings(gcs_bucket.name)
    for rid in ("a", "b"):
        ledger.update(rid, lambda current, rid=rid: current or _record(rid))
        _finished(ledger, rid)
    later, log = utcnow() + FAR, CapturedLog().logger

    first = sweep_step(ledger, log, settings=settings, now=later)
    second = sweep_step(ledger, log, settings=settings, now=later)

    assert (first.removed, first.finished_round) == (1, False)
    assert (second.removed, second.finished_round) == (1, True)
    assert ledger.get("a") is None and ledger.get("b") is None


def test_a_pass_reads_each_active_record_once(ledger: LedgerStore, monkeypatch) -> None:
    for rid in ("a", "b"):
        ledger.update(rid, lambda current, rid=rid: current or _record(rid))
    _finished(ledger, "b")
    selected, _ = _select(ledger, CapturedLog().logger)
    reads: list[str] = []
    read = ledger.read
    monkeypatch.setattr(ledger, "read", lambda rid: reads.append(rid) or read(rid))

    assert ledger.get("a").request_id == "a" and reads == []  # read ahead by the pass
    assert ledger.get("a").request_id == "a" and reads == ["a"]  # once only
    assert ledger.get("b").request_id == "b" and reads == ["a", "b"]  # not kept: not selected


def _corrupt_body_keeping_metadata(gcs_bucket, request_id: str) -> None:
    """The record's body no longer parses; its listing metadata still says finished."""
    blob = gcs_bucket.get_blob(f"requests/{request_id}.json")
    metadata = dict(blob.metadata or {})
    blob = gcs_bucket.blob(f"requests/{request_id}.json")
    blob.metadata = metadata
    blob.upload_from_string(b'{"request_id": "bad", trunc', content_type="application/json")


def test_a_corrupt_finished_record_is_alerted_once_and_the_sweep_moves_on(ledger: LedgerStore, gcs_bucket) -> None:
    settings = make_settings(gcs_bucket.name)
    for rid in ("a-bad", "b-done"):
        ledger.update(rid, lambda current, rid=rid: current or _record(rid))
        _finished(ledger, rid)
    _corrupt_body_keeping_metadata(gcs_bucket, "a-bad")
    corrupt: list[str] = []
    later, log = utcnow() + FAR, CapturedLog()

    summary = sweep_step(
        ledger, log.logger, settings=settings, now=later, on_corrupt=lambda exc: corrupt.append(exc.request_id)
    )

    assert summary.finished_round and summary.removed == 1 and summary.corrupt == 1
    assert ledger.get("b-done") is None  # the record after the corrupt one was retired
    assert corrupt == ["a-bad"]
    assert ledger.maintenance_state("ledger-sweep")["finished_at"]  # the position was saved

    # The next round meets it again: still skipped, the sweep still finishes.
    ledger.save_maintenance_state("ledger-sweep", {})
    again = sweep_step(ledger, log.logger, settings=settings, now=later)
    assert again.finished_round and again.corrupt == 1
    [line] = log.events("ledger_corrupt")  # with no one to alert, the sweep says it
    assert line["request_id"] == "a-bad"


def test_reconcile_alerts_a_corrupt_finished_record_the_sweep_meets_once(gcs_bucket, monkeypatch) -> None:
    from shared.ledger import retention as ledger_retention
    from shared.reconcile import run_reconcile
    from tests.support.decisions import FakePublisher, FakeVertex, World

    world = World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))
    world.ledger.mark_index_built()
    world.ledger.update("bad", lambda current: current or _record("bad"))
    _finished(world.ledger, "bad")
    _corrupt_body_keeping_metadata(gcs_bucket, "bad")
    monkeypatch.setattr(ledger_retention, "utcnow", lambda: utcnow() + FAR)  # past its retention

    for _ in range(2):
        world.ledger.save_maintenance_state("ledger-sweep", {})
        run_reconcile(world.ports, CapturedLog().logger)

    alerts = [m.data for m in world.publisher.on(world.settings.ops_alerts_topic)]
    assert [(a["kind"], a["request_id"]) for a in alerts] == [("ledger_corrupt", "bad")]
    assert world.ledger.maintenance_state("ledger-sweep")["finished_at"]


def test_a_retired_record_leaves_no_corrupt_note_behind(ledger: LedgerStore, gcs_bucket) -> None:
    ledger.update("mended", lambda current: current or _record("mended"))
    ledger.note_corrupt("mended")  # found corrupt and alerted once; an operator repaired it since
    _finished(ledger, "mended")

    assert retire(ledger, "mended", MIN_RETENTION_SECONDS, archive=False, now=utcnow() + FAR)
    left = [b.name for b in gcs_bucket.client.list_blobs(gcs_bucket) if "mended" in b.name]
    assert left == []


def test_a_retired_trigger_request_takes_its_manifest_with_it(ledger: LedgerStore, gcs_bucket) -> None:
    from shared.requests.envelope import manifest_path

    request_id = "trg-daily-w20261129t170000z"
    ledger.update(request_id, lambda current: current or _record(request_id))
    gcs_bucket.blob(manifest_path(request_id)).upload_from_string(b"{}")  # what on_trigger wrote
    _finished(ledger, request_id)

    assert retire(ledger, request_id, MIN_RETENTION_SECONDS, archive=False, now=utcnow() + FAR)
    assert [b.name for b in gcs_bucket.client.list_blobs(gcs_bucket) if request_id in b.name] == []


def test_the_referrers_of_a_record_deleted_by_hand_leave_after_the_retention(ledger: LedgerStore, gcs_bucket) -> None:
    """A person deleted a record: its job index entry and manifest name a request the ledger no
    longer has, and the record sweep (which walks records) never meets them."""
    from shared.ledger.retention import sweep_orphans_step
    from shared.requests.envelope import manifest_path

    settings = make_settings(gcs_bucket.name)
    for rid, job in (("trg-gone", "7"), ("kept", "8")):
        ledger.update(rid, lambda current, rid=rid: current or _record(rid))
        ledger.index_job(JobIndexEntry(rid, 1, "l", f"projects/p/locations/l/customJobs/{job}"))
        gcs_bucket.blob(manifest_path(rid)).upload_from_string(b"{}")
    gcs_bucket.delete_blob("requests/trg-gone.json")
    log = CapturedLog()

    young = sweep_orphans_step(ledger, log.logger, settings=settings)  # younger than the retention
    assert young is not None and young.removed == 0 and ledger.find_job("7") is not None
    ledger.save_maintenance_state("ledger-orphan-sweep", {})
    summary = sweep_orphans_step(ledger, log.logger, settings=settings, now=utcnow() + FAR)

    assert summary.removed == 2 and summary.finished_round
    assert ledger.find_job("7") is None and not gcs_bucket.blob(manifest_path("trg-gone")).exists()
    assert ledger.find_job("8") is not None and gcs_bucket.blob(manifest_path("kept")).exists()
    assert sweep_orphans_step(ledger, log.logger, settings=settings, now=utcnow() + FAR) is None  # done today


def test_an_orphan_sweep_turn_is_bounded_and_the_next_resumes(ledger: LedgerStore, gcs_bucket, monkeypatch) -> None:
    from shared.ledger import retention
    from shared.ledger.retention import sweep_orphans_step

    monkeypatch.setattr(retention, "SWEEP_PAGE_SIZE", 2)
    for job in range(5):
        ledger.index_job(JobIndexEntry(f"gone-{job}", 1, "l", f"projects/p/locations/l/customJobs/{job}"))
    settings = make_settings(gcs_bucket.name)
    later = utcnow() + FAR

    first = sweep_orphans_step(ledger, CapturedLog().logger, settings=settings, now=later, pages=1)
    second = sweep_orphans_step(ledger, CapturedLog().logger, settings=settings, now=later, pages=5)

    assert (first.removed, first.finished_round) == (2, False)
    assert (second.removed, second.finished_round) == (3, True)
    assert all(ledger.find_job(str(job)) is None for job in range(5))


def test_a_marker_carries_the_status_and_creation_and_a_status_change_patches_it_in_place(
    ledger: LedgerStore, gcs_bucket
) -> None:
    created = ledger.update("noted", lambda current: _record("noted"))
    written = ledger.active_entry("noted")
    assert (written.status, written.created_at) == ("CLAIMED", created.created_at)

    ledger.update("noted", _finish)  # CLAIMED -> SUBMITTED

    [listed] = [entry for entry in ledger.list_active()[0] if entry.request_id == "noted"]
    assert (listed.status, listed.created_at) == ("SUBMITTED", created.created_at)
    assert (listed.generation, listed.written) == (written.generation, written.written)  # its age is its writing's
