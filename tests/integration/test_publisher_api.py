"""The publisher API (`import spotjobs`) against the emulators: validate, publish, status."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

import spotjobs
from devstack.processes import REPO_ROOT
from devstack.samples import custom_job, job_request

pytestmark = pytest.mark.stack


def test_importing_spotjobs_loads_no_google_library() -> None:
    # (`google` and `google.cloud` themselves are namespace stubs a .pth file loads at startup.)
    code = (
        "import sys; before = set(sys.modules); import spotjobs; "
        "print(sorted(m for m in set(sys.modules) - before if m.startswith(('google', 'grpc', 'proto'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_validate_names_every_violation_offline() -> None:
    good = json.loads(job_request("api-valid", ["python", "-c", "pass"]))
    assert spotjobs.validate(good) == []
    assert spotjobs.validate(json.dumps(good)) == []
    assert spotjobs.validate(custom_job("bare", ["true"]), request_id="api-bare") == []
    bad = {**good, "request_id": "Not A Valid Id", "max_attempts": 999, "colour": "blue"}
    violations = spotjobs.validate(bad)
    assert len(violations) >= 3
    assert any("request_id" in v for v in violations) and any("max_attempts" in v for v in violations)
    assert any("colour" in v for v in violations)


def test_publish_then_status_through_the_stack(stack: Any) -> None:
    request = json.loads(job_request("api-publish-1", [sys.executable, "-c", "print('ok')"]))
    message_id = spotjobs.publish(request, attributes={"team": "vision"})
    assert isinstance(message_id, str) and message_id

    def finished() -> spotjobs.RequestStatus | None:
        current = spotjobs.status("api-publish-1")
        return current if current is not None and current.done else None

    final = stack.wait_for(finished, 120, "the request to finish")
    assert final.status == "SUCCEEDED" and final.request_id == "api-publish-1"
    (attempt,) = final.attempts
    assert attempt.strategy == "SPOT" and attempt.outcome == "succeeded" and attempt.job
    assert final.record["request_id"] == "api-publish-1"

    bare_id = spotjobs.publish(custom_job("api-bare", [sys.executable, "-c", "pass"]), request_id="api-bare-1")
    assert bare_id != message_id
    assert spotjobs.status("api-never-published") is None


def test_publish_refuses_an_invalid_request_and_sends_nothing(stack: Any) -> None:
    request = {**json.loads(job_request("api-invalid-1", ["true"])), "max_attempts": 999}
    with pytest.raises(spotjobs.InvalidRequest) as caught:
        spotjobs.publish(request)
    assert any(v.path == "max_attempts" for v in caught.value.violations)
    with pytest.raises(spotjobs.InvalidRequest, match="request_id"):
        spotjobs.publish(custom_job("api-bare-no-id", ["true"]))
    alerts = stack.pull_alerts(timeout=3)
    assert not [a for a in alerts if a.get("request_id") in {"api-invalid-1", "api-bare-no-id"}]
