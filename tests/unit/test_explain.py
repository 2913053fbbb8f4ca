"""`spotjobs explain` over the documented-shape fixtures (tests/events/log_entries/documented and
captured, tests/events/jobs; written by tools/event_fixtures.py): the per-entry classification and
the decision replayed on the job's JSON. Offline; no emulator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.deciding.events import Signal, classify, parse_log_entry, patterns_from
from shared.settings import Settings
from spotjobs.cli import main
from tests.conftest import EVENTS_DIR
from tools import event_fixtures

DOCUMENTED = EVENTS_DIR / "log_entries" / "documented"
CAPTURED = EVENTS_DIR / "log_entries" / "captured"
JOBS = EVENTS_DIR / "jobs"
SUCCEEDED = "preempted_twice_succeeded"
STOCKOUT = "preempted_7_stockout"


def explain_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["explain", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def captured(name: str) -> str:
    return str(CAPTURED / f"{name}.json")


def job(name: str) -> str:
    return str(JOBS / f"{name}.json")


def test_the_fixtures_are_what_the_generator_writes() -> None:
    assert event_fixtures.main(["--check"]) == 0, "run: .venv/bin/python -m tools.event_fixtures"


@pytest.mark.parametrize(
    ("name", "signal"),
    [
        ("service_provisioning", Signal.PENDING),
        ("service_setting_up", Signal.IRRELEVANT),
        ("service_preparing", Signal.PENDING),
        ("service_running", Signal.RUNNING),
        ("service_teardown", Signal.IRRELEVANT),
        ("service_succeeded", Signal.SUCCEEDED),
        ("service_failed", Signal.FAILED),
        ("worker_stdout", Signal.IRRELEVANT),
        ("worker_stderr", Signal.IRRELEVANT),  # stderr is ERROR, and noise
        ("kit_run_started_json", Signal.KIT),
        ("kit_run_started_text", Signal.KIT),
        ("kit_preempted_json", Signal.KIT),
        ("kit_preempted_text", Signal.KIT),
        ("kit_checkpoint_committed_json", Signal.KIT),
        ("kit_checkpoint_committed_text", Signal.KIT),
        ("kit_run_finished_json", Signal.KIT),
        ("kit_run_finished_text", Signal.KIT),
    ],
)
def test_documented_entries_classify(name: str, signal: Signal) -> None:
    entry = parse_log_entry((DOCUMENTED / f"{name}.json").read_bytes())
    assert classify(entry, patterns_from(Settings())) is signal


@pytest.mark.parametrize("event", ["run_started", "preempted", "checkpoint_committed", "run_finished"])
def test_a_kit_line_reads_the_same_as_json_and_as_text(event: str) -> None:
    as_json = parse_log_entry((DOCUMENTED / f"kit_{event}_json.json").read_bytes()).kit
    as_text = parse_log_entry((DOCUMENTED / f"kit_{event}_text.json").read_bytes()).kit
    assert as_json is not None and as_json == as_text and as_json.event == event
    assert isinstance(as_json.run, int) and as_json.request_id == "resnet50-nightly"


def test_each_entry_of_the_succeeded_job_is_explained_oldest_first(capsys) -> None:
    report = explain_json(capsys, captured(SUCCEEDED))
    entries = report["entries"]
    assert [e["position"] for e in entries] == list(range(20, 0, -1))  # gcloud: newest first
    assert [(e["task"], e["signal"], e["action"]) for e in entries] == [
        ("service", "pending", "vertex_read"),
        ("service", "irrelevant", "irrelevant"),
        ("service", "irrelevant", "irrelevant"),
        ("service", "pending", "vertex_read"),
        ("service", "running", "vertex_read"),
        ("workerpool0-0", "kit", "kit_evidence"),
        ("workerpool0-0", "irrelevant", "irrelevant"),
        ("workerpool0-0", "kit", "kit_evidence"),
        ("workerpool0-0", "kit", "kit_evidence"),
        ("workerpool0-0", "kit", "kit_evidence"),
        ("workerpool0-0", "irrelevant", "irrelevant"),  # stderr at ERROR
        ("workerpool0-0", "kit", "kit_evidence"),
        ("workerpool0-0", "kit", "kit_evidence"),
        ("workerpool0-0", "kit", "kit_evidence"),
        ("workerpool0-0", "kit", "kit_evidence"),
        ("workerpool0-0", "kit", "kit_evidence"),
        ("workerpool0-0", "irrelevant", "irrelevant"),
        ("service", "irrelevant", "irrelevant"),
        ("service", "irrelevant", "irrelevant"),
        ("service", "succeeded", "vertex_read"),
    ]
    kit = [(e["kit"]["event"], e["kit"]["run"], e["kit"]["step"]) for e in entries if e["kit"]]
    assert kit == [
        ("run_started", 0, None),
        ("checkpoint_committed", 0, 200),
        ("preempted", 0, 250),
        ("run_started", 1, None),
        ("checkpoint_committed", 1, 400),
        ("preempted", 1, 430),
        ("run_started", 2, None),
        ("checkpoint_committed", 2, 600),
        ("run_finished", 2, 600),
    ]
    by_action = {e["action"]: e for e in entries}
    assert by_action["kit_evidence"]["explanation"].startswith(
        "kit evidence: counts run 2 of attempt 1 (request resnet50-nightly) — no Vertex read"
    )
    assert by_action["vertex_read"]["explanation"] == (
        "service hint: reads job 2238490567215693824 from Vertex and decides on its state"
    )
    assert {e["stale"] for e in entries if e["action"] in ("kit_evidence", "vertex_read")} == {"not checked offline"}
    assert {e["stale"] for e in entries if e["action"] == "irrelevant"} == {None}
    assert report["replay"] is None


def test_the_succeeded_job_replays_to_success_with_two_preemptions(capsys) -> None:
    replay = explain_json(capsys, captured(SUCCEEDED), "--job", job(SUCCEEDED))["replay"]
    assert (replay["request_id"], replay["attempt"], replay["strategy"]) == (
        "resnet50-nightly",
        1,
        "SPOT",
    )
    assert (replay["status"], replay["outcome"], replay["preemptions"]) == (
        "SUCCEEDED",
        "succeeded",
        "2",
    )
    assert replay["requeue"] is None and replay["alerts"] == []
    assert replay["events"] == ["preemption", "preemption", "job_succeeded"]
    assert replay["prune_requested"] and replay["kit_lines_fed"] == 9 and not replay["notes"]


def test_the_stockout_job_is_requeued_with_the_kit_count(capsys) -> None:
    replay = explain_json(capsys, captured(STOCKOUT), "--job", job(STOCKOUT))["replay"]
    assert (replay["status"], replay["outcome"], replay["preemptions"]) == (
        "REQUEUED",
        "requeued",
        "7",  # six preempted lines, and run 3 killed without notice: run 4's start says so
    )
    assert replay["requeue"] == {
        "attempt": 2,
        "location": "us-central1",
        "strategy": "SPOT",
        "reason": "stockout",
    }
    assert replay["alerts"] == ["preemption_storm"]
    assert replay["events"] == ["preemption"] * 7 + ["requeue"]


def without_kit_lines(tmp_path: Path, name: str) -> str:
    """The captured entries minus the trainer kit's (a trainer without the kit), as JSON lines."""
    entries = json.loads(Path(captured(name)).read_text())
    kept = [e for e in entries if "spotjobs" not in json.dumps(e.get("jsonPayload", e.get("textPayload")))]
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in kept))
    return str(path)


