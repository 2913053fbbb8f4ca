"""The pure decision (shared/deciding/decisions.py) at its edges: the instants a FAILED job's error
and a stuck job are waited for (exactly at the bound counts), the reasons a failure is told by,
the on-demand attempt a deadline gets once its Spot attempts ran out (and when the deployment
refuses it), an older attempt's late end, a cancel by hand at Vertex, a switched job's end that
publishes its successor, and the policy read from the settings. Every decision is also decided
again, which must change nothing (tests/unit/test_decisions.py's promise)."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from shared.alerts import Alert
from shared.clock import iso, parse_iso
from shared.deciding.decision_policy import DecisionPolicy
from shared.deciding.decisions import Decision, Observation, decide
from shared.deciding.events import patterns_from
from shared.deciding.job_end import ERROR_SETTLE_SECONDS, classify_failure
from shared.deciding.waits import STUCK_STATES
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt, CancelIntent, RequestRecord, Requeue
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.settings import Settings
from tests.support.decide import JOB1, NOW, POLICY, USER_ERROR, at, job, make_record

JOB2 = "projects/p/locations/us-central1/customJobs/222"
STOCKOUT = {"code": 8, "message": "Job failed with STOCKOUT: the Spot VM was preempted 7 times."}
# A FLEX_START job whose capacity did not come in time (the emulator's default, devstack/vertex/flex.py).
FLEX_WAIT_EXPIRED = {
    "code": 8,
    "message": "The resources requested by this FLEX_START job were not available within its maxWaitDuration (3600s).",
}
HOUR = 3600.0
# A deployment that allows on-demand (STANDARD) for a deadline.
ALLOWS_ON_DEMAND = replace(POLICY, allowed_fallback_strategies=("STANDARD",))


def observe(
    record: RequestRecord,
    snapshot: JobSnapshot,
    *,
    attempt: int = 1,
    policy: DecisionPolicy = POLICY,
    now: datetime = NOW,
) -> Decision:
    """decide() on a copy, as the ledger does; and prove a redelivery finds nothing to do."""
    observation = Observation(attempt, snapshot)
    decision = decide(copy.deepcopy(record), observation, policy, now)
    again = decide(copy.deepcopy(decision.record), observation, policy, now)
    assert again.record == decision.record, "deciding twice changed the record twice"
    assert not again.effects.lines and not again.effects.alerts and not again.effects.requeue_decided
    return decision


def failed(*, ended: datetime, error: dict | None = None, end_time: bool = True) -> JobSnapshot:
    return JobSnapshot(
        name=JOB1,
        state=JobState.FAILED,
        error=error,
        create_time=at(1),
        start_time=at(10),
        end_time=iso(ended) if end_time else None,
        update_time=iso(ended),
    )


# ---- a FAILED job's error ---------------------------------------------------------------------


def test_a_failed_jobs_missing_error_is_waited_for_until_exactly_the_settle_time() -> None:
    ended = NOW - timedelta(seconds=ERROR_SETTLE_SECONDS - 1)
    waiting = observe(make_record(), failed(ended=ended))
    assert waiting.waiting == f"job {JOB1} failed and its error is not published yet"
    assert waiting.record.attempts[0].outcome is None
    at_the_bound = observe(make_record(), failed(ended=NOW - timedelta(seconds=ERROR_SETTLE_SECONDS)))
    assert at_the_bound.waiting is None and at_the_bound.record.status == RequestStatus.FAILED


def test_the_settle_time_counts_from_the_last_update_when_vertex_gives_no_end_time() -> None:
    snapshot = failed(ended=NOW - timedelta(seconds=ERROR_SETTLE_SECONDS), end_time=False)
    decision = observe(make_record(), snapshot)
    assert decision.waiting is None and decision.record.status == RequestStatus.FAILED
    assert decision.record.attempts[0].ended_at == iso(NOW)  # no end time to keep: the decision's


def test_an_ordinary_failure_says_its_message_or_code_or_that_none_came() -> None:
    ended = NOW - timedelta(hours=1)

    def reason(error: dict) -> str:
        [alert] = observe(make_record(), failed(ended=ended, error=error)).effects.alerts
        return alert.message

    assert reason(USER_ERROR) == f"attempt 1 of req-1 failed: {USER_ERROR['message']}"
    assert reason({"code": 13}) == "attempt 1 of req-1 failed: error code 13"
    assert reason({}) == "attempt 1 of req-1 failed: no error reported"


def test_a_failure_the_kit_saw_preempted_says_so_unless_the_error_says_it_already() -> None:
    patterns = patterns_from(Settings())
    told = classify_failure(JobSnapshot(JOB1, JobState.FAILED, USER_ERROR), patterns, kit_saw_preemption=True)
    assert (told.capacity, told.stockout) == (True, False)
    assert told.reason == f"{USER_ERROR['message']}; the trainer kit saw its last run preempted"
    by_error = classify_failure(JobSnapshot(JOB1, JobState.FAILED, STOCKOUT), patterns, kit_saw_preemption=True)
    assert by_error.reason == STOCKOUT["message"]
    expired = classify_failure(JobSnapshot(JOB1, JobState.EXPIRED, None), patterns, kit_saw_preemption=True)
    assert (expired.capacity, expired.reason) == (False, "the job ran past its timeout")


def test_an_attempt_ended_by_preemption_with_none_counted_has_an_unknown_count() -> None:
    ended = NOW - timedelta(hours=1)
    unknown = observe(make_record(state=JobState.RUNNING), failed(ended=ended, error=STOCKOUT)).record.attempts[0]
    assert (unknown.preemptions, unknown.preemptions_unknown) == (0, True)
    counted = make_record(state=JobState.RUNNING)
    counted.attempts[0].preemptions = 2
    known = observe(counted, failed(ended=ended, error=STOCKOUT)).record.attempts[0]
    assert (known.preemptions, known.preemptions_unknown) == (2, False)
    plain = observe(make_record(state=JobState.RUNNING), failed(ended=ended, error=USER_ERROR)).record.attempts[0]
    assert plain.preemptions_unknown is False


def test_a_flex_start_attempt_whose_wait_ran_out_is_requeued_and_never_counted_preempted() -> None:
    """A FLEX_START job waits for capacity, then runs without preemption (docs/local.md): one whose
    maxWaitDuration ran out (a capacity error, RESOURCE_EXHAUSTED) is re-queued, and no preemption,
    not even "at least one", is counted for it (the simulator's `flex_start_never_preempted`)."""
    ended = NOW - timedelta(hours=1)
    flex_start = Attempt(
        1, "us-central1", "FLEX_START", claimed_at=at(0), job=JOB1, state=JobState.PENDING, created_at=at(1)
    )
    record = make_record(
        request={"fallback": {"strategy": "FLEX_START", "after_spot_attempts": 0}}, attempts=[flex_start]
    )
    never_ran = JobSnapshot(
        name=JOB1,
        state=JobState.FAILED,
        error=FLEX_WAIT_EXPIRED,
        create_time=at(1),
        end_time=iso(ended),
        update_time=iso(ended),
    )
    decision = observe(record, never_ran)
    attempt = decision.record.attempts[0]
    assert attempt.outcome is AttemptOutcome.REQUEUED
    assert decision.record.requeue is not None and decision.record.requeue.strategy == "FLEX_START"
    assert (attempt.preemptions, attempt.preemptions_unknown) == (0, False)
    # and what it says names the wait, not a preemption it never had
    [line] = [line for line in decision.effects.lines if line.fields.get("event") == "requeue"]
    assert "FLEX_START wait ran out" in line.message and "preemption" not in line.message


# ---- stuck jobs ---------------------------------------------------------------------------------


def waiting_since(state: str, seconds: float) -> tuple[RequestRecord, JobSnapshot]:
    """Attempt 1 in `state` for `seconds`, and a fresh read of it in the same state."""
    record = make_record(state=state)
    since = NOW - timedelta(seconds=seconds)
    record.attempts[0].state_changed_at = iso(since)
    snapshot = JobSnapshot(JOB1, state, None, create_time=iso(since), update_time=iso(since))
    return record, snapshot


@pytest.mark.parametrize("state", sorted(STUCK_STATES))
def test_a_job_in_a_waiting_state_is_stuck_at_exactly_the_threshold(state: str) -> None:
    policy = replace(POLICY, stuck_after_seconds=HOUR)
    record, snapshot = waiting_since(state, HOUR - 1)
    assert observe(record, snapshot, policy=policy).effects.alerts == []
    record, snapshot = waiting_since(state, HOUR)
    decision = observe(record, snapshot, policy=policy)
    [alert] = decision.effects.alerts
    assert (alert.kind, alert.details["state"], alert.details["stuck_seconds"]) == ("job_stuck", state, 3600)
    assert alert.details["after_cancel"] is False  # the other job_stuck, with a marker of its own (seed 1618)
    assert alert.message == f"attempt 1 of req-1 has waited 3600 s since {iso(NOW - timedelta(hours=1))}, now {state}"
    assert decision.effects.events == ("job_stuck",)
    assert decision.record.pending_alerts == [alert.to_json()]


def test_one_wait_through_queued_then_pending_is_stuck_by_its_whole_length() -> None:
    """A wait is every waiting state since the job last was not waiting (issue 43): 5 h QUEUED and
    1.5 h PENDING are one wait of 6.5 h, past a 6 h threshold, though PENDING alone is not."""
    policy = replace(POLICY, stuck_after_seconds=6 * HOUR)
    created = NOW - timedelta(hours=6.5)
    record = make_record(state=None)
    queued = JobSnapshot(JOB1, JobState.QUEUED, None, create_time=iso(created), update_time=iso(created))
    seen_queued = observe(record, queued, policy=policy, now=created + timedelta(hours=1))
    assert seen_queued.effects.alerts == []
    pending = replace(queued, state=JobState.PENDING, update_time=iso(created + timedelta(hours=5)))
    [alert] = observe(seen_queued.record, pending, policy=policy).effects.alerts
    assert (alert.kind, alert.details["state"], alert.details["stuck_seconds"]) == (
        "job_stuck",
        JobState.PENDING,
        23400,
    )
    assert alert.details["wait_began_at"] == iso(created)


def test_one_wait_through_queued_then_pending_is_alerted_once() -> None:
    """7 h QUEUED then 7 h PENDING: one wait past the threshold, one `job_stuck` (issue 43)."""
    policy = replace(POLICY, stuck_after_seconds=6 * HOUR)
    created = NOW - timedelta(hours=14)
    queued = JobSnapshot(JOB1, JobState.QUEUED, None, create_time=iso(created), update_time=iso(created))
    stuck_queued = observe(make_record(state=None), queued, policy=policy, now=created + timedelta(hours=6.5))
    assert [a.details["state"] for a in stuck_queued.effects.alerts] == [JobState.QUEUED]
    pending = replace(queued, state=JobState.PENDING, update_time=iso(created + timedelta(hours=7)))
    assert observe(stuck_queued.record, pending, policy=policy).effects.alerts == []


def test_a_wait_after_a_run_counts_from_the_runs_end_with_an_alert_of_its_own() -> None:
    """A job Vertex restarts waits again: a new wait, from the end of its RUNNING, alerted once more."""
    policy = replace(POLICY, stuck_after_seconds=HOUR)
    created = NOW - timedelta(hours=5)
    queued = JobSnapshot(JOB1, JobState.QUEUED, None, create_time=iso(created), update_time=iso(created))
    first_wait = observe(make_record(state=None), queued, policy=policy, now=created + timedelta(hours=2))
    assert len(first_wait.effects.alerts) == 1
    ran = created + timedelta(hours=2, minutes=5)
    running = replace(queued, state=JobState.RUNNING, start_time=iso(ran), update_time=iso(ran))
    seen_running = observe(first_wait.record, running, policy=policy, now=ran)
    assert seen_running.record.attempts[0].wait_began_at is None
    back = ran + timedelta(hours=1)
    pending = replace(running, state=JobState.PENDING, update_time=iso(back))
    assert (
        observe(seen_running.record, pending, policy=policy, now=back + timedelta(seconds=HOUR - 1)).effects.alerts
        == []
    )
    [alert] = observe(seen_running.record, pending, policy=policy, now=back + timedelta(seconds=HOUR)).effects.alerts
    assert (alert.details["wait_began_at"], alert.details["stuck_seconds"]) == (iso(back), 3600)


def test_running_and_terminal_states_are_never_stuck() -> None:
    assert JobState.RUNNING not in STUCK_STATES
    assert not STUCK_STATES & set(JobState.TERMINAL)


def test_a_stuck_attempt_of_an_older_job_is_not_the_requests_to_flag() -> None:
    policy = replace(POLICY, stuck_after_seconds=HOUR)
    record, snapshot = waiting_since(JobState.PENDING, 2 * HOUR)
    second = Attempt(2, "us-central1", "SPOT", claimed_at=at(300), job=JOB2, state=JobState.RUNNING)
    record.attempts.append(second)
    assert observe(record, snapshot, policy=policy).effects.alerts == []


def switched(*, sent_ago: float | None, requeue_published: bool = False) -> RequestRecord:
    """Attempt 1 switched to on-demand: its cancel decided (and sent `sent_ago` seconds ago), its
    job still RUNNING, attempt 2 decided and held until the job ends."""
    record = make_record(status=RequestStatus.REQUEUED, state=JobState.RUNNING)
    attempt = record.attempts[0]
    attempt.state_changed_at = at(100)
    attempt.outcome = AttemptOutcome.SWITCHED_TO_ON_DEMAND
    attempt.cancel_decided_at = iso(NOW - timedelta(seconds=(sent_ago or 0) + 5))
    attempt.cancel_sent_at = None if sent_ago is None else iso(NOW - timedelta(seconds=sent_ago))
    record.requeue = Requeue(
        2, "us-central1", "STANDARD", "deadline", decided_at=attempt.cancel_decided_at,
        message_id="m-1" if requeue_published else None,
    )  # fmt: skip
    return record


def test_a_job_its_cancel_does_not_end_is_stuck_from_the_cancel_sent_at_the_threshold() -> None:
    policy = replace(POLICY, stuck_after_seconds=HOUR)
    running = job(JobState.RUNNING, update=100)
    assert observe(switched(sent_ago=None), running, policy=policy).effects.alerts == []  # not sent yet
    assert observe(switched(sent_ago=HOUR - 1), running, policy=policy).effects.alerts == []
    decision = observe(switched(sent_ago=HOUR), running, policy=policy)
    [alert] = decision.effects.alerts
    assert alert.kind == "job_stuck"
    assert alert.message == (
        f"attempt 1 of req-1 is still {JobState.RUNNING} 3600 s after its cancel; attempt 2 waits for it to end"
    )
    # Once per attempt: a later read past the threshold alerts no more.
    assert observe(decision.record, running, policy=policy, now=NOW + timedelta(hours=1)).effects.alerts == []


def test_a_job_whose_cancel_vertex_refuses_is_stuck_from_the_cancels_decision_at_the_threshold() -> None:
    """Seed 707: a move's cancel refused for good (a 403 on every pass) is never sent, and attempt 2
    waits for the job's end for good: counted from the decision, it is stuck all the same."""
    policy = replace(POLICY, stuck_after_seconds=HOUR)
    pending = job(JobState.PENDING, update=100)

    def refused(decided_ago: float) -> RequestRecord:
        record = switched(sent_ago=None)
        record.attempts[0].state = JobState.PENDING
        record.attempts[0].outcome = AttemptOutcome.MOVED
        record.attempts[0].cancel_decided_at = iso(NOW - timedelta(seconds=decided_ago))
        return record

    assert observe(refused(HOUR - 1), pending, policy=policy).effects.alerts == []
    decision = observe(refused(HOUR), pending, policy=policy)
    [alert] = decision.effects.alerts
    assert (alert.kind, alert.details["stuck_seconds"], alert.details["after_cancel"]) == ("job_stuck", 3600, True)
    assert alert.message == (
        f"attempt 1 of req-1 is still {JobState.PENDING} 3600 s after its cancel was decided, which was never "
        "sent (reconcile logs why); attempt 2 waits for it to end"
    )
    assert observe(decision.record, pending, policy=policy, now=NOW + timedelta(hours=1)).effects.alerts == []


def test_a_wait_first_read_at_its_end_past_the_threshold_is_stuck() -> None:
    """Seed 9505: a claim whose job was indexed and never recorded (its delivery died between the
    two; the look-up by labels refused for good) is adopted 7 h later, when its first log line
    comes, recorded PENDING, and its request's pending cancel sent at once. The first read a
    decision takes in is CANCELLING: the wait it ended, from the create, lasted 7 h."""
    policy = replace(POLICY, stuck_after_seconds=6 * HOUR)

    def adopted_and_cancelled(waited: float) -> Decision:
        created = NOW - timedelta(seconds=waited)
        record = make_record(state=JobState.PENDING)
        record.cancel = CancelIntent(by="ops@example.com", at=iso(created + timedelta(minutes=20)))
        record.attempts[0].created_at = iso(created)
        record.attempts[0].cancel_decided_at = record.attempts[0].cancel_sent_at = iso(NOW)
        cancelling = JobSnapshot(JOB1, JobState.CANCELLING, None, create_time=iso(created), update_time=iso(NOW))
        return observe(record, cancelling, policy=policy)

    [alert] = adopted_and_cancelled(7 * HOUR).effects.alerts
    assert (alert.kind, alert.details["wait_began_at"], alert.details["stuck_seconds"]) == (
        "job_stuck",
        iso(NOW - timedelta(hours=7)),
        7 * HOUR,
    )
    assert (alert.details["state"], alert.details["after_cancel"]) == (JobState.PENDING, False)  # the wait's
    assert adopted_and_cancelled(6 * HOUR - 1).effects.alerts == []


def test_a_first_wait_first_read_ended_is_judged_to_the_job_s_start_not_its_end() -> None:
    """Seed 11916: a deadline switch's cancel was never sent (a 403 for good), so the switched
    attempt's job waited on from its create, PENDING, and first ran 6 h less 94 s after it. The
    reads of it RUNNING were not taken in (its attempt is settled: only its end is), so the read
    that ended the wait in the record was the job's end, 5 min into its run: the wait ended at the
    job's start time, its first RUNNING (custom_job.proto), not at that read's update time."""
    policy = replace(POLICY, stuck_after_seconds=6 * HOUR)

    def switched_job_ended(waited: float) -> Decision:
        record = switched(sent_ago=None)
        attempt = record.attempts[0]
        created = NOW - timedelta(seconds=waited + 300)
        attempt.created_at = iso(created)
        attempt.state, attempt.state_changed_at = JobState.PENDING, iso(created + timedelta(seconds=90))
        attempt.wait_began_at = iso(created)
        succeeded = JobSnapshot(
            JOB1,
            JobState.SUCCEEDED,
            None,
            create_time=iso(created),
            start_time=iso(created + timedelta(seconds=waited)),
            end_time=iso(NOW),
            update_time=iso(NOW),
        )
        return observe(record, succeeded, policy=policy)

    assert switched_job_ended(6 * HOUR - 94).effects.alerts == []
    [alert] = switched_job_ended(6 * HOUR + 1).effects.alerts
    assert (alert.kind, alert.details["stuck_seconds"]) == ("job_stuck", 6 * HOUR + 1)


def switch_to_on_demand(record: RequestRecord, decided: datetime, *, sent: datetime | None = None) -> None:
    """Attempt 1 switched by the deadline rule at `decided`: its cancel decided (sent at `sent`, or
    never: a 403 for good), attempt 2 decided and held until its job ends."""
    attempt = record.attempts[0]
    record.status = RequestStatus.REQUEUED
    attempt.outcome = AttemptOutcome.SWITCHED_TO_ON_DEMAND
    attempt.cancel_decided_at = iso(decided)
    attempt.cancel_sent_at = iso(sent) if sent else None
    record.requeue = Requeue(2, "us-central1", "STANDARD", "deadline", decided_at=iso(decided))


def alerts_along(
    reads: list[JobSnapshot], policy: DecisionPolicy, switch_before: int, sent: timedelta | None = None
) -> list[Alert]:
    """The alerts of reads of attempt 1's job taken each 30 s after its update, the attempt
    switched 5 min before read `switch_before` (its cancel sent `sent` after the decision)."""
    record, alerts = make_record(state=None), []
    for i, snapshot in enumerate(reads):
        updated = parse_iso(str(snapshot.update_time))
        if i == switch_before:
            decided = updated - timedelta(minutes=5)
            switch_to_on_demand(record, decided, sent=decided + sent if sent is not None else None)
        decision = observe(record, snapshot, policy=policy, now=updated + timedelta(seconds=30))
        record = decision.record
        alerts += decision.effects.alerts
    return alerts


@pytest.mark.parametrize("switch_before", [1, 3])
def test_a_switched_jobs_restart_wait_ends_at_the_run_that_ended_it_not_at_the_jobs_end(switch_before: int) -> None:
    """Issue 43, after seed 11916: a switched attempt's outcome is set, and its reads were taken in
    only at its job's end (`is_fresh`). Its job waited PENDING 5 h 50 min, ran an hour, was
    preempted and waited PENDING 10 min, then ran 7 h and succeeded: no wait lasted the 6 h
    threshold. Switched in its restart wait, the RUNNING read that ended that wait was dropped and
    the wait counted to the job's end, 7 h 10 min; its reads are now taken in for its waits."""
    policy = replace(POLICY, stuck_after_seconds=6 * HOUR)
    created = NOW - timedelta(hours=14)
    ran = created + timedelta(hours=5, minutes=50)

    def read(state: str, after: timedelta) -> JobSnapshot:
        moment = created + after
        started = iso(ran) if moment >= ran else None
        ended = iso(moment) if state in JobState.TERMINAL else None
        return JobSnapshot(JOB1, state, None, create_time=iso(created), start_time=started, end_time=ended,
                           update_time=iso(moment))  # fmt: skip

    reads = [
        read(JobState.PENDING, timedelta(0)),
        read(JobState.RUNNING, timedelta(hours=5, minutes=50)),
        read(JobState.PENDING, timedelta(hours=6, minutes=50)),  # preempted: Vertex restarts it
        read(JobState.RUNNING, timedelta(hours=7)),
        read(JobState.SUCCEEDED, timedelta(hours=14)),
    ]
    assert alerts_along(reads, policy, switch_before) == []


def test_a_switched_jobs_restart_wait_past_the_threshold_is_alerted_at_the_run_that_ended_it() -> None:
    """The converse: a switched attempt's restart wait of 6 h is alerted, once, by the read of the
    run that ended it, to that run's start."""
    policy = replace(POLICY, stuck_after_seconds=6 * HOUR)
    created = NOW - timedelta(hours=20)
    ran, preempted, back = (created + timedelta(hours=h) for h in (1, 2, 8))
    reads = [
        JobSnapshot(JOB1, JobState.PENDING, None, create_time=iso(created), update_time=iso(created)),
        JobSnapshot(JOB1, JobState.RUNNING, None, create_time=iso(created), start_time=iso(ran), update_time=iso(ran)),
        JobSnapshot(JOB1, JobState.PENDING, None, create_time=iso(created), start_time=iso(ran),
                    update_time=iso(preempted)),
        JobSnapshot(JOB1, JobState.RUNNING, None, create_time=iso(created), start_time=iso(ran), update_time=iso(back)),
        JobSnapshot(JOB1, JobState.SUCCEEDED, None, create_time=iso(created), start_time=iso(ran),
                    end_time=iso(NOW), update_time=iso(NOW)),
    ]  # fmt: skip
    [alert] = [a for a in alerts_along(reads, policy, switch_before=3) if not a.details["after_cancel"]]
    assert (alert.kind, alert.details["wait_began_at"], alert.details["stuck_seconds"]) == (
        "job_stuck",
        iso(preempted),
        6 * HOUR,
    )
    assert alert.time == iso(back + timedelta(seconds=30))


def test_a_switched_jobs_wait_ends_at_its_cancels_cancelling_not_at_its_end() -> None:
    """Issue 43: a switched job that never ran waited PENDING 5 h 55 min until the switch's own
    cancel made it CANCELLING, and was CANCELLED 15 min later. The CANCELLING read ended the wait;
    it was dropped (the attempt is settled), and the wait counted to the job's end, 6 h 10 min."""
    policy = replace(POLICY, stuck_after_seconds=6 * HOUR)
    created = NOW - timedelta(hours=7)
    cancelling, cancelled = created + timedelta(hours=5, minutes=55), created + timedelta(hours=6, minutes=10)
    reads = [
        JobSnapshot(JOB1, JobState.PENDING, None, create_time=iso(created), update_time=iso(created)),
        JobSnapshot(JOB1, JobState.CANCELLING, None, create_time=iso(created), update_time=iso(cancelling)),
        JobSnapshot(JOB1, JobState.CANCELLED, None, create_time=iso(created), end_time=iso(cancelled),
                    update_time=iso(cancelled)),
    ]  # fmt: skip
    assert alerts_along(reads, policy, switch_before=1, sent=timedelta(seconds=10)) == []


def test_a_deadline_that_passes_while_a_hand_over_waits_for_its_cancelled_job_is_missed_once() -> None:
    """Seed 707: attempt 2, whose deadline watch would say it, cannot start before the job its
    hand-over cancelled ends; the observation of that job says it instead."""
    running = job(JobState.RUNNING, update=50)  # as the ledger holds it: no news

    def handing_over(deadline: datetime) -> RequestRecord:
        record = switched(sent_ago=60)
        record.request["deadline"] = iso(deadline)
        return record

    assert observe(handing_over(NOW + timedelta(seconds=1)), running).effects.alerts == []
    decision = observe(handing_over(NOW), running)
    [alert] = decision.effects.alerts
    assert (alert.kind, alert.details["deadline"]) == ("deadline_missed", iso(NOW))
    assert alert.message == (
        f"req-1 missed its deadline {iso(NOW)}: attempt 1's job has not ended since its cancel, "
        "and attempt 2 waits for it"
    )
    assert decision.effects.events == ("deadline_missed",)
    assert observe(decision.record, running, now=NOW + timedelta(hours=1)).effects.alerts == []  # once
    cancelled = handing_over(NOW - timedelta(hours=1))
    cancelled.cancel = CancelIntent(by="someone", at=at(0), reason="not needed")
    assert observe(cancelled, running).effects.alerts == []  # a cancelled request owes no deadline


def test_a_stale_read_of_a_job_its_cancel_does_not_end_still_flags_it() -> None:
    policy = replace(POLICY, stuck_after_seconds=HOUR)
    stale = job(JobState.RUNNING, update=50)  # older than the state the ledger holds
    [alert] = observe(switched(sent_ago=2 * HOUR), stale, policy=policy).effects.alerts
    assert alert.kind == "job_stuck"


# ---- a switched job's end -----------------------------------------------------------------------


def test_the_end_of_a_switched_job_publishes_its_successor_once() -> None:
    decision = observe(switched(sent_ago=60), job(JobState.CANCELLED, update=200))
    assert decision.effects.requeue_decided
    [line] = decision.effects.lines
    assert line.fields["event"] == "switched_job_ended"
    assert (line.fields["state"], line.fields["next_attempt"]) == (JobState.CANCELLED, 2)
    attempt = decision.record.attempts[0]
    assert attempt.ended_at == at(200) and not attempt.ending
    assert attempt.outcome == AttemptOutcome.SWITCHED_TO_ON_DEMAND  # not concluded again


def test_the_end_of_a_switched_job_whose_successor_was_published_already_publishes_nothing() -> None:
    decision = observe(switched(sent_ago=60, requeue_published=True), job(JobState.CANCELLED, update=200))
    assert not decision.effects.requeue_decided and decision.effects.lines == []
    assert decision.record.attempts[0].ended_at == at(200)


# ---- the last Spot attempt of a deadline --------------------------------------------------------


def last_spot_attempt(**request: object) -> RequestRecord:
    return make_record(
        status=RequestStatus.RUNNING,
        state=JobState.RUNNING,
        request={"max_attempts": 1, "deadline": iso(NOW + timedelta(days=1)), **request},
    )


def test_a_deadline_goes_on_to_on_demand_once_its_spot_attempts_ran_out() -> None:
    decision = observe(last_spot_attempt(), failed(ended=NOW, error=STOCKOUT), policy=ALLOWS_ON_DEMAND)
    record = decision.record
    assert record.status == RequestStatus.REQUEUED and record.attempts[0].outcome == AttemptOutcome.REQUEUED
    assert record.requeue is not None and (record.requeue.attempt, record.requeue.strategy) == (2, "STANDARD")
    [line] = decision.effects.lines
    assert (line.fields["event"], line.fields["next_strategy"], line.fields["fallback"]) == (
        "requeue",
        "STANDARD",
        True,
    )
    assert decision.effects.alerts == []


def test_a_deadline_gives_up_where_the_deployment_allows_no_on_demand() -> None:
    decision = observe(last_spot_attempt(), failed(ended=NOW, error=STOCKOUT))  # no fallback allowed
    assert decision.record.status == RequestStatus.GAVE_UP
    [alert] = decision.effects.alerts
    assert alert.kind == "attempts_exhausted"


def test_a_request_without_a_deadline_gives_up_on_its_last_attempt_whatever_the_deployment_allows() -> None:
    decision = observe(last_spot_attempt(deadline=None), failed(ended=NOW, error=STOCKOUT), policy=ALLOWS_ON_DEMAND)
    assert decision.record.status == RequestStatus.GAVE_UP


def test_an_on_demand_attempt_of_a_deadline_that_ends_by_preemption_gives_up_at_max_attempts() -> None:
    record = last_spot_attempt()
    record.attempts[0].strategy = "STANDARD"
    decision = observe(record, failed(ended=NOW, error=STOCKOUT), policy=ALLOWS_ON_DEMAND)
    assert decision.record.status == RequestStatus.GAVE_UP


def test_giving_up_names_each_attempts_preemptions_as_people_read_them() -> None:
    first = Attempt(1, "us-central1", "SPOT", claimed_at=at(0), job=JOB1, state=JobState.RUNNING, preemptions=3)
    first.outcome = AttemptOutcome.REQUEUED
    second = Attempt(2, "us-central1", "SPOT", claimed_at=at(100), job=JOB2, state=JobState.RUNNING)
    record = make_record(status=RequestStatus.RUNNING, attempts=[first, second], request={"max_attempts": 2})
    decision = observe(record, replace(failed(ended=NOW, error=STOCKOUT), name=JOB2), attempt=2)
    [alert] = decision.effects.alerts
    assert alert.details["preemptions"] == ["3", "≥1"]
    assert alert.details["max_attempts"] == 2
    assert alert.message.startswith("req-1 gave up: attempt 2 of 2 ended by preemption (")
    assert decision.record.attempts[1].outcome == AttemptOutcome.GAVE_UP


def test_a_requeue_stays_in_place_and_on_spot_unless_told_otherwise() -> None:
    decision = observe(make_record(state=JobState.RUNNING), failed(ended=NOW, error=STOCKOUT))
    [line] = decision.effects.lines
    assert (line.fields["failover"], line.fields["fallback"], line.fields["not_before"]) == (False, False, None)
    assert line.fields["reason"] == STOCKOUT["message"]
    assert line.severity == "WARNING"


# ---- an older attempt, a finished request --------------------------------------------------------


def test_an_older_attempts_late_ordinary_failure_is_a_failed_attempt() -> None:
    first = Attempt(1, "us-central1", "SPOT", claimed_at=at(0), job=JOB1, state=JobState.RUNNING)
    second = Attempt(2, "us-central1", "SPOT", claimed_at=at(300), job=JOB2, state=JobState.RUNNING)
    record = make_record(status=RequestStatus.RUNNING, attempts=[first, second])
    decision = observe(record, failed(ended=NOW, error=USER_ERROR))
    assert decision.record.attempts[0].outcome == AttemptOutcome.FAILED
    assert decision.record.status == RequestStatus.RUNNING and decision.effects.alerts == []


def test_a_finished_requests_last_attempt_ending_by_preemption_is_failed_not_requeued() -> None:
    record = make_record(status=RequestStatus.FAILED, state=JobState.RUNNING)
    decision = observe(record, failed(ended=NOW, error=STOCKOUT))
    assert decision.record.attempts[0].outcome == AttemptOutcome.FAILED
    assert decision.record.status == RequestStatus.FAILED and not decision.effects.requeue_decided


def test_an_older_attempts_success_does_not_finish_the_request() -> None:
    first = Attempt(1, "us-central1", "SPOT", claimed_at=at(0), job=JOB1, state=JobState.RUNNING)
    second = Attempt(2, "us-central1", "SPOT", claimed_at=at(300), job=JOB2, state=JobState.RUNNING)
    record = make_record(status=RequestStatus.RUNNING, attempts=[first, second])
    decision = observe(record, job(JobState.SUCCEEDED, update=400))
    assert decision.record.attempts[0].outcome == AttemptOutcome.SUCCEEDED
    assert decision.record.status == RequestStatus.RUNNING
    assert not decision.effects.prune_requested and decision.record.prune_requested_at is None


def test_a_success_after_a_prune_was_requested_requests_none_again() -> None:
    record = make_record(state=JobState.RUNNING)
    record.prune_requested_at = at(0)
    decision = observe(record, job(JobState.SUCCEEDED, update=500))
    assert decision.record.status == RequestStatus.SUCCEEDED
    assert not decision.effects.prune_requested and not decision.record.prune_pending


# ---- reads ------------------------------------------------------------------------------------


def test_a_read_as_new_as_the_ledgers_is_fresh_an_older_one_is_not() -> None:
    record = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    record.attempts[0].state_changed_at = at(100)
    same_instant = observe(record, job(JobState.PENDING, update=100))
    assert same_instant.record.attempts[0].state == JobState.PENDING
    older = observe(record, job(JobState.PENDING, update=99))
    assert older.record == record


def test_a_live_read_of_an_attempt_already_concluded_changes_nothing() -> None:
    record = make_record(status=RequestStatus.RUNNING, state=JobState.FAILED)
    record.attempts[0].outcome = AttemptOutcome.REQUEUED
    decision = observe(record, job(JobState.RUNNING, update=10_000))
    assert decision.record == record and decision.effects.lines == []


def test_a_read_without_an_update_time_is_stamped_now_and_its_start_kept_once() -> None:
    record = make_record()
    snapshot = JobSnapshot(JOB1, JobState.RUNNING, None, create_time=at(1), start_time=at(10))
    decision = observe(record, snapshot)
    attempt = decision.record.attempts[0]
    assert (attempt.state, attempt.state_changed_at, attempt.started_at) == (JobState.RUNNING, iso(NOW), at(10))
    restarted = replace(snapshot, start_time=at(20), update_time=at(30))
    assert observe(decision.record, restarted).record.attempts[0].started_at == at(10)


def test_a_running_job_of_a_request_running_already_or_finished_leaves_its_status() -> None:
    running = make_record(status=RequestStatus.RUNNING, state=JobState.PENDING)
    assert observe(running, job(JobState.RUNNING)).record.status == RequestStatus.RUNNING
    done = make_record(status=RequestStatus.CANCELLED, state=JobState.PENDING)
    assert observe(done, job(JobState.RUNNING)).record.status == RequestStatus.CANCELLED


# ---- cancels ----------------------------------------------------------------------------------


def test_a_cancel_by_hand_at_vertex_becomes_the_requests_cancel() -> None:
    decision = observe(make_record(state=JobState.RUNNING), job(JobState.CANCELLED, update=500))
    record = decision.record
    assert record.status == RequestStatus.CANCELLED and record.finished_at == iso(NOW)
    assert record.cancel is not None and record.cancel.source == "vertex"
    assert record.attempts[0].outcome == AttemptOutcome.CANCELLED
    [line] = decision.effects.lines
    assert line.fields["event"] == "job_cancelled" and line.severity == "INFO"


def test_a_cancelled_request_ends_when_its_last_live_job_ends() -> None:
    first = Attempt(1, "us-central1", "SPOT", claimed_at=at(0), job=JOB1, state=JobState.RUNNING)
    second = Attempt(2, "us-central1", "SPOT", claimed_at=at(300), job=JOB2, state=JobState.RUNNING)
    record = make_record(status=RequestStatus.RUNNING, attempts=[first, second])
    record.cancel = CancelIntent(by="ops@example.com", at=at(400))
    latest_ends = observe(record, replace(job(JobState.CANCELLED, update=500), name=JOB2), attempt=2)
    assert latest_ends.record.attempts[1].outcome == AttemptOutcome.CANCELLED
    assert latest_ends.record.status == RequestStatus.RUNNING  # attempt 1's job still runs
    assert latest_ends.effects.lines == []
    older_ends = observe(latest_ends.record, failed(ended=NOW, error=STOCKOUT))
    assert older_ends.record.attempts[0].outcome == AttemptOutcome.CANCELLED
    assert older_ends.record.status == RequestStatus.CANCELLED
    [line] = older_ends.effects.lines
    assert (line.fields["event"], line.fields["attempt"]) == ("request_cancelled", 2)
    assert line.message == "req-1 is cancelled: none of its jobs runs"


# ---- the policy ---------------------------------------------------------------------------------


def test_the_policy_is_the_deployments_settings() -> None:
    settings = Settings.from_env(
        {
            "SPOTJOBS_PREEMPTION_STORM_THRESHOLD": "7",
            "SPOTJOBS_REQUEUE_DELAY_SECONDS": "11",
            "SPOTJOBS_DEFAULT_MAX_ATTEMPTS": "5",
            "SPOTJOBS_STUCK_AFTER_SECONDS": "1234",
            "SPOTJOBS_KIT_LINES_SETTLE_SECONDS": "77",
            "SPOTJOBS_CHANGEOVER_PRIOR_SECONDS": "999",
            "SPOTJOBS_RECONCILE_INTERVAL_SECONDS": "123",
            "SPOTJOBS_CHECKPOINT_PRIOR_SECONDS": "456",
            "SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD",
            "SPOTJOBS_MIN_SPOT_ATTEMPTS": "2",
        }
    )
    policy = DecisionPolicy.from_settings(settings)
    assert (
        policy.storm_threshold,
        policy.requeue_delay_seconds,
        policy.default_max_attempts,
        policy.stuck_after_seconds,
        policy.kit_lines_settle_seconds,
        policy.changeover_prior_seconds,
        policy.reconcile_interval_seconds,
        policy.checkpoint_prior_seconds,
        policy.allowed_fallback_strategies,
        policy.min_spot_attempts,
    ) == (7, 11.0, 5, 1234.0, 77.0, 999.0, 123.0, 456.0, ("STANDARD",), 2)
    record = make_record()
    # The minimum of Spot attempts: attempt 2 follows one Spot attempt, attempt 3 two.
    assert policy.refuses("STANDARD", record, 2) is not None
    record.attempts.append(Attempt(2, "us-central1", "SPOT", claimed_at=at(300)))
    assert policy.refuses("STANDARD", record, 3) is None


# ---- more edges ---------------------------------------------------------------------------------


def test_an_observation_of_an_attempt_the_record_never_claimed_waits() -> None:
    decision = observe(make_record(), job(JobState.RUNNING), attempt=5)
    assert decision.waiting == "attempt 5 has no job recorded yet"


def test_a_requeue_delay_of_a_second_still_delays() -> None:
    policy = replace(POLICY, requeue_delay_seconds=1)
    requeue = observe(make_record(), failed(ended=NOW, error=STOCKOUT), policy=policy).record.requeue
    assert requeue is not None and requeue.not_before == iso(NOW + timedelta(seconds=1))


def test_a_deadlines_early_preemption_is_requeued_on_spot() -> None:
    # Only the last Spot attempt goes on to on-demand here; before it, the deadline rule decides switches.
    record = make_record(state=JobState.RUNNING, request={"deadline": iso(NOW + timedelta(days=1))})
    decision = observe(record, failed(ended=NOW, error=STOCKOUT), policy=ALLOWS_ON_DEMAND)
    assert decision.record.requeue is not None and decision.record.requeue.strategy == "SPOT"


def test_the_on_demand_attempt_after_the_last_spot_one_counts_every_spot_attempt_before_it() -> None:
    policy = replace(ALLOWS_ON_DEMAND, min_spot_attempts=2)
    first = Attempt(1, "us-central1", "SPOT", claimed_at=at(0), job=JOB1, state=JobState.FAILED)
    first.outcome = AttemptOutcome.REQUEUED
    second = Attempt(2, "us-central1", "SPOT", claimed_at=at(100), job=JOB2, state=JobState.RUNNING)
    record = make_record(
        status=RequestStatus.RUNNING,
        attempts=[first, second],
        request={"max_attempts": 2, "deadline": iso(NOW + timedelta(days=1))},
    )
    decision = observe(record, replace(failed(ended=NOW, error=STOCKOUT), name=JOB2), attempt=2, policy=policy)
    assert decision.record.requeue is not None
    assert (decision.record.requeue.attempt, decision.record.requeue.strategy) == (3, "STANDARD")


def test_an_incomplete_success_is_requeued_in_place_as_a_preemption() -> None:
    from spotjobs_kit.lines import PREEMPTED, RUN_STARTED, KitRecord

    record = make_record(state=JobState.RUNNING, request={"locations": ["us-central1", "europe-west4"]})
    for event in (RUN_STARTED, PREEMPTED):
        kit = KitRecord(event=event, run=0, fields={})
        record = decide(record, Observation(1, None, kit=kit, job_name=JOB1), POLICY, NOW).record
    decision = observe(record, job(JobState.SUCCEEDED, update=0))
    requeue = decision.record.requeue
    assert requeue is not None and (requeue.location, requeue.reason) == ("us-central1", "preemption")


def test_a_stockout_by_code_alone_with_the_kits_word_keeps_its_message() -> None:
    patterns = patterns_from(Settings())
    quota = {"code": 8, "message": "quota"}
    cause = classify_failure(JobSnapshot(JOB1, JobState.FAILED, quota), patterns, kit_saw_preemption=True)
    assert (cause.capacity, cause.stockout, cause.reason) == (True, True, "quota")


def test_a_read_in_the_state_the_ledger_holds_keeps_when_that_state_began() -> None:
    policy = replace(POLICY, stuck_after_seconds=HOUR)
    record, _ = waiting_since(JobState.PENDING, 2 * HOUR)
    two_hours_ago = iso(NOW - timedelta(hours=2))  # created then, and waiting since
    updated_lately = JobSnapshot(JOB1, JobState.PENDING, None, create_time=two_hours_ago, update_time=at(590))
    decision = observe(record, updated_lately, policy=policy)
    assert decision.record.attempts[0].state_changed_at == iso(NOW - timedelta(hours=2))
    [alert] = decision.effects.alerts
    assert alert.details["stuck_seconds"] == 7200
    assert decision.record.status == RequestStatus.SUBMITTED  # waiting is not running


def test_a_read_in_the_state_the_ledger_holds_is_news_whatever_its_update_time() -> None:
    policy = replace(POLICY, stuck_after_seconds=HOUR)
    record, _ = waiting_since(JobState.PENDING, 2 * HOUR)
    created = iso(NOW - timedelta(hours=2))
    older = JobSnapshot(JOB1, JobState.PENDING, None, create_time=created, update_time=iso(NOW - timedelta(hours=3)))
    assert len(observe(record, older, policy=policy).effects.alerts) == 1


def test_a_read_without_a_start_time_keeps_the_start_recorded() -> None:
    record = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    record.attempts[0].started_at = at(10)
    record.attempts[0].state_changed_at = at(5)
    snapshot = JobSnapshot(JOB1, JobState.PENDING, None, create_time=at(1), update_time=None)
    decision = observe(record, snapshot)
    assert decision.record.attempts[0].started_at == at(10)
    assert decision.record.attempts[0].state == JobState.PENDING  # no update time: news all the same


def test_a_kit_line_while_a_switched_jobs_cancel_runs_flags_nothing() -> None:
    from spotjobs_kit.lines import CHECKPOINT_COMMITTED, KitRecord

    policy = replace(POLICY, stuck_after_seconds=HOUR)
    record = switched(sent_ago=2 * HOUR)
    kit = KitRecord(event=CHECKPOINT_COMMITTED, run=0, fields={}, step=10)
    decision = decide(copy.deepcopy(record), Observation(1, None, kit=kit, job_name=JOB1), policy, NOW)
    assert decision.effects.alerts == []


def test_the_end_of_a_job_the_requests_cancel_stopped_ends_the_request() -> None:
    record = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    record.cancel = CancelIntent(by="ops@example.com", at=at(300))
    record.attempts[0].cancel_decided_at = at(300)
    record.attempts[0].cancel_sent_at = at(301)
    decision = observe(record, job(JobState.CANCELLED, update=400))
    assert decision.record.status == RequestStatus.CANCELLED
    assert not decision.effects.requeue_decided
    assert decision.record.attempts[0].outcome == AttemptOutcome.CANCELLED


# ---- the deadline rule, asked by decide -----------------------------------------------------------


def waiting_for_spot_past_the_net(*, attempts: int = 1) -> RequestRecord:
    """A deadline request whose latest Spot attempt has waited in QUEUED for two hours, with an hour
    of work left and two hours to the deadline: below the safety net (2d + m), on-demand now."""
    record = make_record(
        state=JobState.QUEUED,
        request={"deadline": iso(NOW + timedelta(hours=2)), "total_steps": 3600, "expected_step_seconds": 1.0},
    )
    record.created_at = iso(NOW - timedelta(hours=3))
    long_ago = iso(NOW - timedelta(hours=2))
    record.attempts[0].created_at = record.attempts[0].state_changed_at = long_ago
    if attempts == 2:
        record.attempts[0].outcome = AttemptOutcome.REQUEUED
        record.attempts[0].state = JobState.FAILED
        record.attempts.append(
            Attempt(
                2, "us-central1", "SPOT", claimed_at=long_ago, job=JOB2, state=JobState.QUEUED,
                created_at=long_ago, state_changed_at=long_ago,
            )
        )  # fmt: skip
    return record


def queued(name: str = JOB1) -> JobSnapshot:
    return JobSnapshot(name, JobState.QUEUED, None, create_time=at(1), update_time=iso(NOW - timedelta(hours=2)))


def test_a_spot_wait_below_the_safety_net_switches_to_on_demand() -> None:
    decision = observe(waiting_for_spot_past_the_net(), queued(), policy=ALLOWS_ON_DEMAND)
    assert decision.record.attempts[0].outcome == AttemptOutcome.SWITCHED_TO_ON_DEMAND
    assert decision.record.requeue is not None and decision.record.requeue.strategy == "STANDARD"
    assert "deadline_switch" in decision.effects.events


def test_the_switch_counts_the_spot_attempts_up_to_the_one_it_leaves() -> None:
    policy = replace(ALLOWS_ON_DEMAND, min_spot_attempts=2)
    record = waiting_for_spot_past_the_net(attempts=2)
    decision = observe(record, queued(JOB2), attempt=2, policy=policy)
    assert decision.record.attempts[1].outcome == AttemptOutcome.SWITCHED_TO_ON_DEMAND
    assert "deadline_switch_refused" not in decision.effects.events
    one_spot_attempt = observe(waiting_for_spot_past_the_net(), queued(), policy=policy)
    assert one_spot_attempt.effects.events == ("deadline_switch_refused",)


def test_a_kit_line_that_a_run_started_says_the_job_runs_one_that_it_was_preempted_does_not() -> None:
    from spotjobs_kit.lines import PREEMPTED, RUN_STARTED, KitRecord

    def kit_line(event: str) -> Decision:
        observation = Observation(1, None, kit=KitRecord(event=event, run=0, fields={}), job_name=JOB1)
        return decide(waiting_for_spot_past_the_net(), observation, ALLOWS_ON_DEMAND, NOW)

    assert kit_line(RUN_STARTED).record.requeue is None  # on Spot: stay until preempted
    assert kit_line(PREEMPTED).record.requeue is not None  # waiting again, below the net


def test_a_service_preemption_line_without_a_read_counts_as_the_replay_feeds_it() -> None:
    # `spotjobs explain` replays a service line with no Vertex read and no kit line
    # (spotjobs/explaining/replay.py): it is evidence, and nothing else is decided on it.
    from shared.deciding.events import Signal

    record = make_record(status=RequestStatus.RUNNING, state=JobState.RUNNING)
    line = Observation(1, None, Signal.PREEMPTION, preemption_evidence="insert-1", job_name=JOB1)
    decision = decide(copy.deepcopy(record), line, POLICY, NOW)
    assert decision.record.attempts[0].preemptions == 1
    assert decision.effects.events == ("preemption",)
    assert decision.record.status == RequestStatus.RUNNING


def test_a_flex_start_job_cancelled_by_hand_after_its_long_wait_is_not_stuck_at_once() -> None:
    """A FLEX_START job waits for capacity by design (its maxWaitDuration beyond the threshold):
    20 h PENDING, then someone cancels it in the console. CANCELLING is no wait for capacity, and
    no part of the wait before it: stuck only once it lasted the threshold itself (review s10)."""
    policy = replace(POLICY, stuck_after_seconds=6 * HOUR)
    created = NOW - timedelta(hours=20)
    record = make_record(state=None, request={"custom_job": {"jobSpec": {"scheduling": {"maxWaitDuration": "86400s"}}}})
    record.attempts[0].strategy = "FLEX_START"
    pending = JobSnapshot(JOB1, JobState.PENDING, None, create_time=iso(created), update_time=iso(created))
    waiting = observe(record, pending, policy=policy, now=NOW - timedelta(minutes=5))
    assert waiting.effects.alerts == []
    cancelled = NOW - timedelta(seconds=10)
    cancelling = replace(pending, state=JobState.CANCELLING, update_time=iso(cancelled))
    assert observe(waiting.record, cancelling, policy=policy).effects.alerts == []
    stuck_at = cancelled + timedelta(hours=6)
    [alert] = observe(waiting.record, cancelling, policy=policy, now=stuck_at).effects.alerts
    assert (alert.details["state"], alert.details["wait_began_at"]) == (JobState.CANCELLING, iso(cancelled))


def test_a_wait_after_a_pause_counts_from_the_pause_s_end() -> None:
    """PAUSED (or UPDATING) is no wait for capacity: the PENDING after it is a wait of its own."""
    policy = replace(POLICY, stuck_after_seconds=6 * HOUR)
    created = NOW - timedelta(hours=10)
    paused = JobSnapshot(JOB1, JobState.PAUSED, None, create_time=iso(created), update_time=iso(created))
    seen_paused = observe(make_record(state=None), paused, policy=policy, now=created + timedelta(hours=1))
    resumed = NOW - timedelta(hours=1)
    pending = replace(paused, state=JobState.PENDING, update_time=iso(resumed))
    seen_pending = observe(seen_paused.record, pending, policy=policy)
    assert seen_pending.effects.alerts == [] and seen_pending.record.attempts[0].wait_began_at == iso(resumed)


def test_a_run_no_observation_saw_ends_the_wait_before_it() -> None:
    """Seen QUEUED, then PENDING again after a short run whose RUNNING no read caught (its event
    lost between two passes): the job's start time says it ran, so the wait counts from the
    state that ended the run, not from the create (review s10)."""
    policy = replace(POLICY, stuck_after_seconds=6 * HOUR)
    created = NOW - timedelta(hours=6, minutes=5)
    queued = JobSnapshot(JOB1, JobState.QUEUED, None, create_time=iso(created), update_time=iso(created))
    seen_queued = observe(make_record(state=None), queued, policy=policy, now=created + timedelta(hours=1))
    ran, back = created + timedelta(hours=2), created + timedelta(hours=2, minutes=10)
    pending = replace(queued, state=JobState.PENDING, start_time=iso(ran), update_time=iso(back))
    decision = observe(seen_queued.record, pending, policy=policy)
    assert decision.effects.alerts == [] and decision.record.attempts[0].wait_began_at == iso(back)


def test_a_restart_seen_queued_after_pending_is_a_wait_of_its_own() -> None:
    """Seed 6699: a Spot restart waited PENDING, ran 20 s between two reads, and was restarted
    again (QUEUED, "resumed" in job_state.proto). Its start time is its first run's, so only the
    step back from PENDING to QUEUED tells the run: the new wait counts from that QUEUED, not from
    the run before the PENDING, and is alerted only once it lasted the threshold itself."""
    policy = replace(POLICY, stuck_after_seconds=6 * HOUR)
    first_run = NOW - timedelta(hours=13)
    preempted = first_run + timedelta(minutes=15)
    pending = JobSnapshot(
        JOB1,
        JobState.PENDING,
        None,
        create_time=iso(first_run - timedelta(minutes=5)),
        start_time=iso(first_run),
        update_time=iso(preempted + timedelta(seconds=20)),
    )
    seen_running = observe(
        make_record(state=None),
        replace(pending, state=JobState.RUNNING, update_time=iso(first_run)),
        policy=policy,
        now=first_run + timedelta(minutes=1),
    )
    seen_pending = observe(seen_running.record, pending, policy=policy, now=preempted + timedelta(minutes=1))
    assert seen_pending.record.attempts[0].wait_began_at == iso(preempted + timedelta(seconds=20))
    requeued = preempted + timedelta(hours=6, minutes=2)  # past 6 h from the wait before the run
    queued = replace(pending, state=JobState.QUEUED, update_time=iso(requeued))

    decision = observe(seen_pending.record, queued, policy=policy, now=requeued + timedelta(seconds=6))

    assert decision.effects.alerts == [] and decision.record.attempts[0].wait_began_at == iso(requeued)
    [alert] = observe(decision.record, queued, policy=policy, now=requeued + timedelta(hours=6)).effects.alerts
    assert (alert.details["wait_began_at"], alert.details["stuck_seconds"]) == (iso(requeued), 6 * 3600)


def test_a_restart_seen_in_the_waiting_state_the_record_holds_updated_since_is_a_wait_of_its_own() -> None:
    """Seed 8151: a Spot restart waited PENDING 6 h less 6 s, ran 20 s between two reads, and was
    restarted again, PENDING once more. The start time is the first run's and the state the same,
    so only the update time, newer than the newest read taken in, tells the run (no method updates
    a CustomJob: Vertex's own state changes do): the new wait counts from that update, and is not
    alerted 32 s into it as 6 h long."""
    policy = replace(POLICY, stuck_after_seconds=6 * HOUR)
    first_run = NOW - timedelta(hours=13)
    preempted = first_run + timedelta(minutes=1)
    pending = JobSnapshot(
        JOB1,
        JobState.PENDING,
        None,
        create_time=iso(first_run - timedelta(minutes=15)),
        start_time=iso(first_run),
        update_time=iso(preempted),
    )
    seen_running = observe(
        make_record(state=None),
        replace(pending, state=JobState.RUNNING, update_time=iso(first_run)),
        policy=policy,
        now=first_run + timedelta(seconds=3),
    )
    seen_pending = observe(seen_running.record, pending, policy=policy, now=preempted + timedelta(seconds=3))
    assert seen_pending.record.attempts[0].wait_began_at == iso(preempted)
    restarted = preempted + timedelta(hours=6, seconds=14)  # ran from 6 h less 6 s, for 20 s
    pending_again = replace(pending, update_time=iso(restarted))

    decision = observe(seen_pending.record, pending_again, policy=policy, now=restarted + timedelta(seconds=32))

    assert decision.effects.alerts == [] and decision.record.attempts[0].wait_began_at == iso(restarted)
    [alert] = observe(decision.record, pending_again, policy=policy, now=restarted + timedelta(hours=6)).effects.alerts
    assert (alert.details["wait_began_at"], alert.details["stuck_seconds"]) == (iso(restarted), 6 * 3600)


def test_a_job_that_never_ran_waits_from_its_create_whatever_its_update_time() -> None:
    """No run without a start time: a wait of a job that never ran is not cut by an update."""
    policy = replace(POLICY, stuck_after_seconds=6 * HOUR)
    created = NOW - timedelta(hours=7)
    pending = JobSnapshot(JOB1, JobState.PENDING, None, create_time=iso(created), update_time=iso(created))
    seen_pending = observe(make_record(state=None), pending, policy=policy, now=created + timedelta(minutes=1))
    updated = replace(pending, update_time=iso(created + timedelta(hours=3)))

    [alert] = observe(seen_pending.record, updated, policy=policy, now=NOW).effects.alerts

    assert (alert.details["wait_began_at"], alert.details["stuck_seconds"]) == (iso(created), 7 * 3600)


def test_a_job_that_never_ran_seen_queued_after_pending_still_waits_from_its_create() -> None:
    """No start time: no run, so no restart either; a QUEUED after PENDING is the same wait, from
    the create (docs/signals.md), whatever moved it back."""
    created = NOW - timedelta(hours=3)
    pending = JobSnapshot(JOB1, JobState.PENDING, None, create_time=iso(created), update_time=iso(created))
    seen_pending = observe(make_record(state=None), pending, now=created + timedelta(hours=1))
    queued = replace(pending, state=JobState.QUEUED, update_time=iso(created + timedelta(hours=2)))

    assert observe(seen_pending.record, queued).record.attempts[0].wait_began_at == iso(created)
