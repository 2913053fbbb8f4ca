"""Ledger retention (shared/ledger/retention.py) on the simulator's in-memory Cloud Storage with a
clock of the test's: the retention's floors, the instant a finished record may go and not a moment
before, what keeps a record (a re-queue, work or effects pending, a young marker, a write since it
was read), what goes with it, the sweep's daily round, its bounded turns and where the next one
resumes, the corrupt record handed on, and the orphan sweep of referrers whose record is gone.
tests/functional/test_ledger_index.py drives the same on fake-gcs-server in real time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared.clock import iso
from shared.ledger import retention
from shared.ledger.records import Attempt, CorruptRecord, RequestRecord, Requeue
from shared.ledger.retention import (
    MIN_RETENTION_SECONDS,
    ORPHAN_SWEEP_STATE,
    SWEEP_INTERVAL_SECONDS,
    SWEEP_STATE,
    backfill_index,
    effective_retention,
    retire,
    sweep_orphans_step,
    sweep_step,
)
from shared.ledger.states import RequestStatus
from shared.ledger.store import ACTIVE_PREFIX, JobIndexEntry, LedgerStore
from shared.requests.envelope import manifest_path
from sim.gcs import MemoryStorage
from tests.support.decisions import CapturedLog, make_settings
from tests.support.interleave import Clock

DAY = 86400.0
RETENTION = 90 * DAY  # the default `ledger_retention_seconds`, above every floor


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def bucket(clock: Clock) -> Any:
    return MemoryStorage(clock=clock).client().bucket("state")


@pytest.fixture
def ledger(bucket: Any) -> LedgerStore:
    return LedgerStore(bucket)


@pytest.fixture
def log() -> CapturedLog:
    return CapturedLog()


@pytest.fixture(autouse=True)
def _no_emulator(monkeypatch) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)


SETTINGS = make_settings("state")


def finished(ledger: LedgerStore, clock: Clock, request_id: str, *jobs: str, **fields: Any) -> RequestRecord:
    """A record that finished now (its write and its finish time the clock's), with a job each."""
    attempts = [
        Attempt(n, "l", "SPOT", iso(clock.now), job=f"projects/p/locations/l/customJobs/{job}")
        for n, job in enumerate(jobs, 1)
    ]
    fields.setdefault("finished_at", iso(clock.now))
    record = RequestRecord(
        request_id, {"request_id": request_id}, f"gs://b/{request_id}/", RequestStatus.SUCCEEDED, attempts, **fields
    )
    ledger.restore(record)
    for attempt in attempts:
        ledger.index_job(JobIndexEntry(request_id, attempt.n, "l", attempt.job))
    return record


def active(ledger: LedgerStore, clock: Clock, request_id: str) -> None:
    ledger.restore(
        RequestRecord(request_id, {"request_id": request_id}, f"gs://b/{request_id}/", RequestStatus.RUNNING)
    )


def names(bucket: Any, prefix: str = "") -> list[str]:
    return [blob.name for blob in bucket.client.list_blobs(bucket, prefix=prefix)]


def after(clock: Clock, seconds: float) -> Any:
    return clock.now + timedelta(seconds=seconds)


# ---- the retention ----------------------------------------------------------------------------------


@pytest.mark.parametrize("configured", ["0", "-1"])
def test_a_retention_of_zero_or_less_keeps_every_record(configured: str) -> None:
    assert effective_retention(make_settings("state", SPOTJOBS_LEDGER_RETENTION_SECONDS=configured)) == 0


def test_the_retention_is_never_shorter_than_pubsub_keeps_a_message_nor_the_pruners_retention_and_a_day() -> None:
    def effective(ledger_days: float, pruner_days: float) -> float:
        return effective_retention(
            make_settings(
                "state",
                SPOTJOBS_LEDGER_RETENTION_SECONDS=str(ledger_days * DAY),
                SPOTJOBS_FINISHED_RETENTION_SECONDS=str(pruner_days * DAY),
            )
        )

    # docs/ARCHITECTURE.md: "never less than 32 days, longer than Pub/Sub keeps any message".
    assert MIN_RETENTION_SECONDS == 32 * DAY
    assert effective(1, 7) == 32 * DAY
    assert effective(1 / DAY, 0) == 32 * DAY  # a retention of one second
    assert effective(50, 7) == 50 * DAY
    assert effective(40, 45) == 46 * DAY


# ---- one record's removal ------------------------------------------------------------------------


def test_a_finished_record_goes_at_its_retention_and_not_a_moment_before(
    ledger: LedgerStore, bucket: Any, clock: Clock
) -> None:
    finished(ledger, clock, "done", "7")
    assert not retire(ledger, "done", RETENTION, archive=False, now=after(clock, RETENTION - 0.001))
    assert ledger.read("done")[0] is not None
    assert retire(ledger, "done", RETENTION, archive=False, now=after(clock, RETENTION))
    assert ledger.read("done") == (None, 0)


def test_a_record_with_no_finish_time_counts_from_its_last_write(ledger: LedgerStore, clock: Clock) -> None:
    finished(ledger, clock, "done", finished_at=None, updated_at=iso(clock.now - timedelta(days=10)))
    assert not retire(ledger, "done", RETENTION, archive=False, now=after(clock, RETENTION - 10 * DAY - 1))
    assert retire(ledger, "done", RETENTION, archive=False, now=after(clock, RETENTION - 10 * DAY))


def test_the_finish_time_not_the_last_write_is_what_counts(ledger: LedgerStore, clock: Clock) -> None:
    finished(ledger, clock, "done", updated_at=iso(clock.now + timedelta(days=30)))
    assert retire(ledger, "done", RETENTION, archive=False, now=after(clock, RETENTION))


def test_a_hand_edited_finish_time_is_a_corrupt_record(ledger: LedgerStore, clock: Clock) -> None:
    finished(ledger, clock, "done", finished_at="yesterday")
    with pytest.raises(CorruptRecord, match="'yesterday' is not a time"):
        retire(ledger, "done", RETENTION, archive=False, now=after(clock, RETENTION))
    assert ledger.read("done")[0] is not None


def test_a_record_gone_already_is_not_removed_again(ledger: LedgerStore, clock: Clock) -> None:
    assert not retire(ledger, "never", RETENTION, archive=False, now=clock.now)


@pytest.mark.parametrize(
    "keeping",
    [
        {"status": RequestStatus.RUNNING, "finished_at": None},
        {"pending_alerts": [{"kind": "x"}]},
        {"prune_pending": True},
    ],
)
def test_a_record_that_still_needs_reconciling_stays(ledger: LedgerStore, clock: Clock, keeping: dict) -> None:
    record = RequestRecord("r", {}, "gs://b/r/", RequestStatus.SUCCEEDED, finished_at=iso(clock.now))
    for name, value in keeping.items():
        setattr(record, name, value)
    ledger.restore(record)
    assert not retire(ledger, "r", RETENTION, archive=False, now=after(clock, 10 * RETENTION))


def test_a_record_with_a_requeue_decided_stays(ledger: LedgerStore, clock: Clock) -> None:
    requeue = Requeue(2, "l", "SPOT", "preempted", iso(clock.now))
    finished(ledger, clock, "r", requeue=requeue)
    assert not retire(ledger, "r", RETENTION, archive=False, now=after(clock, 10 * RETENTION))


def test_a_removed_record_takes_its_referrers_and_is_archived_when_asked(
    ledger: LedgerStore, bucket: Any, clock: Clock
) -> None:
    finished(ledger, clock, "done", "7", "8")
    raw = bucket.blob("requests/done.json").download_as_bytes()
    ledger.note_corrupt("done")
    ledger.restore(RequestRecord("done-with-no-job", {}, "gs://b/x/", RequestStatus.FAILED, finished_at=iso(clock.now)))
    ledger.restore(
        RequestRecord(
            "unsent", {}, "gs://b/u/", RequestStatus.FAILED, [Attempt(1, "l", "SPOT", "t")], finished_at=iso(clock.now)
        )
    )
    later = after(clock, RETENTION)

    assert retire(ledger, "done", RETENTION, archive=True, now=later)
    assert ledger.find_job("7") is None and ledger.find_job("8") is None
    assert bucket.blob("archive/done.json").download_as_bytes() == raw
    assert not ledger.is_noted_corrupt("done")
    assert retire(ledger, "done-with-no-job", RETENTION, archive=False, now=later)
    assert retire(ledger, "unsent", RETENTION, archive=False, now=later)
    assert names(bucket, "archive/") == ["archive/done.json"]


def test_only_a_trigger_request_takes_a_manifest_with_it(ledger: LedgerStore, bucket: Any, clock: Clock) -> None:
    for request_id in ("trg-w1", "plain"):
        finished(ledger, clock, request_id)
        bucket.blob(manifest_path(request_id)).upload_from_string(b"{}")
    for request_id in ("trg-w1", "plain"):
        assert retire(ledger, request_id, RETENTION, archive=False, now=after(clock, RETENTION))
    assert names(bucket, "manifests/") == [manifest_path("plain")]


def test_a_young_marker_keeps_its_record_and_a_stale_one_goes_first(
    ledger: LedgerStore, bucket: Any, clock: Clock
) -> None:
    finished(ledger, clock, "done")
    clock.advance(RETENTION)
    ledger.mark_active("done")  # a write re-activating it is under way
    assert not retire(ledger, "done", RETENTION, archive=False, now=clock.now)
    assert ledger.read("done")[0] is not None and names(bucket, ACTIVE_PREFIX) == [f"{ACTIVE_PREFIX}done"]
    assert retire(ledger, "done", RETENTION, archive=False, now=after(clock, DAY))
    assert names(bucket, ACTIVE_PREFIX) == []


def test_a_record_written_between_its_read_and_its_removal_stays(
    ledger: LedgerStore, bucket: Any, clock: Clock, monkeypatch
) -> None:
    finished(ledger, clock, "done")
    read_raw = ledger.read_raw

    def late_write_meanwhile(request_id: str) -> Any:
        got = read_raw(request_id)
        ledger.update(request_id, lambda current: current.mark("late:1:x") and current)
        return got

    monkeypatch.setattr(ledger, "read_raw", late_write_meanwhile)
    assert not retire(ledger, "done", RETENTION, archive=False, now=after(clock, RETENTION))
    assert ledger.read("done")[0].markers == ["late:1:x"]


# ---- the sweep -------------------------------------------------------------------------------------


def test_a_record_is_swept_at_its_retention_and_not_a_moment_before(
    ledger: LedgerStore, bucket: Any, clock: Clock, log: CapturedLog
) -> None:
    finished(ledger, clock, "done", "7")
    early = sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, RETENTION - 0.001))
    assert early.removed == 0 and early.listed == 1 and early.finished_round
    ledger.save_maintenance_state(SWEEP_STATE, {})
    summary = sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, RETENTION))
    assert summary.removed == 1 and ledger.read("done") == (None, 0)
    assert bucket.blob("archive/done.json").exists()  # archived by default