def test_without_the_kit_a_stockout_is_requeued_with_at_least_one_preemption(capsys, tmp_path: Path) -> None:
    replay = explain_json(capsys, without_kit_lines(tmp_path, STOCKOUT), "--job", job(STOCKOUT))["replay"]
    assert (replay["status"], replay["preemptions"], replay["kit_lines_fed"]) == ("REQUEUED", "≥1", 0)
    assert replay["requeue"]["attempt"] == 2 and replay["events"] == ["requeue"]


def test_without_the_kit_a_success_reports_no_preemptions(capsys, tmp_path: Path) -> None:
    replay = explain_json(capsys, without_kit_lines(tmp_path, SUCCEEDED), "--job", job(SUCCEEDED))["replay"]
    # Documented Vertex says nothing while a worker restarts: without the kit, nothing is counted.
    assert (replay["status"], replay["preemptions"]) == ("SUCCEEDED", "0")


def test_a_failure_that_is_no_stockout_alerts_job_failed(capsys, tmp_path: Path) -> None:
    described = json.loads(Path(job(STOCKOUT)).read_text())
    described["error"] = {"code": 13, "message": "Internal error occurred for the current attempt."}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(described))
    replay = explain_json(capsys, without_kit_lines(tmp_path, STOCKOUT), "--job", str(path))["replay"]
    assert (replay["status"], replay["requeue"], replay["alerts"]) == ("FAILED", None, ["job_failed"])
    # ... but with the kit's lines the last run was seen preempted and never finished: re-queued.
    replay = explain_json(capsys, captured(STOCKOUT), "--job", str(path))["replay"]
    assert (replay["status"], replay["preemptions"]) == ("REQUEUED", "7")


def test_the_last_attempt_gives_up(capsys, tmp_path: Path) -> None:
    described = json.loads(Path(job(STOCKOUT)).read_text())
    described["labels"]["spotjobs-attempt"] = "3"
    path = tmp_path / "job.json"
    path.write_text(json.dumps(described))
    replay = explain_json(capsys, captured(STOCKOUT), "--job", str(path))["replay"]
    assert (replay["attempt"], replay["status"], replay["requeue"]) == (3, "GAVE_UP", None)
    # Its kit lines name attempt 1: on_job_event would not count them for attempt 3.
    assert replay["kit_lines_fed"] == 0 and "20 kit line(s) of the job were not fed" in replay["notes"][-1]
    assert replay["alerts"] == ["attempts_exhausted"]


