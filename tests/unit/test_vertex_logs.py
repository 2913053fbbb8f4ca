"""The ml_job LogEntry shapes the Vertex emulator publishes, per signal profile, and the sink's
filter."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from devstack.vertex.logs import (
    JOB_EVENTS_SINK_FILTER,
    LogEntryFactory,
    job_events_sink_admits,
    nonzero_exit,
    preempted_and_restarting,
    stockout,
)
from devstack.vertex.signals import DEFAULT_PROFILE, DOCUMENTED, RICH, profile

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCUMENTED_SERVICE_TEXTS = {
    "Waiting for job to be provisioned.",
    "Job is preparing.",
    "Job is running.",
    "Tearing down training program.",
    "Finished tearing down training program.",
    "Job completed successfully.",
    "Job failed.",
}


def test_the_default_profile_is_documented() -> None:
    assert DEFAULT_PROFILE == DOCUMENTED
    with pytest.raises(ValueError, match="signals must be one of"):
        profile("chatty")


def test_documented_service_lines_are_text_payload_at_info_with_the_ml_job_resource() -> None:
    entry = LogEntryFactory().service("proj", "123", "INFO", "Job is running.")

    assert entry["textPayload"] == "Job is running."
    assert "jsonPayload" not in entry
    assert entry["resource"] == {
        "type": "ml_job",
        "labels": {"project_id": "proj", "job_id": "123", "task_name": "service"},
    }
    assert entry["logName"] == "projects/proj/logs/ml.googleapis.com%2F123"
    assert entry["severity"] == "INFO"
    assert entry["timestamp"].endswith("Z")
    assert datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))


def test_rich_service_lines_use_json_payload() -> None:
    entry = LogEntryFactory().service("proj", "123", "ERROR", "Job failed.", as_json=True)

    assert entry["jsonPayload"] == {"message": "Job failed."}
    assert "textPayload" not in entry
    assert entry["resource"]["labels"]["task_name"] == "service"


def test_every_documented_service_line_is_a_documented_text_at_info() -> None:
    documented = profile(DOCUMENTED)
    moments = [
        documented.created(),
        documented.pending(),
        documented.running(),
        documented.preempted(1),
        documented.succeeded(),
        documented.exited(nonzero_exit(1)),
        documented.failed("anything the job's error says"),
        documented.cancelled(),
    ]

    emitted = [line for moment in moments for line in moment]
    assert {severity for severity, _ in emitted} == {"INFO"}
    assert {text for _, text in emitted} <= DOCUMENTED_SERVICE_TEXTS
    assert documented.preempted(1) == [] and documented.cancelled() == []
    # The capture's order: provisioning first, then preparing, then running.
    assert documented.created() + documented.pending() + documented.running() == [
        ("INFO", "Waiting for job to be provisioned."),
        ("INFO", "Job is preparing."),
        ("INFO", "Job is running."),
    ]
    assert documented.succeeded()[-1] == ("INFO", "Job completed successfully.")
    assert documented.failed("x") == [("INFO", "Job failed.")]
    assert not documented.pending_on_restart and not documented.preemption_service_line
    assert documented.default_error_delay_seconds == 60.0


def test_rich_keeps_the_invented_signals() -> None:
    rich = profile(RICH)

    assert rich.preempted(2) == [("WARNING", preempted_and_restarting(2))]
    assert rich.failed("boom") == [("ERROR", "boom"), ("ERROR", "Job failed.")]
    assert rich.created() == [("INFO", "Job is preparing.")]
    assert rich.pending_on_restart and rich.default_error_delay_seconds == 0.0
    assert rich.stockout(7) == (8, stockout(7))


def test_the_stockout_error_says_stockout_in_both_profiles_and_only_rich_uses_code_8() -> None:
    code, message = profile(DOCUMENTED).stockout(7)

    assert "STOCKOUT" in message
    assert code == 2  # UNKNOWN: the code is not documented
    assert profile(RICH).stockout(7)[0] == 8


def test_container_lines_use_text_payload_with_stream_severity() -> None:
    factory = LogEntryFactory()

    out = factory.container("proj", "123", "stdout", "step 10 loss 0.3")
    err = factory.container("proj", "123", "stderr", "Traceback (most recent call last):")

    assert (out["severity"], out["textPayload"]) == ("INFO", "step 10 loss 0.3")
    assert (err["severity"], err["textPayload"]) == ("ERROR", "Traceback (most recent call last):")
    assert out["resource"]["labels"]["task_name"] == "workerpool0-0"
    assert out["logName"] == "projects/proj/logs/ml.googleapis.com%2F123"
    assert out["insertId"] != err["insertId"]


def test_json_container_lines_are_text_in_documented_and_json_payload_in_rich() -> None:
    factory = LogEntryFactory()
    line = json.dumps({"severity": "warning", "message": "checkpoint slow", "step": 4})

    documented = factory.container("proj", "123", "stdout", line)
    rich = factory.container("proj", "123", "stderr", line, structured=True)
    no_message = factory.container("proj", "123", "stdout", '{"step": 4}', structured=True)

    assert (documented["severity"], documented["textPayload"]) == ("INFO", line)
    assert rich["severity"] == "WARNING"
    assert rich["jsonPayload"] == {"severity": "warning", "message": "checkpoint slow", "step": 4}
    assert no_message["textPayload"] == '{"step": 4}'


def test_failure_texts_match_what_classifiers_look_for() -> None:
    assert nonzero_exit(1) == (
        "The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error."
    )
    assert "preempted" in preempted_and_restarting(3)
    assert "restart 3 of 6" in preempted_and_restarting(3)
    assert "STOCKOUT" in stockout(7) and "preempted 7 times" in stockout(7)
    assert "STOCKOUT" not in preempted_and_restarting(6)  # only the final failure says STOCKOUT


# ---- the sink's filter ----


def _terraform_default_filter() -> str:
    text = (REPO_ROOT / "terraform" / "variables.tf").read_text()
    block = text[text.index('variable "job_event_log_filter"') :]
    match = re.search(r"default\s*=\s*<<-EOT\n(.*?)\n\s*EOT", block, re.DOTALL)
    assert match, "job_event_log_filter has a heredoc default"
    return match.group(1)


def _normalised(filter_text: str) -> str:
    return re.sub(r"\s+", " ", filter_text).replace("( ", "(").replace(" )", ")").strip()


def test_the_emulated_sink_filter_is_the_terraform_default() -> None:
    assert _normalised(JOB_EVENTS_SINK_FILTER) == _normalised(_terraform_default_filter())


@pytest.mark.parametrize(
    ("kind", "stream_or_severity", "text", "admitted"),
    [
        ("service", "INFO", "Job is running.", True),
        ("service", "INFO", "anything at all", True),
        ("container", "stdout", "step 10 loss 0.3", False),
        ("container", "stderr", "Traceback (most recent call last):", False),
        ("container", "stdout", "preempted: checkpointing", False),  # INFO: below ERROR
        ("container", "stderr", "SIGTERM: the VM is being Preempted", True),
        ("container", "stderr", "Resources are insufficient in region: us-central1", True),
        ("container", "stderr", "STOCKOUT", True),
        ("container", "stderr", "the spot VM was reclaimed", True),
    ],
)
def test_the_sink_admits_what_the_filter_selects(kind: str, stream_or_severity: str, text: str, admitted: bool) -> None:
    factory = LogEntryFactory()
    entry = (
        factory.service("p", "1", stream_or_severity, text)
        if kind == "service"
        else factory.container("p", "1", stream_or_severity, text)
    )

    assert job_events_sink_admits(entry) is admitted


def test_the_sink_filter_reads_json_payload_messages_and_refuses_other_resources() -> None:
    factory = LogEntryFactory()
    structured = factory.container(
        "p", "1", "stderr", json.dumps({"severity": "ERROR", "message": "preempted"}), structured=True
    )
    foreign = {**factory.service("p", "1", "INFO", "Job is running."), "resource": {"type": "gce_instance"}}

    assert job_events_sink_admits(structured)
    assert not job_events_sink_admits(foreign)


def test_trainer_kit_lines_pass_the_sink_at_any_severity_in_either_payload() -> None:
    from spotjobs_kit.lines import format_line

    line = format_line("preempted", {"request_id": "r1", "attempt": 1, "run": 0, "step": 5})
    factory = LogEntryFactory()
    as_text = factory.container("p", "1", "stdout", line)
    as_json = {**as_text, "jsonPayload": json.loads(line)}
    del as_json["textPayload"]
    chatter = factory.container("p", "1", "stdout", '{"message": "step 5 loss 0.3"}')
    assert job_events_sink_admits(as_text) and job_events_sink_admits(as_json)
    assert not job_events_sink_admits(chatter)
