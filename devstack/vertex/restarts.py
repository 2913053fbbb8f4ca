"""What restarts a job or a replica (`devstack.vertex.runner`): a Spot preemption (asked for, the
capacity gone, or a plan's moment reached), counted towards the six restarts Vertex allows, and an
exit Vertex calls "potentially transient", restarted up to three times (`JobRestarts`).
"""

from __future__ import annotations

import enum
import time

from devstack.vertex import logs as lines
from devstack.vertex.capacity import SpotCapacity
from devstack.vertex.jobs import JobRecord, ReplicaRecord, State
from devstack.vertex.logs import PRIMARY_REPLICA
from devstack.vertex.preemption import ALL_REPLICAS
from devstack.vertex.replicas import ReplicaProcesses

# Exit statuses the training-service page's common errors call "potentially transient": SIGABRT
# ("6, or 134 in custom containers") and SIGSEGV (11, or 139); restarted up to three times.
TRANSIENT_EXIT_STATUSES = frozenset({6, 134, 11, 139})
MAX_TRANSIENT_RESTARTS = 3


class Outcome(enum.Enum):
    ENDED = "ended"  # the job reached its final state (or was discarded)
    RESTART_JOB = "restart_job"  # every replica starts again


class JobRestarts(ReplicaProcesses):
    """Preemptions and transient exits; `JobRunner` sets these attributes."""

    _capacity: SpotCapacity

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
