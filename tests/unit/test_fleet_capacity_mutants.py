"""Choosing a request's capacity alternative at its edges (shared/fleet/capacity.py), each pinned
where a slip in the code would change the choice: FLEX_START's whole wait against a deadline to
the second, which stocked-out options are left out when every one had none, and why a claim
whose machine was decided before says so."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.clock import iso
from shared.fleet.capacity import CapacityChoice, choose_capacity, place_attempt, refusing, without_capacity
from shared.fleet.placing import Placer
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome
from shared.settings import Settings

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
A1 = {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
FLEX_WAIT_SECONDS = 7200  # the job's maxWaitDuration
JOB = {
    "jobSpec": {
        "workerPoolSpecs": [{"machineSpec": A1, "replicaCount": 1}],
        "scheduling": {"maxWaitDuration": f"{FLEX_WAIT_SECONDS}s"},
    }
}
# (Spot, on-demand) per hour, one location: the L4 node the cheapest, the A100 80GB node the dearest.
PRICES = {
    ("g2-standard-8", "us-central1"): (0.30, 0.85),
    ("a3-highgpu-8g", "us-central1"): (18.98, 82.53),
    ("a2-ultragpu-8g", "us-central1"): (22.08, 40.55),
}
ALL_ALLOWED = Settings.from_env({"SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD,FLEX_START"})


def price(machine_type: str, location: str) -> tuple[float, float] | None:
    return PRICES.get((machine_type, location))


def placer() -> Placer:
    return Placer(lambda machine_class: [], price, NOW, 1200)


def request(capacity: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"request_id": "r1", "custom_job": JOB, "location": "us-central1", "capacity": capacity, **fields}


def attempt(n: int = 1, **fields: Any) -> Attempt:
    return Attempt(
        n, fields.pop("location", "us-central1"), fields.pop("strategy", "SPOT"), claimed_at=iso(NOW), **fields
    )


def choose(envelope: dict[str, Any], spot_before: int = 1, **kwargs: Any) -> CapacityChoice | None:
    return choose_capacity(
        placer(), envelope, attempt(), [], refusing(ALL_ALLOWED, spot_before), NOW, price=price, **kwargs
    )


# FLEX_START on the A100 80GB node (on-demand price 40.55) or STANDARD on the H100 node (82.53).
FLEX_OR_STANDARD = [
    {"machine": "a2-ultragpu-8g", "strategies": ["FLEX_START"]},
    {"machine": "a3-highgpu-8g", "strategies": ["STANDARD"]},
]


@pytest.mark.parametrize("changeover", [600, None])  # None: the request names none, no changeover counted
def test_flex_start_fits_a_deadline_exactly_its_wait_plus_the_work_plus_the_changeover_away(
    changeover: int | None,
) -> None:
    work_seconds = 3600  # 3600 steps of a second each
    needed = FLEX_WAIT_SECONDS + work_seconds + (changeover or 0)

    def chosen_by(deadline_in: int) -> str:
        named = {} if changeover is None else {"changeover_seconds": changeover}
        envelope = request(
            FLEX_OR_STANDARD,
            deadline=iso(NOW + timedelta(seconds=deadline_in)),
            total_steps=3600,
            expected_step_seconds=1.0,
            **named,
        )
        choice = choose(envelope)
        assert choice is not None
        return choice.strategy

    assert chosen_by(needed) == "FLEX_START"  # the deadline at the very end of the whole wait still fits
    assert chosen_by(needed - 1) == "STANDARD"  # one second short: the wait could outlast it


def test_when_every_option_had_no_capacity_only_the_latest_is_left_out() -> None:
    three = [{"machine": m, "strategies": ["SPOT"]} for m in ("a3-highgpu-8g", "g2-standard-8", "a2-ultragpu-8g")]
    # The L4 node (cheapest) ran out first, then the H100 node, and the A100 80GB node last.
    without = [
        ("g2-standard-8", "SPOT", "us-central1"),
        ("a3-highgpu-8g", "SPOT", "us-central1"),
        ("a2-ultragpu-8g", "SPOT", "us-central1"),
    ]
    choice = choose(request(three), without=without)
    assert choice is not None
    # Both earlier stockouts are possible again (stockouts are transient): the cheapest of them.
    assert (choice.machine, choice.strategy) == ("g2-standard-8", "SPOT")
    assert choice.reason.startswith("g2-standard-8 SPOT: lowest hourly price of 2 options ($0.30 an hour")


def test_a_claim_after_a_move_says_its_machine_was_decided_by_the_move() -> None:
    moved = attempt(machine="a2-ultragpu-8g", outcome=AttemptOutcome.MOVED)
    following = attempt(2, machine="a3-highgpu-8g")
    capacity = [{"machine": m, "strategies": ["SPOT"]} for m in ("a2-ultragpu-8g", "a3-highgpu-8g")]
    record = RequestRecord("r1", request(capacity), "gs://b/r1/", attempts=[moved, following])
    place_attempt(placer(), record, following, refusing(ALL_ALLOWED, 1), NOW)
    why = "decided when the attempt before was moved (it waited for Spot past its changeover)"
    where = "where the move of attempt 1 out of us-central1 placed it (its `moved` line says why)"
    assert following.placed == f"a3-highgpu-8g SPOT, {why}; {where}"


def test_a_claim_after_a_deadline_switch_says_it_keeps_the_machine_on_demand() -> None:
    switched = attempt(machine="a2-ultragpu-8g", outcome=AttemptOutcome.SWITCHED_TO_ON_DEMAND)
    following = attempt(2, machine="a2-ultragpu-8g", strategy="STANDARD")
    capacity = [{"machine": "a2-ultragpu-8g", "strategies": ["SPOT", "STANDARD"]}]
    record = RequestRecord("r1", request(capacity), "gs://b/r1/", attempts=[switched, following])
    place_attempt(placer(), record, following, refusing(ALL_ALLOWED, 1), NOW)
    why = "the attempt before's machine, switched to on-demand for the deadline"
    assert following.placed == f"a2-ultragpu-8g STANDARD, {why}; the only allowed location"


def test_flex_start_with_a_deadline_but_no_known_work_is_never_chosen() -> None:
    # A year ahead would fit any wait, but with the work left unknown nothing says the job ends in time.
    envelope = request(FLEX_OR_STANDARD, deadline=iso(NOW + timedelta(days=365)))
    choice = choose(envelope)
    assert choice is not None and (choice.machine, choice.strategy) == ("a3-highgpu-8g", "STANDARD")
    assert choice.reason.startswith("a3-highgpu-8g STANDARD: the only option allowed now")


def test_an_option_preempted_before_is_not_left_out_only_those_moved_away_from_and_the_latest() -> None:
    preempted = attempt(machine="a3-highgpu-8g", outcome=AttemptOutcome.REQUEUED)  # it had capacity, then lost it
    moved = attempt(2, machine="g2-standard-8", outcome=AttemptOutcome.MOVED)
    stocked_out = attempt(3, machine="a2-ultragpu-8g", outcome=AttemptOutcome.REQUEUED)
    earlier = [preempted, moved, stocked_out]
    assert without_capacity(earlier, stocked_out) == [
        ("g2-standard-8", "SPOT", "us-central1"),
        ("a2-ultragpu-8g", "SPOT", "us-central1"),
    ]


def test_an_option_stocked_out_where_it_was_planned_goes_to_the_next_location_the_request_lists() -> None:
    # Nothing known of the other two (no prices there): the request's own order decides.
    envelope = request(
        [{"machine": "a3-highgpu-8g", "strategies": ["SPOT"]}], locations=["us-central1", "us-east4", "europe-west4"]
    )
    choice = choose(envelope, without=[("a3-highgpu-8g", "SPOT", "us-central1")])
    assert choice is not None and choice.location == "us-east4"


def test_a_claim_after_a_stockout_leaves_out_only_that_stockout_not_an_earlier_preempted_option() -> None:
    capacity = [{"machine": m, "strategies": ["SPOT"]} for m in ("a3-highgpu-8g", "g2-standard-8")]
    preempted = attempt(machine="g2-standard-8", outcome=AttemptOutcome.REQUEUED)  # the cheapest: it ran
    stocked_out = attempt(2, machine="a3-highgpu-8g", outcome=AttemptOutcome.REQUEUED)
    third = attempt(3)  # the stockout's re-queue left its machine open
    record = RequestRecord("r1", request(capacity), "gs://b/r1/", attempts=[preempted, stocked_out, third])
    place_attempt(placer(), record, third, refusing(ALL_ALLOWED, 2), NOW)
    assert third.machine == "g2-standard-8"
    assert "not a3-highgpu-8g SPOT in us-central1: no capacity there before" in (third.placed or "")


def test_a_claim_no_alternative_is_allowed_for_runs_on_the_first_listed_and_says_why() -> None:
    # FLEX_START only, on a first attempt: the deployment wants Spot first, so the create refuses it.
    capacity = [{"machine": m, "strategies": ["FLEX_START"]} for m in ("a3-highgpu-8g", "a2-ultragpu-8g")]
    first = attempt()
    record = RequestRecord("r1", request(capacity), "gs://b/r1/", attempts=[first])
    place_attempt(placer(), record, first, refusing(ALL_ALLOWED, 0), NOW)
    assert first.machine == "a3-highgpu-8g"
    assert first.placed == "no alternative the deployment allows for this attempt"


def test_a_claim_says_how_the_attempt_just_before_it_ended_not_an_earlier_one() -> None:
    moved = attempt(machine="a3-highgpu-8g", outcome=AttemptOutcome.MOVED)
    preempted = attempt(2, machine="a2-ultragpu-8g", outcome=AttemptOutcome.REQUEUED)
    third = attempt(3, machine="a2-ultragpu-8g")
    capacity = [{"machine": m, "strategies": ["SPOT"]} for m in ("a3-highgpu-8g", "a2-ultragpu-8g")]
    record = RequestRecord("r1", request(capacity), "gs://b/r1/", attempts=[moved, preempted, third])
    place_attempt(placer(), record, third, refusing(ALL_ALLOWED, 2), NOW)
    why = "the machine the attempt before ran on (a re-queue after a preemption)"
    assert third.placed == f"a2-ultragpu-8g SPOT, {why}; the only allowed location"
