"""A move of a request with capacity alternatives (shared/deciding/moves.py) at its edges, each
pinned where a slip in the code would change the answer: the policy is asked about the attempt the
move creates (the Spot attempt waiting counts before it), and the log line names the machine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from shared.clock import iso
from shared.deciding.decision_policy import DecisionPolicy
from shared.deciding.effects import Effects
from shared.deciding.moves import consider_move
from shared.fleet.placing import Placer
from shared.jobs import JobSnapshot
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome
from shared.settings import Settings

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
A1 = {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
JOB = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": A1, "replicaCount": 1}]}}
PRICES = {("a3-highgpu-8g", "us-central1"): (18.98, 82.53), ("a2-ultragpu-8g", "us-central1"): (22.08, 40.55)}
# The deployment's default: one Spot attempt before any other strategy.
ALL_ALLOWED = Settings.from_env({"SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD,FLEX_START"})


def placer() -> Placer:
    return Placer(lambda machine_class: [], lambda m, loc: PRICES.get((m, loc)), NOW, 1200)


def moved_first_attempt(capacity: list[dict[str, Any]]) -> tuple[RequestRecord, Effects]:
    """Attempt 1, on Spot on the first alternative, waiting for capacity for an hour, considered for a move."""
    waiting = Attempt(
        1,
        "us-central1",
        "SPOT",
        claimed_at=iso(NOW - timedelta(hours=1)),
        machine=capacity[0]["machine"],
        job="j1",
        state="JOB_STATE_PENDING",
        created_at=iso(NOW - timedelta(hours=1)),
    )
    envelope = {"request_id": "r1", "custom_job": JOB, "location": "us-central1", "capacity": capacity}
    record = RequestRecord("r1", {**envelope, "max_attempts": 3}, "gs://b/r1/", attempts=[waiting])
    effects = Effects()
    policy = DecisionPolicy.from_settings(ALL_ALLOWED)
    consider_move(record, JobSnapshot("j1", "JOB_STATE_PENDING"), placer(), policy, NOW, effects)
    return record, effects


def test_a_move_after_one_spot_attempt_may_go_to_flex_start_the_policy_allows_from_attempt_two() -> None:
    capacity = [
        {"machine": "a3-highgpu-8g", "strategies": ["SPOT"]},
        {"machine": "a2-ultragpu-8g", "strategies": ["FLEX_START"]},
    ]
    record, _ = moved_first_attempt(capacity)
    assert record.attempts[0].outcome is AttemptOutcome.MOVED
    assert record.requeue is not None
    assert (record.requeue.attempt, record.requeue.machine, record.requeue.strategy) == (
        2,
        "a2-ultragpu-8g",
        "FLEX_START",
    )


def test_a_move_to_another_alternative_says_on_which_machine_in_its_log_line() -> None:
    capacity = [{"machine": m, "strategies": ["SPOT"]} for m in ("a3-highgpu-8g", "a2-ultragpu-8g")]
    _, effects = moved_first_attempt(capacity)
    [line] = effects.lines
    assert line.message.startswith(
        "attempt 1 of r1 waited 3600 s for Spot in us-central1; "
        "cancelling its job, attempt 2 runs SPOT in us-central1 on a2-ultragpu-8g: a2-ultragpu-8g SPOT: "
    )
