"""Finish by the deadline at the least cost: when to leave Spot for on-demand, and when to come back.

`decide_deadline(situation)` is a pure function: the time, the deadline, the work left from the last
committed checkpoint, where the job runs now (waiting for Spot, on Spot, on on-demand), the
changeover delay (`changeover_estimate`: a high percentile of those seen on the machine type and
location) and, when known, whether Spot has capacity. It returns a `DeadlineDecision` (stay, switch to
on-demand, back to Spot) with its reason and the figures behind it. The model and the rules are those of Wu et al., "Can't Be
Late: Optimizing Spot Instance Savings under Deadlines" (NSDI '24); docs/deadlines.md derives them
and reports what the benchmark (`python -m bench.bench_deadline`) measured.

Three rules hold in every mode, and together they make a deadline that on-demand could still meet
never missed (docs/deadlines.md, "Why no deadline is missed"):

- stop when done;
- safety net: waiting for Spot with slack below 2d + m (d the changeover, m the longest time
  until the next decision), go to on-demand and stay there; a Spot run that began with too
  little slack to pay its changeover and still leave on-demand time goes to on-demand at once;
- exploitation: otherwise, once on Spot, stay until preempted.

The modes differ in what they do with the rest of the slack. `Rule.GREEDY` waits for Spot until
the safety net fires. `Rule.UNIFORM_PROGRESS` (the paper's) keeps the committed progress on the
line ep(t) = (t - t0) / (deadline - t0): waiting and behind it, it goes to on-demand and stays
until ahead of ep(t + 2d) (hysteresis), then back to Spot. `Rule.SPOTJOBS` (production) is
Uniform Progress with two edges from what is known of Spot. Waiting for Spot behind the line, it
keeps waiting while the fleet's expected wait there (`spot_outlook`, the estimate the attempt's
claim kept) is at most `WAIT_SHARE_OF_SLACK` times the slack beyond the safety net and at most
`WAIT_CHANGEOVERS` changeovers: where outages are short one preemption no longer sends the rest
of the work to on-demand (Greedy's edge), and where they are long it leaves as Uniform Progress
does. And it stays on on-demand while Spot is known to have no capacity: going back would only
wait, fall behind the line and pay a second on-demand changeover. Where the wait is long and the
slack beyond the net still pays `MOVE_SLACK_CHANGEOVERS` changeovers, it holds the wait
`MOVE_HOLD_CHANGEOVERS` changeovers from its start before leaving, so that placement may move the
job to Spot elsewhere (shared/deciding/moves.py; a move costs one changeover) instead of sending
the rest of a tight deadline to on-demand; the hold counts from the wait's start or from when it
fell behind the line, whichever is later. On on-demand behind the line, it goes back to Spot for
another run once the outage the outlook expects is over, while the slack beyond the net pays
`SECOND_RUN_CHANGEOVERS` changeovers, rather than finishing the work on on-demand. Without either
(`spot_outlook`, `spot_available` None) it is Uniform Progress. `sits_out` keeps a move
(shared/deciding/moves.py) from taking a job out of a short outage, judged on a fresh outlook;
`preempted_often` has a move weighed at once, within the wait's first changeover, when the
attempt was preempted lately (once is enough) and little slack is left beyond the net; either only
while `spares_a_move`.
Also not coming back to Spot whose mean lifetime is below k d / (k - 1) (the paper's break-even)
was measured, made no cell cheaper and most dearer, and is not used (docs/deadlines.md). The
rules do not depend on the prices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from shared.fleet.estimate import SpotOutlook
from shared.ledger.run_lock import LEASE_SECONDS

# Changeovers vary and a STANDARD GPU can also be short: plan with a high percentile, not the mean.
CHANGEOVER_PERCENTILE = 0.9
# `Rule.SPOTJOBS` waits for Spot behind the line while the expected wait is at most this share of
# the slack beyond the net and at most this many changeovers: leaving costs a changeover and the
# rest of a tight deadline on on-demand, so a short outage is worth sitting out, a long one (or a
# tail of them) is not. Measured on the GCP H100 traces (docs/placement.md, "The deadline rule").
WAIT_SHARE_OF_SLACK = 2.0
WAIT_CHANGEOVERS = 2.0
# Behind the line, a wait with slack beyond the net for this many changeovers is held this many
# changeovers from its start before leaving, so placement may move it to Spot elsewhere (a move
# costs one changeover): at a tight deadline the alternative is the rest of the work on on-demand.
MOVE_HOLD_CHANGEOVERS = 3.0
MOVE_SLACK_CHANGEOVERS = 2.0
# On on-demand behind the line, go back to Spot for another run once the outage the outlook expects
# is over, while the slack beyond the net pays this many changeovers (the Spot run's, and the
# on-demand one it reserves again): at a tight deadline the alternative is the rest on on-demand.
SECOND_RUN_CHANGEOVERS = 2.0
# After this many preemptions of a Spot attempt within this many hours, with the slack beyond the
# net at most this many changeovers, a wait where it runs is treated as a long outage
# (`preempted_often`): short outages that come back spend the slack a changeover and an outage at
# a time, and a move is worth one only while the slack still pays it. One is enough: a move is
# made only while the rule spares its changeover (`spares_a_move`), and at this slack the outage
# and restart after a first preemption spend that, so by a second it is too late. Measured on the
# GCP H100 traces (docs/placement.md, "Robust placement"). At one, a reclaim of several VMs (a
# preemption each: docs/signals.md) reads as the one outage it is; more would count it per VM.
QUICK_PREEMPTIONS = 1
QUICK_PREEMPTION_HOURS = 4.0
QUICK_SLACK_CHANGEOVERS = 4.0
# With at least this many changeovers of slack beyond the net, `sits_out` sits out an expected
# outage of up to this many changeovers (instead of `WAIT_CHANGEOVERS`): such slack pays the wait
# many times over, and a move pays the other location's dearer Spot for the rest of the work (the
# shared traces' 1.5, 24 to 32 changeovers: a job left us-east4 for europe-west1 ten minutes before
# us-east4 came back). Narrow on purpose: SkyNomad's 1.1 and the shared 1.2 stay under it.
# Measured on the GCP H100 traces (docs/placement.md, "Robust placement", fifth pass).
LONG_SLACK_CHANGEOVERS = 24.0
LONG_SLACK_WAIT_CHANGEOVERS = 3.0


class Rule(StrEnum):
    GREEDY = "greedy"
    UNIFORM_PROGRESS = "uniform_progress"
    SPOTJOBS = "spotjobs"


class Placement(StrEnum):
    """Where the job is: a Spot attempt waiting for capacity (or restarting), running on Spot, or
    running on on-demand (STANDARD)."""

    WAITING_FOR_SPOT = "waiting_for_spot"
    ON_SPOT = "on_spot"
    ON_DEMAND = "on_demand"


class Action(StrEnum):
    STAY = "stay"
    SWITCH_TO_ON_DEMAND = "switch_to_on_demand"
    BACK_TO_SPOT = "back_to_spot"


@dataclass(frozen=True)
class Work:
    """The job's work in steps (the trainer kit's `total_steps` and last committed step) and the
    seconds a step takes on each capacity type."""

    total_steps: int
    committed_steps: int
    spot_step_seconds: float
    on_demand_step_seconds: float | None = None  # None: as on Spot (the same machine type)

    @classmethod
    def in_seconds(cls, total_seconds: int, done_seconds: int) -> Work:
        """Work counted in seconds of compute (a step of one second)."""
        return cls(total_steps=total_seconds, committed_steps=done_seconds, spot_step_seconds=1.0)

    @property
    def done_fraction(self) -> float:
        return min(1.0, self.committed_steps / self.total_steps) if self.total_steps > 0 else 1.0

    def remaining_seconds(self, placement: Placement) -> float:
        per_step = self.spot_step_seconds
        if placement is Placement.ON_DEMAND and self.on_demand_step_seconds is not None:
            per_step = self.on_demand_step_seconds
        return max(0, self.total_steps - self.committed_steps) * per_step


@dataclass(frozen=True)
class Situation:
    now: datetime
    deadline: datetime
    started: datetime  # when the request began: Uniform Progress's line starts there
    work: Work
    placement: Placement
    placed_at: datetime  # when the current attempt was asked for (its changeover runs from there); a wait after a run: when it began
    changeover_seconds: float  # a high percentile of those seen (`changeover_estimate`)
    # The longest time until `decide_deadline` is asked again (a reconcile pass, a simulator tick): the
    # safety net fires that much earlier, so a decision made late by it is still in time.
    review_seconds: float
    spot_available: bool | None = None  # whether Spot could start now, when known
    # A Spot job not yet running, counted on Spot for its changeover: how late its wait may be seen
    # should the changeover end without capacity (in production a reconcile interval: a job waiting
    # for capacity writes no line; the model's ticks see it at once).
    wait_seen_within_seconds: float = 0.0
    spot_outlook: SpotOutlook | None = None  # the fleet's estimate of Spot where it waits, when known


@dataclass(frozen=True)
class DeadlineDecision:
    action: Action
    reason: str
    slack_seconds: float  # time to the deadline minus what on-demand from now needs
    progress: float  # committed fraction of the work
    expected_progress: float  # Uniform Progress's line now
    # How long this decision holds if nothing happens (no preemption, no Spot capacity, progress
    # as planned); None: until something happens. Callers may decide again sooner, never later.
    holds_seconds: float | None
    # A wait held only for a move (`MOVE_HOLD_CHANGEOVERS`): staying, it goes to on-demand next.
    held_for_move: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "action": self.action.value,
            "reason": self.reason,
            "slack_seconds": round(self.slack_seconds, 1),
            "progress": round(self.progress, 4),
            "expected_progress": round(self.expected_progress, 4),
            "holds_seconds": None if self.holds_seconds is None else round(self.holds_seconds, 1),
        }


def decide_deadline(situation: Situation, rule: Rule = Rule.SPOTJOBS) -> DeadlineDecision:
    """What to do now; see the module docstring for the rules."""
    s = situation
    d = s.changeover_seconds
    slack = _slack(s)
    progress = s.work.done_fraction
    expected = _expected(s, 0.0)

    def decision(action: Action, reason: str, holds: float | None = None, for_move: bool = False) -> DeadlineDecision:
        return DeadlineDecision(action, reason, slack, progress, expected, holds, for_move)

    if s.work.committed_steps >= s.work.total_steps:
        return decision(Action.STAY, "done")
    if s.placement is Placement.ON_SPOT:
        # A Spot run started with less than 2d of slack (a request submitted late, a pending Spot
        # job that got capacity at the last moment) could be preempted after the point where
        # on-demand still fits: slack minus the changeover it still has to pay stays the same all
        # through the changeover, so when it is negative, leave now. A job not yet running may
        # turn out to be waiting when its changeover ends, seen only that much later: keep it too.
        spot_changeover_left = max(0.0, d - (s.now - s.placed_at).total_seconds())
        if slack - spot_changeover_left < s.wait_seen_within_seconds:
            unseen = (
                f", its wait seen up to {s.wait_seen_within_seconds:.0f} s late" if s.wait_seen_within_seconds else ""
            )
            return decision(
                Action.SWITCH_TO_ON_DEMAND,
                f"safety net: Spot started with too little slack ({slack:.0f} s, changeover left "
                f"{spot_changeover_left:.0f} s{unseen})",
            )
        return decision(Action.STAY, "exploitation: on Spot, stay until preempted")
    net = safety_net_seconds(s)
    if s.placement is Placement.WAITING_FOR_SPOT:
        if slack < net:
            return decision(Action.SWITCH_TO_ON_DEMAND, f"safety net: slack {slack:.0f} s < 2d + m = {net:.0f} s")
        if rule is Rule.GREEDY:
            return decision(Action.STAY, "waiting for Spot: slack to spare", slack - net)
        if rule is Rule.SPOTJOBS and progress < expected and s.spot_outlook is not None:
            wait = s.spot_outlook.expected_wait_seconds
            if wait <= min(WAIT_SHARE_OF_SLACK * (slack - net), WAIT_CHANGEOVERS * d):
                return decision(
                    Action.STAY,
                    f"waiting for Spot behind the line: the fleet's expected wait {wait:.0f} s is short "
                    f"against the slack beyond the net ({slack - net:.0f} s) and the changeover",
                    slack - net - wait / WAIT_SHARE_OF_SLACK,
                )
        # Held from the wait's start, or from when it fell behind the line (a wait that began ahead).
        waited = min((s.now - s.placed_at).total_seconds(), max(0.0, -_until_behind(s)))
        if (
            rule is Rule.SPOTJOBS
            and progress < expected
            and s.spot_outlook is not None
            and waited <= MOVE_HOLD_CHANGEOVERS * d
            and slack - net > MOVE_SLACK_CHANGEOVERS * d
        ):
            return decision(
                Action.STAY,
                f"waiting for Spot behind the line: held {MOVE_HOLD_CHANGEOVERS:g} changeovers for a move to "
                f"another location (slack beyond the net {slack - net:.0f} s)",
                min(slack - net - d, MOVE_HOLD_CHANGEOVERS * d - waited),
                for_move=True,
            )
        if progress < expected:
            return decision(
                Action.SWITCH_TO_ON_DEMAND,
                f"uniform progress: behind the line while waiting ({progress:.3f} < {expected:.3f})",
            )
        return decision(Action.STAY, "waiting for Spot: ahead of the line", min(slack - net, _until_behind(s)))
    if rule is Rule.GREEDY or slack < net:
        return decision(Action.STAY, f"on on-demand until done: slack {slack:.0f} s < 2d + m = {net:.0f} s")
    ahead_of = _expected(s, 2 * d)
    if progress < ahead_of:
        second_run = _second_spot_run_in(s, slack - net) if rule is Rule.SPOTJOBS else None
        if second_run == 0:
            return decision(
                Action.BACK_TO_SPOT,
                f"a second Spot run: the slack beyond the net ({slack - net:.0f} s) pays "
                f"{SECOND_RUN_CHANGEOVERS:g} changeovers and the outage expected there is over",
            )
        holds = _until_caught_up(s)
        if second_run is not None:
            holds = second_run if holds is None else min(holds, second_run)
        return decision(
            Action.STAY,
            f"hysteresis: on on-demand until ahead of the line 2d on ({progress:.3f} < {ahead_of:.3f})",
            holds,
        )
    if rule is Rule.SPOTJOBS and s.spot_available is False:
        return decision(Action.STAY, "ahead of the line, but Spot has no capacity now")
    return decision(Action.BACK_TO_SPOT, f"ahead of the line ({progress:.3f} >= {ahead_of:.3f}): back to Spot")


def sits_out(
    situation: Situation, outlook: SpotOutlook | None, review_seconds: float, rule: Rule = Rule.SPOTJOBS
) -> bool:
    """Whether a Spot job waiting for capacity should stay where it is rather than move: the
    fleet's expected outage there (`outlook`, estimated now: the claim's goes stale) is at most
    `WAIT_CHANGEOVERS` changeovers (`LONG_SLACK_WAIT_CHANGEOVERS` with `LONG_SLACK_CHANGEOVERS`
    of slack beyond the net) and the slack beyond the net, and the wait is not yet longer than that
    outage, or a changeover. Where outages are short a move (a changeover, and a region the fleet
    may know less) costs more than the rest of the wait; past the expected outage this one is not
    short after all, and placement weighs a move again. That needs a later review: when `rule`
    would no longer spare a move at the next one, `review_seconds` on (the reconcile interval;
    `spares_a_move`), this is the last chance, and a job that sat out an outage outlasting it would
    end the wait on on-demand, not in a move."""
    if outlook is None:
        return False
    wait, d = outlook.expected_wait_seconds, situation.changeover_seconds
    next_review = replace(situation, now=situation.now + timedelta(seconds=review_seconds))
    if not spares_a_move(decide_deadline(next_review, rule), d):
        return False
    beyond_net = _slack(situation) - safety_net_seconds(situation)
    waited = (situation.now - situation.placed_at).total_seconds()
    short = LONG_SLACK_WAIT_CHANGEOVERS if beyond_net >= LONG_SLACK_CHANGEOVERS * d else WAIT_CHANGEOVERS
    return wait <= min(short * d, beyond_net) and waited <= max(wait, d)


def spares_a_move(decision: DeadlineDecision, changeover_seconds: float) -> bool:
    """Whether the rule's decision on a wait for Spot leaves room to move the job: it stays, for
    more than a changeover. The rule decides nothing while a move's hand-over runs, so the move's
    changeover must come out of the slack beyond the net, not out of the net."""
    holds = decision.holds_seconds
    return decision.action is Action.STAY and holds is not None and holds > changeover_seconds


def preempted_often(situation: Situation, preempted_at: Sequence[datetime]) -> bool:
    """Whether a Spot job waiting for capacity should be placed again at once, staying costed as
    the rest of the work on on-demand: its attempt was preempted `QUICK_PREEMPTIONS` times within
    `QUICK_PREEMPTION_HOURS` (`preempted_at`, when its preemptions were seen, not decided),
    and the slack beyond the net is at most `QUICK_SLACK_CHANGEOVERS` changeovers. Each short
    outage that ends inside the rule's hold still costs an outage and a changeover of slack; a
    few of them spend the slack before a move is weighed (a wait shorter than a changeover, or
    one `sits_out` keeps), and the job ends on on-demand where it was; by then the slack no longer
    spares a move's changeover. Larger slack pays for them."""
    if situation.placement is not Placement.WAITING_FOR_SPOT:
        return False
    window = QUICK_PREEMPTION_HOURS * 3600
    recent = sum(1 for moment in preempted_at if 0 <= (situation.now - moment).total_seconds() <= window)
    beyond_net = _slack(situation) - safety_net_seconds(situation)
    return recent >= QUICK_PREEMPTIONS and beyond_net <= QUICK_SLACK_CHANGEOVERS * situation.changeover_seconds


