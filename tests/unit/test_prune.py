"""Prune policy, plan and guarded deletion over an in-memory store (shared.pruning)."""

from __future__ import annotations

import io
import json
import threading
from datetime import timedelta

import pytest
from google.api_core.exceptions import Forbidden, ServiceUnavailable
from spotjobs_kit.layout import Checkpoint, Evidence, Kind, ListedObject

from shared.ledger.records import RequestRecord
from shared.ledger.states import RequestStatus
from shared.log import Logger
from shared.pruning.execute import prune_requests, run_tasks
from shared.pruning.folders import OutOfScope
from shared.pruning.report import PruneResult, RequestReport, log_report, report_alert
from shared.pruning.retention import NEWEST_KEPT_WITHOUT_COMPLETE, Lifecycle, contents_needed, judge_checkpoints
from shared.pruning.runner import parse_maintenance_task
from spotjobs.cli.prune import print_prune_result
from tests.support.framework_layouts import hf_trainer, write_save
from tests.support.prune_store import (
    HOUR,
    LAYOUT,
    NOW,
    MemoryStore,
    file_checkpoint,
    folder,
    policy,
    prefix_checkpoint,
    record,
    run_prune,
    surviving,
    tf_checkpoint,
    tf_index,
)


def ckpt(step: int, complete: bool = True, *, age: timedelta = 2 * HOUR, kind: str = Kind.PREFIX) -> Checkpoint:
    obj = ListedObject(f"x/{step}", 1, 1, NOW - age)
    return Checkpoint(f"step-{step:06d}/", kind, step, complete, (obj,), contents=None if complete else (obj,))


# The policy, pure.


def test_keeps_the_newest_keep_last_complete() -> None:
    verdicts = judge_checkpoints(
        [ckpt(s) for s in (100, 200, 300, 400)], lifecycle=Lifecycle.ACTIVE, keep_last=2, policy=policy(), now=NOW
    )
    assert [(d.checkpoint.step, d.delete) for d in verdicts] == [(100, True), (200, True), (300, False), (400, False)]


def test_incomplete_checkpoints_need_grace_and_a_newer_complete_one() -> None:
    checkpoints = [
        ckpt(100, complete=False, age=2 * HOUR),  # abandoned, older than the newest complete: goes
        ckpt(150, complete=False, age=HOUR / 4),  # within the grace period: stays
        ckpt(200),
        ckpt(300, complete=False, age=5 * HOUR),  # newer than the newest complete: may be in progress
    ]
    verdicts = judge_checkpoints(checkpoints, lifecycle=Lifecycle.ACTIVE, keep_last=2, policy=policy(), now=NOW)
    assert {d.checkpoint.step: d.delete for d in verdicts} == {100: True, 150: False, 200: False, 300: False}


def test_without_any_complete_checkpoint_nothing_is_deleted() -> None:
    checkpoints = [ckpt(s, complete=False, age=100 * HOUR) for s in (100, 200)]
    verdicts = judge_checkpoints(checkpoints, lifecycle=Lifecycle.ACTIVE, keep_last=1, policy=policy(), now=NOW)
    assert not any(d.delete for d in verdicts)


@pytest.mark.parametrize("keep_final", [True, False])
def test_retention_expired_keeps_only_the_final_checkpoint(keep_final: bool) -> None:
    checkpoints = [ckpt(100), ckpt(200), ckpt(300), ckpt(400, complete=False)]
    verdicts = judge_checkpoints(
        checkpoints,
        lifecycle=Lifecycle.RETENTION_EXPIRED,
        keep_last=5,
        policy=policy(keep_final_checkpoint=keep_final),
        now=NOW,
    )
    kept = [d.checkpoint.step for d in verdicts if not d.delete]
    assert kept == ([300] if keep_final else [])


@pytest.mark.parametrize(
    ("override", "expected"),
    [(None, 2), (5, 5), (0, 1), (-3, 1), (99, 20), ("7", 2), (True, 2)],
)
def test_keep_last_override_is_bounded(override: object, expected: int) -> None:
    assert policy().keep_last_for(record(keep_last=override)) == expected


