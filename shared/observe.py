"""on_job_event's shell: `handle_job_event` reads a job-events message into an observation and has
`shared.deciding.applying.apply_observation` decide on it (and cancels a second job it names, and
finishes the adoption of a job indexed but not recorded).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from spotjobs_kit.lines import KitRecord, is_signed_with

from shared.adapters.vertex import canceller, get_job, read_job
from shared.clock import utcnow
from shared.deciding.applying import apply_observation
from shared.deciding.decisions import Observation
from shared.deciding.events import IgnoredEntry, JobLogEntry, Signal, classify, parse_log_entry, patterns_from
from shared.deciding.outbox import alert_corrupt_record
from shared.deciding.strays import is_stray
from shared.delivery import Message
from shared.errors import TransientError
from shared.jobs import of_another_claim
from shared.kept_lines import count_kept_preemptions
from shared.ledger.records import CorruptRecord, RequestRecord
from shared.ledger.store import JobIndexEntry
from shared.log import Logger
from shared.settings import Settings
from shared.wiring import Ports


class EventOutcome(enum.Enum):
    IGNORED = "ignored"  # not a job log entry at all
    IRRELEVANT = "irrelevant"  # a job's line that says nothing about its state
    STALE = "stale"  # older than the maximum event age
    FOREIGN = "foreign"  # a job spotjobs did not create
    OBSERVED = "observed"  # the job was read from Vertex and decided on
    CORRUPT = "corrupt"  # its request's ledger document cannot be read: alerted, not decided
    UNTRUSTED = "untrusted"  # a kit line its attempt's key did not sign: no read, no decision
    PARKED = "parked"  # a preemption or signed kit line of a job not indexed yet: kept for its adoption


def handle_job_event(
    message: Message,
    log: Logger,
    *,
    settings: Settings,
    ports: Callable[[], Ports],
    now: datetime | None = None,
) -> EventOutcome:
    """One job-events message. Returns what it was; raises TransientError to be redelivered.

    Only a relevant service line of a job in the index costs a Vertex call (and a listing of the
    preemption lines kept before its index, `count_kept_preemptions`); a trainer kit line
    signed with its attempt's key is counted in the ledger without one. An unsigned or badly
    signed kit line moves nothing: any job may write one for any other (docs/security.md), so it
    buys neither a Vertex read nor a decision at a moment its writer chose; reconcile and the
    service lines still watch that job. Anything else is acknowledged with one DEBUG/INFO line.
    `ports` is called only for a relevant line, so a cold instance that sees container chatter
    never creates a client.
    """
    try:
        entry = parse_log_entry(message.data)
    except IgnoredEntry as exc:
        log.debug("ignored a message that is not a job log entry", event="ignored_event", reason=str(exc))
        return EventOutcome.IGNORED
    signal = classify(entry, patterns_from(settings))
    log = log.bind(job_id=entry.job_id, insert_id=entry.insert_id)
    if not signal.is_relevant:
        log.debug(
            "ignored a job log line that says nothing about its state",
            event="irrelevant_event",
            task_name=entry.task_name,
        )
        return EventOutcome.IRRELEVANT
    age = entry.age_seconds(now or utcnow())
    if age is not None and age > settings.max_event_age_seconds:
        log.warning(
            "dropped a job log entry older than the maximum event age",
            event="stale_event",
            age_seconds=round(age, 1),
            max_age_seconds=settings.max_event_age_seconds,
        )
        return EventOutcome.STALE
    wired = ports()
    timeout = wired.settings.vertex_call_timeout_seconds
    wired = replace(wired, cancel_job=canceller(wired.job_service, timeout=timeout))
    index = wired.ledger.find_job(entry.job_id)
    if index is None and entry.kit is not None and _claim_pending(wired, entry.kit):
        # The job's own kit says whose it is, and that attempt is being created: kept for the
        # delivery that records the job, which may be reconcile's adoption minutes later.
        wired.ledger.park_kit_line(entry.job_id, entry.identity, dict(entry.kit.fields))
        return _parked(wired, entry, log, "kept a kit line of a job not indexed yet, for its adoption to count")
    if index is None and signal is Signal.PREEMPTION and entry.is_service_line:
        wired.ledger.park_preemption(entry.job_id, entry.identity)
        return _parked(wired, entry, log, "kept a preemption line of a job not indexed yet, for its adoption to count")
    if index is None:
        log.info(
            "ignored a log entry of a job spotjobs did not create",
            event="foreign_job",
            signal=signal.value,
        )
        return EventOutcome.FOREIGN
    if entry.kit is not None:
        if not _signed_by_its_attempt(wired, index.request_id, index.attempt, entry.kit):
            log.warning(
                "ignored a kit line its attempt's key did not sign",
                event="unsigned_kit_line",
                request_id=index.request_id,
            )
            return EventOutcome.UNTRUSTED
        observation = Observation(index.attempt, None, signal, kit=entry.kit, job_name=index.job)
    else:
        counted = signal is Signal.PREEMPTION and entry.is_service_line
        read_at = wired.clock()  # before the read: the job held the state it shows until then at least
        job = read_job(wired.job_service(index.location), index.job, timeout=timeout)
        observation = Observation(
            attempt=index.attempt,
            job=job,
            signal=signal,
            preemption_evidence=entry.identity if counted else None,
            read_at=read_at,
            answered_at=wired.clock(),  # after it: the job was in the state it shows by then
        )
    log = log.bind(request_id=index.request_id)
    try:
        if observation.job is not None:  # read from Vertex: lines kept before the index first
            count_kept_preemptions(wired, index.request_id, index.attempt, index.job, log, job=observation.job)
        applied = apply_observation(wired, index.request_id, observation, log)
        if applied.waiting and _finish_adoption(wired, applied.record, index, log):
            applied = apply_observation(wired, index.request_id, observation, log)  # counted now
    except CorruptRecord as exc:
        alert_corrupt_record(wired, exc, log)
        return EventOutcome.CORRUPT
    _cancel_if_stray(wired, applied.record, index.attempt, index.location, index.job, log)
    if applied.waiting:
        raise TransientError(applied.waiting)
    return EventOutcome.OBSERVED


def _parked(ports: Ports, entry: JobLogEntry, log: Logger, message: str) -> EventOutcome:
    """A line of a job not indexed yet, just kept: nothing else may say whose job it is (a claim
    whose create's answer was lost is indexed only when reconcile adopts it, minutes later;
    redeliveries would dead-letter first). The adoption counts it: a kit line in the same
    compare-and-swap that records the job (`adopt_job`), a preemption line just after
    (`observe_adopted`), or, should that delivery die first, submit's redelivery or the job's
    next service line (`count_kept_preemptions`); a foreign job's is left to a lifecycle rule.
    Indexed meanwhile (the adoption listed the kept lines before this one was kept):
    redelivered, counted then."""
    if ports.ledger.find_job(entry.job_id) is not None:  # adopted between the two reads
        raise TransientError(f"job {entry.job_id} was indexed meanwhile")
    log.info(
        message,
        event="kit_line_parked" if entry.kit is not None else "preemption_parked",
        evidence=entry.identity,
    )
    return EventOutcome.PARKED


def _finish_adoption(ports: Ports, record: RequestRecord | None, index: JobIndexEntry, log: Logger) -> bool:
    """A line of a job indexed for a claim whose record does not name it yet: the delivery that
    adopted it (`adopt_job`: index, then record) is between its two writes, or died there. Its
    claim may then wait for reconcile (seed 31: 25 minutes), and this line's redeliveries would go
    to the dead-letter topic first, its preemption never counted. The index is the adoption's own
    word: finish it (record the job, count the lines kept before the index), so the line is
    decided now, unless the job is another claim's (an index an earlier record of the id left, as
    `find_attempt_job` reads it). Returns whether the index's job is the attempt's
    (another may be recorded)."""
    attempt = record.attempt(index.attempt) if record else None
    if record is None or attempt is None or attempt.job is not None or attempt.outcome is not None:
        return False  # not a claim in flight: an ended attempt's job is a stray (the sweep's)
    from shared.found_jobs import adopt_found_job  # rare: a cold instance need not load it

    job = get_job(ports.job_service(index.location), index.job, timeout=ports.settings.vertex_call_timeout_seconds)
    if of_another_claim(job, record.created_at, attempt.kit_key):
        return False  # an index left by an earlier record of the id (a person deleted it): a stray
    adoption, _ = adopt_found_job(
        ports, index.request_id, index.attempt, index.location, job, log, left="was indexed and not recorded yet"
    )
    return adoption.adopted


def _cancel_if_stray(
    ports: Ports, record: RequestRecord | None, n: int, location: str, job_name: str, log: Logger
) -> None:
    """A line of an indexed job that its attempt does not record: a second job (shared.found_jobs)."""
    attempt = record.attempt(n) if record else None
    if record is None or attempt is None or attempt.job in (None, job_name):
        return
    read_at = ports.clock()
    job = get_job(ports.job_service(location), job_name, timeout=ports.settings.vertex_call_timeout_seconds)
    if is_stray(record, job):
        from shared.found_jobs import cancel_stray  # rare: a cold instance need not load the sweep

        cancel_stray(ports, record, job, log, read_at)


def _claim_pending(ports: Ports, kit: KitRecord) -> bool:
    if not kit.request_id or kit.attempt is None:
        return False
    record = ports.ledger.get(kit.request_id)
    attempt = record.attempt(kit.attempt) if record else None
    return (
        attempt is not None and attempt.job is None and attempt.outcome is None and is_signed_with(kit, attempt.kit_key)
    )


def _signed_by_its_attempt(ports: Ports, request_id: str, n: int, kit: KitRecord) -> bool:
    """The line names the attempt the index gives its job, and is signed with that attempt's key:
    only that attempt's containers hold it, so no other principal (another request's job, anyone
    who may write a log entry) can make a line count (docs/security.md)."""
    if kit.request_id != request_id or kit.attempt != n:
        return False
    try:
        record = ports.ledger.get(request_id)
    except CorruptRecord:
        return False  # read from Vertex: applying it alerts the corrupt record
    attempt = record.attempt(n) if record else None
    return attempt is not None and is_signed_with(kit, attempt.kit_key)
