"""The retention phase delivers as Pub/Sub's push subscriptions do: each on its own, so a backlog
on one never holds back another's messages (seed 7304: a quota line handing over for good filled
the step's deliveries, the reconcile tick's message waited three and a half days behind it, and the
ledger sweep's daily round ran every 3.5 days)."""

from __future__ import annotations

import pytest

from sim.pubsub import Delivery
from sim.world import RETENTION_DELIVERIES, World


@pytest.fixture
def world() -> World:
    return World(0)


def test_a_backlog_on_one_subscription_holds_back_no_other_in_a_retention_step(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic_of = {sub.function: sub.topic for sub in world.pubsub.subs}
    for _ in range(RETENTION_DELIVERIES + 5):
        world.pubsub.accept(topic_of["submit_job"], b"{}", {})
    world.pubsub.accept(topic_of["reconcile"], b"{}", {"task": "reconcile"})
    delivered: list[str] = []

    def deliver(delivery: Delivery, *, whole: bool = False) -> None:
        world.pubsub.take(delivery)
        delivered.append(delivery.function)

    monkeypatch.setattr(world, "_deliver", deliver)
    world._drain(limit=RETENTION_DELIVERIES)

    assert delivered.count("reconcile") == 1
    assert delivered.count("submit_job") == RETENTION_DELIVERIES  # the backlog's share is still capped
    assert sum(d.function == "submit_job" for d in world.pubsub.pending) == 5
