"""Moving a Spot job that waits for capacity: a job QUEUED or PENDING longer than its changeover
where it is, with another allowed location estimated cheaper to finish in (`Placer.place`, the
placement of a new attempt), is cancelled and attempt n+1 runs on Spot there (`decide_handover`: the
deadline switch's hand-over, so the next attempt is published only once Vertex reports the job
ended). Decided under the record's compare-and-swap with the other decisions of an observation
(`shared.deciding.applying`), so concurrent deliveries and reconcile make one move.

Never moved: a request cancelled, finished, or with its next attempt decided; a job Vertex does
not report waiting in this observation; a move that would leave no attempt for a re-queue after
a preemption (a move uses an attempt, as a deadline switch does), or that the deployment's policy
refuses on Spot; and a deadline request unless the deadline rule holds its wait for Spot by more
than a changeover: the rule decides nothing while the hand-over runs (its next attempt is
pending), so its safety net counts the move's changeover. A deadline request also stays where the
fleet's outages are short (`sits_out`, on the outlook estimated now) until its wait outlasts the
expected outage; and where the rule holds the wait only for a move, placement costs staying as
the rest of the work on on-demand (`Job.leaving`), what the rule does next. One preempted lately
(once is enough) with little slack beyond the net (`preempted_often`, from `Attempt.preempted_at`)
is weighed at once, without waiting a changeover nor sitting out, staying costed as on-demand:
short outages that keep coming back would spend the slack before a move is weighed.

A request with `capacity` alternatives moves to its best other option, the (machine, strategy,
location) it waits on left out (`shared.fleet.capacity.choose_capacity`, which asks the policy of
each strategy), with one allowed location too (without the deadline edges above: the outlook
is the request's first machine's)."""

from __future__ import annotations

from datetime import datetime

from shared.clock import parse_iso
from shared.deciding.continuations import counted_attempts
from shared.deciding.deadline import (
    DeadlineDecision,
    Situation,
    decide_deadline,
    preempted_often,
    sits_out,
    spares_a_move,
)
from shared.deciding.deadline_watch import deadline_situation
from shared.deciding.decision_policy import DecisionPolicy
from shared.deciding.effects import Effects, LogLine, event_fields
from shared.deciding.handover import decide_handover
from shared.deciding.preemptions import WAITING_STATES
from shared.deciding.waits import is_fresh
from shared.fleet.capacity import choose_capacity, without_capacity
from shared.fleet.placing import Placer
from shared.jobs import JobSnapshot
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome
from shared.requests.attempts import SPOT, plan_attempt

MOVE_REASON = "move"


