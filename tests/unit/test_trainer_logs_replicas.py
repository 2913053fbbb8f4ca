"""`spotjobs logs` of a multi-replica job (issue 44): each line says which replica wrote it, and one
replica restarting alone does not blur another's runs."""

from __future__ import annotations

from typing import Any

from spotjobs_kit.lines import format_line as kit_line

from shared.ledger.records import Attempt, RequestRecord
from spotjobs.cli.logs import format_line
from spotjobs.trainer_logs import CloudLogging, EmulatorLogs, request_lines

PRIMARY, WORKER = "workerpool0-0", "workerpool1-0"
KEY = "key-of-attempt-1"
CREATED = "2026-01-01T00:00:00.000Z"


def record(job: str) -> RequestRecord:
    attempt = Attempt(
        1,
        "us-central1",
        "SPOT",
        claimed_at=CREATED,
        job=f"projects/p/locations/us-central1/customJobs/{job}",
        kit_key=KEY,
    )
    return RequestRecord("r1", {}, "gs://b/r1", attempts=[attempt], created_at=CREATED)


def kit(event: str, run: int, **fields: Any) -> str:
    """A kit line of attempt 1 of r1, signed with its key."""
    return kit_line(event, {"request_id": "r1", "attempt": 1, "run": run, **fields}, key=KEY)


def at(second: int) -> str:
    return f"2026-01-01T00:00:{second:02d}.000000Z"


def replica_output(*lines: tuple[str, int, str]) -> list[dict[str, Any]]:
    """The emulator's job output of several replicas: (replica, its start, line), a second apart."""
    return [
        {"replica": replica, "run": start, "stream": "stdout", "line": line, "time": at(i)}
        for i, (replica, start, line) in enumerate(lines)
    ]


def test_lines_of_two_replicas_carry_their_replica_and_the_primarys_run() -> None:
    outputs = {
        "111": replica_output(
            (PRIMARY, 1, kit("run_started", 0, resumed_step=0)),
            (WORKER, 1, "worker joined"),
            (PRIMARY, 1, "step 10 loss 0.5"),
            # the worker's VM is reclaimed and it restarts alone (the emulator's default): its
            # second start is no new run of the primary's
            (WORKER, 2, "worker joined again"),
            (PRIMARY, 1, "step 20 loss 0.4"),
        )
    }
    source = EmulatorLogs("http://vertex", get_json=lambda url: {"output": outputs[url.rsplit("/", 1)[1]]})
    lines = list(request_lines(lambda: record("111"), source))
    assert [(line.replica, line.run, line.text) for line in lines][1:] == [
        (WORKER, 0, "worker joined"),
        (PRIMARY, 0, "step 10 loss 0.5"),
        (WORKER, 0, "worker joined again"),
        (PRIMARY, 0, "step 20 loss 0.4"),
    ]
    assert lines[1].to_json()["replica"] == WORKER
    assert f"run 0 {WORKER}" in format_line(lines[1])


def test_cloud_logging_lines_take_their_replica_from_the_task_name() -> None:
    entry = {
        "insertId": "i1",
        "timestamp": at(1),
        "resource": {"type": "ml_job", "labels": {"job_id": "111", "task_name": WORKER}},
        "textPayload": "worker joined",
    }
    service = {
        **entry,
        "insertId": "i2",
        "resource": {"type": "ml_job", "labels": {"job_id": "111", "task_name": "service"}},
    }
    assert CloudLogging._line(entry, {"111": 1}).replica == WORKER
    assert CloudLogging._line(service, {"111": 1}).replica is None
