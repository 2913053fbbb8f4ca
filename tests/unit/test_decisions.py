"""The pure decision (shared.deciding.decisions.decide): one observed job state in, one record and its
effects out. Every test also checks that deciding again on the result changes nothing, which is
what makes redeliveries harmless."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.clock import iso
from shared.deciding.decision_policy import DecisionPolicy
from shared.deciding.decisions import Decision, Observation, decide
from shared.deciding.events import Signal, patterns_from
from shared.deciding.job_end import ERROR_SETTLE_SECONDS, classify_failure
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt, RequestRecord, Requeue
from shared.ledger.states import RequestStatus
from shared.settings import Settings
from tests.support.decide import JOB1, NOW, POLICY, USER_ERROR, at, job, make_record

JOB2 = "projects/p/locations/europe-west4/customJobs/222"
STOCKOUT = {"code": 8, "message": "Job failed with STOCKOUT: the Spot VM was preempted 7 times."}


def observe(
    record: RequestRecord,
    snapshot: JobSnapshot,
    *,
    attempt: int = 1,
    line: str | None = None,
    policy: DecisionPolicy = POLICY,
    now: datetime = NOW,
) -> Decision:
    """decide() on a copy, as the ledger does; and prove a redelivery finds nothing to do."""
    observation = Observation(attempt, snapshot, Signal.PREEMPTION if line else None, line)
    decision = decide(copy.deepcopy(record), observation, policy, now)
    again = decide(copy.deepcopy(decision.record), observation, policy, now)
    assert again.record == decision.record, "deciding twice changed the record twice"
    assert not again.effects.lines and not again.effects.alerts and not again.effects.requeue_decided
    return decision


def test_running_job_marks_request_running() -> None:
    decision = observe(make_record(), job(JobState.RUNNING))
    attempt = decision.record.attempts[0]
    assert decision.record.status == RequestStatus.RUNNING
    assert (attempt.state, attempt.started_at, attempt.state_changed_at) == (
        JobState.RUNNING,
        at(10),
        at(100),
    )
    assert decision.effects.events == ()


def test_preemption_line_counts_once_per_insert_id() -> None:
    record = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    first = observe(record, job(JobState.RUNNING, update=50), line="insert-1")
    assert first.record.attempts[0].preemptions == 1
    [line] = first.effects.lines
    assert line.severity == "WARNING"
    assert line.fields == {
        "event": "preemption",
        "request_id": "req-1",
        "attempt": 1,
        "job": JOB1,
        "location": "us-central1",
        "preemptions": 1,
        "source": "log",
    }
    second = observe(first.record, job(JobState.RUNNING, update=60), line="insert-2")
    assert second.record.attempts[0].preemptions == 2
    assert second.effects.events == ("preemption",)


def test_line_then_state_of_the_same_preemption_counts_once() -> None:
    record = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    seen = observe(record, job(JobState.PENDING, update=200), line="insert-1").record
    assert seen.attempts[0].preemptions == 1
    seen = observe(seen, job(JobState.RUNNING, update=210)).record
    seen_again = observe(seen, job(JobState.PENDING, update=300))  # the second preemption, by state
    assert seen_again.record.attempts[0].preemptions == 2
    late_line = observe(seen_again.record, job(JobState.PENDING, update=300), line="insert-2")
    assert late_line.record.attempts[0].preemptions == 2, "its line arrived late: the same preemption"
    assert late_line.effects.lines == []


def test_state_then_line_of_the_same_preemption_counts_once() -> None:
    record = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    by_state = observe(record, job(JobState.PENDING, update=200))
    assert by_state.effects.lines[0].fields["source"] == "state"
    by_line = observe(by_state.record, job(JobState.RUNNING, update=220), line="insert-1")
    assert by_line.record.attempts[0].preemptions == 1
    assert by_line.effects.lines == []


def test_reconcile_alone_counts_running_to_pending() -> None:
    record = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    for update in (200, 300, 400):
        record = observe(record, job(JobState.PENDING, update=update)).record
        record = observe(record, job(JobState.RUNNING, update=update + 10)).record
    assert record.attempts[0].preemptions == 3


def test_container_preemption_lines_are_not_counted() -> None:
    # The event path passes no evidence for container lines; a hint alone counts nothing.
    record = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    observation = Observation(1, job(JobState.RUNNING, update=50), Signal.PREEMPTION, None)
    assert decide(copy.deepcopy(record), observation, POLICY, NOW).record.attempts[0].preemptions == 0


def test_preemption_storm_alerts_once_per_attempt() -> None:
    record = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    alerts = []
    for k in range(1, 8):
        decision = observe(record, job(JobState.RUNNING, update=k), line=f"insert-{k}")
        alerts += decision.effects.alerts
        record = decision.record
    [alert] = alerts
    assert (alert.kind, alert.severity, alert.attempt) == ("preemption_storm", "WARNING", 1)
    assert alert.details["preemptions"] == POLICY.storm_threshold  # "N times or more": at N
    assert record.attempts[0].preemptions == 7


def test_preemption_storm_fires_at_the_threshold_not_one_preemption_later() -> None:
    # The catalogue (shared/alerts.py, docs/operations.md): preempted N times or more.
    policy = replace(POLICY, storm_threshold=2)
    record = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    first = observe(record, job(JobState.RUNNING, update=1), line="insert-1", policy=policy)
    assert first.effects.alerts == []
    second = observe(first.record, job(JobState.RUNNING, update=2), line="insert-2", policy=policy)
    [alert] = second.effects.alerts
    assert (alert.kind, alert.details["preemptions"], alert.details["threshold"]) == ("preemption_storm", 2, 2)


def test_an_older_read_does_not_overwrite_a_newer_one() -> None:
    record = observe(make_record(), job(JobState.RUNNING, update=300)).record
    stale = observe(record, job(JobState.PENDING, update=200))
    assert stale.record == record, "a PENDING read older than the RUNNING one is not a preemption"


def test_stockout_requeues_the_next_attempt_once() -> None:
    record = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    decision = observe(record, job(JobState.FAILED, update=400, error=STOCKOUT))
    stored = decision.record
    assert stored.status == RequestStatus.REQUEUED
    assert stored.attempts[0].outcome == "requeued"
    assert stored.attempts[0].error == STOCKOUT and stored.attempts[0].ended_at == at(400)
    assert stored.requeue == Requeue(2, "us-central1", "SPOT", "stockout", decided_at=iso(NOW))
    assert decision.effects.requeue_decided
    [line] = decision.effects.lines
    assert line.fields["event"] == "requeue" and line.fields["next_attempt"] == 2
    assert decision.effects.alerts == []


def test_fallback_strategy_after_k_spot_attempts() -> None:
    record = make_record(request={"fallback": {"after_spot_attempts": 1, "strategy": "STANDARD"}})
    requeue = observe(record, job(JobState.FAILED, update=400, error=STOCKOUT)).record.requeue
    assert requeue is not None and requeue.strategy == "STANDARD"


def test_failover_to_the_next_location_after_a_stockout() -> None:
    record = make_record(request={"locations": ["us-central1", "europe-west4"]})
    decision = observe(record, job(JobState.FAILED, update=400, error=STOCKOUT))
    assert decision.record.requeue is not None and decision.record.requeue.location == "europe-west4"
    assert decision.effects.lines[0].fields["failover"] is True


def test_preemption_without_stockout_stays_in_place() -> None:
    record = make_record(request={"locations": ["us-central1", "europe-west4"]})
    error = {"code": 13, "message": "The Spot VM was preempted and could not be restarted."}
    requeue = observe(record, job(JobState.FAILED, update=400, error=error)).record.requeue
    assert requeue is not None and (requeue.location, requeue.reason) == (
        "us-central1",
        "preemption",
    )


def test_requeue_delay_sets_not_before() -> None:
    policy = replace(POLICY, requeue_delay_seconds=90)
    requeue = observe(make_record(), job(JobState.FAILED, update=400, error=STOCKOUT), policy=policy).record.requeue
    assert requeue is not None and requeue.not_before == iso(NOW + timedelta(seconds=90))


def test_last_attempt_gives_up_with_one_alert() -> None:
    record = make_record(request={"max_attempts": 1})
    decision = observe(record, job(JobState.FAILED, update=400, error=STOCKOUT))
    assert decision.record.status == RequestStatus.GAVE_UP and decision.record.requeue is None
    assert decision.record.finished_at == iso(NOW)
    assert decision.record.attempts[0].outcome == "gave_up"
    [alert] = decision.effects.alerts
    assert (alert.kind, alert.severity, alert.request_id) == (
        "attempts_exhausted",
        "ERROR",
        "req-1",
    )
    assert decision.effects.events == ("attempts_exhausted",)
    assert decision.effects.lines[0].severity == "ERROR"


def test_max_attempts_defaults_from_settings() -> None:
    record = make_record(request={"max_attempts": None})
    policy = replace(POLICY, default_max_attempts=1)
    assert observe(record, job(JobState.FAILED, error=STOCKOUT), policy=policy).record.status == RequestStatus.GAVE_UP


def test_other_failure_is_reported_not_requeued() -> None:
    decision = observe(make_record(), job(JobState.FAILED, update=400, error=USER_ERROR))
    assert decision.record.status == RequestStatus.FAILED and decision.record.requeue is None
    assert decision.record.attempts[0].outcome == "failed"
    [alert] = decision.effects.alerts
    assert (alert.kind, alert.severity, alert.details["error"]) == (
        "job_failed",
        "ERROR",
        USER_ERROR,
    )
    assert decision.effects.events == ("job_failed",)
    assert decision.record.pending_alerts == [alert.to_json()]  # written with the decision


def test_expired_job_is_a_failure_once_the_kits_lines_had_time_to_arrive() -> None:
    # EXPIRED is one of the ways Vertex may end a job at its timeout (shared/deciding/continuations.py):
    # with no progress heard of, the decision waits for the kit's last lines, then fails the request.
    expired = job(JobState.EXPIRED, update=400)
    early = observe(make_record(), expired)
    assert early.waiting and early.record.status == RequestStatus.SUBMITTED
    later = observe(make_record(), expired, now=NOW + timedelta(seconds=POLICY.kit_lines_settle_seconds))
    assert later.waiting is None and later.record.status == RequestStatus.FAILED


def test_failed_without_error_waits_for_it() -> None:
    fresh_failure = job(JobState.FAILED, update=590)
    decision = observe(make_record(), fresh_failure)
    assert decision.waiting and decision.record.status == RequestStatus.SUBMITTED
    assert decision.record.attempts[0].outcome is None
    later = NOW + timedelta(seconds=ERROR_SETTLE_SECONDS)
    settled = observe(make_record(), fresh_failure, now=later)
    assert settled.waiting is None and settled.record.status == RequestStatus.FAILED


def test_success_records_times_and_requests_prune_once() -> None:
    decision = observe(make_record(state=JobState.RUNNING), job(JobState.SUCCEEDED, update=500))
    stored = decision.record
    assert stored.status == RequestStatus.SUCCEEDED and stored.finished_at == iso(NOW)
    assert stored.attempts[0].outcome == "succeeded" and stored.attempts[0].ended_at == at(500)
    assert stored.prune_requested_at == iso(NOW) and decision.effects.prune_requested
    assert stored.prune_pending  # written with the decision, cleared once published
    assert decision.effects.events == ("job_succeeded",)


def test_cancelled_is_final_and_not_requeued() -> None:
    error = {"code": 1, "message": "CANCELED"}
    decision = observe(make_record(), job(JobState.CANCELLED, update=500, error=error))
    assert decision.record.status == RequestStatus.CANCELLED and decision.record.requeue is None
    assert decision.effects.alerts == []


def test_older_attempt_never_changes_the_request_status() -> None:
    first = Attempt(1, "us-central1", "SPOT", claimed_at=at(0), job=JOB1, state=JobState.RUNNING)
    second = Attempt(2, "europe-west4", "SPOT", claimed_at=at(300), job=JOB2, state=JobState.RUNNING)
    record = make_record(status=RequestStatus.RUNNING, attempts=[first, second])
    decision = observe(record, job(JobState.FAILED, update=400, error=STOCKOUT), attempt=1)
    assert decision.record.status == RequestStatus.RUNNING and decision.record.requeue is None
    assert decision.record.attempts[0].outcome == "requeued"
    assert decision.record.attempts[1] == second
    assert not decision.effects.requeue_decided and decision.effects.alerts == []


def test_finished_request_is_not_requeued_by_a_late_failure() -> None:
    record = make_record(status=RequestStatus.CANCELLED, state=JobState.CANCELLING)
    decision = observe(record, job(JobState.FAILED, update=400, error=STOCKOUT))
    assert decision.record.status == RequestStatus.CANCELLED and decision.record.requeue is None


def test_a_flex_start_attempt_waiting_within_its_max_wait_is_not_stuck() -> None:
    policy = replace(POLICY, stuck_after_seconds=3600)
    record = make_record(
        state=JobState.PENDING,
        request={"custom_job": {"jobSpec": {"scheduling": {"maxWaitDuration": "43200s"}}}},
    )
    record.attempts[0].strategy = "FLEX_START"
    record.attempts[0].state_changed_at = iso(NOW - timedelta(hours=12))  # 12 h: past 1 h, not 13 h
    assert observe(record, job(JobState.PENDING, update=-42600), policy=policy).effects.alerts == []
    record.attempts[0].state_changed_at = iso(NOW - timedelta(hours=14))
    [alert] = observe(record, job(JobState.PENDING, update=-49800), policy=policy).effects.alerts
    assert alert.kind == "job_stuck"


def test_a_flex_start_job_gets_an_explicit_max_wait_unless_the_request_sets_one() -> None:
    from shared.adapters.vertex import build_job_json

    def scheduling(job: dict) -> dict:
        built = build_job_json(
            job,
            request_id="r",
            attempt=2,
            strategy="FLEX_START",
            output_dir="gs://b/",
            deployment="d",
            commit_markers=("COMMITTED",),
        )
        return built["jobSpec"]["scheduling"]

    assert scheduling({"jobSpec": {}}) == {"strategy": "FLEX_START", "maxWaitDuration": "86400s"}
    own = {"jobSpec": {"scheduling": {"maxWaitDuration": "3600s"}}}
    assert scheduling(own)["maxWaitDuration"] == "3600s"
    spot = build_job_json(
        {"jobSpec": {}},
        request_id="r",
        attempt=1,
        strategy="SPOT",
        output_dir="gs://b/",
        deployment="d",
        commit_markers=("COMMITTED",),
    )
    assert "maxWaitDuration" not in spot["jobSpec"]["scheduling"]


def test_stuck_waiting_job_alerts_once_per_attempt_and_state() -> None:
    policy = replace(POLICY, stuck_after_seconds=3600)
    record = make_record(state=JobState.PENDING)
    record.attempts[0].state_changed_at = iso(NOW - timedelta(hours=2))
    decision = observe(record, job(JobState.PENDING, update=-6600), policy=policy)
    [alert] = decision.effects.alerts
    assert (alert.kind, alert.details["state"]) == ("job_stuck", JobState.PENDING)
    running_for_days = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    running_for_days.attempts[0].state_changed_at = iso(NOW - timedelta(days=3))
    assert observe(running_for_days, job(JobState.RUNNING, update=-(10**5)), policy=policy).effects.alerts == []


def test_attempt_without_its_job_recorded_waits() -> None:
    record = make_record()
    record.attempts[0].job = None
    decision = observe(record, job(JobState.RUNNING))
    assert decision.waiting and decision.record == record


def test_a_stray_job_for_the_attempt_changes_nothing() -> None:
    record = make_record()
    decision = observe(record, job(JobState.FAILED, name=JOB2, error=STOCKOUT))
    assert decision.waiting is None and decision.record == record


@pytest.mark.parametrize(
    ("state", "error", "capacity", "stockout"),
    [
        (JobState.FAILED, STOCKOUT, True, True),
        (JobState.FAILED, {"code": 8, "message": "quota"}, True, True),  # RESOURCE_EXHAUSTED
        (
            JobState.FAILED,
            {"code": 3, "message": "Resources are insufficient in region: r."},
            True,
            True,
        ),
        (JobState.FAILED, {"code": 13, "message": "the VM was preempted"}, True, False),
        (JobState.FAILED, USER_ERROR, False, False),
        (JobState.FAILED, {"code": 13, "message": "Internal error occurred."}, False, False),
        (JobState.FAILED, None, False, False),
        (JobState.EXPIRED, STOCKOUT, False, False),
    ],
)
def test_classify_failure(state: str, error: dict[str, Any] | None, capacity: bool, stockout: bool) -> None:
    cause = classify_failure(JobSnapshot(JOB1, state, error), patterns_from(Settings()))
    assert (cause.capacity, cause.stockout) == (capacity, stockout)
