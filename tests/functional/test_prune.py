"""Pruning against a real fake-gcs-server: every checkpoint format, races with rewrites, with a
second prune run and with a trainer that keeps writing."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spotjobs_kit.layout import ListedObject

from shared.ledger.records import RequestRecord
from shared.ledger.states import RequestStatus
from shared.pruning.store import DeleteOutcome, GcsPruneStore
from tests.support.prune_gcs import (
    all_names,
    folder,
    format_layout,
    run_prune,
    surviving,
    upload,
)

FORMATS = ("demo", "orbax", "orbax_legacy", "torch_dcp", "hf", "tensorflow", "file", "lightning")


@pytest.mark.parametrize("count", [1, 2, 20])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("with_incomplete", [False, True], ids=["complete", "with-incomplete"])
def test_exactly_the_expected_checkpoints_survive(gcs_bucket, fmt: str, count: int, with_incomplete: bool) -> None:
    layout = format_layout("req-1", fmt, count, with_incomplete=with_incomplete, with_metrics=True)
    layout.write(gcs_bucket)
    outside = [
        f"requests/req-1/model/{fmt}.bin",
        "requests/req-1/logs/events.1",
        "requests/req-2/checkpoints/step-000001/shard",
    ]
    upload(gcs_bucket, outside)

    result = run_prune(gcs_bucket)

    assert surviving(gcs_bucket, "req-1") == layout.expected
    assert set(outside) <= all_names(gcs_bucket)
    assert result.summary["errors"] == 0


def test_a_checkpoint_rewritten_after_listing_is_not_deleted(gcs_bucket) -> None:
    names = [folder("req-1") + f"ckpt-{step:06d}.pt" for step in (100, 200, 300)]
    upload(gcs_bucket, names)
    target = names[0]

    class RewriteFirst(GcsPruneStore):
        """The trainer saves ckpt-000100.pt again after prune listed it, before the delete."""

        def delete(self, obj: ListedObject) -> DeleteOutcome:
            if obj.name == target:
                gcs_bucket.blob(target).upload_from_string(b"rewritten")
            return super().delete(obj)

    result = run_prune(gcs_bucket, store=RewriteFirst(gcs_bucket, verify_generation=True))

    assert gcs_bucket.blob(target).download_as_bytes() == b"rewritten"
    [report] = result.reports
    assert report.skipped and report.skipped[0]["checkpoint"] == "ckpt-000100"
    assert report.errors == []


def test_a_prefix_checkpoint_recommitted_after_planning_is_not_deleted(gcs_bucket) -> None:
    layout = format_layout("req-1", "demo", 3, with_incomplete=False)
    layout.write(gcs_bucket)
    marker = folder("req-1") + "step-000100/COMMITTED"

    class RecommitFirst(GcsPruneStore):
        def list_all(self, prefix: str) -> list[ListedObject]:
            if prefix.endswith("step-000100/"):
                gcs_bucket.blob(marker).upload_from_string(b"again")
            return super().list_all(prefix)

    run_prune(gcs_bucket, store=RecommitFirst(gcs_bucket, verify_generation=True))

    assert {"step-000100/COMMITTED", "step-000100/shard-0.json"} <= surviving(gcs_bucket, "req-1")


def test_two_runs_at_the_same_time_end_as_one(gcs_bucket, fake_gcs) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project="spotjobs-test", credentials=AnonymousCredentials(), client_options={"api_endpoint": fake_gcs}
    )
    reference = client.create_bucket(gcs_bucket.name + "-ref")
    for bucket in (gcs_bucket, reference):
        for i, fmt in enumerate(FORMATS):
            format_layout(f"req-{i}", fmt, 8, with_incomplete=True).write(bucket)

    run_prune(reference)
    results = []
    threads = [threading.Thread(target=lambda: results.append(run_prune(gcs_bucket))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert all_names(gcs_bucket) == all_names(reference)
    assert [r.summary["errors"] for r in results] == [0, 0]
    deleted = sum(r.summary["objects_deleted"] for r in results)
    assert deleted + sum(r.summary["skipped"] for r in results) >= deleted > 0


def test_a_trainer_writing_while_prune_runs_keeps_its_newest_complete_checkpoint(gcs_bucket) -> None:
    """The trainer writes shards, then COMMITTED, step after step; prune runs over and over with
    the most aggressive policy. After every run the newest checkpoint committed before it started
    (or a newer one) is still whole."""
    base = folder("req-1")
    committed: list[int] = []
    stop = threading.Event()

    def trainer() -> None:
        step = 0
        while not stop.is_set():
            step += 10
            name = f"{base}step-{step:06d}/"
            for i in range(4):  # a checkpoint takes a while: prune runs see it half written
                gcs_bucket.blob(f"{name}shard-{i}").upload_from_string(b"w" * 64)
                stop.wait(0.02)
            gcs_bucket.blob(f"{name}COMMITTED").upload_from_string(b"")
            committed.append(step)

    writer = threading.Thread(target=trainer)
    writer.start()
    try:
        deadline = time.monotonic() + 30
        while not committed and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(15):
            newest_before = committed[-1]
            run_prune(gcs_bucket, keep_last=1, incomplete_grace_seconds=0.0, now=datetime.now(UTC))
            whole = _whole_checkpoints(gcs_bucket, base)
            assert whole and max(whole) >= newest_before, (whole, newest_before)
    finally:
        stop.set()
        writer.join()


def _whole_checkpoints(bucket, base: str) -> list[int]:
    """Steps whose four shards and marker are all present."""
    by_step: dict[int, set[str]] = {}
    for blob in bucket.client.list_blobs(bucket, prefix=base):
        step_name, _, leaf = blob.name[len(base) :].partition("/")
        by_step.setdefault(int(step_name.split("-")[1]), set()).add(leaf)
    want = {"COMMITTED", *(f"shard-{i}" for i in range(4))}
    return sorted(step for step, leaves in by_step.items() if leaves >= want)


def test_finished_requests_keep_their_final_checkpoint_after_retention(gcs_bucket) -> None:
    for rid in ("done", "recent", "running"):
        format_layout(rid, "demo", 4, with_incomplete=False, with_metrics=True).write(gcs_bucket)
    later = datetime.now(UTC) + timedelta(days=10)

    def finished(rid: str, days_ago: float) -> RequestRecord:
        record = RequestRecord(rid, {}, "", status=RequestStatus.SUCCEEDED)
        record.finished_at = (later - timedelta(days=days_ago)).isoformat()
        return record

    records = {
        "done": finished("done", 8),
        "recent": finished("recent", 1),
        "running": RequestRecord("running", {"checkpoints": {"keep_last": 3}}, "", status=RequestStatus.RUNNING),
    }
    run_prune(gcs_bucket, records=records, now=later)

    metrics = {f"eval_step_{step}.json" for step in (100, 200, 300, 400)}  # never checkpoints
    assert all(metrics <= surviving(gcs_bucket, rid) for rid in records)
    steps = {rid: {n.split("/")[0] for n in surviving(gcs_bucket, rid) - metrics} for rid in records}
    assert steps == {
        "done": {"step-000400"},
        "recent": {"step-000300", "step-000400"},
        "running": {"step-000200", "step-000300", "step-000400"},
    }


def test_request_folders_are_listed_in_pages_and_resumed_after_a_cursor(gcs_bucket) -> None:
    upload(gcs_bucket, [f"{folder(f'r{i:02d}')}ckpt-1.pt" for i in range(25)] + ["requests/loose-file"])
    store = GcsPruneStore(gcs_bucket, verify_generation=True, page_size=7)
    assert list(store.list_request_ids("requests/")) == [f"r{i:02d}" for i in range(25)]
    assert list(store.list_request_ids("requests/", after="r19")) == [f"r{i:02d}" for i in range(20, 25)]


small_layouts = st.lists(st.tuples(st.sampled_from(FORMATS), st.integers(1, 5), st.booleans()), min_size=1, max_size=3)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(layouts=small_layouts, keep_last=st.integers(1, 3))
def test_property_on_fake_gcs(gcs_bucket, layouts, keep_last: int) -> None:
    """A smaller run of the planner property, end to end: each request's expected set survives
    (its newest complete checkpoint among them), and nothing outside checkpoints/ is touched."""
    run_id = f"{time.monotonic_ns()}"
    expected: dict[str, set[str]] = {}
    outside = []
    for i, (fmt, count, with_incomplete) in enumerate(layouts):
        rid = f"p{run_id}-{i}"
        layout = format_layout(rid, fmt, count, with_incomplete=with_incomplete, keep_last=keep_last, with_metrics=True)
        layout.write(gcs_bucket)
        expected[rid] = layout.expected
        outside.append(f"requests/{rid}/model/m.bin")
    upload(gcs_bucket, outside)

    run_prune(gcs_bucket, list(expected), keep_last=keep_last)

    for rid, names in expected.items():
        assert surviving(gcs_bucket, rid) == names
    assert set(outside) <= all_names(gcs_bucket)


def test_the_cursor_follows_the_listing_order_of_folder_names(gcs_bucket) -> None:
    """GCS orders `a-1/` before `a/` ('-' sorts before '/'): resuming after a-1 must not skip a."""
    upload(gcs_bucket, [f"{folder(rid)}ckpt-1.pt" for rid in ("a", "a-1", "a.b", "b")])
    store = GcsPruneStore(gcs_bucket, verify_generation=True)
    listed = list(store.list_request_ids("requests/"))
    assert listed == ["a-1", "a.b", "a", "b"]  # any folder name, not only a request id's form
    for i, after in enumerate(listed):
        assert list(store.list_request_ids("requests/", after=after)) == listed[i + 1 :]