def test_a_sweep_with_archiving_off_archives_nothing(ledger: LedgerStore, bucket: Any, clock: Clock, log) -> None:
    finished(ledger, clock, "done")
    settings = make_settings("state", SPOTJOBS_LEDGER_ARCHIVE="false")
    assert sweep_step(ledger, log.logger, settings=settings, now=after(clock, RETENTION)).removed == 1
    assert names(bucket, "archive/") == []


def test_with_retention_off_the_sweep_only_repairs_the_index(
    ledger: LedgerStore, bucket: Any, clock: Clock, log: CapturedLog
) -> None:
    finished(ledger, clock, "done")
    ledger._write(RequestRecord("unmarked", {}, "gs://b/u/", RequestStatus.RUNNING), 0)  # noqa: SLF001
    settings = make_settings("state", SPOTJOBS_LEDGER_RETENTION_SECONDS="0")
    summary = sweep_step(ledger, log.logger, settings=settings, now=after(clock, 100 * RETENTION))
    assert (summary.listed, summary.removed, summary.markers_repaired, summary.unchanged) == (2, 0, 1, 0)
    assert names(bucket, ACTIVE_PREFIX) == [f"{ACTIVE_PREFIX}unmarked"]
    ledger.save_maintenance_state(SWEEP_STATE, {})
    again = sweep_step(ledger, log.logger, settings=settings, now=after(clock, 100 * RETENTION))
    assert (again.markers_repaired, again.unchanged) == (0, 1)


