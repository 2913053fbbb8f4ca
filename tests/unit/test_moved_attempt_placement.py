"""A move's next attempt is created where the move placed it (docs/placement.md, "Moving a job that
waits for Spot"): the move (`consider_move` with the real placer) and then what submit's claim does
with the re-queued attempt (`claim_attempt`, then `place_attempt`, as `shared.submit._claim`). Seed
2486 of the simulator: the move placed attempt 2 in us-central1 knowing us-east4 had no Spot for
its waiting job, and the claim placed it again, without that, back in us-east4."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from shared.clock import iso
from shared.deciding.decision_policy import DecisionPolicy
from shared.deciding.effects import Effects
from shared.deciding.moves import consider_move
from shared.fleet.capacity import place_attempt, refusing
from shared.fleet.observations import FleetFact, Kind
from shared.fleet.placing import Placer
from shared.jobs import JobSnapshot
from shared.ledger.claims import claim_attempt
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome
from shared.settings import Settings

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
JOB = "projects/p/locations/us-east4/customJobs/1"
PENDING = "JOB_STATE_PENDING"
SETTINGS = Settings()
H100 = {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8}
CUSTOM_JOB = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": H100, "replicaCount": 1}]}}
# us-east4 is the cheaper Spot: only a job waiting there now is worth moving out of it.
PRICES = {
    ("a3-highgpu-8g", "us-central1"): (18.98, 82.53),
    ("a3-highgpu-8g", "us-east4"): (14.85, 82.53),
    ("a2-ultragpu-8g", "us-central1"): (22.08, 40.55),
    ("a2-ultragpu-8g", "us-east4"): (22.08, 40.55),
}
# The fleet's other jobs got capacity in both locations after a quarter of an hour; attempt 1's
# wait in us-east4 is open while the move is weighed. The move records it as a wait that found no
# capacity, of 0 s (its end not known yet): what the claim then reads (seed 2486).
SEEN_BOTH = [
    FleetFact(Kind.WAIT, "us-central1", NOW - timedelta(hours=3), 900.0, attempt_key="a"),
    FleetFact(Kind.WAIT, "us-east4", NOW - timedelta(hours=3), 900.0, attempt_key="b"),
]
WAITING = [*SEEN_BOTH, FleetFact(Kind.WAITING, "us-east4", NOW - timedelta(hours=2), attempt_key="r1-1")]
MOVED = [*WAITING, FleetFact(Kind.NO_CAPACITY, "us-east4", NOW - timedelta(hours=2), 0.0, attempt_key="r1-1")]


def price(machine_type: str, location: str) -> tuple[float, float] | None:
    return PRICES.get((machine_type, location))


def placer(facts: list[FleetFact], now: datetime = NOW) -> Placer:
    return Placer(lambda machine_class: facts, price, now, SETTINGS.changeover_prior_seconds)


def waiting_in_us_east4(**request: Any) -> RequestRecord:
    """Attempt 1 on Spot, PENDING in us-east4 for two hours."""
    first = Attempt(1, "us-east4", "SPOT", claimed_at=iso(NOW - timedelta(hours=2)), job=JOB, **request.pop("on", {}))
    first.created_at, first.state = iso(NOW - timedelta(hours=2)), PENDING
    envelope = {
        "request_id": "r1",
        "custom_job": CUSTOM_JOB,
        "location": "us-central1",
        "locations": ["us-central1", "us-east4"],
        "max_attempts": 4,
        "total_steps": 3600,  # an hour of work
        "expected_step_seconds": 1.0,
        **request,
    }
    return RequestRecord("r1", envelope, "gs://b/r1/", attempts=[first])


def moved_then_claimed(record: RequestRecord) -> tuple[str, Attempt]:
    """Where the move placed attempt 2, and attempt 2 as submit's claim created it."""
    policy = DecisionPolicy.from_settings(SETTINGS)
    consider_move(record, JobSnapshot(JOB, PENDING), placer(WAITING), policy, NOW, Effects())
    assert record.attempt(1).outcome is AttemptOutcome.MOVED and record.requeue is not None
    decided = record.requeue.location
    later = NOW + timedelta(seconds=30)  # the old job ended: the outbox published attempt 2
    claim = claim_attempt(
        record,
        envelope=record.request,
        n=2,
        now=later,
        lease_seconds=SETTINGS.claim_lease_seconds,
        output_dir=record.output_dir,
        requeued=True,
    )
    assert claim.kind == "claimed" and claim.attempt is not None
    place_attempt(placer(MOVED, later), claim.record, claim.attempt, refusing(SETTINGS, 1), later)
    return decided, claim.attempt


def test_a_moves_attempt_is_created_where_the_move_placed_it() -> None:
    decided, second = moved_then_claimed(waiting_in_us_east4())
    assert decided == "us-central1"
    assert second.location == "us-central1"
    assert second.placed == "where the move of attempt 1 out of us-east4 placed it (its `moved` line says why)"


def test_a_moves_attempt_on_an_alternative_keeps_the_moves_location_too() -> None:
    capacity = [
        {"machine": "a3-highgpu-8g", "strategies": ["SPOT"]},
        {"machine": "a2-ultragpu-8g", "strategies": ["SPOT"]},
    ]
    decided, second = moved_then_claimed(waiting_in_us_east4(capacity=capacity, on={"machine": "a3-highgpu-8g"}))
    assert (decided, second.machine) == ("us-central1", "a3-highgpu-8g")
    assert second.location == "us-central1"
