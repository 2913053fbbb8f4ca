"""Preemption lines kept while their job was not indexed, counted by whichever delivery finds the
job recorded and a line still kept.

on_job_event keeps a service line of a job the ledger has not indexed yet (a claim whose create's
answer was lost: `LedgerStore.park_preemption`), and the adoption that records the job counts it
(`shared.found_jobs.observe_adopted`). A delivery that dies between recording the job and
counting leaves the line kept and uncounted, and nothing adopts a recorded job again (simulator
seed 35). So submit's redelivery of the attempt and the job's next service line count what is
still kept (`count_kept_preemptions`). Counting is idempotent: the record keeps each line's
identity (`shared.deciding.preemptions`), so a line counted before its object was forgotten
counts once. A kit line kept is counted in the compare-and-swap that records the job, never left
uncounted; a preemption line kept is marked there too (`adopt_job`), so that a delivery that dies
before counting leaves it to the next decision on the attempt (reconcile's next read, when no
redelivery or line comes), its object to these or to the lifecycle rule.
"""

from __future__ import annotations

from shared.adapters.vertex import read_job
from shared.deciding.applying import apply_observation
from shared.deciding.decisions import Observation
from shared.deciding.events import Signal
from shared.errors import is_retryable
from shared.jobs import JobSnapshot
from shared.log import Logger
from shared.wiring import Ports


def count_kept_preemptions(
    ports: Ports, request_id: str, n: int, job_name: str | None, log: Logger, *, job: JobSnapshot | None = None
) -> None:
    """Count on attempt `n` the preemption lines still kept for `job_name` once its record names
    that job, then forget them. A record that names no job yet (or
    another) leaves them to the adoption that records it. `job`: the job as just read, if it
    was (else read here, only when a line is to be counted). One listing when nothing is kept."""
    if job_name is None:
        return
    kept = ports.ledger.parked_preemptions(job_name.rsplit("/", 1)[-1])
    if not kept:
        return
    record = ports.ledger.get(request_id)
    attempt = record.attempt(n) if record else None
    if attempt is None or attempt.job != job_name:
        return
    if job is None:
        from google.api_core.exceptions import GoogleAPICallError

        try:
            job = read_job(
                ports.job_service(attempt.location), job_name, timeout=ports.settings.vertex_call_timeout_seconds
            )
        except GoogleAPICallError as exc:
            if is_retryable(exc):
                raise
            # Gone, or not ours to read: no redelivery would read it, and reconcile's reads of the
            # job say what is left to say.
            log.warning(
                "could not read the job to count the preemption lines kept before its index; they stay kept",
                event="kept_preemptions_unread",
                request_id=request_id,
                attempt=n,
                job=job_name,
                error=f"{type(exc).__name__}: {exc}",
            )
            return
    for identity in sorted(kept.values()):
        apply_observation(ports, request_id, Observation(n, job, Signal.PREEMPTION, preemption_evidence=identity), log)
    ports.ledger.forget_parked(kept)  # counted: the record keeps each line's identity
    log.warning(
        "counted preemption lines kept before the job was indexed, which the delivery that recorded it left",
        event="kept_preemptions_counted",
        request_id=request_id,
        attempt=n,
        job=job_name,
        lines=len(kept),
    )
