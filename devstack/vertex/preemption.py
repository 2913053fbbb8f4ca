"""When the emulator preempts a Spot job's worker: explicit plans first, else a seeded random rate.

A plan names labels and a list of delays. A SPOT job whose labels include every pair binds the
most recently registered matching plan at its next worker (re)start, even if the plan was
registered before the job existed; from then on the k-th start of its worker under the plan is
preempted `delays[k]` seconds after it started, and later starts are left alone. Each matching job
gets the whole list: a plan is a template, not a shared budget.

A plan may instead key its preemptions to the trainer's progress: `after_checkpoints: K` preempts
each of its `preemptions` starts right after the K-th checkpoint that run committed (the trainer
kit's `checkpoint_committed` line on the worker's output, which the emulator already reads as
Cloud Logging would). Invented for tests, opt-in: a scenario that needs "the restart resumes from
a checkpoint" then holds however slow the machine, where a time-keyed one assumes how many steps
fit in so many seconds.

A plan may also set `grace_seconds`: how long its preempted workers get between SIGTERM and
SIGKILL (0: killed without notice). Invented for tests, opt-in: Compute Engine documents a notice
period for Spot VMs, and a worker killed without it is what a trainer must also survive.

A plan may set `exit_zero_succeeds: true`: a preempted worker that exits 0 by itself within its
grace period ends the job SUCCEEDED instead of being restarted. Invented for tests, opt-in:
Vertex documents neither way; it is the case a trainer that exits 0 after SIGTERM (Lightning
2.6 does) may cause, a job recorded SUCCEEDED with its training unfinished.

A plan may name the replica it reclaims, `"replica": "workerpool1-0"` (the log task_name), or
`"replica": "all"` for every replica at once; without one it reclaims the primary,
`workerpool0-0`, as before. Its starts are then that replica's starts (for "all", the primary's),
and what the job does next is `devstack.vertex.modes`'. Checkpoints are counted on the primary's
lines (rank 0 commits).

A plan may also set `after_output: TEXT`: each preempted start is reclaimed right after the
reclaimed replica (for "all", any replica) writes a line containing TEXT, and with
`after_checkpoints: K` the first such line after the K-th commit. Invented for tests, opt-in: with
the text a trainer writes as it begins a save, it is "reclaimed during a save" (with
`grace_seconds: 0`, killed mid-write).

Without a plan, each start of a SPOT job's replica is preempted after an exponentially
distributed delay with the configured rate (per minute of running time), drawn from a random
stream seeded by the emulator seed and the job's creation order, so a run with the same seed and
the same sequence of creates preempts at the same moments; every replica draws (the
`rate_reclaims` mode, `devstack.vertex.modes`: `each_replica`), or only the primary (`primary`).
STANDARD (and unspecified) jobs are never preempted.
"""

from __future__ import annotations

import itertools
import random
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from devstack.vertex.logs import PRIMARY_REPLICA
from devstack.vertex.modes import RATE_RECLAIMS

_MAX_PLANNED_PREEMPTIONS = 100
ALL_REPLICAS = "all"
_REPLICA = re.compile(r"^workerpool[0-3]-[0-9]+$")


@dataclass(frozen=True)
class PlannedPreemption:
    """When to preempt one start of a replica: so many seconds after it started, right after the
    job committed so many checkpoints, or right after a line holding `after_output` (after those
    checkpoints, when both are given)."""

    after_seconds: float | None = None
    after_checkpoints: int | None = None
    after_output: str | None = None


@dataclass(frozen=True)
class PreemptionPlan:
    plan_id: str
    labels: Mapping[str, str]
    delays: tuple[float, ...]  # seconds per start; with after_checkpoints, one 0 per start
    grace_seconds: float | None = None  # None: the emulator's --grace-seconds
    after_checkpoints: int | None = None
    exit_zero_succeeds: bool = False
    replica: str = PRIMARY_REPLICA  # or ALL_REPLICAS
    after_output: str | None = None

    def matches(self, job_labels: Mapping[str, str]) -> bool:
        return all(job_labels.get(key) == value for key, value in self.labels.items())

    def preemption(self, start: int) -> PlannedPreemption | None:
        if start >= len(self.delays):
            return None
        if self.after_checkpoints is not None or self.after_output is not None:
            return PlannedPreemption(after_checkpoints=self.after_checkpoints, after_output=self.after_output)
        return PlannedPreemption(after_seconds=self.delays[start])

    def keyed_to(self, replica: str) -> bool:
        """Whether this replica's starts are the plan's starts."""
        return replica == (PRIMARY_REPLICA if self.replica == ALL_REPLICAS else self.replica)

    def to_json(self) -> dict[str, Any]:
        plan: dict[str, Any] = {"id": self.plan_id, "labels": dict(self.labels)}
        if self.replica != PRIMARY_REPLICA:
            plan["replica"] = self.replica
        if self.after_checkpoints is not None or self.after_output is not None:
            plan["preemptions"] = len(self.delays)
            if self.after_checkpoints is not None:
                plan["after_checkpoints"] = self.after_checkpoints
            if self.after_output is not None:
                plan["after_output"] = self.after_output
        else:
            plan["delays"] = list(self.delays)
        if self.grace_seconds is not None:
            plan["grace_seconds"] = self.grace_seconds
        if self.exit_zero_succeeds:
            plan["exit_zero_succeeds"] = True
        return plan


