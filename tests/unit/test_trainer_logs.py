"""`spotjobs logs` on fake sources: order across attempts and restarts, run marks, paging, the 429
backoff, `--follow` ending with the request, and kit lines trusted only when their attempt signed
them (issue 43, defect 10)."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
import requests
from spotjobs_kit.lines import format_line as kit_line

from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from spotjobs.cli.logs import format_line, print_lines
from spotjobs.trainer_logs import (
    MAX_TRIES,
    PAGE_SIZE,
    CloudLogging,
    EmulatorLogs,
    LogLine,
    LogsUnavailable,
    parse_since,
    request_lines,
)

PARENT = "projects/p/locations/us-central1/customJobs/"
CREATED = "2026-01-01T00:00:00.000Z"


def key_of(attempt: int) -> str:
    """The kit key the ledger keeps for attempt n of r1 (each attempt draws its own)."""
    return f"key-of-attempt-{attempt}"


def record(*jobs: str, status: RequestStatus = RequestStatus.SUCCEEDED) -> RequestRecord:
    attempts = [
        Attempt(n, "us-central1", "SPOT", claimed_at=CREATED, job=PARENT + job, kit_key=key_of(n))
        for n, job in enumerate(jobs, 1)
    ]
    return RequestRecord("r1", {}, "gs://b/r1", status=status, attempts=attempts, created_at=CREATED)


SIGNED = object()  # sign with the named attempt's own key


def kit(event: str, attempt: int, run: int, *, key: Any = SIGNED, request_id: str = "r1", **fields: Any) -> str:
    """A kit line naming `attempt`: signed by that attempt's containers unless `key` says otherwise
    (None: unsigned, as anyone may write one; another string: signed with that key)."""
    signing_key = key_of(attempt) if key is SIGNED else key
    return kit_line(event, {"request_id": request_id, "attempt": attempt, "run": run, **fields}, key=signing_key)


def at(second: int) -> str:
    return f"2026-01-01T00:00:{second:02d}.000000Z"


def output(*lines: tuple[int, str]) -> list[dict[str, Any]]:
    """The emulator's job output: (worker start, line), a second apart."""
    return [{"run": start, "stream": "stdout", "line": line, "time": at(i)} for i, (start, line) in enumerate(lines)]


def marks(lines: list[LogLine]) -> list[tuple[int, int | None, str | None, str]]:
    return [(line.attempt, line.run, line.event, line.text) for line in lines]


def test_lines_of_every_attempt_and_restart_in_order_marked_with_their_run() -> None:
    outputs = {
        "111": output(
            (1, "importing torch"),
            (1, kit("run_started", 1, 0, resumed_step=0)),
            (1, "step 10 loss 0.5"),
            (1, kit("preempted", 1, 0, step=12)),
            (2, "importing torch"),  # the restart's first line: no kit line has said its run yet
            (2, kit("run_started", 1, 1, resumed_step=10)),
            (2, "step 20 loss 0.4"),
        ),
        "222": output((1, kit("run_started", 2, 0, resumed_step=20)), (1, "step 30 loss 0.3")),
    }
    source = EmulatorLogs("http://emulator", get_json=lambda url: {"output": outputs[url.rsplit("/", 1)[-1]]})

    lines = list(request_lines(lambda: record("111", "222"), source))

    assert [(a, run, event) for a, run, event, _ in marks(lines)] == [
        (1, None, None),
        (1, 0, "run_started"),
        (1, 0, None),
        (1, 0, "preempted"),
        (1, None, None),
        (1, 1, "run_started"),
        (1, 1, None),
        (2, 0, "run_started"),
        (2, 0, None),
    ]
    assert lines[2].text == "step 10 loss 0.5"
    assert lines[3].text.startswith("spotjobs-kit preempted")  # a JSON line shows its message


def test_since_and_one_attempt_only() -> None:
    outputs = {"111": output((1, "old"), (1, "new")), "222": output((1, "second attempt"))}
    source = EmulatorLogs("http://emulator", get_json=lambda url: {"output": outputs[url.rsplit("/", 1)[-1]]})

    lines = list(request_lines(lambda: record("111", "222"), source, attempt=1, since=at(1)))

    assert [line.text for line in lines] == ["new"]