@pytest.mark.parametrize(
    ("rec", "lifecycle"),
    [
        (None, Lifecycle.UNTRACKED),
        (record(RequestStatus.RUNNING), Lifecycle.ACTIVE),
        (record(RequestStatus.REQUEUED), Lifecycle.ACTIVE),
        (record(RequestStatus.SUCCEEDED, finished_ago=HOUR), Lifecycle.FINISHED),
        (record(RequestStatus.GAVE_UP, finished_ago=8 * 24 * HOUR), Lifecycle.RETENTION_EXPIRED),
        (record(RequestStatus.CANCELLED), Lifecycle.FINISHED),  # no finished_at: retention unknown
    ],
)
def test_lifecycle(rec: RequestRecord | None, lifecycle: str) -> None:
    assert policy().lifecycle_of(rec, NOW) == lifecycle


def test_contents_are_listed_only_for_incomplete_candidates() -> None:
    in_progress = Checkpoint("step-000300/", Kind.PREFIX, 300, False)
    abandoned = Checkpoint("step-000100/", Kind.PREFIX, 100, False)
    checkpoints = [abandoned, ckpt(200), in_progress]
    assert contents_needed(checkpoints, Lifecycle.ACTIVE) == [abandoned]
    assert contents_needed(checkpoints, Lifecycle.RETENTION_EXPIRED) == [abandoned, in_progress]


# Plan and deletion against the in-memory store.


def test_prune_deletes_exactly_the_planned_objects() -> None:
    store = MemoryStore()
    for step in (100, 200, 300):
        prefix_checkpoint(store, "r1", f"step-{step:06d}/", at=NOW - 3 * HOUR)
    prefix_checkpoint(store, "r1", "step-000050/", marker=None, at=NOW - 3 * HOUR)  # abandoned
    prefix_checkpoint(store, "r1", "step-000400/", marker=None, at=NOW)  # in progress
    store.put("requests/r1/model/saved_model.pb")
    store.put("requests/r1/logs/events.out")
    result = run_prune(store)
    assert surviving(store) == {"step-000200", "step-000300", "step-000400"}
    assert "requests/r1/model/saved_model.pb" in store.names()
    assert "requests/r1/logs/events.out" in store.names()
    [report] = result.reports
    assert sorted(d["checkpoint"] for d in report.deleted) == ["step-000050/", "step-000100/"]
    assert report.objects_deleted == 3 + 4 and report.bytes_freed == 70
    assert result.summary["errors"] == 0


def test_dry_run_deletes_nothing_and_reports_the_plan() -> None:
    store = MemoryStore()
    for step in (100, 200, 300):
        file_checkpoint(store, "r1", f"ckpt-{step:06d}.pt")
    before = store.names()
    [report] = run_prune(store, dry_run=True).reports
    assert store.names() == before
    assert [(d["checkpoint"], d["objects"]) for d in report.deleted] == [("ckpt-000100", 1)]
    assert {k["checkpoint"] for k in report.kept} == {"ckpt-000200", "ckpt-000300"}


@pytest.mark.parametrize("keep_last", [1, 2])
def test_user_files_with_numbers_neither_count_as_checkpoints_nor_get_deleted(keep_last: int) -> None:
    store = MemoryStore()
    for name in ("ckpt-000400.pt", "ckpt-000500.pt", "run-20240105-1200.log", "vocab_32000.txt"):
        file_checkpoint(store, "r1", name)
    [report] = run_prune(store, {"r1": record(keep_last=keep_last)}).reports
    kept_checkpoints = {"ckpt-000400.pt", "ckpt-000500.pt"} if keep_last == 2 else {"ckpt-000500.pt"}
    assert surviving(store) == kept_checkpoints | {"run-20240105-1200.log", "vocab_32000.txt"}
    assert [d["checkpoint"] for d in report.deleted] == ([] if keep_last == 2 else ["ckpt-000400"])


