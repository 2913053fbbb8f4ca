"""on_trigger: turns data landing (Cloud Storage notifications), messages on watched topics and
schedules into one job request per window (logic in shared.triggers.runner).

Its own topic carries notifications, schedule fires and the `{"task": "triggers"}` tick that
closes due windows; messages of a `pubsub` trigger's topic arrive through a push subscription on
that topic, whose endpoint path names it (the CloudEvent source). Imports stay light: storage and
Pub/Sub load on first use; nothing here needs Vertex AI.
"""

from __future__ import annotations

from typing import Any

import functions_framework

from shared.delivery import Message, handle_delivery
from shared.log import Logger
from shared.settings import get_settings


@functions_framework.cloud_event
def on_trigger(event: Any) -> None:
    topic = _source_topic(event)

    def handle(message: Message, log: Logger) -> None:
        from shared.triggers.runner import handle_message
        from shared.wiring import ports_for

        handle_message(ports_for("on_trigger"), message, topic, log)

    handle_delivery(event, handle, function="on_trigger", max_age_seconds=get_settings().max_event_age_seconds)


def _source_topic(event: Any) -> str | None:
    """`//pubsub.googleapis.com/projects/P/topics/T` -> `projects/P/topics/T`."""
    try:
        source = event["source"]
    except (KeyError, TypeError):
        return None
    if not isinstance(source, str) or "/topics/" not in source:
        return None
    return source.split("pubsub.googleapis.com/", 1)[-1]