def test_a_round_is_daily_and_its_turn_says_what_it_did(ledger: LedgerStore, clock: Clock, log: CapturedLog) -> None:
    finished(ledger, clock, "done")
    first = sweep_step(ledger, log.logger, settings=SETTINGS, now=clock.now)
    assert first.finished_round
    assert ledger.maintenance_state(SWEEP_STATE) == {"position": "", "finished_at": clock.now.isoformat()}
    assert sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, SWEEP_INTERVAL_SECONDS - 0.001)) is None
    assert sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, SWEEP_INTERVAL_SECONDS)) is not None
    (line, *_) = log.events("ledger_sweep")
    assert line["severity"] == "INFO" and line["listed"] == 1 and line["finished_round"] is True
    assert SWEEP_INTERVAL_SECONDS == DAY  # "one round a day" (the module docstring)


def test_a_turn_walks_at_most_five_pages_of_a_thousand(ledger: LedgerStore, bucket: Any, clock: Clock, log) -> None:
    # docs/ARCHITECTURE.md: "at most five pages of a thousand per reconcile pass".
    for n in range(5001):
        blob = bucket.blob(f"requests/r{n:05d}.json")
        blob.metadata = {"status": "SUCCEEDED"}  # finished now: nothing to do but list it
        blob.upload_from_string("{}")
    turn = sweep_step(ledger, log.logger, settings=SETTINGS, now=clock.now)
    assert (turn.listed, turn.finished_round) == (5000, False)
    assert ledger.maintenance_state(SWEEP_STATE)["position"] == "r04999"


