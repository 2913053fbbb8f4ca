"""A request's spend (shared/fleet/spend.py) at its edges: the run time Vertex gave when it gave no
end, attempts that never ran or ran a second, several unpriced locations, the figures as shown and
stored, the budget's edge and what is not a budget (issue 43: the mutants test_budget.py left)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.clock import iso
from shared.fleet import spend as spend_module
from shared.fleet.spend import (
    Spend,
    affordable,
    attempts_spend,
    budget_left,
    management_fee_status,
    max_cost,
    overshoot_bound_usd,
    run_seconds,
)
from shared.jobs import JobState
from shared.ledger.records import Attempt

NOW = datetime(2026, 12, 6, 12, tzinfo=UTC)
# One pool of one replica; per hour Spot 1.0 and on demand 4.0 in us-central1 (the test's own table).
REQUEST: dict[str, Any] = {
    "custom_job": {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "a2-highgpu-1g"}}]}}
}


def price(machine: str, location: str) -> tuple[float, float] | None:
    return {"us-central1": (1.0, 4.0)}.get(location) if machine == "a2-highgpu-1g" else None


def at(seconds: float) -> str:
    return iso(NOW + timedelta(seconds=seconds))


def attempt(
    n: int = 1,
    *,
    started: float | None = 0.0,
    ended: float | None = None,
    location: str = "us-central1",
    strategy: str = "SPOT",
    state: str = JobState.RUNNING,
    changed: float | None = None,
) -> Attempt:
    return Attempt(
        n,
        location,
        strategy,
        claimed_at=at(-60),
        job=f"j{n}",
        state=state,
        started_at=None if started is None else at(started),
        ended_at=None if ended is None else at(ended),
        state_changed_at=None if changed is None else at(changed),
    )


def test_an_ended_attempt_without_its_end_time_ran_until_vertexs_last_update_and_a_running_one_until_now() -> None:
    ended = attempt(state=JobState.FAILED, changed=600)
    assert run_seconds(ended, NOW + timedelta(hours=5)) == 600
    # an end time read wins over the last update
    assert run_seconds(attempt(ended=900, state=JobState.FAILED, changed=600), NOW + timedelta(hours=5)) == 900
    # running: until now, whatever its last update says
    assert run_seconds(attempt(changed=600), NOW + timedelta(hours=1)) == 3600
    # an end before the start (clocks apart) is no time, never a refund
    assert run_seconds(attempt(started=60, ended=0, state=JobState.FAILED), NOW) == 0


def test_an_attempt_that_never_ran_even_in_an_unpriced_place_leaves_the_spend_known() -> None:
    never_ran = attempt(1, started=None, location="mars-north1", state=JobState.QUEUED)
    spend = attempts_spend(REQUEST, [never_ran, attempt(2, ended=3600)], NOW + timedelta(hours=2), price)
    assert spend.known and spend.usd == pytest.approx(1.0) and spend.on_demand_usd == pytest.approx(4.0)
    assert spend.run_seconds == 3600 and spend.unpriced == ()


def test_an_attempt_that_ran_one_second_costs_that_second() -> None:
    spend = attempts_spend(REQUEST, [attempt(ended=1, state=JobState.FAILED)], NOW, price)
    assert spend.run_seconds == 1 and spend.usd == pytest.approx(1.0 / 3600)
    assert spend.on_demand_usd == pytest.approx(4.0 / 3600)


def test_every_unpriced_place_is_named_and_every_attempts_time_counted() -> None:
    attempts = [
        attempt(1, ended=600, location="mars-north1", state=JobState.FAILED),
        attempt(2, started=600, ended=1200, location="venus-east2", state=JobState.FAILED),
        attempt(3, started=1200, ended=1800, state=JobState.FAILED),
    ]
    spend = attempts_spend(REQUEST, attempts, NOW + timedelta(hours=1), price)
    assert spend.unpriced == ("a2-highgpu-1g in mars-north1", "a2-highgpu-1g in venus-east2")
    assert spend.run_seconds == 1800 and spend.usd is None and spend.on_demand_usd is None


def test_the_figures_as_shown_and_stored() -> None:
    spend = Spend(usd=1 / 3, on_demand_usd=4 / 3, run_seconds=1234.56789)
    assert spend.to_json() == {
        "spent_usd": 0.3333,
        "on_demand_usd": 1.3333,
        "saving_usd": 1.0,
        "run_seconds": 1234.568,
        "unpriced": [],
        "management_fee": "unknown",
        "floor_of": [],
    }
    assert Spend(usd=1 / 7, on_demand_usd=3 / 7, run_seconds=0).to_json()["saving_usd"] == 0.2857
    nothing = attempts_spend(REQUEST, [], NOW, price)
    assert nothing.shown() == "$0.00 (on demand $0.00, saved $0.00; Vertex's training fee not included (unknown))"
    on_demand_only = Spend(usd=4.0, on_demand_usd=4.0, run_seconds=3600)
    assert (
        on_demand_only.shown() == "$4.00 (on demand $4.00, saved $0.00; Vertex's training fee not included (unknown))"
    )
    assert (
        Spend(usd=1.0, on_demand_usd=4.0, run_seconds=3600)
        .shown()
        .endswith("saved $3.00; Vertex's training fee not included (unknown))")
    )


def test_the_training_fee_is_unknown_until_the_price_table_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    assert management_fee_status() == "unknown"
    monkeypatch.setattr(spend_module, "table", lambda: {"management_fee": {"status": "published"}})
    assert management_fee_status() == "published"
    assert attempts_spend(REQUEST, [], NOW, price).management_fee == "published"
    monkeypatch.setattr(spend_module, "table", lambda: {"management_fee": {}})
    assert management_fee_status() == "unknown"


def test_only_a_number_is_a_budget() -> None:
    assert max_cost({"max_cost_usd": 25}) == 25.0 and max_cost({"max_cost_usd": 2.5}) == 2.5
    assert max_cost({"max_cost_usd": True}) is None
    assert max_cost({"max_cost_usd": "25"}) is None
    assert max_cost({}) is None


def test_the_budget_left_is_the_limit_less_the_spend_and_unknown_with_an_unknown_spend() -> None:
    ran_an_hour = [attempt(ended=3600, state=JobState.FAILED)]
    assert budget_left({**REQUEST, "max_cost_usd": 10}, ran_an_hour, NOW, price) == pytest.approx(9.0)
    assert budget_left(REQUEST, ran_an_hour, NOW, price) is None
    unpriced = [attempt(ended=3600, location="mars-north1", state=JobState.FAILED)]
    assert budget_left({**REQUEST, "max_cost_usd": 10}, unpriced, NOW, price) is None


def test_an_unpriced_attempt_has_no_overshoot_to_bound() -> None:
    assert overshoot_bound_usd(REQUEST, attempt(location="mars-north1"), 300, price) == 0.0


def test_work_that_costs_exactly_the_budget_left_fits() -> None:
    prices = {"us-central1": (1.0, 4.0), "us-east4": (2.0, 5.0)}
    assert affordable(prices, 10.0, 10.0, on_demand=False) == {"us-central1": (1.0, 4.0)}
    assert affordable(prices, 40.0, 10.0, on_demand=True) == {"us-central1": (1.0, 4.0)}