class FakeResponse:
    def __init__(self, status_code: int, document: Any = None) -> None:
        self.status_code = status_code
        self._document = document
        self.text = json.dumps(document)

    def json(self) -> Any:
        return self._document


class FakeSession:
    """entries.list answers, in order; records every request body."""

    def __init__(self, *answers: FakeResponse | Exception) -> None:
        self.answers = list(answers)
        self.bodies: list[dict[str, Any]] = []

    def post(self, url: str, json: dict[str, Any], timeout: float) -> FakeResponse:
        self.bodies.append(json)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def entry(job_id: str, second: int, text: str, *, task: str = "workerpool0-0", **payload: Any) -> dict[str, Any]:
    body = {"jsonPayload": payload} if payload else {"textPayload": text}
    return {
        "insertId": f"{job_id}-{second}",
        "timestamp": at(second),
        "severity": "INFO",
        "resource": {"type": "ml_job", "labels": {"job_id": job_id, "task_name": task}},
        **body,
    }


def test_cloud_logging_pages_through_every_entry_of_every_job_in_one_query() -> None:
    started = json.loads(kit("run_started", 1, 0))
    session = FakeSession(
        FakeResponse(200, {"entries": [entry("111", 1, "", **started)], "nextPageToken": "t1"}),
        FakeResponse(200, {"nextPageToken": "t2"}),  # an empty page that is not the end
        FakeResponse(
            200,
            {
                "entries": [
                    entry("222", 5, "attempt 2 says hi"),
                    # Vertex's teardown of attempt 1, stamped after attempt 2 began: still attempt 1's.
                    entry("111", 6, "Finished tearing down training program.", task="service"),
                ]
            },
        ),
    )
    source = CloudLogging("p", session, sleep=lambda seconds: None)

    lines = list(request_lines(lambda: record("111", "222"), source, since=at(0)))

    assert marks(lines) == [
        (1, 0, "run_started", started["message"]),
        (1, None, None, "Finished tearing down training program."),
        (2, None, None, "attempt 2 says hi"),
    ]
    assert lines[1].service and not lines[0].service
    assert [body.get("pageToken") for body in session.bodies] == [None, "t1", "t2"]
    first = session.bodies[0]
    assert first["resourceNames"] == ["projects/p"] and first["pageSize"] == PAGE_SIZE
    assert first["orderBy"] == "timestamp asc"
    assert first["filter"] == (
        f'resource.type="ml_job" AND resource.labels.job_id=("111" OR "222") AND timestamp>="{at(0)}"'
    )


def test_a_throttled_read_waits_longer_each_time_then_goes_on() -> None:
    waits: list[float] = []
    session = FakeSession(
        FakeResponse(429),
        FakeResponse(503),
        requests.ConnectionError("connection reset"),
        FakeResponse(200, {"entries": [entry("111", 1, "hi")]}),
    )

    lines = list(request_lines(lambda: record("111"), CloudLogging("p", session, sleep=waits.append)))

    assert [line.text for line in lines] == ["hi"]
    assert waits == [2.0, 4.0, 8.0]


def test_a_read_throttled_every_time_gives_up_and_a_refusal_at_once() -> None:
    waits: list[float] = []
    always = CloudLogging("p", FakeSession(*[FakeResponse(429)] * MAX_TRIES), sleep=waits.append)
    with pytest.raises(LogsUnavailable, match="429"):
        list(request_lines(lambda: record("111"), always))
    assert len(waits) == MAX_TRIES - 1 and waits[-1] == 60.0

    refused = CloudLogging("p", FakeSession(FakeResponse(403, {"error": "denied"})), sleep=waits.append)
    with pytest.raises(LogsUnavailable, match="403"):
        list(request_lines(lambda: record("111"), refused))
    assert len(waits) == MAX_TRIES - 1