def _second_spot_run_in(s: Situation, beyond_net: float) -> float | None:
    """How long until an on-demand job behind the line goes back to Spot for another run (0: now);
    None when this slack and outlook give it none. The slack beyond the net must pay
    `SECOND_RUN_CHANGEOVERS` changeovers, so the net still fires in time at its next preemption;
    Spot must not be known to have no capacity; and the job has run on on-demand for its changeover
    and the outage the outlook expects (back sooner, it would only wait)."""
    if s.spot_outlook is None or s.spot_available is False:
        return None
    if beyond_net < SECOND_RUN_CHANGEOVERS * s.changeover_seconds:
        return None
    on_demand_for = (s.now - s.placed_at).total_seconds()
    return max(0.0, s.changeover_seconds + s.spot_outlook.expected_wait_seconds - on_demand_for)


def longest_unasked_seconds(reconcile_interval_seconds: float) -> float:
    """The longest a job that writes no line (a Spot job waiting for capacity) goes without a
    reconcile pass deciding on it, when at most one pass in a row dies: up to an interval from the
    last pass that decided to the one that died, its run lease (`shared.ledger.run_lock`: every
    tick within it ends at once), and up to an interval to the first tick after the lease. The
    deadline rule's m (docs/deadlines.md, "Why no deadline is missed"); two dead passes in a row
    are outside it."""
    return 2 * reconcile_interval_seconds + LEASE_SECONDS


