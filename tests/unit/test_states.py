"""The request state machine: the table, the diagram of record, and the ledger enforcing it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import (
    REQUEST_TRANSITIONS,
    TERMINAL_STATUSES,
    AttemptOutcome,
    IllegalTransition,
    RequestStatus,
    check_transition,
    mermaid,
)

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"


def record(status: RequestStatus, *attempts: Attempt) -> RequestRecord:
    return RequestRecord("r1", {}, "gs://b/r1/", status=status, attempts=list(attempts))


def test_the_architecture_document_shows_the_table_as_it_is() -> None:
    text = ARCHITECTURE.read_text()
    block = re.search(r"<!-- states:begin -->\n```mermaid\n(.*?)\n```\n<!-- states:end -->", text, re.S)
    assert block is not None, "docs/ARCHITECTURE.md lost its generated state diagram"
    assert block.group(1) == mermaid()


def test_every_status_is_reachable_and_only_terminal_ones_end() -> None:
    reached: set[RequestStatus] = set()
    frontier: list[RequestStatus | None] = [None]
    while frontier:
        for after in REQUEST_TRANSITIONS[frontier.pop()]:
            if after not in reached:
                reached.add(after)
                frontier.append(after)
    assert reached == set(RequestStatus)
    assert {s for s in RequestStatus if not REQUEST_TRANSITIONS[s]} == TERMINAL_STATUSES
    assert all(s.is_terminal == (s in TERMINAL_STATUSES) for s in RequestStatus)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (RequestStatus.SUCCEEDED, RequestStatus.RUNNING),  # a late event reopening a request
        (RequestStatus.GAVE_UP, RequestStatus.REQUEUED),
        (RequestStatus.CLAIMED, RequestStatus.SUCCEEDED),  # no job recorded yet
        (RequestStatus.RUNNING, RequestStatus.CLAIMED),
        (RequestStatus.FAILED, RequestStatus.CLAIMED),
    ],
)
def test_an_illegal_move_is_refused(before: RequestStatus, after: RequestStatus) -> None:
    with pytest.raises(IllegalTransition, match=f"{before} -> {after}"):
        check_transition(record(before), record(after))


def test_a_request_is_born_claimed() -> None:
    check_transition(None, record(RequestStatus.CLAIMED))
    with pytest.raises(IllegalTransition, match="new -> SUBMITTED"):
        check_transition(None, record(RequestStatus.SUBMITTED))


def test_an_outcome_is_set_once_and_no_attempt_disappears() -> None:
    ended = Attempt(1, "l", "SPOT", "t", job="j", outcome=AttemptOutcome.REQUEUED)
    changed = Attempt(1, "l", "SPOT", "t", job="j", outcome=AttemptOutcome.FAILED)
    open_attempt = Attempt(1, "l", "SPOT", "t", job="j")
    with pytest.raises(IllegalTransition, match="outcome requeued -> failed"):
        check_transition(record(RequestStatus.REQUEUED, ended), record(RequestStatus.REQUEUED, changed))
    with pytest.raises(IllegalTransition, match="attempt 1 would disappear"):
        check_transition(record(RequestStatus.REQUEUED, ended), record(RequestStatus.REQUEUED))
    check_transition(  # an open attempt may end
        record(RequestStatus.RUNNING, open_attempt), record(RequestStatus.FAILED, changed)
    )


def test_a_stored_status_reads_back_as_the_enum() -> None:
    stored = record(RequestStatus.GAVE_UP, Attempt(1, "l", "SPOT", "t", outcome=AttemptOutcome.GAVE_UP))
    again = RequestRecord.from_json(stored.to_json())
    assert again.status is RequestStatus.GAVE_UP and again.is_terminal
    assert again.attempts[0].outcome is AttemptOutcome.GAVE_UP


def test_fields_written_by_a_newer_version_survive_a_rewrite() -> None:
    written = {
        "request_id": "r1",
        "request": {"custom_job": {}},
        "output_dir": "gs://b/r1/",
        "status": "RUNNING",
        "attempts": [{"n": 1, "location": "l", "strategy": "SPOT", "claimed_at": "t", "gpu_hours": 3.5}],
        "requeue": {"attempt": 2, "location": "l", "strategy": "SPOT", "reason": "r", "decided_at": "t", "why": "x"},
        "cost_estimate": {"usd": 12},
    }
    read = RequestRecord.from_json(written)
    read.status = RequestStatus.REQUEUED  # an older instance changes what it knows
    rewritten = read.to_json()
    assert rewritten["cost_estimate"] == {"usd": 12}
    assert rewritten["attempts"][0]["gpu_hours"] == 3.5 and rewritten["requeue"]["why"] == "x"
    assert "newer_fields" not in rewritten and "newer_fields" not in rewritten["attempts"][0]
    assert RequestRecord.from_json(rewritten) == read
