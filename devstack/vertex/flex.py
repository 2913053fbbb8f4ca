"""FLEX_START (Dynamic Workload Scheduler) in the emulator: its capacity trace and its wait.

Documented (https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws): a FLEX_START job
runs "as soon as the requested resources become available"; `scheduling.maxWaitDuration` is how
long it may wait for them, 0 waits indefinitely, the default is 1 day; a multi-node job starts once
all its nodes are provisioned at the same time. Compute Engine's flex-start VMs
(https://cloud.google.com/compute/docs/instances/about-flex-start-vms) run for a fixed duration of
up to seven days, and a request whose resources do not come within its wait fails.

When capacity comes is not published, so, as for Spot (`capacity`), the emulator replays an
opt-in trace in the same format, with an optional `machine_type`: a trace naming the job's
machine type holds before one naming none, and within each, one naming the job's region before
one naming none. Without a trace FLEX_START capacity is always there. Every replica of a job
waits on the same entry (every worker pool has the same machine configuration, a documented
requirement), so all of them start together. What the wait's end, a preemption and a broken
requirement do is not documented for Vertex: `devstack.vertex.modes` (`flex_*`).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from typing import Any

from google.cloud import aiplatform_v1

from devstack.vertex.capacity import ANY_LOCATION, SpotCapacity

FLEX_START = aiplatform_v1.Scheduling.Strategy.FLEX_START
# "The default value is 1 day" (maxWaitDuration, schedule-jobs-dws).
DEFAULT_MAX_WAIT_SECONDS = 86400.0
ANY_MACHINE = ""  # a trace that holds for every machine type without one of its own


class WaitVerdict(enum.Enum):
    RUN = "run"  # capacity is there: every replica starts
    WAIT = "wait"  # no capacity yet, and the job may wait on
    EXPIRED = "expired"  # no capacity within maxWaitDuration: the job ends


def is_flex_start(job: aiplatform_v1.CustomJob) -> bool:
    return job.job_spec.scheduling.strategy == FLEX_START


def max_wait_seconds(job: aiplatform_v1.CustomJob) -> float | None:
    """The job's maxWaitDuration in seconds; None when it waits indefinitely (0)."""
    scheduling = job.job_spec.scheduling
    if "max_wait_duration" not in scheduling:
        return DEFAULT_MAX_WAIT_SECONDS
    seconds = scheduling.max_wait_duration.total_seconds()
    return None if seconds == 0 else seconds


def wait_verdict(available: bool, waited_seconds: float, max_wait: float | None) -> WaitVerdict:
    """Capacity that comes at the wait's last moment still starts the job."""
    if available:
        return WaitVerdict.RUN
    if max_wait is not None and waited_seconds >= max_wait:
        return WaitVerdict.EXPIRED
    return WaitVerdict.WAIT


def wait_expired_message(max_wait_seconds: float) -> str:
    """The error of a job whose wait ran out: Vertex documents no text, so this one is invented."""
    return (
        "The resources requested by this FLEX_START job were not available within its "
        f"maxWaitDuration ({max_wait_seconds:g}s)."
    )


class FlexCapacity:
    """FLEX_START capacity traces by machine type, each kept as a Spot trace is (by region)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._by_machine: dict[str, SpotCapacity] = {}

    def set_trace(self, body: Any) -> dict[str, Any]:
        """A Spot trace's body (`capacity.SpotCapacity.set_trace`) with an optional
        `"machine_type": "a3-highgpu-8g"`; `{"data": []}` removes that trace. Raises ValueError."""
        if not isinstance(body, dict):
            raise ValueError("a FLEX_START capacity trace is a Spot trace's object with an optional machine_type")
        machine_type = body.get("machine_type", ANY_MACHINE)
        if not isinstance(machine_type, str):
            raise ValueError("machine_type must be a machine type name")
        trace = {key: value for key, value in body.items() if key != "machine_type"}
        with self._lock:
            capacity = self._by_machine.setdefault(machine_type, SpotCapacity(self._clock))
        answer = capacity.set_trace(trace)
        return {**answer, **({"machine_type": machine_type} if machine_type else {})}

    def available(self, location: str = ANY_LOCATION, machine_type: str = ANY_MACHINE) -> bool:
        capacity = self._capacity(location, machine_type)
        return capacity is None or capacity.available(location)

    def seconds_to_next_tick(self, location: str = ANY_LOCATION, machine_type: str = ANY_MACHINE) -> float:
        capacity = self._capacity(location, machine_type)
        return float("inf") if capacity is None else capacity.seconds_to_next_tick(location)

    def to_json(self, location: str = ANY_LOCATION, machine_type: str = ANY_MACHINE) -> dict[str, Any]:
        capacity = self._capacity(location, machine_type)
        found = capacity.to_json(location) if capacity is not None else {"data": []}
        return {**found, **({"machine_type": machine_type} if machine_type else {})}

    def clear(self) -> None:
        with self._lock:
            self._by_machine.clear()

    def _capacity(self, location: str, machine_type: str) -> SpotCapacity | None:
        with self._lock:
            for machine in dict.fromkeys((machine_type, ANY_MACHINE)):
                capacity = self._by_machine.get(machine)
                if capacity is not None and capacity.holds_for(location):
                    return capacity
        return None
