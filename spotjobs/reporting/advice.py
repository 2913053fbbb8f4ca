"""How often to checkpoint: the interval that loses least work to preemptions, from what was seen.

For a job preempted on average every M seconds (the mean time between preemptions, observed per
machine type and location across the ledger, per VM: a preemption is one reclaimed VM, so time
counts once per replica, and a job of R replicas is preempted R times as often as one VM) that spends C seconds writing a checkpoint (the
trainer kit's `checkpoint_committed` lines), the interval that minimises expected lost work plus
checkpoint overhead is about sqrt(2 * M * C) (Young, "A first order approximation to the optimum
checkpoint interval", CACM 1974; Daly's refinement, FGCS 2006, agrees to first order when C << M).
Pure: records in, figures out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from shared.clock import parse_iso
from shared.jobs import job_replicas
from shared.ledger.records import Attempt, RequestRecord


@dataclass(frozen=True)
class PreemptionRate:
    running_seconds: float
    preemptions: int  # an attempt ended by preemption with no count counts once

    @property
    def mtbf_seconds(self) -> float | None:
        return self.running_seconds / self.preemptions if self.preemptions else None


@dataclass(frozen=True)
class CheckpointAdvice:
    machine_type: str
    location: str
    mtbf_seconds: float | None
    checkpoint_seconds: float | None  # mean time to write one checkpoint
    interval_used_seconds: float | None  # mean time between two committed checkpoints
    optimal_interval_seconds: float | None

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    def sentence(self) -> str:
        def seconds(value: float | None) -> str:
            return "unknown" if value is None else f"{value:.3g} s"

        where = f"{self.machine_type} in {self.location}"
        return (
            f"checkpointing: mean time between preemptions {seconds(self.mtbf_seconds)} on {where}; "
            f"a checkpoint takes {seconds(self.checkpoint_seconds)}; interval used "
            f"{seconds(self.interval_used_seconds)}, best about "
            f"{seconds(self.optimal_interval_seconds)} (sqrt(2 x MTBF x checkpoint time))"
        )


def machine_type(record: RequestRecord) -> str:
    pools = record.request.get("custom_job", {}).get("jobSpec", {}).get("workerPoolSpecs") or [{}]
    spec = pools[0].get("machineSpec") or pools[0].get("machine_spec") or {}
    return str(spec.get("machineType") or spec.get("machine_type") or "unknown")


def replicas(record: RequestRecord) -> int:
    """The VMs of the request's job: every replica of every worker pool."""
    return job_replicas(record.request.get("custom_job") or {})


def preemption_rates(records: Iterable[RequestRecord], now: datetime) -> dict[tuple[str, str], PreemptionRate]:
    """Running VM time and preemptions per (machine type, location), over every attempt that ran."""
    totals: dict[tuple[str, str], tuple[float, int]] = {}
    for record in records:
        for attempt in record.attempts:
            ran = _running_seconds(attempt, now)
            if ran <= 0:
                continue
            key = (machine_type(record), attempt.location)
            seconds, count = totals.get(key, (0.0, 0))
            vm_seconds = ran * replicas(record)  # each replica a VM Spot may reclaim
            totals[key] = (seconds + vm_seconds, count + (attempt.preemptions or int(attempt.preemptions_unknown)))
    return {key: PreemptionRate(*value) for key, value in totals.items()}


def advise(record: RequestRecord, rates: dict[tuple[str, str], PreemptionRate]) -> CheckpointAdvice | None:
    """Advice for the request's latest attempt, or None before it ran."""
    latest = record.latest
    if latest is None:
        return None
    key = (machine_type(record), latest.location)
    rate = rates.get(key)
    per_vm = rate.mtbf_seconds if rate else None
    mtbf = per_vm / replicas(record) if per_vm else None  # any of its VMs reclaimed stops the job
    committed = [a for a in record.attempts if a.checkpoints_committed]
    count = sum(a.checkpoints_committed for a in committed)
    cost = sum(a.checkpoint_seconds for a in committed) / count if count else None
    optimal = math.sqrt(2 * mtbf * cost) if mtbf and cost else None
    return CheckpointAdvice(key[0], key[1], mtbf, cost, _interval_used(committed), optimal)


def _interval_used(attempts: list[Attempt]) -> float | None:
    spans = [a.mean_checkpoint_interval for a in attempts if a.mean_checkpoint_interval is not None]
    return sum(spans) / len(spans) if spans else None


def _running_seconds(attempt: Attempt, now: datetime) -> float:
    if not attempt.started_at:
        return 0.0
    end = parse_iso(attempt.ended_at) if attempt.ended_at else now
    return max(0.0, (end - parse_iso(attempt.started_at)).total_seconds())
