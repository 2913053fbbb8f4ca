"""Driving retraining triggers on the embedded stack: apply a definition, tick, read their requests."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from devstack.processes import REPO_ROOT

BODY = json.loads((Path(__file__).parents[1] / "events" / "requests" / "bare_quick.json").read_text())


def definition(name: str, source: dict, **extra: Any) -> dict:
    return {
        "schema_version": 1,
        "name": name,
        "source": source,
        "coalesce_seconds": 20,
        "request": {
            "custom_job": {**json.loads(json.dumps(BODY)), "displayName": "{trigger}-{window_id}"},
            "max_attempts": 1,
        },
        **extra,
    }


def cli(stack, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spotjobs.cli", "triggers", *args],
        cwd=REPO_ROOT,
        env=stack.env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def apply(stack, document: Any) -> None:
    result = cli(stack, "apply", "-", stdin=json.dumps(document))
    assert result.returncode == 0, result.stderr


def at_window_start(seconds: int, room: float) -> None:
    """Sleep until a window of `seconds` has just begun, with `room` seconds left in it."""
    while True:
        into = time.time() % seconds
        if into < seconds - room:
            if into < 1.0:
                return
        time.sleep(0.2)


def tick(stack) -> None:
    stack.publish("triggers", b'{"task": "triggers"}', task="triggers")


def trigger_requests(stack, name: str) -> list[str]:
    return sorted(
        b.name.removeprefix("requests/").removesuffix(".json")
        for b in stack.storage().list_blobs(stack.settings.state_bucket, prefix=f"requests/trg-{name}-")
    )


def jobs_for(stack, request_id: str) -> list[Any]:
    from google.cloud.aiplatform_v1 import ListCustomJobsRequest

    parent = f"projects/{stack.options.project}/locations/{stack.options.location}"
    listing = stack.job_service().list_custom_jobs(
        request=ListCustomJobsRequest(parent=parent, filter=f'labels.spotjobs-request-id="{request_id}"')
    )
    return list(listing)
