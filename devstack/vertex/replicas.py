"""A job's replicas as processes (`devstack.vertex.runner`): each run started with its planned
preemption, its output logged and watched (checkpoints, a plan's line), stopped together (SIGTERM,
the grace, SIGKILL) and reaped with its exit status (`ReplicaProcesses`). Record fields change under
the runner's one lock; processes are started, signalled and waited for outside it.
"""

from __future__ import annotations

import time

from spotjobs_kit.lines import CHECKPOINT_COMMITTED, parse_kit_line

from devstack.vertex import logs as lines
from devstack.vertex.fuse import FuseMirror
from devstack.vertex.jobs import JobRecord, ReplicaRecord
from devstack.vertex.preemption import ALL_REPLICAS, PreemptionPlanner
from devstack.vertex.transitions import JobTransitions, utc_now
from devstack.vertex.worker import WorkerProcess, stop_together

# How long a reaped worker's output pumps may take to drain.
PUMP_JOIN_SECONDS = 1.0


class ReplicaProcesses(JobTransitions):
    """Starting, watching and stopping a job's replicas; `JobRunner` sets these attributes."""

    _planner: PreemptionPlanner
    _fuse: FuseMirror | None

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

    def _running(self, record: JobRecord) -> list[ReplicaRecord]:
        with self.lock:
            return [replica for replica in record.replicas.values() if replica.worker is not None]

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
        worker.join_output(PUMP_JOIN_SECONDS)
        with self.lock:
            replica.worker = None
        exit_status = self._record_exit(record, replica, exit_status_of(worker.wait()))
        if self._fuse is not None:
            self._fuse.push(replica.launch.env)  # before the job's state says it ended
        return exit_status

    def _record_exit(self, record: JobRecord, replica: ReplicaRecord, exit_status: int) -> int:
        with self.lock:
            replica.exit_statuses.append(exit_status)
            replica.exit_times.append(lines.rfc3339(utc_now()))
        self._logger.info(
            "worker exited", job=record.job.name, replica=replica.name, run=replica.starts, exit_status=exit_status
        )
        return exit_status

    def _on_output(self, record: JobRecord, replica: ReplicaRecord, run: int, stream: str, text: str) -> None:
        committed = replica.is_primary and _is_checkpoint_committed(text)
        with self.lock:
            # Timed under the lock, so a job's lines keep their order in time (`spotjobs logs --since`).
            record.output.append(
                {"run": run, "stream": stream, "line": text, "time": lines.rfc3339(utc_now()), "replica": replica.name}
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


def exit_status_of(returncode: int) -> int:
    # A worker killed by signal N is reported the way a container runtime does: 128 + N.
    return 128 - returncode if returncode < 0 else returncode
