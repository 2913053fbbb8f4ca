"""The composition root: what each function is handed to talk to the world.

Every function gets a `Ports` from `ports_for(name)`; the logic in `shared/` takes it as an
argument, so a test hands in fakes the same way. Heavy clients are factories, called on first use,
so a cold instance that acknowledges chatter never builds one.

A function may publish only to the topics its service account is granted (`terraform/iam.tf`);
`Ports.may_publish` says which, and the outbox leaves anything else pending in the ledger for the
function that owns that topic (see docs/ARCHITECTURE.md, "The outbox").
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.clock import utcnow
from shared.ledger.store import LedgerStore
from shared.settings import Settings

if TYPE_CHECKING:
    from google.cloud import storage
    from google.cloud.aiplatform_v1 import JobServiceClient
    from google.cloud.pubsub_v1 import PublisherClient

# How long a function waits for Pub/Sub to accept a message; past it the publish raises, and the
# delivery fails and is redelivered.
FUNCTION_PUBLISH_TIMEOUT_SECONDS = 30.0

# Settings field of each topic a function publishes to; the same grants are in terraform/iam.tf.
PUBLISHES: dict[str, tuple[str, ...]] = {
    # job-requests: the quota line's drainer hands over to the head's message (shared/pacing_drainer.py).
    "submit_job": ("ops_alerts_topic", "job_requests_topic"),
    "on_job_event": ("ops_alerts_topic", "job_requests_topic", "maintenance_topic"),
    "reconcile": ("ops_alerts_topic", "job_requests_topic", "maintenance_topic"),
    "prune_checkpoints": ("ops_alerts_topic",),
    "on_trigger": ("ops_alerts_topic", "job_requests_topic"),
}
# The functions that publish requesters' notifications (to the topic a request names in
# `notify`, which the requester lets these functions' service accounts publish to: docs/requests.md);
# any other leaves them pending for these.
NOTIFIES = frozenset({"submit_job", "on_job_event", "reconcile"})


@dataclass(frozen=True)
class Ports:
    """The clients the logic needs, passed in."""

    settings: Settings
    ledger: LedgerStore
    publisher: Callable[[], PublisherClient]
    job_service: Callable[[str], JobServiceClient]  # location -> client
    storage: Callable[[], storage.Client] | None = None
    clock: Callable[[], datetime] = utcnow
    topics: Collection[str] | None = None  # topic names this function may publish to; None: any
    # (location, job name) -> cancel it: set by the shells that cancel (on_job_event, reconcile:
    # `shared.adapters.vertex.canceller`); the outbox leaves a pending cancel to them when None.
    cancel_job: Callable[[str, str], None] | None = None
    notifies: bool = True  # may publish requesters' notifications (`NOTIFIES`)
    # When this delivery began (epoch seconds, the clock's): a run bounded by the function's timeout
    # counts from it, not from when the run's own work began (`shared.pacing_drainer.drain`).
    started_at: float | None = None

    def may_publish(self, topic: str) -> bool:
        return self.topics is None or topic in self.topics

    def topic_path(self, topic: str) -> str:
        return f"projects/{self.settings.project}/topics/{topic}"

    def publish(self, topic: str, payload: dict[str, Any], **attributes: str) -> str:
        """Publish one JSON message and wait for its id (nothing is left in flight on return)."""
        return self.publish_to(self.topic_path(topic), payload, **attributes)

    def publish_to(self, topic_path: str, payload: dict[str, Any], **attributes: str) -> str:
        """`publish`, to a topic given by its full path (a requester's, in any project)."""
        future = self.publisher().publish(
            topic_path,
            json.dumps(payload, separators=(",", ":")).encode(),
            **attributes,
        )
        return future.result(timeout=FUNCTION_PUBLISH_TIMEOUT_SECONDS)


@functools.cache
def ports_for(function: str) -> Ports:
    """Ports on the process-wide clients, for the deployed function `function`."""
    from shared.adapters import clients
    from shared.settings import get_settings

    settings = get_settings()
    return Ports(
        settings=settings,
        ledger=LedgerStore(clients.storage_client().bucket(settings.state_bucket)),
        publisher=clients.publisher,
        job_service=clients.job_service,
        storage=clients.storage_client,
        topics=frozenset(getattr(settings, field) for field in PUBLISHES[function]),
        notifies=function in NOTIFIES,
    )
