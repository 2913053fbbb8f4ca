"""The deadline rule wired into the decisions: what a request's record says of its deadline, and a
switch to on-demand when `shared.deciding.deadline.decide_deadline` asks for one.

`decide` calls `watch_deadline` for the latest attempt of a request that has a `deadline`, on
every observation: a kit line (progress, checkpoint, run started), a service line, and every
reconcile pass (so a Spot job left waiting for capacity, which writes no line, is still seen).
The inputs come from the record alone (`deadline_situation`, which `spotjobs status` uses too):

- the work: `total_steps` of the envelope, else the kit's (run_started, progress); the committed
  step is the last checkpoint_committed line of any attempt (the checkpoint folder is the
  request's, so the next attempt resumes from it);
- seconds per step per capacity type: the kit's latest progress rate of the latest attempt on
  that capacity type; on-demand falls back to the envelope's `expected_step_seconds`, and either
  to the other's;
- the changeover: the envelope's `changeover_seconds`, else the largest of the prior,
  `changeover_estimate` of the create-to-running times Vertex reported for this request's
  on-demand attempts in the location (a Spot attempt's own wait for capacity is no changeover of
  on-demand's), and the fleet's bound there snapshotted at the claim (`fleet_changeover`): a
  request sees a handful of its own moves, the fleet its tail;
- the review interval: the longest a job waiting for Spot may go unasked (`longest_unasked_seconds`
  of the reconcile interval, `Settings.reconcile_interval_seconds`: a pass that dies holds the run
  lock for its lease) plus the checkpoint interval (`checkpoint_interval`): between two commits
  the committed slack falls as if the job waited, so a commit may come up to one interval after
  the moment that mattered;
- whether Spot has capacity: known to have none for a back-off after the request's last tries of
  Spot found none (`no_spot_capacity_until`); else, before a move back to Spot only, the fleet's
  estimate where the attempt runs (`FleetView.has_capacity`: `shared.fleet.placing.Placer`, one
  listing of the class's observations, which `apply_observation` reads for the decision); else
  unknown.
- the fleet's outlook of Spot where a Spot attempt waits: what its claim kept of the estimate
  (`Attempt.spot_outlook`: the share of the time with capacity, the mean lifetime), so a kit
  line reads no fleet observation. Where the claim kept none (nothing seen there yet: a lone
  request's first attempt, a new class) and the rule would leave the wait, the fleet's outlook
  now (`FleetView.spot_outlook`, which by then holds the attempt's own runs) is asked, kept in
  the attempt, and the rule asked again; without one the rule is Uniform Progress.

A switch is a decision like any other, made in the record under compare-and-swap: the Spot
attempt's outcome becomes SWITCHED_TO_ON_DEMAND (set once, so a redelivery or a concurrent pass
decides nothing again), its job's cancel is written pending (`Attempt.cancel_decided_at`) and
attempt n+1 on STANDARD in the same location is the record's re-queue; the outbox
(`shared.deciding.outbox.flush`) sends the cancel, and the re-queue is published once Vertex
reports the cancelled job ended (`Attempt.ending`), by the observation that sees it. A switch to
STANDARD is made only where the deployment's policy allows it for attempt n+1. "Back to Spot"
(Uniform Progress's hysteresis done) is the same move the other way: SWITCHED_TO_SPOT, and
attempt n+1 on SPOT.

A Spot job queued or pending for less than one changeover since it was asked for is counted as
on Spot within its changeover (the model's first d seconds of a new instance: Vertex queues and
provisions a job for minutes even when capacity is there); past that it is waiting for Spot,
which no line says: only a reconcile pass sees it, so such a job stays on Spot only with slack
beyond its changeover for the longest a job goes unasked (`wait_seen_within_seconds`, seed 5002).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from shared.alerts import Alert, AlertKind
from shared.clock import iso, parse_iso
from shared.deciding.deadline import (
    Action,
    DeadlineDecision,
    Placement,
    Situation,
    Work,
    changeover_estimate,
    decide_deadline,
    longest_unasked_seconds,
    safety_net_seconds,
)
from shared.deciding.effects import Effects, LogLine, attempt_alert, event_fields
from shared.deciding.handover import decide_handover
from shared.deciding.preemptions import preempted_in_last_run
from shared.errors import Violation
from shared.fleet.estimate import SpotOutlook
from shared.jobs import JobState
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome
from shared.requests.attempts import ON_DEMAND, SPOT

SWITCH_REASON = "deadline"


class FleetView(Protocol):
    """What the deadline rule may ask of the fleet's observations (`shared.fleet.placing.Placer`),
    only where the answer can change the rule's: None is "unknown"."""

    def has_capacity(self, request: Mapping[str, Any], location: str) -> bool | None: ...

    def spot_outlook(self, request: Mapping[str, Any], location: str) -> SpotOutlook | None: ...


