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


# The demo's two-node scenario: the worker's VM reclaimed after the primary's checkpoint at 100,
# the job restarting whole (restartJobOnWorkerRestart) with the primary saving 110 on its SIGTERM;
# then the primary's own VM reclaimed at 210, once its second run had committed a checkpoint.


def primary_checkpoint(run: int, step: int) -> dict[str, object]:
    item = line(PRIMARY, run, "checkpoint", step)
    payload = json.loads(str(item["line"]))
    item["line"] = json.dumps({**payload, "checkpoint": f"step-{step:06d}/", "bytes": 800})
    return item


def two_node_output(worker_starts: int = 3, primary_runs: int = 3) -> list[dict[str, object]]:
    ckpt = primary_checkpoint
    runs = [
        [line(PRIMARY, 1, "resume", 0), ckpt(1, 50), ckpt(1, 100), line(PRIMARY, 1, "stopping", 110), ckpt(1, 110)],
        [line(PRIMARY, 2, "resume", 110), ckpt(2, 150), ckpt(2, 200), line(PRIMARY, 2, "stopping", 210), ckpt(2, 210)],
        [
            line(PRIMARY, 3, "resume", 210),
            *(ckpt(3, step) for step in range(250, 1001, 50)),
            line(PRIMARY, 3, "final", 1000),
        ],
    ]
    output = [item for run in runs[:primary_runs] for item in run]
    for start in range(1, worker_starts + 1):
        output.append({"replica": WORKER, "run": start, "stream": "stdout", "line": '{"event": "ready"}'})
    return output


def two_node_trace(reclaimed: dict[str, int] | None = None, worker_starts: int = 3) -> object:
    from devstack.demo.scenarios import build_scenarios
    from devstack.demo.traces import AttemptTrace, RequestTrace

    reclaimed = {PRIMARY: 1, WORKER: 1} if reclaimed is None else reclaimed
    output = two_node_output(worker_starts)
    scenario = next(s for s in build_scenarios(1) if s.key == "two-node")
    injected = sum(reclaimed.values())
    attempt = AttemptTrace(1, "SPOT", "us-central1", "job-1", "JOB_STATE_SUCCEEDED", 2, injected, "succeeded")
    attempt.runs = runs_from_output(output)
    attempt.replica_runs = replica_runs_from_output(output)
    attempt.replica_preemptions = reclaimed
    return RequestTrace(
        scenario,
        status="SUCCEEDED",
        attempts=[attempt],
        vertex_jobs=1,
        checkpoints_present={"step-000950/": 800, "step-001000/": 800},
        reported_pruned=20,  # 22 written: 50, 100, 110, 150, 200, 210, 250 .. 1000
        reported_bytes_freed=20 * 800,
    )


def test_the_two_node_scenario_reclaims_the_worker_then_the_primary_restarting_the_whole_job() -> None:
    from devstack.demo.scenarios import WORKER_MODULE, build_scenarios

    scenario = next(s for s in build_scenarios(1) if s.key == "two-node")
    assert scenario.plan is not None and scenario.plan["replica"] == WORKER
    assert scenario.plan["preemptions"] == 1 and scenario.plan["after_checkpoints"] >= 1
    # One plan binds a job; the primary's reclaim is asked for while the job runs (the runner).
    assert scenario.reclaim_after_restart == PRIMARY
    job = json.loads(scenario.body)["custom_job"]
    primary, worker = job["jobSpec"]["workerPoolSpecs"]
    assert worker["pythonPackageSpec"]["pythonModule"] == WORKER_MODULE
    assert worker["machineSpec"] == primary["machineSpec"]
    # The worker's reclaim must reach the primary: the kit's SIGTERM line is what spotjobs counts.
    assert job["jobSpec"]["scheduling"] == {"restartJobOnWorkerRestart": True}
    [expected] = scenario.attempts
    assert expected.preemptions == 2
    assert dict(expected.replica_preemptions or {}) == {PRIMARY: 1, WORKER: 1}
    assert dict(expected.replica_runs or {}) == {PRIMARY: 3, WORKER: 3}


def test_a_two_node_run_as_designed_has_no_differences() -> None:
    from devstack.demo.report import check_request

    assert check_request(two_node_trace(), keep_last=2) == []


def test_a_replica_reclaimed_other_than_planned_is_a_difference() -> None:
    from devstack.demo.report import check_request

    differences = check_request(two_node_trace(reclaimed={PRIMARY: 0, WORKER: 1}), keep_last=2)
    assert differences == [
        "attempt 1: the emulator reclaimed workerpool0-0 0, workerpool1-0 1 time(s); "
        "planned workerpool0-0 1, workerpool1-0 1"
    ]


