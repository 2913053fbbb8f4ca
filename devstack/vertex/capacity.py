"""Spot capacity that comes and goes: the emulator replays an availability trace (opt-in).

Invented for tests: Vertex AI documents that a Spot job may wait for capacity (QUEUED/PENDING)
and that a Spot VM can be preempted at any time
(https://cloud.google.com/vertex-ai/docs/training/use-spot-vms), but publishes no trace of when.
This replays one in the format of the public Spot availability traces that the deadline
benchmark reads (docs/deadlines.md: `{"metadata": {"gap_seconds": 600}, "data": [1, 0, ...]}`,
1 = a Spot VM could be had in that interval), time-scaled: each entry lasts `tick_seconds` of
wall time, counted from when the trace is set, and the last entry holds for ever after.

While a trace is set: a Spot job's worker does not start (the job waits PENDING, or RUNNING
between restarts under the documented profile) while the current entry is 0, and a running Spot
worker is preempted as when a plan fires (SIGTERM, restart, STOCKOUT after six) when the entry it
runs in turns 0. Without a trace (the default) Spot capacity is always there. STANDARD jobs never
wait for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class SpotCapacity:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._data: tuple[int, ...] = ()
        self._tick_seconds = 1.0
        self._origin = 0.0

    def set_trace(self, body: Any) -> dict[str, Any]:
        """`{"data": [1, 0, ...], "tick_seconds": 2.0}`; `{"data": []}` removes the trace. Raises
        ValueError naming the offending field."""
        if not isinstance(body, dict) or set(body) - {"data", "tick_seconds"}:
            raise ValueError('a capacity trace is {"data": [1, 0, ...], "tick_seconds": S}')
        data = body.get("data")
        if not isinstance(data, list) or not all(value in (0, 1) and not isinstance(value, bool) for value in data):
            raise ValueError("data must be a list of 0 and 1")
        tick = body.get("tick_seconds", 1.0)
        if isinstance(tick, bool) or not isinstance(tick, (int, float)) or tick <= 0:
            raise ValueError("tick_seconds must be a positive number")
        with self._lock:
            self._data, self._tick_seconds, self._origin = tuple(data), float(tick), self._clock()
        return self.to_json()

    def available(self) -> bool:
        with self._lock:
            if not self._data:
                return True
            index = int((self._clock() - self._origin) // self._tick_seconds)
            return bool(self._data[min(index, len(self._data) - 1)])

    def seconds_to_next_tick(self) -> float:
        with self._lock:
            if not self._data:
                return float("inf")
            elapsed = self._clock() - self._origin
            return self._tick_seconds - elapsed % self._tick_seconds

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return {"data": list(self._data), "tick_seconds": self._tick_seconds}

    def clear(self) -> None:
        with self._lock:
            self._data = ()