def test_follow_prints_each_line_once_and_ends_one_read_after_the_request_has_ended() -> None:
    statuses = iter([RequestStatus.RUNNING, RequestStatus.RUNNING, RequestStatus.SUCCEEDED, RequestStatus.SUCCEEDED])
    produced: list[tuple[int, str]] = [(1, kit("run_started", 1, 0))]
    polls: list[float] = []

    def poll(seconds: float) -> None:  # a line arrives between two polls (the last one stored late)
        polls.append(seconds)
        produced.append((1, f"line {len(polls)}"))

    source = EmulatorLogs("http://emulator", get_json=lambda url: {"output": output(*produced)})

    lines = list(
        request_lines(lambda: record("111", status=next(statuses)), source, follow=True, interval=3, sleep=poll)
    )

    assert [line.text for line in lines[1:]] == ["line 1", "line 2", "line 3"]
    assert [line.run for line in lines] == [0, 0, 0, 0]
    # Two polls while it runs, one after the read that found it ended; then no more.
    assert polls == [3, 3, 3]


def test_printed_lines_escape_what_the_job_wrote_and_mark_kit_and_vertex_lines() -> None:
    plain = LogLine(1, "111", "k1", at(1), "INFO", "evil \x1b[2J text", run=0)
    service = LogLine(1, "111", "k2", at(2), "INFO", "Job is running.", service=True)
    source = EmulatorLogs("http://emulator", get_json=lambda url: {"output": output((1, kit("preempted", 1, 0)))})
    [preempted] = request_lines(lambda: record("111"), source)

    assert format_line(plain) == f"{at(1)}  attempt 1 run 0  evil \\x1b[2J text\n"
    assert format_line(service) == f"{at(2)}  attempt 1        vertex  Job is running.\n"
    assert "attempt 1 run 0  kit:preempted  spotjobs-kit preempted" in format_line(preempted)


def test_json_output_is_one_object_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    source = EmulatorLogs("http://emulator", get_json=lambda url: {"output": output((1, "a"), (1, "b"))})
    args = argparse.Namespace(attempt=None, follow=False, interval=1.0, json=True)

    print_lines(args, source, lambda: record("111"), None)

    printed = [json.loads(raw) for raw in capsys.readouterr().out.splitlines()]
    assert [(p["attempt"], p["job_id"], p["text"], p["source"]) for p in printed] == [
        (1, "111", "a", "trainer"),
        (1, "111", "b", "trainer"),
    ]


def test_the_emulator_forgetting_a_job_means_no_lines_and_an_emulator_down_says_so() -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Forgetful(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_error(404)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forgetful)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        forgotten = EmulatorLogs(f"http://127.0.0.1:{server.server_port}")
        assert list(request_lines(lambda: record("111"), forgotten)) == []
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(LogsUnavailable, match="cannot be reached"):
        list(request_lines(lambda: record("111"), EmulatorLogs(f"http://127.0.0.1:{server.server_port}")))


def test_logs_of_an_attempt_the_request_never_had_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from google.cloud import storage

    from shared.ledger.store import LedgerStore
    from spotjobs.cli import main

    monkeypatch.setattr(storage, "Client", lambda project: type("Client", (), {"bucket": lambda self, name: None})())
    monkeypatch.setattr(LedgerStore, "get", lambda self, request_id: record("111"))

    assert main(["logs", "r1", "--attempt", "2"]) == 1
    assert "r1 has no attempt 2" in capsys.readouterr().err


def test_since_is_a_time_or_a_duration_ago() -> None:
    assert parse_since("2026-01-01T01:00:00+01:00") == "2026-01-01T00:00:00.000000Z"
    assert parse_since("90s") < parse_since("1s")
    with pytest.raises(ValueError, match="duration such as 30m"):
        parse_since("yesterday")


def emulator(outputs: dict[str, list[dict[str, Any]]]) -> EmulatorLogs:
    return EmulatorLogs("http://emulator", get_json=lambda url: {"output": outputs[url.rsplit("/", 1)[-1]]})