def test_dry_run_measures_the_prefix_checkpoints_it_would_delete() -> None:
    store = MemoryStore()
    for step in (100, 200, 300):
        prefix_checkpoint(store, "r1", f"step-{step:06d}/", shards=3)
    [report] = run_prune(store, dry_run=True).reports
    assert [(d["checkpoint"], d["objects"], d["bytes"]) for d in report.deleted] == [("step-000100/", 4, 40)]


def test_tensorflow_index_file_survives_and_incomplete_stems_wait_for_grace() -> None:
    store = MemoryStore()
    for step in (1, 2, 3):
        tf_checkpoint(store, "r1", f"ckpt-{step}", at=NOW - 3 * HOUR)
    tf_checkpoint(store, "r1", "ckpt-4", index=False, at=NOW)  # being written
    tf_index(store, "r1", ["ckpt-1", "ckpt-2", "ckpt-3"])
    run_prune(store)
    assert surviving(store) == {
        "checkpoint",
        "ckpt-2.index",
        "ckpt-2.data-00000-of-00002",
        "ckpt-2.data-00001-of-00002",
        "ckpt-3.index",
        "ckpt-3.data-00000-of-00002",
        "ckpt-3.data-00001-of-00002",
        "ckpt-4.data-00000-of-00002",
        "ckpt-4.data-00001-of-00002",
    }


def test_finished_request_past_retention_keeps_its_final_checkpoint() -> None:
    store = MemoryStore()
    for step in (100, 200, 300):
        prefix_checkpoint(store, "r1", f"step-{step:06d}/", at=NOW - 9 * 24 * HOUR)
    run_prune(store, {"r1": record(RequestStatus.SUCCEEDED, finished_ago=8 * 24 * HOUR)})
    assert surviving(store) == {"step-000300"}


def test_the_commit_marker_goes_first() -> None:
    store = MemoryStore()
    for step in (100, 200, 300):
        prefix_checkpoint(store, "r1", f"step-{step:06d}/", shards=5)
    order: list[str] = []
    store.before_delete = lambda obj: order.append(obj.name.rsplit("/", 1)[-1])
    run_prune(store)
    assert order[0] == "COMMITTED" and len(order) == 6


def test_a_rewritten_file_checkpoint_is_not_deleted() -> None:
    store = MemoryStore()
    for step in (100, 200, 300):
        file_checkpoint(store, "r1", f"ckpt-{step:06d}.pt")
    target = f"{folder('r1')}ckpt-000100.pt"

    def rewrite(obj: ListedObject) -> None:
        if obj.name == target and store.objects[target].generation == obj.generation:
            store.put(target, size=99)  # the trainer saves it again: a new generation

    store.before_delete = rewrite
    [report] = run_prune(store).reports
    assert store.objects[target].size == 99
    assert report.objects_skipped == 1 and report.skipped and not report.errors


def test_a_prefix_checkpoint_whose_marker_changed_after_planning_is_left_alone() -> None:
    store = MemoryStore()
    for step in (100, 200, 300):
        prefix_checkpoint(store, "r1", f"step-{step:06d}/")
    marker = f"{folder('r1')}step-000100/COMMITTED"

    def recommit(prefix: str) -> None:
        if prefix.endswith("step-000100/"):
            store.put(marker)

    store.before_list_all = recommit
    [report] = run_prune(store).reports
    assert surviving(store) == {"step-000100", "step-000200", "step-000300"}
    assert report.skipped == [
        {"checkpoint": "step-000100/", "reason": "its commit marker was rewritten since planning"}
    ]


@pytest.mark.parametrize(("late_write_age", "deleted"), [(timedelta(minutes=10), False), (4 * HOUR, True)])
def test_a_write_after_the_marker_holds_a_checkpoint_only_while_recent(
    late_write_age: timedelta, deleted: bool
) -> None:
    store = MemoryStore()
    for step in (100, 200, 300):
        prefix_checkpoint(store, "r1", f"step-{step:06d}/", at=NOW - 5 * HOUR)
    store.put(f"{folder('r1')}step-000100/late.json", at=NOW - late_write_age)
    [report] = run_prune(store).reports
    assert ("step-000100" not in surviving(store)) is deleted
    assert bool(report.skipped) is not deleted


