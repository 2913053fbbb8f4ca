"""`spotjobs alerts` and `spotjobs dead-letters [redrive]` through the real stack.

A stack of its own (submit_job only): these commands acknowledge what they read on the stack's
pull subscriptions, which the session stack's tests read too; and the dead letters are made by
taking the Vertex emulator down, so Pub/Sub really gives up on a job request after
max_delivery_attempts (5) failed deliveries, each logged with its reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.processes import REPO_ROOT
from devstack.samples import job_request
from tests.conftest import isolated_stack

pytestmark = pytest.mark.stack

DEAD_LETTER_TIMEOUT = 120.0


@pytest.fixture(scope="module")
def ops_stack() -> Iterator[Any]:
    with isolated_stack(functions=("submit_job",), max_delivery_attempts=5) as stack:
        yield stack


def spotjobs(stack: Any, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spotjobs.cli", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **stack.env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def publish_alert(stack: Any, kind: str, request_id: str, message: str, severity: str = "ERROR") -> None:
    from shared.alerts import Alert

    alert = Alert(kind=kind, severity=severity, message=message, request_id=request_id)
    stack.publish("ops_alerts", json.dumps(alert.to_json()).encode(), **alert.attributes())


def test_alerts_prints_one_line_each_and_acknowledges_only_what_it_printed(ops_stack: Any) -> None:
    publish_alert(ops_stack, "job_failed", "ops-a", "the trainer exited 1")
    publish_alert(ops_stack, "attempts_exhausted", "ops-b", "gave up after 4 attempts")
    publish_alert(ops_stack, "job_failed", "ops-c", "the trainer exited 2", severity="WARNING")

    first = spotjobs(ops_stack, "alerts", "--kind", "job_failed")
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert len(lines) == 2
    fields = lines[0].split()
    assert fields[1:4] == ["ERROR", "job_failed", "ops-a"] and "exited 1" in lines[0]
    assert fields[0].endswith("Z")  # the alert's time comes first
    assert "ops-c" in lines[1] and "WARNING" in lines[1]

    # The attempts_exhausted alert was left on the subscription, and is there for the next reader.
    second = spotjobs(ops_stack, "alerts", "--json")
    assert second.returncode == 0, second.stderr
    printed = [json.loads(line) for line in second.stdout.splitlines()]
    assert [(a["kind"], a["request_id"]) for a in printed] == [("attempts_exhausted", "ops-b")]
    assert spotjobs(ops_stack, "alerts").stdout == ""


def test_alerts_shows_a_real_alert_of_a_function_by_request(ops_stack: Any) -> None:
    body = job_request("ops-invalid-1", ["python", "-c", "pass"], max_attempts=99)
    ops_stack.publish("job_requests", body)
    deadline = time.monotonic() + 60
    lines: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not lines:
        result = spotjobs(ops_stack, "alerts", "--request-id", "ops-invalid-1", "--json")
        lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [a["kind"] for a in lines] == ["invalid_request"]
    assert "max_attempts" in json.dumps(lines[0]["details"])


def test_alerts_follow_prints_alerts_as_they_arrive_and_stops_on_sigint(ops_stack: Any) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "spotjobs.cli", "alerts", "--follow", "--request-id", "ops-follow"],
        cwd=REPO_ROOT,
        env={**os.environ, **ops_stack.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.0)
        publish_alert(ops_stack, "job_stuck", "ops-other", "not for this follower")
        publish_alert(ops_stack, "job_stuck", "ops-follow", "no progress for 2 h")
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "job_stuck" in line and "ops-follow" in line and "no progress" in line
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
    # What the follower filtered out is still there.
    rest = spotjobs(ops_stack, "alerts", "--json")
    assert [json.loads(line)["request_id"] for line in rest.stdout.splitlines()] == ["ops-other"]


def dead_letters(stack: Any) -> list[dict[str, Any]]:
    result = spotjobs(stack, "dead-letters", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_dead_letters_list_says_where_from_how_often_and_why_then_redrive_sends_each_once(
    ops_stack: Any,
) -> None:
    assert dead_letters(ops_stack) == []
    assert spotjobs(ops_stack, "dead-letters").stdout.strip() == "no dead-lettered messages"

    ops_stack.stop_vertex()
    try:
        body = job_request("ops-dead-1", ["python", "-c", "pass"])
        ops_stack.publish("job_requests", body, team="vision")
        letters = ops_stack.wait_for(lambda: dead_letters(ops_stack), DEAD_LETTER_TIMEOUT, "a dead letter")
    finally:
        ops_stack.start_vertex_again()
    (letter,) = letters
    assert letter["source_subscription"] == "submit-job-push"
    assert letter["function"] == "submit_job" and letter["source_topic"] == "job-requests"
    assert letter["delivery_count"] == 5
    assert letter["attributes"] == {"team": "vision"}
    assert letter["summary"] == "request_id=ops-dead-1"
    assert letter["reason_source"] == "local logs"
    assert letter["failures"] and "ConnectionError" in json.dumps(letter["failures"])
    # Listing acknowledged nothing.
    table = spotjobs(ops_stack, "dead-letters")
    assert letter["id"] in table.stdout and "submit-job-push" in table.stdout
    assert letter["reason"] and letter["reason"][:40] in table.stdout.splitlines()[1]

    dry = spotjobs(ops_stack, "dead-letters", "redrive", "--all", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert [(r["id"], r["outcome"]) for r in json.loads(dry.stdout)] == [(letter["id"], "would redrive")]
    assert [d["id"] for d in dead_letters(ops_stack)] == [letter["id"]]

    redriven = spotjobs(ops_stack, "dead-letters", "redrive", "--id", letter["id"], "--json")
    assert redriven.returncode == 0, redriven.stderr
    (result,) = json.loads(redriven.stdout)
    assert result["outcome"] == "redriven" and result["topic"].endswith("/topics/job-requests")
    # Vertex is back: the redriven request is submitted, with its attributes.
    ledger = ops_stack.ledger()
    ops_stack.wait_for(lambda: (r := ledger.get("ops-dead-1")) and r.latest and r.latest.job, 60, "the job")
    assert dead_letters(ops_stack) == []

    # The id is claimed: asked again, it is not sent twice.
    claim = (
        ops_stack.storage().bucket(ops_stack.settings.state_bucket).blob(f"deadletters/redriven/{letter['id']}.json")
    )
    assert json.loads(claim.download_as_bytes())["message_id"] == result["message_id"]
    again = spotjobs(ops_stack, "dead-letters", "redrive", "--id", letter["id"])
    assert again.returncode == 1 and "not found" in again.stdout


def test_redrive_of_an_id_already_claimed_does_not_publish_it_again(ops_stack: Any) -> None:
    from spotjobs.deadletters import DeadLetter, RedriveClaims, redrive

    bucket = ops_stack.storage().bucket(ops_stack.settings.state_bucket)
    letter = DeadLetter(
        id="ops-claimed-1",
        data=b"{}",
        publish_time=None,
        attributes={"CloudPubSubDeadLetterSourceSubscription": "submit-job-push"},
    )
    sent: list[str] = []

    def publish(topic: str, data: bytes, attributes: dict[str, str]) -> str:
        sent.append(topic)
        return f"m{len(sent)}"

    first, acked_first = redrive([letter], claims=RedriveClaims(bucket), publish=publish, topic_path=str)
    second, acked_second = redrive([letter], claims=RedriveClaims(bucket), publish=publish, topic_path=str)
    assert [r.outcome for r in first + second] == ["redriven", "already redriven"]
    assert sent == ["job_requests"] and acked_first == acked_second == [letter]
