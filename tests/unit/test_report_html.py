"""The HTML report (spotjobs/reporting/html.py): a known scenario's timeline and totals, checked in the
page as a real browser (Chromium, headless) parses and lays it out, with no console messages."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from spotjobs.reporting.html import render_report
from spotjobs.reporting.views import build_views, human_value, totals
from tests.support.browser import render
from tests.support.report_html import marks, section

MACHINE = {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}


def record(request_id: str, status: str, attempts: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "status": status,
        "request": {
            "request_id": request_id,
            "location": "us-central1",
            "max_attempts": 4,
            "custom_job": {
                "displayName": request_id,
                "jobSpec": {
                    "workerPoolSpecs": [{"machineSpec": MACHINE, "replicaCount": 1, "containerSpec": {"imageUri": "x"}}]
                },
            },
        },
        "output_dir": f"gs://ckpt/spotjobs/{request_id}/",
        "attempts": attempts,
        "created_at": "2026-11-29T10:00:00.000Z",
        "updated_at": "2026-11-29T12:00:00.000Z",
        "finished_at": "2026-11-29T12:00:00.000Z" if status in {"SUCCEEDED", "FAILED"} else None,
        **extra,
    }


def attempt(
    n: int,
    job: str,
    start: str,
    end: str | None,
    outcome: str | None,
    preemptions: int,
    strategy: str = "SPOT",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "n": n,
        "location": "us-central1",
        "strategy": strategy,
        "claimed_at": start,
        "job": job,
        "state": "JOB_STATE_SUCCEEDED" if outcome == "succeeded" else "JOB_STATE_FAILED",
        "created_at": start,
        "started_at": start,
        "ended_at": end,
        "preemptions": preemptions,
        "outcome": outcome,
        **extra,
    }


def runs(spans: list[tuple[int, int]], every: int = 100, finished_last: bool = False) -> list[dict[str, Any]]:
    result = []
    for index, (start, end) in enumerate(spans):
        result.append(
            {
                "run": index,
                "start_step": start,
                "end_step": end,
                "checkpoints": [
                    {"checkpoint": f"ckpt-{s:06d}/", "step": s}
                    for s in range(start + every - start % every, end + 1, every)
                    if s > start
                ],
                "finished": finished_last and index == len(spans) - 1,
            }
        )
    return result


# The "re-queued" scenario of the demo: attempt 1 on Spot is preempted 7 times (the first run and
# Vertex's 6 restarts, each resuming from the last checkpoint), Vertex gives up, spotjobs re-queues
# attempt 2, which resumes at step 700 and succeeds at 1000. Pruning keeps the last 2 checkpoints.
ATTEMPT_1_RUNS = [(0, 120), (100, 230), (200, 340), (300, 420), (400, 530), (500, 640), (600, 720)]
ATTEMPT_2_RUNS = [(700, 1000)]


def scenario() -> dict[str, Any]:
    first = attempt(
        1,
        "projects/p/locations/us-central1/customJobs/1",
        "2026-11-29T10:00:00.000Z",
        "2026-11-29T11:00:00.000Z",
        "requeued",
        7,
    )
    second = attempt(
        2,
        "projects/p/locations/us-central1/customJobs/2",
        "2026-11-29T11:01:00.000Z",
        "2026-11-29T12:00:00.000Z",
        "succeeded",
        0,
        # A field a newer ledger writes (the renderer shows it rather than failing).
        preemptions_unknown=False,
        # The kit's figures as the ledger sums them, float noise included.
        checkpoints_committed=3,
        checkpoint_seconds=0.4280000000000016,
        steps_per_second=94.2445,
        total_steps=1000,
        last_checkpoint=[0, 1000],
    )
    run_data = {first["job"]: runs(ATTEMPT_1_RUNS), second["job"]: runs(ATTEMPT_2_RUNS, finished_last=True)}
    written = sorted(
        {c["checkpoint"]: c["step"] for rs in run_data.values() for r in rs for c in r["checkpoints"]}.items(),
        key=lambda item: item[1],
    )
    kept = {name for name, _ in written[-2:]}
    checkpoints = {
        "demo-requeued": [
            {"checkpoint": name, "step": step, "state": "kept" if name in kept else "pruned"} for name, step in written
        ]
    }
    rejected = record("demo-invalid", "REJECTED", [])
    failed = record(
        "demo-bug",
        "FAILED",
        [
            attempt(
                1,
                "projects/p/locations/us-central1/customJobs/3",
                "2026-11-29T10:00:00.000Z",
                "2026-11-29T10:05:00.000Z",
                "failed",
                2,
                error={"code": 13, "message": "exit 1"},
            )
        ],
    )
    return {
        "records": [record("demo-requeued", "SUCCEEDED", [first, second]), failed, rejected],
        "runs": run_data,
        "checkpoints": checkpoints,
        "written": written,
    }


def test_totals_of_the_known_scenario() -> None:
    data = scenario()
    views = build_views(data["records"], runs=data["runs"], checkpoints=data["checkpoints"])
    summary = totals(views, seconds_per_step=60)
    computed = sum(e - s for s, e in ATTEMPT_1_RUNS + ATTEMPT_2_RUNS)
    lost = sum(
        max(0, a[1] - b[0]) for a, b in zip(ATTEMPT_1_RUNS + ATTEMPT_2_RUNS, (ATTEMPT_1_RUNS + ATTEMPT_2_RUNS)[1:])
    )
    assert summary["steps_computed"] == computed and summary["steps_lost"] == lost
    assert summary["goodput"] == round(1000 / computed, 4)
    assert summary["preemptions"] == 9 and summary["requeues"] == 1 and summary["attempts"] == 3
    assert summary["preemptions_by_machine"] == [
        {"machine_type": "a2-highgpu-1g", "location": "us-central1", "preemptions": 9}
    ]
    assert 0 < summary["cost_spot_usd"] < summary["cost_on_demand_usd"]
    assert summary["outcomes"] == {"failed": 1, "rejected": 1, "succeeded": 1}


def test_the_page_is_self_contained() -> None:
    data = scenario()
    page = render_report(data["records"], runs=data["runs"], checkpoints=data["checkpoints"])
    # Nothing to fetch: no scripts, stylesheets, images or fonts from anywhere.
    assert not re.search(r"<script|<link|<img|<iframe|@import|url\(|src=", page)
    assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"] * page.count("<svg")


def test_the_timeline_renders_in_chromium_with_the_expected_marks(tmp_path: Path) -> None:
    data = scenario()
    path = tmp_path / "report.html"
    path.write_text(
        render_report(
            data["records"],
            runs=data["runs"],
            checkpoints=data["checkpoints"],
            seconds_per_step=60,
            title="known scenario",
        )
    )
    page = render(path)
    assert page.console == []
    assert page.screenshot_bytes > 10_000  # something was painted
    dom = page.dom
    assert "<title>known scenario</title>" in dom

    requeued = section(dom, "demo-requeued")
    assert [re.search(r'data-outcome="(\w+)"', t).group(1) for t in marks(requeued, "attempt")] == [
        "requeued",
        "succeeded",
    ]
    assert len(marks(requeued, "run", attempt="1")) == 7 and len(marks(requeued, "run", attempt="2")) == 1
    # Every run of attempt 1 ended in a preemption (the seventh made Vertex give up); none in 2.
    assert len(marks(requeued, "preemption", attempt="1")) == 7 and not marks(requeued, "preemption", attempt="2")
    committed = marks(requeued, "checkpoint")
    assert len(committed) == sum(len(r["checkpoints"]) for rs in data["runs"].values() for r in rs)
    assert len(marks(requeued, "checkpoint", state="kept")) == 2
    assert len(marks(requeued, "checkpoint", state="pruned")) == len(committed) - 2
    assert marks(requeued, "pruning", pruned=str(len(data["written"]) - 2))
    assert [re.search(r'data-outcome="(\w+)"', t).group(1) for t in marks(requeued, "outcome")] == [
        "requeued",
        "succeeded",
    ]
    # The attempts table in human units: the kit's figures, durations and a newer ledger field.
    assert "preemptions unknown no" in requeued
    assert "checkpoint writes 0.428 s" in requeued and "rate 94.2/s" in requeued
    assert "checkpoints 3" in requeued and "last checkpoint step 1,000 (run 0)" in requeued
    assert "<td>59 min 0 s</td>" in requeued and "<td>2026-11-29 11:01:00Z</td>" in requeued
    assert not re.search(r"\d\.\d{4,}", re.sub(r"<svg.*?</svg>", "", dom, flags=re.S)), "a raw float is shown"

    bug = section(dom, "demo-bug")
    assert len(marks(bug, "preemption")) == 2  # no run data: drawn on the attempt's bar
    assert marks(bug, "outcome", outcome="failed") and "exit 1" in bug
    assert marks(section(dom, "demo-invalid"), "outcome", outcome="rejected")

    assert re.search(r'data-total="preemptions"><b>9</b>', dom)
    assert re.search(r'data-total="goodput"><b>0\.\d{3}</b>', dom)


def test_an_empty_ledger_renders_a_page_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "empty.html"
    path.write_text(render_report([]))
    page = render(path)
    assert page.console == [] and 'data-mark="empty"' in page.dom


def test_a_deadline_request_draws_progress_against_the_deadline_and_marks_each_switch() -> None:
    spot = {
        "n": 1,
        "location": "us-central1",
        "strategy": "SPOT",
        "claimed_at": "2026-11-29T10:00:00.000Z",
        "ended_at": "2026-11-29T10:40:00.000Z",
        "outcome": "switched_to_on_demand",
        "cancel_decided_at": "2026-11-29T10:40:00.000Z",
        "last_checkpoint": [0, 300],
        "last_checkpoint_at": "2026-11-29T10:30:00.000Z",
    }
    standard = {
        "n": 2,
        "location": "us-central1",
        "strategy": "STANDARD",
        "claimed_at": "2026-11-29T10:41:00.000Z",
        "ended_at": "2026-11-29T12:00:00.000Z",
        "outcome": "succeeded",
        "last_checkpoint": [0, 1000],
        "last_checkpoint_at": "2026-11-29T12:00:00.000Z",
    }
    late = record("dl-1", "SUCCEEDED", [spot, standard])
    late["request"].update(deadline="2026-11-29T13:00:00Z", total_steps=1000)
    page = render_report([late, record("plain", "SUCCEEDED", [])])
    dom = section(page, "dl-1")
    [switch] = marks(dom, "deadline-switch")
    assert 'data-attempt="1"' in switch and 'data-outcome="switched_to_on_demand"' in switch
    assert len(marks(dom, "deadline")) == len(marks(dom, "deadline-line")) == 1
    [progress] = marks(dom, "deadline-progress")
    points = re.search(r'points="([^"]+)"', progress).group(1).split()
    assert len(points) == 3  # the start, then each attempt's last checkpoint, rising
    heights = [float(p.split(",")[1]) for p in points]
    assert heights[0] > heights[1] > heights[2]
    assert marks(section(page, "plain"), "deadline") == []


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("checkpoint_seconds", 0.4280000000000016, "0.428 s"),
        ("checkpoint_seconds", 252.4, "4 min 12 s"),
        ("wait_seconds", 7500, "2 h 05 min"),
        ("wait_seconds", 273600, "3 d 4 h"),
        ("steps_per_second", 94.2445, "94.2/s"),
        ("total_steps", 1200000, "1,200,000"),
        ("ratio", 0.333333333, "0.333"),
        ("last_checkpoint_at", "2026-11-29T10:30:00.123Z", "2026-11-29 10:30:00Z"),
        ("note", "not a time", "not a time"),
    ],
)
def test_attempt_fields_are_shown_in_human_units(key: str, value: Any, shown: str) -> None:
    assert human_value(key, value) == shown
