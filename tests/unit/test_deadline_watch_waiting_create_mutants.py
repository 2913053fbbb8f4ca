"""shared/deciding/deadline_watch.py's `missed_waiting_for_a_create` at an edge its mutants found:
a create still waited for at the deadline's very moment missed it, as `_alert` names any moment
from the deadline on (the read at Vertex's rule, tests/unit/test_deadline_watch_committed_mutants.py)."""

from __future__ import annotations

from shared.clock import iso, parse_iso
from shared.deciding.deadline_watch import missed_waiting_for_a_create
from tests.support.decide import NOW, make_record


def test_a_create_still_waited_for_at_the_deadline_itself_missed_it() -> None:
    at_the_deadline = parse_iso(iso(NOW))  # the deadline as the request states it, to the millisecond
    claim = make_record(request={"deadline": iso(at_the_deadline)})
    claim.attempts[0].job = None  # the claim's create is not out yet

    alert = missed_waiting_for_a_create(claim, at_the_deadline)

    assert alert is not None and alert.kind == "deadline_missed"
