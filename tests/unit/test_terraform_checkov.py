"""checkov passes on terraform/ with zero failed checks; every skip is inline and explained.

checkov lives in its own virtualenv (.venv-tools), because its pins clash with the project's:
    python3 -m venv .venv-tools && .venv-tools/bin/pip install checkov
In CI (CI=true) a missing checkov fails this test; on a developer machine it is skipped with that
instruction.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.support.terraform import REPO_ROOT, TERRAFORM_DIR

CHECKOV = REPO_ROOT / ".venv-tools" / "bin" / "checkov"
INSTALL = "python3 -m venv .venv-tools && .venv-tools/bin/pip install checkov"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _reports(stdout: str) -> list[dict]:
    data = json.loads(stdout)
    return data if isinstance(data, list) else [data]


@pytest.mark.timeout(600)
def test_checkov_has_no_failed_checks() -> None:
    if not CHECKOV.exists():
        message = f"checkov not found at {CHECKOV}; install it with: {INSTALL}"
        if _in_ci():
            pytest.fail(message)
        pytest.skip(message + " (CI fails instead of skipping)")
    result = subprocess.run(
        [
            str(CHECKOV),
            "--directory",
            str(TERRAFORM_DIR),
            "--skip-download",  # no calls to the Prisma Cloud API: offline and deterministic
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=540,
        cwd=REPO_ROOT,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )
    # Exit code 1 means failed checks; anything else non-zero is a checkov error.
    assert result.returncode in (0, 1), f"checkov crashed ({result.returncode}):\n{result.stderr[-4000:]}"
    reports = _reports(result.stdout)
    failed = [
        f"{check['check_id']} {check['resource']} ({check['file_path']}:{check['file_line_range']}): {check['check_name']}"
        for report in reports
        for check in report.get("results", {}).get("failed_checks", [])
    ]
    assert not failed, "checkov failed checks:\n" + "\n".join(failed)
    assert result.returncode == 0
    passed = sum(report.get("summary", {}).get("passed", 0) for report in reports)
    assert passed > 0, "checkov scanned nothing"
    skipped = [c for r in reports for c in r.get("results", {}).get("skipped_checks", [])]
    assert skipped, "expected the documented inline skips (e.g. CKV_GCP_62 on the buckets) to be reported"
    for report in reports:
        for check in report.get("results", {}).get("skipped_checks", []):
            reason = (check.get("check_result") or {}).get("suppress_comment", "")
            assert reason and len(reason) >= 20, f"{check['check_id']} on {check['resource']} skipped without a reason"
