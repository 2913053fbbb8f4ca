"""reconcile: a `{"task": "reconcile"}` message on the maintenance topic runs one pass over the
active requests (logic in shared.reconcile). Other tasks on the topic belong to prune_checkpoints.
"""

from __future__ import annotations

from typing import Any

import functions_framework

from shared.delivery import Message, handle_push, maintenance_task
from shared.log import Logger
from shared.reconcile import RECONCILE_TASK, run_reconcile
from shared.settings import get_settings
from shared.wiring import ports_for


@functions_framework.http
def reconcile(request: Any) -> tuple[str, int]:
    return handle_push(request, _handle, function="reconcile", max_age_seconds=get_settings().max_event_age_seconds)


def _handle(message: Message, log: Logger) -> None:
    task = maintenance_task(message.data)
    if task != RECONCILE_TASK:
        log.debug("ignored a maintenance message for another task", event="ignored_task", task=task)
        return
    run_reconcile(ports_for("reconcile"), log)
