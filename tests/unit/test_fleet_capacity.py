"""Choosing (location, machine, strategy) for a request with capacity alternatives
(shared/fleet/capacity.py): the options the deployment allows, how each is priced, ties, what a
stockout or a move leaves out, FLEX_START's wait against a deadline, and what the attempt, the
re-queue and the move record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from shared.clock import iso
from shared.deciding.decision_policy import DecisionPolicy
from shared.deciding.decisions import Observation, decide
from shared.deciding.effects import Effects
from shared.deciding.moves import consider_move
from shared.fleet.capacity import choose_capacity, place_attempt, refusing
from shared.fleet.observations import FleetFact, Kind
from shared.fleet.placing import Placer
from shared.jobs import JobSnapshot
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.requests.capacity import job_on_machine
from shared.settings import Settings
from tests.support.decide import JOB1, at, make_record
from tests.support.decide import NOW as DECIDE_NOW
from tests.support.decide import POLICY as DECIDE_POLICY
from tests.support.decide import job as decide_job

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
A1 = {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
JOB = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": A1, "replicaCount": 1}]}}
# (Spot, on-demand) per hour: the H100 node is the cheaper on Spot, the A100 80GB node on-demand.
PRICES = {
    ("a3-highgpu-8g", "us-central1"): (18.98, 82.53),
    ("a3-highgpu-8g", "us-east4"): (14.85, 82.53),
    ("a2-ultragpu-8g", "us-central1"): (22.08, 40.55),
    ("a2-ultragpu-8g", "us-east4"): (22.08, 40.55),
}
BOTH = [
    {"machine": "a3-highgpu-8g", "strategies": ["SPOT", "FLEX_START", "STANDARD"]},
    {"machine": "a2-ultragpu-8g", "strategies": ["SPOT", "FLEX_START"]},
]
ALL_ALLOWED = Settings.from_env({"SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD,FLEX_START"})


def price(machine_type: str, location: str) -> tuple[float, float] | None:
    return PRICES.get((machine_type, location))


def placer(facts: list[FleetFact] | None = None) -> Placer:
    return Placer(lambda machine_class: facts or [], price, NOW, 1200)


def request(capacity: list[dict[str, Any]] = BOTH, **fields: Any) -> dict[str, Any]:
    return {"request_id": "r1", "custom_job": JOB, "location": "us-central1", "capacity": capacity, **fields}


def attempt(n: int = 1, **fields: Any) -> Attempt:
    return Attempt(
        n, fields.pop("location", "us-central1"), fields.pop("strategy", "SPOT"), claimed_at=iso(NOW), **fields
    )


def choose(spot_before: int = 0, settings: Settings = ALL_ALLOWED, **kwargs: Any) -> Any:
    envelope = kwargs.pop("envelope", None) or request()
    return choose_capacity(
        placer(kwargs.pop("facts", None)),
        envelope,
        kwargs.pop("attempt", None) or attempt(),
        kwargs.pop("earlier", []),
        refusing(settings, spot_before),
        NOW,
        price=price,
        **kwargs,
    )


def test_a_first_attempt_runs_on_the_cheapest_spot_option_as_the_policy_wants_spot_first() -> None:
    chosen = choose()
    assert (chosen.machine, chosen.strategy, chosen.location) == ("a3-highgpu-8g", "SPOT", "us-central1")
    assert chosen.reason.startswith("a3-highgpu-8g SPOT: lowest hourly price of 2 options ($18.98 an hour")
    assert "in us-central1: the only allowed location" in chosen.reason


def test_strategies_the_deployment_refuses_are_never_chosen() -> None:
    spot_only = choose(spot_before=1, settings=Settings.from_env({}))
    assert spot_only.strategy == "SPOT"
    assert (
        choose(
            spot_before=1, settings=Settings.from_env({}), without=[("a3-highgpu-8g", "SPOT", "us-central1")]
        ).machine
        == "a2-ultragpu-8g"
    )


def test_after_no_capacity_the_next_attempt_takes_the_best_other_option() -> None:
    chosen = choose(spot_before=1, without=[("a3-highgpu-8g", "SPOT", "us-central1")])
    assert (chosen.machine, chosen.strategy) == ("a2-ultragpu-8g", "SPOT")
    assert "not a3-highgpu-8g SPOT in us-central1: no capacity there before" in chosen.reason
    # No Spot on either: FLEX_START is priced as on-demand, the A100 node's the cheaper.
    envelope = request([BOTH[0], {"machine": "a2-ultragpu-8g", "strategies": ["FLEX_START"]}])
    chosen = choose(spot_before=1, envelope=envelope, without=[("a3-highgpu-8g", "SPOT", "us-central1")])
    assert (chosen.machine, chosen.strategy) == ("a2-ultragpu-8g", "FLEX_START")


def test_a_stocked_out_option_stays_possible_in_another_allowed_location() -> None:
    envelope = request(locations=["us-central1", "us-east4"])
    chosen = choose(spot_before=1, envelope=envelope, without=[("a3-highgpu-8g", "SPOT", "us-central1")])
    assert (chosen.machine, chosen.strategy, chosen.location) == ("a3-highgpu-8g", "SPOT", "us-east4")


def test_ties_go_to_the_order_the_request_lists() -> None:
    # FLEX_START and STANDARD both cost the on-demand price: the one listed first wins.
    only_a3 = request([{"machine": "a3-highgpu-8g", "strategies": ["SPOT", "STANDARD", "FLEX_START"]}])
    chosen = choose(spot_before=1, envelope=only_a3, without=[("a3-highgpu-8g", "SPOT", "us-central1")])
    assert chosen.strategy == "STANDARD"


def test_with_every_option_weighed_the_model_s_expected_cost_decides() -> None:
    seen = [
        FleetFact(Kind.WAIT, loc, NOW - timedelta(hours=3), 300.0, attempt_key=loc)
        for loc in ("us-central1", "us-east4")
    ]
    envelope = request(locations=["us-central1", "us-east4"], total_steps=3600, expected_step_seconds=1.0)
    chosen = choose(envelope=envelope, facts=seen)
    assert (chosen.machine, chosen.strategy, chosen.location) == ("a3-highgpu-8g", "SPOT", "us-east4")
    assert "cheapest expected cost to finish of 2 options" in chosen.reason


def test_flex_start_with_a_deadline_only_when_its_whole_wait_fits_before_it() -> None:
    flex_only = [
        BOTH[0] | {"strategies": ["SPOT", "STANDARD"]},
        {"machine": "a2-ultragpu-8g", "strategies": ["FLEX_START", "STANDARD"]},
    ]
    soon = iso(NOW + timedelta(hours=12))  # a day's default wait does not fit
    envelope = request(flex_only, deadline=soon, total_steps=3600, expected_step_seconds=1.0)
    chosen = choose(spot_before=1, envelope=envelope, without=[("a3-highgpu-8g", "SPOT", "us-central1")])
    assert chosen.strategy == "STANDARD" and chosen.machine == "a2-ultragpu-8g"
    later = request(flex_only, deadline=iso(NOW + timedelta(hours=30)), total_steps=3600, expected_step_seconds=1.0)
    chosen = choose(spot_before=1, envelope=later, without=[("a3-highgpu-8g", "SPOT", "us-central1")])
    assert chosen.strategy == "FLEX_START"


def test_nothing_allowed_now_is_none() -> None:
    flex = request([{"machine": "a2-ultragpu-8g", "strategies": ["FLEX_START"]}])
    assert choose(envelope=flex) is None  # no Spot attempt came first


# What the claim records, and the decisions that carry a machine over.


def test_the_claim_records_machine_strategy_and_why_and_the_job_runs_on_that_machine() -> None:
    record = RequestRecord("r1", request(), "gs://b/r1/", attempts=[attempt()])
    place_attempt(placer(), record, record.attempts[0], refusing(ALL_ALLOWED, 0), NOW)
    first = record.attempts[0]
    assert (first.machine, first.strategy, first.location) == ("a3-highgpu-8g", "SPOT", "us-central1")
    assert first.placed and first.placed.startswith("a3-highgpu-8g SPOT: ")
    spec = job_on_machine(record.request["custom_job"], first.machine)["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]
    assert spec == {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8}


def test_a_claim_after_a_stockout_leaves_the_stocked_out_option_out() -> None:
    first = attempt(machine="a3-highgpu-8g", outcome=AttemptOutcome.REQUEUED)
    record = RequestRecord("r1", request(), "gs://b/r1/", attempts=[first, attempt(2)])
    place_attempt(placer(), record, record.attempts[1], refusing(ALL_ALLOWED, 1), NOW)
    assert (record.attempts[1].machine, record.attempts[1].strategy) == ("a2-ultragpu-8g", "SPOT")


def test_a_claim_whose_machine_was_decided_keeps_it_and_places_the_location() -> None:
    first = attempt(machine="a2-ultragpu-8g", outcome=AttemptOutcome.REQUEUED)
    second = attempt(2, machine="a2-ultragpu-8g")
    record = RequestRecord("r1", request(), "gs://b/r1/", attempts=[first, second])
    place_attempt(placer(), record, second, refusing(ALL_ALLOWED, 1), NOW)
    assert (second.machine, second.strategy) == ("a2-ultragpu-8g", "SPOT")
    why = "the machine the attempt before ran on (a re-queue after a preemption)"
    assert second.placed == f"a2-ultragpu-8g SPOT, {why}; the only allowed location"


def test_a_request_without_alternatives_is_placed_as_before() -> None:
    record = RequestRecord("r1", {"custom_job": JOB, "location": "us-central1"}, "gs://b/r1/", attempts=[attempt()])
    place_attempt(placer(), record, record.attempts[0], refusing(ALL_ALLOWED, 0), NOW)
    assert record.attempts[0].machine is None and record.attempts[0].placed == "the only allowed location"


def test_a_spot_job_waiting_past_its_changeover_moves_to_another_alternative_with_one_location() -> None:
    waiting = attempt(
        machine="a3-highgpu-8g", job="j1", state="JOB_STATE_PENDING", created_at=iso(NOW - timedelta(hours=1))
    )
    record = RequestRecord("r1", request(max_attempts=3), "gs://b/r1/", attempts=[waiting])
    effects = Effects()
    policy = DecisionPolicy.from_settings(ALL_ALLOWED)
    consider_move(record, JobSnapshot("j1", "JOB_STATE_PENDING"), placer(), policy, NOW, effects)
    assert waiting.outcome is AttemptOutcome.MOVED and record.requeue is not None
    assert (record.requeue.machine, record.requeue.strategy) == ("a2-ultragpu-8g", "SPOT")
    [line] = effects.lines
    assert line.fields["next_machine"] == "a2-ultragpu-8g"


def requeued_after(error: dict[str, Any], strategy: str = "SPOT") -> Any:
    first = Attempt(1, "us-central1", strategy, claimed_at=at(0), job=JOB1, state="JOB_STATE_RUNNING", created_at=at(1))
    first.machine = "a2-ultragpu-8g"
    record = make_record(request={"capacity": BOTH}, attempts=[first], status=RequestStatus.RUNNING)
    observation = Observation(1, decide_job("JOB_STATE_FAILED", update=400, error=error), None, None)
    return decide(record, observation, DECIDE_POLICY, DECIDE_NOW).record.requeue


def test_a_stockout_leaves_the_next_machine_to_its_claim_and_a_preemption_keeps_it() -> None:
    stockout = requeued_after({"code": 8, "message": "Job failed with STOCKOUT"})
    assert stockout is not None and (stockout.machine, stockout.reason) == (None, "stockout")
    preempted = requeued_after(
        {"code": 13, "message": "The Spot VM was preempted and could not be restarted."}, "STANDARD"
    )
    assert preempted is not None and (preempted.machine, preempted.strategy) == ("a2-ultragpu-8g", "STANDARD")


def test_status_says_on_which_machine_and_strategy_each_attempt_ran_and_why() -> None:
    from spotjobs.cli.status import format_request

    chosen = attempt(machine="a2-ultragpu-8g", strategy="FLEX_START", placed="a2-ultragpu-8g FLEX_START: why")
    text = format_request(RequestRecord("r1", request=request(), output_dir="gs://b/r1/", attempts=[chosen]))
    assert (
        text.splitlines()[-1]
        == "placed      attempt 1 in us-central1 on a2-ultragpu-8g: a2-ultragpu-8g FLEX_START: why"
    )


def test_a_move_never_goes_back_to_an_option_moved_away_from_unless_none_is_left() -> None:
    def second_move(capacity: list[dict[str, Any]]) -> Any:
        gone = attempt(machine="a3-highgpu-8g", outcome=AttemptOutcome.MOVED)
        created = iso(NOW - timedelta(hours=1))
        waits = attempt(2, machine="a2-ultragpu-8g", job="j2", state="JOB_STATE_PENDING", created_at=created)
        record = RequestRecord("r1", request(capacity, max_attempts=4), "gs://b/r1/", attempts=[gone, waits])
        policy = DecisionPolicy.from_settings(ALL_ALLOWED)
        consider_move(record, JobSnapshot("j2", "JOB_STATE_PENDING"), placer(), policy, NOW, Effects())
        assert record.requeue is not None
        return record.requeue.machine, record.requeue.strategy

    spot_then_flex = [
        {"machine": "a3-highgpu-8g", "strategies": ["SPOT"]},
        {"machine": "a2-ultragpu-8g", "strategies": ["SPOT", "FLEX_START"]},
    ]
    assert second_move(spot_then_flex) == ("a2-ultragpu-8g", "FLEX_START")
    spot_only = [
        {"machine": "a3-highgpu-8g", "strategies": ["SPOT"]},
        {"machine": "a2-ultragpu-8g", "strategies": ["SPOT"]},
    ]
    assert second_move(spot_only) == ("a3-highgpu-8g", "SPOT")  # every option had none: only the latest is left out


def test_an_attempt_on_an_alternative_is_priced_on_its_machine() -> None:
    from shared.fleet.spend import request_spend

    ran = attempt(machine="a2-ultragpu-8g", strategy="FLEX_START", started_at=iso(NOW - timedelta(hours=2)))
    ran.ended_at = iso(NOW)
    spend = request_spend(RequestRecord("r1", request(), "gs://b/r1/", attempts=[ran]), NOW, price)
    assert spend.usd == 2 * 40.55  # FLEX_START at the on-demand price of the A100 80GB node
