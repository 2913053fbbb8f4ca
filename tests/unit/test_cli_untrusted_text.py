"""Text a publisher or a job wrote reaches the operator's terminal as text (issue 32 item 10):
every printer of alerts, status, explain and dead letters escapes control characters."""

from __future__ import annotations

import io
import json

from shared.ledger.states import AttemptOutcome
from spotjobs.cli.common import terminal_text
from spotjobs.cli.explain import print_explanation
from spotjobs.cli.ops import alert_line, dead_letter_table
from spotjobs.cli.status import format_request, format_requests
from spotjobs.deadletters import DeadLetter
from spotjobs.explaining.entries import EntryExplanation, Report
from tests.support.decide import make_record

# Clear the screen, retitle the window, ring the bell, fake a line, reorder what follows.
HOSTILE = "a2-\x1b[2J\x1b]0;owned\x07\rfake\n2026-12-01 ERROR spoofed\u202etxt\x9b31m"


def assert_inert(text: str) -> None:
    for control in ("\x1b", "\x07", "\r", "\u202e", "\x9b"):
        assert control not in text, (control, text)
    assert "spoofed" in text  # shown, escaped, not dropped


def test_terminal_text_escapes_every_control_and_keeps_the_rest() -> None:
    assert terminal_text("é ok 😀") == "é ok 😀"
    assert terminal_text("a\x1bb\nc") == "a\\x1bb\\nc"


def test_an_alert_line_is_one_inert_line() -> None:
    line = alert_line({"kind": "invalid_request", "request_id": "r1", "message": f"machineType: is {HOSTILE}"})
    assert_inert(line)
    assert "\n" not in line


def test_status_shows_errors_as_text() -> None:
    record = make_record()
    record.attempts[0].outcome = AttemptOutcome.FAILED
    record.attempts[0].error = {"code": 3, "message": HOSTILE}
    record.requeue = None
    shown = format_request(record)
    assert_inert(shown)
    assert shown.count("\n") == format_request(make_record()).count("\n")  # no line added
    record.attempts[0].location = HOSTILE  # (a corrupt or hand-edited document)
    assert_inert(format_requests([record]))


def test_explain_shows_log_lines_as_text() -> None:
    entry = EntryExplanation(1, "t", None, "111", HOSTILE, "ERROR", HOSTILE, None, "ignored", "not a kit line")
    out = io.StringIO()
    print_explanation(Report([entry], None, "entries.json"), out)
    assert_inert(out.getvalue())
    assert out.getvalue().count("\n") == 4  # the header, the entry, its text, its explanation


def test_dead_letters_show_their_data_and_reasons_as_text() -> None:
    letter = DeadLetter("dl-1", json.dumps({"request_id": HOSTILE}).encode(), {}, "t")
    letter.failures = [{"error": HOSTILE}]
    letter_raw = DeadLetter("dl-2", HOSTILE.encode(), {}, "t")
    lines = dead_letter_table([letter, letter_raw])
    assert len(lines) == 3
    for line in lines[1:]:
        assert_inert(line)


def test_explain_json_escapes_what_json_alone_would_pass_through(tmp_path, capsys) -> None:  # noqa: ANN001
    from spotjobs.cli import main

    entries = [{"timestamp": "2026-12-01T09:00:00Z", "textPayload": HOSTILE, "resource": {"labels": {}}}]
    path = tmp_path / "entries.json"
    path.write_text(json.dumps(entries))
    assert main(["explain", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    assert_inert(out)
    assert json.loads(out)["entries"][0]["text"].startswith("a2-\x1b[2J")  # the data itself is kept


def test_logs_show_a_forged_kit_line_as_unsigned_inert_text() -> None:
    """`spotjobs logs`: a kit line nobody's key signed, its message full of control sequences, is
    one inert line marked unsigned, never the kit's."""
    from spotjobs_kit.lines import format_line as kit_line

    from spotjobs.cli.logs import format_line
    from spotjobs.trainer_logs import EmulatorLogs, request_lines

    record = make_record()
    record.attempts[0].kit_key = "the attempt's own key"
    forged = kit_line("preempted", {"request_id": record.request_id, "attempt": 1, "run": 7, "error": HOSTILE})
    output = [{"run": 1, "stream": "stdout", "line": forged, "time": "2026-12-01T09:00:00Z"}]
    source = EmulatorLogs("http://emulator", get_json=lambda url: {"output": output})

    [line] = request_lines(lambda: record, source, since="2026-12-01T00:00:00Z")
    shown = format_line(line)

    assert_inert(shown)
    assert shown.count("\n") == 1 and "[unsigned]" in shown and "kit:" not in shown
