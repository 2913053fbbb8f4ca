"""on_trigger: turns data landing (Cloud Storage notifications), messages on watched topics and
schedules into one job request per window (logic in shared/triggers/).

Its own topic carries notifications, schedule fires and the `{"task": "triggers"}` tick that
closes due windows; messages of a `pubsub` trigger's topic arrive through a push subscription on
that topic, whose endpoint path names it (`<function url>/projects/P/topics/T`). Imports stay
light: storage and Pub/Sub load on first use; nothing here needs Vertex AI.
"""

from __future__ import annotations

from typing import Any

import functions_framework

from shared.delivery import Message, handle_push
from shared.log import Logger
from shared.settings import get_settings


@functions_framework.http
def on_trigger(request: Any) -> tuple[str, int]:
    topic = source_topic(getattr(request, "path", "") or "")

    def handle(message: Message, log: Logger) -> None:
        from shared.triggers.runner import handle_message
        from shared.wiring import ports_for

        handle_message(ports_for("on_trigger"), message, topic, log)

    return handle_push(request, handle, function="on_trigger", max_age_seconds=get_settings().max_event_age_seconds)


def source_topic(path: str) -> str | None:
    """`/projects/P/topics/T` (the push endpoint's path) -> `projects/P/topics/T`."""
    if "/topics/" not in path:
        return None
    return path[path.index("projects/") :] if "projects/" in path else None
