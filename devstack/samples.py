"""Sample job requests for tests, benchmarks and the demo: one valid shape, written once.

Every sample runs worker pool 0's `command` on the Vertex emulator (a local process); the image
URI is recorded, not pulled, and lies inside the image allowlist the test stack uses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

SAMPLE_IMAGE = "us-docker.pkg.dev/spotjobs/trainer:latest"
SAMPLE_MACHINE_TYPE = "a2-highgpu-1g"


def custom_job(
    display_name: str,
    command: Sequence[str],
    *,
    image: str = SAMPLE_IMAGE,
    labels: Mapping[str, str] | None = None,
    scheduling: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A one-replica CustomJob in Vertex REST JSON (camelCase), as a publisher writes it."""
    job: dict[str, Any] = {
        "displayName": display_name,
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": SAMPLE_MACHINE_TYPE},
                    "replicaCount": "1",
                    "containerSpec": {"imageUri": image, "command": list(command)},
                }
            ]
        },
    }
    if labels:
        job["labels"] = dict(labels)
    if scheduling:
        job["jobSpec"]["scheduling"] = dict(scheduling)
    return job


def job_request(request_id: str, command: Sequence[str], **envelope: Any) -> bytes:
    """An envelope (see shared/requests/envelope.py) for `command`, encoded as it is published."""
    return json.dumps({"request_id": request_id, "custom_job": custom_job(request_id, command), **envelope}).encode()
