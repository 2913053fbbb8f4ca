"""Waiting on the embedded stack's submit path: jobs of a request, decision lines, unique ids."""

from __future__ import annotations

import uuid
from typing import Any

from shared.adapters.vertex import attempt_labels, find_jobs, parent_path
from shared.jobs import LABEL_REQUEST_ID
from shared.ledger.records import RequestRecord

DELIVERY_TIMEOUT = 60.0  # redeliveries back off up to 5 s in the test stack; a lease is 5 s


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def jobs_of(stack: Any, request_id: str, attempt: int | None = None) -> list[Any]:
    labels = (
        attempt_labels(request_id, attempt, stack.settings.deployment_label)
        if attempt
        else {LABEL_REQUEST_ID: request_id}
    )
    parent = parent_path(stack.settings.project, stack.settings.location)
    return find_jobs(stack.job_service(), parent, labels, timeout=stack.settings.vertex_call_timeout_seconds)


def decisions(stack: Any, request_id: str, *events: str) -> list[dict[str, Any]]:
    return [
        line
        for line in stack.function_logs("submit_job")
        if line.get("request_id") == request_id and (not events or line.get("event") in events)
    ]


def decided(stack: Any, request_id: str, *events: str) -> list[dict[str, Any]]:
    """`decisions`, once there is one: submit logs a decision after it records the job, so the line
    may trail the record by a moment."""
    return stack.wait_for(lambda: decisions(stack, request_id, *events), DELIVERY_TIMEOUT, f"{events} of {request_id}")


def wait_for_job_recorded(stack: Any, request_id: str, attempt: int = 1) -> RequestRecord:
    def recorded() -> RequestRecord | None:
        record = stack.ledger().get(request_id)
        return record if record and record.attempt(attempt) and record.attempt(attempt).job else None

    return stack.wait_for(recorded, DELIVERY_TIMEOUT, f"the job of {request_id} in the ledger")