def parse_plan(plan_id: str, body: Any) -> PreemptionPlan:
    """Reads `{"labels": {...}, "preemptions": N, "after_seconds": S}`, `{"labels", "delays"}` or
    `{"labels", "preemptions": N, "after_checkpoints": K}`.

    Raises ValueError with a message naming the offending field.
    """
    if not isinstance(body, dict):
        raise ValueError("a preemption plan must be a JSON object")
    unknown = set(body) - {
        "labels",
        "preemptions",
        "after_seconds",
        "after_checkpoints",
        "delays",
        "grace_seconds",
        "exit_zero_succeeds",
        "replica",
        "after_output",
    }
    if unknown:
        raise ValueError(f"unknown field(s) in preemption plan: {sorted(unknown)}")
    labels = body.get("labels", {})
    if not isinstance(labels, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in labels.items()
    ):
        raise ValueError("labels must be an object of string to string")
    grace = body.get("grace_seconds")
    if grace is not None and not _is_seconds(grace):
        raise ValueError("grace_seconds must be a non-negative number")
    exit_zero_succeeds = body.get("exit_zero_succeeds", False)
    if not isinstance(exit_zero_succeeds, bool):
        raise ValueError("exit_zero_succeeds must be true or false")
    replica = body.get("replica", PRIMARY_REPLICA)
    if not isinstance(replica, str) or not (replica == ALL_REPLICAS or _REPLICA.match(replica)):
        raise ValueError('replica must be "workerpool<P>-<i>" (P from 0 to 3) or "all"')
    after_output = body.get("after_output")
    if after_output is not None and (not isinstance(after_output, str) or not after_output):
        raise ValueError("after_output must be a non-empty string")
    checkpoints = body.get("after_checkpoints")
    if checkpoints is not None and (
        not isinstance(checkpoints, int) or isinstance(checkpoints, bool) or checkpoints < 1
    ):
        raise ValueError("after_checkpoints must be a positive integer")
    if checkpoints is not None or after_output is not None:
        if "delays" in body or "after_seconds" in body:
            raise ValueError("give after_checkpoints/after_output or after_seconds/delays, not both")
        body = {**body, "after_seconds": 0}
    return PreemptionPlan(
        plan_id=plan_id,
        labels=dict(labels),
        delays=_plan_delays(body),
        grace_seconds=None if grace is None else float(grace),
        after_checkpoints=checkpoints,
        exit_zero_succeeds=exit_zero_succeeds,
        replica=replica,
        after_output=after_output,
    )


def _plan_delays(body: dict[str, Any]) -> tuple[float, ...]:
    if "delays" in body:
        if "preemptions" in body or "after_seconds" in body:
            raise ValueError("give either delays or preemptions with after_seconds, not both")
        delays = body["delays"]
        if not isinstance(delays, list):
            raise ValueError("delays must be a list of seconds")
    else:
        count, after = body.get("preemptions"), body.get("after_seconds")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError("preemptions must be a positive integer")
        delays = [after] * count
    if not 1 <= len(delays) <= _MAX_PLANNED_PREEMPTIONS:
        raise ValueError(f"a plan holds 1 to {_MAX_PLANNED_PREEMPTIONS} preemptions")
    if not all(_is_seconds(delay) for delay in delays):
        raise ValueError("after_seconds and delays must be non-negative numbers")
    return tuple(float(delay) for delay in delays)


def _is_seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


@dataclass
class JobPreemptionState:
    """Per job: the plan it is bound to, how many starts it used, and its random stream."""

    rng: random.Random
    plan: PreemptionPlan | None = None
    starts_under_plan: int = 0


class PreemptionPlanner:
    def __init__(self, rate_per_minute: float = 0.0, seed: int = 0) -> None:
        self.rate_per_minute = rate_per_minute
        self.seed = seed
        self._plans: list[PreemptionPlan] = []
        self._plan_ids = itertools.count(1)
        self._lock = threading.Lock()

    def new_job_state(self, job_sequence: int) -> JobPreemptionState:
        return JobPreemptionState(rng=random.Random(f"{self.seed}/{job_sequence}"))

    def add_plan(self, body: Any) -> PreemptionPlan:
        with self._lock:
            plan = parse_plan(f"plan-{next(self._plan_ids)}", body)
            self._plans.append(plan)
            return plan

    def plans(self) -> list[PreemptionPlan]:
        with self._lock:
            return list(self._plans)

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()

    def next_preemption(
        self,
        state: JobPreemptionState,
        job_labels: Mapping[str, str],
        replica: str = PRIMARY_REPLICA,
        *,
        rate_reclaims: str = RATE_RECLAIMS[0],
    ) -> PlannedPreemption | None:
        """When to preempt this (re)start of a SPOT job's replica, or None for never
        (`rate_reclaims`: which replicas the random rate reclaims, `devstack.vertex.modes`)."""
        with self._lock:
            if state.plan is None:
                state.plan = next((plan for plan in reversed(self._plans) if plan.matches(job_labels)), None)
        if state.plan is not None:
            if not state.plan.keyed_to(replica):
                return None
            index = state.starts_under_plan
            state.starts_under_plan += 1
            return state.plan.preemption(index)
        if rate_reclaims == "primary" and replica != PRIMARY_REPLICA:
            return None
        if self.rate_per_minute > 0:
            return PlannedPreemption(after_seconds=state.rng.expovariate(self.rate_per_minute / 60.0))
        return None
