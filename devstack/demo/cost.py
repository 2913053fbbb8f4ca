"""What the training took and cost: steps computed, useful and lost, and dollars on Spot and on
demand (pure functions of the traces)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from devstack.demo.traces import AttemptTrace, RunTrace
from spotjobs.reporting.prices import PRICES_PATH, Prices  # noqa: F401 - the one price table, in shared/

# What one demo training step stands for when the scenario is priced.
SECONDS_PER_STEP_PRICED = 60.0


@dataclass(frozen=True)
class StepAccount:
    computed: int  # steps trained by any run
    useful: int  # steps in the final model of a request that succeeded
    lost: int  # steps computed but in no checkpoint the next run resumed from


def account_steps(runs: Sequence[RunTrace], succeeded: bool, final_step: int | None) -> StepAccount:
    """Steps computed, useful and lost to preemption over a request's runs, in order."""
    started = [run for run in runs if run.start_step is not None]
    computed = sum(run.steps_computed for run in started)
    lost = 0
    for previous, following in zip(started, started[1:]):
        lost += max(0, (previous.end_step or 0) - (following.start_step or 0))
    useful = (final_step or 0) if succeeded else 0
    return StepAccount(computed=computed, useful=useful, lost=lost)


@dataclass(frozen=True)
class Cost:
    as_run_usd: float  # Spot attempts at the Spot price, fallback attempts at the on-demand price
    on_demand_usd: float  # the same training on on-demand capacity: no preemptions, nothing lost


def estimate_cost(
    attempts: Sequence[AttemptTrace],
    account: StepAccount,
    prices: Prices,
    seconds_per_step: float = SECONDS_PER_STEP_PRICED,
    replicas: int = 1,
) -> Cost:
    """Every step is billed on each of the job's `replicas` (every pool's): each is a VM of its own."""
    hours_per_step = seconds_per_step / 3600.0 * replicas
    as_run = 0.0
    for attempt in attempts:
        rate = prices.spot_per_hour if attempt.strategy == "SPOT" else prices.on_demand_per_hour
        as_run += sum(run.steps_computed for run in attempt.runs) * hours_per_step * rate
    on_demand = (account.computed - account.lost) * hours_per_step * prices.on_demand_per_hour
    return Cost(as_run_usd=as_run, on_demand_usd=on_demand)
