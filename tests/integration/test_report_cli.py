"""`spotjobs report` through the real stack: a request run by the functions, its page in Chromium."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devstack.processes import REPO_ROOT
from devstack.samples import job_request
from tests.support.browser import render
from tests.support.report_html import marks, section

pytestmark = pytest.mark.stack


def spotjobs(stack: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spotjobs.cli", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **stack.env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_report_draws_a_request_the_stack_ran(stack: Any, tmp_path: Path) -> None:
    request_id = "report-cli-1"
    stack.publish("job_requests", job_request(request_id, [sys.executable, "-c", "print('trained')"]))
    ledger = stack.ledger()
    stack.wait_for(lambda: (r := ledger.get(request_id)) and r.status == "SUCCEEDED", 120, "the request to succeed")

    target = tmp_path / "report.html"
    result = spotjobs(stack, "report", request_id, "--html", str(target))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(target.resolve())
    page = render(target)
    assert page.console == []
    part = section(page.dom, request_id)
    assert 'data-status="succeeded"' in part
    assert len(marks(part, "attempt", outcome="succeeded", strategy="SPOT")) == 1
    assert marks(part, "outcome", outcome="succeeded")

    missing = spotjobs(stack, "report", "report-cli-nope", "--html", str(tmp_path / "x.html"))
    assert missing.returncode == 1 and "no request report-cli-nope" in missing.stderr
    bad = spotjobs(stack, "report", "--html", str(tmp_path / "no" / "such" / "dir.html"))
    assert bad.returncode == 2


def test_status_watch_prints_each_change_until_the_request_ends(stack: Any) -> None:
    import json

    request_id = "status-watch-1"
    # The watch is running (it has printed the request's absence) before the request is published:
    # on a loaded machine the CLI's start can outlast the whole two-second request.
    watch = subprocess.Popen(
        [sys.executable, "-m", "spotjobs.cli", "status", request_id, "--watch", "--json"]
        + ["--interval", "0.3", "--timeout", "110"],
        cwd=REPO_ROOT,
        env={**os.environ, **stack.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watch.stdout is not None
        first = watch.stdout.readline()
        stack.publish("job_requests", job_request(request_id, [sys.executable, "-c", "import time; time.sleep(2)"]))
        rest, stderr = watch.communicate(timeout=120)
    finally:
        watch.kill()
    assert watch.returncode == 0, stderr
    documents = [json.loads(line) for line in (first + rest).splitlines()]
    seen = [d["status"] if d else None for d in documents]
    assert seen[-1] == "SUCCEEDED" and len(seen) >= 2, seen
    assert len(set(map(json.dumps, documents))) == len(documents)  # printed on change only

    gone = spotjobs(stack, "status", "status-watch-nope", "--watch", "--timeout", "1", "--interval", "0.3")
    assert gone.returncode == 1 and "not in the ledger yet" in gone.stdout
