"""The deadline rule replayed event by event, the way production asks it (issue 31).

The tick model of `bench.deadline_sim` commits work continuously, preempts on tick boundaries,
asks the rule exactly there and knows d. Here the production input builder decides instead:
`shared.deciding.deadline_watch.deadline_situation`, reading a `RequestRecord` kept the way the
ledger keeps it (kit lines through `note_kit_line`, `note_progress` and `count_preemptions`, the
Vertex times of each attempt), then `decide_deadline`. The model:

- the trainer commits every I seconds of progress (`checkpoint_seconds`); a preemption or a cancel
  loses the work since the last commit, and the record sees only committed steps;
- every new instance (an attempt's job, a Spot restart after a preemption) pays a changeover drawn
  from a lognormal (median 8 min, p90 15 min), optionally with a heavy tail (5% drawn from 45 to
  90 min); the changeover is the job's create (or its Spot capacity) to the kit's `run_started`,
  which is also when Vertex reports it RUNNING, so the on-demand create-to-running times d is
  estimated from are the changeovers themselves;
- the fleet has seen `fleet_changeovers` earlier on-demand changeovers in the location, drawn from
  the same distribution (its own random stream, so 0 replays exactly what a lone request sees):
  every attempt is created through production's claim placement (`place_claimed`), which
  snapshots the fleet's changeover bound into the attempt for `deadline_situation`;
- Spot capacity follows the trace, shifted by a random phase per run; a Spot job waits for it,
  is restarted after each preemption (Vertex's six restarts, then a new Spot attempt);
- the rule is asked at each kit line (progress once a minute, each commit, each run start, each
  preemption) and at each reconcile pass (every `Settings.reconcile_interval_seconds`, random
  phase); a switch is the cancel, then the next attempt created 30 to 120 s after the decision
  (the cancel confirmed, the re-queue published, the create sent), then its changeover.

Between two changes of the record only the time moves, and the rule's answer moves at most once
from stay to a switch (waiting and on Spot the slack only falls and the line only rises; on
on-demand a "back to Spot" can only come first, when progress jumps at a commit). So each stretch
asks its first and last moments and bisects between them; `exhaustive=True` asks every moment
(a test checks both give the same outcome).
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, field
from datetime import timedelta

from spotjobs_kit.lines import CHECKPOINT_COMMITTED, PREEMPTED, RUN_STARTED, KitRecord

from bench.deadline_sim import HOUR, Outcome, Trace
from devstack.vertex.logs import MAX_SPOT_RESTARTS
from shared.clock import EPOCH, iso
from shared.deciding.deadline import Action, Rule, decide_deadline
from shared.deciding.deadline_watch import deadline_situation, no_spot_capacity_until, note_progress
from shared.deciding.effects import Effects
from shared.deciding.preemptions import count_preemptions, note_kit_line
from shared.fleet.observations import FleetFact, Kind
from shared.fleet.placing import Placer, place_claimed
from shared.jobs import JobState
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome
from shared.requests.attempts import ON_DEMAND, SPOT
from shared.settings import Settings

CHANGEOVER_MEDIAN_SECONDS = 480.0
CHANGEOVER_P90_SECONDS = 900.0
CHANGEOVER_SIGMA = math.log(CHANGEOVER_P90_SECONDS / CHANGEOVER_MEDIAN_SECONDS) / 1.2816  # z of the p90
TAIL_SHARE, TAIL_SECONDS = 0.05, (2700.0, 5400.0)
PROGRESS_EVERY_SECONDS = 60.0  # the kit writes progress at most once a minute
DECISION_TO_CREATE_SECONDS = (30.0, 120.0)
LOCATION = "us-central1"
# A machine class for the claim to read the fleet's facts of (any: the bench has one class).
CUSTOM_JOB = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "a2-highgpu-1g"}}]}}


@dataclass(frozen=True)
class EventJob:
    work_seconds: int  # steps of one second
    deadline_seconds: float  # after the request's creation
    checkpoint_seconds: int  # progress between two commits
    price_ratio: float
    changeover_median_seconds: float = CHANGEOVER_MEDIAN_SECONDS
    changeover_tail: bool = False
    fleet_changeovers: int = 0  # on-demand changeovers the fleet saw in the location before


@dataclass(frozen=True)
class EventOutcome(Outcome):
    switches: int = 0


@dataclass
class _Job:
    """The current attempt's Vertex job as the simulator knows it (the record holds what production sees)."""

    attempt: Attempt
    created: float
    capacity_at: float | None = None  # when it got its machine (billing starts); None: waiting
    ready_at: float | None = None  # when the changeover ends and the run starts
    run_start: float | None = None  # the current run makes progress since then
    run: int = -1
    base: int = 0  # the committed step the run resumed from


