"""accelerate under the kit: `resume()` restores the save counter, and `total_limit=1` always
leaves one complete checkpoint (accelerate's own automatic naming deletes before it writes)."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

from tests.support.frameworks import framework_env, framework_python

SCRIPT = textwrap.dedent(
    """
    import json, os
    import torch
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration
    from spotjobs_kit.hf import AccelerateCheckpoints

    root = os.environ["AIP_CHECKPOINT_DIR"]
    config = ProjectConfiguration(project_dir=root, automatic_checkpoint_naming=True, total_limit=1)
    accelerator = Accelerator(cpu=True, project_config=config)
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    checkpoints = AccelerateCheckpoints(accelerator)
    resumed = checkpoints.resume()
    seen = []
    for step in (resumed + 10, resumed + 20):
        checkpoints.save(step)
        seen.append(sorted(c.name for c in checkpoints.run.refresh()))  # complete ones, after each save
    print(json.dumps({"resumed": resumed, "complete": seen, "iteration": config.iteration}))
    checkpoints.finish(resumed + 20)
    """
)


def test_resume_restores_the_save_counter_and_the_limit_keeps_one_complete(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(SCRIPT)
    env = {**framework_env(tmp_path), "AIP_CHECKPOINT_DIR": str(tmp_path / "ckpt")}
    reports = []
    for _ in range(2):
        done = subprocess.run([framework_python(), str(script)], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        reports.append(json.loads(next(line for line in done.stdout.splitlines() if line.startswith('{"resumed"'))))
    first, second = reports
    assert first["resumed"] == 0 and first["complete"] == [["step-000010/"], ["step-000020/"]]
    assert first["iteration"] == 2
    # The second process resumed from step 20 by path and counts saves on from 2, not from 0.
    assert second["resumed"] == 20 and second["iteration"] == 4
    assert second["complete"] == [["step-000030/"], ["step-000040/"]]
