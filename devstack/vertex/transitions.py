"""The runner's ground floor (`devstack.vertex.runner`): its configuration, a job's moves between
states under the runner's one lock, the service log lines they write, and the endings with the
error each one carries (`JobTransitions`, which the runner's other parts build on).

Only a cancel's states may follow a requested cancel, and a requested cancel wins over any other
ending, decided under the lock; Vertex sets `error` about a minute after the job ends (the signal
profile's `default_error_delay_seconds`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from google.rpc import status_pb2

from devstack.vertex import logs as lines
from devstack.vertex.jobs import JobRecord, State
from devstack.vertex.logs import LogEntryFactory, LogSink
from shared.log import Logger

# A JobState member: proto-plus enums are IntEnums that type checkers see as plain ints.
StateValue = int
TERMINAL_STATES = frozenset(
    {State.JOB_STATE_SUCCEEDED, State.JOB_STATE_FAILED, State.JOB_STATE_CANCELLED, State.JOB_STATE_EXPIRED}
)

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


def utc_now() -> datetime:
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


class JobTransitions:
    """A job's state changes and endings; `JobRunner` sets these attributes."""

    lock: threading.RLock
    _config: RunnerConfig
    _sink: LogSink
    _entries: LogEntryFactory
    _logger: Logger

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
            record.job.update_time = utc_now()

    # ---- state and logs ----

    def _set_state(self, record: JobRecord, state: StateValue) -> bool:
        with self.lock:
            return not record.discarded and self._transition_locked(record, state)

    def _transition_locked(self, record: JobRecord, state: StateValue) -> bool:
        """Applies a transition; once a cancel is requested only CANCELLED may follow."""
        if record.cancel_requested and state not in _CANCEL_STATES:
            return False
        record.job.state = State(state)
        record.job.update_time = utc_now()
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
