"""What a prune run tells (shared/pruning/report.py): a request's counts, the run's summary, the
prune_report alert (when it fires, its severity, whom it names, its truncated list) and the log
line per request, driven by runs over the in-memory store of tests/support/prune_store.py."""

from __future__ import annotations

import io
import json

import pytest
from google.api_core.exceptions import Forbidden, ServiceUnavailable

from shared.log import Logger
from shared.pruning.journal import LeftBehind
from shared.pruning.report import PruneResult, RequestReport, log_report, report_alert
from shared.pruning.retention import NEWEST_KEPT_WITHOUT_COMPLETE
from tests.support.prune_store import MemoryStore, file_checkpoint, folder, run_prune


def logged(report: RequestReport) -> list[dict]:
    stream = io.StringIO()
    log_report(Logger(stream=stream, min_severity="DEBUG"), report)
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def with_checkpoints(*request_ids: str, count: int = 3) -> MemoryStore:
    store = MemoryStore()
    for rid in request_ids:
        for step in range(1, count + 1):
            file_checkpoint(store, rid, f"ckpt-{step}.pt")
    return store


def test_a_request_nothing_happened_to_reports_nothing() -> None:
    store = with_checkpoints("r1", count=2)
    result = run_prune(store)
    [report] = result.reports
    assert (report.objects_deleted, report.objects_skipped, report.bytes_freed) == (0, 0, 0)
    assert (report.errors, report.retryable_errors, report.permanent_errors) == ([], 0, 0)
    summary = result.summary
    assert (summary["objects_deleted"], summary["bytes_freed"], summary["skipped"], summary["errors"]) == (0, 0, 0, 0)
    assert report_alert(result) is None
    assert logged(report) == []


def test_the_summary_counts_skipped_checkpoints_and_skipped_objects() -> None:
    store = with_checkpoints("r1", "r2", count=3)
    rewritten = f"{folder('r2')}ckpt-1.pt"

    def rewrite(obj) -> None:
        if obj.name == rewritten and store.objects[rewritten].generation == obj.generation:
            store.put(rewritten, size=99)

    store.before_delete = rewrite
    result = run_prune(store)
    by_id = {r.request_id: r for r in result.reports}
    assert by_id["r2"].objects_skipped == 1 and len(by_id["r2"].skipped) == 1
    assert result.summary["skipped"] == 2  # the checkpoint left alone, and its object not deleted
    assert result.summary["objects_deleted"] == 1 and result.summary["bytes_freed"] == 10


def test_errors_are_told_apart_retryable_or_permanent() -> None:
    report = RequestReport("r1", dry_run=False)
    report.record_error("planning", ServiceUnavailable("try later"))
    report.record_error("ckpt-1", Forbidden("no storage.objects.delete"))
    report.record_error("ckpt-2", Forbidden("no storage.objects.delete"))
    assert (len(report.errors), report.retryable_errors, report.permanent_errors) == (3, 1, 2)


def test_an_alert_about_one_request_names_it_and_one_about_several_names_none() -> None:
    store = with_checkpoints("r1", "r2", count=3)
    alert = report_alert(run_prune(store))
    assert alert is not None and alert.request_id is None
    assert [r["request_id"] for r in alert.details["requests"]] == ["r1", "r2"]
    assert alert.message == "Pruned 2 checkpoints (2 objects, 20 bytes) in 2 requests."

    store = with_checkpoints("r3", count=3)
    alert = report_alert(run_prune(store))
    assert alert is not None and alert.request_id == "r3"
    assert alert.message == "Pruned 1 checkpoints (1 objects, 10 bytes) in 1 requests."


def test_the_alert_lists_only_the_requests_something_happened_to() -> None:
    store = with_checkpoints("r1", count=3)
    file_checkpoint(store, "quiet", "ckpt-1.pt")
    alert = report_alert(run_prune(store))
    assert alert is not None and alert.request_id == "r1"
    assert [r["request_id"] for r in alert.details["requests"]] == ["r1"]
    assert alert.details["requests_scanned"] == 2


@pytest.mark.parametrize(("requests", "truncated"), [(2, False), (3, True)])
def test_the_alert_says_when_its_list_of_requests_was_cut(requests: int, truncated: bool) -> None:
    store = with_checkpoints(*(f"r{i}" for i in range(requests)), count=3)
    alert = report_alert(run_prune(store), limit=2)
    assert alert is not None
    assert len(alert.details["requests"]) == 2
    assert alert.details["requests_truncated"] is truncated


def test_an_alert_tells_of_deletes_earlier_runs_could_not_report() -> None:
    earlier = [LeftBehind("maintenance/prune-reports/x/r9.json", "r9", ("step-000100/",), "2026-11-01T11:00:00Z")]
    result = run_prune(with_checkpoints("r1", count=1))
    alert = report_alert(result, earlier=earlier)
    assert alert is not None and alert.severity == "INFO"
    assert alert.message == (
        "Pruned 0 checkpoints (0 objects, 0 bytes) in 0 requests; "
        "earlier runs that could not report were deleting from 1 requests."
    )
    assert alert.details["unreported_earlier"] == [
        {"request_id": "r9", "checkpoints": ["step-000100/"], "recorded_at": "2026-11-01T11:00:00Z"}
    ]


def test_an_alert_of_errors_alone_counts_them() -> None:
    report = RequestReport("r1", dry_run=False)
    report.record_error("planning", ServiceUnavailable("try later"))
    alert = report_alert(PruneResult([report], False, 0.5, {}))
    assert alert is not None and (alert.severity, alert.request_id) == ("WARNING", "r1")
    assert alert.message == "Pruned 0 checkpoints (0 objects, 0 bytes) in 1 requests; 1 errors."


def test_the_log_line_of_a_request_tells_what_happened() -> None:
    report = RequestReport("r1", dry_run=False)
    report.skipped.append({"checkpoint": "step-000100/", "reason": "its COMMITTED was changed"})
    [line] = logged(report)
    assert (line["severity"], line["event"], line["request_id"]) == ("INFO", "checkpoints_pruned", "r1")
    assert line["skipped"] == report.skipped and "kept_without_complete" not in line

    report.errors.append("ckpt-1: ServiceUnavailable: 503 try later")
    report.retryable_errors = 1
    [line] = logged(report)
    assert line["severity"] == "WARNING"


def test_a_request_that_only_kept_other_checkpoints_logs_nothing() -> None:
    report = RequestReport("r1", dry_run=False)
    report.kept.append({"checkpoint": "step-000100/", "step": 100, "complete": True, "reason": "among the newest"})
    assert logged(report) == []


def test_a_checkpoint_kept_with_nothing_known_complete_is_logged_alone() -> None:
    report = RequestReport("r1", dry_run=False)
    kept = {"checkpoint": "step-000100/", "step": 100, "complete": False, "reason": NEWEST_KEPT_WITHOUT_COMPLETE}
    report.kept.extend([{"checkpoint": "step-000050/", "step": 50, "complete": True, "reason": "other"}, kept])
    [line] = logged(report)
    assert line["severity"] == "INFO" and line["kept_without_complete"] == [kept]
    assert line["deleted"] == [] and line["errors"] == []
