"""shared/requests/job_schema.py at an edge its mutants found (the ninth mutation pass): the canonical
CustomJob has its keys sorted at every level, in this process too. tests/unit/test_job_schema_canonical_order.py
compares processes of different hash seeds, which run the code on disk, not a mutant served in memory."""

from __future__ import annotations

import json
from typing import Any

from shared.errors import Violation
from shared.requests.job_schema import read_custom_job


def keys_in_order(value: Any) -> list[list[str]]:
    """Every object's keys, as they come, at every level."""
    if isinstance(value, dict):
        return [list(value), *(keys for item in value.values() for keys in keys_in_order(item))]
    if isinstance(value, list):
        return [keys for item in value for keys in keys_in_order(item)]
    return []


def test_the_canonical_form_has_its_keys_sorted_at_every_level() -> None:
    """Protobuf prints a message's fields in their number order (`machineSpec` 1, `replicaCount` 2,
    `containerSpec` 6): sorted, the pool's `containerSpec` comes first."""
    job = {
        "displayName": "sorted-keys",
        "labels": {"zone": "d", "team": "c"},
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "n1-standard-4"},
                    "replicaCount": "2",
                    "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/sorted:1"},
                }
            ]
        },
    }
    violations: list[Violation] = []

    canonical = read_custom_job(json.loads(json.dumps(job)), "custom_job", violations)

    assert violations == [] and canonical is not None
    assert list(canonical["jobSpec"]["workerPoolSpecs"][0]) == ["containerSpec", "machineSpec", "replicaCount"]
    assert all(keys == sorted(keys) for keys in keys_in_order(canonical))
