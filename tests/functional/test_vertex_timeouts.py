"""Every Vertex call the handlers make names a timeout (`Settings.vertex_call_timeout_seconds`):
the JobService client sets none by default, so a reply that never came held a reconcile pass and
its run lease, or a delivery and its claim, until the function's own timeout killed it.

Driven through the real reconcile and on_job_event code over the fake Vertex, which keeps the
timeout each get, list and cancel was given."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.clock import utcnow
from shared.delivery import Message
from shared.ledger.cancelling import cancel_request
from shared.ledger.store import LedgerStore
from shared.log import Logger
from shared.observe import handle_job_event
from shared.reconcile import run_reconcile
from sim.gcs import MemoryStorage
from tests.support.decisions import FakePublisher, World, log_entry, make_settings
from tests.support.vertex import FakeVertex

RUNNING, SUCCEEDED = 3, 4


class TimedVertex(FakeVertex):
    """FakeVertex keeping (call, timeout) for each get, list and cancel."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[tuple[str, Any]] = []

    def get_custom_job(self, name: str, **kwargs: Any) -> Any:
        self.timeouts.append(("get", kwargs.get("timeout")))
        return super().get_custom_job(name)

    def list_custom_jobs(self, request: dict[str, Any], **kwargs: Any) -> Any:
        self.timeouts.append(("list", kwargs.get("timeout")))
        return super().list_custom_jobs(request)

    def cancel_custom_job(self, name: str, **kwargs: Any) -> None:
        self.timeouts.append(("cancel", kwargs.get("timeout")))
        super().cancel_custom_job(name)


@pytest.fixture
def world() -> World:
    one_call_at_a_time = threading.Lock()

    def serve(_service: str, _operation: str, perform: Callable[[], Any]) -> Any:
        with one_call_at_a_time:
            return perform()

    bucket = MemoryStorage(clock=utcnow, io=serve).client().bucket("vertex-timeouts-state")
    return World(LedgerStore(bucket), TimedVertex(), FakePublisher(), make_settings(bucket.name))


def test_every_vertex_call_of_a_reconcile_pass_names_the_settings_timeout(world: World) -> None:
    _, running = world.submitted("req-running", state=RUNNING)
    _, ended = world.submitted("req-ended", state=RUNNING)
    world.submitted("req-cancelled", state=RUNNING)
    world.ledger.update(
        "req-cancelled",
        lambda current: cancel_request(current, by="op", reason=None, now=datetime.now(UTC)).value,
    )
    world.vertex.set_state(ended, SUCCEEDED)  # gone from the listing: read with a get

    run_reconcile(world.ports, Logger())

    calls = {call for call, _ in world.vertex.timeouts}
    assert calls == {"list", "get", "cancel"}
    assert {timeout for _, timeout in world.vertex.timeouts} == {world.settings.create_timeout_seconds}
    assert running not in world.vertex.cancelled


def test_a_job_event_reads_its_job_with_the_settings_timeout(world: World) -> None:
    _, job = world.submitted("req-1", state=RUNNING)
    world.vertex.set_state(job, SUCCEEDED)

    message = Message(log_entry(job, "Job completed successfully."), "m-1")
    handle_job_event(message, Logger(), settings=world.settings, ports=lambda: world.ports)

    assert world.vertex.timeouts == [("get", world.settings.create_timeout_seconds)]
