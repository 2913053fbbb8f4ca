"""When an attempt's preemptions happened, on the record (`Attempt.preempted_at`, what
`preempted_often` weighs for a deadline request's move): when the observation that counted each
saw the job (a read's start, a kit line's own time), within the job's run as Vertex reported it,
not when a redelivered or late decision took it, as the fleet's facts are stamped since seed
10375. Stamped at the decision, a preemption looked more recent than it was, and two decided
together looked simultaneous."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from spotjobs_kit.lines import PREEMPTED, RUN_STARTED, KitRecord

from shared.clock import iso, parse_iso
from shared.deciding.deadline import Placement, Situation, Work, preempted_often
from shared.deciding.decision_policy import DecisionPolicy
from shared.deciding.decisions import Observation, decide
from shared.deciding.events import Signal
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.settings import Settings
from tests.support.decisions import STOCKOUT

STARTED = datetime(2026, 12, 6, 8, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/5000000000000000020"
POLICY = DecisionPolicy.from_settings(Settings())
HOUR = 3600.0
D = 600.0  # a changeover


def at(seconds: float) -> datetime:
    return STARTED + timedelta(seconds=seconds)


def running_attempt() -> RequestRecord:
    """A Spot attempt whose job Vertex started at `STARTED`."""
    attempt = Attempt(
        1,
        "us-central1",
        "SPOT",
        claimed_at=iso(at(-120)),
        job=JOB,
        created_at=iso(at(-120)),
        state=JobState.RUNNING,
        started_at=iso(STARTED),
    )
    request = {"request_id": "r1", "location": "us-central1"}
    return RequestRecord("r1", request, "gs://b/r1/", status=RequestStatus.RUNNING, attempts=[attempt])


def kit(event: str, run: int, written: float) -> Observation:
    line = KitRecord(event, request_id="r1", attempt=1, run=run, job_id="5000000000000000020", time=iso(at(written)))
    return Observation(1, None, Signal.KIT, kit=line, job_name=JOB)


def read(job: JobSnapshot, seconds: float, evidence: str | None = None) -> Observation:
    signal = Signal.PREEMPTION if evidence else Signal.FAILED
    return Observation(1, job, signal, preemption_evidence=evidence, read_at=at(seconds))


def vertex_job(state: str = JobState.RUNNING, end: float | None = None) -> JobSnapshot:
    """The job as Vertex shows it; ended at `end` by a stockout."""
    return JobSnapshot(
        JOB,
        state,
        error=None if end is None else STOCKOUT,
        create_time=iso(at(-120)),
        start_time=iso(STARTED),
        update_time=iso(at(0 if end is None else end)),
        end_time=None if end is None else iso(at(end)),
    )


def decided(record: RequestRecord, *steps: tuple[float, Observation]) -> list[datetime]:
    """The attempt's preemption times after each observation is decided at its second."""
    for seconds, observation in steps:
        record = decide(record, observation, POLICY, at(seconds)).record
    return [parse_iso(moment) for moment in record.attempt(1).preempted_at]


def waiting_for_spot_at(now: datetime) -> Situation:
    """A deadline request waiting for Spot at `now`, a changeover of slack beyond its net: where
    one preemption within `QUICK_PREEMPTION_HOURS` places it again at once."""
    return Situation(
        now=now,
        deadline=now + timedelta(seconds=5 * HOUR + 4 * D + 300.0),
        started=STARTED,
        work=Work.in_seconds(int(10 * HOUR), int(5 * HOUR)),
        placement=Placement.WAITING_FOR_SPOT,
        placed_at=now - timedelta(minutes=1),
        changeover_seconds=D,
        review_seconds=300.0,
    )


def test_a_preemption_decided_late_is_not_within_a_window_its_line_is_outside_of() -> None:
    # The kit's `preempted` line, written at 60 s, is decided at 660 s (its deliveries nacked while
    # another published the request's effects).
    times = decided(running_attempt(), (660, kit(PREEMPTED, 0, written=60)))
    later = waiting_for_spot_at(at(60 + 4 * HOUR + 300))  # 4 h and 5 min after the line
    assert preempted_often(later, [at(660)])  # what the decision's time would have made of it
    assert not preempted_often(later, times)
    assert times == [at(60)]


def test_two_preemptions_decided_together_keep_their_own_times() -> None:
    times = decided(running_attempt(), (900, kit(PREEMPTED, 0, written=60)), (901, kit(PREEMPTED, 1, written=400)))
    assert times == [at(60), at(400)]


def test_a_read_decided_late_stamps_the_preemption_when_the_read_began() -> None:
    times = decided(running_attempt(), (700, read(vertex_job(), 61, evidence="insert-1")))
    assert times == [at(61)]


@pytest.mark.parametrize(
    ("observation", "stamped"),
    [
        (kit(PREEMPTED, 0, written=70), 66),  # the job's clock ahead of Vertex's end
        (kit(PREEMPTED, 0, written=-180), 0),  # or behind its start
        (read(vertex_job(JobState.FAILED, end=66), 90, evidence="insert-1"), 66),  # read after the end
    ],
)
def test_a_preemption_is_stamped_only_within_the_run_vertex_reported(observation: Observation, stamped: float) -> None:
    record = running_attempt()
    if observation.job is None:  # Vertex reported the end first, with nothing of a preemption
        record.attempt(1).ended_at = iso(at(66))
    assert decided(record, (600, observation)) == [at(stamped)]


def test_the_preemption_an_end_by_stockout_implies_is_stamped_at_the_end() -> None:
    # The kit said run 0 started; Vertex ended the job at 66 s by a stockout, read at 90 s and
    # decided at 700 s: its last run ended by preemption, at the end at the latest.
    times = decided(
        running_attempt(),
        (30, kit(RUN_STARTED, 0, written=5)),
        (700, read(vertex_job(JobState.FAILED, end=66), 90)),
    )
    assert times == [at(66)]


def test_the_newest_preemption_times_are_kept_whatever_order_they_were_counted_in() -> None:
    # A read at 5 h counts one preemption (a service line); the kit's lines of runs 0-4, written
    # from 1 h on and delivered late, raise the count to five, stamped at the kit's 1 h 40 min.
    # Kept in the order counted, the cut to the last four kept those and lost the newest, 5 h.
    times = decided(
        running_attempt(),
        (5 * HOUR, read(vertex_job(), 5 * HOUR, evidence="insert-1")),
        (5 * HOUR + 60, kit(PREEMPTED, 4, written=HOUR + 2400)),
    )
    assert times == sorted(times) and times[-1] == at(5 * HOUR)
    assert preempted_often(waiting_for_spot_at(at(6 * HOUR)), times)  # an hour after the newest
