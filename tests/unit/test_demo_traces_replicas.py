"""The demo's traces of a multi-replica job (issue 44): each replica's lines make that replica's
runs; the job's progress is the primary's."""

from __future__ import annotations

import json

from devstack.demo.traces import replica_runs_from_output, runs_from_output

PRIMARY, WORKER = "workerpool0-0", "workerpool1-0"


def line(replica: str, run: int, event: str, step: int) -> dict[str, object]:
    payload = {"severity": "INFO", "message": event, "event": event, "step": step}
    return {"replica": replica, "run": run, "stream": "stdout", "line": json.dumps(payload)}


# The worker's VM is reclaimed at step 40 and it restarts alone (its start 2) while the primary's
# one run goes on to the end.
OUTPUT = [
    line(PRIMARY, 1, "resume", 0),
    line(WORKER, 1, "resume", 0),
    line(WORKER, 1, "stopping", 40),
    line(WORKER, 2, "resume", 0),
    line(PRIMARY, 1, "final", 100),
    line(WORKER, 2, "stopping", 100),
]


def test_the_jobs_runs_are_the_primarys_alone() -> None:
    (run,) = runs_from_output(OUTPUT)
    assert (run.run, run.start_step, run.end_step, run.finished) == (1, 0, 100, True)
    assert run.steps_computed == 100


def test_each_other_replica_has_runs_of_its_own() -> None:
    replicas = replica_runs_from_output(OUTPUT)
    assert list(replicas) == [WORKER]
    first, second = replicas[WORKER]
    assert (first.run, first.start_step, first.end_step) == (1, 0, 40)
    assert (second.run, second.start_step, second.end_step) == (2, 0, 100)


def test_a_line_without_a_replica_is_the_primarys() -> None:
    plain = [{k: v for k, v in item.items() if k != "replica"} for item in OUTPUT[:1]]
    (run,) = runs_from_output(plain)
    assert run.start_step == 0
    assert replica_runs_from_output(plain) == {}


def test_the_demos_cost_bills_every_replica_for_every_step() -> None:
    from devstack.demo.cost import StepAccount, estimate_cost
    from devstack.demo.traces import AttemptTrace
    from spotjobs.reporting.prices import Prices

    prices = Prices("a2-highgpu-1g", "us-central1", 3.6, 1.2, "2025-03-06", "test", "test")
    attempt = AttemptTrace(1, "SPOT", "us-central1", "job", "JOB_STATE_SUCCEEDED", 0, 0, "succeeded")
    attempt.runs = runs_from_output(OUTPUT)
    account = StepAccount(computed=100, useful=100, lost=0)
    one = estimate_cost([attempt], account, prices, seconds_per_step=3600)
    two = estimate_cost([attempt], account, prices, seconds_per_step=3600, replicas=2)
    assert (one.as_run_usd, one.on_demand_usd) == (120.0, 360.0)
    assert (two.as_run_usd, two.on_demand_usd) == (240.0, 720.0)
