"""The runner that takes each job through its lifecycle.

Lifecycle (the states of job_state.proto,
https://github.com/googleapis/googleapis/blob/master/google/cloud/aiplatform/v1/job_state.proto):
QUEUED (until a capacity slot is free, then `queued_seconds`) -> PENDING (`pending_seconds`) ->
RUNNING (the worker process) -> SUCCEEDED on exit 0, FAILED otherwise. A Spot preemption sends
SIGTERM to the worker's process group, SIGKILL after `grace_seconds`, and restarts it; the job
stays RUNNING meanwhile (documented profile; the rich profile goes back through PENDING). "When
Spot VMs are preempted, the [...] job fails with a STOCKOUT error and Compute Engine tries to
restart the job up to six times" (https://cloud.google.com/vertex-ai/docs/training/use-spot-vms):
the seventh preemption fails the job with STOCKOUT. Cancel: CANCELLING, the worker is terminated
the same way, CANCELLED. Which service lines each moment writes is the job's signal profile's
choice (`devstack.vertex.signals`).

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
from devstack.vertex.fuse import FuseMirror
from devstack.vertex.jobs import JobRecord, JobStore, State
from devstack.vertex.logs import LogEntryFactory, LogSink
from devstack.vertex.preemption import PlannedPreemption, PreemptionPlanner
from devstack.vertex.worker import UnrunnableJob, WorkerLaunch, WorkerProcess, build_launch
from shared.log import Logger

# A JobState member: proto-plus enums are IntEnums that type checkers see as plain ints.
StateValue = int
TERMINAL_STATES = frozenset({State.JOB_STATE_SUCCEEDED, State.JOB_STATE_FAILED, State.JOB_STATE_CANCELLED})
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
CANCELLED_CODE = 1
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
    EXITED = "exited"
    PREEMPTED = "preempted"
    INTERRUPTED = "interrupted"  # cancelled, or discarded by reset/stop


class JobRunner:
    def __init__(
        self,
        *,
        config: RunnerConfig,
        planner: PreemptionPlanner,
        capacity: SpotCapacity,
        sink: LogSink,
        entries: LogEntryFactory,
        logger: Logger,
    ) -> None:
        self.lock = threading.RLock()
        self.store = JobStore()
        self._config = config
        self._planner = planner
        self._capacity = capacity
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

    def preempt_now(self, record: JobRecord) -> None:
        with self.lock:
            if not record.is_spot:
                raise failed_precondition("Only jobs scheduled with strategy SPOT are preempted.")
            if record.state != State.JOB_STATE_RUNNING:
                raise failed_precondition(f"CustomJob {record.job.name} is {record.state.name}, not RUNNING.")
            record.preempt_requested = True
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
                "running_processes": sum(record.worker is not None for record in records),
                "admitted": self._admitted,
                "waiting_for_capacity": len(self._waiting),
                "max_running": self._config.max_running,
                "worker_starts": sum(record.runs for record in records),
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
            if record.worker is not None:  # a supervisor that did not finish in time
                record.worker.tear_down()

    # ---- the lifecycle, on the job's own thread ----

    def _supervise(self, record: JobRecord) -> None:
        try:
            self._run_job(record)
        except Exception as error:  # an emulator bug must end the job, not hang it
            self._logger.error("job supervisor crashed", job=record.job.name, error=repr(error))
            if record.worker is not None:
                record.worker.tear_down()
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
            launch = build_launch(record.job, record.job_id)
        except UnrunnableJob as error:
            return self._finish(
                record,
                State.JOB_STATE_FAILED,
                (EXIT_FAILURE_CODE, str(error)),
                record.profile.failed(str(error)),
            )
        if self._fuse is not None:
            launch = dataclasses.replace(launch, env={**launch.env, **self._fuse.environment()})
        with self.lock:
            record.argv, record.image_uri = launch.argv, launch.image_uri
        while True:
            # A restart stays RUNNING (no state is documented for it) unless the profile (rich)
            # goes back through PENDING; either way the new VM takes `pending_seconds`.
            if record.runs == 0 or record.profile.pending_on_restart:
                if self._set_state(record, State.JOB_STATE_PENDING):
                    self._service_lines(record, record.profile.pending())
            if record.is_spot and not self._wait_for_spot_capacity(record):
                return self._finish_interrupted(record)
            if not self._pause(record, self._config.pending_seconds):
                return self._finish_interrupted(record)
            outcome, exit_status = self._run_worker(record, launch)
            if outcome is Outcome.INTERRUPTED:
                return self._finish_interrupted(record)
            if outcome is Outcome.EXITED or (
                outcome is Outcome.PREEMPTED and self._exit_zero_succeeds(record, exit_status)
            ):
                return self._finish_exited(record, exit_status)
            if not self._restart_after_preemption(record):
                return None

    @staticmethod
    def _exit_zero_succeeds(record: JobRecord, exit_status: int) -> bool:
        """A preempted worker that exited 0 by itself ends the job SUCCEEDED under a plan that opts
        in (invented, `devstack.vertex.preemption`)."""
        plan = record.preemption.plan
        return exit_status == 0 and plan is not None and plan.exit_zero_succeeds

    def _wait_for_spot_capacity(self, record: JobRecord) -> bool:
        """Waits while the capacity trace (`capacity`, opt-in) has no Spot VM; False if the job is
        cancelled or discarded meanwhile."""
        while not self._capacity.available(record.location):
            record.wake.clear()
            if record.interrupted:
                return False
            record.wake.wait(min(_POLL_SECONDS, self._capacity.seconds_to_next_tick(record.location)))
        return True

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

    def _run_worker(self, record: JobRecord, launch: WorkerLaunch) -> tuple[Outcome, int]:
        planned = self._planner.next_preemption(record.preemption, record.labels) if record.is_spot else None
        with self.lock:
            record.runs += 1
            record.run_checkpoints = 0
            run = record.runs
            if not record.job.start_time:
                record.job.start_time = _now()
            # A documented restart is already RUNNING: no transition, no line.
            running = record.state != State.JOB_STATE_RUNNING and self._transition_locked(
                record, State.JOB_STATE_RUNNING
            )
        if running:
            self._service_lines(record, record.profile.running())
        if self._fuse is not None:
            self._fuse.pull(launch.env)  # the new VM's mount shows the bucket as it is now
        worker = WorkerProcess(launch, lambda stream, text: self._on_output(record, run, stream, text))
        try:
            worker.start()
        except OSError as error:  # 127: what a container whose command cannot be run exits with
            self._on_output(record, run, "stderr", f"exec {launch.argv[0]!r} failed: {error}")
            return Outcome.EXITED, self._record_exit(record, run, 127)
        with self.lock:
            record.worker = worker
            record.pids.append(worker.pid)
        outcome = self._watch(record, worker, planned)
        if outcome is Outcome.EXITED:
            worker.tear_down()
        else:
            plan = record.preemption.plan
            grace = self._config.grace_seconds
            if plan is not None and plan.grace_seconds is not None:
                grace = plan.grace_seconds
            signals_sent = worker.terminate(grace)
            with self.lock:
                record.signals.extend({"run": run, "signal": name} for name in signals_sent)
        worker.join_output(_PUMP_JOIN_SECONDS)
        with self.lock:
            record.worker = None
        exit_status = _exit_status(worker.wait())
        if self._fuse is not None:
            self._fuse.push(launch.env)  # before the job's state says it ended
        return outcome, self._record_exit(record, run, exit_status)

    def _record_exit(self, record: JobRecord, run: int, exit_status: int) -> int:
        with self.lock:
            record.exit_statuses.append(exit_status)
        self._logger.info("worker exited", job=record.job.name, run=run, exit_status=exit_status)
        return exit_status

    def _watch(self, record: JobRecord, worker: WorkerProcess, planned: PlannedPreemption | None) -> Outcome:
        delay = planned.after_seconds if planned else None
        checkpoints = planned.after_checkpoints if planned else None
        deadline = None if delay is None else time.monotonic() + delay
        while True:
            record.wake.clear()
            if worker.poll() is not None:
                return Outcome.EXITED
            if record.interrupted:
                return Outcome.INTERRUPTED
            if (
                record.preempt_requested
                or (record.is_spot and not self._capacity.available(record.location))
                or (deadline is not None and time.monotonic() >= deadline)
                or (checkpoints is not None and record.run_checkpoints >= checkpoints)
            ):
                record.preempt_requested = False
                return Outcome.PREEMPTED
            timeout = _POLL_SECONDS
            if deadline is not None:
                timeout = min(timeout, max(deadline - time.monotonic(), 0.0))
            record.wake.wait(timeout)

    def _restart_after_preemption(self, record: JobRecord) -> bool:
        with self.lock:
            record.preemptions += 1
            preemptions = record.preemptions
        self._logger.info("spot preemption", job=record.job.name, preemptions=preemptions)
        if preemptions > lines.MAX_SPOT_RESTARTS:
            code, message = record.profile.stockout(preemptions)
            self._finish(record, State.JOB_STATE_FAILED, (code, message), record.profile.failed(message))
            return False
        self._service_lines(record, record.profile.preempted(preemptions))
        return True

    # ---- endings ----

    def _finish_exited(self, record: JobRecord, exit_status: int) -> None:
        if exit_status == 0:
            return self._finish(record, State.JOB_STATE_SUCCEEDED, None, record.profile.succeeded())
        message = lines.nonzero_exit(exit_status)
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

    def _on_output(self, record: JobRecord, run: int, stream: str, text: str) -> None:
        committed = _is_checkpoint_committed(text)
        with self.lock:
            # Timed under the lock, so a job's lines keep their order in time (`spotjobs logs --since`).
            record.output.append({"run": run, "stream": stream, "line": text, "time": lines.rfc3339(_now())})
            if committed and run == record.runs:
                record.run_checkpoints += 1
        if committed:
            record.wake.set()  # a progress-keyed plan may preempt now
        if not record.discarded:
            entry = self._entries.container(
                record.project_id,
                record.job_id,
                stream,
                text,
                structured=record.profile.structured_container_lines,
            )
            self._sink.publish(entry)


def _is_checkpoint_committed(text: str) -> bool:
    """The trainer kit's line for a committed checkpoint (spotjobs_kit.lines, its one parser)."""
    if CHECKPOINT_COMMITTED not in text:
        return False
    found = parse_kit_line(text)
    return found is not None and found.event == CHECKPOINT_COMMITTED


def _exit_status(returncode: int) -> int:
    # A worker killed by signal N is reported the way a container runtime does: 128 + N.
    return 128 - returncode if returncode < 0 else returncode
