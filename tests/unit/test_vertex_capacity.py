"""The emulator's Spot capacity trace (devstack/vertex/capacity.py, invented, opt-in), per location:
a trace naming a region holds for that region's jobs, one without for every other."""

from __future__ import annotations

import pytest

from devstack.vertex.capacity import SpotCapacity


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_trace_without_a_location_holds_everywhere_until_removed() -> None:
    clock = Clock()
    capacity = SpotCapacity(clock)
    assert capacity.available("us-central1") and capacity.seconds_to_next_tick() == float("inf")
    assert capacity.set_trace({"data": [1, 0], "tick_seconds": 10}) == {"data": [1, 0], "tick_seconds": 10.0}
    assert capacity.available("us-central1") and capacity.available("us-east4")
    clock.now += 12
    assert not capacity.available("us-central1") and capacity.seconds_to_next_tick("us-east4") == 8
    clock.now += 100  # the last entry holds for ever after
    assert not capacity.available()
    capacity.set_trace({"data": []})
    assert capacity.available("us-central1")


def test_a_trace_of_one_location_holds_for_its_jobs_only() -> None:
    clock = Clock()
    capacity = SpotCapacity(clock)
    capacity.set_trace({"data": [0], "tick_seconds": 3600, "location": "us-central1"})
    assert not capacity.available("us-central1") and capacity.available("us-east4")
    capacity.set_trace({"data": [1], "tick_seconds": 3600})  # every other region
    assert not capacity.available("us-central1") and capacity.available("us-east4")
    assert capacity.to_json("us-central1") == {"data": [0], "tick_seconds": 3600.0, "location": "us-central1"}
    capacity.set_trace({"data": [], "location": "us-central1"})
    assert capacity.available("us-central1")
    capacity.set_trace({"data": [0], "location": "us-east4"})
    capacity.clear()
    assert capacity.available("us-east4")


@pytest.mark.parametrize("body", [{"data": [2]}, {"data": [1], "location": 4}, {"data": [1], "zone": "a"}])
def test_a_malformed_trace_is_refused(body: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SpotCapacity().set_trace(body)
