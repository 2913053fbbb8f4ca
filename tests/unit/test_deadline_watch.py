"""`decide` with a deadline (shared/deciding/deadline_watch.py): what the record says of the work,
the switches both ways, and the deadline's alerts once each."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from spotjobs_kit.lines import KitRecord

from shared.clock import iso, parse_iso
from shared.deciding.deadline import Action, Placement, decide_deadline
from shared.deciding.deadline_watch import deadline_situation, projected_finish
from shared.deciding.decisions import Observation, decide
from shared.fleet.estimate import SpotOutlook
from shared.jobs import JobState
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.run_lock import LEASE_SECONDS
from shared.ledger.states import AttemptOutcome, RequestStatus
from tests.support.decide import JOB1, NOW, at, job, make_record
from tests.support.decide import POLICY as SPOT_ONLY

# A deadline is accepted only where STANDARD is an allowed fallback (shared/requests/policy.py).
POLICY = replace(SPOT_ONLY, allowed_fallback_strategies=("STANDARD",))
STEPS, CHANGEOVER = 1000, 60.0
REVIEW = POLICY.reconcile_interval_seconds
UNSEEN = 2 * REVIEW + LEASE_SECONDS  # the longest a waiting job goes unasked: a dead pass's lease between two


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
    record = make_record(request=deadline(CHANGEOVER / 2 + UNSEEN))  # its wait, seen a pass late, still fits
    record.created_at = record.attempts[0].created_at = iso(NOW - timedelta(seconds=CHANGEOVER / 2))
    assert situation(record).placement is Placement.ON_SPOT
    assert decide(record, Observation(1, job(JobState.QUEUED)), POLICY, NOW).record.attempts[0].outcome is None
    record.attempts[0].created_at = iso(NOW - timedelta(seconds=2 * CHANGEOVER))
    assert situation(record).placement is Placement.WAITING_FOR_SPOT


def test_a_late_requests_spot_job_not_yet_running_leaves_unless_its_wait_would_be_seen_in_time() -> None:
    """Seed 5002 (at 1c5db56): r2-deadline's first Spot job, on Spot within its changeover, had
    248 s of slack beyond the changeover it still had to pay, under the safety net. It got no
    capacity: at its changeover's end it became a wait, which no line says, and the rule stayed
    until a reconcile pass saw it (up to an interval later), when on-demand no longer fit. A Spot
    job not yet running stays only with a reconcile interval of slack beyond its changeover."""
    half = CHANGEOVER / 2

    def decided(slack: float, state: str) -> AttemptOutcome | None:
        record = make_record(request=deadline(slack), state=state)
        record.created_at = record.attempts[0].created_at = iso(NOW - timedelta(seconds=half))
        if state == JobState.RUNNING:
            record.attempts[0].started_at = record.attempts[0].created_at
        return decide(record, Observation(1, job(state)), POLICY, NOW).record.attempts[0].outcome

    assert decided(half + UNSEEN - 1, JobState.QUEUED) is AttemptOutcome.SWITCHED_TO_ON_DEMAND
    assert decided(half + UNSEEN, JobState.QUEUED) is None  # the pass after its changeover still fits
    assert decided(half + UNSEEN - 1, JobState.RUNNING) is None  # capacity seen: exploitation


def test_a_switch_for_a_wait_not_yet_seen_says_how_late_it_may_be_seen() -> None:
    """The safety net's reason names the unseen wait it kept slack for, and only when it did."""
    half = CHANGEOVER / 2
    queued = make_record(request=deadline(half + UNSEEN - 1), state=JobState.QUEUED)
    queued.created_at = queued.attempts[0].created_at = iso(NOW - timedelta(seconds=half))
    switch = decide_deadline(situation(queued))
    assert switch.action is Action.SWITCH_TO_ON_DEMAND
    assert f"changeover left {half:.0f} s, its wait seen up to {UNSEEN:.0f} s late)" in switch.reason
    running = make_record(request=deadline(half - 1), state=JobState.RUNNING)  # capacity seen: no unseen wait
    running.created_at = running.attempts[0].created_at = running.attempts[0].started_at = queued.created_at
    switch = decide_deadline(situation(running))
    assert switch.action is Action.SWITCH_TO_ON_DEMAND
    assert switch.reason.endswith(f"changeover left {half:.0f} s)")


