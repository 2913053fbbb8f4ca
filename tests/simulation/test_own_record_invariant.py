"""`jobs_of_their_own_record` has teeth: an attempt that records a job created before its record,
or with another claim's kit key (an earlier record's of the id, which a person deleted), is
reported; its own job is not, nor a record a person wrote by hand."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.clock import iso
from shared.jobs import ENV_KIT_KEY, kit_key_of
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from sim import invariants
from sim.vertex import SimJob
from sim.world import World


@pytest.fixture
def world() -> World:
    return World(0)


KEY = "ab" * 32


def job_created(world: World, seconds_from_now: float, kit_key: str = KEY) -> SimJob:
    labels = {"spotjobs-request-id": "r1", "spotjobs-attempt": "1", "spotjobs-deployment": "sim"}
    moment = world.clock.now() + timedelta(seconds=seconds_from_now)
    name = f"projects/p/locations/us-central1/customJobs/{len(world.vertex.jobs) + 1}"
    env = [{"name": ENV_KIT_KEY, "value": kit_key}]
    request = {"labels": labels, "jobSpec": {"workerPoolSpecs": [{"containerSpec": {"env": env}}]}}
    job = SimJob(name, "us-central1", request, labels, "JOB_STATE_RUNNING", moment, moment)
    world.vertex.jobs[name] = job
    return job


def record_naming(world: World, job: SimJob) -> None:
    now = iso(world.clock.now())
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at=now, job=job.name, kit_key=KEY)
    record = RequestRecord("r1", {"custom_job": {}}, "gs://c/", status=RequestStatus.RUNNING, attempts=[attempt])
    record.created_at = now
    LedgerStore(world.storage.client().bucket(world.settings.state_bucket)).restore(record)


def test_an_attempt_recording_a_job_older_than_its_record_is_caught(world: World) -> None:
    earlier_life = job_created(world, seconds_from_now=-3600)
    record_naming(world, earlier_life)
    [found] = invariants.jobs_of_their_own_record(world)
    assert found.invariant == "jobs_of_their_own_record" and f"records {earlier_life.name}" in found.detail


def test_an_attempt_recording_a_job_of_another_claims_key_is_caught(world: World) -> None:
    """A create out when a person deleted its record, accepted after the id's new record was
    written: its create time cannot tell, its kit key can."""
    earlier_claims = job_created(world, seconds_from_now=1, kit_key="cd" * 32)
    record_naming(world, earlier_claims)
    [found] = invariants.jobs_of_their_own_record(world)
    assert f"records {earlier_claims.name}, created with another claim's kit key" in found.detail


def test_vertex_shows_the_kit_key_a_job_was_created_with(world: World) -> None:
    assert kit_key_of(job_created(world, seconds_from_now=1).to_proto()) == KEY


def test_its_own_job_is_left_alone(world: World) -> None:
    record_naming(world, job_created(world, seconds_from_now=1))
    assert invariants.jobs_of_their_own_record(world) == []


def test_a_record_a_person_wrote_is_left_alone(world: World) -> None:
    record_naming(world, job_created(world, seconds_from_now=-3600))
    world.tampering.written["requests/r1.json"] = "past_layout"
    assert invariants.jobs_of_their_own_record(world) == []
