"""Spot capacity that comes and goes: the emulator replays an availability trace (opt-in).

Invented for tests: Vertex AI documents that a Spot job may wait for capacity (QUEUED/PENDING)
and that a Spot VM can be preempted at any time
(https://cloud.google.com/vertex-ai/docs/training/use-spot-vms), but publishes no trace of when.
This replays one in the format of the public Spot availability traces that the deadline
benchmark reads (docs/deadlines.md: `{"metadata": {"gap_seconds": 600}, "data": [1, 0, ...]}`,
1 = a Spot VM could be had in that interval), time-scaled: each entry lasts `tick_seconds` of
wall time, counted from when the trace is set, and the last entry holds for ever after.

A trace may name a `location` (placement's stack scenarios, docs/placement.md: Spot in one region
and not another, as invented as the rest): it holds for the jobs of that region, and a trace
without one for every region that has none of its own.

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
from dataclasses import dataclass
from typing import Any

ANY_LOCATION = ""  # the trace of every location without one of its own


@dataclass(frozen=True)
class _Trace:
    data: tuple[int, ...]
    tick_seconds: float
    origin: float


class SpotCapacity:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._traces: dict[str, _Trace] = {}

    def set_trace(self, body: Any) -> dict[str, Any]:
        """`{"data": [1, 0, ...], "tick_seconds": 2.0, "location": "us-east4"}` (`location`
        optional); `{"data": []}` removes that trace. Raises ValueError naming the offending field."""
        if not isinstance(body, dict) or set(body) - {"data", "tick_seconds", "location"}:
            raise ValueError('a capacity trace is {"data": [1, 0, ...], "tick_seconds": S, "location"?: REGION}')
        data = body.get("data")
        if not isinstance(data, list) or not all(value in (0, 1) and not isinstance(value, bool) for value in data):
            raise ValueError("data must be a list of 0 and 1")
        tick = body.get("tick_seconds", 1.0)
        if isinstance(tick, bool) or not isinstance(tick, (int, float)) or tick <= 0:
            raise ValueError("tick_seconds must be a positive number")
        location = body.get("location", ANY_LOCATION)
        if not isinstance(location, str):
            raise ValueError("location must be a region name")
        with self._lock:
            if data:
                self._traces[location] = _Trace(tuple(data), float(tick), self._clock())
            else:
                self._traces.pop(location, None)
        return self.to_json(location)

    def available(self, location: str = ANY_LOCATION) -> bool:
        with self._lock:
            trace = self._trace(location)
            if trace is None:
                return True
            index = int((self._clock() - trace.origin) // trace.tick_seconds)
            return bool(trace.data[min(index, len(trace.data) - 1)])

    def seconds_to_next_tick(self, location: str = ANY_LOCATION) -> float:
        with self._lock:
            trace = self._trace(location)
            if trace is None:
                return float("inf")
            return trace.tick_seconds - (self._clock() - trace.origin) % trace.tick_seconds

    def holds_for(self, location: str = ANY_LOCATION) -> bool:
        """Whether a trace holds for this region (its own, or the one without a location)."""
        with self._lock:
            return self._trace(location) is not None

    def to_json(self, location: str = ANY_LOCATION) -> dict[str, Any]:
        with self._lock:
            trace = self._trace(location)
            found = {"data": list(trace.data), "tick_seconds": trace.tick_seconds} if trace else {"data": []}
            return {**found, **({"location": location} if location else {})}

    def clear(self) -> None:
        with self._lock:
            self._traces.clear()

    def _trace(self, location: str) -> _Trace | None:
        return self._traces.get(location) or self._traces.get(ANY_LOCATION)
