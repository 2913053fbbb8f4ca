"""When a fleet fact without a time of its own happened (seed 10375): a preemption or a restart
is stamped when the observation that told it saw the job (a read's start, a kit line's own time),
within the job's run as Vertex reported it, not when a late or redelivered decision took it. A
restart stamped at its decision, after the job's end, made a wait Vertex never had."""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from spotjobs_kit.lines import RUN_STARTED, KitRecord

from shared.clock import iso
from shared.deciding.applying import apply_observation
from shared.deciding.decisions import Observation
from shared.deciding.events import Signal
from shared.fleet import store
from shared.fleet.estimate import attempt_restart_waits
from shared.fleet.observations import FleetFact, Kind, MachineClass
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.run_lock import ledger_bucket
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.log import Logger
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decisions import FakePublisher, make_settings

STARTED = datetime(2026, 12, 6, 16, 49, 13, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/5000000000000000020"
REQUEST = {
    "request_id": "req-1",
    "custom_job": {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-8"}}]}},
    "location": "us-central1",
}


class Story:
    """One Spot attempt running since `STARTED`, its observations decided at `clock` seconds on."""

    def __init__(self) -> None:
        self.seconds = 0.0
        client = MemoryStorage(clock=self.now).client()
        settings = make_settings("state")
        self.ledger = LedgerStore(client.bucket(settings.state_bucket))
        attempt = Attempt(
            1,
            "us-central1",
            "SPOT",
            claimed_at=iso(STARTED - timedelta(minutes=2)),
            job=JOB,
            created_at=iso(STARTED - timedelta(minutes=2)),
            state=JobState.RUNNING,
            started_at=iso(STARTED),
        )
        self.ledger.restore(
            RequestRecord("req-1", REQUEST, "gs://b/req-1/", status=RequestStatus.RUNNING, attempts=[attempt])
        )
        self.ports = Ports(settings, self.ledger, FakePublisher, None, storage=lambda: client, clock=self.now)  # type: ignore[arg-type]
        self.log = Logger(stream=io.StringIO(), min_severity="WARNING")

    def now(self) -> datetime:
        return STARTED + timedelta(seconds=self.seconds)

    def decide_at(self, seconds: float, observation: Observation) -> None:
        self.seconds = seconds
        apply_observation(self.ports, "req-1", observation, self.log)

    def facts(self, kind: Kind) -> list[FleetFact]:
        found = store.read(ledger_bucket(self.ledger), MachineClass("n1-standard-8"), self.now())
        return [o for o in found if o.kind is kind]


def at(seconds: float) -> datetime:
    return STARTED + timedelta(seconds=seconds)


def running(update: float, state: str = JobState.RUNNING, end: float | None = None) -> JobSnapshot:
    """The job as Vertex shows it; ended at `end` with a worker's exit (its error published)."""
    return JobSnapshot(
        JOB,
        state,
        error=None if end is None else {"code": 3, "message": "The replica workerpool0-0 exited with status 1."},
        create_time=iso(at(-120)),
        start_time=iso(STARTED),
        update_time=iso(at(update)),
        end_time=None if end is None else iso(at(end)),
    )


def kit(event: str, run: int, written: float) -> Observation:
    line = KitRecord(event, request_id="req-1", attempt=1, run=run, job_id="5000000000000000020", time=iso(at(written)))
    return Observation(1, None, Signal.KIT, kit=line, job_name=JOB)


def test_a_restart_decided_late_is_stamped_at_its_kit_lines_time_and_makes_no_wait() -> None:
    story = Story()
    # At 60 s Vertex reclaimed the VM and restarted the job at once: the service line is read at
    # 61 s and decided then; the kit's `run_started` of run 1, written at 60 s, is decided at 70 s.
    preemption = Observation(1, running(0), Signal.PREEMPTION, preemption_evidence="insert-1", read_at=at(61))
    story.decide_at(62, preemption)
    story.decide_at(70, kit(RUN_STARTED, 1, written=60))
    [preempt], [restart] = story.facts(Kind.PREEMPT), story.facts(Kind.RESTART)
    assert (preempt.at, restart.at) == (at(61), at(60))
    assert attempt_restart_waits([preempt, restart], story.now()).total == 0


@pytest.mark.parametrize(
    ("written", "stamped"),
    [(70, 66), (-180, 0)],  # a job's clock ahead of Vertex's end, or behind its start
)
def test_a_kit_lines_time_stamps_a_fact_only_within_the_run_vertex_reported(written: float, stamped: float) -> None:
    story = Story()
    story.decide_at(62, Observation(1, running(0), Signal.PREEMPTION, preemption_evidence="insert-1", read_at=at(61)))
    # Vertex ended the job at 66 s; the kit's `run_started` of run 1 is decided long after.
    story.decide_at(95, Observation(1, running(66, JobState.FAILED, end=66), Signal.FAILED, read_at=at(90)))
    story.decide_at(600, kit(RUN_STARTED, 1, written=written))
    [restart] = story.facts(Kind.RESTART)
    assert restart.at == at(stamped)


def test_a_preemption_and_its_restart_are_stored_no_earlier_than_they_were_seen() -> None:
    # Seed 10044: a fact's name holds whole seconds; a preemption seen at 61.858 s, floored to 61 s,
    # said it had happened before Vertex reclaimed the VM, and its wait outran the job's life.
    story = Story()
    seen = Observation(1, running(0), Signal.PREEMPTION, preemption_evidence="insert-1", read_at=at(61.5))
    story.decide_at(63, replace(seen, answered_at=at(61.858)))
    story.decide_at(70, kit(RUN_STARTED, 1, written=65.25))
    [preempt], [restart] = story.facts(Kind.PREEMPT), story.facts(Kind.RESTART)
    assert (preempt.at, restart.at) == (at(62), at(66))
