"""shared/ledger/run_lock.py on fake-gcs-server: one run at a time, a second tick ends quietly, an
expired lease is taken over, a run's release never deletes a successor's lease."""

from __future__ import annotations

import io
import json
import threading
from datetime import UTC, datetime, timedelta

import pytest

from shared.ledger.run_lock import RunLock, lock_path, run_lock
from shared.log import Logger

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _on_the_emulator(fake_gcs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # What tells the release it runs on fake-gcs-server, which ignores the generation match on a delete.
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs)


def _log() -> tuple[Logger, io.StringIO]:
    stream = io.StringIO()
    return Logger(stream=stream, min_severity="DEBUG"), stream


def _lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_second_tick_during_a_run_ends_with_one_info_line_and_the_lease_is_released(gcs_bucket) -> None:
    log, stream = _log()
    ran: list[str] = []
    with run_lock(gcs_bucket, "reconcile", log) as first:
        assert first
        lease = json.loads(gcs_bucket.blob(lock_path("reconcile")).download_as_bytes())
        assert lease["task"] == "reconcile" and lease["expires_at"] > lease["acquired_at"]
        with run_lock(gcs_bucket, "reconcile", log) as second:
            assert not second
            ran.append("second")
        # Another task's lease is independent.
        with run_lock(gcs_bucket, "prune", log) as other:
            assert other
    assert _lines(stream) == [
        {
            **_lines(stream)[0],
            "severity": "INFO",
            "event": "run_in_progress",
            "task": "reconcile",
            "holder": lease["holder"],
            "expires_at": lease["expires_at"],
        }
    ]
    assert gcs_bucket.get_blob(lock_path("reconcile")) is None
    with run_lock(gcs_bucket, "reconcile", log) as again:
        assert again


def test_the_lease_is_released_when_the_run_raises(gcs_bucket) -> None:
    log, _ = _log()
    try:
        with run_lock(gcs_bucket, "reconcile", log) as held:
            assert held
            raise RuntimeError("transient")
    except RuntimeError:
        pass
    assert gcs_bucket.get_blob(lock_path("reconcile")) is None


def test_an_expired_lease_is_taken_over_and_its_old_holder_does_not_delete_the_new_one(gcs_bucket) -> None:
    crashed = RunLock(gcs_bucket, "prune", lease_seconds=60, clock=lambda: T0)
    assert crashed.acquire()
    within = RunLock(gcs_bucket, "prune", lease_seconds=60, clock=lambda: T0 + timedelta(seconds=59))
    assert not within.acquire()
    assert within.current["holder"] == crashed.holder
    after = RunLock(gcs_bucket, "prune", lease_seconds=60, clock=lambda: T0 + timedelta(seconds=61))
    assert after.acquire()
    crashed.release()  # the old run finishing late must not free its successor's lease
    lease = json.loads(gcs_bucket.blob(lock_path("prune")).download_as_bytes())
    assert lease["holder"] == after.holder
    after.release()
    assert gcs_bucket.get_blob(lock_path("prune")) is None


def test_an_unreadable_lease_is_treated_as_expired(gcs_bucket) -> None:
    gcs_bucket.blob(lock_path("reconcile")).upload_from_string(b"not json")
    assert RunLock(gcs_bucket, "reconcile").acquire()


def test_concurrent_ticks_run_exactly_once(gcs_bucket) -> None:
    log, stream = _log()
    barrier = threading.Barrier(6)
    started = threading.Event()
    runs: list[int] = []

    def tick(n: int) -> None:
        barrier.wait()
        with run_lock(gcs_bucket, "reconcile", log) as held:
            if held:
                runs.append(n)
                started.wait(5)  # hold the lease until every other tick has been turned away

    threads = [threading.Thread(target=tick, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    deadline = 0
    while len([line for line in stream.getvalue().splitlines() if "run_in_progress" in line]) < 5 and deadline < 100:
        threading.Event().wait(0.05)
        deadline += 1
    started.set()
    for thread in threads:
        thread.join(10)
    assert len(runs) == 1
    assert [line["event"] for line in _lines(stream)] == ["run_in_progress"] * 5
