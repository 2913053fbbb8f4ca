"""Placing a claim's new attempt (shared/fleet/placing.py): the job it asks the cost model about
(the work left, the changeover, the deadline, the value of an hour waited, on-demand or Spot, the
current location), what it says of the choice, what cannot be weighed, and which failed reads are
advisory."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core.exceptions import Forbidden, ServiceUnavailable

from shared.errors import TransientError
from shared.fleet import placing
from shared.fleet.observations import FleetFact, Kind, MachineClass
from shared.fleet.placement import Job
from shared.fleet.placing import Placer, checkpoint_move, place_claimed, work_hours
from shared.ledger.records import Attempt, RequestRecord

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
H100 = {
    "jobSpec": {
        "workerPoolSpecs": [
            {
                "machineSpec": {
                    "machineType": "a3-highgpu-8g",
                    "acceleratorType": "NVIDIA_H100_80GB",
                    "acceleratorCount": 8,
                }
            }
        ]
    }
}
PRICES = {"us-central1": (18.98, 82.53), "us-east4": (14.85, 82.53), "asia-southeast1": (19.26, 107.01)}
REQUEST = {"custom_job": H100, "location": "us-central1", "locations": ["us-central1", "us-east4"]}


def price(machine_type: str, location: str) -> tuple[float, float] | None:
    return PRICES.get(location) if machine_type == "a3-highgpu-8g" else None


def running(location: str, key: str) -> list[FleetFact]:
    return [FleetFact(Kind.WAIT, location, NOW - timedelta(hours=3), 300.0, attempt_key=key)]


def waiting(location: str, key: str) -> list[FleetFact]:
    return [FleetFact(Kind.WAITING, location, NOW - timedelta(hours=3), attempt_key=key)]


SEEN_BOTH = running("us-central1", "a") + running("us-east4", "b")


def placer(facts: list[FleetFact], bucket_location: str = "") -> Placer:
    return Placer(lambda machine_class: facts, price, NOW, 1200, bucket_location)


def spot(n: int = 1, location: str = "us-central1", strategy: str = "SPOT", **fields: Any) -> Attempt:
    return Attempt(n, location, strategy, claimed_at="2026-12-02T11:00:00Z", **fields)


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> list[Job]:
    """The jobs the placer asks the cost model about."""
    asked: list[Job] = []
    choose = placing.choose_location

    def spy(job: Job, *args: Any) -> Any:
        asked.append(job)
        return choose(job, *args)

    monkeypatch.setattr(placing, "choose_location", spy)
    return asked


# The job the model weighs.


def test_a_deadline_requests_job_is_its_work_its_changeover_and_the_time_left(jobs: list[Job]) -> None:
    due = {
        **REQUEST,
        "deadline": "2026-12-03T18:00:00Z",
        "total_steps": 1000,
        "expected_step_seconds": 72,
        "changeover_seconds": 1800,
    }
    placer(SEEN_BOTH).place(due, spot(), [])
    assert jobs == [
        Job(
            remaining_hours=pytest.approx(20.0),
            changeover_hours=pytest.approx(0.5),
            current_location="us-central1",
            hours_to_deadline=pytest.approx(30.0),
            hour_value=0.0,
            on_demand=False,
            new_request=True,  # its first attempt: nothing ran yet
        )
    ]
    placer(SEEN_BOTH).place(due, spot(2), [spot(1)])  # a re-queue
    assert jobs[1].new_request is False


def test_without_a_deadline_an_hour_waited_is_worth_the_cheapest_on_demand_hour(jobs: list[Job]) -> None:
    request = {**REQUEST, "locations": ["asia-southeast1", "us-central1"], "location": "asia-southeast1"}
    placer(running("asia-southeast1", "a")).place(request, spot(location="asia-southeast1"), [])
    (job,) = jobs
    assert job.hour_value == 82.53 and job.hours_to_deadline is None
    assert job.changeover_hours == pytest.approx(1200 / 3600)  # the deployment's prior
    assert job.remaining_hours == 1.0  # nothing says how much: compared per hour of work


def test_a_deadline_without_the_work_left_cannot_be_weighed_against_the_time(jobs: list[Job]) -> None:
    placer(SEEN_BOTH).place({**REQUEST, "deadline": "2026-12-03T18:00:00Z"}, spot(), [])
    (job,) = jobs
    assert job.hours_to_deadline is None and job.hour_value == 82.53 and job.remaining_hours == 1.0


def test_an_on_demand_attempt_is_weighed_on_demand_and_a_planned_location_without_a_price_is_no_current_one(
    jobs: list[Job],
) -> None:
    request = {**REQUEST, "locations": ["mars-north1", "us-central1", "us-east4"], "location": "mars-north1"}
    placer(SEEN_BOTH).place(request, spot(location="mars-north1", strategy="STANDARD"), [])
    (job,) = jobs
    assert job.on_demand and job.current_location is None


# What it says.


def test_the_reason_says_the_choice_what_was_seen_there_and_its_price() -> None:
    request = {**REQUEST, "total_steps": 1000, "expected_step_seconds": 72}
    facts = waiting("us-central1", "a") + running("us-east4", "b")
    placed = placer(facts).place(request, spot(), [])
    assert placed.location == "us-east4"
    assert placed.reason.startswith("cheapest expected cost to finish: $")
    # 3 h on Spot after a 5 min wait, with an hour of prior at 1/2: (3 + 1/2) / (3 + 1/12 + 1)
    assert placed.reason.endswith("(capacity 86% of the time, $14.85/h)")


def test_the_reason_says_per_hour_of_work_and_nothing_observed_where_so() -> None:
    # us-east4 unseen (an even chance) and cheaper than us-central1, where a job waits
    placed = placer(waiting("us-central1", "a")).place(REQUEST, spot(), [])
    assert placed.location == "us-east4"
    assert placed.reason.endswith(" per hour of work (nothing observed there, $14.85/h)")


def test_the_reason_says_what_reading_the_checkpoint_there_costs() -> None:
    request = {**REQUEST, "total_steps": 1000, "expected_step_seconds": 72}
    earlier = spot(last_checkpoint=[0, 100], last_checkpoint_bytes=2 * 10**12)
    facts = waiting("us-central1", "a") + running("us-east4", "b")
    placed = placer(facts, bucket_location="US-CENTRAL1").place(request, spot(2), [earlier])
    assert placed.location == "us-east4"
    assert placed.reason.endswith("$14.85/h); reading its 2,000 GB checkpoint there $40.00")


def test_one_allowed_location_with_a_price_is_not_weighed() -> None:
    request = {**REQUEST, "locations": ["us-central1", "mars-north1"]}
    assert placer(SEEN_BOTH).place(request, spot(), []).reason == (
        "no prices for a3-highgpu-8g in two allowed locations"
    )


def test_a_request_without_a_machine_type_is_not_weighed() -> None:
    request = {**REQUEST, "custom_job": {"jobSpec": {"workerPoolSpecs": [{}]}}}
    assert placer(SEEN_BOTH).place(request, spot(), []).reason == "no machine class to weigh"


def test_the_planned_location_is_used_when_no_locations_are_listed() -> None:
    assert placer(SEEN_BOTH).place({**REQUEST, "locations": None}, spot(), []).reason == "the only allowed location"


# Reads that fail.


@pytest.mark.parametrize("error", [ServiceUnavailable("busy"), Forbidden("no list"), TransientError("later")])
def test_a_read_refused_or_failing_for_now_is_advisory_and_not_tried_again(error: Exception) -> None:
    tries: list[MachineClass] = []

    def read(machine_class: MachineClass) -> list[FleetFact]:
        tries.append(machine_class)
        raise error

    failing = Placer(read, price, NOW, 1200)
    assert failing.place(REQUEST, spot(), []).reason == "fleet observations unreadable"
    assert failing.has_capacity(REQUEST, "us-east4") is None
    assert len(tries) == 1


def test_a_bug_in_the_read_is_not_swallowed() -> None:
    def read(machine_class: MachineClass) -> list[FleetFact]:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        Placer(read, price, NOW, 1200).place(REQUEST, spot(), [])


def test_the_outlook_and_the_bound_are_none_without_a_class() -> None:
    due = {"custom_job": {}, "location": "us-east4", "deadline": "2026-12-03T18:00:00Z"}
    assert placer(SEEN_BOTH).spot_outlook(due, "us-east4") is None
    assert placer(SEEN_BOTH).changeover_bound(due, "us-east4") is None


# The work left and the checkpoint.


def test_the_work_left_is_from_the_newest_attempt_with_the_kits_numbers_and_the_furthest_checkpoint() -> None:
    older = spot(1, total_steps=2000, steps_per_second=0.5, last_checkpoint=[0, 900])
    newer = spot(2, total_steps=1000, steps_per_second=0.1, last_checkpoint=[1, 100])
    partial = spot(3, total_steps=5000)  # no rate yet: not the kit's numbers
    assert work_hours({}, [older, newer, partial]) == pytest.approx((1000 - 900) / 0.1 / 3600)
    fresh = spot(1, total_steps=720, steps_per_second=0.1)
    assert work_hours({}, [fresh]) == pytest.approx(2.0)  # nothing committed yet
    assert work_hours({}, [spot(1, total_steps=1000, steps_per_second=0.1, last_checkpoint=[0, 1000])]) == 0.0
    assert work_hours({}, [spot(1, total_steps=1000, steps_per_second=0.1, last_checkpoint=[0, 1500])]) == 0.0


def test_without_the_kits_numbers_the_request_says_the_work_less_what_is_committed() -> None:
    request = {"total_steps": 1000, "expected_step_seconds": 36}
    assert work_hours(request, [spot(1, last_checkpoint=[0, 500])]) == pytest.approx(5.0)
    assert work_hours(request, [spot(1, last_checkpoint=[0, 1500])]) == 0.0
    assert work_hours(request, [spot(1, last_checkpoint=[0, 1000])]) == 0.0
    assert work_hours({"total_steps": 1000}, []) is None
    assert work_hours({"expected_step_seconds": 36}, []) is None


def test_the_checkpoint_is_the_newest_with_a_size() -> None:
    sized = spot(1, last_checkpoint=[0, 10], last_checkpoint_bytes=5 * 10**9)
    unsized = spot(2, last_checkpoint=[0, 20])
    move = checkpoint_move([sized, unsized], "US")
    assert (move.checkpoint_gb, move.bucket_location) == (5.0, "US")


def test_a_claim_weighs_only_the_attempts_before_the_new_one() -> None:
    due = {**REQUEST, "deadline": "2026-12-03T18:00:00Z", "locations": ["us-central1"]}
    earlier = spot(1)
    new = spot(2)
    record = RequestRecord("r1", due, "gs://b/r1/", attempts=[earlier, new])
    place_claimed(placer(SEEN_BOTH), record, new)
    assert new.placed == "the only allowed location" and new.spot_outlook is not None
