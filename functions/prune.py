"""prune_checkpoints: frees checkpoint storage when a `maintenance` message asks for a prune.

`{"task": "prune"}` prunes every request (bounded per run, resumed from a cursor);
`{"task": "prune", "request_id": "X"}` prunes one. Other maintenance tasks are ignored here.
Imports stay light: storage and Pub/Sub load on first use, and nothing here needs Vertex AI.
"""

from __future__ import annotations

from typing import Any

import functions_framework

from shared.delivery import Message, handle_push
from shared.log import Logger
from shared.settings import get_settings


@functions_framework.http
def prune_checkpoints(request: Any) -> tuple[str, int]:
    return handle_push(
        request,
        _handle,
        function="prune_checkpoints",
        max_age_seconds=get_settings().max_event_age_seconds,
    )


def _handle(message: Message, log: Logger) -> None:
    from shared.pruning.runner import handle_maintenance
    from shared.wiring import ports_for

    handle_maintenance(message, log, ports_for("prune_checkpoints"))
