"""The runner that takes each job through its lifecycle.

Lifecycle (the states of job_state.proto,
https://github.com/googleapis/googleapis/blob/master/google/cloud/aiplatform/v1/job_state.proto):
QUEUED (until a capacity slot is free, then `queued_seconds`) -> PENDING (`pending_seconds`) ->
RUNNING (one process per replica of every worker pool) -> SUCCEEDED when the primary
(`workerpool0-0`) exits 0, FAILED when any replica exits non-zero (but SIGABRT's or SIGSEGV's
status, "potentially transient", restarts up to three times: `transient_exit_restarts` in
`devstack.vertex.modes`); then the other replicas are
stopped (SIGTERM, SIGKILL after `grace_seconds`). "A training job completes successfully when its
primary replica exits with exit code 0. At that point, [Vertex] shuts down all the other running
workers" (https://cloud.google.com/vertex-ai/docs/training/understanding-training-service); a
non-primary replica that exits 0 is done and stays down. A Spot preemption reclaims one replica
(or several at once): SIGTERM to its process group, SIGKILL after `grace_seconds`, then either
that replica restarts alone after `pending_seconds` or the whole job restarts (the job's
`restartJobOnWorkerRestart`, or the `preemption_restarts` mode: `devstack.vertex.modes`); the
job stays RUNNING meanwhile (documented profile; the rich profile goes back through PENDING on a
whole-job restart). "When Spot VMs are preempted, the [...] job fails with a STOCKOUT error and
Compute Engine tries to restart the job up to six times"
(https://cloud.google.com/vertex-ai/docs/training/use-spot-vms): the restart past six (counted
as the `spot_restart_count` mode says) fails the job with STOCKOUT. A job whose running time
(from its first RUNNING, restarts included) reaches `scheduling.timeout` ("The maximum job running
time. The default is 7 days.") is stopped as a cancel stops it and ends as the `timeout_end` mode
says. Cancel: CANCELLING, every
replica is terminated the same way, CANCELLED. Which service lines each moment writes is the
job's signal profile's choice (`devstack.vertex.signals`).

A job holds one of `max_running` slots from admission to its end, restarts included, so a burst
of creates queues instead of becoming a burst of processes. Only admitted jobs have a thread.
All job state (the records of `devstack.vertex.jobs`) is guarded by one lock; log entries are
published outside it.

Over 450 lines and one thing: one state machine under that one lock. Admission, the lifecycle's
moves, preemption restarts and the endings each read and change the same records, slots and
threads, and which moves hold the lock is the design; split, that would be one lock shared
across modules. The parts that need no lock are elsewhere already: the worker process
(`worker`), the preemption plan (`preemption`), log entries (`logs`), signal profiles (`signals`).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.rpc import status_pb2
from spotjobs_kit.lines import CHECKPOINT_COMMITTED, parse_kit_line

from devstack.vertex import logs as lines
from devstack.vertex.capacity import SpotCapacity
from devstack.vertex.errors import failed_precondition
from devstack.vertex.flex import FlexCapacity, WaitVerdict, wait_expired_message, wait_verdict
from devstack.vertex.fuse import FuseMirror
from devstack.vertex.jobs import JobRecord, JobStore, ReplicaRecord, State
from devstack.vertex.logs import PRIMARY_REPLICA, LogEntryFactory, LogSink
from devstack.vertex.preemption import ALL_REPLICAS, PreemptionPlanner
from devstack.vertex.signals import RESOURCE_EXHAUSTED_CODE
from devstack.vertex.worker import UnrunnableJob, WorkerProcess, build_launches, stop_together
from shared.log import Logger

# A JobState member: proto-plus enums are IntEnums that type checkers see as plain ints.
StateValue = int
TERMINAL_STATES = frozenset(
    {State.JOB_STATE_SUCCEEDED, State.JOB_STATE_FAILED, State.JOB_STATE_CANCELLED, State.JOB_STATE_EXPIRED}
)
_POLL_SECONDS = 0.05
_PUMP_JOIN_SECONDS = 1.0

# google.rpc codes for job errors. Vertex publishes no mapping, so each is chosen for what a
# classifier should conclude from it (and classifiers must read the message too):
# - a trainer's non-zero exit is the caller's problem and must not look transient: 3
#   INVALID_ARGUMENT;
# - STOCKOUT: the profile's (`SignalProfile.stockout`; no code is documented);
# - a cancelled job: 1 CANCELLED, google.rpc's code for an operation cancelled by its caller;
# - a failure of the emulator itself: 13 INTERNAL, with the message Vertex documents for its own
#   internal errors.
EXIT_FAILURE_CODE = 3
# Exit statuses the training-service page's common errors call "potentially transient": SIGABRT
# ("6, or 134 in custom containers") and SIGSEGV (11, or 139); restarted up to three times.
TRANSIENT_EXIT_STATUSES = frozenset({6, 134, 11, 139})
MAX_TRANSIENT_RESTARTS = 3
CANCELLED_CODE = 1
# google.rpc DEADLINE_EXCEEDED, for a job ended at its scheduling.timeout (`timeout_end` failed).
DEADLINE_EXCEEDED_CODE = 4
DEFAULT_TIMEOUT_SECONDS = 7 * 86400.0  # Scheduling.timeout: "The default is 7 days."
INTERNAL_CODE = 13
CANCELLED_MESSAGE = "CANCELED"
_CANCEL_STATES = frozenset({State.JOB_STATE_CANCELLING, State.JOB_STATE_CANCELLED})
_CANCELLED_ERROR = (CANCELLED_CODE, CANCELLED_MESSAGE)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class RunnerConfig:
    max_running: int = 8
    queued_seconds: float = 0.2
    pending_seconds: float = 0.2
    grace_seconds: float = 2.0
    # Vertex sets `error` about a minute after a job ends; 0 sets it with the final state, None
    # takes the job's signal profile's default (documented: 60, rich: 0).
    error_delay_seconds: float | None = None
    gcs_fuse_dir: str | None = None  # devstack.vertex.fuse; None: no mount


class Outcome(enum.Enum):
    ENDED = "ended"  # the job reached its final state (or was discarded)
    RESTART_JOB = "restart_job"  # every replica starts again


class JobRunner:
    def __init__(
        self,
        *,
        config: RunnerConfig,
        planner: PreemptionPlanner,
        capacity: SpotCapacity,
        flex_capacity: FlexCapacity,
        sink: LogSink,
        entries: LogEntryFactory,
        logger: Logger,
    ) -> None:
        self.lock = threading.RLock()
        self.store = JobStore()
        self._config = config
        self._planner = planner
        self._capacity = capacity
        self._flex_capacity = flex_capacity
        self._sink = sink
        self._entries = entries
        self._logger = logger
        self._fuse = FuseMirror(config.gcs_fuse_dir) if config.gcs_fuse_dir else None
        self._waiting: collections.deque[JobRecord] = collections.deque()
        self._admitted = 0
        self._stopping = False

    # ---- requests from the API (callers need not hold the lock) ----

    def submit(self, record: JobRecord) -> None:
        with self.lock:
            self.store.add(record)
            self._transition_locked(record, State.JOB_STATE_QUEUED)
        # Logged once the job can be read, and before its own thread logs anything.
        self._service_lines(record, record.profile.created())
        with self.lock:
            if self._stopping:
                return
            if self._admitted < self._config.max_running:
                self._admit_locked(record)
            else:
                self._waiting.append(record)

    def cancel(self, record: JobRecord) -> None:
        with self.lock:
            if record.state in TERMINAL_STATES:
                raise failed_precondition(f"Cannot cancel CustomJob {record.job.name} in state {record.state.name}.")
            if record.cancel_requested:
                return
            record.cancel_requested = True
            self._transition_locked(record, State.JOB_STATE_CANCELLING)
            waiting = record.supervisor is None
            if record in self._waiting:
                self._waiting.remove(record)
        if waiting:
            self._finish_cancelled(record)
        else:
            record.wake.set()

    def preempt_now(self, record: JobRecord, replica: str = PRIMARY_REPLICA) -> None:
        """Reclaims `replica` ("all": every running replica) of a RUNNING SPOT job now."""
        with self.lock:
            if not record.is_spot:
                raise failed_precondition("Only jobs scheduled with strategy SPOT are preempted.")
            if record.state != State.JOB_STATE_RUNNING:
                raise failed_precondition(f"CustomJob {record.job.name} is {record.state.name}, not RUNNING.")
            if replica != ALL_REPLICAS and replica not in record.replicas:
                raise failed_precondition(f"CustomJob {record.job.name} has no replica {replica}.")
            record.preempt_requested = replica
        record.wake.set()

    def stop(self) -> None:
        """Terminates every worker (SIGTERM, grace, SIGKILL) and admits nothing more."""
        with self.lock:
            self._stopping = True
        self._discard_all()

    def reset(self) -> None:
        """Terminates every worker and forgets every job; the runner keeps serving."""
        self._discard_all()
        with self.lock:
            self.store.clear()

    def stats(self) -> dict[str, Any]:
        with self.lock:
            records = self.store.all()
            by_state = collections.Counter(record.state.name for record in records)
            return {
                "jobs": len(records),
                "jobs_by_state": dict(sorted(by_state.items())),
                "running_processes": sum(len(record.running_workers()) for record in records),
                "admitted": self._admitted,
                "waiting_for_capacity": len(self._waiting),
                "max_running": self._config.max_running,
                "worker_starts": sum(replica.starts for record in records for replica in record.replicas.values()),
                "preemptions": sum(record.preemptions for record in records),
            }

    # ---- admission ----

    def _admit_locked(self, record: JobRecord) -> None:
        self._admitted += 1
        record.supervisor = threading.Thread(
            target=self._supervise, args=(record,), name=f"job-{record.job_id}", daemon=True
        )
        record.supervisor.start()

    def _release(self) -> None:
        with self.lock:
            self._admitted -= 1
            while self._waiting and not self._stopping and self._admitted < self._config.max_running:
                self._admit_locked(self._waiting.popleft())

    def _discard_all(self) -> None:
        with self.lock:
            self._waiting.clear()
            records = self.store.all()
            for record in records:
                record.discarded = True
        for record in records:
            record.wake.set()
        join_seconds = self._config.grace_seconds + 2 * _PUMP_JOIN_SECONDS + 1.0
        for record in records:
            if record.supervisor is not None:
                record.supervisor.join(join_seconds)
            for worker in record.running_workers():  # a supervisor that did not finish in time
                worker.tear_down()

    # ---- the lifecycle, on the job's own thread ----

    def _supervise(self, record: JobRecord) -> None:
        try:
            self._run_job(record)
        except Exception as error:  # an emulator bug must end the job, not hang it
            self._logger.error("job supervisor crashed", job=record.job.name, error=repr(error))
            for worker in record.running_workers():
                worker.tear_down()
            self._finish(
                record,
                State.JOB_STATE_FAILED,
                (INTERNAL_CODE, "Internal error occurred for the current attempt."),
                record.profile.failed("Internal error occurred for the current attempt.")[-1:],
            )
        finally:
            self._release()

    def _run_job(self, record: JobRecord) -> None:
        if not self._pause(record, self._config.queued_seconds):
            return self._finish_interrupted(record)
        try:
            launches = build_launches(record.job, record.job_id)
        except UnrunnableJob as error:
            return self._finish(
                record,
                State.JOB_STATE_FAILED,
                (EXIT_FAILURE_CODE, str(error)),
                record.profile.failed(str(error)),
            )
        if self._fuse is not None:
            launches = [
                dataclasses.replace(launch, env={**launch.env, **self._fuse.environment()}) for launch in launches
            ]
        with self.lock:
            record.argv, record.image_uri = launches[0].argv, launches[0].image_uri
            record.replicas = {launch.replica: ReplicaRecord(launch) for launch in launches}
        while True:
            # A restart stays RUNNING (no state is documented for it) unless the profile (rich)
            # goes back through PENDING; either way the new VMs take `pending_seconds`.
            if record.job_starts == 0 or record.profile.pending_on_restart:
                if self._set_state(record, State.JOB_STATE_PENDING):
                    self._service_lines(record, record.profile.pending())
            if record.is_spot and not self._wait_for_spot_capacity(record):
                return self._finish_interrupted(record)
            if record.is_flex_start and record.job_starts == 0 and not self._wait_for_flex_capacity(record):
                return None
            if not self._pause(record, self._config.pending_seconds):
                return self._finish_interrupted(record)
            if self._run_replicas(record) is Outcome.ENDED:
                return None

    def _wait_for_spot_capacity(self, record: JobRecord) -> bool:
        """Waits while the capacity trace (`capacity`, opt-in) has no Spot VM; False if the job is
        cancelled or discarded meanwhile."""
        while not self._capacity.available(record.location):
            record.wake.clear()
            if record.interrupted:
                return False
            record.wake.wait(min(_POLL_SECONDS, self._capacity.seconds_to_next_tick(record.location)))
        return True

    def _wait_for_flex_capacity(self, record: JobRecord) -> bool:
        """A FLEX_START job's wait for all its VMs at once (`flex`): True once the FLEX_START
        capacity trace (opt-in) has them; False when the job ended instead: its create error (the
        `flex_requirements` mode job_failed), its maxWaitDuration run out, or a cancel."""
        if record.flex_refusal is not None:
            error = (EXIT_FAILURE_CODE, record.flex_refusal)
            self._finish(record, State.JOB_STATE_FAILED, error, record.profile.failed(record.flex_refusal))
            return False
        machine_type = record.job.job_spec.worker_pool_specs[0].machine_spec.machine_type
        started = time.monotonic()
        while True:
            record.wake.clear()
            if record.interrupted:
                self._finish_interrupted(record)
                return False
            available = self._flex_capacity.available(record.location, machine_type)
            verdict = wait_verdict(available, time.monotonic() - started, record.flex_max_wait_seconds)
            if verdict is WaitVerdict.RUN:
                return True
            if verdict is WaitVerdict.EXPIRED:
                self._finish_flex_wait_expired(record)
                return False
            record.wake.wait(_POLL_SECONDS)

    def _finish_flex_wait_expired(self, record: JobRecord) -> None:
        """Ends a FLEX_START job whose capacity did not come in time, as `flex_wait_expiry` says."""
        max_wait = record.flex_max_wait_seconds or 0.0
        if record.modes.flex_wait_expiry == "stockout":
            code, message = record.profile.stockout(0)
        else:
            code, message = RESOURCE_EXHAUSTED_CODE, wait_expired_message(max_wait)
        self._logger.info("flex start wait expired", job=record.job.name, max_wait_seconds=max_wait)
        self._finish(record, State.JOB_STATE_FAILED, (code, message), record.profile.failed(message))

    def _pause(self, record: JobRecord, seconds: float) -> bool:
        """Waits, unless the job is cancelled or discarded first (then returns False)."""
        deadline = time.monotonic() + seconds
        while True:
            record.wake.clear()
            if record.interrupted:
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            record.wake.wait(remaining)

    def _run_replicas(self, record: JobRecord) -> Outcome:
        """One start of the whole job: every replica, watched until the job ends or restarts."""
        with self.lock:
            record.job_starts += 1
            if not record.job.start_time:
                record.job.start_time = _now()
            # A documented restart is already RUNNING: no transition, no line.
            running = record.state != State.JOB_STATE_RUNNING and self._transition_locked(
                record, State.JOB_STATE_RUNNING
            )
            replicas = list(record.replicas.values())
        if running:
            self._service_lines(record, record.profile.running())
        if self._fuse is not None:
            self._fuse.pull(replicas[0].launch.env)  # the new VMs' mount shows the bucket as it is now
        for replica in replicas:
            if not self._start_replica(record, replica):
                return Outcome.ENDED
        return self._watch(record)

    def _start_replica(self, record: JobRecord, replica: ReplicaRecord) -> bool:
        """Starts one run of a replica; False when it cannot be run (the job has then ended)."""
        planned = (
            self._planner.next_preemption(
                record.preemption, record.labels, replica.name, rate_reclaims=record.modes.rate_reclaims
            )
            if record.is_spot
            else None
        )
        with self.lock:
            replica.starts += 1
            run = replica.starts
            replica.planned, replica.started_monotonic = planned, time.monotonic()
            replica.checkpoints, replica.output_matched = 0, False
            replica.restart_at = None
        worker = WorkerProcess(replica.launch, lambda stream, text: self._on_output(record, replica, run, stream, text))
        try:
            worker.start()
        except OSError as error:  # 127: what a container whose command cannot be run exits with
            self._on_output(record, replica, run, "stderr", f"exec {replica.launch.argv[0]!r} failed: {error}")
            self._record_exit(record, replica, 127)
            self._stop_replicas(record, self._running(record), self._config.grace_seconds)
            self._finish_exited(record, 127, replica.name)
            return False
        with self.lock:
            replica.worker = worker
            replica.pids.append(worker.pid)
        return True

    def _watch(self, record: JobRecord) -> Outcome:
        """Until the job ends or restarts: exits, due preemptions, and replicas restarting alone."""
        while True:
            record.wake.clear()
            if record.interrupted:
                self._stop_replicas(record, self._running(record), self._config.grace_seconds)
                self._finish_interrupted(record)
                return Outcome.ENDED
            if self._seconds_to_timeout(record) <= 0:
                self._end_at_timeout(record)
                return Outcome.ENDED
            for replica in self._running(record):
                if replica.worker is not None and replica.worker.poll() is not None:
                    exit_status = self._reap(record, replica)
                    if self._restarts_after_transient_exit(record, replica, exit_status):
                        if self._restarts_job_on_transient_exit(record):
                            self._stop_survivors(record)
                            return Outcome.RESTART_JOB
                        continue
                    # Any other replica that exits 0 is done: it stays down.
                    if replica.is_primary or exit_status != 0:
                        self._stop_replicas(record, self._running(record), self._config.grace_seconds)
                        self._finish_exited(record, exit_status, replica.name)
                        return Outcome.ENDED
            reclaimed = self._due_preemption(record)
            if reclaimed:
                outcome = self._preempt(record, reclaimed)
                if outcome is not None:
                    return outcome
            timeout = min(_POLL_SECONDS, self._seconds_to_timeout(record))
            for replica in list(record.replicas.values()):
                if replica.restart_at is None:
                    continue
                if time.monotonic() >= replica.restart_at and (
                    not record.is_spot or self._capacity.available(record.location)
                ):
                    if not self._start_replica(record, replica):
                        return Outcome.ENDED
                else:
                    timeout = min(timeout, max(replica.restart_at - time.monotonic(), 0.0))
            for replica in self._running(record):
                if replica.planned is not None and replica.planned.after_seconds is not None:
                    due = replica.started_monotonic + replica.planned.after_seconds
                    timeout = min(timeout, max(due - time.monotonic(), 0.0))
            record.wake.wait(timeout)

    @staticmethod
    def _timeout_seconds(record: JobRecord) -> float:
        timeout = record.job.job_spec.scheduling.timeout
        return timeout.total_seconds() if timeout else DEFAULT_TIMEOUT_SECONDS

    def _seconds_to_timeout(self, record: JobRecord) -> float:
        """What is left of the job's `scheduling.timeout`, its running time counted from its first
        RUNNING (`start_time`)."""
        started = record.job.start_time
        elapsed = (_now() - started).total_seconds() if started else 0.0
        return self._timeout_seconds(record) - elapsed

    def _end_at_timeout(self, record: JobRecord) -> None:
        """The job ran its `scheduling.timeout`: every replica stopped as on a cancel, then the
        ending the `timeout_end` mode names (devstack.vertex.modes: Google does not say)."""
        self._stop_replicas(record, self._running(record), self._config.grace_seconds)
        message = f"The job ran past its scheduling.timeout of {self._timeout_seconds(record):g} s."
        expired = record.modes.timeout_end == "expired"
        state = State.JOB_STATE_EXPIRED if expired else State.JOB_STATE_FAILED
        error = None if expired else (DEADLINE_EXCEEDED_CODE, message)
        self._finish(record, state, error, record.profile.failed(message))

    def _running(self, record: JobRecord) -> list[ReplicaRecord]:
        with self.lock:
            return [replica for replica in record.replicas.values() if replica.worker is not None]

    def _due_preemption(self, record: JobRecord) -> list[ReplicaRecord]:
        """The running replicas to reclaim now: asked for, the Spot capacity gone (all of them), or
        a replica's planned moment reached (for a plan of "all", every running replica)."""
        running = self._running(record)
        if not running:
            return []
        with self.lock:
            requested = [replica for replica in running if record.preempt_requested in (ALL_REPLICAS, replica.name)]
            # A request for a replica that is not running yet (starting, restarting) waits for it.
            if requested:
                record.preempt_requested = None
        if record.is_spot and not self._capacity.available(record.location):
            return running
        if requested:
            return requested
        now = time.monotonic()
        plan = record.preemption.plan
        for replica in running:
            planned = replica.planned
            if planned is None:
                continue
            if planned.after_output is not None:
                due = replica.output_matched
            elif planned.after_checkpoints is not None:
                due = replica.checkpoints >= planned.after_checkpoints
            else:
                due = planned.after_seconds is not None and now >= replica.started_monotonic + planned.after_seconds
            if due:
                return running if plan is not None and plan.replica == ALL_REPLICAS else [replica]
        return []

    def _preempt(self, record: JobRecord, reclaimed: list[ReplicaRecord]) -> Outcome | None:
        """Reclaims these replicas' VMs; returns how the job goes on, None when it runs on (the
        reclaimed replicas restart alone)."""
        plan = record.preemption.plan
        grace = self._config.grace_seconds
        if plan is not None and plan.grace_seconds is not None:
            grace = plan.grace_seconds
        exit_statuses = self._stop_replicas(record, reclaimed, grace)
        if exit_statuses.get(PRIMARY_REPLICA) == 0 and plan is not None and plan.exit_zero_succeeds:
            # A reclaimed primary that exited 0 by itself ends the job SUCCEEDED under a plan that
            # opts in (invented, `devstack.vertex.preemption`).
            self._stop_replicas(record, self._running(record), self._config.grace_seconds)
            self._finish_exited(record, 0, PRIMARY_REPLICA)
            return Outcome.ENDED
        whole_job = record.restarts_whole_job or not self._running(record)
        restart = self._count_spot_restart(record, reclaimed)
        self._logger.info(
            "spot preemption",
            job=record.job.name,
            replicas=[replica.name for replica in reclaimed],
            preemptions=record.preemptions,
            restart=restart,
            whole_job=whole_job,
        )
        if restart > lines.MAX_SPOT_RESTARTS:
            self._stop_replicas(record, self._running(record), self._config.grace_seconds)
            code, message = record.profile.stockout(restart, reclaimed[0].name)
            self._finish(record, State.JOB_STATE_FAILED, (code, message), record.profile.failed(message))
            return Outcome.ENDED
        for replica in reclaimed:  # one line per reclaimed VM, naming it: counted once each
            self._service_lines(record, record.profile.preempted(restart, replica.name, whole_job=whole_job))
        if whole_job:
            self._stop_survivors(record)
            return Outcome.RESTART_JOB
        restart_at = time.monotonic() + self._config.pending_seconds
        with self.lock:
            for replica in reclaimed:
                replica.restart_at = restart_at
        return None

    def _stop_survivors(self, record: JobRecord) -> None:
        """Before a whole-job restart: the replicas still running stop as `survivor_stop` says."""
        survivor_grace = self._config.grace_seconds if record.modes.survivor_stop == "sigterm" else 0.0
        self._stop_replicas(record, self._running(record), survivor_grace)

    def _restarts_after_transient_exit(self, record: JobRecord, replica: ReplicaRecord, exit_status: int) -> bool:
        """Whether this exit is one Vertex restarts (SIGABRT or SIGSEGV, three times per job:
        `devstack.vertex.modes`); if so it is counted, and a replica restarting alone is due now
        (Vertex restarts it "immediately in the same VM")."""
        if exit_status not in TRANSIENT_EXIT_STATUSES:
            return False
        with self.lock:
            if record.transient_restarts >= MAX_TRANSIENT_RESTARTS:
                return False
            record.transient_restarts += 1
            alone = not self._restarts_job_on_transient_exit(record)
            if alone:
                replica.restart_at = time.monotonic()
        self._logger.info(
            "transient exit restarted",
            job=record.job.name,
            replica=replica.name,
            exit_status=exit_status,
            transient_restarts=record.transient_restarts,
            whole_job=not alone,
        )
        return True

    @staticmethod
    def _restarts_job_on_transient_exit(record: JobRecord) -> bool:
        return record.modes.transient_exit_restarts == "job" or record.restarts_whole_job_on_worker_restart

    def _count_spot_restart(self, record: JobRecord, reclaimed: list[ReplicaRecord]) -> int:
        """Counts this preemption towards the six restarts as the job's `spot_restart_count` mode
        says; returns the count it reached (per replica: the highest of the reclaimed ones)."""
        counting = record.modes.spot_restart_count
        with self.lock:
            record.preemptions += len(reclaimed)
            for replica in reclaimed:
                replica.preemptions += 1
                replica.spot_restarts += 1
            if counting == "per_replica":
                return max(replica.spot_restarts for replica in reclaimed)
            record.spot_restarts += len(reclaimed) if counting == "per_vm" else 1
            return record.spot_restarts

    def _stop_replicas(self, record: JobRecord, replicas: list[ReplicaRecord], grace_seconds: float) -> dict[str, int]:
        """Stops these replicas' processes together (SIGTERM, the grace, SIGKILL), records the
        signals each got, and returns each one's exit status."""
        active = [replica for replica in replicas if replica.worker is not None]
        sent = stop_together([replica.worker for replica in active if replica.worker is not None], grace_seconds)
        with self.lock:
            for replica, signals in zip(active, sent, strict=True):
                replica.signals.extend({"run": replica.starts, "signal": name} for name in signals)
        return {replica.name: self._reap(record, replica) for replica in active}

    def _reap(self, record: JobRecord, replica: ReplicaRecord) -> int:
        """Reads the exit of a replica's finished process and forgets the process."""
        worker = replica.worker
        assert worker is not None, "replica not running"
        worker.tear_down()
        worker.join_output(_PUMP_JOIN_SECONDS)
        with self.lock:
            replica.worker = None
        exit_status = self._record_exit(record, replica, _exit_status(worker.wait()))
        if self._fuse is not None:
            self._fuse.push(replica.launch.env)  # before the job's state says it ended
        return exit_status

    def _record_exit(self, record: JobRecord, replica: ReplicaRecord, exit_status: int) -> int:
        with self.lock:
            replica.exit_statuses.append(exit_status)
            replica.exit_times.append(lines.rfc3339(_now()))
        self._logger.info(
            "worker exited", job=record.job.name, replica=replica.name, run=replica.starts, exit_status=exit_status
        )
        return exit_status

    # ---- endings ----

    def _finish_exited(self, record: JobRecord, exit_status: int, replica: str) -> None:
        if exit_status == 0:
            return self._finish(record, State.JOB_STATE_SUCCEEDED, None, record.profile.succeeded())
        message = lines.nonzero_exit(exit_status, replica)
        return self._finish(
            record,
            State.JOB_STATE_FAILED,
            (EXIT_FAILURE_CODE, message),
            record.profile.exited(message),
        )

    def _finish_interrupted(self, record: JobRecord) -> None:
        if not record.discarded:
            self._finish_cancelled(record)

    def _finish_cancelled(self, record: JobRecord) -> None:
        self._finish(record, State.JOB_STATE_CANCELLED, _CANCELLED_ERROR, record.profile.cancelled())

    def _finish(
        self,
        record: JobRecord,
        state: StateValue,
        error: tuple[int, str] | None,
        service_lines: Iterable[tuple[str, str]],
    ) -> None:
        delay = self._config.error_delay_seconds
        if delay is None:
            delay = record.profile.default_error_delay_seconds
        with self.lock:
            if record.discarded:
                return
            if record.cancel_requested:  # decided under the lock: a requested cancel always wins
                state, error = State.JOB_STATE_CANCELLED, _CANCELLED_ERROR
                service_lines = record.profile.cancelled()
            self._transition_locked(record, state)
            record.job.end_time = record.job.update_time
            if error is not None and delay <= 0:
                record.job.error = status_pb2.Status(code=error[0], message=error[1])
        self._service_lines(record, service_lines)
        if error is not None and delay > 0:
            timer = threading.Timer(delay, self._set_error, args=(record, error))
            timer.daemon = True
            timer.start()
        self._logger.info("job ended", job=record.job.name, state=State(state).name)

    def _set_error(self, record: JobRecord, error: tuple[int, str]) -> None:
        with self.lock:
            record.job.error = status_pb2.Status(code=error[0], message=error[1])
            record.job.update_time = _now()

    # ---- state and logs ----

    def _set_state(self, record: JobRecord, state: StateValue) -> bool:
        with self.lock:
            return not record.discarded and self._transition_locked(record, state)

    def _transition_locked(self, record: JobRecord, state: StateValue) -> bool:
        """Applies a transition; once a cancel is requested only CANCELLED may follow."""
        if record.cancel_requested and state not in _CANCEL_STATES:
            return False
        record.job.state = State(state)
        record.job.update_time = _now()
        record.state_history.append(State(state).name)
        return True

    def _service_lines(self, record: JobRecord, service_lines: Iterable[tuple[str, str]]) -> None:
        for severity, text in service_lines:
            self._service_log(record, severity, text)

    def _service_log(self, record: JobRecord, severity: str, message: str) -> None:
        if not record.discarded:
            entry = self._entries.service(
                record.project_id,
                record.job_id,
                severity,
                message,
                as_json=record.profile.service_lines_as_json,
            )
            self._sink.publish(entry)

    def _on_output(self, record: JobRecord, replica: ReplicaRecord, run: int, stream: str, text: str) -> None:
        committed = replica.is_primary and _is_checkpoint_committed(text)
        with self.lock:
            # Timed under the lock, so a job's lines keep their order in time (`spotjobs logs --since`).
            record.output.append(
                {"run": run, "stream": stream, "line": text, "time": lines.rfc3339(_now()), "replica": replica.name}
            )
            current = run == replica.starts
            # Rank 0 commits: the primary's lines count the job's checkpoints, for every replica's
            # run (each start resets its count).
            if committed and current:
                for other in record.replicas.values():
                    other.checkpoints += 1
            matched = current and self._match_planned_output_locked(record, replica, text)
        if committed or matched:
            record.wake.set()  # a progress-keyed plan may preempt now
        if not record.discarded:
            entry = self._entries.container(
                record.project_id,
                record.job_id,
                stream,
                text,
                structured=record.profile.structured_container_lines,
                replica=replica.name,
            )
            self._sink.publish(entry)

    @staticmethod
    def _match_planned_output_locked(record: JobRecord, writer: ReplicaRecord, text: str) -> bool:
        """Marks a plan's `after_output` line: written by the replica it reclaims (by any replica,
        for a plan of "all", whose moment the primary's run holds), after its checkpoints."""
        plan = record.preemption.plan
        if plan is None or plan.after_output is None or plan.after_output not in text:
            return False
        holder = record.primary if plan.replica == ALL_REPLICAS else writer
        if holder is None or holder.planned is None or holder.planned.after_output is None:
            return False
        wanted = holder.planned.after_checkpoints or 0
        if holder.checkpoints < wanted:
            return False
        holder.output_matched = True
        return True


def _is_checkpoint_committed(text: str) -> bool:
    """The trainer kit's line for a committed checkpoint (spotjobs_kit.lines, its one parser)."""
    if CHECKPOINT_COMMITTED not in text:
        return False
    found = parse_kit_line(text)
    return found is not None and found.event == CHECKPOINT_COMMITTED


def _exit_status(returncode: int) -> int:
    # A worker killed by signal N is reported the way a container runtime does: 128 + N.
    return 128 - returncode if returncode < 0 else returncode
