"""The deadline rule wired into the decisions (shared/deciding/deadline_watch.py) at its edges: what
`deadline_situation` reads from the record (each capacity type's step rate from its own attempts,
the changeover from on-demand attempts in the location only, a new Spot job's changeover to the
second, a kit line's total of no steps), the alerts `watch_deadline` raises exactly at the deadline
and at one changeover of slack, a finish exactly at the deadline, the fleet asked exactly at the
safety net; and the work's share done (shared/deciding/deadline.py, `Work.done_fraction`) at its
bounds."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared.alerts import AlertKind
from shared.clock import iso
from shared.deciding.deadline import Action, Placement, Situation, Work, decide_deadline, longest_unasked_seconds
from shared.deciding.deadline_watch import (
    alert_if_finished_late,
    deadline_situation,
    no_spot_capacity_until,
    note_progress,
    watch_deadline,
)
from shared.deciding.effects import Effects
from shared.fleet.estimate import SpotOutlook
from shared.jobs import JobState
from shared.ledger.records import Attempt, CancelIntent, RequestRecord, Requeue
from shared.ledger.states import AttemptOutcome, RequestStatus
from tests.support.decide import NOW, make_record

PRIOR = 60.0  # the changeover prior: below every changeover these records show


def situation(record: RequestRecord) -> Situation:
    found = deadline_situation(record, NOW, prior_seconds=PRIOR, review_seconds=300.0, checkpoint_prior_seconds=3600.0)
    assert found is not None
    return found


def request(**fields: Any) -> dict[str, Any]:
    return {"deadline": iso(NOW + timedelta(days=1)), "total_steps": 1000, "expected_step_seconds": 1.0, **fields}


def ran(n: int, strategy: str, *, asked: float, started: float | None, **fields: Any) -> Attempt:
    """Attempt n, asked for `asked` seconds before NOW and started `started` seconds before it."""
    return Attempt(
        n,
        "us-central1",
        strategy,
        claimed_at=iso(NOW - timedelta(seconds=asked)),
        job=f"j{n}",
        state=JobState.FAILED,
        created_at=iso(NOW - timedelta(seconds=asked)),
        started_at=None if started is None else iso(NOW - timedelta(seconds=started)),
        **fields,
    )


def test_each_capacity_types_step_time_is_its_own_attempts_rate() -> None:
    spot = ran(1, "SPOT", asked=9000, started=8000, steps_per_second=2.0)
    on_demand = ran(2, "STANDARD", asked=4000, started=3000, steps_per_second=4.0)
    latest = ran(3, "SPOT", asked=100, started=None)

    work = situation(make_record(request=request(), attempts=[spot, on_demand, latest])).work

    assert (work.spot_step_seconds, work.on_demand_step_seconds) == (0.5, 0.25)


def test_a_spot_attempts_wait_for_capacity_is_no_changeover_and_an_on_demand_ones_start_is() -> None:
    waited = ran(1, "SPOT", asked=9000, started=4000)  # 5,000 s before Spot had capacity
    latest = ran(2, "SPOT", asked=100, started=None)
    assert situation(make_record(request=request(), attempts=[waited, latest])).changeover_seconds == PRIOR

    on_demand = ran(2, "STANDARD", asked=3000, started=2100)  # 900 s from its create to running
    latest = ran(3, "SPOT", asked=100, started=None)
    with_it = make_record(request=request(), attempts=[waited, on_demand, latest])
    assert situation(with_it).changeover_seconds == 900.0

    on_demand.location = "europe-west4"  # another location's changeover is not this one's
    assert situation(with_it).changeover_seconds == PRIOR


def test_a_new_spot_job_is_in_its_changeover_until_exactly_one_changeover_after_it_was_asked_for() -> None:
    def asked(seconds: float) -> Placement:
        record = make_record(request=request(changeover_seconds=60.0))
        record.attempts[0].created_at = iso(NOW - timedelta(seconds=seconds))
        return situation(record).placement

    assert asked(59) is Placement.ON_SPOT
    assert asked(60) is Placement.WAITING_FOR_SPOT


def test_a_kit_line_of_no_total_steps_or_no_rate_keeps_what_was_known() -> None:
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at=iso(NOW), total_steps=1000, steps_per_second=2.0)
    note_progress(attempt, 0, 0.0)
    assert (attempt.total_steps, attempt.steps_per_second) == (1000, 2.0)
    note_progress(attempt, 1, 0.5)
    assert (attempt.total_steps, attempt.steps_per_second) == (1, 0.5)


# What watch_deadline decides: 1,000 steps of a second, a changeover of 60 s, a review of 300 s.


def running(deadline_in: float, *, committed: int = 0) -> RequestRecord:
    record = make_record(request=request(deadline=iso(NOW + timedelta(seconds=deadline_in)), changeover_seconds=60.0))
    spot = record.attempts[0]
    spot.state, spot.started_at = JobState.RUNNING, iso(NOW - timedelta(hours=1))
    spot.last_checkpoint = [1, committed] if committed else None
    return record


def watch(record: RequestRecord, fleet: Any = None) -> tuple[Any, Effects]:
    effects = Effects()
    decision = watch_deadline(
        record,
        record.attempts[0],
        NOW,
        effects,
        prior_seconds=PRIOR,
        review_seconds=300.0,
        refuses=lambda strategy: None,
        checkpoint_prior_seconds=0.0,
        seen_at=NOW,
        fleet=fleet,
    )
    return decision, effects


def test_a_slack_of_exactly_one_changeover_is_not_at_risk() -> None:
    decision, effects = watch(running(1000 + 60 + 60))  # the work, its changeover, one more changeover
    assert decision.slack_seconds == 60.0
    assert effects.alerts == []

    decision, effects = watch(running(1000 + 60 + 59))
    assert [a.kind for a in effects.alerts] == [AlertKind.DEADLINE_AT_RISK]


def test_at_the_deadline_exactly_it_is_missed() -> None:
    _, effects = watch(running(0))
    assert [a.kind for a in effects.alerts] == [AlertKind.DEADLINE_MISSED]


def test_work_all_committed_raises_no_deadline_alert_while_its_job_ends() -> None:
    _, effects = watch(running(-60, committed=1000))  # the finish is judged when the job ends
    assert effects.alerts == []


def test_a_finish_exactly_at_the_deadline_is_in_time() -> None:
    record = running(0)
    record.attempts[0].ended_at = iso(NOW)
    effects = Effects()
    alert_if_finished_late(record, record.attempts[0], NOW, effects)
    assert effects.alerts == []

    record.attempts[0].ended_at = iso(NOW - timedelta(seconds=1))  # in time, seen an hour later
    alert_if_finished_late(record, record.attempts[0], NOW + timedelta(hours=1), effects)
    assert effects.alerts == []

    record.attempts[0].ended_at = iso(NOW + timedelta(seconds=1))
    alert_if_finished_late(record, record.attempts[0], NOW, effects)
    assert [a.kind for a in effects.alerts] == [AlertKind.DEADLINE_MISSED]


class Fleet:
    """Answers the deadline rule's questions with an outlook of no wait at all, counting them."""

    def __init__(self) -> None:
        self.asked = 0

    def has_capacity(self, request: Any, location: str) -> bool | None:
        return None

    def spot_outlook(self, request: Any, location: str) -> SpotOutlook | None:
        self.asked += 1
        return SpotOutlook(1.0, 3600.0)


