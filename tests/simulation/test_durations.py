"""`sim.durations.runs_within_timeout` has teeth: a handler run longer than its function's deployed
timeout is caught, from Terraform's values, as it ends and while still in flight."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared.settings import Settings
from sim import durations, hangs, invariants, virtual
from sim.world import World
from tests.support.terraform import topology


@pytest.fixture
def world() -> World:
    return World(0)


def test_the_timeouts_are_terraforms_for_every_function() -> None:
    timeouts = durations.deployed_timeouts()
    assert set(timeouts) == set(topology()["functions"])
    # The values the code itself is deployed with: reconcile's window and the push functions' bound.
    assert timeouts["reconcile"] == Settings().reconcile_timeout_seconds
    assert timeouts["submit_job"] == timeouts["on_job_event"] == hangs.FUNCTION_TIMEOUT_SECONDS
    assert timeouts["prune_checkpoints"] > timeouts["submit_job"]


def _deliver_a_pass(world: World, monkeypatch: pytest.MonkeyPatch, runs_seconds: float) -> None:
    """One reconcile delivery whose handler takes `runs_seconds` of the world's time."""

    def handler(message: Any, log: Any) -> None:
        world.clock.sleep(runs_seconds)  # a task's sleep (`World._sleep`): the world's clock moves by it

    monkeypatch.setattr("functions.reconcile._handle", handler)
    world.pubsub.accept(world.settings.maintenance_topic, b'{"task": "reconcile"}', {"task": "reconcile"})
    [delivery] = world.pubsub.deliverable()
    virtual.install(world)
    try:
        world._deliver(delivery, whole=True)  # noqa: SLF001 - one delivery, driven by hand, to its end
    finally:
        virtual.uninstall()


def test_a_pass_that_outlasts_reconciles_timeout_is_caught_as_it_ends(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    timeout = durations.deployed_timeouts()["reconcile"]
    _deliver_a_pass(world, monkeypatch, timeout)
    assert durations.runs_within_timeout(world) == []  # its whole timeout, not past it

    _deliver_a_pass(world, monkeypatch, timeout + 1)
    [found] = durations.runs_within_timeout(world)
    assert found.invariant == "runs_within_timeout" and "reconcile ran 301 s" in found.detail
    assert durations.runs_within_timeout(world) == []  # each run judged once
    assert durations.runs_within_timeout in invariants.STEP


def test_a_push_delivery_that_met_a_hang_is_excused_a_pass_is_not(world: World) -> None:
    start = world.clock.now()
    long = start + timedelta(seconds=90)
    world.runs.append(durations.Run("submit_job", "m1", start, long, hangs=1))
    assert durations.runs_within_timeout(world) == []  # production kills it; Pub/Sub redelivers
    world.runs.append(durations.Run("on_job_event", "m2", start, long, hangs=0))
    world.runs.append(durations.Run("reconcile", "m3", start, long + (long - start) * 3, hangs=2))
    found = durations.runs_within_timeout(world)
    assert sorted(v.detail.split(" ran ")[0] for v in found) == ["on_job_event", "reconcile"]


def test_a_run_still_in_flight_past_its_timeout_is_caught_once_quiet(world: World) -> None:
    from sim.world import Task

    task = Task("prune_checkpoints", lambda: None, faulty=True, origin="m9", started=world.clock.now())
    world.tasks.append(task)
    world.clock.advance(durations.deployed_timeouts()["prune_checkpoints"])
    assert durations.none_in_flight_past_timeout(world) == []
    world.clock.advance(1)
    [found] = durations.none_in_flight_past_timeout(world)
    assert "prune_checkpoints still runs message m9" in found.detail
    assert durations.none_in_flight_past_timeout in invariants.QUIESCENCE
