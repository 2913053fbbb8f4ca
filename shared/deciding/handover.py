"""Handing a request over from a live job to its next attempt: the job's cancel and attempt n+1
decided in one write (a deadline switch, shared/deciding/deadline_watch.py; a move of a job waiting
for Spot, shared/deciding/moves.py). The outbox sends the cancel and publishes the next attempt
only once Vertex reports the job ended (`Attempt.ending`, shared/deciding/outbox.py), and submit's
claim refuses attempt n+1 while it has not: never two attempts training into one folder."""

from __future__ import annotations

from datetime import datetime

from shared.clock import iso
from shared.deciding.effects import Effects
from shared.ledger.records import Attempt, RequestRecord, Requeue
from shared.ledger.states import AttemptOutcome, RequestStatus


def decide_handover(
    record: RequestRecord,
    attempt: Attempt,
    now: datetime,
    effects: Effects,
    *,
    outcome: AttemptOutcome,
    strategy: str,
    location: str,
    reason: str,
    machine: str | None = None,
) -> int:
    """Cancel `attempt`'s job and decide the next attempt (`strategy` in `location`, on `machine`,
    else on `attempt`'s: a deadline switch goes on-demand on the machine it ran on); its number."""
    following = attempt.n + 1
    attempt.outcome = outcome
    attempt.cancel_decided_at = iso(now)
    record.status = RequestStatus.REQUEUED
    record.requeue = Requeue(
        attempt=following,
        location=location,
        strategy=strategy,
        reason=reason,
        decided_at=iso(now),
        machine=machine or attempt.machine,
    )
    effects.requeue_decided = True
    return following
