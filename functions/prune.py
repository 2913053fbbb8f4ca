"""prune_checkpoints: frees checkpoint storage when a `maintenance` message asks for a prune.

`{"task": "prune"}` prunes every request (bounded per run, resumed from a cursor);
`{"task": "prune", "request_id": "X"}` prunes one. Other maintenance tasks are ignored here.
Imports stay light: storage and Pub/Sub load on first use, and nothing here needs Vertex AI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import functions_framework

from shared.delivery import Message, handle_delivery
from shared.log import Logger
from shared.settings import get_settings

if TYPE_CHECKING:
    from shared.alerts import Alert


@functions_framework.cloud_event
def prune_checkpoints(event: object) -> None:
    handle_delivery(
        event,
        _handle,
        function="prune_checkpoints",
        max_age_seconds=get_settings().max_event_age_seconds,
    )


def _handle(message: Message, log: Logger) -> None:
    from shared import clients
    from shared.pruning.runner import handle_maintenance

    settings = get_settings()
    handle_maintenance(
        message,
        log,
        settings=settings,
        storage=clients.storage_client,
        publish_alert=lambda alert: _publish(alert, settings.ops_alerts_topic),
    )


def _publish(alert: Alert, topic: str) -> None:
    from shared import clients
    from shared.alerts import AlertPublisher

    AlertPublisher(clients.publisher(), clients.topic_path(topic)).publish(alert)
