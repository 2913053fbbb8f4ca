"""The deployment's policy of `capacity` alternatives (shared/requests/policy.py, `_check_capacity`)
pinned where a slip in the code would change the verdict: a violation of the job itself is said
once, not again for each alternative, and FLEX_START's requirements are asked only of an
alternative that lists FLEX_START."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from shared.errors import InvalidRequest
from shared.requests.policy import validate_request
from shared.settings import Settings
from tests.conftest import load_event

BASE_JOB: dict[str, Any] = json.loads(load_event("requests/bare_docs.json"))
FLEX = Settings.from_env({"SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD,FLEX_START"})
TWO = [
    {"machine": "a3-highgpu-8g", "strategies": ["SPOT"]},
    {"machine": "a2-ultragpu-8g", "strategies": ["SPOT"]},
]


def refused(job: dict[str, Any], capacity: list[dict[str, Any]]) -> list[str]:
    request = json.dumps({"request_id": "r1", "custom_job": job, "capacity": capacity}).encode()
    with pytest.raises(InvalidRequest) as raised:
        validate_request(request, attributes={}, settings=FLEX)
    return [str(v) for v in raised.value.violations]


def test_a_violation_of_the_job_itself_is_said_once_not_for_each_alternative() -> None:
    job = copy.deepcopy(BASE_JOB)
    job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["env"] = [{"name": "AIP_MODEL_DIR", "value": "gs://x/"}]
    found = refused(job, TWO)
    assert len(found) == 1 and "AIP_MODEL_DIR" in found[0], found
    assert not found[0].startswith("capacity"), found


def test_flex_start_s_requirements_are_asked_only_of_an_alternative_listing_it() -> None:
    job = copy.deepcopy(BASE_JOB)
    job["jobSpec"]["scheduling"]["timeout"] = f"{8 * 86400}s"  # past FLEX_START's seven days
    flex_on_second = [TWO[0], {"machine": "a2-ultragpu-8g", "strategies": ["SPOT", "FLEX_START"]}]
    found = [v for v in refused(job, flex_on_second) if "Dynamic Workload Scheduler" in v]
    assert [v.split(":")[0] for v in found] == ["capacity[1].strategies"], found
