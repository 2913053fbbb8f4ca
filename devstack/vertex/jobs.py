"""A Vertex CustomJob as the emulator keeps it (`JobRecord`, with a `ReplicaRecord` per replica),
and the store that finds and pages them.

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
from devstack.vertex.logs import PRIMARY_REPLICA
from devstack.vertex.modes import ReplicaModes
from devstack.vertex.preemption import JobPreemptionState, PlannedPreemption
from devstack.vertex.signals import SignalProfile
from devstack.vertex.worker import WorkerLaunch, WorkerProcess

State = aiplatform_v1.JobState
_OUTPUT_LINES_KEPT = 1000


@dataclass
class ReplicaRecord:
    """One replica (`workerpool<P>-<i>`) of a job: its launch, its runs, and the current one."""

    launch: WorkerLaunch
    starts: int = 0
    preemptions: int = 0  # times its VM was reclaimed
    spot_restarts: int = 0  # counted towards the six under spot_restart_count per_replica
    pids: list[int] = field(default_factory=list)
    exit_statuses: list[int] = field(default_factory=list)
    # When the emulator saw each exit (RFC 3339): a survivor's time left over a reclaimed replica's.
    exit_times: list[str] = field(default_factory=list)
    signals: list[dict[str, Any]] = field(default_factory=list)
    worker: WorkerProcess | None = None
    # The current run: when to preempt it, and the progress that decides it.
    planned: PlannedPreemption | None = None
    started_monotonic: float = 0.0
    checkpoints: int = 0  # checkpoints the job committed since this run started
    output_matched: bool = False  # the plan's after_output line was written (after its checkpoints)
    restart_at: float | None = None  # a replica restarting alone: when its new VM is ready

    @property
    def name(self) -> str:
        return self.launch.replica

    @property
    def is_primary(self) -> bool:
        return self.name == PRIMARY_REPLICA

    def details(self) -> dict[str, Any]:
        return {
            "starts": self.starts,
            "preemptions": self.preemptions,
            "pids": list(self.pids),
            "exit_statuses": list(self.exit_statuses),
            "exit_times": list(self.exit_times),
            "signals": list(self.signals),
            "running": self.worker is not None,
        }


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
    # Bound at creation, so a profile or mode switch never mixes behaviours within one job.
    profile: SignalProfile
    modes: ReplicaModes = field(default_factory=ReplicaModes)
    # FLEX_START (devstack.vertex.flex): its maxWaitDuration (None: for ever), and the create
    # error it fails with under the `flex_requirements` mode `job_failed`.
    is_flex_start: bool = False
    flex_max_wait_seconds: float | None = None
    flex_refusal: str | None = None
    # When the create was stored (time.monotonic()): a list lag fault hides younger jobs.
    created_monotonic: float = field(default_factory=time.monotonic)
    wake: threading.Event = field(default_factory=threading.Event)
    cancel_requested: bool = False
    # A preemption asked for through the control surface: a replica's name, or "all".
    preempt_requested: str | None = None
    discarded: bool = False
    job_starts: int = 0  # starts of the whole job (the first, then each whole-job restart)
    preemptions: int = 0  # reclaimed VMs, over every replica
    spot_restarts: int = 0  # counted towards the six (spot_restart_count per_event or per_vm)
    transient_restarts: int = 0  # restarts after a potentially transient exit: three at most
    argv: tuple[str, ...] = ()
    image_uri: str = ""
    # By replica name, the primary first; filled when the job first starts.
    replicas: dict[str, ReplicaRecord] = field(default_factory=dict)
    state_history: list[str] = field(default_factory=list)
    output: collections.deque[dict[str, Any]] = field(
        default_factory=lambda: collections.deque(maxlen=_OUTPUT_LINES_KEPT)
    )
    supervisor: threading.Thread | None = None

    @property
    def state(self) -> State:
        return State(self.job.state)

    @property
    def interrupted(self) -> bool:
        return self.cancel_requested or self.discarded

    @property
    def primary(self) -> ReplicaRecord | None:
        return self.replicas.get(PRIMARY_REPLICA)

    @property
    def restarts_whole_job_on_worker_restart(self) -> bool:
        """`restartJobOnWorkerRestart`, which `disableRetries` overrides to false, as documented."""
        scheduling = self.job.job_spec.scheduling
        return bool(scheduling.restart_job_on_worker_restart and not scheduling.disable_retries)

    @property
    def restarts_whole_job(self) -> bool:
        """Whether a reclaimed replica's restart restarts every replica: the flag, or the emulator
        mode."""
        return self.restarts_whole_job_on_worker_restart or self.modes.preemption_restarts == "job"

    def running_workers(self) -> list[WorkerProcess]:
        return [replica.worker for replica in self.replicas.values() if replica.worker is not None]

    def details(self) -> dict[str, Any]:
        """The top-level runs, pids, exit_statuses and signals are the primary's (as for a
        single-replica job); `replicas` has each replica's, and `preemptions` counts every
        reclaimed VM."""
        primary = self.primary
        return {
            "name": self.job.name,
            "signal_profile": self.profile.name,
            "replica_modes": self.modes.to_json(),
            "state": self.state.name,
            "state_history": list(self.state_history),
            "is_spot": self.is_spot,
            "is_flex_start": self.is_flex_start,
            "image_uri": self.image_uri,
            "argv": list(self.argv),
            "runs": primary.starts if primary else 0,
            "preemptions": self.preemptions,
            "spot_restarts": self.spot_restarts,
            "transient_restarts": self.transient_restarts,
            "pids": list(primary.pids) if primary else [],
            "exit_statuses": list(primary.exit_statuses) if primary else [],
            "signals": list(primary.signals) if primary else [],
            "replicas": {name: replica.details() for name, replica in self.replicas.items()},
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
