"""on_job_event: job log entries from the job-events topic (logic in shared.observe).

Returning acknowledges the message; raising has Pub/Sub redeliver it. Irrelevant and foreign
entries are acknowledged without a Vertex call; clients are built on the first relevant entry.
"""

from __future__ import annotations

import functools
from typing import Any

import functions_framework

from shared.delivery import Message, handle_push
from shared.log import Logger
from shared.observe import handle_job_event
from shared.settings import get_settings
from shared.wiring import ports_for


@functions_framework.http
def on_job_event(request: Any) -> tuple[str, int]:
    return handle_push(
        request,
        _handle,
        function="on_job_event",
        max_age_seconds=get_settings().max_event_age_seconds,
    )


def _handle(message: Message, log: Logger) -> None:
    handle_job_event(message, log, settings=get_settings(), ports=functools.partial(ports_for, "on_job_event"))
