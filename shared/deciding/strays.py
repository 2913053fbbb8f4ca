"""Stray jobs: a job with a request's labels that the ledger does not record is cancelled.

However the claim protocol is run, a second job for an attempt can appear behind the ledger's
back: a create that completes on the server after its deadline, a takeover that missed a job the
list did not show yet. Nothing would manage it, and it would train, and bill, into the request's
checkpoint folder. So whoever looks at a request's jobs (reconcile's sweep on every pass, on_job_event
on a line of a job it does not recognise, submit on finding a second job) cancels every job
labelled with the request and this deployment that has not ended and is not the job its attempt
records, with one log line and one `stray_job` alert (pending in the record, through the outbox),
decided before the cancel is sent so that no failure after the cancel can lose it.

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
from shared.deciding.effects import attempt_alert
from shared.deciding.outbox import decide_alert
from shared.jobs import LABEL_ATTEMPT, is_terminal, of_another_claim
from shared.ledger.records import RequestRecord, alert_marker
from shared.swap import Swapped
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


def decide_stray_alert(ports: Ports, record: RequestRecord, job: CustomJob) -> Swapped[RequestRecord]:
    """Decide a stray's alert once (pending in the record), before its cancel is sent: a cancelled
    job leaves the sweep's listing, so an alert decided after the cancel would be lost for good
    if its write failed. The caller publishes it once the cancel is sent (`Mine.written`); should
    that caller die, the outbox publishes it, and the next sweep repeats the cancel."""
    n = int(job.labels.get(LABEL_ATTEMPT, "0") or 0)
    now = ports.clock()

    def stray_alert(current: RequestRecord) -> Alert | None:
        attempt = current.attempt(n) or current.latest
        if attempt is None:
            return None
        return attempt_alert(
            current,
            attempt,
            AlertKind.STRAY_JOB,
            now,
            f"cancelling job {job.name}: it carries the labels of attempt {n} of "
            f"{current.request_id}, which records {attempt.job or 'no job'}",
            stray_job=job.name,
            cancelled_at=iso(now),
        )

    marker = alert_marker(AlertKind.STRAY_JOB, n, job.name.rsplit("/", 1)[-1])
    return decide_alert(ports, record.request_id, marker, stray_alert)
