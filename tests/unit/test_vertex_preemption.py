"""Preemption plans and the seeded random rate of the Vertex emulator."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.vertex.preemption import PlannedPreemption, PreemptionPlanner, parse_plan


def delays(planner: PreemptionPlanner, sequence: int, labels: dict[str, str], starts: int) -> list[Any]:
    state = planner.new_job_state(sequence)
    return [seconds(planner.next_preemption(state, labels)) for _ in range(starts)]


def seconds(planned: PlannedPreemption | None) -> float | None:
    return None if planned is None else planned.after_seconds


def test_a_plan_preempts_each_matching_job_once_per_entry_then_never() -> None:
    planner = PreemptionPlanner()
    planner.add_plan({"labels": {"spotjobs-request-id": "r1"}, "preemptions": 2, "after_seconds": 1.5})
    labels = {"spotjobs-request-id": "r1", "spotjobs-attempt": "3"}

    assert delays(planner, 1, labels, 4) == [1.5, 1.5, None, None]
    assert delays(planner, 2, labels, 3) == [1.5, 1.5, None]  # a template, not a shared budget
    assert delays(planner, 3, {"spotjobs-request-id": "r2"}, 2) == [None, None]


def test_the_newest_matching_plan_wins_and_binds_at_the_next_start() -> None:
    planner = PreemptionPlanner()
    state = planner.new_job_state(1)
    assert planner.next_preemption(state, {"a": "b"}) is None  # no plan yet, no rate
    planner.add_plan({"labels": {}, "delays": [9]})
    planner.add_plan({"labels": {"a": "b"}, "delays": [0.5, 2]})

    assert [seconds(planner.next_preemption(state, {"a": "b"})) for _ in range(3)] == [0.5, 2.0, None]


def test_a_plan_keyed_to_progress_preempts_each_start_after_its_kth_checkpoint() -> None:
    planner = PreemptionPlanner()
    plan = planner.add_plan({"labels": {"a": "b"}, "preemptions": 2, "after_checkpoints": 2})
    state = planner.new_job_state(1)

    starts = [planner.next_preemption(state, {"a": "b"}) for _ in range(3)]
    assert starts == [PlannedPreemption(after_checkpoints=2), PlannedPreemption(after_checkpoints=2), None]
    assert plan.to_json() == {"id": plan.plan_id, "labels": {"a": "b"}, "preemptions": 2, "after_checkpoints": 2}


def test_the_random_rate_is_reproducible_per_seed_and_job() -> None:
    first = delays(PreemptionPlanner(rate_per_minute=6.0, seed=42), 7, {}, 5)
    again = delays(PreemptionPlanner(rate_per_minute=6.0, seed=42), 7, {}, 5)
    other_job = delays(PreemptionPlanner(rate_per_minute=6.0, seed=42), 8, {}, 5)
    other_seed = delays(PreemptionPlanner(rate_per_minute=6.0, seed=43), 7, {}, 5)

    assert first == again
    assert first != other_job and first != other_seed
    assert all(delay > 0 for delay in first)


def test_the_random_rate_averages_to_its_mean() -> None:
    samples = delays(PreemptionPlanner(rate_per_minute=30.0, seed=1), 1, {}, 4000)

    assert sum(samples) / len(samples) == pytest.approx(2.0, rel=0.1)


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ([], "JSON object"),
        ({"labels": {"a": 1}, "delays": [1]}, "labels"),
        ({"labels": {}, "preemptions": 0, "after_seconds": 1}, "positive integer"),
        ({"labels": {}, "preemptions": 2}, "non-negative"),
        ({"labels": {}, "delays": [1, -1]}, "non-negative"),
        ({"labels": {}, "delays": []}, "1 to 100"),
        ({"labels": {}, "delays": [1], "preemptions": 1}, "not both"),
        ({"labels": {}, "delays": [1], "after": 1}, "unknown field"),
        ({"labels": {}, "delays": [1], "exit_zero_succeeds": "yes"}, "true or false"),
        ({"labels": {}, "preemptions": 2, "after_checkpoints": 0}, "after_checkpoints must be a positive"),
        ({"labels": {}, "preemptions": 2, "after_checkpoints": 1, "after_seconds": 1}, "not both"),
        ({"labels": {}, "after_checkpoints": 1}, "positive integer"),
    ],
)
def test_malformed_plans_are_refused_with_a_reason(body: Any, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_plan("plan-1", body)


def test_exit_zero_succeeds_is_opt_in_and_shown() -> None:
    assert not parse_plan("plan-1", {"labels": {}, "delays": [1]}).exit_zero_succeeds
    plan = parse_plan("plan-2", {"labels": {}, "delays": [1], "exit_zero_succeeds": True})
    assert plan.exit_zero_succeeds and plan.to_json()["exit_zero_succeeds"] is True
