"""`decide` with a deadline (shared/deciding/deadline_watch.py): what the record says of the work,
the switches both ways, and the deadline's alerts once each."""

from __future__ import annotations

from datetime import timedelta

from spotjobs_kit.lines import KitRecord

from shared.clock import iso
from shared.deciding.deadline import Placement
from shared.deciding.deadline_watch import deadline_situation, projected_finish
from shared.deciding.decisions import Observation, decide
from shared.jobs import JobState
from shared.ledger.records import Attempt
from shared.ledger.states import AttemptOutcome, RequestStatus
from tests.support.decide import JOB1, NOW, POLICY, job, make_record

STEPS, CHANGEOVER = 1000, 60.0
REVIEW = POLICY.reconcile_interval_seconds


def deadline(slack: float, *, total_steps: int | None = STEPS) -> dict[str, object]:
    """Due `slack` seconds after what on-demand from NOW needs (1 s a step, one changeover)."""
    return {
        "deadline": iso(NOW + timedelta(seconds=STEPS + CHANGEOVER + slack)),
        "total_steps": total_steps,
        "expected_step_seconds": 1.0,
        "changeover_seconds": CHANGEOVER,
    }


def situation(record, **kwargs):
    return deadline_situation(
        record, NOW, prior_seconds=1200.0, review_seconds=REVIEW, checkpoint_prior_seconds=3600.0, **kwargs
    )


def test_a_spot_job_queued_within_its_changeover_is_on_spot_and_waits_after_it() -> None:
    record = make_record(request=deadline(100))
    record.created_at = record.attempts[0].created_at = iso(NOW - timedelta(seconds=CHANGEOVER / 2))
    assert situation(record).placement is Placement.ON_SPOT
    assert decide(record, Observation(1, job(JobState.QUEUED)), POLICY, NOW).record.attempts[0].outcome is None
    record.attempts[0].created_at = iso(NOW - timedelta(seconds=2 * CHANGEOVER))
    assert situation(record).placement is Placement.WAITING_FOR_SPOT


def test_waiting_with_too_little_slack_switches_once_to_standard() -> None:
    record = make_record(request=deadline(100))  # waiting since 599 s ago
    decision = decide(record, Observation(1, job(JobState.QUEUED)), POLICY, NOW)
    spot = decision.record.attempts[0]
    assert spot.outcome is AttemptOutcome.SWITCHED_TO_ON_DEMAND and spot.cancel_pending
    assert decision.record.status is RequestStatus.REQUEUED
    assert (decision.record.requeue.attempt, decision.record.requeue.strategy) == (2, "STANDARD")
    assert decision.effects.requeue_decided and decision.effects.events[-1] == "deadline_switch"
    again = decide(decision.record, Observation(1, job(JobState.QUEUED)), POLICY, NOW)
    assert "deadline_switch" not in again.effects.events and not again.effects.requeue_decided


def test_a_request_without_deadline_or_without_known_work_is_left_alone() -> None:
    plain = make_record()
    assert situation(plain) is None
    unknown = make_record(request={**deadline(100), "total_steps": None, "expected_step_seconds": None})
    assert situation(unknown) is None
    assert decide(unknown, Observation(1, job(JobState.QUEUED)), POLICY, NOW).record.attempts[0].outcome is None


def test_the_kits_lines_give_the_total_the_rate_and_the_committed_step() -> None:
    record = make_record(request={**deadline(10 * 3600), "total_steps": None, "expected_step_seconds": None})
    progress = KitRecord(
        "progress", request_id="req-1", attempt=1, run=0, step=300, total_steps=STEPS, steps_per_second=2.0
    )
    committed = KitRecord("checkpoint_committed", request_id="req-1", attempt=1, run=0, step=250, seconds=1.0)
    for line in (progress, committed):
        record = decide(record, Observation(1, None, kit=line, job_name=JOB1), POLICY, NOW).record
    s = situation(record, running=True)
    assert (s.work.total_steps, s.work.committed_steps, s.work.spot_step_seconds) == (STEPS, 250, 0.5)
    assert s.placement is Placement.ON_SPOT
    # The projection on Spot: the 750 steps left at 0.5 s, and no changeover left (running since 590 s).
    assert projected_finish(s) == NOW + timedelta(seconds=375)


