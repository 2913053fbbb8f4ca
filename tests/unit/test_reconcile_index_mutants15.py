"""`resume_at_deferred` at an edge the fifteenth mutation pass found unrun: a cursor that cannot be
saved is one WARNING line, never a failed pass (the next pass starts where its selection left off)."""

from __future__ import annotations

from shared.reconcile_index import resume_at_deferred
from tests.support.decisions import CapturedLog


class UnsavableCursor:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def save_cursor(self, task: str, request_id: str) -> None:
        self.asked.append((task, request_id))
        raise OSError("the bucket refused the write")


def test_a_cursor_that_cannot_be_saved_at_the_first_deferred_request_is_said_and_raises_nothing() -> None:
    ledger = UnsavableCursor()
    log = CapturedLog()

    resume_at_deferred(ledger, "reconcile", iter(["req-b", "req-c"]), log.logger)  # type: ignore[arg-type]

    assert ledger.asked == [("reconcile", "req-b")]
    [line] = log.events("reconcile_cursor_unsaved")
    assert line["error"] == "OSError: the bucket refused the write"