# The back-off on Spot after tries that found no capacity doubles at most this often (1,024 times
# the last wait): the streak of a rule that ignores it (Uniform Progress) grows without bound.
BACK_OFF_DOUBLINGS = 10


def note_progress(attempt: Attempt, total_steps: int | None, steps_per_second: float | None) -> None:
    """Keep what a kit line says of the work (its total) and the attempt's step rate."""
    if total_steps is not None and total_steps > 0:
        attempt.total_steps = total_steps
    if steps_per_second is not None and steps_per_second > 0:
        attempt.steps_per_second = steps_per_second


def deadline_situation(
    record: RequestRecord,
    now: datetime,
    *,
    prior_seconds: float,
    review_seconds: float,
    checkpoint_prior_seconds: float,
    running: bool = False,
) -> Situation | None:
    """The deadline rule's inputs for the request's latest attempt; None without a deadline, or
    while the work or its rate is not known yet. `review_seconds`: the reconcile interval (the
    rule's review interval adds a dead pass's lease and the checkpoint interval to it). `running`:
    a kit line just said the job runs."""
    request = record.request
    latest = record.latest
    if not request.get("deadline") or latest is None:
        return None
    total = request.get("total_steps") or max((a.total_steps or 0 for a in record.attempts), default=0)
    on_demand_seconds = _step_seconds(record, on_demand=True) or request.get("expected_step_seconds")
    spot_seconds = _step_seconds(record, on_demand=False) or on_demand_seconds
    if not total or not spot_seconds:
        return None
    committed = max((a.last_checkpoint[1] for a in record.attempts if a.last_checkpoint), default=0)
    changeover = request.get("changeover_seconds")
    if changeover is None:
        own = changeover_estimate(_changeovers(record, latest.location), prior_seconds)
        changeover = max(own, fleet_changeover(record, latest.location) or 0.0)
    placement, placed_at, capacity_unseen = _placement(record, latest, running, float(changeover), now)
    unasked = longest_unasked_seconds(review_seconds)
    return Situation(
        now=now,
        deadline=parse_iso(request["deadline"]),
        started=parse_iso(record.created_at),
        work=Work(
            int(total),
            int(committed),
            float(spot_seconds),
            None if on_demand_seconds is None else float(on_demand_seconds),
        ),
        placement=placement,
        placed_at=min(now, placed_at),
        changeover_seconds=float(changeover),
        review_seconds=unasked + checkpoint_interval(record, checkpoint_prior_seconds),
        wait_seen_within_seconds=unasked if capacity_unseen else 0.0,  # by a pass
        spot_available=False if (until := no_spot_capacity_until(record)) and now < until else None,
        spot_outlook=SpotOutlook.from_json(latest.spot_outlook) if latest.strategy == SPOT else None,
    )


def checkpoint_interval(record: RequestRecord, prior_seconds: float) -> float:
    """Seconds between two commits of the trainer: the longest mean interval of an attempt that
    committed twice or more (a restart's wait after a preemption lengthens it: the safe side);
    the prior until one is seen."""
    seen = [a.mean_checkpoint_interval for a in record.attempts]
    return max((s for s in seen if s is not None), default=prior_seconds)


def no_spot_capacity_until(record: RequestRecord) -> datetime | None:
    """Until when Spot is taken to have no capacity (`Situation.spot_available` False), when the
    request's last tries of Spot found none: for as long as the last one waited in vain, doubled
    for each such try in a row (a back-off). Without it Uniform Progress goes back to Spot through
    a whole outage every few changeovers, each time a cancel, a create and an on-demand changeover
    (issue 31)."""
    futile: list[Attempt] = []
    for attempt in reversed(record.attempts):
        if attempt.strategy != SPOT:
            continue
        if attempt.started_at or attempt.outcome is not AttemptOutcome.SWITCHED_TO_ON_DEMAND:
            break
        futile.append(attempt)
    if not futile or not futile[0].cancel_decided_at:
        return None
    left = parse_iso(futile[0].cancel_decided_at)
    waited = (left - parse_iso(futile[0].created_at or futile[0].claimed_at)).total_seconds()
    return left + timedelta(seconds=waited * 2 ** min(len(futile) - 1, BACK_OFF_DOUBLINGS))


