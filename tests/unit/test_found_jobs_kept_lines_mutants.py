"""shared/found_jobs.py's `note_kept_kit_lines` at edges its mutants found: the kit lines kept while
a job was not indexed count, when its adoption records it, in the order the kit wrote them (run, then
step), and only a line naming the attempt and signed with its key counts, a skipped one stopping
nothing; only a line counted tells the work's total."""

from __future__ import annotations

import json
from datetime import timedelta

from spotjobs_kit.lines import KitRecord, format_line, parse_kit_line

from shared.clock import iso
from shared.deciding.preemptions import kit_runs
from shared.found_jobs import note_kept_kit_lines
from shared.ledger.claims import new_kit_key
from shared.ledger.records import Attempt, RequestRecord
from tests.support.decide import NOW, make_record

KEY = new_kit_key()


def claimed() -> RequestRecord:
    """Attempt 1 claimed ten minutes ago with its kit key, its job about to be recorded."""
    first = Attempt(1, "us-central1", "SPOT", claimed_at=iso(NOW - timedelta(minutes=10)), kit_key=KEY)
    return make_record(attempts=[first])


def kept(
    event: str, run: int, *, key: str | None = KEY, attempt: int = 1, minute: int = 1, **fields: object
) -> KitRecord:
    """A kit line as the adoption reads it back from where on_job_event kept it."""
    time = iso(NOW - timedelta(minutes=10) + timedelta(minutes=minute))
    line = format_line(event, {"request_id": "req-1", "attempt": attempt, "run": run, "time": time, **fields}, key=key)
    parsed = parse_kit_line(json.loads(line))
    assert parsed is not None
    return parsed


def test_kept_checkpoints_count_in_run_order_even_when_a_later_run_resumed_from_an_earlier_step() -> None:
    """Run 1 resumed from step 100 (its step 200 unreadable) and committed step 150: both runs'
    checkpoints count, whatever order the lines were kept in (run 1's step 150 is no older than run
    0's step 200: ordered by step alone, it would be counted first and run 0's dropped as late)."""
    record = claimed()
    lines = [
        kept("checkpoint_committed", 1, step=150, minute=5),
        kept("checkpoint_committed", 0, step=200, minute=2),
    ]

    note_kept_kit_lines(record, 1, lines, NOW)

    attempt = record.attempt(1)
    assert attempt.checkpoints_committed == 2
    assert attempt.last_checkpoint == [1, 150]


def test_a_kept_line_of_another_attempt_is_not_counted_though_signed_with_this_attempts_key() -> None:
    record = claimed()

    note_kept_kit_lines(record, 1, [kept("run_started", 0, attempt=2)], NOW)

    assert kit_runs(record, 1) == set()


def test_an_unsigned_kept_line_naming_the_attempt_is_not_counted() -> None:
    record = claimed()

    note_kept_kit_lines(record, 1, [kept("run_started", 0, key=None)], NOW)

    assert kit_runs(record, 1) == set()


def test_a_kept_line_skipped_stops_nothing_after_it() -> None:
    """An unsigned line of run 0 comes first in the kit's order; run 1's signed line still counts."""
    record = claimed()

    note_kept_kit_lines(record, 1, [kept("run_started", 1, minute=3), kept("run_started", 0, key=None)], NOW)

    assert kit_runs(record, 1) == {1}


def test_only_a_kept_line_counted_tells_the_works_total() -> None:
    """A line refused (a run Vertex cannot have restarted to) says nothing of the work."""
    record = claimed()
    counted = kept("run_started", 0, total_steps=1000, minute=1)
    refused = kept("run_started", 99, total_steps=5000, minute=2)

    effects = note_kept_kit_lines(record, 1, [counted, refused], NOW)

    assert record.attempt(1).total_steps == 1000
    assert [line.fields["event"] for line in effects.lines] == ["kit_line_refused"]