def test_a_turn_of_few_pages_leaves_its_position_and_the_next_turn_resumes_there(
    ledger: LedgerStore, clock: Clock, log: CapturedLog, monkeypatch
) -> None:
    monkeypatch.setattr(retention, "SWEEP_PAGE_SIZE", 2)
    for request_id in ("a", "b", "c", "d", "e"):
        finished(ledger, clock, request_id)
    now = after(clock, RETENTION)

    first = sweep_step(ledger, log.logger, settings=SETTINGS, now=now, pages=1)
    assert (first.listed, first.removed, first.finished_round) == (2, 2, False)
    assert ledger.maintenance_state(SWEEP_STATE) == {"position": "b", "finished_at": None}
    second = sweep_step(ledger, log.logger, settings=SETTINGS, now=now, pages=2)
    assert (second.listed, second.removed, second.finished_round) == (3, 3, True)
    assert ledger.list_requests() == ([], None)


def test_a_turn_walks_as_many_pages_as_it_may_and_stops_at_the_last(
    ledger: LedgerStore, clock: Clock, log: CapturedLog, monkeypatch
) -> None:
    monkeypatch.setattr(retention, "SWEEP_PAGE_SIZE", 1)
    for request_id in ("a", "b", "c"):
        active(ledger, clock, request_id)
    turn = sweep_step(ledger, log.logger, settings=SETTINGS, now=clock.now, pages=2)
    assert (turn.listed, turn.finished_round) == (2, False)
    assert ledger.maintenance_state(SWEEP_STATE)["position"] == "b"
    turn = sweep_step(ledger, log.logger, settings=SETTINGS, now=clock.now, pages=5)
    assert (turn.listed, turn.finished_round) == (2, True)  # b once more, then c; no page after