@dataclass
class _Run:
    job: EventJob
    trace: Trace
    start: int
    rule: Rule | None  # None: on-demand only
    rng: random.Random
    settings: Settings
    exhaustive: bool
    record: RequestRecord = field(init=False)
    phase: float = field(init=False)  # the trace's ticks, shifted
    reconcile_phase: float = field(init=False)
    committed: int = 0
    spend: dict[str, float] = field(default_factory=lambda: {SPOT: 0.0, ON_DEMAND: 0.0})
    work: dict[str, float] = field(default_factory=lambda: {SPOT: 0.0, ON_DEMAND: 0.0})
    switches: int = 0
    current: _Job | None = None
    fleet: tuple[FleetFact, ...] = ()  # the fleet's facts before the request

    def __post_init__(self) -> None:
        g = self.trace.gap_seconds
        self.phase = self.rng.uniform(0, g)
        self.reconcile_phase = self.rng.uniform(0, self.settings.reconcile_interval_seconds)
        request = {
            "request_id": "bench",
            "deadline": iso(at(self.job.deadline_seconds)),
            "total_steps": self.job.work_seconds,
            "expected_step_seconds": 1.0,
            "custom_job": CUSTOM_JOB,
        }
        self.record = RequestRecord("bench", request, "gs://bench/requests/bench/", created_at=iso(at(0.0)))

    # Spot capacity, from the trace.

    def _tick(self, t: float) -> int:
        return self.start + int((t + self.phase) // self.trace.gap_seconds)

    def capacity(self, t: float) -> bool:
        i = self._tick(t)
        return i < len(self.trace.available) and self.trace.available[i]

    def next_change(self, t: float) -> float:
        """When Spot capacity next appears or goes, after t."""
        i = self._tick(t)
        j = self.trace.next_change[i] if i < len(self.trace.available) else math.inf
        return j if j == math.inf else (j - self.start) * self.trace.gap_seconds - self.phase

    def changeover(self) -> float:
        return draw_changeover(self.rng, self.job)

    # The production side: the record and the rule.

    def action(self, t: float) -> Action:
        if self.rule is None:
            return Action.STAY
        s = self.settings
        situation = deadline_situation(
            self.record,
            at(t),
            prior_seconds=s.changeover_prior_seconds,
            review_seconds=s.reconcile_interval_seconds,
            checkpoint_prior_seconds=s.checkpoint_prior_seconds,
        )
        if situation is None:
            return Action.STAY
        action = decide_deadline(situation, self.rule).action
        strategy = self.record.latest.strategy
        # What `watch_deadline` carries out: a Spot attempt to on-demand, an on-demand one back to Spot.
        if (action is Action.SWITCH_TO_ON_DEMAND and strategy == SPOT) or (
            action is Action.BACK_TO_SPOT and strategy != SPOT
        ):
            return action
        return Action.STAY

    def kit(self, event: str, t: float, **fields: object) -> None:
        job = self.current
        line = KitRecord(event=event, attempt=job.attempt.n, run=job.run, time=iso(at(t)), **fields)
        if note_kit_line(self.record, job.attempt, line, at(t), Effects()):
            note_progress(job.attempt, line.total_steps, line.steps_per_second)
        if event != CHECKPOINT_COMMITTED:  # a commit is no evidence of a preemption
            count_preemptions(
                self.record,
                job.attempt,
                None,
                None,
                fresh=False,
                storm_threshold=10**6,
                now=at(t),
                seen_at=at(t),
                effects=Effects(),
            )

    def create(self, t: float, strategy: str) -> None:
        n = len(self.record.attempts) + 1
        attempt = Attempt(
            n,
            LOCATION,
            strategy,
            claimed_at=iso(at(t)),
            job=f"projects/p/locations/{LOCATION}/customJobs/{n}",
            state=JobState.QUEUED,
            created_at=iso(at(t)),
        )
        self.record.attempts.append(attempt)
        # The claim's placement, as submit's: one location, so only a deadline's fleet read.
        placer = Placer(
            lambda _: self.fleet, lambda _type, _location: None, at(t), self.settings.changeover_prior_seconds
        )
        place_claimed(placer, self.record, attempt)
        self.current = _Job(attempt, t)
        if strategy != SPOT:
            self._got_machine(t)

    def _got_machine(self, t: float) -> None:
        self.current.capacity_at = t
        self.current.ready_at = t + self.changeover()

    def stop(self, t: float, billed_until: float) -> None:
        """The current job ends at t (a preemption or a cancel): the work since the last commit is lost."""
        job = self.current
        if job.capacity_at is not None:
            self.spend[SPOT if job.attempt.strategy == SPOT else ON_DEMAND] += billed_until - job.capacity_at
        job.capacity_at = job.ready_at = job.run_start = None

    # The clock.

    def ask_times(self, t: float, until: float) -> list[float]:
        """When production asks between t (excluded) and until (excluded): progress lines and
        reconcile passes."""
        m = self.settings.reconcile_interval_seconds
        first = self.reconcile_phase + m * math.floor((t - self.reconcile_phase) / m + 1)
        times = [first + m * i for i in range(max(0, math.ceil((until - first) / m)))]
        job = self.current
        if job is not None and job.run_start is not None:
            p = PROGRESS_EVERY_SECONDS
            lines = job.run_start + p * math.floor((t - job.run_start) / p + 1)
            times += [lines + p * i for i in range(max(0, math.ceil((until - lines) / p)))]
            times.sort()
        return [x for x in times if t < x < until]

    def first_move(self, times: list[float]) -> tuple[float, Action] | None:
        """The first of `times` where the rule moves (see the module docstring for the bisection),
        in two pieces when the back-off on Spot capacity ends among them."""
        until = no_spot_capacity_until(self.record)
        end = (until - EPOCH).total_seconds() if until is not None else -math.inf
        split = next((i for i, x in enumerate(times) if x >= end), len(times))
        return self._first_move(times[:split]) or self._first_move(times[split:])

    def _first_move(self, times: list[float]) -> tuple[float, Action] | None:
        if not times:
            return None
        if self.exhaustive:
            for x in times:
                if (action := self.action(x)) is not Action.STAY:
                    return x, action
            return None
        if (action := self.action(times[0])) is not Action.STAY:
            return times[0], action
        if (last := self.action(times[-1])) is Action.STAY:
            return None
        lo, hi, found = 0, len(times) - 1, last
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if (action := self.action(times[mid])) is Action.STAY:
                lo = mid
            else:
                hi, found = mid, action
        return times[hi], found


@functools.lru_cache(maxsize=1)  # the policies of one cell replay each seed in turn (run_event_cells)
def fleet_history(seed: str, job: EventJob) -> tuple[FleetFact, ...]:
    """The fleet's earlier on-demand changeovers, on a random stream of their own: the request's
    draws are as with none. All an hour before the request (the bound weighs no age), each another
    attempt's (the fleet reads a fact of one attempt once)."""
    history, seen = random.Random(f"{seed}:fleet"), at(-3600.0)
    return tuple(
        FleetFact(Kind.CHANGEOVER, LOCATION, seen, draw_changeover(history, job), attempt_key=f"fleet-{n}")
        for n in range(job.fleet_changeovers)
    )


def draw_changeover(rng: random.Random, job: EventJob) -> float:
    """One move's changeover: the lognormal, or with the tail 5% from 45 to 90 min."""
    if job.changeover_tail and rng.random() < TAIL_SHARE:
        return rng.uniform(*TAIL_SECONDS)
    return rng.lognormvariate(math.log(job.changeover_median_seconds), CHANGEOVER_SIGMA)


def at(seconds: float):
    return EPOCH + timedelta(seconds=seconds)


def simulate_events(
    job: EventJob,
    trace: Trace,
    start: int,
    rule: Rule | None,
    seed: str,
    *,
    settings: Settings | None = None,
    exhaustive: bool = False,
) -> EventOutcome:
    """One request from its creation to its last commit; `rule` None runs on on-demand only."""
    run = _Run(job, trace, start, rule, random.Random(seed), settings or Settings.from_env(), exhaustive)
    run.fleet = fleet_history(seed, job) if rule is not None else ()  # on-demand only asks no rule
    total, interval = job.work_seconds, job.checkpoint_seconds
    give_up = job.deadline_seconds + 2 * total
    run.create(0.0, SPOT if rule is not None else ON_DEMAND)
    t, asked_now = 0.0, False  # asked_now: a kit line at t, which production asks at
    pending: tuple[float, str] | None = None  # a switch decided: (create at, strategy)
    while True:
        current = run.current
        spot = current.attempt.strategy == SPOT
        # The next change of the record, and what it is.
        if pending is not None:
            until, kind = pending[0], "create"
        elif current.capacity_at is None:
            until, kind = (t if run.capacity(t) else run.next_change(t)), "capacity"
        elif current.run_start is None:
            until, kind = current.ready_at, "run_started"
            if spot and (lost := run.next_change(t) if run.capacity(t) else t) < until:
                until, kind = lost, "lost"  # reclaimed before its run began: Vertex waits again, no kit line
        else:
            done = current.base + (t - current.run_start)
            following = current.base + interval * (math.floor((done - current.base) / interval + 1e-9) + 1)
            commit_step = min(total, following)
            until, kind = current.run_start + (commit_step - current.base), "commit"
            if spot:
                lost = run.next_change(t) if run.capacity(t) else t
                if lost < until:
                    until, kind = lost, "preempted"
        horizon = min(until, give_up)
        if pending is None:
            move = run.first_move(([t] if asked_now else []) + run.ask_times(t, horizon))
            if move is not None:
                t, action = move
                wait = run.rng.uniform(*DECISION_TO_CREATE_SECONDS)
                run.stop(t, billed_until=t + wait)  # billed until its cancel is through
                to_spot = action is Action.BACK_TO_SPOT
                current.attempt.outcome = (
                    AttemptOutcome.SWITCHED_TO_SPOT if to_spot else AttemptOutcome.SWITCHED_TO_ON_DEMAND
                )
                current.attempt.cancel_decided_at = iso(at(t))
                pending = (t + wait, SPOT if to_spot else ON_DEMAND)
                run.switches += 1
                asked_now = False
                continue
        if until >= give_up:
            break
        t, asked_now = until, False
        if kind == "create":
            run.create(t, pending[1])
            pending = None
        elif kind == "capacity":
            run._got_machine(t)
        elif kind == "lost":
            run.stop(t, t)
        elif kind == "run_started":
            current.run += 1
            current.run_start, current.base = t, run.committed
            current.attempt.state = JobState.RUNNING
            current.attempt.started_at = current.attempt.started_at or iso(at(t))
            current.attempt.state_changed_at = iso(at(t))
            run.kit(RUN_STARTED, t, step=run.committed, total_steps=total, steps_per_second=1.0)
            asked_now = True
        elif kind == "commit":
            run.work[SPOT if spot else ON_DEMAND] += commit_step - run.committed
            run.committed = commit_step
            run.kit(CHECKPOINT_COMMITTED, t, step=commit_step)
            if commit_step >= total:
                run.stop(t, t)
                return _outcome(run, missed=t > job.deadline_seconds)
            asked_now = True
        else:  # preempted
            run.stop(t, t)
            run.kit(PREEMPTED, t)
            if current.attempt.preemptions > MAX_SPOT_RESTARTS:
                current.attempt.outcome = AttemptOutcome.REQUEUED  # a STOCKOUT: the next Spot attempt
                current.attempt.state = JobState.FAILED
                pending = (t + run.rng.uniform(*DECISION_TO_CREATE_SECONDS), SPOT)
            asked_now = True
    # Not done long after the deadline: finish on on-demand (so its cost still counts).
    left = total - run.committed
    run.spend[ON_DEMAND] += left + job.changeover_median_seconds
    run.work[ON_DEMAND] += left
    return _outcome(run, missed=True)


def _outcome(run: _Run, missed: bool) -> EventOutcome:
    job = run.job
    cost = run.spend[SPOT] + job.price_ratio * run.spend[ON_DEMAND]
    return EventOutcome(
        cost=cost / (job.price_ratio * (job.work_seconds + job.changeover_median_seconds)),
        spot_work_hours=run.work[SPOT] / HOUR,
        on_demand_work_hours=run.work[ON_DEMAND] / HOUR,
        missed=missed,
        switches=run.switches,
    )
