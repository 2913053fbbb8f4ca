"""One experiment across attempts, with W&B itself (offline, in the framework venv): a loop that
names its W&B run by `spotjobs_kit.experiment_run()` trains as attempt 1, is preempted (SIGTERM,
exit 143), and is re-queued as attempt 2 (a new job, the same request and checkpoint folder),
which resumes from the kit's checkpoint and finishes. W&B must hold one run: every offline run
folder carries the same run id, the request's name, and attempt 2 resumed it."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest
from spotjobs_kit import experiment_run, parse_kit_line

from tests.support.frameworks import CHILDREN, framework_env, framework_python

pytestmark = pytest.mark.timeout(600)

REQUEST_ID = "pretrain_wandb"
STEPS = 20
PREEMPTED_AT = 10


def attempt(n: int, tmp_path: Path, *, preempt: bool) -> tuple[int, str]:
    env = {
        **framework_env(tmp_path / "home"),
        "SPOTJOBS_REQUEST_ID": REQUEST_ID,
        "SPOTJOBS_ATTEMPT": str(n),
        "CLOUD_ML_JOB_ID": f"{n}000",  # each attempt is a new Vertex job
        "AIP_CHECKPOINT_DIR": str(tmp_path / "checkpoints") + "/",
        "WANDB_TEST_DIR": str(tmp_path),
        "WANDB_TEST_STEPS": str(STEPS),
        "WANDB_TEST_PAUSE_STEP": str(PREEMPTED_AT if preempt else 0),
        "KIT_TEST_HANDSHAKE": str(tmp_path / f"handshake-{n}"),
        "WANDB_SILENT": "true",
    }
    process = subprocess.Popen(
        [framework_python(), str(CHILDREN / "wandb_loop.py")],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    output = []
    for line in process.stdout:
        output.append(line)
        if preempt and line.startswith(f"paused at {PREEMPTED_AT}"):
            process.send_signal(signal.SIGTERM)
            Path(env["KIT_TEST_HANDSHAKE"]).touch()
    return process.wait(timeout=300), "".join(output)


def test_a_preempted_and_requeued_run_is_one_wandb_run(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    first_status, first_output = attempt(1, tmp_path, preempt=True)
    assert first_status == 143, first_output
    second_status, second_output = attempt(2, tmp_path, preempt=False)
    assert second_status == 0, second_output
    [started] = [r for r in map(parse_kit_line, second_output.splitlines()) if r and r.event == "run_started"]
    assert started.fields["resumed_step"] == PREEMPTED_AT  # attempt 2 resumed from attempt 1's save

    name = experiment_run({"SPOTJOBS_REQUEST_ID": REQUEST_ID}).name
    folders = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(folders) == 2, folders  # one folder per process, as W&B keeps them offline
    ids = {re.sub(r"^offline-run-\d{8}_\d{6}-", "", folder.name) for folder in folders}
    assert ids == {name}  # one run: `wandb sync` uploads both into it
