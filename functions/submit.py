"""submit_job: job-requests messages become Spot CustomJobs (logic in shared.submit).

Returning acknowledges the message; raising has Pub/Sub redeliver it. Requests are handled at any
age (only events go stale). Clients are built on first use, and the Vertex library is imported
only when a job is actually created or looked up.
"""

from __future__ import annotations

import math
from typing import Any

import functions_framework

from shared.delivery import Message, handle_push
from shared.log import Logger


@functions_framework.http
def submit_job(request: Any) -> tuple[str, int]:
    # No age limit: a job request stays wanted however late it arrives (a Pub/Sub seek, a long
    # outage); only job events go stale.
    return handle_push(request, _handle, function="submit_job", max_age_seconds=math.inf)


def _handle(message: Message, log: Logger) -> None:
    from shared.submit import redelivered_unless_settled, submit_request
    from shared.wiring import ports_for

    with redelivered_unless_settled(log):  # bad settings or credentials must not drop the request
        ports = ports_for("submit_job")
        ports.settings.check_deployable()  # fail closed: no jobs as Vertex's default identity
    submit_request(message, log, ports)
