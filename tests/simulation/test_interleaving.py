"""The simulator's scheduler interleaves handlers at their I/O calls (issue 43): each delivery and
operator command is a task that yields before every call, so races between two instances of a
function, or a delivery and reconcile, are in the world, and a check-then-act defect is found."""

from __future__ import annotations

from typing import Any

import pytest

from shared import redeliveries
from sim.world import World

# A world that pushes many messages to a second instance while their first delivery runs, as
# Pub/Sub does when the ack deadline passes: the window where a check-then-act race lives.
AGAIN_MEANWHILE = 0.5


def racy(seed: int, *, interleave: bool = True) -> World:
    world = World(seed, interleave=interleave)
    world.concurrent_redelivery_rate = AGAIN_MEANWHILE
    world.instances = dict.fromkeys(world.instances, 5)
    return world


def test_handlers_run_concurrently_and_a_seed_replays_exactly() -> None:
    first, again = World(36), World(36)
    assert not first.run() and not again.run()
    assert first.calls_among_others > 0  # some call happened while another handler was in flight
    assert [str(line) for line in first.trace] == [str(line) for line in again.trace]


def test_without_interleaving_every_handler_runs_alone() -> None:
    world = World(36, interleave=False)
    assert not world.run()
    assert world.calls_among_others == 0


def check_then_act(ports: Any, alert: Any) -> None:
    """`alert_rejection_once` before issue 43: look for the note, publish, then write it."""
    note = redeliveries.ledger_bucket(ports.ledger).blob(f"{redeliveries.REJECTION_NOTES}{alert.details['message_id']}")
    if note.exists():
        return
    redeliveries.publish_alert(ports, alert)
    note.upload_from_string(b"")


def test_a_check_then_act_race_is_found_only_with_interleaving(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redeliveries, "alert_rejection_once", check_then_act)

    def finds_the_race(world: World) -> bool:
        return any(v.invariant == "alerts_once" and "invalid_request" in v.detail for v in world.run())

    found = next((seed for seed in range(40) if finds_the_race(racy(seed))), None)
    assert found is not None, "no seed of 0-39 finds the planted race"
    assert not finds_the_race(racy(found, interleave=False))  # whole deliveries never meet in the gap