def test_a_shard_rewritten_between_listing_and_delete_survives() -> None:
    store = MemoryStore()
    for step in (100, 200, 300):
        prefix_checkpoint(store, "r1", f"step-{step:06d}/", shards=3)
    shard = f"{folder('r1')}step-000100/shard-1"
    store.before_delete = lambda obj: (
        store.put(shard, size=7) if obj.name == shard and store.objects[shard].size != 7 else None
    )
    [report] = run_prune(store).reports
    assert store.objects[shard].size == 7
    assert report.objects_deleted == 3 and report.objects_skipped == 1


def test_two_runs_at_once_end_as_one() -> None:
    def build() -> MemoryStore:
        store = MemoryStore()
        for rid in ("a", "b", "c"):
            for step in range(1, 11):
                prefix_checkpoint(store, rid, f"step-{step:06d}/", shards=4)
        return store

    alone, twice = build(), build()
    run_prune(alone)
    results: list[PruneResult] = []
    threads = [threading.Thread(target=lambda: results.append(run_prune(twice))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert twice.names() == alone.names()
    assert all(r.summary["errors"] == 0 for r in results)


def test_deletes_outside_the_request_folder_are_refused() -> None:
    from shared.pruning.execute import _Execution

    store = MemoryStore()
    store.put("requests/r1/model/weights.bin")
    execution = _Execution(store, LAYOUT, policy(), dry_run=False, now=NOW)
    report = RequestReport("r1", dry_run=False)
    with pytest.raises(OutOfScope):
        execution._delete(
            folder("r1"), store.objects["requests/r1/model/weights.bin"], {"objects": 0, "bytes": 0}, report
        )
    assert "requests/r1/model/weights.bin" in store.names()


@pytest.mark.parametrize("request_id", ["", ".", "..", "a/b", "a\nb"])
def test_folder_for_rejects_ids_that_escape(request_id: str) -> None:
    with pytest.raises(OutOfScope):
        LAYOUT.folder_for(request_id)


def test_a_failing_request_does_not_stop_the_others() -> None:
    store = MemoryStore()
    for rid in ("a", "b"):
        for step in (1, 2, 3):
            file_checkpoint(store, rid, f"ckpt-{step}.pt")

    def read_record(request_id: str) -> RequestRecord | None:
        if request_id == "a":
            raise ConnectionError("ledger unreachable")
        return None

    result = prune_requests(
        store, ["a", "b"], read_record=read_record, layout=LAYOUT, policy=policy(), workers=2, now=NOW
    )
    by_id = {r.request_id: r for r in result.reports}
    assert by_id["a"].errors and by_id["a"].retryable_errors == 1
    assert by_id["b"].objects_deleted == 1
    assert result.retryable_errors == 1


# The task runner.


def test_run_tasks_runs_follow_ups_and_bounds_the_draw() -> None:
    drawn: list[int] = []
    done: list[str] = []
    lock = threading.Lock()

    def leaf(name: str):
        def task():
            with lock:
                done.append(name)
            return ()

        return task

    def parent(i: int):
        def task():
            return [leaf(f"{i}.{j}") for j in range(3)]

        return task

    unfinished_at_each_draw: list[int] = []

    def source():
        for i in range(50):
            with lock:
                unfinished_at_each_draw.append(sum(1 for k in drawn if not all(f"{k}.{j}" in done for j in range(3))))
            drawn.append(i)
            yield parent(i)

    run_tasks(source(), workers=2)
    assert sorted(done) == sorted(f"{i}.{j}" for i in range(50) for j in range(3))
    assert drawn == list(range(50))
    # Follow-ups run before more is drawn: at most two tasks per worker are ever in flight.
    assert max(unfinished_at_each_draw) <= 2 * 2


# Messages and alerts.


@pytest.mark.parametrize(
    ("data", "name", "request_id"),
    [
        (b'{"task": "prune"}', "prune", None),
        (b'{"task": "prune", "request_id": "req-1"}', "prune", "req-1"),
        (b'{"task": "reconcile"}', "reconcile", None),
        (b"not json", None, None),
        (b"[1, 2]", None, None),
    ],
)
def test_parse_maintenance_task(data: bytes, name: str | None, request_id: str | None) -> None:
    parsed_name, task = parse_maintenance_task(data)
    assert parsed_name == name
    if name == "prune":
        assert task is not None and task.request_id == request_id
    else:
        assert task is None


def test_a_prune_task_with_a_bad_request_id_is_not_a_task() -> None:
    assert parse_maintenance_task(b'{"task": "prune", "request_id": "../x"}') == ("prune", None)


def test_report_alert_only_when_something_was_deleted() -> None:
    store = MemoryStore()
    for step in (1, 2):
        file_checkpoint(store, "r1", f"ckpt-{step}.pt")
    assert report_alert(run_prune(store)) is None
    file_checkpoint(store, "r1", "ckpt-3.pt")
    alert = report_alert(run_prune(store))
    assert alert is not None and (alert.kind, alert.severity, alert.request_id) == ("prune_report", "INFO", "r1")
    assert alert.details["objects_deleted"] == 1


class FailingStore(MemoryStore):
    """Listing one request's checkpoints folder fails with `error`."""

    def __init__(self, failing_request: str, error: Exception) -> None:
        super().__init__()
        self.failing_folder, self.error = folder(failing_request), error

    def list_folder(self, prefix: str):
        if prefix == self.failing_folder:
            raise self.error
        return super().list_folder(prefix)


@pytest.mark.parametrize(
    ("error", "severity"),
    [(Forbidden("no storage.objects.list"), "ERROR"), (ServiceUnavailable("try later"), "WARNING")],
)
def test_report_alert_fires_on_errors_even_when_nothing_was_deleted(error: Exception, severity: str) -> None:
    store = FailingStore("r2", error)
    for rid in ("r1", "r2"):
        file_checkpoint(store, rid, "ckpt-1.pt")
    result = run_prune(store)
    assert result.summary["objects_deleted"] == 0
    alert = report_alert(result)
    assert alert is not None and (alert.kind, alert.severity, alert.request_id) == ("prune_report", severity, "r2")
    [failed] = alert.details["requests"]
    assert failed["request_id"] == "r2" and failed["errors"] == [f"planning: {type(error).__name__}: {error}"]
    assert alert.message.endswith("in 1 requests; 1 errors.")


def test_log_report_is_an_error_when_a_request_had_permanent_errors() -> None:
    store = FailingStore("r2", Forbidden("no storage.objects.list"))
    for rid in ("r1", "r2"):
        for step in (1, 2, 3):
            file_checkpoint(store, rid, f"ckpt-{step}.pt")
    stream = io.StringIO()
    for report in run_prune(store).reports:
        log_report(Logger(stream=stream, min_severity="DEBUG"), report)
    lines = {line["request_id"]: line for line in map(json.loads, stream.getvalue().splitlines())}
    assert (lines["r1"]["severity"], lines["r1"]["objects_deleted"]) == ("INFO", 1)
    assert (lines["r2"]["severity"], lines["r2"]["event"]) == ("ERROR", "checkpoints_pruned")
    assert lines["r2"]["errors"] == ["planning: Forbidden: 403 no storage.objects.list"]


def test_dry_run_text_says_what_would_be_freed() -> None:
    store = MemoryStore()
    for step in (100, 200, 300):
        file_checkpoint(store, "r1", f"ckpt-{step:06d}.pt")
    out = io.StringIO()
    print_prune_result(run_prune(store, dry_run=True), out)
    summary = out.getvalue().splitlines()[-1]
    assert "1 checkpoints would be deleted, would free 1 objects, 10 bytes" in summary
    out = io.StringIO()
    print_prune_result(run_prune(store), out)
    assert "1 checkpoints deleted, 1 objects and 10 bytes freed" in out.getvalue().splitlines()[-1]


def test_the_prune_function_imports_neither_vertex_nor_pubsub() -> None:
    import subprocess
    import sys

    code = (
        "import sys, functions.prune, shared.pruning.runner, spotjobs.cli.prune\n"
        "heavy = [m for m in sys.modules if m.startswith(('google.cloud.aiplatform',"
        " 'google.cloud.pubsub', 'google.cloud.storage'))]\n"
        "assert not heavy, heavy\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr


# Framework checkpoints without the kit's marker, and files that are not checkpoints.


@pytest.mark.parametrize("keep_final", [True, False])
def test_an_expired_request_with_nothing_complete_keeps_its_newest_checkpoint(keep_final: bool) -> None:
    store = MemoryStore()
    prefix_checkpoint(store, "r1", "step-000100/", marker=None, at=NOW - 9 * 24 * HOUR)
    prefix_checkpoint(store, "r1", "step-000200/", marker=None, at=NOW - 9 * 24 * HOUR)
    file_checkpoint(store, "r1", "notes-step-300.txt", at=NOW - 9 * 24 * HOUR)  # not a checkpoint
    records = {"r1": record(RequestStatus.FAILED, finished_ago=8 * 24 * HOUR)}
    [report] = run_prune(store, records, keep_final_checkpoint=keep_final).reports
    assert surviving(store) == ({"step-000200"} if keep_final else set()) | {"notes-step-300.txt"}
    kept = [k for k in report.kept if k["step"] is not None]
    stream = io.StringIO()
    log_report(Logger(stream=stream, min_severity="DEBUG"), report)
    [line] = map(json.loads, stream.getvalue().splitlines())
    if keep_final:
        assert kept == [
            {
                "checkpoint": "step-000200/",
                "step": 200,
                "complete": False,
                "evidence": Evidence.NO_MARKER,
                "reason": NEWEST_KEPT_WITHOUT_COMPLETE,
            }
        ]
        assert line["kept_without_complete"] == kept and line["deleted"] == ["step-000100/"]
    else:
        assert kept == [] and "kept_without_complete" not in line


def test_a_hugging_face_checkpoint_loses_trainer_state_first() -> None:
    store = MemoryStore()
    for step in (100, 200, 300):
        write_save(store, "r1", hf_trainer(step), at=NOW - 3 * HOUR)
    order: list[str] = []
    store.before_delete = lambda obj: order.append(obj.name[len(folder("r1")) :])
    run_prune(store, keep_last=2)
    assert order[0] == "checkpoint-100/trainer_state.json" and len(order) == len(hf_trainer(100).writes)
    assert surviving(store) == {"checkpoint-200", "checkpoint-300"}


def _kit_checkpoint(store: MemoryStore, step: int, *, missing: str | None = None) -> None:
    """A folder the kit committed (its marker lists the files and sizes), `missing` deleted later."""
    files = {"model.ckpt": 300, "opt/state.pt": 40}
    base = f"{folder('r1')}step-{step:06d}/"
    for relative, size in files.items():
        if relative != missing:
            store.put(base + relative, size=size, at=NOW - 3 * HOUR)
    store.put(base + "COMMITTED", at=NOW - 3 * HOUR, text=json.dumps({"v": 1, "step": step, "files": files}))


def test_a_committed_folder_whose_files_were_deleted_is_not_counted_complete() -> None:
    """Issue 28, break 15: the marker lists the files and sizes and nothing checked them, so a
    folder with files deleted later counted as complete: kept among the newest, while the
    complete checkpoint the kit falls back to was deleted."""
    store = MemoryStore()
    _kit_checkpoint(store, 100)
    _kit_checkpoint(store, 200, missing="opt/state.pt")
    _kit_checkpoint(store, 300)
    [report] = run_prune(store, {"r1": record(keep_last=2)}).reports
    assert surviving(store) == {"step-000100", "step-000300"}
    assert [(d["checkpoint"], d["evidence"]) for d in report.deleted] == [("step-000200/", Evidence.FILES_MISSING)]
