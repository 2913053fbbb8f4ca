"""The demo's checks (what differs from each scenario's design) and its report (pure functions of
the traces)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from devstack.demo.cost import SECONDS_PER_STEP_PRICED, Prices, account_steps, estimate_cost
from devstack.demo.scenarios import FAILED, REJECTED, STEPS, SUCCEEDED
from devstack.demo.traces import PRIMARY_REPLICA, AttemptTrace, RequestTrace, RunTrace
from shared.jobs import job_replicas


def resume_gaps(runs: Sequence[RunTrace]) -> list[str]:
    """Runs that did not start from the newest checkpoint committed before them."""
    problems = []
    newest: int | None = None
    for run in runs:
        if run.start_step is not None and run.start_step != (newest or 0):
            problems.append(
                f"run {run.run} started at step {run.start_step}, the newest complete checkpoint "
                f"before it was at step {newest or 0}"
            )
        steps = [step for step, _ in run.checkpoints.values()]
        if steps:
            newest = max(steps + [newest or 0])
    return problems


def check_request(trace: RequestTrace, keep_last: int) -> list[str]:
    """What differs from the scenario's design (empty: as designed)."""
    scenario = trace.scenario
    differences = []
    if trace.outcome != scenario.outcome:
        differences.append(f"outcome is {trace.outcome}, expected {scenario.outcome}")
    if scenario.outcome == REJECTED:
        violations = [
            v
            for a in trace.alerts
            if a.get("kind") == "invalid_request"
            for v in a.get("details", {}).get("violations", [])
        ]
        if not violations:
            differences.append("no invalid_request alert naming the violations")
        if trace.vertex_jobs:
            differences.append(f"{trace.vertex_jobs} Vertex job(s) exist for a rejected request")
        return differences
    differences += _attempt_differences(trace)
    if trace.vertex_jobs != len(trace.attempts):
        differences.append(f"{trace.vertex_jobs} Vertex jobs for {len(trace.attempts)} attempt(s)")
    differences += resume_gaps(trace.runs)
    if scenario.publish_count > 1 and trace.duplicates_suppressed < scenario.publish_count - 1:
        differences.append(
            f"published {scenario.publish_count} times, {trace.duplicates_suppressed} duplicate(s) suppressed"
        )
    if scenario.trigger is not None:
        if trace.trigger is None:
            differences.append("no manifest for the trigger's window")
        elif trace.trigger["manifest_objects"] != scenario.objects:
            differences.append(
                f"the manifest lists {trace.trigger['manifest_objects']} objects, {scenario.objects} landed"
            )
    if scenario.outcome == FAILED and not trace.alert_kinds().get("job_failed"):
        differences.append("no job_failed alert")
    if scenario.outcome == SUCCEEDED:
        differences += _success_differences(trace, keep_last)
    return differences


def _attempt_differences(trace: RequestTrace) -> list[str]:
    expected = trace.scenario.attempts
    if len(trace.attempts) != len(expected):
        return [f"{len(trace.attempts)} attempt(s), expected {len(expected)}"]
    differences = []
    for attempt, want in zip(trace.attempts, expected):
        if attempt.strategy != want.strategy:
            differences.append(f"attempt {attempt.n} ran {attempt.strategy}, expected {want.strategy}")
        if attempt.preemptions != want.preemptions:
            differences.append(
                f"attempt {attempt.n}: spotjobs counted {attempt.preemptions} preemption(s), "
                f"{want.preemptions} were planned ({attempt.preemptions_injected} injected)"
            )
        if want.replica_preemptions is not None and attempt.replica_preemptions != dict(want.replica_preemptions):
            differences.append(
                f"attempt {attempt.n}: the emulator reclaimed {_per_replica(attempt.replica_preemptions)} time(s); "
                f"planned {_per_replica(want.replica_preemptions)}"
            )
        elif want.replica_runs is not None:
            differences += [
                f"attempt {attempt.n}: {name} started {len(_runs(attempt, name))} time(s), expected {starts}"
                for name, starts in sorted(want.replica_runs.items())
                if len(_runs(attempt, name)) != starts
            ]
    return differences


def _runs(attempt: AttemptTrace, replica: str) -> list[RunTrace]:
    return attempt.runs if replica == PRIMARY_REPLICA else attempt.replica_runs.get(replica, [])


def _per_replica(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(counts.items()))


