"""The ml_job LogEntry shapes the Vertex emulator publishes."""

from __future__ import annotations

import json
from datetime import datetime

from devstack.vertex.logs import LogEntryFactory, nonzero_exit, preempted_and_restarting, stockout


def test_service_lines_use_json_payload_and_the_ml_job_resource() -> None:
    entry = LogEntryFactory().service("proj", "123", "INFO", "Job is running.")

    assert entry["jsonPayload"] == {"message": "Job is running."}
    assert "textPayload" not in entry
    assert entry["resource"] == {
        "type": "ml_job",
        "labels": {"project_id": "proj", "job_id": "123", "task_name": "service"},
    }
    assert entry["logName"] == "projects/proj/logs/ml.googleapis.com%2F123"
    assert entry["severity"] == "INFO"
    assert entry["timestamp"].endswith("Z")
    assert datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))


def test_container_lines_use_text_payload_with_stream_severity() -> None:
    factory = LogEntryFactory()

    out = factory.container("proj", "123", "stdout", "step 10 loss 0.3")
    err = factory.container("proj", "123", "stderr", "Traceback (most recent call last):")

    assert (out["severity"], out["textPayload"]) == ("INFO", "step 10 loss 0.3")
    assert (err["severity"], err["textPayload"]) == ("ERROR", "Traceback (most recent call last):")
    assert out["resource"]["labels"]["task_name"] == "workerpool0-0"
    assert out["insertId"] != err["insertId"]


def test_structured_container_lines_become_json_payload() -> None:
    factory = LogEntryFactory()
    line = json.dumps({"severity": "warning", "message": "checkpoint slow", "step": 4})

    entry = factory.container("proj", "123", "stderr", line)
    no_message = factory.container("proj", "123", "stdout", '{"step": 4}')

    assert entry["severity"] == "WARNING"
    assert entry["jsonPayload"] == {"severity": "warning", "message": "checkpoint slow", "step": 4}
    assert no_message["textPayload"] == '{"step": 4}'


def test_failure_texts_match_what_classifiers_look_for() -> None:
    assert nonzero_exit(1) == (
        "The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error."
    )
    assert "preempted" in preempted_and_restarting(3)
    assert "restart 3 of 6" in preempted_and_restarting(3)
    assert "STOCKOUT" in stockout(7) and "preempted 7 times" in stockout(7)
    assert "STOCKOUT" not in preempted_and_restarting(6)  # only the final failure says STOCKOUT
