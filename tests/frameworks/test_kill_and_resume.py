"""The kit's framework integrations in real processes on the CPU, with docs/kit.md's own snippets.

Each case appends a snippet from docs/kit.md ("Your framework") to a small training script
(children/), runs it with the framework venv's python (.venv-frameworks, made by `make test`),
and: SIGTERMs it at a random step, restarts it, SIGTERMs it in the middle of a save, plants a
torn checkpoint newer than everything, and runs it to the end. The script waits at that step
(or inside that save) until the test has sent the signal, so it lands there however loaded the
machine is. Each preempted run must exit 143, its emergency save must hold the step it was at,
and the next run resume exactly there; the last run must skip the torn checkpoint
(`checkpoint_torn`) and finish; the steps computed over all runs must be the planned steps plus,
per preemption, the steps since its last commit.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from spotjobs_kit import parse_kit_line
from spotjobs_kit.layout import DEFAULT_COMMIT_MARKERS, KIT_MARKER

from tests.support.fork_server import FORKABLE, fork_server
from tests.support.frameworks import (
    CASES,
    CHILDREN,
    TORN_STEP,
    Outcome,
    framework_env,
    framework_python,
    free_port,
    kit_snippet,
)

# A test runs up to three training processes, each given 300 s (run_script); pytest-timeout's
# 300 s for the whole test ran out under a load average of 20 (hf-trainer, lightning).
pytestmark = pytest.mark.timeout(3 * 300)

STEPS = 30
EVERY = 10


def run_script(script: Path, env: dict[str, str], kill: Callable[[str], bool] | None, processes: int) -> Outcome:
    """Run until it exits (as `processes` torch.distributed processes, rank 0's stdout read);
    SIGTERM every process once, at the first line of rank 0's that `kill` accepts (Vertex
    SIGTERMs every container of the VM), then create the handshake file the script waits for."""
    started = []
    port = str(free_port())
    handshake = Path(env["KIT_TEST_HANDSHAKE"])
    handshake.unlink(missing_ok=True)
    for rank in range(processes):
        ranked = {**env, "RANK": str(rank), "WORLD_SIZE": str(processes), "MASTER_ADDR": "127.0.0.1"}
        errors = script.parent / f"stderr-{rank}.txt"
        with open(errors, "w") as stderr_file, open(script.parent / f"stdout-{rank}.txt", "w") as stdout_file:
            process_env = {**ranked, "MASTER_PORT": port} if processes > 1 else env
            stdout = subprocess.PIPE if rank == 0 else stdout_file
            # stderr a file: a chatty framework never blocks on a full pipe.
            if script.name in FORKABLE:
                started.append(fork_server().start(script, process_env, script.parent, stdout, stderr_file))
            else:
                started.append(
                    subprocess.Popen(
                        [framework_python(), str(script)],
                        env=process_env,
                        cwd=script.parent,
                        stdout=stdout,
                        stderr=stderr_file,
                        text=True,
                    )
                )
    primary = started[0]
    assert primary.stdout is not None
    records, steps, lines, sent = [], [], [], False
    for line in primary.stdout:
        lines.append(line)
        record = parse_kit_line(line) if "spotjobs" in line else None
        if record is not None:
            records.append(record)
        elif line.startswith("STEP "):
            steps.append(int(line.split()[1]))
        if kill is not None and not sent and kill(line):
            for process in started:
                process.send_signal(signal.SIGTERM)
            handshake.touch()
            sent = True
    returncodes = [process.wait(timeout=300) for process in started]
    stderr = "".join((script.parent / f"stderr-{rank}.txt").read_text()[-2000:] for rank in range(processes))
    return Outcome(returncodes, records, steps, lines, stderr)


# Each variant: the docs/kit.md snippet it runs, and how many torch.distributed processes run it.
VARIANTS = {
    **{name: (name, 1) for name in CASES if name != "torch-dcp"},
    "torch-dcp-sync": ("torch-dcp", 1),
    "torch-dcp-async-2-processes": ("torch-dcp", 2),  # one process would add time, not coverage
}


def prepare(name: str, tmp_path: Path, *, steps: int = STEPS, after: str = "") -> tuple[Path, dict[str, str], int]:
    """The variant's training script (the child, its docs/kit.md snippet, then `after`) in `tmp_path`,
    the environment it runs in (planned `steps`, the kit of this checkout), and its process count."""
    snippet_name, processes = VARIANTS[name]
    case = CASES[snippet_name]
    snippet = kit_snippet(snippet_name)
    if name == "torch-dcp-sync":
        assert snippet.count("async_save=True") == 1
        snippet = snippet.replace("async_save=True", "async_save=False")
    script = tmp_path / case.script
    script.write_text((CHILDREN / case.script).read_text() + "\n" + snippet + after)
    (tmp_path / "common.py").write_text((CHILDREN / "common.py").read_text())
    env = {
        **framework_env(tmp_path),
        "AIP_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "KIT_TEST_STEPS": str(steps),
        "KIT_TEST_EVERY": str(EVERY),
        "KIT_TEST_STEPS_LOG": str(tmp_path / "steps.log"),
        "OMP_NUM_THREADS": "1",
        "KIT_TEST_HANDSHAKE": str(tmp_path / "sigterm-sent"),
    }
    return script, env, processes


@pytest.mark.parametrize("name", VARIANTS)
def test_sigterm_at_random_points_then_resume_at_the_committed_step(name: str, tmp_path: Path) -> None:
    script, env, processes = prepare(name, tmp_path)
    case = CASES[VARIANTS[name][0]]
    checkpoints = Path(env["AIP_CHECKPOINT_DIR"])
    seed = int(os.environ.get("KIT_TEST_SEED") or random.randrange(1 << 30))  # to replay a failure
    at_step = random.Random(seed).randint(3, 2 * EVERY - 3)
    context = f"{name}, seed {seed} (SIGTERM at step {at_step})"

    at_a_step = {**env, "KIT_TEST_PAUSE_AT_STEP": str(at_step)}
    runs = [run_script(script, at_a_step, lambda line: line.strip() == f"STEP {at_step}", processes)]
    in_a_save = {**env, "KIT_TEST_PAUSE_IN_SAVE": "1"}  # the first save after the resume
    runs.append(run_script(script, in_a_save, lambda line: line.strip() == "SAVING", processes))
    folder, file = case.torn
    (checkpoints / folder).mkdir(parents=True)
    (checkpoints / folder / file).write_bytes(b"torn: the VM was reclaimed here")
    runs.append(run_script(script, env, None, processes))

    for number, (run, following) in enumerate(zip(runs, runs[1:]), 1):
        where = f"{context}, run {number}: {[(r.event, r.step) for r in run.records]} {run.stderr}"
        assert run.returncodes == [143] * processes, where
        assert run.events("preempted"), where
        assert run.committed is not None and following.started.resumed_step == run.committed, where
        assert 0 <= max(run.steps) - run.committed <= EVERY, where  # lost: since the last commit
        assert max(run.steps) == run.committed, where  # the emergency save saved the step it was at
    last = runs[-1]
    assert last.returncodes == [0] * processes, f"{context}: {last.stderr}"
    assert [(r.step, r.checkpoint) for r in last.events("checkpoint_torn")] == [(TORN_STEP, f"{folder}/")], context
    assert last.started.total_steps == STEPS, context
    assert [r.step for r in last.events("run_finished")] == [STEPS], context
    assert last.events("progress") and all(r.total_steps == STEPS for r in last.events("progress")), context
    lost = sum(max(run.steps) - run.committed for run in runs[:-1])  # type: ignore[operator]
    for rank in range(processes):  # every process computed the same steps
        computed = [int(s) for s in (tmp_path / f"steps.log{rank}").read_text().split()]
        assert len(computed) == STEPS + lost, (context, rank)
        assert sorted(set(computed)) == list(range(1, STEPS + 1)), (context, rank)


# What a finished run's process does next: the VM it ran on is reclaimed (SIGTERM), then it prints.
LATE_SIGTERM = """
import os as _os, signal as _signal
_os.kill(_os.getpid(), _signal.SIGTERM)
print("ALIVE AFTER A LATE SIGTERM", flush=True)
"""


def checkpoint_files(checkpoints: Path) -> dict[str, bytes]:
    """Every checkpoint file and its bytes (not the kit's run objects: one more per start)."""
    return {
        str(path.relative_to(checkpoints)): path.read_bytes()
        for path in sorted(checkpoints.rglob("*"))
        if path.is_file() and path.relative_to(checkpoints).parts[0] != "_spotjobs_runs"
    }


@pytest.mark.parametrize("name", VARIANTS)
def test_a_sigterm_at_the_last_planned_step_saves_it_and_the_run_finishes(name: str, tmp_path: Path) -> None:
    script, env, processes = prepare(name, tmp_path, steps=EVERY)
    at_the_end = {**env, "KIT_TEST_PAUSE_AT_STEP": str(EVERY)}
    run = run_script(script, at_the_end, lambda line: line.strip() == f"STEP {EVERY}", processes)
    where = f"{name}: {[(r.event, r.step) for r in run.records]} {run.stderr}"
    assert run.returncodes == [0] * processes, where  # a finished run: Vertex must not restart it
    assert run.events("preempted") and run.committed == EVERY, where
    assert [r.step for r in run.events("run_finished")] == [EVERY], where


# The variants tested for a committed step whose files were deleted. That test starts from a finished
# run (two saves: steps 10 and 20), which is what the finished-run test makes and restarts: for these
# variants one test runs both, the finished run and its restart once (four processes, not five).
SAVED_AGAIN = ["torch-dcp-sync", "orbax", "torch-save", "hf-trainer", "hf-accelerate", "lightning"]


def finish_then_restart(name: str, script: Path, env: dict[str, str], processes: int, steps: int) -> Outcome:
    """Run a fresh script (LATE_SIGTERM appended) to its end, then again: both runs exit 0 after the
    late SIGTERM without a preemption, and the restart finishes at once, saving nothing. Returns the
    first run."""
    checkpoints = Path(env["AIP_CHECKPOINT_DIR"])
    first = run_script(script, env, None, processes)
    finished = checkpoint_files(checkpoints)
    restart = run_script(script, env, None, processes)  # after a SIGKILL past run_finished, say

    for number, run in enumerate((first, restart), 1):
        where = f"{name}, run {number}: {[(r.event, r.step) for r in run.records]} {run.stderr}"
        assert_finished_with_a_late_sigterm(run, steps, processes, where)
    where = f"{name}, the restart: {[(r.event, r.step) for r in restart.records]} {restart.stderr}"
    assert restart.started.resumed_step == steps and restart.steps == [], where  # not one step more
    assert not restart.events("checkpoint_committed") and not restart.events("checkpoint_kept"), where
    assert checkpoint_files(checkpoints) == finished, where  # nothing saved, rewritten or retired
    return first


def assert_finished_with_a_late_sigterm(run: Outcome, steps: int, processes: int, where: str) -> None:
    assert run.returncodes == [0] * processes, where
    assert [r.step for r in run.events("run_finished")] == [steps], where
    assert "ALIVE AFTER A LATE SIGTERM\n" in run.stdout, where  # the kit's handler took it, let it be
    assert not run.events("preempted"), where  # a finished run's SIGTERM is no preemption


@pytest.mark.parametrize("name", [name for name in VARIANTS if name not in SAVED_AGAIN])
def test_a_finished_run_restarted_finishes_at_once_and_a_late_sigterm_exits_0(name: str, tmp_path: Path) -> None:
    """(The SAVED_AGAIN variants run it, with two saves, at the start of the next test.)"""
    script, env, processes = prepare(name, tmp_path, steps=EVERY, after=LATE_SIGTERM)  # its last step is a save
    finish_then_restart(name, script, env, processes, EVERY)


@pytest.mark.parametrize("name", SAVED_AGAIN)
def test_a_finished_run_restarted_finishes_at_once_then_a_committed_step_whose_files_were_deleted_is_saved_again(
    name: str, tmp_path: Path
) -> None:
    """The previous test (a finished run, restarted, with its assertions), then its largest data file
    of step 20 deleted: training reaches step 20 again and saves it again, then a restart finds it
    complete. The runs after the deletion have no late SIGTERM, as before the two tests shared runs."""
    script, env, processes = prepare(name, tmp_path, steps=2 * EVERY, after=LATE_SIGTERM)  # its last step is a save
    checkpoints = Path(env["AIP_CHECKPOINT_DIR"])
    first = finish_then_restart(name, script, env, processes, 2 * EVERY)
    (broken,) = [r.checkpoint for r in first.events("checkpoint_committed") if r.step == 2 * EVERY]
    assert broken is not None
    listed = json.loads((checkpoints / broken / KIT_MARKER).read_text())["files"]
    data = [f for f in sorted(listed) if f.rsplit("/", 1)[-1] not in DEFAULT_COMMIT_MARKERS]
    (checkpoints / broken / max(data, key=listed.__getitem__)).unlink()  # its largest data file, deleted later
    # Resumed from step 10, unless the script keeps one checkpoint (the HF scripts' limit of 1 retired it).
    (previous,) = [r.checkpoint for r in first.events("checkpoint_committed") if r.step == EVERY]
    resumed = EVERY if (checkpoints / str(previous)).exists() else None
    script, env, processes = prepare(name, tmp_path, steps=2 * EVERY)  # from here on, no late SIGTERM
    rerun = run_script(script, env, None, processes)  # trains to step 20 again
    restart = run_script(script, env, None, processes)

    where = f"{name}: {[(r.event, r.step) for r in rerun.records]} {rerun.stderr}"
    assert rerun.returncodes == [0] * processes and rerun.started.resumed_step == resumed, where
    assert [(r.step, r.checkpoint) for r in rerun.events("checkpoint_torn")] == [(2 * EVERY, broken)], where
    saved_again = [r.step for r in rerun.events("checkpoint_committed")]
    assert saved_again == ([] if resumed else [EVERY]) + [2 * EVERY], where
    assert not rerun.events("checkpoint_kept"), where
    where = f"{name}, the restart: {[(r.event, r.step) for r in restart.records]} {restart.stderr}"
    assert restart.started.resumed_step == 2 * EVERY and restart.steps == [], where  # complete again
