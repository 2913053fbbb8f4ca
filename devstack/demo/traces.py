"""What happened to each request: traces built from the emulator's job records, the ledger and
the bucket."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from devstack.demo.scenarios import REJECTED, Scenario

# The primary replica (worker pool 0, replica 0), as the emulator names replicas in a job's output.
PRIMARY_REPLICA = "workerpool0-0"


@dataclass
class RunTrace:
    """One run of a job's worker, from the trainer's JSON lines."""

    run: int
    start_step: int | None = None  # from the `resume` line; None when it died before resuming
    end_step: int | None = None  # the furthest step the run reported
    checkpoints: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (step, bytes)
    finished: bool = False
    failed: bool = False

    @property
    def steps_computed(self) -> int:
        if self.start_step is None or self.end_step is None:
            return 0
        return max(0, self.end_step - self.start_step)


def runs_from_output(output: Iterable[Mapping[str, Any]], replica: str = PRIMARY_REPLICA) -> list[RunTrace]:
    """Group one replica's stdout lines (`{"replica", "run", "stream", "line"}`) into runs: the
    primary's by default, whose runs are the job's progress. `run` is that replica's own start (a
    replica of a multi-replica job may restart alone), so replicas are never mixed; a line without
    `replica` (a single-replica job's) is the primary's."""
    runs: dict[int, RunTrace] = {}
    for item in output:
        if item.get("replica", PRIMARY_REPLICA) != replica:
            continue
        event = _trainer_event(item)
        if event is None:
            continue
        run = runs.setdefault(int(item["run"]), RunTrace(int(item["run"])))
        step = event.get("step")
        if isinstance(step, int):
            run.end_step = step if run.end_step is None else max(run.end_step, step)
        kind = event.get("event")
        if kind == "resume" and run.start_step is None and isinstance(step, int):
            run.start_step = step
        elif kind == "checkpoint" and isinstance(step, int):
            run.checkpoints[str(event["checkpoint"])] = (step, int(event.get("bytes", 0)))
        elif kind == "final":
            run.finished = True
        elif kind == "error":
            run.failed = True
    return [runs[n] for n in sorted(runs)]


def replica_runs_from_output(output: Iterable[Mapping[str, Any]]) -> dict[str, list[RunTrace]]:
    """The runs of every replica other than the primary, by replica name, in the order they spoke."""
    items = list(output)
    names = dict.fromkeys(
        str(item["replica"]) for item in items if item.get("replica", PRIMARY_REPLICA) != PRIMARY_REPLICA
    )
    return {name: runs for name in names if (runs := runs_from_output(items, name))}


def replica_preemptions_from_details(details: Mapping[str, Any]) -> dict[str, int]:
    """VMs reclaimed per replica from the emulator's job record (`replicas`: name -> {"preemptions"})."""
    replicas = details.get("replicas") or {}
    return {str(name): int(replica.get("preemptions", 0)) for name, replica in replicas.items()}


def _trainer_event(item: Mapping[str, Any]) -> dict[str, Any] | None:
    line = item.get("line")
    if item.get("stream") != "stdout" or not isinstance(line, str) or not line.startswith("{"):
        return None
    with contextlib.suppress(ValueError):
        parsed = json.loads(line)
        if isinstance(parsed, dict) and "event" in parsed:
            return parsed
    return None


@dataclass
class AttemptTrace:
    n: int
    strategy: str
    location: str
    job: str | None
    state: str | None  # the job's state as Vertex (the emulator) reports it
    preemptions: int  # as counted by spotjobs in the ledger
    preemptions_injected: int  # as the emulator did them
    outcome: str | None
    runs: list[RunTrace] = field(default_factory=list)  # the primary's: the job's progress
    preemptions_unknown: bool = False  # ended by preemption with no count: shown as "≥1"
    replica_runs: dict[str, list[RunTrace]] = field(default_factory=dict)  # every other replica's
    # VMs reclaimed per replica, as the emulator did it (spotjobs counts the attempt's, not each one's).
    replica_preemptions: dict[str, int] = field(default_factory=dict)

    @property
    def preemptions_text(self) -> str:
        return "≥1" if self.preemptions_unknown else str(self.preemptions)

    @property
    def start_step(self) -> int | None:
        return next((run.start_step for run in self.runs if run.start_step is not None), None)

    @property
    def last_checkpoint_step(self) -> int | None:
        """The newest checkpoint this attempt committed: where a following attempt must start."""
        return max((step for run in self.runs for step, _ in run.checkpoints.values()), default=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "job": self.job,
            "strategy": self.strategy,
            "location": self.location,
            "state": self.state,
            "preemptions": self.preemptions,
            "preemptions_text": self.preemptions_text,
            "preemptions_injected": self.preemptions_injected,
            "outcome": self.outcome,
            "start_step": self.start_step,
            "last_checkpoint_step": self.last_checkpoint_step,
            "runs": [
                {
                    "run": run.run,
                    "start_step": run.start_step,
                    "end_step": run.end_step,
                    "checkpoints": len(run.checkpoints),
                }
                for run in self.runs
            ],
            "replica_runs": {
                name: [{"run": run.run, "start_step": run.start_step, "end_step": run.end_step} for run in runs]
                for name, runs in self.replica_runs.items()
            },
            "replica_preemptions": dict(self.replica_preemptions),
        }


@dataclass
class RequestTrace:
    scenario: Scenario
    status: str | None = None  # ledger status; None when the ledger has no record
    attempts: list[AttemptTrace] = field(default_factory=list)
    vertex_jobs: int = 0
    checkpoints_present: dict[str, int] = field(default_factory=dict)  # complete ones: name -> bytes
    duplicates_suppressed: int = 0
    alerts: list[dict[str, Any]] = field(default_factory=list)
    # What prune_checkpoints said it deleted for this request (its prune_report alerts).
    reported_pruned: int = 0
    reported_bytes_freed: int = 0
    # A trigger scenario's window and manifest: {"name", "window_id", "manifest_uri", "manifest_objects"}.
    trigger: dict[str, Any] | None = None

    @property
    def runs(self) -> list[RunTrace]:
        return [run for attempt in self.attempts for run in attempt.runs]

    @property
    def checkpoints_written(self) -> dict[str, tuple[int, int]]:
        written: dict[str, tuple[int, int]] = {}
        for run in self.runs:
            written.update(run.checkpoints)
        return written

    @property
    def checkpoints_pruned(self) -> list[str]:
        return sorted(set(self.checkpoints_written) - set(self.checkpoints_present))

    @property
    def outcome(self) -> str:
        if self.status is None:
            return REJECTED if self.alert_kinds().get("invalid_request") else "missing"
        return self.status.lower()

    def alert_kinds(self) -> dict[str, int]:
        kinds: dict[str, int] = {}
        for alert in self.alerts:
            kinds[alert.get("kind", "?")] = kinds.get(alert.get("kind", "?"), 0) + 1
        return kinds
