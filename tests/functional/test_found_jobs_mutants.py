"""shared/found_jobs.py at an edge its mutants found: a stray is cancelled through a client of its
own region (the one its resource name says), whichever region the request was placed in first.
tests/support/vertex.py's FakeVertex serves every region, so only the region asked tells."""

from __future__ import annotations

from dataclasses import replace

from google.cloud.aiplatform_v1 import CustomJob

from shared.found_jobs import cancel_stray
from shared.ledger.store import LedgerStore
from shared.wiring import Ports
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, make_settings

RUNNING = 3


def test_a_stray_is_cancelled_through_its_own_regions_client(gcs_bucket) -> None:
    world = World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))
    record, _ = world.submitted(state=RUNNING)
    stray = world.vertex.add("req-1", 1, location="europe-west4", state=RUNNING)
    regions: list[str] = []

    def job_service(location: str) -> FakeVertex:
        regions.append(location)
        return world.vertex

    ports: Ports = replace(world.ports, job_service=job_service)

    cancel_stray(ports, record, CustomJob(world.vertex.jobs[stray]), CapturedLog().logger)

    assert world.vertex.cancelled == [stray]
    assert regions == ["europe-west4"]
