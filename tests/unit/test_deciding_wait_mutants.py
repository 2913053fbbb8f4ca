"""shared/deciding/waits.py's `track_wait` (once `decisions.py`'s `_track_wait`) at the edges its mutants found (the ninth mutation
pass): when a wait began, for a job first read while it waits, and for one whose run no read saw
RUNNING, in the same waiting state as before it or with no update time read."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import datetime, timedelta

from shared.clock import iso
from shared.deciding.decisions import Observation, decide
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import RequestRecord
from tests.support.decide import JOB1, NOW, POLICY, make_record

CREATED = NOW - timedelta(hours=5)


def waits_from(record: RequestRecord, job: JobSnapshot, now: datetime) -> tuple[RequestRecord, str | None]:
    """The record after a decision on `job` (on a copy, as the ledger decides), and its wait's start."""
    decided = decide(copy.deepcopy(record), Observation(1, job), POLICY, now).record
    return decided, decided.attempts[0].wait_began_at


def test_a_job_first_read_pending_waits_from_its_create_not_from_its_last_update() -> None:
    """The first read of a job that never ran: its wait is its whole life, QUEUED included, though
    Vertex's last update (QUEUED to PENDING) came an hour after the create."""
    pending = JobSnapshot(
        JOB1, JobState.PENDING, None, create_time=iso(CREATED), update_time=iso(CREATED + timedelta(hours=1))
    )

    _, began = waits_from(make_record(state=None), pending, NOW)

    assert began == iso(CREATED)


def test_a_run_no_read_saw_in_an_unchanged_waiting_state_ends_the_wait_at_vertex_s_last_update() -> None:
    """Seen QUEUED, then QUEUED again after a run no read caught (its start time says it ran): the
    state the record holds began before the run, so the new wait counts from Vertex's last update,
    after the run, not from that state's start."""
    queued = JobSnapshot(JOB1, JobState.QUEUED, None, create_time=iso(CREATED), update_time=iso(CREATED))
    seen, _ = waits_from(make_record(state=None), queued, CREATED + timedelta(minutes=5))
    ran, back = CREATED + timedelta(hours=2), CREATED + timedelta(hours=2, minutes=10)

    _, began = waits_from(seen, replace(queued, start_time=iso(ran), update_time=iso(back)), NOW)

    assert began == iso(back)


def test_queued_then_pending_after_an_unseen_run_is_one_wait_when_no_update_time_is_read() -> None:
    """With no update time in the reads, a run no read saw begins the wait at its start time; the
    PENDING read after the QUEUED one is the same wait (QUEUED then PENDING is one), not a new one
    from the moment a read saw PENDING."""
    queued = JobSnapshot(JOB1, JobState.QUEUED, None, create_time=iso(CREATED))
    seen, _ = waits_from(make_record(state=None), queued, CREATED + timedelta(minutes=5))
    ran = CREATED + timedelta(hours=2)
    after_the_run, began = waits_from(seen, replace(queued, start_time=iso(ran)), CREATED + timedelta(hours=3))
    assert began == iso(ran)

    _, began = waits_from(after_the_run, replace(queued, state=JobState.PENDING, start_time=iso(ran)), NOW)

    assert began == iso(ran)
