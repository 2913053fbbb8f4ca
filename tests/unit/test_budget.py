"""A request's `max_cost_usd` (issue 46): read and refused by name (envelope), held to the price
table at validation (shared/requests/budget.py), its spend (shared/fleet/spend.py), the stop with
one `budget_reached` alert (shared/deciding/budget_watch.py), the deadline rule's and placement's
refusal to plan past it."""

from __future__ import annotations

import copy
import json
import math
from datetime import timedelta
from typing import Any

import pytest

from shared.alerts import AlertKind
from shared.clock import iso, utcnow
from shared.deciding.budget_watch import budget_refuses
from shared.deciding.decisions import Observation, decide
from shared.fleet.spend import affordable, overshoot_bound_usd, request_spend, run_seconds
from shared.jobs import JobState
from shared.ledger.records import Attempt
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.requests.envelope import InvalidJobRequest, canonical_envelope, read_request
from shared.requests.policy import validate_request
from shared.settings import Settings
from tests.conftest import load_event
from tests.support.decide import JOB1, NOW, POLICY, job, make_record

SETTINGS = Settings.from_env({"SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD"})
JOB: dict[str, Any] = json.loads(load_event("requests/bare_docs.json"))  # a2-highgpu-1g
A100 = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "a2-highgpu-1g"}, "replicaCount": 2}]}}
# Per hour of one replica: Spot 1.0, on demand 4.0 (a price table of the test's own).
PRICES = {("a2-highgpu-1g", "us-central1"): (1.0, 4.0), ("a2-highgpu-1g", "us-east4"): (2.0, 5.0)}


def price(machine: str, location: str) -> tuple[float, float] | None:
    return PRICES.get((machine, location))


def envelope(**fields: Any) -> dict[str, Any]:
    return {"request_id": "capped", "custom_job": JOB, **fields}


def validate(body: dict[str, Any]) -> list[str]:
    try:
        validate_request(json.dumps(body).encode(), attributes={}, settings=SETTINGS)
    except InvalidJobRequest as exc:
        return [str(v) for v in exc.violations]
    return []


# Reading and validation.


def test_a_budget_reads_and_survives_the_canonical_envelope_and_a_request_without_one_keeps_its_form() -> None:
    request, violations = read_request(json.dumps(envelope(max_cost_usd=25)).encode(), attributes={}, max_bytes=1 << 20)
    assert violations == [] and request.max_cost_usd == 25.0
    stored = canonical_envelope(request, default_location="us-central1", default_max_attempts=3)
    assert stored["max_cost_usd"] == 25.0
    plain, _ = read_request(json.dumps(envelope()).encode(), attributes={}, max_bytes=1 << 20)
    assert "max_cost_usd" not in canonical_envelope(plain, default_location="us-central1", default_max_attempts=3)


@pytest.mark.parametrize("value", [-1, 0, "25", math.nan, math.inf, True, False, [5], {"usd": 5}, 10**400])
def test_a_budget_that_is_not_a_positive_number_is_one_clear_error(value: object) -> None:
    data = json.dumps(envelope(max_cost_usd=value)).encode()
    _, violations = read_request(data, attributes={}, max_bytes=1 << 20)
    assert [v.path for v in violations] == ["max_cost_usd"]
    assert "expected a number of US dollars > 0" in violations[0].message
    assert len(validate(json.loads(data))) == 1  # the same one error at validation (validate, submit)