def test_a_turn_removes_at_most_its_budget_and_the_next_starts_at_the_first_it_left(
    ledger: LedgerStore, clock: Clock, log: CapturedLog, monkeypatch
) -> None:
    monkeypatch.setattr(retention, "SWEEP_RETIREMENTS_PER_RUN", 2)
    for request_id in ("a", "b", "c"):
        finished(ledger, clock, request_id)
    for request_id in ("b0", "c0"):
        active(ledger, clock, request_id)  # not to retire: costs no budget
    now = after(clock, RETENTION)

    first = sweep_step(ledger, log.logger, settings=SETTINGS, now=now)
    assert (first.listed, first.removed, first.finished_round) == (3, 2, False)  # a, b, b0; c not counted
    assert ledger.maintenance_state(SWEEP_STATE) == {"position": "c", "finished_at": None}
    second = sweep_step(ledger, log.logger, settings=SETTINGS, now=now)
    assert (second.listed, second.removed, second.finished_round) == (2, 1, True)


def test_a_budget_spent_on_the_last_record_still_finishes_the_round(
    ledger: LedgerStore, clock: Clock, log: CapturedLog, monkeypatch
) -> None:
    monkeypatch.setattr(retention, "SWEEP_RETIREMENTS_PER_RUN", 2)
    for request_id in ("a", "b"):
        finished(ledger, clock, request_id)
    turn = sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, RETENTION))
    assert (turn.removed, turn.finished_round) == (2, True)


def test_an_unfinished_round_resumes_even_the_next_day(ledger: LedgerStore, clock: Clock, log: CapturedLog) -> None:
    for request_id in ("a", "b"):
        active(ledger, clock, request_id)
    ledger.save_maintenance_state(SWEEP_STATE, {"position": "b", "finished_at": None})
    turn = sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, 2 * DAY))
    assert turn.listed == 1 and turn.finished_round


@pytest.mark.parametrize("state", [{"position": 7}, {"position": None}, {"finished_at": "never", "position": "b"}])
def test_a_position_that_is_no_name_starts_the_round_from_the_first_record(
    ledger: LedgerStore, clock: Clock, log: CapturedLog, state: dict
) -> None:
    for request_id in ("a", "b"):
        active(ledger, clock, request_id)
    ledger.save_maintenance_state(SWEEP_STATE, state)
    assert sweep_step(ledger, log.logger, settings=SETTINGS, now=clock.now).listed == (
        1 if "finished_at" in state else 2
    )


def test_a_finished_round_starts_the_next_from_the_first_record(
    ledger: LedgerStore, clock: Clock, log: CapturedLog
) -> None:
    for request_id in ("a", "b"):
        active(ledger, clock, request_id)
    ledger.save_maintenance_state(SWEEP_STATE, {"position": "b", "finished_at": iso(clock.now)})
    assert sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, DAY)).listed == 2


def test_a_record_kept_by_a_young_marker_is_counted_kept(ledger: LedgerStore, clock: Clock, log: CapturedLog) -> None:
    finished(ledger, clock, "done")
    clock.advance(RETENTION)
    ledger.mark_active("done")  # a write re-activating it is under way
    turn = sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, 60))
    assert (turn.kept, turn.removed) == (1, 0)


def written_by_hand(bucket: Any, request_id: str) -> None:
    """Rewrite a record's document as a person does (a copy, an upload): its body kept, no metadata."""
    blob = bucket.blob(f"requests/{request_id}.json")
    body = blob.download_as_bytes()
    blob.metadata = None
    blob.upload_from_string(body)