def test_a_wait_with_slack_exactly_the_safety_net_asks_the_fleet_before_leaving() -> None:
    """Behind the line with no outlook kept, the rule would leave; at exactly the net (2d + m, m
    the longest a waiting job goes unasked) an outlook can still keep the wait (one of no wait at
    all), so the fleet is asked."""
    net = 2 * 60 + longest_unasked_seconds(300.0)
    record = make_record(
        request=request(deadline=iso(NOW + timedelta(seconds=1000 + 60 + net)), changeover_seconds=60.0)
    )
    record.created_at = iso(NOW - timedelta(seconds=10_000))
    record.attempts[0].created_at = iso(NOW - timedelta(seconds=700))
    fleet = Fleet()

    decision, _ = watch(record, fleet)

    assert fleet.asked == 1
    assert decision.action is Action.STAY and decision.slack_seconds == net
    assert record.attempts[0].spot_outlook == {"share_available": 1.0, "mean_lifetime_seconds": 3600.0}


def test_the_share_done_is_a_share_of_one_step_too_and_never_past_all() -> None:
    assert Work(total_steps=1, committed_steps=0, spot_step_seconds=1.0).done_fraction == 0.0
    past = Work(total_steps=1000, committed_steps=1200, spot_step_seconds=1.0)  # the kit saved past its total
    assert past.done_fraction == 1.0


@pytest.mark.parametrize("committed", [1000, 1200])
def test_work_committed_to_its_total_or_past_it_is_done_with_all_of_it_done(committed: int) -> None:
    record = make_record(request=request(), attempts=[ran(1, "SPOT", asked=100, started=50)])
    record.attempts[0].last_checkpoint = [1, committed]
    decision = decide_deadline(situation(record))
    assert (decision.reason, decision.progress) == ("done", 1.0)


# What the rule is never asked about.


def bare_situation(record: RequestRecord) -> Situation | None:
    return deadline_situation(record, NOW, prior_seconds=PRIOR, review_seconds=300.0, checkpoint_prior_seconds=3600.0)


def test_no_situation_without_a_deadline_an_attempt_the_work_or_its_rate() -> None:
    no_deadline = make_record(request={"total_steps": 1000, "expected_step_seconds": 1.0})  # its work known
    assert bare_situation(no_deadline) is None
    no_attempt = make_record(request=request())
    no_attempt.attempts = []
    assert bare_situation(no_attempt) is None
    assert bare_situation(make_record(request=request(expected_step_seconds=None))) is None  # no rate
    assert bare_situation(make_record(request=request(total_steps=None))) is None  # no total