def test_a_spot_runs_changeover_counts_from_its_start_not_from_the_read_that_saw_it() -> None:
    record = make_record(request=deadline(30), state=JobState.RUNNING)
    record.created_at = record.attempts[0].created_at = iso(NOW - timedelta(seconds=100))
    record.attempts[0].started_at = iso(NOW - timedelta(seconds=CHANGEOVER - 10))  # 10 s of it left
    record.attempts[0].state_changed_at = iso(NOW)  # the read that saw it run
    assert decide_deadline(situation(record)).action is Action.STAY  # 30 s of slack beyond the 10


def test_a_wait_seen_only_by_a_pass_counts_on_a_pass_that_crashed_holding_the_run_lock() -> None:
    """The rule assumes the job is asked at least every m seconds (docs/deadlines.md); a waiting
    job is asked by reconcile alone, and a pass that dies holds the run lock for its lease, turning
    the ticks within it away (shared/ledger/run_lock.py). So the longest a wait goes unseen is one
    interval to the pass that died, its lease, and one interval to the first tick after it: the
    unseen wait of a Spot job not yet running and the safety net's margin both count that."""
    half = CHANGEOVER / 2

    def decided(slack: float) -> AttemptOutcome | None:
        record = make_record(request=deadline(slack), state=JobState.QUEUED)
        record.created_at = record.attempts[0].created_at = iso(NOW - timedelta(seconds=half))
        return decide(record, Observation(1, job(JobState.QUEUED)), POLICY, NOW).record.attempts[0].outcome

    assert decided(half + UNSEEN - 1) is AttemptOutcome.SWITCHED_TO_ON_DEMAND
    assert decided(half + UNSEEN) is None
    assert situation(make_record(request=deadline(0))).review_seconds == UNSEEN + 3600.0  # the prior I


def test_a_wait_after_a_run_counts_from_the_attempts_last_change_of_state() -> None:
    record = make_record(request=deadline(3600))
    spot = record.attempts[0]
    spot.created_at = iso(NOW - timedelta(hours=5))
    assert situation(record).placed_at == NOW - timedelta(hours=5)  # never ran: from its creation
    spot.started_at, spot.state_changed_at = iso(NOW - timedelta(hours=4)), iso(NOW - timedelta(seconds=90))
    spot.preemptions = 1
    waiting = situation(record)
    assert waiting.placement is Placement.WAITING_FOR_SPOT
    assert waiting.placed_at == NOW - timedelta(seconds=90)  # the rule's hold for a move counts from here


def test_a_restarted_job_queued_then_pending_is_switched_from_its_whole_wait() -> None:
    """Issue 43: behind the line where the claim's outlook expects outages of hours, the rule holds
    a wait 3 changeovers (180 s) for a move. A job Vertex restarted waited QUEUED 240 s, then
    PENDING 60 s: one wait of 300 s, past the hold, so it leaves for on-demand now."""
    record = make_record(request=deadline(20000))
    record.created_at = iso(NOW - timedelta(seconds=10000))
    record.attempts[0].last_checkpoint = [1, 100]
    record.attempts[0].spot_outlook = SpotOutlook(0.5, 30000.0).to_json()
    for state, update in ((JobState.RUNNING, 10), (JobState.QUEUED, 300)):  # at(update): NOW - 600 s + update
        record = decide(record, Observation(1, job(state, update=update)), POLICY, parse_iso(at(update))).record
    assert record.attempts[0].outcome is None and record.attempts[0].preemptions == 1
    decision = decide(record, Observation(1, job(JobState.PENDING, update=540)), POLICY, NOW)
    assert decision.record.attempts[0].outcome is AttemptOutcome.SWITCHED_TO_ON_DEMAND
    assert situation(decision.record).placed_at == NOW - timedelta(seconds=300)  # not PENDING's start, 60 s ago
    assert decision.record.requeue.strategy == "STANDARD"


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