def test_a_finished_record_written_without_metadata_is_judged_by_its_body_and_goes_at_its_retention(
    ledger: LedgerStore, bucket: Any, clock: Clock, log: CapturedLog
) -> None:
    # Seeds 1292 and 1631: its listing shows no status, and the sweep marked it active every round
    # (reconcile, reading the body, removed the marker): it and its referrers stayed for good.
    finished(ledger, clock, "done", "7")
    written_by_hand(bucket, "done")
    young = sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, RETENTION - 1))
    assert (young.markers_repaired, young.unchanged, young.removed) == (0, 1, 0)
    assert names(bucket, ACTIVE_PREFIX) == []  # finished: nothing for reconcile to do
    ledger.save_maintenance_state(SWEEP_STATE, {})
    turn = sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, RETENTION))
    assert (turn.removed, turn.markers_repaired) == (1, 0)
    assert names(bucket, "requests/") == names(bucket, "jobs/") == names(bucket, ACTIVE_PREFIX) == []


def test_an_active_record_written_without_metadata_gets_its_marker_with_its_status(
    ledger: LedgerStore, bucket: Any, clock: Clock, log: CapturedLog
) -> None:
    active(ledger, clock, "running")
    bucket.blob(f"{ACTIVE_PREFIX}running").delete()
    written_by_hand(bucket, "running")
    turn = sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, 2 * RETENTION))
    assert (turn.markers_repaired, turn.removed) == (1, 0)
    assert ledger.active_entry("running").status == "RUNNING"


def test_an_unreadable_record_written_without_metadata_is_marked_for_reconcile_to_meet(
    ledger: LedgerStore, bucket: Any, clock: Clock, log: CapturedLog
) -> None:
    bucket.blob("requests/bad.json").upload_from_string(b"<html>edited by hand</html>")
    turn = sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, 2 * RETENTION))
    assert (turn.markers_repaired, turn.corrupt) == (1, 0)
    assert names(bucket, ACTIVE_PREFIX) == [f"{ACTIVE_PREFIX}bad"]


def test_a_corrupt_finished_record_is_skipped_logged_and_handed_on(
    ledger: LedgerStore, bucket: Any, clock: Clock, log: CapturedLog
) -> None:
    finished(ledger, clock, "bad", finished_at="yesterday")
    finished(ledger, clock, "good")
    handed: list[CorruptRecord] = []
    turn = sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, RETENTION), on_corrupt=handed.append)
    assert (turn.corrupt, turn.removed) == (1, 1)
    assert [error.request_id for error in handed] == ["bad"]
    assert log.events("ledger_corrupt") == []

    ledger.save_maintenance_state(SWEEP_STATE, {})
    sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, RETENTION))
    (line,) = log.events("ledger_corrupt")
    assert line["severity"] == "ERROR" and line["request_id"] == "bad"


def test_an_alert_of_a_corrupt_record_that_fails_is_logged_and_the_sweep_goes_on(
    ledger: LedgerStore, clock: Clock, log: CapturedLog
) -> None:
    finished(ledger, clock, "bad", finished_at="yesterday")
    finished(ledger, clock, "good")

    def unpublished(_error: CorruptRecord) -> None:
        raise OSError("pubsub unavailable")

    turn = sweep_step(ledger, log.logger, settings=SETTINGS, now=after(clock, RETENTION), on_corrupt=unpublished)
    assert (turn.corrupt, turn.removed, turn.finished_round) == (1, 1, True)
    (line,) = log.events("ledger_corrupt_unalerted")
    assert line["severity"] == "WARNING" and line["request_id"] == "bad"
    assert line["error"] == "OSError: pubsub unavailable"


def test_the_settings_default_to_the_deployments(
    ledger: LedgerStore, clock: Clock, log: CapturedLog, monkeypatch
) -> None:
    import shared.settings

    monkeypatch.setattr(
        shared.settings, "get_settings", lambda: make_settings("state", SPOTJOBS_LEDGER_RETENTION_SECONDS="0")
    )
    finished(ledger, clock, "done")
    assert sweep_step(ledger, log.logger, now=after(clock, 100 * RETENTION)).removed == 0
    assert sweep_orphans_step(ledger, log.logger, now=after(clock, 100 * RETENTION)) is None


