"""The active marker of a request whose record a person deleted while its job lives stands until
that job has ended (docs/ARCHITECTURE.md, "Replays and lost documents"): a fresh message of the id
looks for that job only while the marker is there (`shared.redeliveries.replayed_without_a_record`).
Reconcile's index step finds such a marker stale (no record, written by the claim long ago), and
only the stray sweep, later in the pass, knows whether a job of the id lives (it renews the marker
then: seed 10178). A pass that dies between the two, or whose sweep cannot list a location, must
not have removed it (simulator seed 54: the pass crashed between them, with us-east4 stalled)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from google.api_core.exceptions import ServiceUnavailable

from shared.clock import utcnow
from shared.ledger.store import INDEX_GRACE_SECONDS, LedgerStore
from shared.log import Logger
from shared.reconcile import run_reconcile
from sim.gcs import MemoryStorage
from tests.support.decisions import FakePublisher, World, make_settings
from tests.support.vertex import FakeVertex

RUNNING, SUCCEEDED = 3, 4


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> World:
    one_call_at_a_time = threading.Lock()  # the pass's threads call at once; each call is atomic

    def serve(_service: str, _operation: str, perform: Callable[[], Any]) -> Any:
        with one_call_at_a_time:
            return perform()

    bucket = MemoryStorage(clock=utcnow, io=serve).client().bucket("recordless-marker-state")
    # The claim's marker is past its grace when the pass looks (the pass runs an hour later).
    later = timedelta(seconds=INDEX_GRACE_SECONDS + 3600)
    monkeypatch.setattr("shared.reconcile_index.utcnow", lambda: utcnow() + later)
    return World(LedgerStore(bucket), FakeVertex(), FakePublisher(), make_settings(bucket.name))


def deleted_by_a_person(world: World, state: int) -> str:
    _, job = world.submitted("r1", state=state)
    world.ledger._bucket.blob("requests/r1.json").delete()  # noqa: SLF001 - a person, in the console
    assert world.ledger.active_entry("r1") is not None  # the claim's marker
    return job


def test_a_pass_whose_sweep_cannot_list_keeps_the_marker_of_a_record_less_live_job(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleted_by_a_person(world, RUNNING)

    def stalled(request: dict[str, Any], **_: Any) -> Any:
        raise ServiceUnavailable("us-central1 stalls")

    monkeypatch.setattr(world.vertex, "list_custom_jobs", stalled)
    run_reconcile(world.ports, Logger())

    assert world.ledger.active_entry("r1") is not None  # a fresh message of r1 still looks, and waits


def test_a_pass_that_dies_before_its_sweep_keeps_the_marker_of_a_record_less_id(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleted_by_a_person(world, RUNNING)

    def dies(*_: Any, **__: Any) -> Any:
        raise SystemExit("the instance is gone")

    monkeypatch.setattr("shared.reconcile.sweep_strays", dies)
    with pytest.raises(SystemExit):
        run_reconcile(world.ports, Logger())

    assert world.ledger.active_entry("r1") is not None


def test_a_record_less_marker_goes_once_a_whole_sweep_found_no_live_job_of_its_id(world: World) -> None:
    job = deleted_by_a_person(world, RUNNING)
    run_reconcile(world.ports, Logger())
    assert world.ledger.active_entry("r1") is not None  # its job lives: the sweep cancelled it, and kept it
    assert world.vertex.cancelled == [job]

    world.vertex.set_state(job, SUCCEEDED)  # ended: nothing is left to wait for
    run_reconcile(world.ports, Logger())  # the renewed marker is past its grace too (the pass's clock)

    assert world.ledger.active_entry("r1") is None
