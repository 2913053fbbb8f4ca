"""shared/found_jobs.py at more edges its mutants found: an adoption keeps Vertex's create time, says
what it refused of the kit lines kept, survives a record deleted under it, says nothing of a second
job, and leaves another delivery's cancel to it; the stray sweep goes on past a location it cannot
list (its alert unsent too); a stray's line names its attempt; a cancelled request's late job is
cancelled with no alert; a location another instance marked is remembered."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core.exceptions import Forbidden
from google.cloud.aiplatform_v1 import CustomJob
from spotjobs_kit.lines import KEY, format_line

from shared.clock import iso, parse_iso
from shared.found_jobs import adopt_found_job, adopt_job, cancel_stray, sweep_strays
from shared.job_locations import LOCATIONS_PREFIX, remember_location, sweep_locations
from shared.ledger.records import CancelIntent, RequestRecord
from shared.ledger.store import LedgerStore
from shared.wiring import Ports
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, make_settings

RUNNING = 3


@pytest.fixture
def world(gcs_bucket) -> World:
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))


def unrecorded(world: World) -> str:
    """req-1's attempt 1 claimed, its job created and not recorded (its delivery died): the job."""
    _, job = world.submitted(state=RUNNING)

    def crashed(current: RequestRecord) -> None:
        current.attempts[0].job = None

    world.rewrite("req-1", crashed)
    return job


def found(world: World, job: str) -> CustomJob:
    return world.vertex.get_custom_job(name=job)


def test_an_adopted_job_keeps_the_create_time_vertex_gives_it(world: World) -> None:
    job = unrecorded(world)
    created = datetime.now(UTC) - timedelta(hours=1)
    world.vertex.jobs[job].create_time = created

    def written_before_it(current: RequestRecord) -> None:
        current.created_at = iso(created - timedelta(minutes=1))  # its create came after its record

    world.rewrite("req-1", written_before_it)

    adopt_job(world.ports, "req-1", 1, "us-central1", found(world, job), CapturedLog().logger)

    recorded = world.ledger.get("req-1").attempt(1)
    assert recorded.job == job
    assert abs((parse_iso(recorded.created_at) - created).total_seconds()) < 1


def test_a_kept_line_refused_is_said_by_the_adoption_that_records_the_job(world: World) -> None:
    job = unrecorded(world)
    line = format_line("run_started", {"request_id": "req-1", "attempt": 1, "run": 99}, key=world.kit_key())
    world.ledger.park_kit_line(job.rsplit("/", 1)[-1], "line-1", json.loads(line)[KEY])
    log = CapturedLog()

    adoption = adopt_job(world.ports, "req-1", 1, "us-central1", found(world, job), log.logger)

    assert adoption.wrote
    assert [line["kit_event"] for line in log.events("kit_line_refused")] == ["run_started"]


def test_a_job_whose_record_was_deleted_under_its_adoption_is_recorded_nowhere_and_nothing_raises(
    world: World, gcs_bucket
) -> None:
    """A person deleted the record between the claim and the adoption, a kit line kept meanwhile."""
    job = unrecorded(world)
    line = format_line("run_started", {"request_id": "req-1", "attempt": 1, "run": 0}, key=world.kit_key())
    world.ledger.park_kit_line(job.rsplit("/", 1)[-1], "line-1", json.loads(line)[KEY])
    gcs_bucket.delete_blob("requests/req-1.json")

    adoption = adopt_job(world.ports, "req-1", 1, "us-central1", found(world, job), CapturedLog().logger)

    assert not adoption.wrote and world.ledger.get("req-1") is None
    assert world.vertex.cancelled == []  # the stray sweep's, with its alert