# ---- building the index ------------------------------------------------------------------------------


def test_a_ledger_from_before_the_index_gets_a_marker_per_active_record_then_is_said_built(
    ledger: LedgerStore, bucket: Any, clock: Clock, log: CapturedLog
) -> None:
    for request_id in ("a", "b", "c"):
        ledger._write(RequestRecord(request_id, {}, "gs://b/x/", RequestStatus.RUNNING), 0)  # noqa: SLF001
    ledger._write(RequestRecord("d", {}, "gs://b/x/", RequestStatus.SUCCEEDED), 0)  # noqa: SLF001
    ledger.mark_active("b")  # written by a crashed earlier build
    assert backfill_index(ledger, log.logger, page_size=2) == 2
    assert names(bucket, ACTIVE_PREFIX) == [f"{ACTIVE_PREFIX}{r}" for r in ("a", "b", "c")]
    assert ledger.index_built()
    (line,) = log.events("active_index_built")
    assert line["markers_written"] == 2 and line["severity"] == "INFO"


# ---- the orphan sweep --------------------------------------------------------------------------------


def orphan(ledger: LedgerStore, bucket: Any, request_id: str, job: str) -> None:
    """A request's job index entry and manifest, its record gone (deleted by hand)."""
    ledger.index_job(JobIndexEntry(request_id, 1, "l", f"projects/p/locations/l/customJobs/{job}"))
    bucket.blob(manifest_path(request_id)).upload_from_string(b"{}")


def test_a_referrer_whose_record_is_gone_goes_at_the_retention_and_not_before(
    ledger: LedgerStore, bucket: Any, clock: Clock, log: CapturedLog
) -> None:
    orphan(ledger, bucket, "gone", "7")
    finished(ledger, clock, "kept", "8")
    bucket.blob(manifest_path("kept")).upload_from_string(b"{}")

    early = sweep_orphans_step(ledger, log.logger, settings=SETTINGS, now=after(clock, RETENTION - 0.001))
    assert (early.listed, early.removed, early.kept, early.finished_round) == (4, 0, 0, True)
    ledger.save_maintenance_state(ORPHAN_SWEEP_STATE, {})
    turn = sweep_orphans_step(ledger, log.logger, settings=SETTINGS, now=after(clock, RETENTION))
    assert (turn.listed, turn.removed, turn.kept) == (4, 2, 2)
    assert names(bucket, "jobs/") == ["jobs/8.json"] and names(bucket, "manifests/") == [manifest_path("kept")]
    (line, *_) = log.events("ledger_orphan_sweep")
    assert line["severity"] == "INFO"


def test_the_orphan_sweep_is_daily_and_off_when_every_record_is_kept(
    ledger: LedgerStore, clock: Clock, log: CapturedLog
) -> None:
    assert sweep_orphans_step(ledger, log.logger, settings=SETTINGS, now=clock.now).finished_round
    assert ledger.maintenance_state(ORPHAN_SWEEP_STATE) == {"position": "", "finished_at": clock.now.isoformat()}
    assert sweep_orphans_step(ledger, log.logger, settings=SETTINGS, now=after(clock, DAY - 0.001)) is None
    assert sweep_orphans_step(ledger, log.logger, settings=SETTINGS, now=after(clock, DAY)) is not None
    ledger.save_maintenance_state(ORPHAN_SWEEP_STATE, {})
    kept_forever = make_settings("state", SPOTJOBS_LEDGER_RETENTION_SECONDS="0")
    assert sweep_orphans_step(ledger, log.logger, settings=kept_forever, now=clock.now) is None


