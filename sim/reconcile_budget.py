"""Reconcile's promise on Vertex's CRUD quota (issue 43, item 3): a pass sends at most
`reconcile_crud_share` of `vertex_crud_per_minute` CRUD calls (gets, lists, cancels: the sweep's
and the outbox's alike) in any minute, the rest deferred to the next pass (docs/ARCHITECTURE.md,
"The flow", step 3; docs/performance.md, "How it scales", the CRUD table's reconcile row).

The exceptions the docs make (shared/reconcile_vertex.py, "The budget": first, "the listings are always
made ... and counted"): a pass's listing of a location, this deployment's unfinished jobs
(`unfinished_jobs_filter`), the first list with that filter the pass sends there, every page of it
("a list's next page" is spent as the listing is, forced: `VertexPass.next_page`). It is sent past
a spent budget, and it counts in the minute for every call after it. Any later list with that filter
(the sweep's own list where the listing failed) is budgeted like any other call. Second (the
same section: "and so are the sweep's cancels of strays"): a pass's first cancel of a stray, a job no
attempt of its request's record names (as the record ends, or deleted by a person), is spent as a listing is;
a listing of a budget's worth of pages would defer it every pass, for good (seeds 12482, 20719). Each
pass sends it again until Vertex takes one (a cancel refused with a 403, or unanswered, leaves the stray
live: the refusal's alert says "the next pass cancels it" once the permission is granted; seed 21001);
a second in one pass, or one after Vertex took one (the stray is CANCELLING), is judged by the budget.

A pass sends no other call (shared/reconcile_vertex.py, "Only these calls"): a create is judged by
Vertex's submission quota, not the CRUD one, and neither the budget nor the window would see it, so
any create a pass sends is a violation, however few its calls.

The stand-in keeps every call reconcile sends with the pass (the world's task) that sent it
(`SimVertex.pass_calls`), at the moment it leaves for Vertex, whatever Vertex then answers.
"""

from __future__ import annotations

import collections
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from shared.adapters.vertex import unfinished_jobs_filter

if TYPE_CHECKING:
    from sim.vertex import PassCall
    from sim.world import Violation, World

MINUTE = timedelta(seconds=60)
# The calls a pass's client sends, each under its budget and window (`shared.reconcile_vertex.PassClient`).
BUDGETED = frozenset({"get", "list", "cancel"})


def pass_budget(world: World) -> int:
    """The most CRUD calls a pass may send in any minute, as the docs state it."""
    return int(world.settings.vertex_crud_per_minute * world.settings.reconcile_crud_share)


def reconcile_within_crud_budget(world: World) -> list[Violation]:
    """No reconcile pass sent a CRUD call, its listings aside, when its calls of the last minute
    (listings included) had already spent its budget, nor any call but a get, list or cancel."""
    from sim.invariants import violation

    budget = pass_budget(world)
    listing_filter = unfinished_jobs_filter(world.settings.deployment_label)
    by_pass: dict[object, list[PassCall]] = collections.defaultdict(list)
    strays = _strays(world)
    taken = _taken_cancels(world)
    sweep_cancels: set[int] = set()  # each pass's first cancel of a stray Vertex had not yet taken: past the budget
    cancelled_in_pass: set[tuple[object, str]] = set()
    for call in world.vertex.pass_calls:
        by_pass[call.sender].append(call)
        if call.operation != "cancel" or call.job not in strays or (call.sender, call.job) in cancelled_in_pass:
            continue
        cancelled_in_pass.add((call.sender, call.job))
        if not any(at < call.at for at in taken.get(call.job, ())):
            sweep_cancels.add(id(call))
    found = []
    for ordinal, calls in enumerate(by_pass.values(), 1):
        listed: set[str] = set()
        listings: set[int] = set()  # the pagers of the pass's listings: their pages are the listing
        minute: collections.deque[PassCall] = collections.deque()
        over: list[PassCall] = []
        unbudgeted = [call for call in calls if call.operation not in BUDGETED]
        for call in (call for call in calls if call.operation in BUDGETED):  # in the order the pass sent them
            while minute and minute[0].at <= call.at - MINUTE:
                minute.popleft()
            first_page = call.operation == "list" and call.query == listing_filter and call.location not in listed
            if first_page:
                listed.add(call.location)
                listings.add(call.listing)
            elif call.listing not in listings and id(call) not in sweep_cancels and len(minute) >= budget:
                over.append(call)
            minute.append(call)
        if unbudgeted:
            first = unbudgeted[0]
            found.append(
                violation(
                    "reconcile_within_crud_budget",
                    f"reconcile pass {ordinal} sent {_kinds(unbudgeted)} call(s), which its budget and window do "
                    f"not judge (a pass sends only gets, lists and cancels), the first at {first.at.isoformat()} "
                    f"({first.operation} in {first.location})",
                )
            )
        if over:
            first_over = over[0]
            found.append(
                violation(
                    "reconcile_within_crud_budget",
                    f"reconcile pass {ordinal} sent {_kinds(over)} call(s) past its budget of {budget} CRUD calls a "
                    f"minute, the first at {first_over.at.isoformat()} ({first_over.operation} in "
                    f"{first_over.location}, its budget spent in the minute before it)",
                )
            )
    return found


def _strays(world: World) -> set[str]:
    """The jobs no attempt of their request's record names: the record as it ends, or none since a
    person deleted it (a job of a request never recorded is no sweep's)."""
    from sim.invariants import records

    by_id = {record.request_id: record for record in records(world)}
    deleted = world.tampering.deleted_records
    return {
        name
        for name, job in world.vertex.jobs.items()
        if (job.request_id in by_id and all(a.job != name for a in by_id[job.request_id].attempts))
        or (job.request_id not in by_id and job.request_id in deleted)
    }


def _taken_cancels(world: World) -> dict[str, list[datetime]]:
    """When Vertex took each job's cancels (whoever sent them): a stray it took one of is CANCELLING,
    and the sweep sends it none."""
    taken: dict[str, list[datetime]] = collections.defaultdict(list)
    for at, name, _caller in world.vertex.cancels:
        taken[name].append(at)
    return taken


def _kinds(calls: list[PassCall]) -> str:
    """How many calls of each kind, as "2 cancel, 1 get"."""
    counted = collections.Counter(call.operation for call in calls)
    return ", ".join(f"{count} {operation}" for operation, count in sorted(counted.items()))


QUIESCENCE = [reconcile_within_crud_budget]
