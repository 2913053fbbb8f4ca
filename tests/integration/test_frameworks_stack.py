"""The kit's framework integrations as a user's container runs them, through the embedded stack.

A transformers Trainer script and a Lightning script (tests/frameworks/children/ plus docs/kit.md's
own snippet, as tests/frameworks/test_kill_and_resume.py builds them) are the Vertex emulator's job
command, run by the framework venv's python (.venv-frameworks, made by `make test`) through
`fork_client.py`: the script runs in a child of the fork server that has the frameworks imported
(tests/support/fork_server.py), with the command's environment, output, signals and exit status,
and dies with it (a run imports nothing again: 24 runs used to spend two minutes of CPU on it). The
emulator mirrors the checkpoint folder as Vertex's /gcs/ mount (`--gcs-fuse-dir`,
devstack/vertex/fuse.py) and preempts on a `documented`-profile plan keyed to progress (each run
right after its first committed checkpoint): three times (one attempt), or seven (the job fails
with STOCKOUT, is re-queued, and attempt 2 resumes). What must hold however slow the machine:
SUCCEEDED at exactly the planned last step, every run resumed where the one before committed,
every preemption counted, checkpoints pruned afterwards to the usual rules, the goodput
computed from the kit's own lines, and the deployment's customised commit markers in every job.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spotjobs_kit.lines import KitRecord, parse_kit_line

from devstack.samples import custom_job
from shared.jobs import LABEL_ATTEMPT, LABEL_REQUEST_ID
from shared.ledger.states import RequestStatus
from spotjobs.reporting.views import build_views, totals
from tests.conftest import TEST_FUNCTION_ENV, isolated_stack
from tests.support.fork_server import IMPORT_TIME_ENV, fork_server
from tests.support.frameworks import CASES, CHILDREN, framework_python, kit_snippet
from tests.support.stack_checkpoints import checkpoint_steps

pytestmark = pytest.mark.stack

EVERY = 10
FRAMEWORKS = ("hf-trainer", "lightning")
# (preemptions of attempt 1, planned steps): seven runs commit at least ten steps each before the
# seventh preemption fails the job; attempt 2 then has steps left to resume into.
SCENARIOS = {"three": (3, 40), "seven": (7, 90)}
TIMEOUT = 900.0  # up to nine runs, each importing torch and its framework on a busy machine
MORE_MARKERS = ("commit_success.txt", ".metadata", "training-done.txt")  # after COMMITTED, customised


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    framework_python()  # fails early, naming `make .venv-frameworks`, when it is missing
    mount = tmp_path_factory.mktemp("gcs-fuse")
    vertex_args = ("--grace-seconds", "0.5", "--error-delay-seconds", "0.5", "--gcs-fuse-dir", str(mount))
    # A customised marker list: every job gets it (the kit judges with the pruner's list).
    function_env = {**TEST_FUNCTION_ENV, "SPOTJOBS_COMMIT_MARKERS": ",".join(("COMMITTED", *MORE_MARKERS))}
    with isolated_stack(vertex_args=vertex_args, vertex_signals="documented", function_env=function_env) as running:
        yield running


def framework_job(request_id: str, framework: str, steps: int, folder: Path) -> bytes:
    """The request a user would publish: the framework script as the container's command."""
    case = CASES[framework]
    folder.mkdir(parents=True)
    script = folder / case.script
    script.write_text((CHILDREN / case.script).read_text() + "\n" + kit_snippet(framework))
    (folder / "common.py").write_text((CHILDREN / "common.py").read_text())
    job = custom_job(
        request_id, [framework_python(), str(CHILDREN / "fork_client.py"), fork_server().socket_path, str(script)]
    )
    env = {
        "KIT_TEST_STEPS": str(steps),
        "KIT_TEST_EVERY": str(EVERY),
        "KIT_TEST_STEPS_LOG": str(folder / "steps.log"),
        "KIT_TEST_SAVE_DELAY": "0",
        # The plan preempts on a committed line: the SIGTERM meets the run within its next steps
        # (ten of them, 0.2 s), not after it finished them all and printed run_finished.
        "KIT_TEST_STEP_SECONDS": "0.02",
        **IMPORT_TIME_ENV,  # the values the fork server imported the frameworks with
    }
    job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return json.dumps({"request_id": request_id, "custom_job": job, "max_attempts": 3}).encode()


def kit_runs(stack: Any, job: str) -> list[list[KitRecord]]:
    """The kit's lines of each run of the job (the emulator's worker output), in order."""
    runs: dict[int, list[KitRecord]] = {}
    for item in stack.vertex_control("GET", f"/emulator/v1/{job}")["output"]:
        record = parse_kit_line(item["line"]) if item["stream"] == "stdout" else None
        if record is not None:
            runs.setdefault(int(item["run"]), []).append(record)
    return [runs[n] for n in sorted(runs)]