def test_a_second_job_of_an_attempt_is_cancelled_and_never_said_adopted(world: World) -> None:
    _, first = world.submitted(state=RUNNING)
    second = world.vertex.add("req-1", 1, state=RUNNING)
    log = CapturedLog()

    adoption, _ = adopt_found_job(
        world.ports, "req-1", 1, "us-central1", found(world, second), log.logger, left="was found"
    )

    assert (adoption.job, adoption.wrote) == (first, False)
    assert log.events("claim_adopted") == []
    assert world.vertex.cancelled == [second]


def test_adopting_a_recorded_job_again_leaves_the_cancel_another_delivery_just_decided_to_it(world: World) -> None:
    """A deadline switch decided the cancel of attempt 1 a moment ago, in another delivery, which
    sends it: a later adoption of the same job (it wrote nothing) does not send it too."""
    _, job = world.submitted(state=RUNNING)

    def switched(current: RequestRecord) -> None:
        current.attempts[0].cancel_decided_at = iso(datetime.now(UTC))

    world.rewrite("req-1", switched)

    adoption = adopt_job(world.ports, "req-1", 1, "us-central1", found(world, job), CapturedLog().logger)

    assert not adoption.wrote
    assert world.vertex.cancelled == []


class RefusedListing:
    """A location's JobService that refuses every listing for good (a permission missing there)."""

    def list_custom_jobs(self, **_: Any) -> Any:
        raise Forbidden("aiplatform.customJobs.list denied")


def refusing(world: World, location: str) -> Ports:
    return replace(world.ports, job_service=lambda at: RefusedListing() if at == location else world.vertex)


def test_a_location_the_sweep_cannot_list_stops_no_other_locations_sweep(world: World) -> None:
    world.submitted(state=RUNNING)
    stray = world.vertex.add("req-1", 2, state=RUNNING)  # no attempt 2 was ever claimed

    swept = sweep_strays(refusing(world, "asia-east1"), ["asia-east1", "us-central1"], CapturedLog().logger)

    assert swept == [stray] and world.vertex.cancelled == [stray]


def test_a_refused_listings_alert_that_cannot_be_sent_stops_nothing(world: World) -> None:
    world.submitted(state=RUNNING)
    stray = world.vertex.add("req-1", 2, state=RUNNING)
    world.publisher.fail_next = 1
    log = CapturedLog()

    swept = sweep_strays(refusing(world, "asia-east1"), ["asia-east1", "us-central1"], log.logger)

    assert swept == [stray]
    assert [line["location"] for line in log.events("stray_sweep_alert_failed")] == ["asia-east1"]


def test_a_cancelled_strays_line_names_the_attempt_its_labels_say(world: World) -> None:
    """Attempt 2 was never claimed; a copy of the job re-run with its attempt label emptied names none."""
    world.submitted(state=RUNNING)
    stray = world.vertex.add("req-1", 2, state=RUNNING)
    unnamed = world.vertex.add("req-1", 1, state=RUNNING)
    world.vertex.jobs[unnamed].labels["spotjobs-attempt"] = ""
    log = CapturedLog()

    sweep_strays(world.ports, ["us-central1"], log.logger)

    attempts = {line["job"]: line["attempt"] for line in log.events("stray_job_cancelled")}
    assert attempts == {stray: 2, unnamed: 0}


def test_a_cancelled_requests_late_job_is_cancelled_without_an_alert(world: World) -> None:
    record, _ = world.submitted(state=RUNNING)
    late = world.vertex.add("req-1", 2, state=RUNNING)
    cancelled = replace(record, cancel=CancelIntent(by="operator@example.com", at=iso(datetime.now(UTC))))

    cancel_stray(world.ports, cancelled, found(world, late), CapturedLog().logger)

    assert world.vertex.cancelled == [late]
    assert world.publisher.on("ops-alerts") == []


def test_a_location_another_instance_marked_is_remembered(world: World, gcs_bucket) -> None:
    gcs_bucket.blob(f"{LOCATIONS_PREFIX}europe-west4").upload_from_string(b"")

    remember_location(world.ports, "europe-west4")

    assert "europe-west4" in sweep_locations(world.ports)
