"""Carrying out prune plans (shared/pruning/execute.py) over the in-memory store of
tests/support/prune_store.py: what each deleted checkpoint's report entry counts, which object
of a checkpoint goes first and why a checkpoint is left when that object moved, the instants
that decide whether a checkpoint is being rewritten, and the failures that must end neither a
request's other work nor the run."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from datetime import timedelta
from typing import Any

import pytest
from google.api_core.exceptions import Forbidden, ServiceUnavailable
from spotjobs_kit.layout import ListedObject

from shared.ledger.records import CorruptRecord, RequestRecord
from shared.pruning import execute
from shared.pruning.execute import UNREADABLE_RECORD, prune_requests, run_tasks
from tests.support.prune_store import (
    HOUR,
    LAYOUT,
    NOW,
    MemoryStore,
    folder,
    policy,
    prefix_checkpoint,
    run_prune,
    surviving,
    tf_checkpoint,
    tf_index,
)

GRACE = timedelta(seconds=policy().incomplete_grace_seconds)


def three_prefix_checkpoints(store: MemoryStore, request_id: str = "r1", *, shards: int = 3) -> None:
    for step in (100, 200, 300):
        prefix_checkpoint(store, request_id, f"step-{step:06d}/", shards=shards, at=NOW - 3 * HOUR)


def prune(store: MemoryStore, request_ids: list[str], **kwargs: Any):
    return prune_requests(
        store,
        request_ids,
        read_record=kwargs.pop("read_record", lambda _: None),
        layout=LAYOUT,
        policy=policy(),
        workers=kwargs.pop("workers", 2),
        now=NOW,
        **kwargs,
    )


# What the report counts.


def test_each_deleted_checkpoint_counts_its_own_objects_and_bytes() -> None:
    store = MemoryStore()
    three_prefix_checkpoints(store, shards=3)
    store.put(f"{folder('r1')}step-000100/big.bin", size=1000, at=NOW - 3 * HOUR)
    for step in (1, 2, 3):
        tf_checkpoint(store, "r2", f"ckpt-{step}", shards=2, at=NOW - 3 * HOUR)
    tf_index(store, "r2", ["ckpt-1", "ckpt-2", "ckpt-3"])
    result = run_prune(store)
    by_id = {r.request_id: r for r in result.reports}
    [entry] = by_id["r1"].deleted
    assert (entry["checkpoint"], entry["objects"], entry["bytes"]) == ("step-000100/", 5, 1040)
    [entry] = by_id["r2"].deleted
    assert (entry["checkpoint"], entry["objects"], entry["bytes"]) == ("ckpt-1", 3, 30)


def test_a_dry_run_measures_each_stem_by_its_own_files() -> None:
    """TensorFlow's `ckpt-1` is a prefix of `ckpt-10`'s names: only its own files are counted."""
    store = MemoryStore()
    for step in (1, 10, 11):
        tf_checkpoint(store, "r1", f"ckpt-{step}", shards=2, at=NOW - 3 * HOUR)
    tf_index(store, "r1", ["ckpt-1", "ckpt-10", "ckpt-11"])
    [report] = run_prune(store, dry_run=True).reports
    assert [(d["checkpoint"], d["objects"], d["bytes"]) for d in report.deleted] == [("ckpt-1", 3, 30)]


def test_the_run_reports_how_long_it_took() -> None:
    store = MemoryStore()
    three_prefix_checkpoints(store)
    started = time.monotonic()
    result = run_prune(store)
    elapsed = time.monotonic() - started
    assert 0 <= result.duration_seconds <= elapsed


def test_a_run_given_no_workers_still_runs_on_one() -> None:
    store = MemoryStore()
    three_prefix_checkpoints(store)
    result = prune(store, ["r1"], workers=0)
    assert surviving(store) == {"step-000200", "step-000300"}
    assert result.reports[0].objects_deleted == 4


# The object that makes a checkpoint complete goes first; if it moved, the checkpoint stays.


def test_a_tensorflow_checkpoint_loses_its_index_first() -> None:
    store = MemoryStore()
    for step in (1, 2, 3):
        tf_checkpoint(store, "r1", f"ckpt-{step}", shards=3, at=NOW - 3 * HOUR)
    tf_index(store, "r1", ["ckpt-1", "ckpt-2", "ckpt-3"])
    order: list[str] = []
    store.before_delete = lambda obj: order.append(obj.name[len(folder("r1")) :])
    prune(store, ["r1"], workers=1)
    assert order[0] == "ckpt-1.index" and sorted(order[1:]) == [f"ckpt-1.data-0000{i}-of-00003" for i in range(3)]


def test_a_checkpoint_whose_marker_was_rewritten_just_before_its_delete_is_left_whole() -> None:
    store = MemoryStore()
    three_prefix_checkpoints(store)
    marker = f"{folder('r1')}step-000100/COMMITTED"

    def recommit(obj: ListedObject) -> None:
        if obj.name == marker and store.objects[marker].generation == obj.generation:
            store.put(marker, at=NOW)

    store.before_delete = recommit
    [report] = run_prune(store).reports
    assert surviving(store) == {"step-000100", "step-000200", "step-000300"}
    assert report.skipped == [{"checkpoint": "step-000100/", "reason": "its COMMITTED was changed"}]
    assert report.deleted == [] and report.objects_skipped == 1 and not report.errors


def test_a_checkpoint_whose_marker_another_run_deleted_first_is_left_to_that_run() -> None:
    store = MemoryStore()
    three_prefix_checkpoints(store)
    marker = f"{folder('r1')}step-000100/COMMITTED"

    def delete_first(obj: ListedObject) -> None:
        if obj.name == marker:
            store.objects.pop(marker, None)

    store.before_delete = delete_first
    [report] = run_prune(store).reports
    assert report.skipped == [{"checkpoint": "step-000100/", "reason": "its COMMITTED was gone"}]
    assert len([n for n in store.names() if "step-000100/" in n]) == 3  # its shards: the other run's


# Whether a complete checkpoint is being rewritten: written after its marker, and lately.


def test_a_checkpoint_written_in_the_instant_of_its_marker_is_not_being_rewritten() -> None:
    """Within the grace period, but nothing in it is newer than its marker: it is deleted."""
    store = MemoryStore()
    for step in (100, 200, 300):
        base = f"{folder('r1')}step-{step:06d}/"
        written = NOW - timedelta(minutes=10)
        for i in range(3):
            store.put(f"{base}shard-{i}", at=written)
        store.put(f"{base}COMMITTED", at=written)
    [report] = run_prune(store).reports
    assert surviving(store) == {"step-000200", "step-000300"}
    assert report.skipped == []


def test_a_write_after_the_marker_at_the_end_of_the_grace_period_no_longer_holds_it() -> None:
    store = MemoryStore()
    three_prefix_checkpoints(store)
    store.put(f"{folder('r1')}step-000100/late.json", at=NOW - GRACE)
    [report] = run_prune(store).reports
    assert surviving(store) == {"step-000200", "step-000300"}
    assert report.skipped == []


# Failures: recorded in the request's report; the rest of the run goes on.


def test_a_delete_refused_for_a_checkpoints_first_object_is_an_error_of_that_checkpoint() -> None:
    store = MemoryStore()
    three_prefix_checkpoints(store, "r1")
    three_prefix_checkpoints(store, "r2")
    refused = f"{folder('r1')}step-000100/COMMITTED"

    def refuse(obj: ListedObject) -> None:
        if obj.name == refused:
            raise Forbidden("no storage.objects.delete")

    store.before_delete = refuse
    result = run_prune(store)
    by_id = {r.request_id: r for r in result.reports}
    assert by_id["r1"].errors == ["step-000100/: Forbidden: 403 no storage.objects.delete"]
    assert by_id["r1"].permanent_errors == 1 and by_id["r1"].deleted == []
    assert surviving(store, "r1") == {"step-000100", "step-000200", "step-000300"}
    assert surviving(store, "r2") == {"step-000200", "step-000300"}


def test_a_delete_that_fails_for_one_shard_leaves_the_others_deleted() -> None:
    store = MemoryStore()
    three_prefix_checkpoints(store)
    failing = f"{folder('r1')}step-000100/shard-1"

    def fail(obj: ListedObject) -> None:
        if obj.name == failing:
            raise ServiceUnavailable("try later")

    store.before_delete = fail
    [report] = run_prune(store).reports
    assert report.errors == [f"{failing}: ServiceUnavailable: 503 try later"] and report.retryable_errors == 1
    assert {n for n in store.names() if "step-000100/" in n} == {failing}
    assert report.objects_deleted == 3


def test_a_dry_run_that_cannot_measure_a_checkpoint_says_so_and_measures_the_others() -> None:
    store = MemoryStore()
    for step in (100, 200, 300, 400):
        prefix_checkpoint(store, "r1", f"step-{step:06d}/", at=NOW - 3 * HOUR)

    def fail(prefix: str) -> None:
        if prefix.endswith("step-000100/"):
            raise ServiceUnavailable("try later")

    store.before_list_all = fail
    [report] = run_prune(store, dry_run=True).reports
    assert report.errors == ["step-000100/: ServiceUnavailable: 503 try later"]
    assert [(d["checkpoint"], d["objects"]) for d in report.deleted] == [("step-000100/", 0), ("step-000200/", 4)]


def test_an_unreadable_ledger_record_keeps_everything_even_when_its_alert_fails() -> None:
    store = MemoryStore()
    three_prefix_checkpoints(store, "r1")
    three_prefix_checkpoints(store, "r2")

    def read_record(request_id: str) -> RequestRecord | None:
        if request_id == "r1":
            raise CorruptRecord("r1", "not JSON")
        return None

    def alert_fails(_error: CorruptRecord) -> None:
        raise ServiceUnavailable("publish failed")

    result = prune(store, ["r1", "r2"], read_record=read_record, on_corrupt=alert_fails)
    by_id = {r.request_id: r for r in result.reports}
    assert by_id["r1"].skipped == [{"checkpoint": "(every checkpoint)", "reason": UNREADABLE_RECORD}]
    assert by_id["r1"].errors == ["alerting its unreadable ledger record: ServiceUnavailable: 503 publish failed"]
    assert result.retryable_errors == 1  # the redelivery alerts it again
    assert surviving(store, "r1") == {"step-000100", "step-000200", "step-000300"}
    assert surviving(store, "r2") == {"step-000200", "step-000300"}


def test_only_requests_something_is_deleted_from_are_recorded_before_deleting() -> None:
    store = MemoryStore()
    three_prefix_checkpoints(store, "r1")
    prefix_checkpoint(store, "quiet", "step-000100/", at=NOW - 3 * HOUR)
    recorded: list[tuple[str, list[str]]] = []
    prune(
        store,
        ["r1", "quiet"],
        before_deleting=lambda rid, entries: recorded.append((rid, [e["checkpoint"] for e in entries])),
    )
    assert recorded == [("r1", ["step-000100/"])]


def test_the_marker_one_request_had_is_checked_first_for_the_next() -> None:
    """Requests are usually written by one framework: once a request's checkpoints matched a
    marker, another request's cost one check each (layout.discover's `try_first`)."""
    store = MemoryStore()
    for rid in ("r1", "r2"):
        three_prefix_checkpoints(store, rid)  # committed with the last marker the policy names
    assert policy().commit_markers[-1] == "COMMITTED"
    checked: list[str] = []
    store.stat = lambda name, stat=store.stat: (checked.append(name), stat(name))[1]  # type: ignore[method-assign]
    prune(store, ["r1", "r2"], workers=1, dry_run=True)
    assert len([name for name in checked if name.startswith(folder("r2"))]) == 3


def test_a_checkpoint_of_several_files_is_deleted_once_its_first_is_and_a_file_rewritten_meanwhile_stays() -> None:
    """A plain file is its own gate: once one file of a stem is gone, what is left of it is an
    incomplete checkpoint. A file saved again after the plan is not deleted."""
    store = MemoryStore()
    for step in (100, 200, 300, 400):
        for suffix in (".pt", ".optim.pt"):
            store.put(f"{folder('r1')}ckpt-{step:06d}{suffix}", at=NOW - 3 * HOUR)
    first, second = (f"{folder('r1')}ckpt-000100{suffix}" for suffix in (".optim.pt", ".pt"))  # listing order

    def save_again(obj: ListedObject) -> None:
        if obj.name == second and store.objects[second].generation == obj.generation:
            store.put(second, size=99)

    store.before_delete = save_again
    [report] = run_prune(store).reports
    assert [d["checkpoint"] for d in report.deleted] == ["ckpt-000100"] and report.skipped == []
    assert first not in store.names() and store.objects[second].size == 99
    assert (report.objects_deleted, report.objects_skipped) == (1, 1)


def test_a_run_given_one_worker_carries_out_one_task_at_a_time() -> None:
    store = MemoryStore()
    for rid in ("r1", "r2"):
        three_prefix_checkpoints(store, rid)
    lock = threading.Lock()
    running, most = [0], [0]

    def one_at_a_time(_obj: ListedObject) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.005)
        with lock:
            running[0] -= 1

    store.before_delete = one_at_a_time
    prune(store, ["r1", "r2"], workers=1)
    assert surviving(store, "r1") == surviving(store, "r2") == {"step-000200", "step-000300"}
    assert most[0] == 1


class _FutureHashedBy(Future[Any]):
    """A future whose hash is given: a set orders futures by hash, that is by memory address for
    real ones, which differs from process to process and run to run."""

    def __init__(self, hash_value: int) -> None:
        super().__init__()
        self._hash_value = hash_value

    def __hash__(self) -> int:
        return self._hash_value


class _InlinePoolOfFallingAddresses:
    """ThreadPoolExecutor's interface, running each task as it is submitted (as the simulator's
    pool does); each future hashes lower than the one before, as a later address may."""

    def __init__(self, *_: Any, **__: Any) -> None:
        self._submitted = 0

    def __enter__(self) -> _InlinePoolOfFallingAddresses:
        return self

    def __exit__(self, *_: Any) -> None:
        return None

    def submit(self, task: Callable[[], Iterable[Any]]) -> Future[Any]:
        self._submitted += 1
        future = _FutureHashedBy(1_000 - self._submitted)
        future.set_result(task())
        return future


def test_follow_ups_of_tasks_done_together_run_in_the_order_their_tasks_were_submitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # They ran in the order of a set of futures, by address: a simulated seed's prune run deleted
    # in another order on its replay in one process (seed 36, seed 24: issue 43).
    monkeypatch.setattr(execute, "ThreadPoolExecutor", _InlinePoolOfFallingAddresses)
    ran: list[str] = []

    def planned(request_id: str) -> Callable[[], Iterable[Any]]:
        def plan() -> Iterable[Any]:
            ran.append(request_id)
            return [lambda: ran.append(f"delete in {request_id}") or ()]

        return plan

    run_tasks([planned("r1"), planned("r2"), planned("r3")], workers=2)

    assert ran == ["r1", "r2", "r3", "delete in r1", "delete in r2", "delete in r3"]
