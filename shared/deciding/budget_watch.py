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
    """Stop the request and alert once when its spend reached its `max_cost_usd`."""
    limit = max_cost(record.request)
    latest = record.latest
    if limit is None or latest is None or str(AlertKind.BUDGET_REACHED) in record.markers:
        return
    spend = request_spend(record, now, price)
    if spend.usd is None or spend.usd < limit:
        return  # unpriced: validation refuses a budget on a machine type the table does not price
    stopping = not record.is_terminal and record.cancel is None
    message = f"{record.request_id} spent ${spend.usd:.2f} of its max_cost_usd ${limit:.2f}"
    message += ": stopped" if stopping else ": it had ended" if record.is_terminal else ": its cancel was under way"
    if stopping:
        reason = f"max_cost_usd reached: ${spend.usd:.2f} spent of ${limit:.2f}"
        note_intent(record, CancelIntent(by=BUDGET_STOPPER, at=iso(now), reason=reason, source=BUDGET_SOURCE), now)
        effects.requeue_decided = effects.requeue_decided and record.requeue is not None
    record.mark(str(AlertKind.BUDGET_REACHED))
    details = {"spent_usd": round(spend.usd, 4), "max_cost_usd": limit, "stopped": stopping}
    effects.alerts.append(attempt_alert(record, latest, AlertKind.BUDGET_REACHED, now, message, **details))
    notify_pending(record, NoticeKind.BUDGET_REACHED, now, **details)  # the requester's own topic, if it names one
    effects.lines.append(
        LogLine("WARNING", message, event_fields(record, latest, str(AlertKind.BUDGET_REACHED), **details))
    )


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
