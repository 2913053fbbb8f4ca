"""submit_job: job-requests messages become Spot CustomJobs (logic in shared.submit).

Returning acknowledges the message; raising has Pub/Sub redeliver it. Requests are handled at any
age (only events go stale). Clients are built on first use, and the Vertex library is imported
only when a job is actually created or looked up.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import functions_framework

from shared.delivery import Message, handle_delivery
from shared.log import Logger
from shared.settings import get_settings

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import CustomJob

    from shared.alerts import Alert
    from shared.submit import SubmitDeps


@functions_framework.cloud_event
def submit_job(event: Any) -> None:
    # No age limit: a job request stays wanted however late it arrives (a Pub/Sub seek, a long
    # outage). DESIGN section 5 applies the age limit to job events, whose news goes stale.
    handle_delivery(event, _handle, function="submit_job", max_age_seconds=math.inf)


def _handle(message: Message, log: Logger) -> None:
    from shared.submit import redelivered_unless_settled, submit_request

    with redelivered_unless_settled(log):  # bad settings or credentials must not drop the request
        deps = _deps()
    submit_request(message, log, deps)


@functools.cache
def _deps() -> SubmitDeps:
    from shared import clients
    from shared.alerts import AlertPublisher
    from shared.ledger import LedgerStore
    from shared.submit import SubmitDeps

    settings = get_settings()
    settings.check_deployable()  # fail closed: no jobs as Vertex's default identity

    def publish_alert(alert: Alert) -> str:
        publisher = AlertPublisher(
            clients.publisher(), clients.topic_path(settings.ops_alerts_topic)
        )
        return publisher.publish(alert)

    return SubmitDeps(
        settings=settings,
        ledger=LedgerStore(clients.storage_client().bucket(settings.state_bucket)),
        job_service=clients.job_service,
        publish_alert=publish_alert,
        observe_found=_observe_found,
    )


def _observe_found(request_id: str, attempt: int, job: CustomJob, log: Logger) -> None:
    """A job found after the fact may have run, or ended, unseen: decide on it as reconcile would."""
    from shared.decisions import JobSnapshot, Observation, apply_observation, default_ports

    apply_observation(default_ports(), request_id, Observation(attempt, JobSnapshot.of(job)), log)