def replica_rows(attempt: AttemptTrace, roles: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """An attempt of several replicas, one row each: what it runs, the VMs the emulator reclaimed
    under it, and its starts (runs). Empty for a job of one replica: its runs are the attempt's."""
    names = sorted({PRIMARY_REPLICA, *attempt.replica_preemptions, *attempt.replica_runs})
    if len(names) < 2:
        return []
    rows = []
    for name in names:
        runs = _runs(attempt, name)
        rows.append(
            {
                "replica": name,
                "role": (roles or {}).get(name),
                "preemptions": attempt.replica_preemptions.get(name, 0),
                "runs": len(runs),
                # Where each run resumed training (none for a replica that prints no steps).
                "run_start_steps": [run.start_step for run in runs if run.start_step is not None],
            }
        )
    return rows


def _success_differences(trace: RequestTrace, keep_last: int) -> list[str]:
    differences = []
    final = max((run.end_step or 0 for run in trace.runs if run.finished), default=None)
    if final is None:
        differences.append("no run finished training")
    elif final != STEPS:
        differences.append(f"training finished at step {final}, expected {STEPS}")
    if len(trace.checkpoints_present) > keep_last:
        differences.append(
            f"{len(trace.checkpoints_present)} checkpoints kept after pruning, expected at most {keep_last}"
        )
    pruned = len(trace.checkpoints_pruned)
    if trace.checkpoints_written and not pruned:
        differences.append("no checkpoint was pruned")
    if trace.reported_pruned != pruned:
        differences.append(
            f"prune_checkpoints reported {trace.reported_pruned} checkpoint(s) deleted, "
            f"{pruned} are gone from the bucket"
        )
    return differences


def scenario_replicas(trace: RequestTrace) -> int:
    """The replicas of every pool of the scenario's job (1 for a trigger's or an unreadable body)."""
    try:
        return job_replicas(json.loads(trace.scenario.body)["custom_job"])
    except (ValueError, TypeError, KeyError, AttributeError):  # a body spotjobs refuses: never billed
        return 1


def request_report(trace: RequestTrace, keep_last: int, prices: Prices) -> dict[str, Any]:
    succeeded = trace.outcome == SUCCEEDED
    final = max((run.end_step or 0 for run in trace.runs if run.finished), default=None)
    account = account_steps(trace.runs, succeeded, final)
    written = trace.checkpoints_written
    pruned = trace.checkpoints_pruned
    cost = estimate_cost(trace.attempts, account, prices, replicas=scenario_replicas(trace))
    differences = check_request(trace, keep_last)
    return {
        "request_id": trace.scenario.request_id,
        "scenario": trace.scenario.key,
        "expected": trace.scenario.expected_json(),
        "outcome": trace.outcome,
        "ok": not differences,
        "differences": differences,
        "attempts": [_attempt_json(attempt, trace.scenario.replica_roles) for attempt in trace.attempts],
        "vertex_jobs": trace.vertex_jobs,
        "steps_computed": account.computed,
        "steps_useful": account.useful,
        "steps_lost": account.lost,
        "checkpoints_written": len(written),
        "checkpoints_kept": len(trace.checkpoints_present),
        "checkpoints_pruned": len(pruned),
        "bytes_freed": sum(written[name][1] for name in pruned),
        "pruner_reported": {"checkpoints_deleted": trace.reported_pruned, "bytes_freed": trace.reported_bytes_freed},
        "duplicates_suppressed": trace.duplicates_suppressed,
        "alerts": trace.alert_kinds(),
        "cost_spot_usd": round(cost.as_run_usd, 2),
        "cost_on_demand_usd": round(cost.on_demand_usd, 2),
        "trigger": trace.trigger,
    }


def _attempt_json(attempt: AttemptTrace, roles: Mapping[str, str] | None) -> dict[str, Any]:
    rows = replica_rows(attempt, roles)
    return {**attempt.to_json(), "replicas": rows} if rows else attempt.to_json()


def build_report(
    traces: Sequence[RequestTrace],
    *,
    seed: int,
    keep_last: int,
    prices: Prices,
    alerts: Sequence[Mapping[str, Any]],
    wall_seconds: float,
) -> dict[str, Any]:
    requests = [request_report(trace, keep_last, prices) for trace in traces]
    computed = sum(r["steps_computed"] for r in requests)
    useful = sum(r["steps_useful"] for r in requests)
    spot = sum(r["cost_spot_usd"] for r in requests)
    on_demand = sum(r["cost_on_demand_usd"] for r in requests)
    kinds: dict[str, int] = {}
    for alert in alerts:
        kinds[str(alert.get("kind"))] = kinds.get(str(alert.get("kind")), 0) + 1
    attempts = [a for r in requests for a in r["attempts"]]
    return {
        "scenario_ok": all(r["ok"] for r in requests),
        "seed": seed,
        "wall_seconds": round(wall_seconds, 1),
        "requests": requests,
        "totals": {
            "jobs": sum(r["vertex_jobs"] for r in requests),
            "preemptions": sum(a["preemptions"] for a in attempts),
            "requeues": sum(1 for a in attempts if a["outcome"] == "requeued"),
            "duplicates_suppressed": sum(r["duplicates_suppressed"] for r in requests),
            "invalid_rejected": sum(1 for r in requests if r["outcome"] == REJECTED),
            "alerts": len(alerts),
            "alerts_by_kind": dict(sorted(kinds.items())),
            "steps_computed": computed,
            "steps_useful": useful,
            "steps_lost": sum(r["steps_lost"] for r in requests),
            "goodput": round(useful / computed, 4) if computed else 0.0,
            "checkpoints_pruned": sum(r["checkpoints_pruned"] for r in requests),
            "bytes_freed": sum(r["bytes_freed"] for r in requests),
            "bytes_freed_reported_by_pruner": sum(r["pruner_reported"]["bytes_freed"] for r in requests),
            "cost_spot_usd": round(spot, 2),
            "cost_on_demand_usd": round(on_demand, 2),
            "savings_pct": round(100.0 * (1 - spot / on_demand), 1) if on_demand else 0.0,
        },
        "pricing": {
            "machine_type": prices.machine_type,
            "location": prices.location,
            "on_demand_per_hour": prices.on_demand_per_hour,
            "spot_per_hour": prices.spot_per_hour,
            "as_of": prices.as_of,
            "source": prices.source,
            "caveat": prices.caveat,
            "scale": f"each demo training step is priced as {SECONDS_PER_STEP_PRICED:.0f} s of "
            f"{prices.machine_type} time ({STEPS} steps = {STEPS * SECONDS_PER_STEP_PRICED / 3600:.1f} h)",
        },
    }