def test_json_lines_an_ascending_array_and_one_object_read_alike(capsys, tmp_path: Path) -> None:
    entries = json.loads(Path(captured(SUCCEEDED)).read_text())
    newest_first = explain_json(capsys, captured(SUCCEEDED))["entries"]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    (tmp_path / "b.json").write_text(json.dumps(list(reversed(entries))))
    strip = lambda report: [{k: v for k, v in e.items() if k != "position"} for e in report]  # noqa: E731
    for other in ("a.jsonl", "b.json"):
        assert strip(explain_json(capsys, str(tmp_path / other))["entries"]) == strip(newest_first)
    (tmp_path / "one.json").write_text(json.dumps(entries[0], indent=2))
    [only] = explain_json(capsys, str(tmp_path / "one.json"))["entries"]
    assert only["signal"] == "succeeded"


def test_entries_that_are_no_job_entries_are_explained_as_ignored(capsys, tmp_path: Path) -> None:
    foreign = json.loads((EVENTS_DIR / "log_entries" / "foreign_audit_log.json").read_text())
    (tmp_path / "mixed.json").write_text(json.dumps([foreign, "text", {"resource": {"type": "ml_job"}}]))
    entries = explain_json(capsys, str(tmp_path / "mixed.json"))["entries"]
    assert [e["action"] for e in entries] == ["ignored"] * 3
    assert [e["explanation"] for e in entries] == [
        "ignored: resource type 'audited_resource' is not ml_job; acknowledged, nothing read",
        "ignored: message data is not a JSON object; acknowledged, nothing read",
        "ignored: resource.labels.job_id is missing or not a job id; acknowledged, nothing read",
    ]


def test_a_per_preemption_service_line_is_counted_by_its_insert_id(capsys, tmp_path: Path) -> None:
    # The emulator's rich profile (never needed): its line names the job's preemptions itself.
    line = json.loads((EVENTS_DIR / "log_entries" / "service_preempted.json").read_text())
    described = json.loads(Path(job(SUCCEEDED)).read_text())
    described["name"] = described["name"].replace("2238490567215693824", "4512345678901234567")
    (tmp_path / "job.json").write_text(json.dumps(described))
    (tmp_path / "e.json").write_text(json.dumps([line, line]))  # delivered twice: counted once
    report = explain_json(capsys, str(tmp_path / "e.json"), "--job", str(tmp_path / "job.json"))
    assert "its insertId a4 counts as one preemption" in report["entries"][0]["explanation"]
    assert (report["replay"]["preemption_lines_fed"], report["replay"]["preemptions"]) == (2, "1")


def test_text_output_names_each_entry_and_the_outcome(capsys) -> None:
    assert main(["explain", captured(STOCKOUT), "--job", job(STOCKOUT)]) == 0
    out = capsys.readouterr().out
    assert "#21  2026-11-30T02:01:10Z  job 5837261940182736896  workerpool0-0  INFO  KIT run_started run=0" in out
    assert "→ kit evidence: counts run 0 of attempt 1 (request llm-finetune-7b) — no Vertex read" in out
    assert "  status:       REQUEUED (attempt 1: requeued)" in out
    assert "  preemptions:  7" in out
    assert "  re-queue:     attempt 2 (SPOT in us-central1, stockout)" in out


@pytest.mark.parametrize(
    ("content", "job_content", "message"),
    [
        ("not json\n", None, "line 1 is not JSON"),
        ("42", None, "holds a JSON int, not LogEntries"),
        ("[]", "[1]", "not a JSON object (a CustomJob)"),
        ("[]", "{", "the job file is not JSON"),
        ("[]", '{"state": 3}', "names no CustomJob"),
        ("[]", '{"name": "projects/p/locations/l/customJobs/1", "state": "NOPE"}', "state 'NOPE' is not a JobState"),
    ],
)
def test_unreadable_input_exits_2_with_one_line(
    capsys, tmp_path: Path, content: str, job_content: str | None, message: str
) -> None:
    (tmp_path / "e.json").write_text(content)
    args = ["explain", str(tmp_path / "e.json")]
    if job_content is not None:
        (tmp_path / "j.json").write_text(job_content)
        args += ["--job", str(tmp_path / "j.json")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("spotjobs explain: ") and message in err and err.count("\n") == 1


def test_a_missing_file_exits_2(capsys, tmp_path: Path) -> None:
    assert main(["explain", str(tmp_path / "absent.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_entries_of_other_jobs_are_explained_but_not_fed(capsys, tmp_path: Path) -> None:
    both = json.loads(Path(captured(SUCCEEDED)).read_text()) + json.loads(Path(captured(STOCKOUT)).read_text())
    (tmp_path / "both.json").write_text(json.dumps(both))
    report = explain_json(capsys, str(tmp_path / "both.json"), "--job", job(SUCCEEDED))
    assert len(report["entries"]) == 46
    replay = report["replay"]
    assert (replay["status"], replay["preemptions"], replay["kit_lines_fed"]) == ("SUCCEEDED", "2", 9)
    assert replay["notes"] == ["26 entries of other jobs were not fed to this job's decision"]
