"""The event model of the deadline benchmark (bench/deadline_events.py): it asks production's input
builder about a record kept as the ledger keeps it, and its bisection asks what asking every
moment would."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

import bench.bench_deadline as bench
import bench.bench_deadline_speed as speed
import bench.deadline_events as events
import shared.deciding.deadline_watch as deadline_watch
import shared.fleet.placing as placing
from bench.deadline_sim import Trace
from shared.clock import iso
from shared.deciding.deadline import Action, Placement, Rule, decide_deadline, longest_unasked_seconds
from shared.jobs import JobState
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome, RequestStatus
from tests.support.decide import JOB1, NOW, POLICY, make_record

GAP = 600
HOURS = 3600


def trace_of(bits: str) -> Trace:
    return Trace.of("synthetic", GAP, [int(b) for b in bits])


# Spot for 3 h, none for 2 h, then Spot for 10 min in every hour: preemptions, waits and switches.
FLAKY = trace_of("1" * 18 + "0" * 12 + "100000" * 100)


def job(checkpoint: int, fraction: float = 0.8, work_hours: int = 6) -> events.EventJob:
    work = work_hours * HOURS
    return events.EventJob(work, round(work / fraction / GAP) * GAP, checkpoint, 2.84)


def test_the_event_model_asks_the_production_input_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    assert events.deadline_situation is deadline_watch.deadline_situation
    seen: list[tuple[Placement, int]] = []

    def counted(record, now, **kwargs):
        situation = deadline_watch.deadline_situation(record, now, **kwargs)
        seen.append((situation.placement, situation.work.committed_steps))
        return situation

    monkeypatch.setattr(events, "deadline_situation", counted)
    outcome = events.simulate_events(job(1800), FLAKY, 0, Rule.SPOTJOBS, "seed")
    # Every decision came from a record: committed steps only, and every placement on the way.
    assert {p for p, _ in seen} == set(Placement)
    assert {c for _, c in seen} <= {1800 * i for i in range(13)}
    assert outcome.switches > 0 and outcome.spot_work_hours > 0 and outcome.on_demand_work_hours > 0
    assert outcome.spot_work_hours + outcome.on_demand_work_hours == pytest.approx(6)


def test_the_event_models_fleet_reaches_each_attempt_through_the_claims_placement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert events.place_claimed is placing.place_claimed
    seen: list[float | None] = []

    def counted(placer, record, attempt):
        placing.place_claimed(placer, record, attempt)
        seen.append(attempt.fleet_changeover_seconds)

    monkeypatch.setattr(events, "place_claimed", counted)
    events.simulate_events(replace(job(1800), fleet_changeovers=100), FLAKY, 0, Rule.SPOTJOBS, "seed")
    assert len(seen) > 1 and len(set(seen)) == 1 and seen[0] > 0  # one fleet, read at every create
    seen.clear()
    events.simulate_events(job(1800), FLAKY, 0, Rule.SPOTJOBS, "seed")  # a lone request: no bound
    assert seen and set(seen) == {None}


@pytest.mark.parametrize("rule", [Rule.GREEDY, Rule.SPOTJOBS])
@pytest.mark.parametrize("checkpoint", [600, 3600])
def test_bisecting_a_stretch_gives_what_asking_at_every_line_and_pass_gives(rule: Rule, checkpoint: int) -> None:
    for seed in ("a", "b"):
        quick = events.simulate_events(job(checkpoint, 0.7), FLAKY, 0, rule, seed)
        assert quick == events.simulate_events(job(checkpoint, 0.7), FLAKY, 0, rule, seed, exhaustive=True)


def test_the_event_cell_has_the_tick_cells_shape() -> None:
    cell = bench.run_event_cells([FLAKY], [0.8], [1800], 0.1, False, 2, 2.84)[0]
    tick = bench.run_cells([FLAKY], [0.8], [0.2], 2, 2.84)[0]
    assert set(tick) <= set(cell) and set(cell["policies"]) == set(bench.EVENT_RULES)
    assert set(cell["policies"]["spotjobs"]) == set(tick["policies"]["spotjobs"])
    assert (cell["model"], cell["checkpoint_seconds"], cell["changeover_tail"]) == ("event", 1800, False)


def test_the_event_cells_run_only_the_policies_asked() -> None:
    cell = bench.run_event_cells([FLAKY], [0.8], [1800], 0.1, False, 2, 2.84, ["spotjobs", "greedy"])[0]
    assert set(cell["policies"]) == {"spotjobs", "greedy"}


# --- issue 31's two mechanisms, on the rule's inputs as production builds them ---------------

I = 7200  # the kit commits every 2 h of progress
TOTAL = 30_000  # steps of 1 s
COMMITTED = 3 * I
STARTED = NOW - timedelta(seconds=23_000)  # the request, and its on-demand attempt
INPUTS = {
    "prior_seconds": POLICY.changeover_prior_seconds,  # d: 1,200 s
    "review_seconds": POLICY.reconcile_interval_seconds,  # m: 300 s
    "checkpoint_prior_seconds": POLICY.checkpoint_prior_seconds,
}
D = INPUTS["prior_seconds"]
M = longest_unasked_seconds(INPUTS["review_seconds"])  # 1,260 s: a dead pass's lease within it


def on_demand_for_three_commits(deadline_in: float) -> RequestRecord:
    """A request on on-demand since STARTED, which committed every 2 h: 3 x 7,200 of 30,000 steps."""
    request = {"deadline": iso(NOW + timedelta(seconds=deadline_in)), "total_steps": TOTAL, "expected_step_seconds": 1}
    standard = Attempt(1, "us-central1", "STANDARD", claimed_at=iso(STARTED), job=JOB1, created_at=iso(STARTED))
    running = STARTED + timedelta(seconds=500)
    standard.state, standard.started_at = JobState.RUNNING, iso(running)
    standard.checkpoints_committed, standard.last_checkpoint = 3, [0, COMMITTED]
    standard.first_checkpoint_at = iso(running + timedelta(seconds=I))
    standard.last_checkpoint_at = iso(running + timedelta(seconds=COMMITTED))
    record = make_record(request=request, attempts=[standard], status=RequestStatus.RUNNING)
    record.created_at = iso(STARTED)
    return record


def rule_says(record: RequestRecord) -> tuple[Action, float]:
    situation = deadline_watch.deadline_situation(record, NOW, **INPUTS)
    decision = decide_deadline(situation, Rule.SPOTJOBS)
    return decision.action, decision.slack_seconds


def test_back_to_spot_needs_a_checkpoint_interval_more_slack_than_the_net() -> None:
    # Issue 31, mechanism 2: on on-demand, ahead of the line, slack 2d + m + I/2. Back on Spot with
    # no capacity, its first d seconds count as "on Spot within its changeover" (the net cannot
    # act), the next pass switches with slack of about I/2 - m, and the commits cost up to I more.
    record = on_demand_for_three_commits(deadline_in=TOTAL - COMMITTED + 2 * D + M + I / 2)
    assert rule_says(record) == (Action.STAY, 2 * D + M + I / 2)
    # With a slack of 2d + m + I it goes back to Spot: no reserve beyond the net (one d of it cost
    # more than before issue 31 at fraction 0.9 without a tail; docs/deadlines.md).
    record = on_demand_for_three_commits(deadline_in=TOTAL - COMMITTED + 2 * D + M + I)
    assert rule_says(record)[0] is Action.BACK_TO_SPOT


def test_a_spot_job_waiting_with_less_slack_than_a_checkpoint_interval_past_the_net_goes_on_demand() -> None:
    # Issue 31, mechanism 1 (the sawtooth): were capacity to come now, the Spot run would pay d,
    # then its committed slack would fall for I seconds until its first commit, to 0 before it:
    # the Spot safety net then fires at slack 0 and on-demand, slower than d by the decision's
    # own delay, finishes late.
    record = on_demand_for_three_commits(deadline_in=TOTAL - COMMITTED + D + 2 * D + M + I / 2)
    record.attempts[0].outcome = AttemptOutcome.SWITCHED_TO_SPOT
    asked = iso(NOW - timedelta(seconds=1500))  # more than d ago, and no capacity since
    record.attempts.append(Attempt(2, "us-central1", "SPOT", claimed_at=asked, job=JOB1 + "2", created_at=asked))
    assert deadline_watch.deadline_situation(record, NOW, **INPUTS).placement is Placement.WAITING_FOR_SPOT
    assert rule_says(record) == (Action.SWITCH_TO_ON_DEMAND, 2 * D + M + I / 2)


def test_the_checkpoint_interval_is_the_kits_with_a_prior_until_seen() -> None:
    record = on_demand_for_three_commits(deadline_in=10 * I)
    assert deadline_watch.checkpoint_interval(record, 3600.0) == I
    record.attempts[0].preemptions = 2  # a restart's wait only lengthens the mean: still counted
    assert deadline_watch.checkpoint_interval(record, 3600.0) == I
    record.attempts[0].checkpoints_committed = 1  # one commit: no interval seen yet
    assert deadline_watch.checkpoint_interval(record, 3600.0) == 3600.0


def test_the_changeover_prior_stays_a_floor_of_d_however_many_were_seen() -> None:
    # Five on-demand changeovers seen, all below the prior: their p90 is their largest, 556 s,
    # where the true p90 may be 900 s (issue 31); d stays the prior.
    record = on_demand_for_three_commits(deadline_in=10 * I)
    for n, seconds in enumerate((400, 450, 480, 520, 556), start=2):
        created = NOW - timedelta(hours=n)
        attempt = Attempt(n, "us-central1", "STANDARD", claimed_at=iso(created), created_at=iso(created))
        attempt.started_at, attempt.outcome = iso(created + timedelta(seconds=seconds)), AttemptOutcome.SWITCHED_TO_SPOT
        record.attempts.insert(0, attempt)
    assert deadline_watch.deadline_situation(record, NOW, **INPUTS).changeover_seconds == D


def test_d_is_the_largest_of_the_prior_the_requests_own_and_the_fleets_snapshot_where_it_runs() -> None:
    record = on_demand_for_three_commits(deadline_in=10 * I)  # its own changeover: 500 s

    def d() -> float:
        return deadline_watch.deadline_situation(record, NOW, **INPUTS).changeover_seconds

    assert d() == D
    record.attempts[0].fleet_changeover_seconds = 1100.0  # the fleet's bound under the prior: d as before
    assert d() == D
    record.attempts[0].fleet_changeover_seconds = 3300.0  # the fleet has a tail
    assert d() == 3300.0
    # A later claim there that could not read the fleet: the last snapshot of the location holds.
    record.attempts[0].outcome = AttemptOutcome.SWITCHED_TO_SPOT
    asked = iso(NOW - timedelta(seconds=60))
    record.attempts.append(Attempt(2, "us-central1", "SPOT", claimed_at=asked, job=JOB1 + "2", created_at=asked))
    assert d() == 3300.0
    record.attempts[1].location = "us-east4"  # another location's snapshot is not this one's
    assert d() == D
    record.request["changeover_seconds"] = 700  # the request's own d wins over every estimate
    record.attempts[1].location = "us-central1"
    assert d() == 700


def test_a_miss_a_slow_changeover_made_is_avoided_with_the_fleets_d() -> None:
    # 6 h of work due in 7.5 h, commits every 10 min, 5% of moves taking 45-90 min: alone, the
    # request's d is the prior and a tail move at its last switch makes it late; with the fleet's
    # 200 earlier changeovers (the same distribution, snapshotted at each claim) d covers the tail.
    alone = replace(job(600, 0.8), changeover_tail=True)
    assert events.simulate_events(alone, FLAKY, 0, Rule.SPOTJOBS, "t7").missed
    with_fleet = replace(alone, fleet_changeovers=200)
    assert not events.simulate_events(with_fleet, FLAKY, 0, Rule.SPOTJOBS, "t7").missed


def test_a_replay_that_missed_its_deadline_under_yesterdays_inputs_meets_it() -> None:
    # 12 h of work due in 15 h, commits every hour, on a flickering synthetic trace: before the
    # checkpoint interval was in the margin and d's prior a floor, spotjobs finished late here.
    flicker = trace_of(
        "10000001111110000001010010001001111111111110000000000001100010011000000111111111111011101000000000"
        "000111111001101110111111111111000000111111111111001110000000000001101111110110000001001100000010011111"
    )
    outcome = events.simulate_events(job(3600, 0.8, work_hours=12), flicker, 0, Rule.SPOTJOBS, "s127")
    assert not outcome.missed


def test_spot_is_taken_to_have_no_capacity_for_a_back_off_after_tries_that_found_none() -> None:
    # Back on on-demand after a Spot attempt that waited 1,500 s in vain: no capacity for as long
    # again (the line says "back to Spot", spotjobs stays), then unknown (Uniform Progress again).
    record = on_demand_for_three_commits(deadline_in=TOTAL - COMMITTED + 2 * D + M + 2 * I)
    assert rule_says(record)[0] is Action.BACK_TO_SPOT
    for n, waited in ((8, 1500), (9, 1500)):
        asked, left = NOW - timedelta(seconds=waited + 600 * (10 - n)), NOW - timedelta(seconds=600 * (10 - n))
        futile = Attempt(n, "us-central1", "SPOT", claimed_at=iso(asked), job=JOB1 + str(n), created_at=iso(asked))
        futile.outcome, futile.cancel_decided_at = AttemptOutcome.SWITCHED_TO_ON_DEMAND, iso(left)
        record.attempts.insert(-1, futile)
    # Two tries in a row found none: the last one's 1,500 s, doubled, from when it was left.
    left = NOW - timedelta(seconds=600)
    assert deadline_watch.no_spot_capacity_until(record) == left + timedelta(seconds=3000)
    assert rule_says(record)[0] is Action.STAY
    assert deadline_watch.deadline_situation(record, left + timedelta(seconds=3000), **INPUTS).spot_available is None
    # A Spot attempt that ran ends the streak: one try, 1,500 s.
    record.attempts[-3].started_at = record.attempts[-3].created_at
    assert deadline_watch.no_spot_capacity_until(record) == left + timedelta(seconds=1500)


def test_the_back_off_is_bounded_however_long_the_streak() -> None:
    record = on_demand_for_three_commits(deadline_in=10 * I)
    left = NOW - timedelta(seconds=100)
    for n in range(2, 80):  # Uniform Progress, which ignores the back-off, tries Spot again and again
        futile = Attempt(n, "us-central1", "SPOT", claimed_at=iso(left), job=JOB1 + str(n), created_at=iso(left))
        futile.outcome, futile.cancel_decided_at = (
            AttemptOutcome.SWITCHED_TO_ON_DEMAND,
            iso(left + timedelta(seconds=1)),
        )
        record.attempts.insert(-1, futile)
    assert deadline_watch.no_spot_capacity_until(record) == left + timedelta(seconds=1 + 1024)


def test_the_speed_cell_cuts_nine_traces_of_20000_ticks_from_the_traces_joined_end_to_end() -> None:
    short = [trace_of("10" * 50), trace_of("0011" * 25)]
    joined = short[0].available + short[1].available
    long = speed.long_traces(short)
    assert [len(t.available) for t in long] == [speed.TICKS] * speed.TRACES
    step = len(joined) // speed.TRACES
    assert long[1].available[: len(joined)] == joined[step:] + joined[:step]
    assert long[1].available[len(joined) : 2 * len(joined)] == long[1].available[: len(joined)]
