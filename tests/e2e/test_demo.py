"""`spotjobs demo --json --seed N` end to end: every scenario as designed, nothing left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from devstack.processes import REPO_ROOT
from tests.support.processes import _alive, _descendants

pytestmark = pytest.mark.stack

SEED = 3
# A guard against a hung demo, not a speed target (the demo reports its own wall time).
DEMO_DEADLINE_SECONDS = 420


@pytest.fixture(scope="module")
def demo_run() -> dict[str, Any]:
    """Run the demo once for every test below; returns its report, exit status and processes."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    with tempfile.TemporaryDirectory() as tmp:
        stdout_path, stderr_path = Path(tmp, "stdout"), Path(tmp, "stderr")
        html_path = Path(tmp, "demo.html")
        with stdout_path.open("w") as stdout, stderr_path.open("w") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "spotjobs.cli", "demo", "--json", "--seed", str(SEED), "--html", str(html_path)],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
            )
            started = process.pid
            seen: set[int] = set()
            deadline = time.monotonic() + DEMO_DEADLINE_SECONDS
            while process.poll() is None and time.monotonic() < deadline:
                seen |= _descendants(started)
                time.sleep(0.5)
            if process.poll() is None:
                process.kill()
                pytest.fail(f"the demo did not finish in {DEMO_DEADLINE_SECONDS} s: {stderr_path.read_text()[-3000:]}")
        text = stdout_path.read_text()
        progress = stderr_path.read_text()
        page = html_path.read_text() if html_path.exists() else None
    try:
        report = json.loads(text)
    except ValueError:
        pytest.fail(f"the demo printed no JSON report (exit {process.returncode}): {progress[-3000:]}")
    return {
        "report": report,
        "returncode": process.returncode,
        "processes": seen,
        "progress": progress,
        "html": page,
        "html_path": str(html_path),
    }


