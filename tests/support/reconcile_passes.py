"""Driving reconcile through the embedded stack by whole passes, not by seconds.

A stack test that needs reconcile to act waits for passes that began after what they must see,
one at a time: a tick is published and followed to its end in reconcile's log. A tick that finds
a pass running is turned away (`run_in_progress`, shared/ledger/run_lock.py), and that pass may
have begun before the change, so it does not count: the next tick is published once that pass has
released the run lease (its summary line comes just before). So ticks never pile up. They could:
the stack's Pub/Sub emulator pushes at most two messages of a subscription at a time, in order
(measured: 200 pushes of 1 s each took 100 s and never overlapped by more than two), so ticks
published at every poll of a wait, faster than they are handled, queue ahead of every later tick,
of this test or the next.

The wall-clock bound left is Pub/Sub's delivery and one pass's run on a loaded machine
(`TICK_TIMEOUT`); how long reconcile takes to act is counted in passes. A timeout says what
reconcile's log and the run lease showed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

TICK = json.dumps({"task": "reconcile"}).encode()
# A tick's delivery and the end of the pass it runs or waits for, on a loaded machine: a bound,
# not an expectation (alone, a pass of the session's stack takes well under a second).
TICK_TIMEOUT = 180.0
# The fewest seconds between the passes `passes_until` runs while the world moves on: back to back,
# a pass's listing and the test's own looks would spend much of Vertex's CRUD quota (600 a minute).
PASS_INTERVAL = 1.0
_ENDS = ("reconcile_summary", "run_in_progress", "permanent_failure")


class ReconcileLog:
    """reconcile's structured log lines written since this was made, read on from an offset (a
    suite's session stack writes a long log; a poll reads only what is new)."""

    def __init__(self, stack: Any) -> None:
        self._path: Path = stack.function_log_path("reconcile")
        self._offset = self._path.stat().st_size if self._path.exists() else 0
        self._partial = b""
        self.lines: list[dict[str, Any]] = []

    def read(self) -> list[dict[str, Any]]:
        """Every line so far (the new ones appended)."""
        if self._path.exists():
            with self._path.open("rb") as log:
                log.seek(self._offset)
                chunk = log.read()
            self._offset += len(chunk)
            *complete, self._partial = (self._partial + chunk).split(b"\n")
            for raw in complete:
                if raw.startswith(b"{"):
                    try:
                        self.lines.append(json.loads(raw))
                    except ValueError:
                        continue
        return self.lines


def reconcile_pass(stack: Any, *, timeout: float = TICK_TIMEOUT) -> dict[str, Any]:
    """One whole reconcile pass that began after this call; returns its summary line."""
    log = ReconcileLog(stack)
    deadline = time.monotonic() + timeout
    while True:
        message_id = stack.publish("maintenance", TICK, task="reconcile")
        end = _wait(log, deadline, lambda lines, m=message_id: _end_of(lines, m), f"tick {message_id} to be handled")
        if end["event"] == "reconcile_summary":
            return end
        if end["event"] == "permanent_failure":
            raise AssertionError(f"reconcile failed tick {message_id} for good: {end.get('error')}")
        # Turned away by a run holding the lease: tick again once that run has let it go (its
        # summary line comes before its release, so the lease, not the log, says when).
        holder = end.get("holder")
        _wait(
            log,
            deadline,
            lambda _lines, h=holder: _lease_holder(stack) != h,
            f"the run of {holder}, which turned tick {message_id} away, to release the lease "
            f"(expires {end.get('expires_at')})",
        )


def reconcile_until(stack: Any, condition: Callable[[], T], what: str, *, passes: int) -> T:
    """Run whole passes, one at a time, until `condition()` holds after one; at most `passes`."""
    summaries = []
    for _ in range(passes):
        summaries.append(reconcile_pass(stack))
        value = condition()
        if value:
            return value
    last = {key: summaries[-1].get(key) for key in ("active", "outcomes", "decisions", "vertex")}
    raise AssertionError(f"{what}: not after {passes} reconcile passes (the last: {last})")


def passes_until(stack: Any, condition: Callable[[], T], what: str, *, timeout: float) -> T:
    """For what the world does on its own clock (Vertex ending a job, a trainer's run): a whole
    pass after each look that finds it not yet done, so reconcile's part never waits for a tick,
    and `timeout` bounds the world's part only."""
    deadline = time.monotonic() + timeout
    passes = 0
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s ({passes} reconcile passes) waiting for {what}")
        began = time.monotonic()
        reconcile_pass(stack)
        passes += 1
        time.sleep(max(0.0, began + PASS_INTERVAL - time.monotonic()))


def _lease_holder(stack: Any) -> str | None:
    """Who holds reconcile's run lease now (None: nobody)."""
    from shared.ledger.run_lock import lock_path

    found = stack.storage().bucket(stack.settings.state_bucket).get_blob(lock_path("reconcile"))
    if found is None:
        return None
    try:
        return json.loads(found.download_as_bytes()).get("holder")
    except Exception:  # noqa: BLE001 - released or replaced between the look and the read: not that run's
        return None


def _end_of(lines: list[dict[str, Any]], message_id: str) -> dict[str, Any] | None:
    return next((line for line in lines if line.get("message_id") == message_id and line.get("event") in _ENDS), None)


def _wait(log: ReconcileLog, deadline: float, found: Callable[[list[dict[str, Any]]], Any], what: str) -> Any:
    while True:
        value = found(log.read())
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; reconcile's last lines: {_last_passes(log)}")
        time.sleep(0.2)


def _last_passes(log: ReconcileLog) -> list[dict[str, Any]]:
    interesting = ("reconcile_summary", "run_in_progress", "retry", "permanent_failure", "run_lock_unreleased")
    return [
        {key: line.get(key) for key in ("time", "message_id", "event", "holder", "expires_at", "error") if key in line}
        for line in log.lines
        if line.get("event") in interesting
    ][-8:]
