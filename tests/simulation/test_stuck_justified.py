"""`job_stuck_justified` (sim/stuck.py) has teeth: a `job_stuck` said of a job cancelled by hand
after its long FLEX_START wait, its CANCELLING counted with the wait, is reported; one said after
the span it names lasted its threshold is not, nor the one after a switch's cancel."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from shared.clock import iso
from sim import stuck
from sim.vertex import SimJob
from sim.world import World

HOUR = timedelta(hours=1)


@pytest.fixture
def world() -> World:
    return World(0)


def flex_job_cancelled_after_waiting(world: World, waited: timedelta) -> SimJob:
    """A FLEX_START job created `waited` ago, PENDING since, cancelled by hand 10 s ago."""
    labels = {"spotjobs-request-id": "r1", "spotjobs-attempt": "1", "spotjobs-deployment": "sim"}
    now = world.clock.now()
    created = now - waited
    request = {"labels": labels, "jobSpec": {"scheduling": {"strategy": "FLEX_START", "maxWaitDuration": "86400s"}}}
    job = SimJob(
        "projects/p/locations/us-central1/customJobs/1",
        "us-central1",
        request,
        labels,
        "JOB_STATE_QUEUED",
        created,
        created,
    )
    job.states += [
        (created + timedelta(seconds=30), "JOB_STATE_PENDING"),
        (now - timedelta(seconds=10), "JOB_STATE_CANCELLING"),
    ]
    job.state = "JOB_STATE_CANCELLING"
    world.vertex.jobs[job.name] = job
    return job


def alert_stuck(world: World, job: SimJob, state: str, **details: object) -> None:
    alert = {
        "kind": "job_stuck",
        "request_id": "r1",
        "attempt": 1,
        "job": job.name,
        "details": {"state": state, "after_cancel": False, **details},
        "time": iso(world.clock.now()),
    }
    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})


def test_a_cancelling_counted_with_the_wait_before_it_is_caught(world: World) -> None:
    job = flex_job_cancelled_after_waiting(world, waited=20 * HOUR)
    alert_stuck(world, job, "JOB_STATE_CANCELLING")
    [found] = stuck.job_stuck_justified(world)
    assert found.invariant == "job_stuck_justified" and "JOB_STATE_CANCELLING, which it had been" in found.detail


def test_a_flex_start_wait_is_owed_its_max_wait_beyond_the_threshold(world: World) -> None:
    job = flex_job_cancelled_after_waiting(world, waited=20 * HOUR)
    alert_stuck(world, job, "JOB_STATE_PENDING")  # 20 h: past 6 h, not 30 h
    assert len(stuck.job_stuck_justified(world)) == 1


def test_a_span_that_lasted_its_threshold_is_left_alone(world: World) -> None:
    job = flex_job_cancelled_after_waiting(world, waited=20 * HOUR)
    world.clock.advance(6 * 3600)
    alert_stuck(world, job, "JOB_STATE_CANCELLING")
    alert_stuck(world, job, "JOB_STATE_CANCELLING", after_cancel=True)
    assert stuck.job_stuck_justified(world) == []


def test_a_wait_alerted_in_the_millisecond_its_pending_began_counts_from_its_queued(world: World) -> None:
    """Seed 374: a job QUEUED 7 h went PENDING at 16:02:16.898xxx, and the read that saw it PENDING
    alerted at 16:02:16.898, an alert's time written to the millisecond: its PENDING then seemed to
    begin after the alert, and the wait was judged never to have held it."""
    labels = {"spotjobs-request-id": "r1", "spotjobs-attempt": "1", "spotjobs-deployment": "sim"}
    world.clock.advance(0.0005)  # a state's time carries microseconds the alert's drops
    now = world.clock.now()
    created = now - 7 * HOUR
    job = SimJob(
        "projects/p/locations/us-central1/customJobs/1", "us-central1", {"labels": labels}, labels,
        "JOB_STATE_QUEUED", created, created,
    )  # fmt: skip
    job.states.append((now, "JOB_STATE_PENDING"))
    job.state = "JOB_STATE_PENDING"
    world.vertex.jobs[job.name] = job
    alert_stuck(world, job, "JOB_STATE_PENDING")
    assert stuck.job_stuck_justified(world) == []


def test_a_wait_alerted_at_the_read_that_ended_it_is_judged_on_that_wait_not_on_the_next(world: World) -> None:
    """Seed 11053: a Spot job waited PENDING 6 h 0 min 47 s after a preemption, ran a minute, and
    the read that saw it RUNNING alerted the wait it ended; 0.39 s later the job was preempted and
    PENDING again. That PENDING began after the alert, which cannot have read it: the alert's time
    is cut to the millisecond, not by 0.39 s."""
    labels = {"spotjobs-request-id": "r1", "spotjobs-attempt": "1", "spotjobs-deployment": "sim"}
    now = world.clock.now()
    wait_began = now - timedelta(seconds=21_647 + 60)
    created = wait_began - timedelta(minutes=40)
    job = SimJob(
        "projects/p/locations/us-central1/customJobs/1", "us-central1", {"labels": labels}, labels,
        "JOB_STATE_QUEUED", created, created,
    )  # fmt: skip
    job.states += [
        (created + timedelta(minutes=10), "JOB_STATE_PENDING"),
        (created + timedelta(minutes=25), "JOB_STATE_RUNNING"),
        (wait_began, "JOB_STATE_PENDING"),
        (now - timedelta(seconds=60), "JOB_STATE_RUNNING"),
        (now + timedelta(seconds=0.39), "JOB_STATE_PENDING"),  # preempted again, after the alert
    ]
    job.state = "JOB_STATE_PENDING"
    world.vertex.jobs[job.name] = job
    alert_stuck(world, job, "JOB_STATE_PENDING", wait_began_at=iso(wait_began))
    assert stuck.job_stuck_justified(world) == []


def test_a_wait_alerted_after_it_ended_is_judged_on_its_own_length(world: World) -> None:
    """A wait is counted to its end (`flag_ended_wait`), never through the run after it: one of
    5 h 59 min, alerted by a read of the run two minutes after its end, was not stuck that long."""
    labels = {"spotjobs-request-id": "r1", "spotjobs-attempt": "1", "spotjobs-deployment": "sim"}
    now = world.clock.now()
    ran = now - timedelta(minutes=2)
    created = ran - timedelta(hours=5, minutes=59)
    job = SimJob(
        "projects/p/locations/us-central1/customJobs/1", "us-central1", {"labels": labels}, labels,
        "JOB_STATE_QUEUED", created, created,
    )  # fmt: skip
    job.states += [(created + timedelta(minutes=10), "JOB_STATE_PENDING"), (ran, "JOB_STATE_RUNNING")]
    job.state = "JOB_STATE_RUNNING"
    world.vertex.jobs[job.name] = job
    alert_stuck(world, job, "JOB_STATE_PENDING", wait_began_at=iso(created))
    [found] = stuck.job_stuck_justified(world)
    assert "which it had been (in that span) for 21540 s, under 21600 s" in found.detail


def test_a_restart_wait_alerted_at_the_jobs_end_is_judged_on_its_own_length(world: World) -> None:
    """Issue 43: a switched job waited PENDING 5 h 50 min, ran an hour, was preempted and waited
    PENDING 10 min, then ran 7 h and succeeded. A `job_stuck` of that restart wait said at the
    job's end, its length counted to the end, is caught: the wait ended at the run after it."""
    labels = {"spotjobs-request-id": "r1", "spotjobs-attempt": "1", "spotjobs-deployment": "sim"}
    now = world.clock.now()
    created = now - timedelta(hours=14)
    preempted = created + timedelta(hours=6, minutes=50)
    job = SimJob(
        "projects/p/locations/us-central1/customJobs/1", "us-central1", {"labels": labels}, labels,
        "JOB_STATE_PENDING", created, created,
    )  # fmt: skip
    job.states += [
        (created + timedelta(hours=5, minutes=50), "JOB_STATE_RUNNING"),
        (preempted, "JOB_STATE_PENDING"),
        (preempted + timedelta(minutes=10), "JOB_STATE_RUNNING"),
        (now, "JOB_STATE_SUCCEEDED"),
    ]
    job.state = "JOB_STATE_SUCCEEDED"
    world.vertex.jobs[job.name] = job
    alert_stuck(world, job, "JOB_STATE_PENDING", wait_began_at=iso(preempted))
    [found] = stuck.job_stuck_justified(world)
    assert "which it had been (in that span) for 600 s, under 21600 s" in found.detail


