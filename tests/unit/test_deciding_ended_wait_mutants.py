"""A wait judged at the read that ends it (shared/deciding/stuck.py, `flag_ended_wait`; the
thirteenth mutation pass): one that lasted exactly the threshold is stuck, as a wait read while it
lasts is at its threshold (seed 9505's story, at the edge); and it ended when Vertex says the job
left it (its update time), not when a later read saw that."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta

from shared.clock import iso
from shared.deciding.decisions import Observation, decide
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import CancelIntent
from tests.support.decide import JOB1, NOW, POLICY, make_record

HOUR = 3600.0
POLICY_6H = replace(POLICY, stuck_after_seconds=6 * HOUR)


def alerts_of_a_wait_ended_after(waited: float, read_later: float = 0.0) -> list[str]:
    """A job adopted `waited` seconds after its create and never read waiting, its request's
    pending cancel sent at once: the first read taken in is CANCELLING (updated at NOW, read
    `read_later` seconds after), and ends that wait."""
    created = NOW - timedelta(seconds=waited)
    record = make_record(state=JobState.PENDING)
    record.cancel = CancelIntent(by="ops@example.com", at=iso(created + timedelta(minutes=20)))
    record.attempts[0].created_at = iso(created)
    record.attempts[0].cancel_decided_at = record.attempts[0].cancel_sent_at = iso(NOW)
    cancelling = JobSnapshot(JOB1, JobState.CANCELLING, None, create_time=iso(created), update_time=iso(NOW))
    read_at = NOW + timedelta(seconds=read_later)
    decision = decide(copy.deepcopy(record), Observation(1, cancelling, read_at=read_at), POLICY_6H, read_at)
    return [alert.kind for alert in decision.effects.alerts]


def test_a_wait_that_lasted_exactly_the_threshold_is_stuck_when_its_end_is_read() -> None:
    assert alerts_of_a_wait_ended_after(6 * HOUR) == ["job_stuck"]
    assert alerts_of_a_wait_ended_after(6 * HOUR - 1) == []


def test_a_wait_ended_at_its_update_time_is_not_lengthened_by_a_later_read() -> None:
    assert alerts_of_a_wait_ended_after(6 * HOUR - 1, read_later=HOUR) == []


def test_a_wait_of_a_job_that_ran_is_not_timed_from_its_create() -> None:
    """A record that never tracked its wait (adopted) holds PENDING; the read that ends it shows a
    job that started a minute after its create: the wait it ends followed a run, and when it began
    is unknown, so it is not judged (from the create it would be seven hours)."""
    created = NOW - timedelta(hours=7)
    record = make_record(state=JobState.PENDING)
    record.attempts[0].created_at = iso(created)
    assert record.attempts[0].wait_began_at is None and record.attempts[0].started_at is None
    running = JobSnapshot(
        JOB1,
        JobState.RUNNING,
        None,
        create_time=iso(created),
        start_time=iso(created + timedelta(minutes=1)),
        update_time=iso(NOW),
    )
    decision = decide(copy.deepcopy(record), Observation(1, running, read_at=NOW), POLICY_6H, NOW)
    assert [alert.kind for alert in decision.effects.alerts] == []