def watch_deadline(
    record: RequestRecord,
    attempt: Attempt,
    now: datetime,
    effects: Effects,
    *,
    prior_seconds: float,
    review_seconds: float,
    refuses: Callable[[str], Violation | None],
    checkpoint_prior_seconds: float,
    running: bool = False,
    seen_at: datetime,
    read_at_vertex: bool = False,
    fleet: FleetView | None = None,
) -> DeadlineDecision | None:
    """Ask the deadline rule about the request's current attempt and carry out its answer in the
    record: its alerts (once per request) and a switch to on-demand. `refuses(strategy)` is the
    deployment's policy for the next attempt, and the request's `max_cost_usd`: a switch it refuses is not made (the deployment's
    minimum of Spot attempts wins over a deadline, so a publisher gets by a deadline no fallback
    the policy refuses), and said once per attempt. `fleet` is asked only where its answer can
    change the rule's (`_asking_the_fleet`): so it is read once per such decision, not at every
    kit line. `seen_at`: when the observation saw the job not ended (a read's time, a line's own):
    missed if the deadline passed by then, else no word of it (issue 43). `read_at_vertex`: a read."""
    if record.latest is not attempt or attempt.outcome is not None or attempt.job is None:
        return None
    if record.is_terminal or record.requeue is not None or record.cancel is not None:
        return None  # finished, its next attempt decided, or cancelled: nothing to switch
    situation = deadline_situation(
        record,
        now,
        prior_seconds=prior_seconds,
        review_seconds=review_seconds,
        checkpoint_prior_seconds=checkpoint_prior_seconds,
        running=running,
    )
    if situation is None:
        return None
    decision = decide_deadline(situation)
    if fleet is not None:
        situation, decision = _asking_the_fleet(record, attempt, situation, decision, fleet)
    # With every step committed, a kit line cannot tell whether the job already ended in time (its
    # end judges it: `alert_if_finished_late`); a read at Vertex taken past the deadline that finds
    # it not ended can, whether that job or a successor waits (seed 4568).
    all_committed = situation.work.committed_steps >= situation.work.total_steps
    if not all_committed or (read_at_vertex and seen_at >= situation.deadline):
        _alert(record, attempt, situation, decision, now, effects, seen_at)
    if decision.action is Action.SWITCH_TO_ON_DEMAND and attempt.strategy == SPOT:
        refused = refuses(ON_DEMAND)
        if refused is None:
            _switch(record, attempt, decision, now, effects, ON_DEMAND)
        elif record.mark(f"deadline_switch_refused:{attempt.n}"):
            effects.lines.append(
                LogLine(
                    "WARNING",
                    f"attempt {attempt.n} of {record.request_id} stays on Spot: the deadline rule would move it "
                    f"to {ON_DEMAND} ({decision.reason}), which is refused ({refused})",
                    event_fields(
                        record, attempt, "deadline_switch_refused", refused=str(refused), **decision.to_json()
                    ),
                )
            )
    elif decision.action is Action.BACK_TO_SPOT and attempt.strategy != SPOT:
        _switch(record, attempt, decision, now, effects, SPOT)
    return decision


def _asking_the_fleet(
    record: RequestRecord, attempt: Attempt, situation: Situation, decision: DeadlineDecision, fleet: FleetView
) -> tuple[Situation, DeadlineDecision]:
    """The rule asked again with what the fleet says, where that can change its answer: before a
    move back to Spot (is there capacity now?), and before leaving a Spot wait whose claim kept no
    outlook above the safety net (the outlook now, kept in the attempt for the decisions after
    this one)."""
    if decision.action is Action.BACK_TO_SPOT and situation.spot_available is None:
        situation = replace(situation, spot_available=fleet.has_capacity(record.request, attempt.location))
    elif (
        decision.action is Action.SWITCH_TO_ON_DEMAND
        and situation.placement is Placement.WAITING_FOR_SPOT
        and situation.spot_outlook is None
        and decision.slack_seconds >= safety_net_seconds(situation)  # below it no outlook keeps the wait
    ):
        outlook = fleet.spot_outlook(record.request, attempt.location)
        if outlook is None:
            return situation, decision
        attempt.spot_outlook = outlook.to_json()
        situation = replace(situation, spot_outlook=outlook)
    else:
        return situation, decision
    return situation, decide_deadline(situation)


