"""`find_attempt_job`: which labelled job is a claim's own, by its create time against the record's
`created_at` (a job created before the record is an earlier life's of the id, simulator seed 1771),
with Vertex's clock allowed to lag ours by `CREATE_CLOCK_SKEW_SECONDS`, a second."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.adapters.vertex import find_attempt_job
from tests.support.vertex import DEPLOYMENT, PROJECT, FakeVertex

PARENT = f"projects/{PROJECT}/locations/us-central1"
RECORD_WRITTEN = datetime(2026, 12, 6, 10, 0, 0, tzinfo=UTC)


def _job_created(vertex: FakeVertex, before_the_record: timedelta) -> str:
    name = vertex.add("req-1", 1)
    vertex.jobs[name].create_time = RECORD_WRITTEN - before_the_record
    return name


def _found(vertex: FakeVertex, since: str) -> str | None:
    job = find_attempt_job(vertex, PARENT, "req-1", 1, DEPLOYMENT, since=since, timeout=30.0)
    return job.name if job is not None else None


def test_a_job_created_up_to_a_second_before_its_record_is_the_records() -> None:
    for lag in (timedelta(seconds=1), timedelta(milliseconds=500)):
        vertex = FakeVertex()
        own = _job_created(vertex, lag)
        assert _found(vertex, RECORD_WRITTEN.isoformat()) == own


def test_a_job_created_more_than_a_second_before_its_record_is_an_earlier_lifes() -> None:
    vertex = FakeVertex()
    _job_created(vertex, timedelta(hours=2))
    _job_created(vertex, timedelta(seconds=1.5))
    assert _found(vertex, RECORD_WRITTEN.isoformat()) is None

    own = _job_created(vertex, timedelta(seconds=-3))
    assert _found(vertex, RECORD_WRITTEN.isoformat()) == own


def test_a_record_without_a_creation_time_takes_the_oldest_labelled_job() -> None:
    vertex = FakeVertex()
    oldest = _job_created(vertex, timedelta(hours=2))
    _job_created(vertex, timedelta(seconds=-3))
    assert _found(vertex, "") == oldest


def test_a_job_with_another_claims_kit_key_is_not_the_claims() -> None:
    """A create out when a person deleted the id's earlier record, accepted after this record was
    written: newer than the record, but created with that record's key."""
    vertex = FakeVertex()
    for key in ("cd" * 32, "ab" * 32):
        name = _keyed_job_created(vertex, timedelta(seconds=-3), key)
    assert _found_with_key(vertex, "ab" * 32) == name


def test_a_job_with_the_claims_kit_key_is_the_claims_whatever_the_clocks_say() -> None:
    """Vertex's clock two seconds behind ours: the key, drawn at the claim, tells its own job."""
    vertex = FakeVertex()
    own = _keyed_job_created(vertex, timedelta(seconds=2), "ab" * 32)
    assert _found_with_key(vertex, "ab" * 32) == own


def _keyed_job_created(vertex: FakeVertex, before_the_record: timedelta, kit_key: str) -> str:
    from google.cloud.aiplatform_v1 import CustomJob

    from shared.jobs import ENV_KIT_KEY

    name = _job_created(vertex, before_the_record)
    spec = {"worker_pool_specs": [{"container_spec": {"env": [{"name": ENV_KIT_KEY, "value": kit_key}]}}]}
    vertex.jobs[name] = CustomJob(vertex.jobs[name], job_spec=spec)
    return name


def _found_with_key(vertex: FakeVertex, kit_key: str) -> str | None:
    job = find_attempt_job(
        vertex, PARENT, "req-1", 1, DEPLOYMENT, since=RECORD_WRITTEN.isoformat(), kit_key=kit_key, timeout=30.0
    )
    return job.name if job is not None else None
