"""Stray jobs: a job with a request's labels that the ledger does not record is cancelled.

However the claim protocol is run, a second job for an attempt can appear behind the ledger's
back: a create that completes on the server after its deadline, a takeover that missed a job the
list did not show yet. Nothing would manage it, and it would train, and bill, into the request's
checkpoint folder. So whoever looks at a request's jobs (reconcile's sweep on every pass, on_job_event
on a line of a job it does not recognise, submit on finding a second job) cancels every job
labelled with the request and this deployment that has not ended and is not the job its attempt
records, with one log line and one `stray_job` alert (pending in the record, through the outbox).

A job of an attempt whose claim has no job recorded yet is not a stray: submit, or reconcile's
adoption, is about to record it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from shared.adapters.vertex import (
    LABEL_ATTEMPT,
    LABEL_REQUEST_ID,
    cancel_job,
    is_terminal,
    list_unfinished_jobs,
    parent_path,
)
from shared.alerts import Alert
from shared.clock import iso
from shared.deciding.effects import attempt_alert
from shared.deciding.outbox import decide_and_flush_alert
from shared.ledger.records import RequestRecord, alert_marker
from shared.log import Logger
from shared.wiring import Ports

if TYPE_CHECKING:
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
        return attempt.outcome is not None  # a claim still being created will record it
    return attempt.job != job.name


def sweep_strays(ports: Ports, locations: Iterable[str], log: Logger) -> list[str]:
    """Cancel every stray job of this deployment in `locations`; returns their names.

    One list per location, whatever the number of requests: this deployment's jobs that have not
    ended (a filter on the deployment label and on the state, so the list grows with the running
    work, never with history), grouped by request. Each request's record is read after the list:
    a claim is written before its create, so a job created for a newer attempt finds that attempt
    claimed and is never taken for a stray. A request without a record is left alone (nothing says
    which of its jobs is the one); a location or record that cannot be read waits for the next
    pass."""
    by_request: dict[str, list[CustomJob]] = defaultdict(list)
    for location in sorted(set(locations)):
        try:
            jobs = list_unfinished_jobs(
                ports.job_service(location),
                parent_path(ports.settings.project, location),
                ports.settings.deployment_label,
            )
        except Exception as exc:  # noqa: BLE001 - the next pass lists again
            log.warning(
                "could not list this deployment's jobs for the stray sweep",
                event="stray_sweep_failed",
                location=location,
                error=f"{type(exc).__name__}: {exc}",
            )
            continue
        for job in jobs:
            by_request[job.labels.get(LABEL_REQUEST_ID, "")].append(job)
    by_request.pop("", None)  # the filter asks for the label; a job without it names no request
    with ThreadPoolExecutor(STRAY_CHECKERS, thread_name_prefix="strays") as pool:
        found = pool.map(lambda item: _cancel_strays_of(ports, *item, log), by_request.items())
        return [name for names in found for name in names]


# Requests whose jobs are checked at once (a record read each, mostly waiting).
STRAY_CHECKERS = 8


def _cancel_strays_of(ports: Ports, request_id: str, jobs: list[CustomJob], log: Logger) -> list[str]:
    """Never raises: one request must not stop the sweep."""
    log = log.bind(request_id=request_id)
    try:
        record, _ = ports.ledger.read(request_id)  # read now, after the list: see sweep_strays
        if record is None:
            return []
        strays = [job for job in jobs if is_stray(record, job)]
        for job in strays:
            cancel_stray(ports, record, job, log)
        return [job.name for job in strays]
    except Exception as exc:  # noqa: BLE001 - the next pass retries this request
        log.warning(
            "could not check a request's jobs for strays; the next pass retries",
            event="stray_sweep_failed",
            error=f"{type(exc).__name__}: {exc}",
        )
        return []


def cancel_stray(ports: Ports, record: RequestRecord, job: CustomJob, log: Logger) -> None:
    """Cancel one stray job, then decide its alert once (pending in the record) and publish it."""
    client = ports.job_service(job.name.split("/")[3])
    cancel_job(client, job.name)
    n = int(job.labels.get(LABEL_ATTEMPT, "0") or 0)
    log.warning(
        "cancelled a job with this request's labels that the ledger does not record",
        event="stray_job_cancelled",
        request_id=record.request_id,
        attempt=n,
        job=job.name,
    )
    now = ports.clock()

    def stray_alert(current: RequestRecord) -> Alert | None:
        attempt = current.attempt(n) or current.latest
        if attempt is None:
            return None
        return attempt_alert(
            current,
            attempt,
            "stray_job",
            "WARNING",
            now,
            f"cancelled job {job.name}: it carried the labels of attempt {n} of "
            f"{current.request_id}, which records {attempt.job or 'no job'}",
            stray_job=job.name,
            cancelled_at=iso(now),
        )

    marker = alert_marker("stray_job", n, job.name.rsplit("/", 1)[-1])
    decide_and_flush_alert(ports, record.request_id, marker, stray_alert, log)
