"""A request's `max_cost_usd` against the price table, where validation judges it (`spotjobs
validate` and submit, through `shared.requests.policy.check_policy`): the number itself is read
by `shared.requests.envelope_options` (a positive number of dollars, no bool, no NaN).

- A budget needs a price for every machine type of the job in every location it may run: without
  one its spend is unknown and could not be held to the budget, so such a request is refused,
  naming the machine types and regions the table lacks (a request without a budget may run
  them: its cost is shown as unknown).
- A deadline that cannot be met within the budget is refused with the numbers: the work
  (`total_steps` x `expected_step_seconds`) costs more than the budget even on Spot at the
  cheapest location it may run.

Judged on the publisher's message only (attempt 1): a re-queue carries the budget it was accepted
with, and the budget watch (`shared.deciding.budget_watch`) holds it to it.
"""

from __future__ import annotations

from shared.errors import Violation
from shared.requests.envelope import JobRequest
from shared.requests.pricing import hourly, layout, layout_hourly, table
from shared.settings import Settings


def check_budget(request: JobRequest, settings: Settings) -> list[Violation]:
    """Every reason the request's `max_cost_usd` cannot be held to (module docstring)."""
    if request.max_cost_usd is None or request.custom_job is None or request.attempt is not None:
        return []
    job = {"custom_job": request.custom_job}
    locations = list(request.locations) or [request.location or settings.location]
    missing = [f"{m or '?'} in {loc}" for loc in locations for m, _ in layout(job) if hourly(m, loc) is None]
    if missing or not layout(job):
        return [
            Violation(
                "max_cost_usd",
                f"is ${request.max_cost_usd:.2f}, but the price table (as of {table()['as_of']}) has no price for "
                f"{', '.join(missing) or 'a job without worker pools'}: its spend would be unknown, and unknown is never zero",
            )
        ]
    deadline = request.deadline
    if deadline is None or deadline.total_steps is None or deadline.expected_step_seconds is None:
        return []
    hours = deadline.total_steps * deadline.expected_step_seconds / 3600
    spot, cheapest = min(((layout_hourly(job, loc) or (0.0, 0.0))[0], loc) for loc in locations)
    if spot * hours <= request.max_cost_usd:
        return []
    return [
        Violation(
            "deadline",
            f"cannot be met within max_cost_usd ${request.max_cost_usd:.2f}: the work ({deadline.total_steps} steps x "
            f"{deadline.expected_step_seconds:g} s = {hours:.2f} h) costs ${spot * hours:.2f} even on Spot at "
            f"${spot:.2f}/h in {cheapest}",
        )
    ]