def test_the_rule_is_asked_only_about_the_latest_live_attempt_of_an_open_request() -> None:
    older = running(1000 + 60 + 30)  # at risk, were it asked
    older.attempts.append(Attempt(2, "us-central1", "SPOT", claimed_at=iso(NOW), job="j2"))
    assert watch(older) == (None, Effects())

    ended = running(1000 + 60 + 30)
    ended.attempts[0].outcome = AttemptOutcome.FAILED
    assert watch(ended) == (None, Effects())

    finished = running(1000 + 60 + 30)
    finished.status = RequestStatus.SUCCEEDED
    assert watch(finished) == (None, Effects())

    requeued = running(1000 + 60 + 30)
    requeued.requeue = Requeue(attempt=2, location="us-central1", strategy="SPOT", reason="x", decided_at=iso(NOW))
    assert watch(requeued) == (None, Effects())

    cancelled = running(1000 + 60 + 30)
    cancelled.cancel = CancelIntent(by="someone", at=iso(NOW), reason="not needed")
    assert watch(cancelled) == (None, Effects())


def test_the_back_off_on_spot_is_as_long_as_the_futile_try_waited_from_its_create() -> None:
    """A Spot try that found no capacity and was switched away: Spot is taken to have none for as
    long as it waited, counted from its job's create (its claim came earlier)."""
    futile = Attempt(
        1,
        "us-central1",
        "SPOT",
        claimed_at=iso(NOW - timedelta(seconds=2000)),
        created_at=iso(NOW - timedelta(seconds=1000)),
        job="j1",
        outcome=AttemptOutcome.SWITCHED_TO_ON_DEMAND,
        cancel_decided_at=iso(NOW),
    )
    on_demand = Attempt(2, "us-central1", "STANDARD", claimed_at=iso(NOW), job="j2")
    record = make_record(request=request(), attempts=[futile, on_demand])
    assert no_spot_capacity_until(record) == NOW + timedelta(seconds=1000)


def test_a_spot_run_is_placed_when_it_got_capacity_not_at_its_last_change_of_state() -> None:
    record = make_record(request=request())
    spot = record.attempts[0]
    spot.state = JobState.RUNNING
    spot.started_at, spot.state_changed_at = iso(NOW - timedelta(seconds=500)), iso(NOW - timedelta(seconds=100))
    placed = situation(record)
    assert (placed.placement, placed.placed_at) == (Placement.ON_SPOT, NOW - timedelta(seconds=500))


def test_a_spot_try_that_ran_ends_the_streak_of_futile_tries_the_back_off_doubles_for() -> None:
    def futile(n: int, waited: float, ended_ago: float) -> Attempt:
        return Attempt(
            n,
            "us-central1",
            "SPOT",
            claimed_at=iso(NOW - timedelta(seconds=ended_ago + waited)),
            created_at=iso(NOW - timedelta(seconds=ended_ago + waited)),
            job=f"j{n}",
            outcome=AttemptOutcome.SWITCHED_TO_ON_DEMAND,
            cancel_decided_at=iso(NOW - timedelta(seconds=ended_ago)),
        )

    ran = Attempt(
        2,
        "us-central1",
        "SPOT",
        claimed_at=iso(NOW),
        job="j2",
        started_at=iso(NOW - timedelta(seconds=5000)),
        outcome=AttemptOutcome.SWITCHED_TO_ON_DEMAND,
    )
    record = make_record(request=request(), attempts=[futile(1, 300, 9000), ran, futile(3, 1000, 0)])
    assert no_spot_capacity_until(record) == NOW + timedelta(seconds=1000)  # one futile try in a row: not doubled


def test_a_futile_try_whose_job_was_never_created_waited_from_its_own_claim() -> None:
    def futile(n: int, claimed_ago: float, *, created: bool) -> Attempt:
        return Attempt(
            n,
            "us-central1",
            "SPOT",
            claimed_at=iso(NOW - timedelta(seconds=claimed_ago)),
            created_at=iso(NOW - timedelta(seconds=claimed_ago)) if created else None,
            job=f"j{n}",
            outcome=AttemptOutcome.SWITCHED_TO_ON_DEMAND,
            cancel_decided_at=iso(NOW),
        )

    record = make_record(request=request(), attempts=[futile(1, 5000, created=True), futile(2, 800, created=False)])
    assert no_spot_capacity_until(record) == NOW + timedelta(seconds=800 * 2)  # two in a row: doubled once


def test_a_spot_job_that_never_ran_waits_from_its_ask_whatever_its_state_changes() -> None:
    record = make_record(request=request(changeover_seconds=60.0))
    spot = record.attempts[0]
    spot.created_at = iso(NOW - timedelta(seconds=900))
    spot.state, spot.state_changed_at = JobState.PENDING, iso(NOW - timedelta(seconds=90))  # queued, then pending
    waiting = situation(record)
    assert (waiting.placement, waiting.placed_at) == (Placement.WAITING_FOR_SPOT, NOW - timedelta(seconds=900))
