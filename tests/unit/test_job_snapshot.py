"""`JobSnapshot.of` reads the protobuf under a proto-plus CustomJob: what it reads must be what the
proto-plus fields say (their marshal's values), for every shape a job's fields take."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from google.cloud.aiplatform_v1 import CustomJob

from shared.jobs import JobSnapshot, job_error, state_name


def _through_proto_plus(job: Any) -> JobSnapshot:
    def when(moment: datetime | None) -> str | None:
        return (
            None if moment is None else moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        )

    return JobSnapshot(
        name=job.name,
        state=state_name(job.state),
        error=job_error(job),
        create_time=when(job.create_time),
        start_time=when(job.start_time),
        end_time=when(job.end_time),
        update_time=when(job.update_time),
    )


def _jobs(count: int) -> list[CustomJob]:
    rng = random.Random(43)
    jobs = []
    for i in range(count):
        moment = datetime(2026, 3, 2, tzinfo=UTC) + timedelta(microseconds=rng.randrange(10**13))
        job = CustomJob(name=f"projects/p/locations/l/customJobs/{i}", state=rng.randrange(0, 12))
        for field in ("create_time", "start_time", "end_time", "update_time"):
            if rng.random() < 0.6:
                setattr(job, field, moment + timedelta(seconds=rng.random() * 10**5))
        if rng.random() < 0.2:
            CustomJob.pb(job).start_time.nanos = rng.randrange(10**9)  # finer than a microsecond
        shape = rng.random()
        if shape < 0.3:
            job.error = {"code": rng.randrange(0, 15), "message": rng.choice(["", "preempted"])}
        elif shape < 0.4:
            job.error = {"details": [{"type_url": "type.googleapis.com/x"}]}  # neither code nor message
        jobs.append(job)
    return jobs


@pytest.mark.parametrize("job", _jobs(300), ids=lambda job: job.name.rsplit("/", 1)[-1])
def test_a_snapshot_reads_what_the_proto_plus_fields_say(job: CustomJob) -> None:
    assert JobSnapshot.of(job) == _through_proto_plus(job)


def test_a_state_number_the_enum_does_not_know_reads_as_unspecified() -> None:
    job = CustomJob(name="projects/p/locations/l/customJobs/1")
    CustomJob.pb(job).state = 99
    with pytest.warns(UserWarning):
        assert JobSnapshot.of(job).state == "JOB_STATE_UNSPECIFIED"


def test_a_job_that_is_not_a_proto_plus_message_is_read_by_its_attributes() -> None:
    moment = datetime(2026, 3, 2, 8, 0, 1, 5, tzinfo=UTC)
    fake = SimpleNamespace(
        name="j", state="RUNNING", error=None, create_time=moment, start_time=None, end_time=None, update_time=moment
    )
    snapshot = JobSnapshot.of(fake)  # type: ignore[arg-type]
    assert (snapshot.state, snapshot.create_time, snapshot.error) == (
        "JOB_STATE_RUNNING",
        "2026-03-02T08:00:01.000005Z",
        None,
    )


def test_times_read_again_come_from_the_memo_and_read_the_same() -> None:
    jobs = _jobs(300)
    first = [JobSnapshot.of(job) for job in jobs]
    assert [JobSnapshot.of(job) for job in jobs] == first == [_through_proto_plus(job) for job in jobs]


def test_the_time_memo_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import shared.jobs

    monkeypatch.setattr(shared.jobs, "_TIME_TEXTS_KEPT", 8)
    monkeypatch.setattr(shared.jobs, "_TIME_TEXTS", {})
    for job in _jobs(50):
        assert JobSnapshot.of(job) == _through_proto_plus(job)
        assert len(shared.jobs._TIME_TEXTS) <= 8  # noqa: SLF001
