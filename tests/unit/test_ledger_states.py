"""The request state machine (shared/ledger/states.py) edge by edge: every move of the table is
allowed and every other refused, staying put is always allowed, attempts may be added and an open
attempt may end, but none disappears and no outcome changes; the diagram shows each edge once.
tests/unit/test_states.py checks the table's reach and the document's diagram."""

from __future__ import annotations

import itertools

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

ACTIVE = (RequestStatus.CLAIMED, RequestStatus.SUBMITTED, RequestStatus.RUNNING, RequestStatus.REQUEUED)


def record(status: RequestStatus, *attempts: Attempt) -> RequestRecord:
    return RequestRecord("r1", {}, "gs://b/r1/", status=status, attempts=list(attempts))


def test_the_terminal_statuses_are_the_four_ends() -> None:
    assert TERMINAL_STATUSES == {
        RequestStatus.SUCCEEDED,
        RequestStatus.FAILED,
        RequestStatus.GAVE_UP,
        RequestStatus.CANCELLED,
    }
    assert not any(status.is_terminal for status in ACTIVE)


@pytest.mark.parametrize(("before", "after"), list(itertools.product(RequestStatus, RequestStatus)))
def test_a_move_is_allowed_exactly_when_the_table_has_it_or_it_stays(
    before: RequestStatus, after: RequestStatus
) -> None:
    allowed = after == before or after in REQUEST_TRANSITIONS[before]
    if allowed:
        check_transition(record(before), record(after))
    else:
        with pytest.raises(IllegalTransition, match=f"request r1: status {before} -> {after} is not allowed"):
            check_transition(record(before), record(after))


def test_the_table_of_moves() -> None:
    s = RequestStatus
    ends = set(TERMINAL_STATUSES)
    assert REQUEST_TRANSITIONS == {
        None: {s.CLAIMED},
        s.CLAIMED: {s.SUBMITTED, s.FAILED, s.CANCELLED},
        s.SUBMITTED: {s.RUNNING, s.REQUEUED} | ends,
        s.RUNNING: {s.REQUEUED} | ends,
        s.REQUEUED: {s.CLAIMED, s.FAILED, s.CANCELLED},
        **{status: set() for status in ends},
    }


@pytest.mark.parametrize("status", [s for s in RequestStatus if s is not RequestStatus.CLAIMED])
def test_a_new_record_is_only_ever_claimed(status: RequestStatus) -> None:
    check_transition(None, record(RequestStatus.CLAIMED, Attempt(1, "l", "SPOT", "t")))
    with pytest.raises(IllegalTransition, match=f"status new -> {status} is not allowed"):
        check_transition(None, record(status))


def test_an_attempt_may_be_added_and_an_open_one_may_end() -> None:
    first = Attempt(1, "l", "SPOT", "t", job="j", outcome=AttemptOutcome.REQUEUED)
    check_transition(
        record(RequestStatus.REQUEUED, first),
        record(RequestStatus.CLAIMED, first, Attempt(2, "l", "SPOT", "t")),
    )
    open_attempt = Attempt(2, "l", "SPOT", "t", job="k")
    ended = Attempt(2, "l", "SPOT", "t", job="k", outcome=AttemptOutcome.SUCCEEDED)
    check_transition(record(RequestStatus.RUNNING, first, open_attempt), record(RequestStatus.SUCCEEDED, first, ended))


def test_an_outcome_set_stays_and_no_attempt_disappears_whatever_the_order() -> None:
    first = Attempt(1, "l", "SPOT", "t", job="j", outcome=AttemptOutcome.REQUEUED)
    second = Attempt(2, "l", "SPOT", "t", job="k", outcome=AttemptOutcome.REQUEUED)
    changed = Attempt(2, "l", "SPOT", "t", job="k", outcome=AttemptOutcome.GAVE_UP)
    reopened = Attempt(2, "l", "SPOT", "t", job="k")
    current = record(RequestStatus.REQUEUED, first, second)
    with pytest.raises(IllegalTransition, match="request r1: attempt 2 outcome requeued -> gave_up is not allowed"):
        check_transition(current, record(RequestStatus.REQUEUED, first, changed))
    with pytest.raises(IllegalTransition, match="attempt 2 outcome requeued -> None"):
        check_transition(current, record(RequestStatus.REQUEUED, first, reopened))
    with pytest.raises(IllegalTransition, match="request r1: attempt 1 would disappear"):
        check_transition(current, record(RequestStatus.REQUEUED, second))
    check_transition(current, record(RequestStatus.REQUEUED, second, first))  # order is not identity


def test_the_diagram_shows_each_edge_once_and_each_end() -> None:
    lines = mermaid().splitlines()
    assert lines[0] == "stateDiagram-v2"
    edges = [tuple(line.strip().split(" --> ")) for line in lines[1:]]
    expected = {("[*]", "CLAIMED")}
    expected |= {
        (before.value, after.value) for before, afters in REQUEST_TRANSITIONS.items() if before for after in afters
    }
    expected |= {(status.value, "[*]") for status in TERMINAL_STATUSES}
    assert sorted(edges) == sorted(expected) and len(edges) == len(set(edges))
    # Each status's moves are listed in order, so the document's diagram is stable.
    claimed = [after for before, after in edges if before == "CLAIMED"]
    assert claimed == sorted(claimed)