def test_a_spot_job_waiting_behind_the_line_waits_on_where_its_claim_kept_short_outages() -> None:
    def waiting(outlook: SpotOutlook | None) -> RequestRecord:
        # 10 % done, 10,000 s into a span of 31,060 s: behind the line, 16,000 s beyond the net.
        record = make_record(request=deadline(20000))
        record.created_at = iso(NOW - timedelta(seconds=10000))
        record.attempts[0].created_at = iso(NOW - timedelta(seconds=700))
        record.attempts[0].last_checkpoint = [1, 100]
        record.attempts[0].spot_outlook = None if outlook is None else outlook.to_json()
        return record

    assert situation(waiting(None)).spot_outlook is None
    # nothing kept (no fleet history): Uniform Progress leaves for on-demand, as before
    before = decide(waiting(None), Observation(1, job(JobState.PENDING)), POLICY, NOW).record
    assert before.attempts[0].outcome is AttemptOutcome.SWITCHED_TO_ON_DEMAND
    # outages of about a minute, kept by its claim: it waits on
    short = SpotOutlook(0.99, 6000.0)
    assert situation(waiting(short)).spot_outlook == short
    after = decide(waiting(short), Observation(1, job(JobState.PENDING)), POLICY, NOW).record
    assert after.attempts[0].outcome is None and after.requeue is None
    # outages of hours: it leaves
    hours = decide(waiting(SpotOutlook(0.5, 30000.0)), Observation(1, job(JobState.PENDING)), POLICY, NOW).record
    assert hours.attempts[0].outcome is AttemptOutcome.SWITCHED_TO_ON_DEMAND
    # an on-demand attempt's outlook is none of the rule's business
    standard = waiting(short)
    standard.attempts[0].strategy = "STANDARD"
    assert situation(standard).spot_outlook is None


def on_demand_ahead_of_the_line() -> RequestRecord:
    record = make_record(request=deadline(10 * 3600), status=RequestStatus.RUNNING, state=JobState.RUNNING)
    record.created_at = iso(NOW - timedelta(hours=1))
    standard = Attempt(2, "us-central1", "STANDARD", claimed_at=iso(NOW - timedelta(hours=1)), job=JOB1 + "2")
    standard.state, standard.last_checkpoint = JobState.RUNNING, [0, 900]
    record.attempts[0].outcome = AttemptOutcome.SWITCHED_TO_ON_DEMAND
    record.attempts.append(standard)
    return record


def test_on_demand_ahead_of_the_line_goes_back_to_spot() -> None:
    decision = decide(
        on_demand_ahead_of_the_line(), Observation(2, job(JobState.RUNNING, name=JOB1 + "2")), POLICY, NOW
    )
    assert decision.record.attempts[1].outcome is AttemptOutcome.SWITCHED_TO_SPOT
    assert decision.record.requeue.strategy == "SPOT"


class Fleet:
    """A `FleetView` that answers as told and records what it was asked."""

    def __init__(self, capacity: bool | None = None, outlook: SpotOutlook | None = None) -> None:
        self.capacity, self.outlook = capacity, outlook
        self.asked: list[tuple[str, str]] = []

    def has_capacity(self, request, location: str) -> bool | None:
        self.asked.append(("capacity", location))
        return self.capacity

    def spot_outlook(self, request, location: str) -> SpotOutlook | None:
        self.asked.append(("outlook", location))
        return self.outlook


def test_back_to_spot_waits_where_the_fleet_says_spot_has_no_capacity_now() -> None:
    observed = Observation(2, job(JobState.RUNNING, name=JOB1 + "2"))
    no = Fleet(capacity=False)
    out = decide(on_demand_ahead_of_the_line(), observed, POLICY, NOW, fleet=no)
    assert out.record.attempts[1].outcome is None and out.record.requeue is None
    assert no.asked == [("capacity", "us-central1")]  # where the attempt runs
    for says in (True, None):  # capacity, or too little known: back to Spot as before
        back = decide(on_demand_ahead_of_the_line(), observed, POLICY, NOW, fleet=Fleet(capacity=says))
        assert back.record.attempts[1].outcome is AttemptOutcome.SWITCHED_TO_SPOT
    # A job on Spot within its changeover stays without asking anything.
    quiet = Fleet(capacity=True)
    record = make_record(request=deadline(CHANGEOVER / 2 + UNSEEN))
    record.created_at = record.attempts[0].created_at = iso(NOW - timedelta(seconds=CHANGEOVER / 2))
    assert decide(record, Observation(1, job(JobState.QUEUED)), POLICY, NOW, fleet=quiet).record.requeue is None
    assert quiet.asked == []


