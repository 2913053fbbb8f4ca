"""`spotjobs status` finding requests (`--status`, `--label`, `--since`, the counts on top): what
matches, and what it costs: an active query reads only the records the active index names, any
other query reads only what it shows (the ledger in memory, counting calls: bench/memory_bucket.py)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta

import pytest

from bench.memory_bucket import MemoryBucket
from shared.ledger.records import RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from spotjobs.cli.find import Query, find_records, format_counts, label_filter, since_filter, status_filter

NOW = datetime.now(UTC)


def _record(request_id: str, status: str, labels: dict[str, str], created: datetime) -> RequestRecord:
    stamp = created.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return RequestRecord(
        request_id,
        {"request_id": request_id, "max_attempts": 3, "custom_job": {"labels": labels}},
        f"gs://ckpt/requests/{request_id}/",
        status=status,
        created_at=stamp,
        updated_at=stamp,
    )


def _ledger(finished: int, active: int) -> tuple[LedgerStore, MemoryBucket]:
    """`finished` SUCCEEDED/FAILED requests (every third FAILED, half team=vision) changed days
    ago, and `active` RUNNING ones (half team=vision) changed now; the index built."""
    bucket = MemoryBucket()
    ledger = LedgerStore(bucket)
    for i in range(finished):
        created = NOW - timedelta(days=10, minutes=i)
        status = RequestStatus.FAILED if i % 3 == 0 else RequestStatus.SUCCEEDED
        ledger.restore(_record(f"done-{i:05d}", status, {"team": "vision" if i % 2 else "nlp"}, created))
        bucket.set_updated(f"requests/done-{i:05d}.json", created)
    for i in range(active):
        team = "vision" if i % 2 else "nlp"
        ledger.restore(_record(f"live-{i:05d}", RequestStatus.RUNNING, {"team": team}, NOW - timedelta(minutes=i)))
    ledger.mark_index_built()
    bucket.reset_counts()
    return ledger, bucket


@pytest.mark.parametrize("finished", [30, 600])
def test_an_active_query_reads_the_active_records_only_whatever_the_history(finished: int) -> None:
    ledger, bucket = _ledger(finished, active=7)

    found = find_records(ledger, Query(frozenset({"ACTIVE"}), {"team": "vision"}), limit=100)

    assert [r.request_id for r in found.records] == ["live-00001", "live-00003", "live-00005"]
    assert found.counts == {"RUNNING": 3}
    # One list page of `active/` and one download per active record: nothing of `requests/`.
    assert bucket.calls["list"] == 1 and bucket.calls["download"] == 7 and found.reads == 7


def test_a_stale_marker_is_read_and_left_out() -> None:
    ledger, bucket = _ledger(5, active=2)
    ledger.mark_active("done-00001")  # finished, marker not yet removed by reconcile

    found = find_records(ledger, Query(frozenset({"ACTIVE"})), limit=100)

    assert sorted(r.request_id for r in found.records) == ["live-00000", "live-00001"]
    assert bucket.calls["download"] == 3


def test_markers_that_carry_status_and_creation_spare_reading_all_but_the_newest_shown() -> None:
    ledger, bucket = _ledger(30, active=7)

    found = find_records(ledger, Query(frozenset({"ACTIVE"})), limit=3)

    assert [r.request_id for r in found.records] == ["live-00000", "live-00001", "live-00002"]
    assert found.counts == {"RUNNING": 7}
    # One list page of `active/` (with each marker's status and creation) and the 3 shown: 1,000
    # active requests on the dashboard's page cost 100 reads, not 1,000.
    assert bucket.calls["list"] == 1 and bucket.calls["download"] == 3 and found.reads == 3


def test_a_status_change_reaches_the_marker_so_a_finished_request_is_counted_out_unread() -> None:
    ledger, bucket = _ledger(5, active=4)

    def succeed(current: RequestRecord | None) -> RequestRecord:
        current.status = RequestStatus.SUCCEEDED
        return current

    def requeue(current: RequestRecord | None) -> RequestRecord:
        current.status = RequestStatus.REQUEUED
        return current

    ledger.update("live-00000", succeed)
    ledger.update("live-00003", requeue)
    bucket.reset_counts()

    found = find_records(ledger, Query(frozenset({"ACTIVE"})), limit=2)

    assert [r.request_id for r in found.records] == ["live-00001", "live-00002"]
    assert found.counts == {"RUNNING": 2, "REQUEUED": 1}
    assert bucket.calls["download"] == 2


def test_a_marker_written_before_it_held_the_status_is_read_to_judge_it() -> None:
    ledger, bucket = _ledger(5, active=3)
    bucket.blob("active/live-00002").upload_from_string(b"")  # an old marker: no metadata
    bucket.reset_counts()

    found = find_records(ledger, Query(frozenset({"ACTIVE"})), limit=1)

    assert [r.request_id for r in found.records] == ["live-00000"]
    assert found.counts == {"RUNNING": 3}
    assert bucket.calls["download"] == 2  # the old marker's record, then the newest one


def test_a_query_for_one_active_status_reads_every_marked_record_a_stale_hint_cannot_hide_one() -> None:
    ledger, bucket = _ledger(5, active=3)
    stale = bucket.blob("active/live-00001")
    stale.metadata = {"status": "SUBMITTED"}  # a status note a fault left one change behind
    stale.patch()
    bucket.reset_counts()

    found = find_records(ledger, Query(frozenset({"RUNNING"})), limit=100)

    assert len(found.records) == 3 and found.counts == {"RUNNING": 3}
    assert bucket.calls["download"] == 3


def test_without_the_index_built_an_active_query_lists_every_request() -> None:
    ledger, bucket = _ledger(20, active=3)
    bucket.delete_blob("maintenance/active-index.json")
    bucket.reset_counts()

    found = find_records(ledger, Query(frozenset({"RUNNING"})), limit=100)

    assert len(found.records) == 3 and found.counts == {"RUNNING": 3}
    assert bucket.calls["download"] == 3  # only the matches, chosen from the listing's metadata


def test_a_finished_query_is_answered_by_the_listing_and_reads_what_it_shows() -> None:
    ledger, bucket = _ledger(60, active=4)

    found = find_records(ledger, Query(frozenset({"FAILED"}), {"team": "vision"}), limit=5)

    # FAILED: i % 3 == 0; vision: odd i. So i = 3, 9, 15, ..., 57: 10 of them, the newest (smallest i) first.
    assert [r.request_id for r in found.records] == [f"done-{i:05d}" for i in (3, 9, 15, 21, 27)]
    assert found.counts == {"FAILED": 10}
    assert bucket.calls["download"] == 5 and found.reads == 5


def test_since_uses_the_listing_time_of_the_last_write() -> None:
    ledger, bucket = _ledger(40, active=3)

    found = find_records(ledger, Query(since=NOW - timedelta(days=1)), limit=100)

    assert sorted(r.request_id for r in found.records) == ["live-00000", "live-00001", "live-00002"]
    assert bucket.calls["download"] == 3
    older = find_records(ledger, Query(frozenset({"SUCCEEDED"}), since=NOW - timedelta(days=11)), limit=1000)
    assert older.counts == {"SUCCEEDED": 26}


def test_a_document_written_before_labels_were_kept_is_read_once_and_judged_by_its_record() -> None:
    ledger, bucket = _ledger(10, active=0)
    for request_id, team in (("old-vision", "vision"), ("old-nlp", "nlp")):
        record = _record(request_id, RequestStatus.SUCCEEDED, {"team": team}, NOW - timedelta(days=30))
        blob = bucket.blob(f"requests/{request_id}.json")
        blob.metadata = {"status": record.status, "created_at": record.created_at}  # before `labels`
        blob.upload_from_string(json.dumps(record.to_json()))
    bucket.reset_counts()

    found = find_records(ledger, Query(labels={"team": "vision"}), limit=100)

    ids = [r.request_id for r in found.records]
    assert "old-vision" in ids and "old-nlp" not in ids and len(ids) == 6
    # The two old documents once (to judge them), then the five listed matches it shows.
    assert bucket.calls["download"] == 7


def test_labels_too_large_for_metadata_are_left_to_a_read() -> None:
    bucket = MemoryBucket()
    ledger = LedgerStore(bucket)
    many = {f"key-{i:02d}-{'k' * 50}": "v" * 63 for i in range(40)}  # ~5 KiB as JSON
    ledger.restore(_record("big", RequestStatus.SUCCEEDED, {**many, "team": "vision"}, NOW))
    ledger.restore(_record("small", RequestStatus.SUCCEEDED, {"team": "vision"}, NOW))

    listed = {row.request_id: row for row in ledger.list_requests()[0]}
    assert listed["big"].labels is None and listed["small"].labels == {"team": "vision"}
    found = find_records(ledger, Query(labels={"team": "vision"}), limit=10)
    assert sorted(r.request_id for r in found.records) == ["big", "small"]


def test_counts_on_top_say_how_many_match_and_how_many_are_shown() -> None:
    ledger, _ = _ledger(9, active=4)

    found = find_records(ledger, Query(), limit=5)

    assert format_counts(found) == "13 requests: RUNNING 4, SUCCEEDED 6, FAILED 3; the newest 5 below\n"
    assert format_counts(find_records(ledger, Query(frozenset({"CANCELLED"})), limit=5)) == ""


def test_filters_parse_and_refuse_what_they_cannot_read() -> None:
    assert status_filter("Active") == "ACTIVE" and status_filter("gave_up") == "GAVE_UP"
    assert label_filter("team=vision") == ("team", "vision") and label_filter("empty=") == ("empty", "")
    assert abs((since_filter("24h") - (datetime.now(UTC) - timedelta(hours=24))).total_seconds()) < 60
    assert since_filter("2026-11-30") == datetime(2026, 11, 30, tzinfo=UTC)
    assert since_filter("2026-11-30T08:00:00+01:00") == datetime(2026, 11, 30, 7, tzinfo=UTC)
    for parse, text in (
        (status_filter, "done"),
        (label_filter, "team"),
        (label_filter, "=x"),
        (since_filter, "2d ago"),
    ):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["status", "--status", "finished"], "unknown status 'finished'"),
        (["status", "--label", "team"], "'team' is not KEY=VALUE"),
        (["status", "--since", "yesterday"], "'yesterday' is neither a duration"),
    ],
)
def test_bad_filters_exit_2_with_what_is_wrong(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from spotjobs.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_filters_with_one_request_id_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from spotjobs.cli import main

    assert main(["status", "some-request", "--status", "active"]) == 2
    assert "without a REQUEST_ID" in capsys.readouterr().err
