"""Runs longer than Vertex's job timeout (shared/deciding/continuations.py): an attempt that ran into
its `scheduling.timeout` after committing progress continues as the next attempt, not counted
against max_attempts and bounded by `max_runtime`; one without progress fails with one alert. And
the request's `max_runtime` as read, checked against the policy and shown by `spotjobs status`."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from spotjobs_kit.lines import PREEMPTED, RUN_STARTED, KitRecord

from devstack.samples import custom_job
from shared.alerts import AlertKind
from shared.clock import iso, parse_iso
from shared.deciding.continuations import (
    continuations_text,
    counted_attempts,
    job_timeout_seconds,
    max_continuations,
    timed_out,
)
from shared.deciding.decisions import Decision, Observation, decide
from shared.deciding.events import Signal
from shared.deciding.preemptions import KIT_PREEMPTED_KEY, KIT_RUN_KEY
from shared.jobs import JobSnapshot, JobState
from shared.ledger.cancelling import note_intent
from shared.ledger.records import Attempt, CancelIntent, RequestRecord, evidence_marker
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.reconcile_vertex import vanished_job
from shared.requests.envelope import canonical_envelope, read_request
from shared.requests.policy import check_policy
from shared.settings import Settings
from spotjobs.cli.status import format_request
from tests.support.decide import JOB1, NOW, POLICY, at, ended_then_cancelled, make_record

HOUR = 3600.0
JOB2 = "projects/p/locations/us-central1/customJobs/222"
ONE_HOUR_JOB = {"displayName": "train", "jobSpec": {"scheduling": {"timeout": "3600s"}}}
DEADLINE_EXCEEDED = {"code": 4, "message": "The job ran past its scheduling.timeout of 3600 s."}


def ended(
    state: str = JobState.FAILED, *, error: dict | None = DEADLINE_EXCEEDED, ran: float = HOUR, name: str = JOB1
) -> JobSnapshot:
    start = NOW - timedelta(seconds=ran + 60)
    return JobSnapshot(
        name=name,
        state=state,
        error=error,
        create_time=at(0),
        start_time=start.isoformat(),
        end_time=(start + timedelta(seconds=ran)).isoformat(),
        update_time=(start + timedelta(seconds=ran)).isoformat(),
    )


def record_of(*attempts: Attempt, max_attempts: int = 1, **request: object) -> RequestRecord:
    return make_record(
        status=RequestStatus.RUNNING,
        request={"max_attempts": max_attempts, "custom_job": ONE_HOUR_JOB, **request},
        attempts=list(attempts),
    )


def attempt(n: int, job: str = JOB1, *, checkpoints: int = 2, **fields: object) -> Attempt:
    return Attempt(
        n,
        "us-central1",
        "SPOT",
        claimed_at=at(0),
        job=job,
        state=JobState.RUNNING,
        created_at=at(1),
        checkpoints_committed=checkpoints,
        last_checkpoint=[1, 100 * checkpoints] if checkpoints else None,
        **fields,  # type: ignore[arg-type]
    )


def observe(record: RequestRecord, snapshot: JobSnapshot, n: int = 1, now: datetime = NOW) -> Decision:
    """decide() on a copy, as the ledger does; a redelivery must find nothing to do."""
    observation = Observation(n, snapshot)
    decision = decide(copy.deepcopy(record), observation, POLICY, now)
    again = decide(copy.deepcopy(decision.record), observation, POLICY, now)
    assert again.record == decision.record, "deciding twice changed the record twice"
    assert not again.effects.lines and not again.effects.alerts and not again.effects.requeue_decided
    return decision


# Telling a timeout.


@pytest.mark.parametrize(
    ("snapshot", "expected"),
    [
        (ended(JobState.EXPIRED, error=None), True),
        (ended(error=DEADLINE_EXCEEDED, ran=10), True),  # the code says so, whatever the times
        (ended(error={"code": 13, "message": "Internal error"}, ran=HOUR), True),  # ran its whole timeout
        (ended(error={"code": 3, "message": "exited 1"}, ran=HOUR - 1), False),
        (ended(JobState.SUCCEEDED, error=None), False),
    ],
)
def test_a_timeout_is_told_by_its_state_its_code_or_its_run_time(snapshot: JobSnapshot, expected: bool) -> None:
    assert timed_out(snapshot, HOUR) is expected


def test_the_job_timeout_is_the_requests_else_vertexs_seven_days() -> None:
    assert job_timeout_seconds(ONE_HOUR_JOB) == HOUR
    assert job_timeout_seconds({"displayName": "x"}) == 7 * 86400


# Continuing.


def test_a_timeout_after_progress_continues_with_max_attempts_one() -> None:
    decision = observe(record_of(attempt(1)), ended())
    record = decision.record
    assert record.status == RequestStatus.REQUEUED
    first = record.attempt(1)
    assert first is not None and first.outcome == AttemptOutcome.REQUEUED and first.continued_after_timeout
    assert record.requeue is not None and (record.requeue.attempt, record.requeue.reason) == (2, "timeout")
    assert (record.requeue.location, record.requeue.strategy) == ("us-central1", "SPOT")
    assert decision.effects.requeue_decided and not decision.effects.alerts
    assert decision.effects.events == ("continued_after_timeout",)


def test_the_kits_preempted_line_at_a_timeout_is_no_preemption() -> None:
    # Vertex stops a timed-out job with SIGTERM: the kit saves, says `preempted` and exits.
    record = record_of(attempt(1))
    record.mark(evidence_marker(KIT_RUN_KEY, 1, "0"))
    record.mark(evidence_marker(KIT_PREEMPTED_KEY, 1, "0"))
    record.attempts[0].preemptions = 1  # counted when the line came, before the job's end
    decision = observe(record, ended())
    assert decision.record.status == RequestStatus.REQUEUED
    assert decision.record.requeue is not None and decision.record.requeue.reason == "timeout"
    assert decision.record.attempts[0].preemptions == 0  # the stop at the timeout was no preemption


def test_kit_lines_that_come_after_the_timeout_was_decided_count_no_preemption() -> None:
    # The job's end was read before its run's lines were delivered (a lost, redelivered line).
    decided = observe(record_of(attempt(1)), ended()).record
    for event in (RUN_STARTED, PREEMPTED):
        kit_line = KitRecord(event=event, request_id="req-1", attempt=1, run=0, job_id="111")
        decided = decide(
            copy.deepcopy(decided), Observation(1, None, Signal.KIT, kit=kit_line, job_name=JOB1), POLICY, NOW
        ).record
    assert decided.attempts[0].preemptions == 0 and decided.attempts[0].continued_after_timeout


@pytest.mark.parametrize("line_first", [True, False])
def test_a_timeout_while_the_request_is_being_cancelled_counts_no_preemption(line_first: bool) -> None:
    # Seed 67: the budget stopped the request as its job ran into its timeout; the job's end was
    # concluded as the cancel, and the kit's `preempted` line of the SIGTERM counted as a preemption.
    record = record_of(attempt(1), max_cost_usd=0.02)
    record.cancel = CancelIntent(by="spotjobs", at=at(2), reason="max_cost_usd reached", source="budget")
    preempted = KitRecord(event=PREEMPTED, request_id="req-1", attempt=1, run=0, job_id="111")
    started = KitRecord(event=RUN_STARTED, request_id="req-1", attempt=1, run=0, job_id="111")
    lines = [Observation(1, None, Signal.KIT, kit=k, job_name=JOB1) for k in (started, preempted)]
    observations = [*lines, Observation(1, ended())] if line_first else [Observation(1, ended()), *lines]
    for observation in observations:
        record = decide(copy.deepcopy(record), observation, POLICY, NOW).record
    assert record.attempts[0].outcome == AttemptOutcome.CANCELLED
    assert record.attempts[0].preemptions == 0


def test_a_timeout_waiting_for_kit_lines_counts_no_preemption_from_them() -> None:
    # Seed 129: the job's timeout was seen first and waits for the kit's lines; meanwhile the budget
    # stopped the request (the cancel settles it without a conclusion), then `preempted` came.
    record = record_of(attempt(1, checkpoints=0), max_cost_usd=0.02)
    record.mark(evidence_marker(KIT_RUN_KEY, 1, "0"))
    waiting = decide(copy.deepcopy(record), Observation(1, ended()), POLICY, NOW)
    assert waiting.waiting
    record = waiting.record
    record.cancel = CancelIntent(by="spotjobs", at=at(2), reason="max_cost_usd reached", source="budget")
    preempted = KitRecord(event=PREEMPTED, request_id="req-1", attempt=1, run=0, job_id="111")
    record = decide(record, Observation(1, None, Signal.KIT, kit=preempted, job_name=JOB1), POLICY, NOW).record
    assert record.attempts[0].preemptions == 0


def test_a_cancel_settled_while_a_timeout_waits_ends_the_attempt_when_vertex_ended_its_job() -> None:
    # Seed 8: the budget stopped the request while its timeout waited for the kit's lines; the
    # cancel settled the attempt at the decision's time, and the fleet counted a run Vertex never made.
    record = record_of(attempt(1, checkpoints=0), max_cost_usd=0.02)
    snapshot = ended(ran=60)
    waiting = decide(copy.deepcopy(record), Observation(1, snapshot), POLICY, NOW)
    assert waiting.waiting
    later = NOW + timedelta(seconds=10)
    note_intent(waiting.record, CancelIntent(by="spotjobs", at=iso(later), source="budget"), later)
    ended_at = waiting.record.attempts[0].ended_at
    assert waiting.record.status == RequestStatus.CANCELLED and ended_at is not None
    assert parse_iso(ended_at) == parse_iso(snapshot.end_time or "")


def test_a_timeout_read_after_a_cancel_settled_its_attempt_counts_no_preemption() -> None:
    # Seed 2369: reconcile found the job of a claim whose create's answer was lost, ended at its
    # timeout, and recorded it with the kit's kept lines; its instance died before deciding the end.
    # A cancel then settled the attempt (its job ended), so the end was never concluded, and the next
    # read counted the kit's `preempted` line of the stop at the timeout (and a fleet fact).
    from shared.deciding.preemptions import kit_runs, unconfirmed_kit_preemptions
    from shared.fleet.observations import Kind, Reading, observations_of

    snapshot = ended(ran=60)
    unrecorded = Attempt(1, "us-central1", "SPOT", claimed_at=at(0), create_sent_at=at(0))
    record = ended_then_cancelled(record_of(unrecorded, max_attempts=3), snapshot)
    assert record.status == RequestStatus.CANCELLED and record.attempts[0].outcome == AttemptOutcome.CANCELLED

    decided = observe(record, snapshot).record
    assert decided.attempts[0].preemptions == 0
    reading = Reading(runs_started=kit_runs, unconfirmed_preemptions=unconfirmed_kit_preemptions)
    assert not [fact for fact in observations_of(decided, reading) if fact.kind is Kind.PREEMPT]


def test_an_expired_job_after_progress_continues_too() -> None:
    decision = observe(record_of(attempt(1)), ended(JobState.EXPIRED, error=None))
    assert decision.record.requeue is not None and decision.record.requeue.reason == "timeout"


def test_a_continuation_is_not_counted_against_max_attempts() -> None:
    first = attempt(1, continued_after_timeout=True, outcome=AttemptOutcome.REQUEUED)
    second = attempt(2, JOB2)
    preempted = ended(error={"code": 8, "message": "Job failed with STOCKOUT"}, ran=60, name=JOB2)
    record = record_of(first, second, max_attempts=2)
    assert counted_attempts(record, 2) == 1
    requeued = observe(record, preempted, n=2).record
    assert requeued.status == RequestStatus.REQUEUED and requeued.requeue is not None
    assert requeued.requeue.attempt == 3
    gave_up = observe(record_of(first, second, max_attempts=1), preempted, n=2)
    assert gave_up.record.status == RequestStatus.GAVE_UP
    assert "attempt 1 of 1" in gave_up.effects.alerts[0].message


def test_continuations_stop_at_max_runtime_with_one_job_failed_alert() -> None:
    # Two hours of one-hour jobs: one continuation, the second timeout ends the request.
    first = attempt(1, continued_after_timeout=True, outcome=AttemptOutcome.REQUEUED)
    record = record_of(first, attempt(2, JOB2), max_runtime=2 * HOUR)
    assert max_continuations(record, POLICY.max_runtime_seconds) == 1
    decision = observe(record, ended(name=JOB2), n=2)
    assert decision.record.status == RequestStatus.FAILED and decision.record.requeue is None
    assert [alert.kind for alert in decision.effects.alerts] == [AlertKind.JOB_FAILED]
    assert "max_runtime of 7200 s" in decision.effects.alerts[0].message


def test_the_policys_max_runtime_bounds_a_request_that_names_none() -> None:
    record = record_of(attempt(1))
    assert max_continuations(record, 3 * HOUR) == 2
    assert max_continuations(record_of(attempt(1), max_runtime=10 * HOUR), 3 * HOUR) == 2


# No progress.


def test_a_timeout_without_progress_waits_for_late_kit_lines_then_fails_with_one_alert() -> None:
    record = record_of(attempt(1, checkpoints=0))
    record.mark(evidence_marker(KIT_RUN_KEY, 1, "0"))  # the kit said run_started, no commit yet
    snapshot = ended()
    end = datetime.fromisoformat(snapshot.end_time or "")
    early = observe(record, snapshot, now=end + timedelta(seconds=POLICY.kit_lines_settle_seconds - 1))
    assert early.waiting and early.record.status == RequestStatus.RUNNING
    decision = observe(record, snapshot, now=end + timedelta(seconds=POLICY.kit_lines_settle_seconds))
    assert decision.record.status == RequestStatus.FAILED
    assert decision.record.requeue is None
    assert [alert.kind for alert in decision.effects.alerts] == [AlertKind.TIMEOUT_WITHOUT_PROGRESS]


def test_a_timeout_before_any_kit_line_arrived_waits_for_the_settle_then_fails() -> None:
    # Seed 23: a job's lines arrive in any order, so no kit line yet is no evidence of no kit;
    # without the kit the failure comes `kit_lines_settle_seconds` after the end.
    record = record_of(attempt(1, checkpoints=0))
    snapshot = ended()
    end = datetime.fromisoformat(snapshot.end_time or "")
    early = observe(record, snapshot, now=end + timedelta(seconds=5))
    assert early.waiting and early.record.status == RequestStatus.RUNNING
    assert not early.effects.alerts
    decision = observe(record, snapshot, now=end + timedelta(seconds=POLICY.kit_lines_settle_seconds))
    assert decision.record.status == RequestStatus.FAILED
    assert [alert.kind for alert in decision.effects.alerts] == [AlertKind.TIMEOUT_WITHOUT_PROGRESS]


def test_a_timeout_whose_job_is_deleted_while_it_waits_still_fails_as_a_timeout() -> None:
    # Seed 97: a job that writes no kit lines timed out; while its end waited for the kit's lines a
    # person deleted the job, and the next read (NOT_FOUND, `vanished_job`) no longer said timeout.
    record = record_of(attempt(1, checkpoints=0))
    waiting = decide(copy.deepcopy(record), Observation(1, ended(ran=60)), POLICY, NOW)  # told by its code
    assert waiting.waiting
    record = waiting.record
    later = NOW + timedelta(seconds=POLICY.kit_lines_settle_seconds)
    decision = observe(record, vanished_job(record.attempts[0], later), now=later)
    assert decision.record.status == RequestStatus.FAILED
    assert [alert.kind for alert in decision.effects.alerts] == [AlertKind.TIMEOUT_WITHOUT_PROGRESS]


def test_a_continuation_that_makes_no_progress_fails() -> None:
    first = attempt(1, continued_after_timeout=True, outcome=AttemptOutcome.REQUEUED)
    record = record_of(first, attempt(2, JOB2, checkpoints=0))
    end = datetime.fromisoformat(ended(name=JOB2).end_time or "")
    decision = observe(record, ended(name=JOB2), n=2, now=end + timedelta(hours=1))
    assert decision.record.status == RequestStatus.FAILED
    assert [alert.kind for alert in decision.effects.alerts] == [AlertKind.TIMEOUT_WITHOUT_PROGRESS]


# The request's max_runtime.


def _read(**fields: object) -> tuple[object, list[str]]:
    body = {"request_id": "long-run", "custom_job": {"displayName": "x", "jobSpec": {"workerPoolSpecs": []}}, **fields}
    request, violations = read_request(json.dumps(body).encode(), attributes={}, max_bytes=1 << 20)
    return request, [v.path for v in violations]


@pytest.mark.parametrize(("value", "seconds"), [(86400, 86400.0), ("1209600s", 1209600.0), (" 90.5s ", 90.5)])
def test_max_runtime_is_seconds_or_a_duration_string(value: object, seconds: float) -> None:
    request, violations = _read(max_runtime=value)
    assert "max_runtime" not in violations
    assert request.max_runtime == seconds  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", [0, -5, "two weeks", "5m", True, [], 10**30])
def test_a_bad_max_runtime_is_one_clear_violation(value: object) -> None:
    _, violations = _read(max_runtime=value)
    assert violations.count("max_runtime") == 1


def test_a_max_runtime_past_the_policy_is_refused_with_its_ceiling() -> None:
    settings = Settings(max_runtime_seconds=14 * 86400)
    request, _ = _read(max_runtime="2419200s")
    refused = [v for v in check_policy(request, settings) if v.path == "max_runtime"]  # type: ignore[arg-type]
    assert len(refused) == 1 and "at most 1209600 s" in refused[0].message
    allowed, _ = _read(max_runtime=14 * 86400)
    assert not [v for v in check_policy(allowed, settings) if v.path == "max_runtime"]  # type: ignore[arg-type]


def test_the_canonical_envelope_keeps_max_runtime_only_when_set() -> None:
    request, _ = _read(max_runtime="7200s")
    envelope = canonical_envelope(request, default_location="us-central1", default_max_attempts=3)  # type: ignore[arg-type]
    assert envelope["max_runtime"] == 7200.0
    plain, _ = _read()
    assert "max_runtime" not in canonical_envelope(plain, default_location="us-central1", default_max_attempts=3)  # type: ignore[arg-type]


def test_status_shows_the_continuations() -> None:
    first = attempt(1, continued_after_timeout=True, outcome=AttemptOutcome.REQUEUED)
    record = record_of(first, attempt(2, JOB2), max_runtime=3 * HOUR)
    assert continuations_text(record, POLICY.max_runtime_seconds) == "continued after timeout, 1 of 2"
    assert "continued after timeout, 1 of 2" in format_request(record, Settings(), NOW)
    assert "continued after timeout" not in format_request(record_of(attempt(1)), Settings(), NOW)


def test_the_fleet_waits_for_a_kit_preemption_to_be_confirmed() -> None:
    from shared.deciding.preemptions import kit_runs, unconfirmed_kit_preemptions
    from shared.fleet.observations import Kind, Reading, observations_of

    reading = Reading(runs_started=kit_runs, unconfirmed_preemptions=unconfirmed_kit_preemptions)
    running = attempt(1, started_at=at(10), preemptions=1)
    record = record_of(running)
    record.mark(evidence_marker(KIT_RUN_KEY, 1, "0"))
    record.mark(evidence_marker(KIT_PREEMPTED_KEY, 1, "0"))

    def preempt_facts(of: RequestRecord) -> int:
        return sum(1 for fact in observations_of(of, reading) if fact.kind is Kind.PREEMPT)

    assert preempt_facts(record) == 0  # SIGTERM seen: a preemption, or the stop at the timeout
    restarted = copy.deepcopy(record)
    restarted.mark(evidence_marker(KIT_RUN_KEY, 1, "1"))  # Vertex restarted it: a preemption
    assert preempt_facts(restarted) == 1
    timed_out_end = observe(record, ended())
    assert preempt_facts(timed_out_end.record) == 0  # the end says timeout: none, for good


def test_spotjobs_validate_refuses_a_max_runtime_past_the_policy_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from shared import settings as settings_module
    from spotjobs.cli import main

    monkeypatch.setenv("SPOTJOBS_CHECKPOINT_BUCKET", "team-ckpt")
    monkeypatch.setenv("SPOTJOBS_MAX_RUNTIME_SECONDS", str(14 * 86400))
    settings_module.get_settings.cache_clear()
    request = tmp_path / "request.json"
    job = custom_job("long-run", ["python", "train.py"])
    try:
        request.write_text(json.dumps({"request_id": "long-run", "custom_job": job, "max_runtime": "2419200s"}))
        assert main(["validate", str(request)]) != 0
        refused = [line for line in capsys.readouterr().err.splitlines() if "max_runtime" in line]
        assert len(refused) == 1 and "at most 1209600 s" in refused[0]
        request.write_text(json.dumps({"request_id": "long-run", "custom_job": job, "max_runtime": "1209600s"}))
        assert main(["validate", str(request)]) == 0
    finally:
        settings_module.get_settings.cache_clear()
