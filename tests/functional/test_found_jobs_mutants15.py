"""shared/found_jobs.py at an edge the fifteenth mutation pass found: when several strays' cancels
fail, every one is tried and the first failure is the one raised (`_cancel_each`), not the last:
a failure the pass itself made (a deferral) yields to a real one, but one real failure does not
yield to another."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core.exceptions import InternalServerError, ServiceUnavailable

from shared.found_jobs import cancel_recordless
from shared.ledger.store import LedgerStore
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, make_settings

RUNNING = 3


class FailingCancels(FakeVertex):
    """Each job's cancel fails with its own error (`failures`: job name -> exception)."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: dict[str, Exception] = {}
        self.tried: list[str] = []

    def cancel_custom_job(self, name: str, **kwargs: Any) -> None:
        self.tried.append(name)
        raise self.failures[name]


def test_the_first_of_several_failed_stray_cancels_is_raised_once_all_were_tried(gcs_bucket) -> None:
    vertex = FailingCancels()
    world = World(LedgerStore(gcs_bucket), vertex, FakePublisher(), make_settings(gcs_bucket.name))
    first = vertex.add("req-1", 1, state=RUNNING)
    second = vertex.add("req-1", 2, state=RUNNING)
    vertex.failures = {first: ServiceUnavailable("first"), second: InternalServerError("second")}
    jobs = [world.vertex.get_custom_job(name=name) for name in (first, second)]

    with pytest.raises(ServiceUnavailable, match="first"):
        cancel_recordless(world.ports, "req-1", jobs, CapturedLog().logger)

    assert vertex.tried == [first, second]
