"""A job's own lines are a claim about its own attempt: what they may count is bounded by what
Vertex can have done (issue 43, defect 9), and the fleet's facts by what Vertex reported.

Vertex restarts a preempted Spot job at most six times, then fails it with a STOCKOUT error
(docs/signals.md): an attempt has runs 0..6 and at most seven preemptions, whatever it signs."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta

import pytest
from spotjobs_kit.lines import KitRecord

from shared.deciding.decisions import Decision, Observation, decide
from shared.deciding.events import Signal
from shared.deciding.preemptions import kit_runs
from shared.fleet.observations import Kind, Reading, observations_of
from shared.jobs import MAX_SPOT_PREEMPTIONS, MAX_SPOT_RESTARTS, JobState
from shared.ledger.records import RequestRecord
from tests.support.decide import JOB1, NOW, POLICY, at, job, make_record

READING = Reading(runs_started=kit_runs)


def kit(event: str, run: object, **fields: object) -> KitRecord:
    typed = run if isinstance(run, int) and not isinstance(run, bool) else None
    return KitRecord(
        event=event, request_id="req-1", attempt=1, run=typed, job_id="111", fields={"run": run, **fields}, **fields
    )


def line(record: RequestRecord, record_kit: KitRecord, now: datetime = NOW) -> Decision:
    observation = Observation(1, None, Signal.KIT, kit=record_kit, job_name=JOB1)
    return decide(copy.deepcopy(record), observation, POLICY, now)


def running() -> RequestRecord:
    observation = Observation(1, job(JobState.RUNNING, update=100))
    record = decide(make_record(), observation, POLICY, NOW).record
    assert record.attempts[0].started_at is not None  # Vertex saw it run: its preemptions are fleet facts
    return record


def fleet_kinds(record: RequestRecord, kind: Kind) -> list[int]:
    return [o.index for o in observations_of(record, READING) if o.kind is kind]


def refusals(decision: Decision) -> list[dict[str, object]]:
    return [l.fields for l in decision.effects.lines if l.event == "kit_line_refused"]


def test_one_signed_line_claiming_run_999_counts_nothing_and_is_refused_naming_the_job() -> None:
    decision = line(running(), kit("run_started", 999))
    attempt = decision.record.attempts[0]
    assert attempt.preemptions == 0
    assert fleet_kinds(decision.record, Kind.PREEMPT) == [] and fleet_kinds(decision.record, Kind.RESTART) == []
    [refused] = refusals(decision)
    assert refused["job"] == JOB1 and refused["request_id"] == "req-1" and refused["run"] == 999
    assert [l.severity for l in decision.effects.lines if l.event == "kit_line_refused"] == ["WARNING"]


@pytest.mark.parametrize("run", [-1, MAX_SPOT_RESTARTS + 1, 2.5, "x", None, True])
def test_a_run_index_vertex_cannot_have_reached_is_refused(run: object) -> None:
    decision = line(running(), kit("preempted", run))
    assert decision.record.attempts[0].preemptions == 0 and refusals(decision)
    assert decision.record.markers == running().markers


def test_the_last_run_vertex_can_restart_still_counts_every_run_before_it() -> None:
    record = line(running(), kit("run_started", MAX_SPOT_RESTARTS)).record
    record = line(record, kit("preempted", MAX_SPOT_RESTARTS)).record
    assert record.attempts[0].preemptions == MAX_SPOT_PREEMPTIONS == MAX_SPOT_RESTARTS + 1
    assert fleet_kinds(record, Kind.PREEMPT) == list(range(MAX_SPOT_PREEMPTIONS))
    assert fleet_kinds(record, Kind.RESTART) == [MAX_SPOT_RESTARTS]  # the restart the kit reported


def test_forged_service_lines_count_no_more_preemptions_than_vertex_can_have_done() -> None:
    # Any log writer can set task_name=service (docs/security.md, "Not yet enforced" 3): each
    # distinct insertId was one more preemption, without end.
    record = running()
    for k in range(50):
        observation = Observation(1, job(JobState.RUNNING, update=200 + k), Signal.PREEMPTION, f"forged-{k}")
        record = decide(copy.deepcopy(record), observation, POLICY, NOW).record
    assert record.attempts[0].preemptions == MAX_SPOT_PREEMPTIONS
    assert len(fleet_kinds(record, Kind.PREEMPT)) == MAX_SPOT_PREEMPTIONS
    assert len(record.markers) < 20  # the markers stay bounded too


def test_a_ledger_record_holding_an_absurd_count_gives_the_fleet_a_bounded_one() -> None:
    # A record written before the bound (or by hand) still claims 999: the fleet takes at most
    # what Vertex can have done for the job.
    record = running()
    record.attempts[0].preemptions = 999
    record.attempts[0].ended_at = at(900)
    assert len(fleet_kinds(record, Kind.PREEMPT)) == MAX_SPOT_PREEMPTIONS
    [run] = [o for o in observations_of(record, READING) if o.kind is Kind.RUN]
    assert run.count == MAX_SPOT_PREEMPTIONS
    record.attempts[0].preemptions = -3
    assert fleet_kinds(record, Kind.PREEMPT) == []


def test_the_storm_alert_still_fires_within_the_bound() -> None:
    record = line(running(), kit("run_started", MAX_SPOT_RESTARTS))
    assert [a.kind for a in record.effects.alerts] == ["preemption_storm"]


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def test_a_restart_is_a_fleet_fact_only_once_vertex_reported_the_attempt_running() -> None:
    # A job queued at Vertex that signs `run_started run=3` has told the fleet of capacity it
    # never had: its restarts wait for Vertex's word that it ran.
    queued = decide(make_record(), Observation(1, job(JobState.QUEUED, update=100)), POLICY, NOW).record
    claimed = line(queued, kit("run_started", 3)).record
    assert fleet_kinds(claimed, Kind.RESTART) == [] and fleet_kinds(claimed, Kind.PREEMPT) == []
    ran = decide(copy.deepcopy(claimed), Observation(1, job(JobState.RUNNING, update=300)), POLICY, NOW).record
    assert fleet_kinds(ran, Kind.RESTART) == [3] and fleet_kinds(ran, Kind.PREEMPT) == [0, 1, 2]


def test_stored_facts_past_the_bound_weigh_nothing_in_the_estimate() -> None:
    # Facts written before the bound (999 preemptions of one attempt) stay in the bucket for days.
    from shared.fleet.estimate import estimate, summarize
    from shared.fleet.observations import FleetFact

    def fact(kind: Kind, minutes_ago: float, index: int = 0, seconds: float = 0.0, count: int = 0) -> FleetFact:
        return FleetFact(kind, "us-east4", later(-60 * minutes_ago), seconds, count, "a", index)

    honest = [fact(Kind.WAIT, 600), fact(Kind.PREEMPT, 300), fact(Kind.RESTART, 290, index=1)]
    forged = [fact(Kind.PREEMPT, 1, index=k) for k in range(1, 999)] + [fact(Kind.RESTART, 1, index=998)]
    assert estimate(honest + forged, "us-east4", NOW) == estimate(
        [*honest, *[f for f in forged if f.index < MAX_SPOT_PREEMPTIONS and f.kind is Kind.PREEMPT]], "us-east4", NOW
    )
    # 600 min on Spot less the 10 min its restart ended, over the 7 preemptions Vertex can have made
    assert estimate(honest + forged, "us-east4", NOW).mean_lifetime_seconds == pytest.approx((600 - 10) * 60 / 7)
    closed = [*honest, *forged, fact(Kind.RUN, 0, seconds=36000.0, count=999)]
    assert summarize(closed, NOW).preemptions == MAX_SPOT_PREEMPTIONS


def checkpoint(**fields: object) -> KitRecord:
    return kit("checkpoint_committed", 0, **{"step": 100, "seconds": 2.0, "time": at(100), "bytes": 10**9, **fields})


@pytest.mark.parametrize(
    "fields",
    [
        {"step": -1},
        {"step": 10**13},
        {"bytes": -1},
        {"bytes": 10**16},
        {"seconds": -5.0},
        {"seconds": float("inf")},
        {"seconds": float("nan")},
        {"time": "tomorrow"},
        {"time": "9999-12-31T00:00:00Z"},
        {"time": "2000-01-01T00:00:00Z"},
    ],
    ids=lambda fields: ",".join(f"{k}={v}" for k, v in fields.items()),
)
def test_a_checkpoint_line_with_an_absurd_number_or_time_is_refused_and_keeps_nothing(
    fields: dict[str, object],
) -> None:
    record = running()
    decision = line(record, checkpoint(**fields))
    assert decision.record == record and refusals(decision)


def test_a_time_no_clock_reads_cannot_stop_the_requests_decisions() -> None:
    # Two commits signed with times that do not parse: the checkpoint interval read them, and
    # every later decision of the request (reconcile's too) raised ValueError.
    deadline = {"deadline": "2026-12-01T00:00:00Z", "total_steps": 1000, "expected_step_seconds": 1.0}
    record = decide(
        make_record(request=deadline), Observation(1, job(JobState.RUNNING, update=100)), POLICY, NOW
    ).record
    for step, moment in ((10, "yesterday"), (20, "tomorrow")):
        record = line(record, checkpoint(step=step, time=moment)).record
    polled = decide(copy.deepcopy(record), Observation(1, job(JobState.RUNNING, update=300)), POLICY, NOW)
    assert polled.record.attempts[0].checkpoints_committed == 0


@pytest.mark.parametrize(
    "fields",
    [
        {"total_steps": 10**30},
        {"total_steps": -4},
        {"steps_per_second": float("inf")},
        {"steps_per_second": 1e-300},
        {"steps_per_second": -1.0},
    ],
    ids=lambda fields: ",".join(f"{k}={v}" for k, v in fields.items()),
)
def test_progress_with_an_absurd_rate_or_total_is_refused(fields: dict[str, object]) -> None:
    record = running()
    decision = line(record, kit("progress", 0, step=10, time=at(100), **fields))
    attempt = decision.record.attempts[0]
    assert (attempt.total_steps, attempt.steps_per_second) == (None, None) and refusals(decision)


def test_plausible_lines_are_still_evidence() -> None:
    record = line(running(), checkpoint()).record
    record = line(record, kit("progress", 0, step=150, time=at(200), total_steps=1000, steps_per_second=2.5)).record
    attempt = record.attempts[0]
    assert (attempt.checkpoints_committed, attempt.last_checkpoint_bytes) == (1, 10**9)
    assert (attempt.total_steps, attempt.steps_per_second) == (1000, 2.5)
