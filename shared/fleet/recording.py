"""The hook that records fleet observations where decisions are applied
(`shared.deciding.applying.apply_observation`: on_job_event, reconcile, submit): the facts a
decision's write added to the record, each written once (`shared.fleet.store`); and what closed a
finished request's waits, written again as reconcile retires it (`close_waits`)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from shared.errors import is_retryable
from shared.fleet import store
from shared.fleet.observations import FleetFact, Kind, MachineClass, Reading, attempt_key, observations_of
from shared.ledger.records import RequestRecord
from shared.log import Logger
from shared.wiring import Ports

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

FleetFacts = frozenset[tuple[str, str, int]]


def fleet_facts(record: RequestRecord, reading: Reading) -> FleetFacts:
    """The keys of what the record tells now (taken before a decision changes it)."""
    return frozenset(o.key for o in observations_of(record, reading))


# The facts that close an attempt's open wait: it got capacity, or ended without it.
WAIT_CLOSERS = frozenset({Kind.WAIT, Kind.NO_CAPACITY})


def new_facts(before: FleetFacts | None, after: RequestRecord, reading: Reading, seen_at: datetime) -> list[FleetFact]:
    """What the decision added, and the waits again, open or closed (written once: create-once).
    An open wait: submit records the create outside any decision, so a wait is first seen open by
    the decision after it. What closed one: the decision that added it may have written the
    record and lost the fact (an advisory write failed, its delivery died between the two, or its
    write's reply was lost and the retry found it recorded), and the open wait would then say no
    capacity until it left the estimate's window; any later decision on the request writes it.
    A fact with no time of its own (a preemption, a restart) happened when the observation that
    told it saw the job (`seen_at`: a read's answer, a kit line's own time), not when a redelivered
    or late decision took it, and within the job's run as Vertex reported it (seed 10375)."""
    known = before or frozenset()
    found = observations_of(after, reading)
    closed = {o.attempt_key for o in found if o.kind in WAIT_CLOSERS}
    runs = {attempt_key(after.request_id, a.n): a for a in after.attempts}
    return [
        o.stamped(runs[o.attempt_key].within_run(seen_at) if o.attempt_key in runs else seen_at)
        for o in found
        if o.key not in known or o.kind in WAIT_CLOSERS or (o.kind is Kind.WAITING and o.attempt_key not in closed)
    ]


def close_waits(bucket: Bucket, record: RequestRecord) -> int:
    """Write again what closed each Spot attempt's wait of a finished record (its `wait` or
    `nocap`, named by the record's own times, so refused where it is already stored): the last
    decision a request gets may have written the record and lost every fact of its attempt's end,
    nothing decides on a finished request again, and its open `waiting` would say no capacity for
    the estimate's week. Reconcile asks it as it retires the request from the active index
    (`shared.reconcile_index`); a failure is raised, and the marker kept for the next pass."""
    machine_class = MachineClass.of_request(record.request)
    closers = [o for o in observations_of(record) if o.kind in WAIT_CLOSERS]
    if machine_class is None or not closers:
        return 0
    return store.write_facts(bucket, machine_class, closers)


def note_fleet(
    ports: Ports, before: FleetFacts | None, after: RequestRecord, reading: Reading, seen_at: datetime, log: Logger
) -> None:
    """Write what the decision added (`seen_at`: when its observation saw the job). Advisory: a
    failed write loses its own fact, never the others (`store.write_facts`) nor the delivery."""
    machine_class = MachineClass.of_request(after.request)
    facts = new_facts(before, after, reading, seen_at)
    if machine_class is None or not facts:
        return
    from google.api_core.exceptions import GoogleAPICallError

    from shared.ledger.run_lock import ledger_bucket

    try:
        store.write_facts(ledger_bucket(ports.ledger), machine_class, facts)
    except Exception as exc:
        if not (is_retryable(exc) or isinstance(exc, GoogleAPICallError)):
            raise
        log.warning("fleet observations not recorded", request_id=after.request_id, error=str(exc))