def consider_move(
    record: RequestRecord,
    job: JobSnapshot | None,
    placer: Placer,
    policy: DecisionPolicy,
    now: datetime,
    effects: Effects,
) -> None:
    """Move the latest attempt when it waits for Spot too long where it is (module docstring)."""
    attempt = record.latest
    if attempt is None or job is None or job.name != attempt.job or not _may_move(record, attempt, job, policy):
        return
    rule = _deadline_rule(record, policy, now)
    if rule is None:
        return
    changeover, situation, decision = rule
    # A job that ran waits from its run's end, QUEUED then PENDING one wait (`wait_began_at`; a record
    # written before it has its current state's start), one that never ran from its create.
    since = (attempt.wait_began_at or attempt.state_changed_at) if attempt.started_at else attempt.created_at
    waited = (now - parse_iso(since)).total_seconds()
    # Within a changeover of waiting, only a deadline request preempted often lately is weighed
    # (`preempted_often`): at once, as if the outage were long, staying costed as on-demand.
    at_once = waited <= changeover
    if at_once and not _preempted_often(record, attempt, situation):
        return
    if record.request.get("capacity"):
        chosen = choose_capacity(
            placer,
            record.request,
            attempt,
            record.attempts,
            lambda strategy: policy.refuses(strategy, record, attempt.n + 1),
            now,
            without=without_capacity(record.attempts, attempt),
        )
        if chosen is None:
            return
        location, strategy, machine, reason = chosen.location, chosen.strategy, chosen.machine, chosen.reason
    else:
        if (
            not at_once
            and situation is not None
            and sits_out(
                situation,
                placer.spot_outlook(record.request, attempt.location),
                policy.reconcile_interval_seconds,
            )
        ):
            return
        leaving = at_once or (decision is not None and decision.held_for_move)
        placed = placer.place(record.request, attempt, record.attempts, waiting=True, leaving=leaving)
        if placed.location == attempt.location:
            return
        location, strategy, machine, reason = placed.location, SPOT, None, placed.reason
    following = decide_handover(
        record,
        attempt,
        now,
        effects,
        outcome=AttemptOutcome.MOVED,
        strategy=strategy,
        location=location,
        reason=MOVE_REASON,
        machine=machine,
    )
    on = f" on {machine}" if machine else ""
    effects.lines.append(
        LogLine(
            "WARNING",
            f"attempt {attempt.n} of {record.request_id} waited {waited:.0f} s for Spot in {attempt.location}; "
            f"cancelling its job, attempt {following} runs {strategy} in {location}{on}: {reason}",
            event_fields(
                record,
                attempt,
                "moved",
                next_attempt=following,
                next_location=location,
                next_strategy=strategy,
                next_machine=machine,
                waited_seconds=round(waited),
                changeover_seconds=round(changeover),
                reason=reason,
            ),
        )
    )


def _preempted_often(record: RequestRecord, attempt: Attempt, situation: Situation | None) -> bool:
    """A deadline request without capacity alternatives whose attempt was preempted often lately."""
    if situation is None or record.request.get("capacity"):
        return False
    return preempted_often(situation, [parse_iso(moment) for moment in attempt.preempted_at])


def _may_move(record: RequestRecord, attempt: Attempt, job: JobSnapshot, policy: DecisionPolicy) -> bool:
    if record.is_terminal or record.cancel is not None or record.requeue is not None:
        return False
    if attempt.outcome is not None or attempt.cancel_decided_at or attempt.strategy != SPOT:
        return False
    if job.state not in WAITING_STATES or attempt.state != job.state or not is_fresh(attempt, job):
        return False  # a stale read is no news: of another state, or of an earlier span of this one
    capacity = bool(record.request.get("capacity"))
    if len(record.request.get("locations") or []) < 2 and not capacity:
        return False
    following = attempt.n + 1
    max_attempts = int(record.request.get("max_attempts") or policy.default_max_attempts)
    # leave one attempt for a re-queue after a preemption (continuations after a timeout not counted)
    if counted_attempts(record, following) >= max_attempts:
        return False
    if capacity:  # the choice asks the policy of each option's strategy
        return True
    planned = plan_attempt(record.request, following, attempt, after_stockout=False)[1]
    return planned == SPOT and policy.refuses(SPOT, record, following) is None


def _deadline_rule(
    record: RequestRecord, policy: DecisionPolicy, now: datetime
) -> tuple[float, Situation | None, DeadlineDecision | None] | None:
    """The changeover a wait is measured against, with the deadline rule's situation and decision
    (None without a deadline); None when a deadline cannot spare a move."""
    if not record.request.get("deadline"):
        return float(record.request.get("changeover_seconds") or policy.changeover_prior_seconds), None, None
    situation = deadline_situation(
        record,
        now,
        prior_seconds=policy.changeover_prior_seconds,
        review_seconds=policy.reconcile_interval_seconds,
        checkpoint_prior_seconds=policy.checkpoint_prior_seconds,
    )
    if situation is None:
        return None  # the work is not known yet: the rule could not count the move
    decision = decide_deadline(situation)
    if not spares_a_move(decision, situation.changeover_seconds):
        return None
    return situation.changeover_seconds, situation, decision