def test_on_demand_ahead_of_the_line_goes_back_to_spot() -> None:
    record = make_record(request=deadline(10 * 3600), status=RequestStatus.RUNNING, state=JobState.RUNNING)
    record.created_at = iso(NOW - timedelta(hours=1))
    standard = Attempt(2, "us-central1", "STANDARD", claimed_at=iso(NOW - timedelta(hours=1)), job=JOB1 + "2")
    standard.state, standard.last_checkpoint = JobState.RUNNING, [0, 900]
    record.attempts[0].outcome = AttemptOutcome.SWITCHED_TO_ON_DEMAND
    record.attempts.append(standard)
    decision = decide(record, Observation(2, job(JobState.RUNNING, name=JOB1 + "2")), POLICY, NOW)
    assert decision.record.attempts[1].outcome is AttemptOutcome.SWITCHED_TO_SPOT
    assert decision.record.requeue.strategy == "SPOT"


def test_at_risk_then_missed_alert_once_each() -> None:
    # On Spot past its changeover with less slack than one changeover: at risk, and it stays.
    record = make_record(request=deadline(30), status=RequestStatus.RUNNING, state=JobState.RUNNING)
    record.attempts[0].started_at = iso(NOW - timedelta(seconds=CHANGEOVER + 1))
    kinds = []
    for _ in range(2):
        decision = decide(record, Observation(1, job(JobState.RUNNING)), POLICY, NOW)
        record = decision.record
        kinds += [alert.kind for alert in decision.effects.alerts]
    assert kinds == ["deadline_at_risk"] and record.attempts[0].outcome is None
    late = NOW + timedelta(seconds=STEPS + 2 * CHANGEOVER)
    for _ in range(2):
        decision = decide(record, Observation(1, job(JobState.RUNNING)), POLICY, late)
        record = decision.record
        kinds += [alert.kind for alert in decision.effects.alerts]
    assert kinds == ["deadline_at_risk", "deadline_missed"]


def test_status_shows_the_deadline_progress_projected_finish_and_slack() -> None:
    from shared.settings import Settings
    from spotjobs.cli.status import deadline_view, format_request

    record = make_record(request=deadline(500), status=RequestStatus.RUNNING, state=JobState.RUNNING)
    record.attempts[0].last_checkpoint = [0, 250]
    view = deadline_view(record, Settings(), NOW)
    # On Spot, 750 steps left at 1 s: on-demand from now needs 750 s + one changeover.
    assert view["slack_seconds"] == round(STEPS + CHANGEOVER + 500 - 750 - CHANGEOVER)
    assert view["projected_finish"] == iso(NOW + timedelta(seconds=750), timespec="seconds")
    text = format_request(record, Settings(), NOW)
    assert "progress 250/1000 steps committed (25%)   on spot" in text
    assert f"slack {view['slack_seconds']} s (one changeover 60 s)" in text
    assert "deadline" not in format_request(make_record(), Settings(), NOW)


def test_a_success_after_the_deadline_is_missed_once_and_one_before_it_is_not() -> None:
    for slack, expected in ((-CHANGEOVER - STEPS - 700, ["deadline_missed"]), (10 * 3600, [])):
        record = make_record(request=deadline(slack), status=RequestStatus.RUNNING, state=JobState.RUNNING)
        decision = decide(record, Observation(1, job(JobState.SUCCEEDED)), POLICY, NOW)
        assert [alert.kind for alert in decision.effects.alerts] == expected
        assert decision.record.status is RequestStatus.SUCCEEDED


def test_a_deadline_request_whose_last_spot_attempt_stocks_out_goes_on_demand_not_gave_up() -> None:
    from tests.support.decide import USER_ERROR

    stockout = {"code": 8, "message": "Job failed with STOCKOUT: the Spot VM was preempted 7 times."}
    for request, expected in (({**deadline(10 * 3600), "max_attempts": 1}, "STANDARD"), ({"max_attempts": 1}, None)):
        record = make_record(request=request, status=RequestStatus.RUNNING, state=JobState.RUNNING)
        decided = decide(record, Observation(1, job(JobState.FAILED, error=stockout)), POLICY, NOW).record
        if expected is None:
            assert decided.status is RequestStatus.GAVE_UP
        else:
            assert decided.status is RequestStatus.REQUEUED and decided.requeue.strategy == expected
    record = make_record(request={**deadline(10 * 3600), "max_attempts": 1}, state=JobState.RUNNING)
    failed = decide(record, Observation(1, job(JobState.FAILED, error=USER_ERROR)), POLICY, NOW).record
    assert failed.status is RequestStatus.FAILED  # only capacity is worked around