def test_an_unsigned_forged_kit_line_is_marked_and_renumbers_no_run() -> None:
    """The issue's case: anyone may log `preempted run=7` under the request's job id. It is shown
    as unsigned, never as the kit's, and the request's real later lines keep their run."""
    source = emulator(
        {
            "111": output(
                (1, kit("run_started", 1, 0, resumed_step=0)),
                (1, "step 10 loss 0.5"),
                (1, kit("preempted", 1, 7, key=None, step=10)),
                (1, "step 20 loss 0.4"),
            )
        }
    )

    lines = list(request_lines(lambda: record("111"), source))

    assert [(line.run, line.event) for line in lines] == [(0, "run_started"), (0, None), (0, None), (0, None)]
    assert [line.unsigned for line in lines] == [False, False, True, False]
    shown = format_line(lines[2])
    assert "kit:" not in shown and "attempt 1 run 0  [unsigned]  spotjobs-kit preempted" in shown
    assert "kit:run_started" in format_line(lines[0])


def test_a_kit_line_signed_for_another_attempt_or_request_is_unsigned_for_this_one() -> None:
    """The key is the attempt's: a line signed with attempt 2's key (or naming another attempt or
    request with the right key) under attempt 1's job is not attempt 1's word."""
    source = emulator(
        {
            "111": output(
                (1, kit("run_started", 1, 0)),
                (1, kit("preempted", 1, 5, key=key_of(2))),  # another attempt's key
                (1, kit("preempted", 1, 5, request_id="r2")),  # another request, attempt 1's key
                (1, kit("preempted", 2, 5, key=key_of(1))),  # names attempt 2, signed with attempt 1's
            ),
            "222": output((1, kit("run_started", 1, 3))),  # attempt 1's own line, under attempt 2's job
        }
    )

    lines = list(request_lines(lambda: record("111", "222"), source))

    assert [(line.attempt, line.run, line.event) for line in lines] == [
        (1, 0, "run_started"),
        (1, 0, None),
        (1, 0, None),
        (1, 0, None),
        (2, None, None),
    ]
    assert [line.unsigned for line in lines] == [False, True, True, True, True]


def test_a_record_without_kit_keys_trusts_no_kit_line() -> None:
    """An attempt claimed before kit keys (or a document without one) verifies nothing."""
    keyless = record("111")
    keyless.attempts[0].kit_key = None
    source = emulator({"111": output((1, kit("run_started", 1, 0)), (1, kit("preempted", 1, 0, key=None)))})

    lines = list(request_lines(lambda: keyless, source))

    assert [(line.run, line.event, line.unsigned) for line in lines] == [(None, None, True), (None, None, True)]


def test_cloud_logging_and_json_output_mark_a_forged_line(capsys: pytest.CaptureFixture[str]) -> None:
    started = json.loads(kit("run_started", 1, 0))
    forged = json.loads(kit("preempted", 1, 7, key=None, step=10))
    session = FakeSession(
        FakeResponse(
            200,
            {
                "entries": [
                    entry("111", 1, "", **started),
                    entry("111", 2, "", **forged),
                    entry("111", 3, "step 20 loss 0.4"),
                ]
            },
        )
    )
    args = argparse.Namespace(attempt=None, follow=False, interval=1.0, json=True)

    print_lines(args, CloudLogging("p", session, sleep=lambda seconds: None), lambda: record("111"), None)

    printed = [json.loads(raw) for raw in capsys.readouterr().out.splitlines()]
    assert [(p["run"], p["event"], p["signed"], p["unsigned_event"]) for p in printed] == [
        (0, "run_started", True, None),
        (0, None, False, "preempted"),
        (0, None, False, None),
    ]


def test_follow_marks_a_forged_line_that_arrives_while_it_follows() -> None:
    statuses = iter([RequestStatus.RUNNING, RequestStatus.SUCCEEDED, RequestStatus.SUCCEEDED])
    produced: list[tuple[int, str]] = [(1, kit("run_started", 1, 0))]

    def poll(seconds: float) -> None:
        produced.extend([(1, kit("preempted", 1, 7, key=None)), (1, "step 20")])

    source = EmulatorLogs("http://emulator", get_json=lambda url: {"output": output(*produced)})

    lines = list(request_lines(lambda: record("111", status=next(statuses)), source, follow=True, sleep=poll))

    assert [(line.run, line.event, line.unsigned) for line in lines[:3]] == [
        (0, "run_started", False),
        (0, None, True),
        (0, None, False),
    ]
