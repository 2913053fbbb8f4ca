"""Hugging Face under the kit: the transformers `Trainer` (`train`) and accelerate
(`AccelerateCheckpoints`). Imports transformers or accelerate only when called.

    from spotjobs_kit import hf
    hf.train(trainer)  # instead of trainer.train()

What transformers 5.24 does, and what `train` changes (read in its source):
- `_save_checkpoint` writes `checkpoint-N/` in place, `trainer_state.json` last, no marker, then
  deletes checkpoints past `save_total_limit`. `train` wraps it: the limit is held back during
  the save, the kit's marker is written once every process is done (accelerate's barrier), and
  only then are older committed checkpoints retired (never the newest complete one). A step
  already committed is not saved again (`checkpoint_kept`). The JIT save (`enable_jit_checkpoint`)
  goes through `_save_checkpoint` too (it fires no `on_save`), so it is committed the same way.
- `resume_from_checkpoint=True` takes the highest-numbered folder unchecked; `train` passes the
  newest complete one by path, and reports newer torn ones (`checkpoint_torn`). With several
  processes, rank 0's choice (each process lists the folder, and views can differ), as is the
  decision to keep a step already committed rather than save it again.
- SIGTERM: the JIT mode's handler (installed in `Trainer.__init__`) replaces the one it finds
  without calling it; `train` puts the kit's back on top with the JIT one chained. On SIGTERM the
  kit's callback asks for a save at the end of the current step and stops training.
- `train()` returns normally after a stop; `train` then exits 143 (unless the SIGTERM came at the
  last step: the training is done, and `run_finished` is printed).
- resumed from the last planned step, transformers trains one step more (it checks `max_steps`
  after a step), saves `checkpoint-N+1/` and retires the final one; `train` stops it in
  `on_train_begin` (everything loaded, nothing trained) and the run finishes at once. The JIT
  mode puts back the handler it found at the end of `train()`; `run.finish` puts the kit's back.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from spotjobs_kit._integration import (
    LoopCheckpoints,
    agree_on_resume,
    preempted_everywhere,
    remove_stale_markers,
    retire_old_checkpoints,
    start_run,
)
from spotjobs_kit.distributed import rank0_choice
from spotjobs_kit.run import Run, checkpoint_name

HF_PREFIX = "checkpoint-"  # transformers' PREFIX_CHECKPOINT_DIR
ITERATION_FILE = "spotjobs_accelerate.json"  # accelerate's save counter, saved with the state


def train(trainer: Any, *, run: Run | None = None, **train_kwargs: Any) -> Any:
    """`trainer.train()` under the kit: resume from the newest complete `checkpoint-N/` (by path),
    commit every save, save and stop at SIGTERM, exit 143 after a preemption, `run_finished`
    after a full run. The checkpoint folder is AIP_CHECKPOINT_DIR when set (as a local path: the
    FUSE mount; it becomes `args.output_dir`), else `args.output_dir`."""
    train_kwargs.pop("resume_from_checkpoint", None)  # the kit decides, by path
    run = start_run(trainer.args.output_dir, run=run)
    if trainer.args.max_steps > 0:
        run.total_steps = trainer.args.max_steps  # known now, even if the run resumes at its end
    trainer.args.output_dir = run.local_dir()
    run.reassert_sigterm()  # HF's JIT mode replaced the kit's handler in Trainer.__init__
    _commit_each_save(trainer, run)
    trainer.add_callback(_callback(run))
    agree_on_resume(run)  # the Trainer's accelerator has started the process group, if any
    resume = run.resume_checkpoint
    path = run.resume_path() if resume is not None and resume.name.startswith(HF_PREFIX) else None
    try:
        result = trainer.train(resume_from_checkpoint=path, **train_kwargs)
    except _TrainedToTheEnd:
        result = _end_untrained(trainer)
    finally:
        run.announce()  # if training never began (on_train_begin announces with total_steps)
    reached_the_end = 0 < trainer.state.max_steps <= trainer.state.global_step
    if run.preempted and not reached_the_end:
        run.exit_preempted()
    run.finish(trainer.state.global_step)
    return result


class _TrainedToTheEnd(Exception):
    """The run resumed from its last planned step: there is no step left to train."""


def _end_untrained(trainer: Any) -> Any:
    """End a `train()` the kit stopped before its first step as transformers ends one (the
    callbacks' `on_train_end`: the JIT mode's handler put back, the reporters closed); the model
    and the trainer's state are the checkpoint's, loaded by transformers."""
    from transformers.trainer_utils import TrainOutput

    trainer.is_in_train = False
    trainer.control = trainer.callback_handler.on_train_end(trainer.args, trainer.state, trainer.control)
    return TrainOutput(trainer.state.global_step, 0.0, {})


def _commit_each_save(trainer: Any, run: Run) -> None:
    save = trainer._save_checkpoint

    def save_then_commit(model: Any, trial: Any) -> None:
        step = trainer.state.global_step
        name = f"{HF_PREFIX}{step}/"
        if rank0_choice(run.is_committed(name)):  # one decision: the save is collective
            run.commit(name, step)  # prints checkpoint_kept; the committed files stay as they are
            return
        started = time.monotonic()
        limit, trainer.args.save_total_limit = trainer.args.save_total_limit, None
        try:
            save(model, trial)
        finally:
            trainer.args.save_total_limit = limit
        trainer.accelerator.wait_for_everyone()  # every process wrote its part
        run.commit(name, step, started=started)
        trainer.accelerator.wait_for_everyone()  # every process sees the marker
        best = os.path.basename(trainer.state.best_model_checkpoint or "") + "/"
        retire_old_checkpoints(run, limit, ours=lambda c: c.name.startswith(HF_PREFIX) and c.name != best)

    trainer._save_checkpoint = save_then_commit


def _callback(run: Run) -> Any:
    from transformers import TrainerCallback

    class SpotjobsCallback(TrainerCallback):  # type: ignore[misc]
        """Announces with the planned steps, reports progress, saves and stops at SIGTERM."""

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            run.total_steps = state.max_steps or None
            run.announce()
            if 0 < state.max_steps <= state.global_step:
                raise _TrainedToTheEnd  # transformers would train one step more before it checks

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            run.progress(state.global_step)
            if preempted_everywhere(run):  # every process saves the same step
                control.should_save = True
                control.should_training_stop = True

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if preempted_everywhere(run):
                control.should_training_stop = True  # a save the SIGTERM landed in: it was the last

    return SpotjobsCallback()


class AccelerateCheckpoints(LoopCheckpoints):
    """accelerate's `save_state`/`load_state` under the kit, for a loop of your own:

        checkpoints = AccelerateCheckpoints(accelerator, every=10, total_steps=100)
        for step in range(checkpoints.resume() + 1, 101):
            ...  # one training step
            checkpoints.step_done(step)  # saves every 10 steps; at SIGTERM saves, exits 143
        checkpoints.finish(100)

    Folders are named by step (`step-000010/`), not by accelerate's save count, and saved by
    explicit path (accelerate's automatic naming would delete old checkpoints *before* writing
    the new one). `total_limit` (from the ProjectConfiguration, or `keep`) retires old
    checkpoints only after the new one is committed. `resume()` loads the newest complete one by
    path and restores the save counter (`project_configuration.iteration`)."""

    def __init__(
        self,
        accelerator: Any,
        *,
        every: int | None = None,
        keep: int | None = None,
        total_steps: int | None = None,
        run: Run | None = None,
    ) -> None:
        super().__init__(start_run(accelerator.project_dir, run=run, total_steps=total_steps), every=every)
        self.accelerator = accelerator
        self.keep = keep if keep is not None else accelerator.project_configuration.total_limit
        self.run.announce()

    def resume(self) -> int:
        """Load the newest complete checkpoint (with several processes, the one rank 0 found);
        its step (0 if there is none)."""
        agree_on_resume(self.run)
        path = self.run.resume_path()
        if path is None:
            return 0
        self.accelerator.load_state(path)
        counter = os.path.join(path, ITERATION_FILE)
        if os.path.exists(counter):  # absent from a checkpoint saved without the kit
            with open(counter) as saved:
                self.accelerator.project_configuration.iteration = json.load(saved)["iteration"]
        return self.run.resume_step() or 0

    def step_done(self, step: int, state: Any = None) -> None:  # type: ignore[override]
        super().step_done(step, lambda: None)

    def save(self, step: int, state: object = None) -> None:
        name = checkpoint_name(step)
        committed = self.run.is_committed(name)
        if not committed:
            remove_stale_markers(self.run, name)  # before any process writes (they wait for rank 0's answer)
        if rank0_choice(committed):
            self.run.commit(name, step)  # checkpoint_kept
            return
        started = time.monotonic()
        folder = os.path.join(self.run.local_dir(), name)
        config = self.accelerator.project_configuration
        automatic, config.automatic_checkpoint_naming = config.automatic_checkpoint_naming, False
        try:
            self.accelerator.save_state(folder)
        finally:
            config.automatic_checkpoint_naming = automatic
        if self.accelerator.is_main_process:
            with open(os.path.join(folder, ITERATION_FILE), "w") as counter:
                json.dump({"iteration": config.iteration}, counter)  # save_state counted this save
        self.accelerator.wait_for_everyone()
        self.run.commit(name, step, started=started)
        self.accelerator.wait_for_everyone()
        retire_old_checkpoints(self.run, self.keep, ours=lambda c: c.name.startswith("step-"))
