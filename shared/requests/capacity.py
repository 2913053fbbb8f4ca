"""A request's capacity alternatives: on which machine types and with which provisioning strategies
its attempts may run (`capacity` in the envelope, docs/requests.md). Reading only; what a
deployment allows is judged by `shared.requests.policy`, and which alternative an attempt runs on
by `shared.fleet.capacity`.

`"capacity": [{"machine": "a3-highgpu-8g", "strategies": ["SPOT", "FLEX_START"]},
{"machine": "a2-ultragpu-8g", "strategies": ["SPOT"]}]`: each alternative names a machine type
from `MACHINES` and the strategies it may run with. An attempt on an alternative runs the request's
CustomJob with that machine in every worker pool whose machine type is pool 0's (the request's
primary machine; other pools keep theirs), its accelerators implied by the machine type
(`job_on_machine`). A request lists `capacity` or `fallback`, never both: both say when to leave
Spot, and two answers to one question would leave one of them unkept.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.errors import Violation
from shared.requests.attempts import FALLBACK_STRATEGIES, SPOT
from shared.requests.job_schema import field_path

STRATEGIES = (SPOT, *FALLBACK_STRATEGIES)  # SPOT, STANDARD, FLEX_START
MAX_ALTERNATIVES = 8

# The accelerators each machine type comes with, as Vertex AI's machineSpec names them (a GPU
# machine type needs acceleratorType and acceleratorCount set to what it carries): the machine
# types of the price table (shared/price_table.json). Sources: "GPU machine types"
# (https://cloud.google.com/compute/docs/gpus), "Accelerator-optimized machine family"
# (https://cloud.google.com/compute/docs/accelerator-optimized-machines: A3 High 8 x H100 80GB,
# A3 Mega 8 x H100 Mega 80GB, A2 Standard N x A100 40GB, A2 Ultra N x A100 80GB, G2 L4 by size) and
# "Configure compute resources for custom training"
# (https://cloud.google.com/vertex-ai/docs/training/configure-compute#specifying_gpus).
MACHINES: dict[str, tuple[str, int]] = {
    **{f"a2-highgpu-{n}g": ("NVIDIA_TESLA_A100", n) for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": ("NVIDIA_TESLA_A100", 16),
    **{f"a2-ultragpu-{n}g": ("NVIDIA_A100_80GB", n) for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": ("NVIDIA_H100_80GB", n) for n in (1, 2, 4, 8)},
    "a3-megagpu-8g": ("NVIDIA_H100_MEGA_80GB", 8),
    **{f"g2-standard-{size}": ("NVIDIA_L4", 1) for size in (4, 8, 12, 16, 32)},
    "g2-standard-24": ("NVIDIA_L4", 2),
    "g2-standard-48": ("NVIDIA_L4", 4),
    "g2-standard-96": ("NVIDIA_L4", 8),
}


@dataclass(frozen=True)
class Alternative:
    """A machine type and the strategies an attempt on it may run with, in the request's order."""

    machine: str
    strategies: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"machine": self.machine, "strategies": list(self.strategies)}


def machine_spec(machine: str) -> dict[str, Any]:
    """The machineSpec of `machine`, its accelerators included."""
    accelerator, count = MACHINES[machine]
    return {"machineType": machine, "acceleratorType": accelerator, "acceleratorCount": count}


def job_on_machine(custom_job: Mapping[str, Any], machine: str) -> dict[str, Any]:
    """A copy of `custom_job` on `machine`: every worker pool whose machine type is pool 0's gets
    its machineSpec (the other keys of a pool's machineSpec are kept)."""
    job = copy.deepcopy(dict(custom_job))
    pools = (job.get("jobSpec") or {}).get("workerPoolSpecs") or []
    primary = ((pools[0] or {}).get("machineSpec") or {}).get("machineType") if pools else None
    for pool in pools:
        spec = (pool or {}).get("machineSpec")
        if isinstance(spec, dict) and spec.get("machineType") == primary:
            spec.update(machine_spec(machine))
    return job


def request_on_machine(request: Mapping[str, Any], machine: str | None) -> dict[str, Any]:
    """A canonical envelope whose CustomJob runs on `machine` (unchanged for None): what pricing,
    the fleet's machine class and the create read of an attempt on that alternative."""
    if machine is None:
        return dict(request)
    return {**request, "custom_job": job_on_machine(request.get("custom_job") or {}, machine)}


def alternatives(request: Mapping[str, Any]) -> tuple[Alternative, ...]:
    """The alternatives of a canonical envelope (read and validated when it was accepted)."""
    return tuple(
        Alternative(str(item["machine"]), tuple(str(s) for s in item["strategies"]))
        for item in request.get("capacity") or []
    )


def read_capacity(value: object, violations: list[Violation]) -> tuple[Alternative, ...]:
    """`capacity`: 1 to `MAX_ALTERNATIVES` alternatives, each machine once and known, each with
    1 to 3 strategies among SPOT, STANDARD and FLEX_START, none twice."""
    if value is None:
        return ()
    example = '[{"machine": "a3-highgpu-8g", "strategies": ["SPOT", "FLEX_START"]}, ...]'
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_ALTERNATIVES:
        violations.append(Violation("capacity", f"expected a list of 1 to {MAX_ALTERNATIVES} alternatives: {example}"))
        return ()
    read: list[Alternative] = []
    for i, item in enumerate(value):
        path = f"capacity[{i}]"
        if not isinstance(item, dict):
            violations.append(Violation(path, f'expected {{"machine": MACHINE_TYPE, "strategies": [...]}}: {example}'))
            continue
        for key in item:
            if key not in ("machine", "strategies"):
                violations.append(Violation(field_path(path, key), "unknown field; expected machine, strategies"))
        machine = _read_machine(item.get("machine"), f"{path}.machine", violations)
        strategies = _read_strategies(item.get("strategies"), f"{path}.strategies", violations)
        if machine is not None and any(a.machine == machine for a in read):
            violations.append(Violation(f"{path}.machine", f"is {machine}, listed before; list a machine once"))
        elif machine is not None and strategies:
            read.append(Alternative(machine, strategies))
    return tuple(read)


def _read_machine(value: object, path: str, violations: list[Violation]) -> str | None:
    if value is None:
        violations.append(Violation(path, "is required: a machine type such as a3-highgpu-8g"))
        return None
    if not isinstance(value, str) or value not in MACHINES:
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}..."
        violations.append(Violation(path, f"is {shown}; known machine types: {', '.join(MACHINES)}"))
        return None
    return value


def _read_strategies(value: object, path: str, violations: list[Violation]) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        violations.append(Violation(path, f"expected a non-empty list of strategies among {', '.join(STRATEGIES)}"))
        return ()
    wrong = False
    for j, strategy in enumerate(value):
        if strategy not in STRATEGIES:
            violations.append(Violation(f"{path}[{j}]", f"is {strategy!r}; expected one of {', '.join(STRATEGIES)}"))
            wrong = True
    if not wrong and len(set(value)) != len(value):
        violations.append(Violation(path, "lists a strategy more than once"))
        return ()
    return () if wrong else tuple(value)