def test_a_replica_that_did_not_restart_with_the_job_is_a_difference() -> None:
    from devstack.demo.report import check_request

    differences = check_request(two_node_trace(worker_starts=2), keep_last=2)
    assert differences == ["attempt 1: workerpool1-0 started 2 time(s), expected 3"]


def test_the_primarys_reclaim_is_due_once_its_next_run_has_committed_a_checkpoint() -> None:
    from devstack.demo.runner import due_reclaims
    from devstack.demo.scenarios import build_scenarios
    from devstack.demo.traces import AttemptTrace, RequestTrace

    scenario = next(s for s in build_scenarios(1) if s.key == "two-node")

    def trace(output: list[dict[str, object]], state: str = "JOB_STATE_RUNNING") -> RequestTrace:
        attempt = AttemptTrace(1, "SPOT", "us-central1", "jobs/1", state, 1, 1, None)
        attempt.runs = runs_from_output(output)
        return RequestTrace(scenario, status="RUNNING", attempts=[attempt])

    first_run = two_node_output(primary_runs=1)
    resumed = first_run + [line(PRIMARY, 2, "resume", 110)]
    checkpointed = resumed + [primary_checkpoint(2, 150)]
    assert due_reclaims([trace(first_run)], done=set()) == []
    assert due_reclaims([trace(resumed)], done=set()) == []
    assert due_reclaims([trace(checkpointed)], done=set()) == [("demo-s1-two-node", "jobs/1", PRIMARY)]
    assert due_reclaims([trace(checkpointed)], done={"demo-s1-two-node"}) == []
    assert due_reclaims([trace(checkpointed, state="JOB_STATE_PENDING")], done=set()) == []


def test_the_reports_show_each_replicas_preemptions_and_runs() -> None:
    from devstack.demo.cost import Prices
    from devstack.demo.html import page
    from devstack.demo.report import build_report
    from devstack.demo.view import render_report

    prices = Prices("a2-highgpu-1g", "us-central1", 3.6, 1.2, "2025-03-06", "test", "test")
    trace = two_node_trace()
    report = build_report([trace], seed=1, keep_last=2, prices=prices, alerts=[], wall_seconds=1.0)
    [attempt] = report["requests"][0]["attempts"]
    assert attempt["replicas"] == [
        {"replica": PRIMARY, "role": "demo trainer", "preemptions": 1, "runs": 3, "run_start_steps": [0, 110, 210]},
        {
            "replica": WORKER,
            "role": "stand-in worker, trains nothing",
            "preemptions": 1,
            "runs": 3,
            "run_start_steps": [],
        },
    ]
    text = render_report(report)
    assert "    workerpool0-0 (demo trainer): 1 reclaimed, 3 run(s) from step 0, 110, 210\n" in text
    assert "    workerpool1-0 (stand-in worker, trains nothing): 1 reclaimed, 3 run(s)" in text
    html = page([trace], [], seed=1)
    assert (
        "demo-s1-two-node #1 replicas: workerpool0-0 (demo trainer): 1 reclaimed, 3 run(s) from step 0, 110, 210; "
        "workerpool1-0 (stand-in worker, trains nothing): 1 reclaimed, 3 run(s)"
    ) in html


def test_a_single_replica_attempt_lists_no_replicas() -> None:
    from devstack.demo.report import replica_rows
    from devstack.demo.traces import AttemptTrace

    attempt = AttemptTrace(1, "SPOT", "us-central1", "job", "JOB_STATE_SUCCEEDED", 0, 0, "succeeded")
    attempt.runs = runs_from_output(OUTPUT[:1])
    attempt.replica_preemptions = {PRIMARY: 0}
    assert replica_rows(attempt, roles=None) == []


def test_the_stand_in_worker_says_who_it_is_and_leaves_on_sigterm() -> None:
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    env["CLUSTER_SPEC"] = json.dumps({"task": {"type": "workerpool1", "index": 0}})
    with subprocess.Popen(
        [sys.executable, "-m", "devstack.demo.worker"], env=env, stdout=subprocess.PIPE, text=True
    ) as worker:
        assert worker.stdout is not None
        ready = json.loads(worker.stdout.readline())
        worker.send_signal(signal.SIGTERM)
        stopping = json.loads(worker.stdout.readline())
        assert worker.wait(timeout=10) == 143
    assert (ready["event"], ready["rank"], ready["world_size"]) == ("ready", "1", "2")
    assert ready["task"] == {"type": "workerpool1", "index": 0} and ready["master"] == "127.0.0.1:29500"
    assert stopping["event"] == "stopping"
