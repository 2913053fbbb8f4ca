"""A Vertex CustomJob as the emulator keeps it (`JobRecord`), and the store that finds and pages them.

Records are plain data; `devstack.vertex.runner` changes them, always under its one lock.
"""

from __future__ import annotations

import collections
import itertools
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from google.cloud import aiplatform_v1

from devstack.vertex.errors import invalid_argument, not_found
from devstack.vertex.filter import JobFilter
from devstack.vertex.preemption import JobPreemptionState
from devstack.vertex.signals import SignalProfile
from devstack.vertex.worker import WorkerProcess

State = aiplatform_v1.JobState
_OUTPUT_LINES_KEPT = 1000


@dataclass
class JobRecord:
    job: aiplatform_v1.CustomJob
    job_id: str
    location: str
    project_id: str
    sequence: int
    labels: dict[str, str]
    is_spot: bool
    preemption: JobPreemptionState
    # Bound at creation, so a profile switch never mixes shapes within one job.
    profile: SignalProfile
    # When the create was stored (time.monotonic()): a list lag fault hides younger jobs.
    created_monotonic: float = field(default_factory=time.monotonic)
    wake: threading.Event = field(default_factory=threading.Event)
    cancel_requested: bool = False
    preempt_requested: bool = False
    discarded: bool = False
    runs: int = 0
    # Checkpoints the current run committed (its kit lines): what a progress-keyed plan counts.
    run_checkpoints: int = 0
    preemptions: int = 0
    argv: tuple[str, ...] = ()
    image_uri: str = ""
    pids: list[int] = field(default_factory=list)
    exit_statuses: list[int] = field(default_factory=list)
    signals: list[dict[str, Any]] = field(default_factory=list)
    state_history: list[str] = field(default_factory=list)
    output: collections.deque[dict[str, Any]] = field(
        default_factory=lambda: collections.deque(maxlen=_OUTPUT_LINES_KEPT)
    )
    supervisor: threading.Thread | None = None
    worker: WorkerProcess | None = None

    @property
    def state(self) -> State:
        return State(self.job.state)

    @property
    def interrupted(self) -> bool:
        return self.cancel_requested or self.discarded

    def details(self) -> dict[str, Any]:
        return {
            "name": self.job.name,
            "signal_profile": self.profile.name,
            "state": self.state.name,
            "state_history": list(self.state_history),
            "is_spot": self.is_spot,
            "image_uri": self.image_uri,
            "argv": list(self.argv),
            "runs": self.runs,
            "preemptions": self.preemptions,
            "pids": list(self.pids),
            "exit_statuses": list(self.exit_statuses),
            "signals": list(self.signals),
            "output": list(self.output),
        }


class JobStore:
    """Jobs by location and id. Callers hold the shared lock."""

    def __init__(self) -> None:
        self._jobs: dict[tuple[str, str], JobRecord] = {}
        # Ids look like Vertex's (19 digits) and differ between emulator runs.
        self._ids = itertools.count(random.SystemRandom().randrange(10**18, 8 * 10**18))
        self._sequence = itertools.count(1)

    def new_ids(self) -> tuple[str, int]:
        return str(next(self._ids)), next(self._sequence)

    def add(self, record: JobRecord) -> None:
        self._jobs[(record.location, record.job_id)] = record

    def get(self, location: str, job_id: str, name: str) -> JobRecord:
        record = self._jobs.get((location, job_id))
        if record is None:
            raise not_found(f'The CustomJob "{name}" does not exist.')
        return record

    def page(
        self,
        location: str,
        job_filter: JobFilter,
        page_size: int,
        page_token: str,
        *,
        created_by: float | None = None,
    ) -> tuple[list[JobRecord], str]:
        """Newest first; the token is the sequence number of the last job returned. With
        `created_by` (a time.monotonic() value), jobs created after it are left out (a list lag)."""
        before = _parse_page_token(page_token)
        selected = sorted(
            (
                record
                for record in self._jobs.values()
                if record.location == location
                and record.sequence < before
                and (created_by is None or record.created_monotonic <= created_by)
                and job_filter.matches(record.job)
            ),
            key=lambda record: record.sequence,
            reverse=True,
        )
        page = selected[:page_size]
        next_token = str(page[-1].sequence) if len(selected) > page_size else ""
        return page, next_token

    def all(self) -> list[JobRecord]:
        return list(self._jobs.values())

    def clear(self) -> None:
        self._jobs.clear()


def _parse_page_token(token: str) -> int:
    if not token:
        return 2**63
    if not token.isdigit():
        raise invalid_argument(f"Invalid page token: {token!r}")
    return int(token)