def test_a_budget_on_a_machine_type_the_price_table_lacks_is_refused_saying_its_cost_is_unknown() -> None:
    unknown = copy.deepcopy(JOB)
    unknown["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["machineType"] = "a2-highgpu-3g"
    errors = validate(envelope(custom_job=unknown, max_cost_usd=50))
    assert len(errors) == 1 and "max_cost_usd" in errors[0]
    assert "no price for a2-highgpu-3g in us-central1" in errors[0] and "unknown is never zero" in errors[0]
    assert validate(envelope(custom_job=unknown)) == []  # without a budget: runs, its cost shown unknown


def test_a_deadline_the_budget_cannot_pay_for_even_on_spot_is_refused_with_the_numbers() -> None:
    soon = iso(utcnow() + timedelta(days=2))
    fields = {"deadline": soon, "total_steps": 36_000, "expected_step_seconds": 1.0}  # 10 hours of work
    errors = validate(envelope(max_cost_usd=1.0, **fields))
    assert len(errors) == 1 and errors[0].startswith("deadline: cannot be met within max_cost_usd $1.00")
    assert "36000 steps x 1 s = 10.00 h" in errors[0] and "even on Spot" in errors[0] and "us-central1" in errors[0]
    assert validate(envelope(max_cost_usd=1000.0, **fields)) == []


# The spend.


def ran(n: int, strategy: str, start: float, end: float | None, location: str = "us-central1") -> Attempt:
    started = iso(NOW + timedelta(hours=start))
    ended = iso(NOW + timedelta(hours=end)) if end is not None else None
    state = JobState.FAILED if end is not None else JobState.RUNNING
    return Attempt(
        n, location, strategy, claimed_at=started, job=f"j{n}", state=state, started_at=started, ended_at=ended
    )


def test_the_spend_is_each_attempts_vertex_run_time_times_every_replicas_price_on_its_capacity() -> None:
    record = make_record(
        request={"custom_job": A100},
        attempts=[ran(1, "SPOT", 0, 1), ran(2, "STANDARD", 1, 1.5), ran(3, "SPOT", 2, None, "us-east4")],
    )
    spend = request_spend(record, NOW + timedelta(hours=3), price)
    # 2 replicas: 1 h Spot at 1.0, 0.5 h on demand at 4.0, 1 h (still running) Spot at 2.0 in us-east4.
    assert spend.usd == pytest.approx(2 * (1.0 + 2.0 + 2.0))
    assert spend.on_demand_usd == pytest.approx(2 * (4.0 + 2.0 + 5.0))
    assert spend.saving_usd == pytest.approx(12.0) and spend.run_seconds == pytest.approx(2.5 * 3600)
    assert spend.management_fee == "unknown" and "training fee not included (unknown)" in spend.shown()


def test_an_attempt_that_never_started_costs_nothing_and_an_unpriced_one_makes_the_spend_unknown_not_zero() -> None:
    waiting = Attempt(1, "us-central1", "SPOT", claimed_at=iso(NOW))
    assert run_seconds(waiting, NOW + timedelta(hours=5)) == 0
    record = make_record(request={"custom_job": A100}, attempts=[ran(1, "SPOT", 0, 1, "mars-north1")])
    spend = request_spend(record, NOW + timedelta(hours=2), price)
    assert spend.usd is None and spend.on_demand_usd is None and spend.saving_usd is None
    assert spend.unpriced == ("a2-highgpu-1g in mars-north1",)
    assert spend.shown() == "unknown: no price for a2-highgpu-1g in mars-north1"
    assert spend.to_json()["spent_usd"] is None


# The stop.


def capped(limit: float, *attempts: Attempt) -> Any:
    return make_record(
        status=RequestStatus.RUNNING,
        request={"custom_job": JOB, "max_cost_usd": limit},
        attempts=list(attempts) or None,
    )


def running_since(hours: float) -> Attempt:
    started = iso(NOW - timedelta(hours=hours))
    return Attempt(
        1,
        "us-central1",
        "SPOT",
        claimed_at=started,
        job=JOB1,
        state=JobState.RUNNING,
        started_at=started,
        created_at=started,
    )


def test_a_running_attempt_whose_spend_reached_the_budget_is_cancelled_through_the_outbox_with_one_alert() -> None:
    record = capped(1.0, running_since(2))  # a2-highgpu-1g Spot in us-central1 is about $1.9/h
    decision = decide(copy.deepcopy(record), Observation(1, job(JobState.RUNNING, update=500)), POLICY, NOW)
    after = decision.record
    assert (
        after.cancel is not None and after.cancel.source == "budget" and "max_cost_usd reached" in after.cancel.reason
    )
    assert after.latest.cancel_pending  # the outbox sends the cancel
    assert [a["kind"] for a in after.pending_alerts] == [AlertKind.BUDGET_REACHED]
    assert after.pending_alerts[0]["details"]["stopped"] is True
    again = decide(copy.deepcopy(after), Observation(1, job(JobState.RUNNING, update=600)), POLICY, NOW)
    assert again.effects.alerts == [] and len(again.record.pending_alerts) == 1  # once per request
    ended = decide(copy.deepcopy(after), Observation(1, job(JobState.CANCELLED, update=700)), POLICY, NOW)
    assert ended.record.status == RequestStatus.CANCELLED and ended.record.requeue is None


def test_a_request_with_notify_is_told_budget_reached_once_with_the_spend() -> None:
    record = capped(1.0, running_since(2))
    record.request["notify"] = {"topic": "projects/team-proj/topics/train-events"}
    after = decide(copy.deepcopy(record), Observation(1, job(JobState.RUNNING, update=500)), POLICY, NOW).record
    told = [n for n in after.pending_notices if n["kind"] == "budget_reached"]
    assert len(told) == 1
    assert told[0]["max_cost_usd"] == 1.0 and told[0]["spent_usd"] >= 1.0 and told[0]["stopped"] is True
    again = decide(copy.deepcopy(after), Observation(1, job(JobState.RUNNING, update=600)), POLICY, NOW).record
    assert [n["kind"] for n in again.pending_notices].count("budget_reached") == 1


def test_under_the_budget_nothing_happens() -> None:
    decision = decide(capped(1000.0, running_since(2)), Observation(1, job(JobState.RUNNING, update=500)), POLICY, NOW)
    assert decision.record.cancel is None and decision.effects.alerts == []


def test_a_preempted_attempt_past_the_budget_is_not_requeued_and_alerts_once() -> None:
    preempted = {"code": 8, "message": "Job failed with STOCKOUT: the Spot VM was preempted 7 times."}
    decision = decide(
        capped(1.0, running_since(2)), Observation(1, job(JobState.FAILED, update=590, error=preempted)), POLICY, NOW
    )
    assert decision.record.requeue is None and not decision.effects.requeue_decided
    assert [a.kind for a in decision.effects.alerts].count(AlertKind.BUDGET_REACHED) == 1


def test_a_request_that_succeeded_past_its_budget_alerts_once_with_nothing_to_stop() -> None:
    decision = decide(capped(1.0, running_since(2)), Observation(1, job(JobState.SUCCEEDED, update=590)), POLICY, NOW)
    assert decision.record.status == RequestStatus.SUCCEEDED and decision.record.cancel is None
    assert [a.details["stopped"] for a in decision.effects.alerts if a.kind == AlertKind.BUDGET_REACHED] == [False]
    assert decision.record.latest.outcome is AttemptOutcome.SUCCEEDED


def test_the_overshoot_bound_is_one_review_interval_at_the_attempts_price() -> None:
    request = {"custom_job": A100}
    assert overshoot_bound_usd(request, ran(1, "SPOT", 0, None), 300, price) == pytest.approx(2 * 1.0 * 300 / 3600)


# Never planned past it.


def test_the_deadline_rule_may_not_move_work_to_on_demand_the_budget_cannot_pay_for() -> None:
    request = {"custom_job": A100, "max_cost_usd": 10.0, "total_steps": 36_000, "expected_step_seconds": 0.1}
    record = make_record(request=request, attempts=[ran(1, "SPOT", 0, None)])
    now = NOW + timedelta(hours=1)  # $2 spent; 1 h of work left: $8 on demand fits, $10 would not
    assert budget_refuses(record, record.latest, "STANDARD", now, price) is None
    record.request["max_cost_usd"] = 9.0
    refused = budget_refuses(record, record.latest, "STANDARD", now, price)
    assert refused is not None and refused.path == "max_cost_usd"
    assert "$8.00, more than the $7.00 left" in refused.message
    del record.request["max_cost_usd"]
    assert budget_refuses(record, record.latest, "STANDARD", now, price) is None


def test_placement_keeps_the_locations_where_the_work_left_fits_in_the_budget() -> None:
    prices = {"us-central1": (1.0, 4.0), "us-east4": (2.0, 5.0)}
    assert affordable(prices, 15.0, 10.0, on_demand=False) == {"us-central1": (1.0, 4.0)}
    assert affordable(prices, 25.0, 10.0, on_demand=False) == prices
    assert affordable(prices, 45.0, 10.0, on_demand=True) == {"us-central1": (1.0, 4.0)}
    assert affordable(prices, 1.0, 10.0, on_demand=False) == prices  # none fits: the budget watch stops it
    assert affordable(prices, None, 10.0, on_demand=False) == affordable(prices, 15.0, None, on_demand=False) == prices


def test_a_claim_places_the_attempt_where_the_work_left_fits_in_the_budget() -> None:
    from shared.fleet.placing import Placer

    prices = {"us-central1": (18.98, 82.53), "us-east4": (14.85, 82.53)}
    h100 = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "a3-highgpu-8g"}}]}}
    request = {
        "custom_job": h100,
        "location": "us-central1",
        "locations": ["us-central1", "us-east4"],
        "total_steps": 3600,
        "expected_step_seconds": 1.0,  # one hour of work: $18.98 in us-central1, $14.85 in us-east4
        "max_cost_usd": 16.0,
    }
    placer = Placer(lambda machine_class: [], lambda m, loc: prices.get(loc), NOW, 1200)
    planned = Attempt(1, "us-central1", "SPOT", claimed_at=iso(NOW))
    choice = placer.place(request, planned, [])
    assert (choice.location, choice.reason) == (
        "us-east4",
        "the only allowed location where the work left fits in max_cost_usd",
    )
    del request["max_cost_usd"]
    assert placer.place(request, planned, []).location == "us-central1"  # no observations: where planned


