"""The bill as people read it (issue 46): `spotjobs status` (the cost line, the JSON's `cost`) and
`spotjobs report`'s bill per request and per team label (spotjobs/reporting/bill.py), with the
saving against on demand; an unpriced machine type is "unknown", never 0."""

from __future__ import annotations

from datetime import timedelta

from shared.clock import iso
from shared.jobs import JobState
from shared.ledger.records import Attempt, RequestRecord
from shared.requests.pricing import hourly
from spotjobs.cli.status import cost_view, format_request
from spotjobs.reporting.bill import bill, render_bill
from spotjobs.reporting.html import render_report
from tests.support.decide import NOW


def record(
    request_id: str, machine: str, team: str | None, hours: float, *, limit: float | None = None
) -> RequestRecord:
    job = {
        "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": machine}, "replicaCount": 1}]},
        **({"labels": {"team": team}} if team else {}),
    }
    started = iso(NOW - timedelta(hours=hours))
    attempt = Attempt(
        1,
        "us-central1",
        "SPOT",
        claimed_at=started,
        job="j",
        state=JobState.SUCCEEDED,
        started_at=started,
        ended_at=iso(NOW),
    )
    request = {"custom_job": job, "location": "us-central1", **({"max_cost_usd": limit} if limit else {})}
    return RequestRecord(request_id, request, "gs://b/r/", attempts=[attempt])


SPOT, ON_DEMAND = hourly("a2-highgpu-1g", "us-central1") or (0.0, 0.0)


def test_status_shows_what_the_request_spent_its_saving_and_its_budget() -> None:
    text = format_request(record("r1", "a2-highgpu-1g", "vision", 2, limit=100), now=NOW)
    line = next(line for line in text.splitlines() if line.startswith("cost"))
    assert f"${2 * SPOT:.2f} (on demand ${2 * ON_DEMAND:.2f}, saved ${2 * (ON_DEMAND - SPOT):.2f}" in line
    assert "training fee not included (unknown)" in line and "of max_cost_usd $100.00" in line
    assert cost_view(record("r1", "a2-highgpu-1g", None, 2), NOW)["spent_usd"] == round(2 * SPOT, 4)


def test_status_says_an_unpriced_machine_type_costs_unknown_never_zero() -> None:
    text = format_request(record("r2", "n1-standard-4", None, 2), now=NOW)
    assert "cost        unknown: no price for n1-standard-4 in us-central1" in text
    assert cost_view(record("r2", "n1-standard-4", None, 2), NOW)["spent_usd"] is None


def test_the_report_bills_per_request_and_per_team_label_and_counts_unknowns_apart() -> None:
    records = [
        record("a", "a2-highgpu-1g", "vision", 1).to_json(),
        record("b", "a2-highgpu-1g", "vision", 3).to_json(),
        record("c", "n1-standard-4", "vision", 5).to_json(),
        record("d", "a2-highgpu-1g", None, 1).to_json(),
    ]
    summary = bill(records, NOW)
    vision = next(t for t in summary["teams"] if t["team"] == "vision")
    assert vision["requests"] == 3 and vision["unknown"] == 1
    assert vision["spent_usd"] == round(4 * SPOT, 2) and vision["saving_usd"] == round(4 * (ON_DEMAND - SPOT), 2)
    assert [r["spent_usd"] for r in summary["requests"]][2] is None
    page = render_bill(summary)
    assert "(no team label)" in page and "unknown" in page
    assert 'data-mark="bill"' in render_report(records, now=NOW)


def test_validate_shows_the_hourly_price_of_attempt_1_or_says_it_is_unknown() -> None:
    from spotjobs.cli.requests import hourly_price

    priced = hourly_price(record("v", "a2-highgpu-1g", None, 0).request, "us-central1")
    assert (priced["spot_usd"], priced["on_demand_usd"]) == (round(SPOT, 4), round(ON_DEMAND, 4))
    unknown = hourly_price(record("v", "n1-standard-4", None, 0).request, "us-central1")
    assert unknown["unknown"].startswith("no price for n1-standard-4 in us-central1 in the price table")


def test_the_report_bills_an_attempt_on_the_capacity_alternative_it_ran_on() -> None:
    """A request with `capacity` alternatives runs an attempt on another machine than its
    CustomJob's (`Attempt.machine`): the report bills that machine, as `spotjobs status` does."""
    ran = record("e", "a3-highgpu-8g", "llm", 1)
    ran.request["capacity"] = [
        {"machine": "a3-highgpu-8g", "strategies": ["SPOT"]},
        {"machine": "a2-ultragpu-8g", "strategies": ["SPOT"]},
    ]
    ran.attempts[0].machine = "a2-ultragpu-8g"
    a2_spot = (hourly("a2-ultragpu-8g", "us-central1") or (0.0, 0.0))[0]

    [row] = bill([ran.to_json()], NOW)["requests"]

    assert row["spent_usd"] == round(a2_spot, 4) == cost_view(ran, NOW)["spent_usd"]


def test_status_says_a_budget_whose_spend_the_price_table_cannot_price_is_not_held_and_stops_the_request() -> None:
    """A price table redeployed without the row a budgeted request runs on (validation priced it)."""
    unpriced = record("r4", "n1-standard-4", None, 2, limit=100)
    text = format_request(unpriced, now=NOW)
    line = next(line for line in text.splitlines() if line.startswith("cost"))
    assert "of max_cost_usd $100.00, not held: the spend is unknown, so the budget stops the request" in line
    assert cost_view(unpriced, NOW)["budget_held"] is False
    assert cost_view(record("r1", "a2-highgpu-1g", None, 2, limit=100), NOW)["budget_held"] is True
    assert cost_view(record("r1", "a2-highgpu-1g", None, 2), NOW)["budget_held"] is None
