"""Stray jobs: a job with a request's labels that the ledger does not record is cancelled.

However the claim protocol is run, a second job for an attempt can appear behind the ledger's
back: a create that completes on the server after its deadline, a takeover that missed a job the
list did not show yet. Nothing would manage it, and it would train, and bill, into the request's
checkpoint folder. So whoever looks at a request's jobs (reconcile's sweep on every pass, on_job_event
on a line of a job it does not recognise, submit on finding a second job) cancels every job
labelled with the request and this deployment that has not ended and is not the job its attempt
records, with one log line and one `stray_job` alert (pending in the record, through the outbox),
decided before the cancel is sent so that no failure after the cancel can lose it. The same write
notes the stray in the record (`Stray`): Vertex bills what it ran, so the request's bill holds it.

A job of an attempt whose claim has no job recorded yet is not a stray: submit, or reconcile's
adoption, is about to record it, unless it was created before the record or carries another
claim's kit key (an earlier record's of the id, deleted by hand: no look-up or adoption of this
record takes it).

A job whose request has no record at all is a stray too: a claim writes the record before its
create, and retention removes only a record finished long ago, so its record was deleted by hand.
No record can hold its alert: it goes out once per job through a note (`recordless_stray_alert`,
`shared.found_jobs`), before the cancel.

This module decides (`is_stray`, the alert); listing and cancelling jobs at Vertex is the shells'
(`shared.found_jobs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.alerts import Alert, AlertKind
from shared.clock import iso
from shared.deciding.budget_watch import BUDGET_SOURCE, watch_budget
from shared.deciding.effects import Effects, LogLine, attempt_alert
from shared.jobs import LABEL_ATTEMPT, is_terminal, of_another_claim
from shared.ledger.records import RequestRecord, Stray, alert_marker
from shared.log import Logger
from shared.swap import Decided, Swapped
from shared.wiring import Ports

if TYPE_CHECKING:
    from datetime import datetime

    from google.cloud.aiplatform_v1 import CustomJob


def is_stray(record: RequestRecord, job: CustomJob) -> bool:
    """Whether `job` (labelled with the record's request) is one the ledger will never manage."""
    if is_terminal(job.state):
        return False
    try:
        n = int(job.labels.get(LABEL_ATTEMPT, ""))
    except ValueError:
        return True
    attempt = record.attempt(n)
    if attempt is None:
        return True  # no such attempt was ever claimed
    if attempt.job is None:
        # A claim still being created will record its job, never one created before its record or
        # with another claim's kit key: that is an earlier record's of the id, which a person
        # deleted (seed 5085's family).
        return attempt.outcome is not None or of_another_claim(job, record.created_at, attempt.kit_key)
    return attempt.job != job.name


def recordless_stray_alert(request_id: str, job: CustomJob, now: datetime) -> Alert:
    """The `stray_job` alert of a job labelled for `request_id`, which has no ledger record."""
    n = _attempt_label(job)
    return Alert.of(
        AlertKind.STRAY_JOB,
        f"cancelling job {job.name}: it carries the labels of attempt {n} of {request_id}, whose ledger "
        "record is missing (deleted by hand?), so nothing would manage it; submit a new request to run "
        "it again from its checkpoint",
        request_id=request_id,
        attempt=n,
        job=job.name,
        details={"stray_job": job.name, "record": "missing", "cancelled_at": iso(now)},
        time=iso(now),
    )


def _attempt_label(job: CustomJob) -> int | None:
    try:
        return int(job.labels.get(LABEL_ATTEMPT, ""))
    except ValueError:
        return None


def decide_stray(
    ports: Ports, record: RequestRecord, job: CustomJob, read_at: datetime, log: Logger
) -> Swapped[RequestRecord]:
    """Before a stray's cancel is sent, in one ledger update: note it in the record for its bill
    (`Stray`: what Vertex ran of it, to `read_at`, the start of the read that found it not ended),
    and decide its alert once, unless a person's cancel of the request asked it to stop. A
    cancelled job leaves the sweep's listing, so an alert decided after the cancel would be lost
    for good if its write failed. The caller publishes it once the cancel is sent (`Mine.written`);
    should that caller die, the outbox publishes it, and the next sweep repeats the cancel (noting
    nothing again). What the note's budget watch decided is logged once the write landed, as any
    decision is."""
    n = _attempt_label(job)
    now = ports.clock()
    marker = alert_marker(AlertKind.STRAY_JOB, n or 0, job.name.rsplit("/", 1)[-1])
    lines: list[LogLine] = []  # the last try's (a swap may run its transition again)

    def note(current: RequestRecord | None) -> Decided[RequestRecord] | None:
        lines.clear()
        if current is None:
            return None
        noted = any(stray.job == job.name for stray in current.strays)
        if not noted:
            current.strays.append(stray_of(job, n, read_at))
        attempt = current.attempt(n or 0) or current.latest
        asked = _asked_by_a_person(current) or _asked_by_a_person(record)  # as read by the caller, or since
        alert = None
        if not (asked or attempt is None or marker in current.markers):
            current.mark(marker)
            alert = attempt_alert(
                current,
                attempt,
                AlertKind.STRAY_JOB,
                now,
                f"cancelling job {job.name}: it carries the labels of attempt {n or 0} of "
                f"{current.request_id}, which records {attempt.job or 'no job'}",
                stray_job=job.name,
                cancelled_at=iso(now),
            ).to_json()
            current.pending_alerts.append(alert)
        elif noted:
            return None
        lines.extend(_watch_spend(current, now))
        return Decided(current, alert)

    swapped = ports.ledger.swap(record.request_id, note)
    for line in lines if swapped.wrote else ():
        log.log(line.severity, line.message, **line.fields)
    return swapped


def _asked_by_a_person(record: RequestRecord) -> bool:
    """Whether a person cancelled the request (spotjobs cancel, or its job's cancel at Vertex): their
    cancel asked its late jobs to stop too. The budget's stop asked no one, and its `budget_reached`
    names only the job its attempt records: a person's console copy it cancels is alerted (seed 10994)."""
    return record.cancel is not None and record.cancel.source != BUDGET_SOURCE


def _watch_spend(record: RequestRecord, now: datetime) -> list[LogLine]:
    """The stray's run is its request's spend (docs/requests.md, "A stray"): noting it is an
    observation of the budget, the only one for a request that had ended, which no pass reads
    again (seed 20226). Its alert stays pending for the outbox; its log lines are returned."""
    effects = Effects()
    watch_budget(record, now, effects)
    record.pending_alerts.extend(alert.to_json() for alert in effects.alerts)
    return effects.lines


def stray_of(job: CustomJob, n: int | None, read_at: datetime) -> Stray:
    """What the bill needs of a stray as read: where and on what it ran, and since when. A read
    that leaves the job's machines out (a listing may) leaves `pools` and `strategy` empty: it is
    billed as its attempt's job, whose create it repeats."""
    spec = job.job_spec
    pools = [
        {"machineSpec": {"machineType": pool.machine_spec.machine_type}, "replicaCount": int(pool.replica_count)}
        for pool in spec.worker_pool_specs
    ]
    shown = bool(pools) and all(pool["machineSpec"]["machineType"] for pool in pools)
    return Stray(
        job=job.name,
        attempt=n,
        location=job.name.split("/")[3] if job.name.count("/") >= 3 else "?",
        strategy=spec.scheduling.strategy.name if shown else "",
        pools=pools if shown else [],
        seen_until=iso(read_at),
        started_at=iso(job.start_time) if job.start_time else None,
    )