def test_a_deadline_switch_the_budget_cannot_pay_for_is_not_made_and_is_said() -> None:
    """17 minutes of work due in 6 hours, its Spot attempt queued for 40 minutes: the rule asks
    for on-demand (tests/unit/test_deadline_watch.py), which the budget pays for or not."""
    from dataclasses import replace

    def waiting_for_spot(limit: float) -> Any:
        record = make_record(
            request={
                "custom_job": JOB,  # a2-highgpu-1g: 17 min on demand in us-central1 is about $1.04
                "deadline": iso(NOW + timedelta(hours=6) - timedelta(minutes=40)),
                "total_steps": 17 * 60,
                "expected_step_seconds": 1.0,
                "max_cost_usd": limit,
            }
        )
        record.created_at = record.attempts[0].created_at = iso(NOW - timedelta(minutes=40))
        return record

    policy = replace(POLICY, allowed_fallback_strategies=("STANDARD",))
    paid = decide(waiting_for_spot(100.0), Observation(1, job(JobState.QUEUED)), policy, NOW)
    assert paid.record.requeue is not None and paid.record.requeue.strategy == "STANDARD"
    unpaid = decide(waiting_for_spot(0.5), Observation(1, job(JobState.QUEUED)), policy, NOW)
    assert unpaid.record.requeue is None and not unpaid.record.attempts[0].cancel_pending
    [refused] = [line for line in unpaid.effects.lines if line.event == "deadline_switch_refused"]
    assert (
        "max_cost_usd: is $0.50 with $0.00 spent" in refused.message and "more than the $0.50 left" in refused.message
    )