def test_a_wait_whose_claim_kept_no_outlook_asks_the_fleet_before_leaving_and_keeps_its_answer() -> None:
    def waiting() -> RequestRecord:
        # Behind the line, 16,000 s beyond the net, no outlook kept (nothing seen when claimed).
        record = make_record(request=deadline(20000))
        record.created_at = iso(NOW - timedelta(seconds=10000))
        record.attempts[0].created_at = iso(NOW - timedelta(seconds=700))
        record.attempts[0].last_checkpoint = [1, 100]
        return record

    observed = Observation(1, job(JobState.PENDING))
    short = Fleet(outlook=SpotOutlook(0.99, 6000.0))  # by now the fleet (its own runs) saw short outages
    stays = decide(waiting(), observed, POLICY, NOW, fleet=short).record
    assert stays.attempts[0].outcome is None and stays.requeue is None
    assert SpotOutlook.from_json(stays.attempts[0].spot_outlook) == short.outlook  # kept: no read next time
    assert short.asked == [("outlook", "us-central1")]
    again = Fleet(outlook=SpotOutlook(0.5, 30000.0))
    decide(stays, observed, POLICY, NOW, fleet=again)
    assert again.asked == []
    # Nothing seen there still, or outages of hours: it leaves, as Uniform Progress does.
    for fleet in (Fleet(), Fleet(outlook=SpotOutlook(0.5, 30000.0))):
        left = decide(waiting(), observed, POLICY, NOW, fleet=fleet).record
        assert left.attempts[0].outcome is AttemptOutcome.SWITCHED_TO_ON_DEMAND
    # Below the safety net no outlook keeps a wait: it leaves without reading the fleet.
    netted = make_record(request=deadline(100))
    netted.attempts[0].created_at = iso(NOW - timedelta(seconds=700))
    unread = Fleet(outlook=SpotOutlook(0.99, 6000.0))
    left = decide(netted, observed, POLICY, NOW, fleet=unread).record
    assert left.attempts[0].outcome is AttemptOutcome.SWITCHED_TO_ON_DEMAND and unread.asked == []


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
    # The rule would leave Spot; a deployment allowing no STANDARD keeps it there, and says so.
    waiting = make_record(request=deadline(100))
    assert deadline_view(waiting, Settings(), NOW)["refused"].startswith("strategy: is STANDARD")
    assert "refused by the policy" in format_request(waiting, Settings(), NOW)
    allowed = Settings(allowed_fallback_strategies=("STANDARD",))
    assert deadline_view(waiting, allowed, NOW)["refused"] is None


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


def loose_deadline_waiting_for_spot():
    """Issue 28, break 5: 17 minutes of work due in 6 hours, its Spot attempt queued for 40
    minutes (past its changeover): Uniform Progress says it is behind its line."""
    record = make_record(
        request={
            "deadline": iso(NOW + timedelta(hours=6) - timedelta(minutes=40)),
            "total_steps": 17 * 60,
            "expected_step_seconds": 1.0,
        }
    )
    record.created_at = record.attempts[0].created_at = iso(NOW - timedelta(minutes=40))
    return record


def test_a_deadline_never_moves_to_standard_before_the_deployments_minimum_of_spot_attempts() -> None:
    allowed = decide(loose_deadline_waiting_for_spot(), Observation(1, job(JobState.QUEUED)), POLICY, NOW)
    assert allowed.record.requeue.strategy == "STANDARD"  # the rule does ask for on-demand here
    minimum = replace(POLICY, min_spot_attempts=3)
    record, lines = loose_deadline_waiting_for_spot(), []
    for _ in range(2):  # an event, then a reconcile pass
        decision = decide(record, Observation(1, job(JobState.QUEUED)), minimum, NOW)
        record, lines = decision.record, lines + decision.effects.lines
    assert record.requeue is None and record.attempts[0].outcome is None and not record.attempts[0].cancel_pending
    [refused] = [line for line in lines if line.event == "deadline_switch_refused"]
    assert "at least 3 come first" in refused.message