def alert_if_finished_late(record: RequestRecord, attempt: Attempt, now: datetime, effects: Effects) -> None:
    """A request that succeeded after its deadline (between two observations): `deadline_missed`,
    unless it was raised already."""
    at = record.request.get("deadline")
    ended = parse_iso(attempt.ended_at or iso(now))
    if not at or ended <= parse_iso(at) or not record.mark(str(AlertKind.DEADLINE_MISSED)):
        return
    message = f"{record.request_id} finished at {iso(ended)}, after its deadline {at}"
    effects.alerts.append(attempt_alert(record, attempt, AlertKind.DEADLINE_MISSED, now, message, deadline=at))
    effects.lines.append(LogLine("WARNING", message, event_fields(record, attempt, str(AlertKind.DEADLINE_MISSED))))


def alert_if_missed_while_ending(
    record: RequestRecord, attempt: Attempt, now: datetime, effects: Effects, seen_at: datetime
) -> None:
    """The deadline passed while the request's hand-over waits for the job it cancelled to end (a
    cancel Vertex refuses for good, or one it does not carry out): `deadline_missed`, once per
    request. The next attempt, whose watch would say it, cannot start before that end (seed 707).
    `seen_at`: when the observation saw the job not ended (it may have ended in time since)."""
    at = record.request.get("deadline")
    if not at or record.latest is not attempt or not attempt.ending or record.is_terminal or record.cancel:
        return  # no deadline, a successor that watches it, or cancelled: no deadline owed
    if seen_at < parse_iso(str(at)) or not record.mark(str(AlertKind.DEADLINE_MISSED)):
        return
    message = (
        f"{record.request_id} missed its deadline {at}: attempt {attempt.n}'s job has not ended since its "
        f"cancel, and attempt {attempt.n + 1} waits for it"
    )
    effects.alerts.append(attempt_alert(record, attempt, AlertKind.DEADLINE_MISSED, now, message, deadline=at))
    effects.lines.append(LogLine("WARNING", message, event_fields(record, attempt, str(AlertKind.DEADLINE_MISSED))))


def missed_waiting_for_a_create(record: RequestRecord, now: datetime) -> Alert | None:
    """`deadline_missed` for a request whose deadline passed while its next attempt waits for its
    create (a claim in the quota line or re-published after a refusal, a re-queue not yet claimed,
    or held for the end of a job a switch cancelled, which a read refused for good never sees:
    seed 167): no job for a read at Vertex to judge, and the create may come hours later, or never
    (review s10). Not a claim whose create is in doubt (`Attempt.create_in_doubt`). None when no such wait holds it, the deadline has not passed, or it was said."""
    at, latest = record.request.get("deadline"), record.latest
    if not at or latest is None or record.is_terminal or record.cancel is not None:
        return None
    claim_waits = latest.job is None and latest.outcome is None and not latest.create_in_doubt
    requeue_waits = record.requeue is not None
    if not (claim_waits or requeue_waits) or str(AlertKind.DEADLINE_MISSED) in record.markers:
        return None
    if now < parse_iso(str(at)):
        return None
    n = latest.n if claim_waits else record.requeue.attempt  # type: ignore[union-attr]
    message = f"{record.request_id} missed its deadline {at}: attempt {n} waits for its create"
    return attempt_alert(record, latest, AlertKind.DEADLINE_MISSED, now, message, deadline=at)


def projected_finish(situation: Situation) -> datetime:
    """When the work is done if the rest runs where the attempt is now: on its capacity type once
    its changeover is paid (a job waiting for Spot: were capacity there now)."""
    s = situation
    placement = Placement.ON_DEMAND if s.placement is Placement.ON_DEMAND else Placement.ON_SPOT
    changeover = s.changeover_seconds
    if s.placement is not Placement.WAITING_FOR_SPOT:
        changeover = max(0.0, changeover - (s.now - s.placed_at).total_seconds())
    return s.now + timedelta(seconds=s.work.remaining_seconds(placement) + changeover)


