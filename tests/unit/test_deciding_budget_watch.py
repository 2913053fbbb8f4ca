"""The budget stop and the budget's word on the deadline rule at their edges
(shared/deciding/budget_watch.py): a spend exactly at `max_cost_usd` stops the request, a cent less
does nothing; what the alert says; a move of the work left refused only when its price passes what
is left, on the capacity it moves to. Priced by a table of the test's own: a2-highgpu-1g in
us-central1 costs 1.0 an hour on Spot and 4.0 on demand per replica, and the job has two."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared.alerts import AlertKind
from shared.clock import iso
from shared.deciding.budget_watch import budget_refuses, watch_budget
from shared.deciding.effects import Effects
from shared.jobs import JobState
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.requests.attempts import ON_DEMAND, SPOT
from tests.support.decide import NOW, make_record

A100 = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "a2-highgpu-1g"}, "replicaCount": 2}]}}
HOUR = timedelta(hours=1)


def price(machine: str, location: str) -> tuple[float, float] | None:
    return (1.0, 4.0) if (machine, location) == ("a2-highgpu-1g", "us-central1") else None


def capped(limit: float, *, status: str = RequestStatus.RUNNING, **request: Any) -> RequestRecord:
    """A request of `limit` dollars whose Spot attempt has run since NOW: $2.00 an hour."""
    attempt = Attempt(
        1,
        "us-central1",
        SPOT,
        claimed_at=iso(NOW),
        job="j1",
        state=JobState.RUNNING,
        created_at=iso(NOW),
        started_at=iso(NOW),
    )
    return make_record(
        status=status, request={"custom_job": A100, "max_cost_usd": limit, **request}, attempts=[attempt]
    )


def test_a_spend_exactly_at_the_budget_stops_the_request_and_a_second_before_does_nothing() -> None:
    before, effects = capped(2.0), Effects()
    watch_budget(before, NOW + HOUR - timedelta(seconds=1), effects, price)
    assert before.cancel is None and effects.alerts == [] and not before.markers

    reached, effects = capped(2.0), Effects()
    watch_budget(reached, NOW + HOUR, effects, price)  # $2.00 of $2.00
    assert reached.cancel is not None and reached.cancel.source == "budget"
    assert [a.kind for a in effects.alerts] == [AlertKind.BUDGET_REACHED]


def test_the_alert_says_the_spend_to_the_hundredth_of_a_cent_and_that_it_stopped_the_request() -> None:
    record, effects = capped(2.0), Effects()
    watch_budget(record, NOW + HOUR + timedelta(seconds=1), effects, price)  # 2 x 3601/3600 = $2.000556

    [alert] = effects.alerts
    assert alert.message == "req-1 spent $2.00 of its max_cost_usd $2.00: stopped"
    assert alert.details["spent_usd"] == 2.0006
    assert (alert.details["max_cost_usd"], alert.details["stopped"]) == (2.0, True)
    [line] = effects.lines
    assert (line.severity, line.message, line.event) == ("WARNING", alert.message, "budget_reached")


def test_the_alert_of_a_request_that_had_ended_says_so_and_stops_nothing() -> None:
    record, effects = capped(2.0, status=RequestStatus.SUCCEEDED), Effects()
    watch_budget(record, NOW + 2 * HOUR, effects, price)

    [alert] = effects.alerts
    assert alert.message == "req-1 spent $4.00 of its max_cost_usd $2.00: it had ended"
    assert alert.details["stopped"] is False and record.cancel is None


def test_the_alert_of_a_request_whose_cancel_was_under_way_says_so_not_that_it_had_ended() -> None:
    """An operator's cancel was asked and its job still runs (CANCELLING takes Vertex minutes): the
    budget stops nothing more, and the alert says what is so."""
    from shared.ledger.records import CancelIntent

    record, effects = capped(2.0), Effects()
    record.cancel = CancelIntent(by="ops@example.com", at=iso(NOW + HOUR), reason="done with it")
    record.attempts[0].cancel_decided_at = iso(NOW + HOUR)
    watch_budget(record, NOW + 2 * HOUR, effects, price)

    [alert] = effects.alerts
    assert alert.message == "req-1 spent $4.00 of its max_cost_usd $2.00: its cancel was under way"
    assert alert.details["stopped"] is False and record.cancel.source == "operator"


@pytest.mark.parametrize(
    ("strategy", "limit", "refused"),
    [
        # $2.00 spent; 1.5 h of work left: $3.00 on Spot, $12.00 on demand.
        (SPOT, 5.0, None),
        (SPOT, 4.9, "1.50 h of work left on SPOT in us-central1 at $2.00/h is $3.00, more than the $2.90 left"),
        (ON_DEMAND, 14.0, None),
        (
            ON_DEMAND,
            13.9,
            "1.50 h of work left on STANDARD in us-central1 at $8.00/h is $12.00, more than the $11.90 left",
        ),
    ],
)
def test_a_move_is_refused_only_when_the_work_left_at_its_capacitys_price_passes_what_is_left(
    strategy: str, limit: float, refused: str | None
) -> None:
    record = capped(limit, total_steps=5400, expected_step_seconds=1.0)

    violation = budget_refuses(record, record.latest, strategy, NOW + HOUR, price)

    if refused is None:
        assert violation is None
    else:
        assert violation is not None and violation.path == "max_cost_usd"
        assert violation.message == f"is ${limit:.2f} with $2.00 spent; {refused}"


def test_no_move_is_refused_while_the_work_left_or_its_price_is_unknown() -> None:
    moved = capped(1.0, total_steps=5400, expected_step_seconds=1.0)  # $2.00 spent where priced
    moved.attempts.append(Attempt(2, "mars-north1", SPOT, claimed_at=iso(NOW + HOUR)))  # priced nowhere
    assert budget_refuses(moved, moved.attempts[1], SPOT, NOW + HOUR, price) is None

    no_work_known = capped(1.0)  # neither the kit nor the request says how much work is left
    assert budget_refuses(no_work_known, no_work_known.latest, SPOT, NOW + HOUR, price) is None


def unpriced(machine: str, location: str) -> tuple[float, float] | None:
    """The price table as redeployed without the a2-highgpu-1g row the request runs on."""
    return None


def test_a_budget_whose_spend_a_redeployed_price_table_cannot_price_stops_the_request_and_says_so_once() -> None:
    record, effects = capped(2.0, notify={"topic": "projects/p/topics/t"}), Effects()
    watch_budget(record, NOW + timedelta(minutes=5), effects, unpriced)

    [alert] = effects.alerts
    assert (alert.kind, alert.severity) == (AlertKind.BUDGET_UNPRICED, "ERROR")
    assert alert.message == (
        "req-1's max_cost_usd $2.00 cannot be held: the deployed price table has no price for a2-highgpu-1g in "
        "us-central1, so its spend is unknown: stopped"
    )
    assert (alert.details["unpriced"], alert.details["max_cost_usd"], alert.details["stopped"]) == (
        ["a2-highgpu-1g in us-central1"],
        2.0,
        True,
    )
    assert record.cancel is not None and record.cancel.source == "budget"
    assert record.cancel.reason.startswith("max_cost_usd cannot be held: no price for a2-highgpu-1g in us-central1")
    assert [n["kind"] for n in record.pending_notices if n["kind"].startswith("budget")] == ["budget_unpriced"]

    again = Effects()
    watch_budget(record, NOW + timedelta(minutes=10), again, unpriced)  # the next pass: said once per request
    assert again.alerts == [] and again.lines == []


def test_an_ended_request_whose_spend_became_unpriced_is_said_and_nothing_is_stopped() -> None:
    record, effects = capped(2.0, status=RequestStatus.SUCCEEDED), Effects()
    watch_budget(record, NOW + HOUR, effects, unpriced)

    [alert] = effects.alerts
    assert alert.message.endswith("its spend is unknown: it had ended") and alert.details["stopped"] is False
    assert record.cancel is None
