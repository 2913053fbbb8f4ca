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
