"""shared/found_jobs.py at edges its mutants found: a stray is cancelled through a client of its own
region (the one its resource name says; tests/support/vertex.py's regional client would refuse
another, and the region asked tells it too), and each live job of a request whose record is gone is alerted once,
by a note of its own."""

from __future__ import annotations

from dataclasses import replace

from google.cloud.aiplatform_v1 import CustomJob

from shared.found_jobs import cancel_stray, sweep_strays
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


def test_each_live_job_of_a_request_whose_record_is_gone_is_alerted_once_by_its_own_note(gcs_bucket) -> None:
    """Two jobs of a request deleted by hand, in one region: each is alerted (once, by a note named
    after the job, not after the region's path the two share) and cancelled."""
    world = World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))
    _, first = world.submitted(state=RUNNING)
    second = world.vertex.add("req-1", 2, state=RUNNING)
    gcs_bucket.delete_blob("requests/req-1.json")

    for _ in range(2):  # a second pass (they are still cancelling) says nothing again
        sweep_strays(world.ports, ["us-central1"], CapturedLog().logger)

    alerts = [m.data for m in world.publisher.on("ops-alerts")]
    assert sorted(a["details"]["stray_job"] for a in alerts if a["kind"] == "stray_job") == sorted([first, second])
    assert set(world.vertex.cancelled) == {first, second}