def safety_net_seconds(situation: Situation) -> float:
    """2d + m: below this slack a wait for Spot, or a new Spot run, could leave on-demand too
    little time; the rule then goes to on-demand whatever else it knows."""
    return 2 * situation.changeover_seconds + situation.review_seconds


def changeover_estimate(
    observed_seconds: Sequence[float],
    prior_seconds: float,
    percentile: float = CHANGEOVER_PERCENTILE,
) -> float:
    """The changeover to plan with: a high percentile of those observed (per machine type and
    location), never below the prior (`Settings.changeover_prior_seconds`). The prior stays a
    floor however many were seen: the p90 of a handful is their largest, often below the true
    p90, and the rule's guarantee needs d not underestimated (issue 31)."""
    if not observed_seconds:
        return prior_seconds
    ordered = sorted(observed_seconds)
    return max(prior_seconds, ordered[min(len(ordered) - 1, math.ceil(percentile * len(ordered)) - 1)])


def _slack(s: Situation) -> float:
    """The time to the deadline less what on-demand from now needs (the work and the changeover left)."""
    return (s.deadline - s.now).total_seconds() - s.work.remaining_seconds(Placement.ON_DEMAND) - _changeover_left(s)


def _changeover_left(s: Situation) -> float:
    """The changeover still ahead before on-demand makes progress: all of it unless the job is on
    on-demand already, then what is left of the one under way."""
    if s.placement is not Placement.ON_DEMAND:
        return s.changeover_seconds
    return max(0.0, s.changeover_seconds - (s.now - s.placed_at).total_seconds())


def _span(s: Situation) -> float:
    return max(1e-9, (s.deadline - s.started).total_seconds())


def _expected(s: Situation, ahead_seconds: float) -> float:
    """Uniform Progress's line: the share of the work done by now + ahead_seconds."""
    return min(1.0, max(0.0, ((s.now - s.started).total_seconds() + ahead_seconds) / _span(s)))


def _until_behind(s: Situation) -> float:
    """Waiting (no progress), the line reaches the committed progress in this long."""
    return s.work.done_fraction * _span(s) - (s.now - s.started).total_seconds()


def _until_caught_up(s: Situation) -> float | None:
    """On on-demand, progress passes the line 2d on in this long (after the changeover left)."""
    rate = 1.0 / max(1e-9, s.work.total_steps * (s.work.on_demand_step_seconds or s.work.spot_step_seconds))
    line_rate = 1.0 / _span(s)
    if rate <= line_rate:
        return None
    pending = _changeover_left(s)
    gap = _expected(s, 2 * s.changeover_seconds + pending) - s.work.done_fraction
    return pending + max(0.0, gap) / (rate - line_rate)
