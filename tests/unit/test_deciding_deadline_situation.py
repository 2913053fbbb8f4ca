"""What the deadline rule is told, read from the record (shared/deciding/deadline_watch.py,
`deadline_situation`), at its edges: each capacity type's step rate from its own attempts, the
changeover from on-demand attempts only (a Spot attempt's wait for capacity is no changeover);
and the work's share done (shared/deciding/deadline.py, `Work.done_fraction`) at its bounds."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared.clock import iso
from shared.deciding.deadline import Situation, Work, decide_deadline
from shared.deciding.deadline_watch import deadline_situation
from shared.jobs import JobState
from shared.ledger.records import Attempt, RequestRecord
from tests.support.decide import NOW, make_record

PRIOR = 60.0  # the changeover prior: below every changeover these records show


def situation(record: RequestRecord) -> Situation:
    found = deadline_situation(record, NOW, prior_seconds=PRIOR, review_seconds=300.0, checkpoint_prior_seconds=3600.0)
    assert found is not None
    return found


def request(**fields: Any) -> dict[str, Any]:
    return {"deadline": iso(NOW + timedelta(days=1)), "total_steps": 1000, "expected_step_seconds": 1.0, **fields}


def ran(n: int, strategy: str, *, asked: float, started: float | None, **fields: Any) -> Attempt:
    """Attempt n, asked for `asked` seconds before NOW and started `started` seconds before it."""
    return Attempt(
        n,
        "us-central1",
        strategy,
        claimed_at=iso(NOW - timedelta(seconds=asked)),
        job=f"j{n}",
        state=JobState.FAILED,
        created_at=iso(NOW - timedelta(seconds=asked)),
        started_at=None if started is None else iso(NOW - timedelta(seconds=started)),
        **fields,
    )


def test_each_capacity_types_step_time_is_its_own_attempts_rate() -> None:
    spot = ran(1, "SPOT", asked=9000, started=8000, steps_per_second=2.0)
    on_demand = ran(2, "STANDARD", asked=4000, started=3000, steps_per_second=4.0)
    latest = ran(3, "SPOT", asked=100, started=None)

    work = situation(make_record(request=request(), attempts=[spot, on_demand, latest])).work

    assert (work.spot_step_seconds, work.on_demand_step_seconds) == (0.5, 0.25)


def test_a_spot_attempts_wait_for_capacity_is_no_changeover_and_an_on_demand_ones_start_is() -> None:
    waited = ran(1, "SPOT", asked=9000, started=4000)  # 5,000 s before Spot had capacity
    latest = ran(2, "SPOT", asked=100, started=None)
    assert situation(make_record(request=request(), attempts=[waited, latest])).changeover_seconds == PRIOR

    on_demand = ran(2, "STANDARD", asked=3000, started=2100)  # 900 s from its create to running
    latest = ran(3, "SPOT", asked=100, started=None)
    with_it = make_record(request=request(), attempts=[waited, on_demand, latest])
    assert situation(with_it).changeover_seconds == 900.0


def test_the_share_done_is_a_share_of_one_step_too_and_never_past_all() -> None:
    assert Work(total_steps=1, committed_steps=0, spot_step_seconds=1.0).done_fraction == 0.0
    past = Work(total_steps=1000, committed_steps=1200, spot_step_seconds=1.0)  # the kit saved past its total
    assert past.done_fraction == 1.0


@pytest.mark.parametrize("committed", [1000, 1200])
def test_work_committed_to_its_total_or_past_it_is_done_with_all_of_it_done(committed: int) -> None:
    record = make_record(request=request(), attempts=[ran(1, "SPOT", asked=100, started=50)])
    record.attempts[0].last_checkpoint = [1, committed]
    decision = decide_deadline(situation(record))
    assert (decision.reason, decision.progress) == ("done", 1.0)