def started(run: list[KitRecord]) -> KitRecord:
    [line] = [r for r in run if r.event == "run_started"]
    return line


def committed(run: list[KitRecord]) -> int:
    """The newest step the run committed (or found committed), else where it resumed."""
    saved = [r.step for r in run if r.event in ("checkpoint_committed", "checkpoint_kept") and r.step is not None]
    return max(saved, default=started(run).resumed_step or 0)


def run_view(number: int, run: list[KitRecord]) -> dict[str, Any]:
    """A run as the report reads one (spotjobs/reporting/views.py), from the kit's lines."""
    steps = [r.step for r in run if r.step is not None]
    return {
        "run": number,
        "start_step": started(run).resumed_step or 0,
        "end_step": max(steps, default=started(run).resumed_step or 0),
        "checkpoints": [{"checkpoint": r.checkpoint, "step": r.step} for r in run if r.event == "checkpoint_committed"],
        "finished": any(r.event == "run_finished" for r in run),
    }


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_framework_script_preempted_on_plan_succeeds_at_its_last_step(
    stack: Any, framework: str, scenario: str, tmp_path: Path
) -> None:
    preemptions, steps = SCENARIOS[scenario]
    request_id = f"{framework}-{scenario}-{uuid.uuid4().hex[:6]}"
    stack.vertex_control(
        "POST",
        "/emulator/v1/preemption-plans",
        {
            "labels": {LABEL_REQUEST_ID: request_id, LABEL_ATTEMPT: "1"},
            "preemptions": preemptions,
            "after_checkpoints": 1,
            # Compute Engine's 30 s notice: the SIGTERM save completes however busy the machine.
            "grace_seconds": 30,
        },
    )
    stack.publish("job_requests", framework_job(request_id, framework, steps, tmp_path / "job"))
    ledger = stack.ledger()
    record = stack.wait_for(
        lambda: (found := ledger.get(request_id)) and found.status.is_terminal and found,
        TIMEOUT,
        f"{request_id} to end",
    )

    assert record.status == RequestStatus.SUCCEEDED, record
    for attempt in record.attempts:  # the deployment's markers reached the job's container
        [pool] = stack.job_service().get_custom_job(name=attempt.job).job_spec.worker_pool_specs
        env = {variable.name: variable.value for variable in pool.container_spec.env}
        assert (
            env["SPOTJOBS_COMMIT_MARKERS"]
            == ",".join(stack.settings.commit_markers)
            == "COMMITTED," + ",".join(MORE_MARKERS)
        )
    runs = [run for attempt in record.attempts for run in kit_runs(stack, attempt.job)]
    where = [[(r.event, r.step, r.resumed_step) for r in run] for run in runs]
    # Every run resumed exactly where the one before committed last, and the last finished at the
    # planned step.
    for before, after in zip(runs, runs[1:]):
        assert started(after).resumed_step == committed(before), where
    assert [r.step for r in runs[-1] if r.event == "run_finished"] == [steps], where
    assert all(not any(r.event == "run_finished" for r in run) for run in runs[:-1]), where
    assert len(runs) == preemptions + 1, where
    first = record.attempts[0]
    if preemptions > 6:  # Vertex restarts a Spot job six times, the seventh preemption fails it
        assert [a.outcome for a in record.attempts] == ["requeued", "succeeded"]
        assert "STOCKOUT" in first.error["message"]
        assert started(kit_runs(stack, record.attempts[1].job)[0]).resumed_step == committed(runs[preemptions - 1])
    else:
        assert [a.outcome for a in record.attempts] == ["succeeded"]
    stack.wait_for(
        lambda: ledger.get(request_id).attempts[0].preemptions == preemptions,
        60,
        f"{preemptions} preemptions counted",
    )

    # Pruned afterwards by the usual rules: at most keep_last complete checkpoints stay, the
    # final one among them.
    stack.wait_for(
        lambda: [
            line
            for line in stack.function_logs("prune_checkpoints")
            if line.get("event") == "prune_summary" and line.get("request_id") == request_id
        ],
        120,
        "the prune of the succeeded request",
    )
    final = max((r for run in runs for r in run if r.event == "checkpoint_committed"), key=lambda r: r.step)
    left = checkpoint_steps(stack, request_id)
    assert final.checkpoint.rstrip("/") in left and len(left) <= stack.settings.keep_last, (left, final)

    # Goodput, as the report computes it, from the kit's lines: the planned steps were useful.
    views = build_views(
        [ledger.get(request_id).to_json()],
        runs={
            attempt.job: [run_view(n, run) for n, run in enumerate(kit_runs(stack, attempt.job), 1)]
            for attempt in record.attempts
        },
    )
    figures = totals(views)
    assert figures["steps_useful"] == steps and 0 < figures["goodput"] <= 1, figures
    print(f"{request_id}: goodput {figures['goodput']} ({figures['steps_computed']} steps computed)")
