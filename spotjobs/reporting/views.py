"""What the HTML report shows, as data: views of ledger records and the totals over them.

Fed from ledger records (`RequestRecord.to_json()`, so fields a newer version writes are kept, not
dropped) and, where available, what the trainer reported (its runs between restarts and the
checkpoints it committed) and what is in the checkpoint bucket. spotjobs/reporting/html.py renders them.

Totals: requests by outcome, attempts, preemptions and re-queues, goodput (useful training steps
over steps computed, when runs are known), the estimated cost as run on Spot against the same work
on demand (the dated price table, spotjobs/reporting/prices.py) and preemptions per machine type and location.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.clock import parse_rfc3339, utcnow
from spotjobs.reporting.prices import Prices

KNOWN_ATTEMPT_FIELDS = {
    "n",
    "location",
    "strategy",
    "claimed_at",
    "job",
    "state",
    "created_at",
    "started_at",
    "ended_at",
    "state_changed_at",
    "preemptions",
    "republished",
    "republished_at",
    "error",
    "outcome",
    "create_sent_at",
}


@dataclass
class RunView:
    run: int
    start_step: int | None
    end_step: int | None
    checkpoints: list[tuple[str, int]]  # (name, step)
    finished: bool = False
    failed: bool = False

    @property
    def steps(self) -> int:
        if self.start_step is None or self.end_step is None:
            return 0
        return max(0, self.end_step - self.start_step)


@dataclass
class AttemptView:
    raw: Mapping[str, Any]
    runs: list[RunView] = field(default_factory=list)

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    @property
    def n(self) -> int:
        return int(self.raw.get("n", 0))

    @property
    def preemptions(self) -> int:
        return int(self.raw.get("preemptions") or 0)

    @property
    def strategy(self) -> str:
        return str(self.raw.get("strategy") or "SPOT")

    @property
    def start(self) -> datetime | None:
        return _first_time(self.raw, "claimed_at", "create_sent_at", "created_at", "started_at")

    @property
    def end(self) -> datetime | None:
        return _first_time(self.raw, "ended_at")

    @property
    def extra(self) -> dict[str, Any]:
        """Fields the table has no column for (the kit's figures, a newer ledger's fields)."""
        return {k: v for k, v in self.raw.items() if k not in KNOWN_ATTEMPT_FIELDS and v not in (None, "", [], {})}

    @property
    def duration_seconds(self) -> float | None:
        start, end = self.start, self.end
        return (end - start).total_seconds() if start and end else None


@dataclass
class RequestView:
    raw: Mapping[str, Any]
    attempts: list[AttemptView]
    checkpoints: list[dict[str, Any]]  # {"checkpoint", "step", "state": committed|kept|pruned}

    @property
    def request_id(self) -> str:
        return str(self.raw.get("request_id"))

    @property
    def status(self) -> str:
        return str(self.raw.get("status") or "?")

    @property
    def layout(self) -> list[tuple[str, int]]:
        """(machine type, replicas) of each worker pool; empty placeholder pools are no replicas."""
        pools = (((self.raw.get("request") or {}).get("custom_job") or {}).get("jobSpec") or {}).get(
            "workerPoolSpecs"
        ) or []
        layout = []
        for pool in pools:
            if not isinstance(pool, Mapping) or not pool:
                continue
            spec = pool.get("machineSpec") or pool.get("machine_spec") or {}
            machine_type = str(spec.get("machineType") or spec.get("machine_type") or "?")
            layout.append((machine_type, max(1, int(pool.get("replicaCount") or pool.get("replica_count") or 1))))
        return layout

    @property
    def machine(self) -> tuple[str, int]:
        """(machine type of the first worker pool, replicas over every pool)."""
        layout = self.layout
        return (layout[0][0] if layout else "?"), max(sum(replicas for _, replicas in layout), 1)

    @property
    def runs(self) -> list[RunView]:
        return [run for attempt in self.attempts for run in attempt.runs]


# Names a person reads for the fields the ledger records with an attempt; others show their key.
FIELD_LABELS = {
    "checkpoints_committed": "checkpoints",
    "checkpoint_seconds": "checkpoint writes",
    "steps_per_second": "rate",
    "total_steps": "planned steps",
    "last_checkpoint": "last checkpoint",
    "first_checkpoint_at": "first checkpoint",
    "last_checkpoint_at": "last checkpoint at",
    "waiting_since": "waiting since",
}


def human_duration(seconds: float) -> str:
    """A duration as a person reads it: `0.43 s`, `12.3 s`, `4 min 12 s`, `2 h 05 min`, `3 d 4 h`."""
    if seconds < 60:
        return f"{seconds:.3g} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def human_time(value: str) -> str:
    """An RFC 3339 time to the second, as `2026-11-29 10:30:00Z`; text that is not one, as it is."""
    parsed = parse_rfc3339(value)
    return parsed.strftime("%Y-%m-%d %H:%M:%SZ") if parsed else value


def human_value(key: str, value: Any) -> str:
    """One attempt field in human units with sensible precision: never a raw float."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key == "last_checkpoint" and isinstance(value, list) and len(value) == 2:
        return f"step {human_value('step', value[1])} (run {value[0]})"
    if isinstance(value, int | float) and (key.endswith("seconds") or key.endswith("_s")):
        return human_duration(float(value))
    if isinstance(value, int | float) and key.endswith("per_second"):
        return f"{value:.3g}/s"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    if isinstance(value, str):
        return human_time(value) if key.endswith("_at") or key.endswith("_since") else value
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {human_value(str(k), v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(human_value(key, v) for v in value)
    return str(value)


def human_fields(fields: Mapping[str, Any]) -> str:
    """Fields as one compact line: `checkpoints 3 · checkpoint writes 1.28 s · rate 94.2/s`."""
    return " · ".join(
        f"{FIELD_LABELS.get(k, k.replace('_', ' '))} {human_value(k, v)}" for k, v in sorted(fields.items())
    )


def _first_time(raw: Mapping[str, Any], *keys: str) -> datetime | None:
    for key in keys:
        moment = parse_rfc3339(raw.get(key))
        if moment is not None:
            return moment
    return None


def _run_view(data: Mapping[str, Any]) -> RunView:
    checkpoints = data.get("checkpoints") or []
    if isinstance(checkpoints, Mapping):  # {name: step} or {name: (step, bytes)}
        pairs = [(str(name), int(v[0] if isinstance(v, (list, tuple)) else v)) for name, v in checkpoints.items()]
    else:
        pairs = [
            (str(c.get("checkpoint") or c.get("name")), int(c["step"]))
            for c in checkpoints
            if isinstance(c, Mapping) and isinstance(c.get("step"), int)
        ]
    return RunView(
        run=int(data.get("run", 0)),
        start_step=data.get("start_step"),
        end_step=data.get("end_step"),
        checkpoints=sorted(pairs, key=lambda p: p[1]),
        finished=bool(data.get("finished")),
        failed=bool(data.get("failed")),
    )


def build_views(
    records: Iterable[Mapping[str, Any]],
    *,
    runs: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    checkpoints: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> list[RequestView]:
    """Views of ledger records; `runs` by job name, `checkpoints` by request id."""
    runs = runs or {}
    checkpoints = checkpoints or {}
    views = []
    for record in records:
        attempts = [
            AttemptView(attempt, [_run_view(r) for r in runs.get(str(attempt.get("job")), [])])
            for attempt in record.get("attempts") or []
            if isinstance(attempt, Mapping)
        ]
        views.append(RequestView(record, attempts, list(checkpoints.get(str(record.get("request_id")), []))))
    return views


# Totals.


def totals(
    views: Sequence[RequestView], *, seconds_per_step: float | None = None, now: datetime | None = None
) -> dict[str, Any]:
    now = now or utcnow()
    attempts = [a for v in views for a in v.attempts]
    outcomes: dict[str, int] = {}
    for view in views:
        outcomes[view.status.lower()] = outcomes.get(view.status.lower(), 0) + 1
    computed = useful = lost = 0
    have_runs = any(view.runs for view in views)
    for view in views:
        started = [run for run in view.runs if run.start_step is not None]
        computed += sum(run.steps for run in started)
        for previous, following in zip(started, started[1:]):
            lost += max(0, (previous.end_step or 0) - (following.start_step or 0))
        if view.status == "SUCCEEDED":
            useful += max((run.end_step or 0 for run in started if run.finished), default=0)
    spot = on_demand = 0.0
    unpriced: set[str] = set()
    priced: dict[str, Prices] = {}
    by_machine: dict[tuple[str, str], int] = {}
    for view in views:
        machine_type = view.machine[0]
        request_on_demand_hours = 0.0
        on_demand_rate = None
        for attempt in view.attempts:
            location = str(attempt.get("location") or "?")
            by_machine[(machine_type, location)] = by_machine.get((machine_type, location), 0) + attempt.preemptions
            # Every replica of every pool is a VM billed at its own machine's price.
            found = {pool_machine: Prices.find(pool_machine, location) for pool_machine, _ in view.layout}
            prices_of = {m: p for m, p in found.items() if p is not None}
            if not found or len(prices_of) < len(found):
                if attempt.start is not None:
                    unpriced.update(
                        f"{m} in {location}" for m in sorted(found.keys() - prices_of.keys()) or [machine_type]
                    )
                continue
            priced.update({f"{m}/{location}": p for m, p in prices_of.items()})
            on_demand_rate = sum(prices_of[m].on_demand_per_hour * replicas for m, replicas in view.layout)
            rate = sum(prices_of[m].per_hour(attempt.strategy) * replicas for m, replicas in view.layout)
            if seconds_per_step and attempt.runs:
                hours = sum(run.steps for run in attempt.runs) * seconds_per_step / 3600.0
            else:
                begin = _first_time(attempt.raw, "started_at", "created_at")
                end = attempt.end or (now if begin and not attempt.get("outcome") else begin)
                hours = max(0.0, (end - begin).total_seconds() / 3600.0) if begin and end else 0.0
            spot += hours * rate
            request_on_demand_hours += hours
        if on_demand_rate is None:
            continue
        if seconds_per_step and view.runs:
            started = [run for run in view.runs if run.start_step is not None]
            view_computed = sum(run.steps for run in started)
            view_lost = sum(max(0, (a.end_step or 0) - (b.start_step or 0)) for a, b in zip(started, started[1:]))
            request_on_demand_hours = (view_computed - view_lost) * seconds_per_step / 3600.0
        on_demand += request_on_demand_hours * on_demand_rate
    return {
        "requests": len(views),
        "outcomes": dict(sorted(outcomes.items())),
        "attempts": len(attempts),
        "preemptions": sum(a.preemptions for a in attempts),
        "requeues": sum(1 for a in attempts if a.get("outcome") == "requeued"),
        "steps_computed": computed if have_runs else None,
        "steps_useful": useful if have_runs else None,
        "steps_lost": lost if have_runs else None,
        "goodput": round(useful / computed, 4) if have_runs and computed else None,
        "cost_spot_usd": round(spot, 2),
        "cost_on_demand_usd": round(on_demand, 2),
        "savings_pct": round(100.0 * (1 - spot / on_demand), 1) if on_demand else None,
        "unpriced": sorted(unpriced),
        "prices": {
            key: {"spot_per_hour": p.spot_per_hour, "on_demand_per_hour": p.on_demand_per_hour}
            for key, p in sorted(priced.items())
        },
        "preemptions_by_machine": [
            {"machine_type": mt, "location": loc, "preemptions": count}
            for (mt, loc), count in sorted(by_machine.items())
        ],
        "cost_basis": (
            f"each training step priced as {seconds_per_step:.0f} s of machine time"
            if seconds_per_step
            else "machine time from each attempt's start to its end"
        ),
    }