def test_a_deadline_switch_asks_the_policy_in_a_deployment_without_standard() -> None:
    # A deadline that slipped past validation (issue 28, break 6) still gets no STANDARD attempt.
    record = make_record(request=deadline(100))
    decision = decide(record, Observation(1, job(JobState.QUEUED)), SPOT_ONLY, NOW)
    assert decision.record.requeue is None and decision.record.attempts[0].outcome is None
    [refused] = [line for line in decision.effects.lines if line.event == "deadline_switch_refused"]
    assert "allowed fallback strategies: none" in refused.message


def test_a_deadline_outranks_max_attempts_only_as_far_as_the_policy_allows() -> None:
    stockout = {"code": 8, "message": "Job failed with STOCKOUT: the Spot VM was preempted 7 times."}
    minimum = replace(POLICY, min_spot_attempts=2)
    for policy in (minimum, SPOT_ONLY):
        record = make_record(request={**deadline(10 * 3600), "max_attempts": 1}, state=JobState.RUNNING)
        decided = decide(record, Observation(1, job(JobState.FAILED, error=stockout)), policy, NOW).record
        assert decided.status is RequestStatus.GAVE_UP and decided.requeue is None
    # Two Spot attempts made: the minimum is met, the deadline's STANDARD attempt follows.
    record = make_record(request={**deadline(10 * 3600), "max_attempts": 2}, state=JobState.RUNNING)
    record.attempts[0].outcome = AttemptOutcome.REQUEUED
    second = Attempt(2, "us-central1", "SPOT", claimed_at=iso(NOW), job=JOB1 + "2", state=JobState.RUNNING)
    record.attempts.append(second)
    failed = job(JobState.FAILED, error=stockout, name=JOB1 + "2")
    assert decide(record, Observation(2, failed), minimum, NOW).record.requeue.strategy == "STANDARD"


def test_the_end_of_a_switched_job_is_what_publishes_its_successor_once() -> None:
    record = decide(make_record(request=deadline(100)), Observation(1, job(JobState.QUEUED)), POLICY, NOW).record
    assert record.attempts[0].ending and record.requeue.attempt == 2
    still = decide(record, Observation(1, job(JobState.CANCELLING, update=200)), POLICY, NOW)
    assert not still.effects.requeue_decided and still.record.attempts[0].ending
    ended = decide(still.record, Observation(1, job(JobState.CANCELLED, update=300)), POLICY, NOW)
    assert ended.effects.requeue_decided and "switched_job_ended" in ended.effects.events
    assert (
        not ended.record.attempts[0].ending
        and ended.record.attempts[0].ended_at == job(JobState.CANCELLED, update=300).end_time
    )
    again = decide(ended.record, Observation(1, job(JobState.CANCELLED, update=300)), POLICY, NOW)
    assert not again.effects.requeue_decided and "switched_job_ended" not in again.effects.events


def test_a_cancelled_job_that_does_not_end_is_flagged_once_since_it_holds_its_successor_back() -> None:
    record = decide(make_record(request=deadline(100)), Observation(1, job(JobState.QUEUED)), POLICY, NOW).record
    record.attempts[0].cancel_sent_at = iso(NOW)
    later = NOW + timedelta(seconds=POLICY.stuck_after_seconds + 1)
    kinds = []
    for when in (NOW + timedelta(seconds=60), later, later):
        decision = decide(record, Observation(1, job(JobState.RUNNING, update=200)), POLICY, when)
        record, kinds = decision.record, kinds + [alert.kind for alert in decision.effects.alerts]
    # Its deadline passed meanwhile, and attempt 2 cannot start to say so (seed 707).
    assert kinds == ["job_stuck", "deadline_missed"] and record.requeue.message_id is None
    assert "waits for it to end" in record.pending_alerts[-2]["message"]


