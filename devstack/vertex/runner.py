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

One state machine under that one lock, in layers that each call only the ones below: the job's
moves between states and its endings (`transitions`), its replicas' processes (`replicas`), what
restarts a job or a replica (`restarts`), and here the API's requests, admission and the lifecycle
each job's thread runs; `JobRunner` is the one object they make, and which moves hold its lock is
the design. The parts that need no lock are the worker process (`worker`), the preemption plan
(`preemption`), log entries (`logs`) and signal profiles (`signals`).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Any

from devstack.vertex.capacity import SpotCapacity
from devstack.vertex.errors import failed_precondition
from devstack.vertex.flex import FlexCapacity, WaitVerdict, wait_expired_message, wait_verdict
from devstack.vertex.fuse import FuseMirror
from devstack.vertex.jobs import JobRecord, JobStore, ReplicaRecord, State
from devstack.vertex.logs import PRIMARY_REPLICA, LogEntryFactory, LogSink
from devstack.vertex.preemption import ALL_REPLICAS, PreemptionPlanner
from devstack.vertex.replicas import PUMP_JOIN_SECONDS
from devstack.vertex.restarts import JobRestarts, Outcome
from devstack.vertex.signals import RESOURCE_EXHAUSTED_CODE
from devstack.vertex.transitions import (
    EXIT_FAILURE_CODE,
    INTERNAL_CODE,
    TERMINAL_STATES,
    RunnerConfig,
    utc_now,
)
from devstack.vertex.worker import UnrunnableJob, build_launches
from shared.log import Logger

_POLL_SECONDS = 0.05
# google.rpc DEADLINE_EXCEEDED, for a job ended at its scheduling.timeout (`timeout_end` failed).
DEADLINE_EXCEEDED_CODE = 4
DEFAULT_TIMEOUT_SECONDS = 7 * 86400.0  # Scheduling.timeout: "The default is 7 days."


class JobRunner(JobRestarts):
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
        join_seconds = self._config.grace_seconds + 2 * PUMP_JOIN_SECONDS + 1.0
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
                record.job.start_time = utc_now()
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
        elapsed = (utc_now() - started).total_seconds() if started else 0.0
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
