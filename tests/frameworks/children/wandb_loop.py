"""A training loop that logs to W&B (offline) under `spotjobs_kit.experiment_run()`'s name, as
docs/kit.md ("One experiment across attempts") shows, checkpointing with the kit. It pauses at
WANDB_TEST_PAUSE_STEP until the test's SIGTERM arrives (KIT_TEST_HANDSHAKE), so the preemption
lands there however loaded the machine is."""

import os
import time

import wandb
from spotjobs_kit import Run, experiment_run

STEPS = int(os.environ["WANDB_TEST_STEPS"])
PAUSE_AT = int(os.environ.get("WANDB_TEST_PAUSE_STEP") or 0)

run = Run.start(total_steps=STEPS)
experiment = experiment_run()
tracker = wandb.init(
    project="spotjobs-test",
    id=experiment.name,
    resume="allow",
    mode="offline",
    dir=os.environ["WANDB_TEST_DIR"],
    config={"request_id": experiment.request_id},
)
start = run.resume_step() or 0
for step in range(start + 1, STEPS + 1):
    tracker.log({"loss": 1.0 / step, "attempt": experiment.attempt}, step=step)
    if step % 5 == 0:
        with run.checkpoint(step) as folder:
            with open(os.path.join(folder, "state.pt"), "w") as out:
                out.write(str(step))
    if step == PAUSE_AT:
        print(f"paused at {step}", flush=True)
        while not os.path.exists(os.environ["KIT_TEST_HANDSHAKE"]):
            time.sleep(0.05)
    if run.preempted:
        tracker.finish(exit_code=143)
        run.exit_preempted()
tracker.finish()
run.finish(STEPS)
