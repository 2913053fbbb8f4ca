"""A request's `max_cost_usd`: the request is stopped once its spend reaches it.

`decide` calls `watch_budget` on every observation of a request: the job-state events and every
reconcile pass over the requests that run (a job that writes no line is still seen). The spend is
`shared.fleet.spend.request_spend` at the observation's time. Once it reaches the budget:

- a request still running is stopped as a cancel is (`shared.ledger.cancelling.note_intent`,
  source "budget"): no next attempt, the live job's cancel written pending in the same
  compare-and-swap, sent by the outbox; the request ends CANCELLED when Vertex reports the job
  ended;
- one `budget_reached` alert (a marker in the record: a redelivery or a concurrent pass decides
  nothing again), also when the attempt had ended already or a cancel asked before was under way
  (nothing left to stop: the alert says which), and a
  `budget_reached` notification to the request's own topic when it names one
  (`shared.deciding.notices`).

A spend the deployed price table cannot price (validation priced the budget, then a deployment
shipped a table without a row the request runs on) fails closed: the request is stopped the same
way, with one `budget_unpriced` alert and notification naming the rows missing.

How late: a pass may come one reconcile interval after the moment the spend reached the budget,
and the cancel takes Vertex some seconds more, so the spend can pass the budget by up to one
reconcile interval of the job's hourly price (`shared.fleet.spend.overshoot_bound_usd`,
docs/requests.md).
"""

from __future__ import annotations

from datetime import datetime

from shared.alerts import AlertKind
from shared.clock import iso
from shared.deciding.effects import Effects, LogLine, attempt_alert, event_fields
from shared.deciding.notices import NoticeKind, notify_pending
from shared.errors import Violation
from shared.fleet.placing import work_hours
from shared.fleet.spend import budget_left, max_cost, request_spend
from shared.ledger.cancelling import note_intent
from shared.ledger.records import Attempt, CancelIntent, RequestRecord
from shared.requests.attempts import SPOT
from shared.requests.pricing import Price, hourly, layout_hourly

BUDGET_SOURCE = "budget"
BUDGET_STOPPER = "spotjobs (the request's max_cost_usd)"


def watch_budget(record: RequestRecord, now: datetime, effects: Effects, price: Price = hourly) -> None:
    """Stop the request and alert once when its spend reached its `max_cost_usd`, or once the
    deployed price table cannot price it (`_hold_unpriced`)."""
    limit = max_cost(record.request)
    latest = record.latest
    if limit is None or latest is None or str(AlertKind.BUDGET_REACHED) in record.markers:
        return
    spend = request_spend(record, now, price)
    if spend.usd is None:
        _hold_unpriced(record, latest, limit, spend.unpriced, now, effects)
        return
    if spend.usd < limit:
        return
    stopping = _stop(record, f"max_cost_usd reached: ${spend.usd:.2f} spent of ${limit:.2f}", now, effects)
    message = (
        f"{record.request_id} spent ${spend.usd:.2f} of its max_cost_usd ${limit:.2f}: {_outcome(record, stopping)}"
    )
    record.mark(str(AlertKind.BUDGET_REACHED))
    details = {"spent_usd": round(spend.usd, 4), "max_cost_usd": limit, "stopped": stopping}
    effects.alerts.append(attempt_alert(record, latest, AlertKind.BUDGET_REACHED, now, message, **details))
    notify_pending(record, NoticeKind.BUDGET_REACHED, now, **details)  # the requester's own topic, if it names one
    effects.lines.append(
        LogLine("WARNING", message, event_fields(record, latest, str(AlertKind.BUDGET_REACHED), **details))
    )


def _hold_unpriced(
    record: RequestRecord, latest: Attempt, limit: float, unpriced: tuple[str, ...], now: datetime, effects: Effects
) -> None:
    """A budget whose spend the deployed price table cannot price (validation priced it, then the
    table was redeployed without a row it runs on): the budget fails closed. The request is stopped
    as at its budget, since running on could pass it by any amount unseen, while a stop loses at
    most the work since its last checkpoint (`spotjobs resubmit` resumes there); said once."""
    if str(AlertKind.BUDGET_UNPRICED) in record.markers:
        return
    missing = ", ".join(unpriced)
    stopping = _stop(
        record, f"max_cost_usd cannot be held: no price for {missing} in the deployed price table", now, effects
    )
    message = (
        f"{record.request_id}'s max_cost_usd ${limit:.2f} cannot be held: the deployed price table has no price "
        f"for {missing}, so its spend is unknown: {_outcome(record, stopping)}"
    )
    record.mark(str(AlertKind.BUDGET_UNPRICED))
    details = {"max_cost_usd": limit, "unpriced": list(unpriced), "stopped": stopping}
    effects.alerts.append(attempt_alert(record, latest, AlertKind.BUDGET_UNPRICED, now, message, **details))
    notify_pending(record, NoticeKind.BUDGET_UNPRICED, now, **details)
    effects.lines.append(
        LogLine("ERROR", message, event_fields(record, latest, str(AlertKind.BUDGET_UNPRICED), **details))
    )


def _stop(record: RequestRecord, reason: str, now: datetime, effects: Effects) -> bool:
    """Stop a request still running as `spotjobs cancel` does (source "budget"); False when it had
    ended or a cancel was under way."""
    if record.is_terminal or record.cancel is not None:
        return False
    note_intent(record, CancelIntent(by=BUDGET_STOPPER, at=iso(now), reason=reason, source=BUDGET_SOURCE), now)
    effects.requeue_decided = effects.requeue_decided and record.requeue is not None
    return True


def _outcome(record: RequestRecord, stopped: bool) -> str:
    return "stopped" if stopped else "it had ended" if record.is_terminal else "its cancel was under way"


def budget_refuses(
    record: RequestRecord, attempt: Attempt, strategy: str, now: datetime, price: Price = hourly
) -> Violation | None:
    """The deadline rule never plans past the budget: a move of the work left to `strategy` where
    the attempt runs is refused when the spend so far plus that work at that price passes
    `max_cost_usd` (the rule then keeps the attempt where it is; the budget watch stops it at its
    budget). None without a budget, or while the work left or its price is not known."""
    left = budget_left(record.request, record.attempts, now, price)
    work = work_hours(record.request, record.attempts)
    rates = layout_hourly(record.request, attempt.location, price)
    if left is None or work is None or rates is None:
        return None
    rate = rates[0] if strategy == SPOT else rates[1]
    if rate * work <= left:
        return None
    limit = max_cost(record.request) or 0.0
    return Violation(
        "max_cost_usd",
        f"is ${limit:.2f} with ${limit - left:.2f} spent; {work:.2f} h of work left on {strategy} in "
        f"{attempt.location} at ${rate:.2f}/h is ${rate * work:.2f}, more than the ${left:.2f} left",
    )