def requests_by_scenario(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {request["scenario"]: request for request in report["requests"]}


def test_every_scenario_ends_as_designed_and_the_exit_status_says_so(demo_run: dict[str, Any]) -> None:
    report = demo_run["report"]
    differences = {r["request_id"]: r["differences"] for r in report["requests"] if r["differences"]}
    assert report["scenario_ok"], f"{differences} {report['notes']}"
    assert demo_run["returncode"] == 0
    by_scenario = requests_by_scenario(report)
    assert {key: r["outcome"] for key, r in by_scenario.items()} == {
        "few-preemptions": "succeeded",
        "requeued": "succeeded",
        "fallback": "succeeded",
        "duplicate": "succeeded",
        "invalid": "rejected",
        "code-bug": "failed",
        "new-data": "succeeded",
        "two-node": "succeeded",
    }


def test_new_data_lands_and_one_request_trains_on_its_manifest(demo_run: dict[str, Any]) -> None:
    request = requests_by_scenario(demo_run["report"])["new-data"]
    trigger = request["trigger"]
    assert request["request_id"] == f"trg-{trigger['name']}-{trigger['window_id']}"
    assert trigger["manifest_objects"] == request["expected"]["manifest_objects"] >= 20
    assert request["vertex_jobs"] == 1 and len(request["attempts"]) == 1


def test_a_few_preemptions_are_absorbed_by_vertex_restarts_within_attempt_1(demo_run: dict[str, Any]) -> None:
    request = requests_by_scenario(demo_run["report"])["few-preemptions"]
    (attempt,) = request["attempts"]
    planned = request["expected"]["attempts"][0]["preemptions"]
    assert attempt["preemptions"] == attempt["preemptions_injected"] == planned >= 2
    assert len(attempt["runs"]) == planned + 1
    assert all(run["start_step"] > 0 for run in attempt["runs"][1:] if run["start_step"] is not None)


def test_the_requeued_request_resumes_attempt_2_from_the_last_complete_checkpoint(demo_run: dict[str, Any]) -> None:
    by_scenario = requests_by_scenario(demo_run["report"])
    for key, second_strategy in (("requeued", "SPOT"), ("fallback", "STANDARD")):
        first, second = by_scenario[key]["attempts"]
        assert (first["strategy"], first["preemptions"], first["outcome"]) == ("SPOT", 7, "requeued")
        assert (second["strategy"], second["preemptions"], second["outcome"]) == (second_strategy, 0, "succeeded")
        assert second["start_step"] == first["last_checkpoint_step"] > 0, key
        assert by_scenario[key]["vertex_jobs"] == 2


def test_the_two_node_job_restarts_whole_when_either_replica_is_reclaimed(demo_run: dict[str, Any]) -> None:
    request = requests_by_scenario(demo_run["report"])["two-node"]
    (attempt,) = request["attempts"]
    assert (attempt["preemptions"], attempt["preemptions_injected"], attempt["outcome"]) == (2, 2, "succeeded")
    primary, worker = attempt["replicas"]
    assert (primary["replica"], primary["preemptions"], primary["runs"]) == ("workerpool0-0", 1, 3)
    assert (worker["replica"], worker["preemptions"], worker["runs"]) == ("workerpool1-0", 1, 3)
    assert worker["role"].startswith("stand-in")
    # The primary saved on each SIGTERM (the job's restart for the worker's reclaim, then its own)
    # and resumed there.
    runs = attempt["runs"]
    assert primary["run_start_steps"] == [run["start_step"] for run in runs]
    assert [run["start_step"] for run in runs[1:]] == [run["end_step"] for run in runs[:-1]]
    assert 0 == runs[0]["start_step"] < runs[1]["start_step"] < runs[2]["start_step"]
    assert "workerpool1-0 (stand-in worker, trains nothing): 1 reclaimed, 3 run(s)" in demo_run["html"]


def test_the_duplicate_is_one_job_and_the_bad_requests_are_reported(demo_run: dict[str, Any]) -> None:
    by_scenario = requests_by_scenario(demo_run["report"])
    duplicate = by_scenario["duplicate"]
    assert duplicate["vertex_jobs"] == 1 and duplicate["duplicates_suppressed"] >= 1
    invalid = by_scenario["invalid"]
    assert invalid["attempts"] == [] and invalid["vertex_jobs"] == 0
    assert invalid["alerts"].get("invalid_request") == 1
    bug = by_scenario["code-bug"]
    assert len(bug["attempts"]) == 1 and bug["attempts"][0]["outcome"] == "failed"
    assert bug["alerts"].get("job_failed") == 1


def test_totals_goodput_pruning_and_cost(demo_run: dict[str, Any]) -> None:
    report = demo_run["report"]
    totals = report["totals"]
    assert totals["jobs"] == 9  # 1 + 2 + 2 + 1 + 0 + 1, 1 for the new data and 1 of two nodes
    assert totals["requeues"] == 2 and totals["invalid_rejected"] == 1
    assert totals["duplicates_suppressed"] >= 1
    assert totals["preemptions"] == sum(a["preemptions"] for r in report["requests"] for a in r["attempts"])
    assert totals["goodput"] >= 0.9
    assert totals["checkpoints_pruned"] > 0 and totals["bytes_freed"] > 0
    assert all(r["checkpoints_kept"] <= 2 for r in report["requests"] if r["outcome"] == "succeeded")
    assert 0 < totals["cost_spot_usd"] < totals["cost_on_demand_usd"]
    assert report["pricing"]["as_of"] and report["pricing"]["source"]


def test_no_process_the_demo_started_is_left_running(demo_run: dict[str, Any]) -> None:
    processes = demo_run["processes"]
    # Emulators, functions and trainers were all seen while it ran.
    assert len(processes) >= 7
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in processes):
        time.sleep(0.2)
    assert not [pid for pid in processes if _alive(pid)], "processes left behind by the demo"


def test_the_html_report_renders_in_chromium_with_each_scenario_on_its_timeline(
    demo_run: dict[str, Any], tmp_path: Path
) -> None:
    from tests.support.browser import render
    from tests.support.report_html import marks, section

    report = demo_run["report"]
    assert report["html"] == demo_run["html_path"] and demo_run["html"], "the demo wrote no HTML report"
    assert f"HTML report: {report['html']}" in demo_run["progress"]
    path = tmp_path / "demo.html"
    path.write_text(demo_run["html"])
    page = render(path)
    assert page.console == [] and page.screenshot_bytes > 10_000
    by_scenario = requests_by_scenario(report)
    for key, request in by_scenario.items():
        part = section(page.dom, request["request_id"])
        outcomes = [a["outcome"] for a in request["attempts"]]
        assert [m.split('data-outcome="')[1].split('"')[0] for m in marks(part, "attempt")] == outcomes, key
        for attempt in request["attempts"]:
            n = str(attempt["n"])
            assert len(marks(part, "run", attempt=n)) == len(attempt["runs"]), key
            assert len(marks(part, "preemption", attempt=n)) == attempt["preemptions"], key
        assert len(marks(part, "checkpoint", state="kept")) == request["checkpoints_kept"], key
        assert len(marks(part, "checkpoint", state="pruned")) == request["checkpoints_pruned"], key
    assert marks(section(page.dom, by_scenario["invalid"]["request_id"]), "outcome", outcome="rejected")
    totals = report["totals"]
    assert f'data-total="preemptions"><b>{totals["preemptions"]}</b>' in page.dom
    assert f'data-total="goodput"><b>{totals["goodput"]:.3f}</b>' in page.dom