def _alert(
    record: RequestRecord,
    attempt: Attempt,
    situation: Situation,
    decision: DeadlineDecision,
    now: datetime,
    effects: Effects,
    seen_at: datetime,
) -> None:
    figures = decision.to_json()
    deadline = iso(situation.deadline)
    if seen_at >= situation.deadline:
        kind = AlertKind.DEADLINE_MISSED
        message = f"{record.request_id} missed its deadline {deadline}: {decision.progress:.0%} of the work committed"
    elif decision.slack_seconds < situation.changeover_seconds and now < situation.deadline:
        kind = AlertKind.DEADLINE_AT_RISK
        message = (
            f"{record.request_id} has {decision.slack_seconds:.0f} s of slack to its deadline {deadline}, "
            f"less than one changeover ({situation.changeover_seconds:.0f} s)"
        )
    else:
        return
    if record.mark(str(kind)):  # once per request, whichever attempt sees it
        effects.alerts.append(attempt_alert(record, attempt, kind, now, message, deadline=deadline, **figures))
        effects.lines.append(LogLine("WARNING", message, event_fields(record, attempt, str(kind), **figures)))


def _switch(
    record: RequestRecord, attempt: Attempt, decision: DeadlineDecision, now: datetime, effects: Effects, strategy: str
) -> None:
    to_spot = strategy == SPOT
    outcome = AttemptOutcome.SWITCHED_TO_SPOT if to_spot else AttemptOutcome.SWITCHED_TO_ON_DEMAND
    following = decide_handover(
        record,
        attempt,
        now,
        effects,
        outcome=outcome,
        strategy=strategy,
        location=attempt.location,
        reason=SWITCH_REASON,
    )
    effects.lines.append(
        LogLine(
            "WARNING",
            f"attempt {attempt.n} of {record.request_id} leaves {attempt.strategy} for its deadline: "
            f"{decision.reason}; cancelling its job, attempt {following} runs {strategy} in {attempt.location}",
            event_fields(
                record,
                attempt,
                "deadline_switch",
                next_attempt=following,
                next_strategy=strategy,
                **decision.to_json(),
            ),
        )
    )


def _step_seconds(record: RequestRecord, *, on_demand: bool) -> float | None:
    """Seconds per step from the kit's rate on the latest attempt of that capacity type."""
    for attempt in reversed(record.attempts):
        if (attempt.strategy != SPOT) == on_demand and attempt.steps_per_second:
            return 1.0 / attempt.steps_per_second
    return None


def _placement(
    record: RequestRecord, latest: Attempt, running: bool, changeover: float, now: datetime
) -> tuple[Placement, datetime, bool]:
    """Where the latest attempt is, since when, and whether it is a Spot job counted on Spot for
    its changeover whose capacity no one has seen yet (its wait, should it get none, is seen
    only by a reconcile pass: no line says it)."""
    asked = parse_iso(latest.created_at or latest.claimed_at)
    if latest.strategy != SPOT:
        return Placement.ON_DEMAND, asked, False  # its changeover runs from the ask, queueing included
    if (running or latest.state == JobState.RUNNING) and not preempted_in_last_run(record, latest.n):
        # The Spot run's changeover counts from when it got capacity (later is the cautious choice).
        return Placement.ON_SPOT, parse_iso(latest.started_at or latest.state_changed_at or iso(asked)), False
    if latest.preemptions == 0 and (now - asked).total_seconds() < changeover:
        # A new Spot job is queued and provisioned for a while even when capacity is there: that
        # is its changeover (the model's first d seconds of an instance), not a wait for Spot.
        return Placement.ON_SPOT, asked, True
    # A wait after a run began when the run ended, QUEUED then PENDING one wait (`wait_began_at`; a
    # record written before it has its current state's start), as `consider_move` counts it: the
    # rule holds a wait a few changeovers for a move (`MOVE_HOLD_CHANGEOVERS`) from there.
    waiting_since = (latest.wait_began_at or latest.state_changed_at) if latest.started_at else None
    return Placement.WAITING_FOR_SPOT, parse_iso(waiting_since) if waiting_since else asked, False


def fleet_changeover(record: RequestRecord, location: str) -> float | None:
    """The fleet's changeover bound in `location` snapshotted by the latest claim there that read
    one (`Attempt.fleet_changeover_seconds`): the fleet's tail, which one request's handful of
    moves seldom shows, with no read of the fleet per kit line."""
    return next(
        (
            a.fleet_changeover_seconds
            for a in reversed(record.attempts)
            if a.location == location and a.fleet_changeover_seconds is not None
        ),
        None,
    )


def _changeovers(record: RequestRecord, location: str) -> list[float]:
    """Create-to-running times of this request's on-demand attempts in `location`."""
    return [
        (parse_iso(a.started_at) - parse_iso(a.created_at)).total_seconds()
        for a in record.attempts
        if a.strategy != SPOT and a.location == location and a.created_at and a.started_at
    ]