def test_a_wait_alerted_at_the_end_of_the_cancel_that_ended_it_is_judged_to_its_cancelling(world: World) -> None:
    """Issue 43: a switched job that never ran waited PENDING 5 h 55 min until the switch's cancel
    made it CANCELLING, CANCELLED 15 min later. A `job_stuck` of the wait counted to that end is
    caught: the wait ended at the CANCELLING."""
    labels = {"spotjobs-request-id": "r1", "spotjobs-attempt": "1", "spotjobs-deployment": "sim"}
    now = world.clock.now()
    created = now - timedelta(hours=6, minutes=10)
    job = SimJob(
        "projects/p/locations/us-central1/customJobs/1", "us-central1", {"labels": labels}, labels,
        "JOB_STATE_PENDING", created, created,
    )  # fmt: skip
    job.states += [(created + timedelta(hours=5, minutes=55), "JOB_STATE_CANCELLING"), (now, "JOB_STATE_CANCELLED")]
    job.state = "JOB_STATE_CANCELLED"
    world.vertex.jobs[job.name] = job
    alert_stuck(world, job, "JOB_STATE_PENDING", wait_began_at=iso(created))
    [found] = stuck.job_stuck_justified(world)
    assert "which it had been (in that span) for 21300 s, under 21600 s" in found.detail
