"""Looking up an attempt's job, and saying once when Vertex refuses the look-up for good.

reconcile looks up the job of a stale claim (by its labels) and reads a recorded attempt's job;
submit_job looks up the job of a claim it takes over, or of a create whose answer was lost. A
failure no retry cures (a permission missing, a location Vertex does not know) is alerted once per
attempt (`lookup_failed`, one marker whoever met it) and the request is kept: nothing is failed
for what is wrong on our side. submit's own look-up must say it too: reconcile leaves a claim
waiting in the quota line to the line, whose hand-overs only ever reach submit's take-over, so a
job created by a delivery that died before recording it would otherwise wait unseen and unsaid
for as long as the permission is missing (seed 1617). Such a claim also leaves the line
(`shared.paced_submit.leave_line_unlooked`), which would otherwise be handed to it for good.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.adapters.vertex import find_attempt_job
from shared.alerts import Alert, AlertKind
from shared.deciding.effects import attempt_alert
from shared.deciding.outbox import decide_and_flush_alert
from shared.errors import is_retryable
from shared.ledger.records import Attempt, RequestRecord, alert_marker
from shared.log import Logger
from shared.paced_submit import leave_line_unlooked
from shared.wiring import Ports

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import CustomJob, JobServiceClient


def find_claim_job(
    ports: Ports, record: RequestRecord, claim: Attempt, client: JobServiceClient, parent: str, log: Logger
) -> CustomJob | None:
    """The job of attempt `claim` found by its labels, or None. A failure is raised as it came, a
    lasting one alerted first (`alert_lookup_failed`) and its attempt out of the quota line."""
    try:
        deployment = ports.settings.deployment_label
        return find_attempt_job(
            client,
            parent,
            record.request_id,
            claim.n,
            deployment,
            since=record.created_at,
            kit_key=claim.kit_key,
            timeout=ports.settings.vertex_call_timeout_seconds,
        )
    except Exception as exc:
        if not is_retryable(exc):
            alert_lookup_failed(ports, record, claim, exc, log)
            leave_line_unlooked(record, claim, log, ports)
        raise


def alert_lookup_failed(ports: Ports, record: RequestRecord, target: Attempt, exc: Exception, log: Logger) -> None:
    """Say once per attempt that its job cannot be looked up, and why."""
    error = f"{type(exc).__name__}: {exc}"
    log.error(
        "could not look up the job of an attempt; fix the cause, it is looked up again",
        event="lookup_failed",
        attempt=target.n,
        location=target.location,
        error=error,
    )

    def lookup_alert(current: RequestRecord) -> Alert | None:
        attempt = current.attempt(target.n)
        if attempt is None:
            return None
        return attempt_alert(
            current,
            attempt,
            AlertKind.LOOKUP_FAILED,
            ports.clock(),
            f"cannot look up {target.job or 'the job'} of attempt {target.n} of {current.request_id} "
            f"in {target.location}: {error}",
            error=error,
        )

    marker = alert_marker(AlertKind.LOOKUP_FAILED, target.n)
    decide_and_flush_alert(ports, record.request_id, marker, lookup_alert, log)