def test_an_orphan_turn_bounded_in_pages_resumes_in_the_prefix_it_stopped_in(
    ledger: LedgerStore, bucket: Any, clock: Clock, log: CapturedLog, monkeypatch
) -> None:
    monkeypatch.setattr(retention, "SWEEP_PAGE_SIZE", 2)
    for n in range(3):
        orphan(ledger, bucket, f"gone-{n}", str(n))
    now = after(clock, RETENTION)

    first = sweep_orphans_step(ledger, log.logger, settings=SETTINGS, now=now, pages=2)
    assert (first.listed, first.removed, first.finished_round) == (3, 3, False)
    assert ledger.maintenance_state(ORPHAN_SWEEP_STATE) == {"position": "jobs/2.json", "finished_at": None}
    second = sweep_orphans_step(ledger, log.logger, settings=SETTINGS, now=now, pages=2)
    assert (second.listed, second.removed, second.finished_round) == (2, 2, False)
    assert ledger.maintenance_state(ORPHAN_SWEEP_STATE)["position"] == manifest_path("gone-1")
    third = sweep_orphans_step(ledger, log.logger, settings=SETTINGS, now=now, pages=5)
    assert (third.listed, third.removed, third.finished_round) == (1, 1, True)
    assert names(bucket) == ["maintenance/ledger-orphan-sweep.json"]


def test_a_turn_that_ends_a_prefix_on_its_last_page_starts_the_next_prefix_from_its_first(
    ledger: LedgerStore, bucket: Any, clock: Clock, log: CapturedLog, monkeypatch
) -> None:
    monkeypatch.setattr(retention, "SWEEP_PAGE_SIZE", 5)
    for n in range(2):
        orphan(ledger, bucket, f"gone-{n}", str(n))
    ledger.save_maintenance_state(ORPHAN_SWEEP_STATE, {"position": "jobs/1.json", "finished_at": None})
    turn = sweep_orphans_step(ledger, log.logger, settings=SETTINGS, now=after(clock, RETENTION))
    assert (turn.listed, turn.removed, turn.finished_round) == (3, 3, True)
    assert names(bucket, "jobs/") == ["jobs/0.json"]  # before the position: this round walked it already


@pytest.mark.parametrize("position", [7, None])
def test_an_orphan_position_that_is_no_name_starts_from_the_first_referrer(
    ledger: LedgerStore, bucket: Any, clock: Clock, log: CapturedLog, position: Any
) -> None:
    orphan(ledger, bucket, "gone", "1")
    ledger.save_maintenance_state(ORPHAN_SWEEP_STATE, {"position": position, "finished_at": None})
    assert sweep_orphans_step(ledger, log.logger, settings=SETTINGS, now=after(clock, RETENTION)).removed == 2


def test_an_unreadable_job_index_entry_is_left_for_an_operator(
    ledger: LedgerStore, bucket: Any, clock: Clock, log: CapturedLog
) -> None:
    bucket.blob("jobs/9.json").upload_from_string(b"not json")
    turn = sweep_orphans_step(ledger, log.logger, settings=SETTINGS, now=after(clock, RETENTION))
    assert (turn.corrupt, turn.removed) == (1, 0)
    assert names(bucket, "jobs/") == ["jobs/9.json"]
    (line,) = log.events("ledger_orphan_unreadable")
    assert line["severity"] == "WARNING" and line["object"] == "jobs/9.json"


def test_a_referrer_removed_or_rewritten_since_listed_is_kept(
    ledger: LedgerStore, bucket: Any, clock: Clock, log: CapturedLog, monkeypatch
) -> None:
    orphan(ledger, bucket, "gone", "1")
    list_objects = ledger.list_objects

    def changed_after_listing(prefix: str, **kwargs: Any) -> Any:
        listed = list_objects(prefix, **kwargs)
        if prefix == "jobs/":
            bucket.delete_blob("jobs/1.json")
        else:
            bucket.blob(manifest_path("gone")).upload_from_string(b'{"again": true}')
        return listed

    monkeypatch.setattr(ledger, "list_objects", changed_after_listing)
    turn = sweep_orphans_step(ledger, log.logger, settings=SETTINGS, now=after(clock, RETENTION))
    assert (turn.kept, turn.removed) == (2, 0)
    assert names(bucket, "manifests/") == [manifest_path("gone")]