def test_a_deadline_passed_with_all_the_work_committed_but_not_finished_is_missed_once() -> None:
    # Seed 4568: the trainer committed past the declared total, its job ran on past the deadline,
    # failed, and the next attempt waited for Spot. Every step committed is not a request finished.
    record = make_record(request=deadline(30), status=RequestStatus.RUNNING, state=JobState.RUNNING)
    record.attempts[0].started_at = iso(NOW - timedelta(seconds=CHANGEOVER + 1))
    record.attempts[0].last_checkpoint = [0, 2 * STEPS]
    late = NOW + timedelta(seconds=STEPS + 2 * CHANGEOVER)
    # A kit line past the deadline may come from a job that already succeeded in time: its end judges it.
    committed = KitRecord("checkpoint_committed", request_id="req-1", attempt=1, run=0, step=2 * STEPS, seconds=1.0)
    heard = decide(record, Observation(1, None, kit=committed, job_name=JOB1), POLICY, late)
    assert heard.effects.alerts == []
    kinds = []
    for when in (NOW, late, late):  # Vertex says the job runs: no risk before (nothing left), missed after
        decision = decide(record, Observation(1, job(JobState.RUNNING)), POLICY, when)
        record, kinds = decision.record, kinds + [alert.kind for alert in decision.effects.alerts]
    assert kinds == ["deadline_missed"]
    # The same with the work committed by an attempt that ended, its successor waiting for Spot.
    record = make_record(request=deadline(30), status=RequestStatus.RUNNING, state=JobState.FAILED)
    record.attempts[0].outcome, record.attempts[0].last_checkpoint = AttemptOutcome.REQUEUED, [0, STEPS]
    second = Attempt(2, "us-central1", "SPOT", claimed_at=iso(NOW), job=JOB1 + "2", state=JobState.PENDING)
    record.attempts.append(second)
    decision = decide(record, Observation(2, job(JobState.PENDING, name=JOB1 + "2")), POLICY, late)
    assert [alert.kind for alert in decision.effects.alerts] == ["deadline_missed"]


def test_a_deadline_passed_while_a_create_waits_is_missed_once_unless_finished_or_cancelled() -> None:
    """`missed_waiting_for_a_create`: a claim without its job, or a re-queue not yet claimed, past
    the deadline (review s10); nothing before it, nor for a request that finished, was cancelled,
    or was told already, nor while the latest attempt has a job for a read to judge."""
    from shared.deciding.deadline_watch import missed_waiting_for_a_create
    from shared.ledger.records import CancelIntent, Requeue

    past = {**deadline(0), "deadline": iso(NOW - timedelta(seconds=1))}
    claim = make_record(request=past)
    claim.attempts[0].job = None
    alert = missed_waiting_for_a_create(claim, NOW)
    assert alert is not None and (alert.kind, alert.attempt) == ("deadline_missed", 1)
    assert missed_waiting_for_a_create(claim, NOW - timedelta(seconds=2)) is None
    assert missed_waiting_for_a_create(make_record(request=past), NOW) is None  # its job's read says it
    requeued = make_record(request=past)
    requeued.attempts[0].outcome = AttemptOutcome.REQUEUED
    requeued.requeue = Requeue(2, "us-central1", "SPOT", "preemption", iso(NOW))
    assert "attempt 2 waits for its create" in missed_waiting_for_a_create(requeued, NOW).message
    told = make_record(request=past)
    told.attempts[0].job = None
    told.mark("deadline_missed")
    finished = make_record(request=past, status=RequestStatus.FAILED)
    finished.attempts[0].job = None
    cancelled = make_record(request=past)
    cancelled.attempts[0].job = None
    cancelled.cancel = CancelIntent(at=iso(NOW), by="someone")
    assert [missed_waiting_for_a_create(r, NOW) for r in (told, finished, cancelled)] == [None, None, None]


def test_a_claim_whose_create_was_sent_does_not_wait_for_it_until_a_lookup_found_none() -> None:
    """Seed 24: the drainer sent attempt 2's create (noted, `create_sent_at`) and died before it
    recorded the job, which ran and succeeded before the deadline; past the deadline reconcile said
    "attempt 2 waits for its create", a false alarm. A claim whose create was sent does not wait
    for one: its job, if it landed, is looked up after the claim lease and read. Once the lookup
    found none and re-published the claim (after the send), it waits for a create again."""
    from shared.deciding.deadline_watch import missed_waiting_for_a_create

    past = {**deadline(0), "deadline": iso(NOW - timedelta(seconds=1))}
    claim = make_record(request=past)
    claim.attempts[0].job = None
    claim.attempts[0].create_sent_at = iso(NOW - timedelta(minutes=45))

    assert missed_waiting_for_a_create(claim, NOW) is None

    claim.attempts[0].republished_at = iso(NOW - timedelta(minutes=40))
    alert = missed_waiting_for_a_create(claim, NOW)
    assert alert is not None and alert.kind == "deadline_missed"
