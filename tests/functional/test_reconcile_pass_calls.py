"""Every Vertex call a reconcile pass sends is one its CRUD budget and call window judge
(shared/reconcile_vertex.py): the pass's client sends nothing else (issue 43)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from shared.adapters.vertex import parent_path
from shared.clock import utcnow
from shared.ledger.store import LedgerStore
from shared.log import Logger
from shared.reconcile_vertex import VertexPass
from sim.gcs import MemoryStorage
from tests.support.decisions import FakePublisher, World, make_settings
from tests.support.stalled_vertex import PassClock, StalledVertex

RUNNING, SUCCEEDED = 3, 4
LOCATION = "us-central1"


@pytest.fixture
def clock() -> PassClock:
    return PassClock()


@pytest.fixture
def world(clock: PassClock) -> World:
    one_call_at_a_time = threading.Lock()  # the pass's threads call at once; each call is atomic

    def serve(_service: str, _operation: str, perform: Callable[[], Any]) -> Any:
        with one_call_at_a_time:
            return perform()

    bucket = MemoryStorage(clock=utcnow, io=serve).client().bucket("reconcile-pass-calls-state")
    return World(LedgerStore(bucket), StalledVertex(clock, set()), FakePublisher(), make_settings(bucket.name))


def on_pass_clock(world: World, clock: PassClock) -> Any:
    return replace(world.ports, clock=clock)


def test_a_pass_client_refuses_a_call_its_budget_and_window_do_not_judge(world: World) -> None:
    """A create (or any call the pass's client does not wrap) is not handed to Vertex past the
    budget and the window: the client has no such call, and nothing is sent."""
    client = VertexPass(world.ports, Logger(), started=utcnow()).job_service(LOCATION)

    with pytest.raises(AttributeError, match="create_custom_job"):
        client.create_custom_job(
            parent=parent_path(world.settings.project, LOCATION), custom_job={}, retry=None, timeout=30.0
        )

    assert world.vertex.creates == 0
    assert not hasattr(client, "delete_custom_job")
