"""What the dashboard's tests (tests/functional/test_dashboard*.py) build: ledger records with a
preemption, a hostile job's text, a fake log source, and the app's deployment over a real ledger."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import spotjobs
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.ledger.store import LedgerStore
from spotjobs.dashboard.reading import Deployment
from spotjobs.trainer_logs import LogLine
from tests.support.browser import chromium

HOSTILE = "<script>alert(1)</script>\x1b[31mred\x1b]0;title\x07\u202eevil"
KIT_KEY = "k" * 43  # a kit key: no page may show it
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"  # CI keeps them; git ignores them
WAIT_SECONDS = 15


class FakeLogs:
    """The trainer's lines of each job: one of its own, and a kit line another job forged."""

    def __init__(self, lines: Sequence[LogLine] = ()) -> None:
        self.lines = list(lines)

    def read(self, attempts: Sequence[Attempt], since: str | None) -> list[LogLine]:
        jobs = {a.job_id for a in attempts}
        return [line for line in self.lines if line.job_id in jobs and (not since or (line.time or "") >= since)]


def envelope(request_id: str, machine: str = "a2-highgpu-1g", **more: Any) -> dict[str, Any]:
    pool = {"machineSpec": {"machineType": machine}, "replicaCount": "1", "containerSpec": {"imageUri": "i"}}
    return {
        "schema_version": 1,
        "request_id": request_id,
        "custom_job": {"displayName": "train", "jobSpec": {"workerPoolSpecs": [pool]}},
        "location": "us-central1",
        "locations": [],
        "max_attempts": 3,
        **more,
    }


def job_name(request_id: str, n: int, location: str = "us-central1") -> str:
    return f"projects/p/locations/{location}/customJobs/{abs(hash((request_id, n))) % 10**9}"


def preempted_then_running(
    request_id: str, *, error: str = "preempted", machine: str = "a3-highgpu-8g"
) -> RequestRecord:
    """Attempt 1 on Spot, preempted twice then failed; attempt 2 on STANDARD elsewhere, running."""
    first = Attempt(
        1,
        "us-central1",
        "SPOT",
        claimed_at="2026-12-01T08:00:00Z",
        job=job_name(request_id, 1),
        state="JOB_STATE_FAILED",
        created_at="2026-12-01T08:00:05Z",
        started_at="2026-12-01T08:01:00Z",
        ended_at="2026-12-01T09:01:00Z",
        preemptions=2,
        outcome=AttemptOutcome.REQUEUED,
        error={"code": 8, "message": error},
        kit_key=KIT_KEY,
    )
    second = Attempt(
        2,
        "europe-west1",
        "STANDARD",
        claimed_at="2026-12-01T09:02:00Z",
        job=job_name(request_id, 2, "europe-west1"),
        state="JOB_STATE_RUNNING",
        created_at="2026-12-01T09:02:05Z",
        started_at="2026-12-01T09:03:00Z",
        kit_key=KIT_KEY,
    )
    return RequestRecord(
        request_id,
        envelope(request_id, machine),
        f"gs://out/{request_id}",
        status=RequestStatus.RUNNING,
        attempts=[first, second],
        created_at="2026-12-01T08:00:00Z",
        updated_at="2026-12-01T09:03:00Z",
    )


def finished(request_id: str) -> RequestRecord:
    attempt = Attempt(
        1,
        "us-central1",
        "SPOT",
        claimed_at="2026-11-30T08:00:00Z",
        job=job_name(request_id, 1),
        state="JOB_STATE_SUCCEEDED",
        started_at="2026-11-30T08:01:00Z",
        ended_at="2026-11-30T09:01:00Z",
        outcome=AttemptOutcome.SUCCEEDED,
    )
    return RequestRecord(
        request_id,
        envelope(request_id, "n1-standard-8"),
        f"gs://out/{request_id}",
        status=RequestStatus.SUCCEEDED,
        attempts=[attempt],
        created_at="2026-11-30T08:00:00Z",
        updated_at="2026-11-30T09:01:00Z",
        finished_at="2026-11-30T09:01:00Z",
    )


def deployment(
    ledger: LedgerStore, logs: FakeLogs | None = None, bucket: Any = None, dead_letters: Any = None
) -> Deployment:
    def cancel(request_id: str, reason: str | None, by: str) -> spotjobs.CancelOutcome:
        return spotjobs.cancel(request_id, reason=reason, by=by, ledger=ledger)

    return Deployment(
        ledger, logs or FakeLogs(), cancel, "ana@example.com", "state-bucket", bucket, dead_letters=dead_letters
    )


def driver_path() -> str:
    path = shutil.which("chromedriver")
    if path:
        return path
    # .ci/run installs it: a missing driver is an install step left out, never a skip.
    pytest.fail(
        "chromium-driver is not installed: `apt-get install -y chromium-driver` (the dashboard's browser tests)"
    )


@contextmanager
def chromium_driver() -> Iterator[Any]:
    """Debian's Chromium, headless, driven by Selenium through chromium-driver."""
    binary = chromium()
    from selenium import webdriver  # a dev dependency (pyproject): missing is an install error, not a skip

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver_path()), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """`app` on a free loopback port in a thread; yields its URL."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()


def screenshot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"dashboard-{name}.png"))


def wait_for(driver: Any, condition: Any, seconds: float = WAIT_SECONDS) -> Any:
    """`condition`'s first truthy answer; a poll may replace the page's elements while it reads them."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    ignored = (StaleElementReferenceException, NoSuchElementException)
    return WebDriverWait(driver, seconds, ignored_exceptions=ignored).until(condition)
