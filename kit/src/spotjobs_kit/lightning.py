"""PyTorch Lightning under the kit (`fit`). Imports pytorch_lightning (or lightning) only when called.

    from spotjobs_kit import lightning as kit_lightning
    kit_lightning.fit(trainer, model, train_dataloaders=loader, every=50)  # instead of trainer.fit

What Lightning 2.6 does, and what `fit` changes (read in its source):
- `Callback.on_save_checkpoint` runs before the file is written, so it cannot mark completion.
  The kit's callback saves itself, every `every` steps and at SIGTERM, at the end of a training
  batch, through `trainer.save_checkpoint` (the strategy's save, then its barrier: every process
  is done when it returns) into `step-000050/model.ckpt`, then writes the marker.
- `ckpt_path="last"` takes the newest `last*.ckpt` by time, unchecked; `fit` passes the newest
  complete checkpoint by path, and reports newer torn ones (`checkpoint_torn`).
- SIGTERM: Lightning's handler chains the one it finds (the kit's), and at the end of the batch
  raises `SIGTERMException`, a `SystemExit` with no code: the process would exit 0. The kit's
  save runs first (its callback's `on_train_batch_end`, or `on_exception` for a SIGTERM that came
  after that hook: it runs before Lightning's teardown), then `fit` exits 143; at the last
  planned step (Lightning raises at the end of that epoch) the run finishes instead.
"""

from __future__ import annotations

import os
import time
from typing import Any

from spotjobs_kit._integration import retire_old_checkpoints, start_run
from spotjobs_kit.run import Run, checkpoint_name

CHECKPOINT_FILE = "model.ckpt"


def fit(
    trainer: Any,
    model: Any,
    *args: Any,
    every: int | None = None,
    keep: int | None = None,
    run: Run | None = None,
    **fit_kwargs: Any,
) -> None:
    """`trainer.fit(model, ...)` under the kit: resume from the newest complete checkpoint (by
    path), save and commit every `every` steps and at SIGTERM, keep the newest `keep` committed
    ones, exit 143 after a preemption, `run_finished` after a full run. The checkpoint folder is
    AIP_CHECKPOINT_DIR when set (as a local path: the FUSE mount), else the trainer's
    `default_root_dir`."""
    fit_kwargs.pop("ckpt_path", None)  # the kit decides, by path
    run = start_run(trainer.default_root_dir, run=run)
    if trainer.max_steps and trainer.max_steps > 0:
        run.total_steps = trainer.max_steps  # known now, even if the run resumes at its end
    callback = _callback(run, every, keep)
    trainer.callbacks.append(callback)
    path = run.resume_path()
    ckpt_path = os.path.join(path, CHECKPOINT_FILE) if path is not None else None
    try:
        trainer.fit(model, *args, ckpt_path=ckpt_path, **fit_kwargs)
    except SystemExit:
        if not run.preempted:
            raise
        # Lightning's SIGTERMException (it would exit 0): the kit's callback saved the step; the
        # run exits 143 below unless that was the last planned step.
    finally:
        run.announce()  # if training never began
    reached_the_end = run.total_steps is not None and trainer.global_step >= run.total_steps
    if run.preempted and callback.stopped and not reached_the_end:
        run.exit_preempted()
    run.finish(trainer.global_step)


def _callback(run: Run, every: int | None, keep: int | None) -> Any:
    try:
        from pytorch_lightning import Callback
    except ImportError:  # the `lightning` distribution
        from lightning.pytorch import Callback

    class SpotjobsCheckpoint(Callback):  # type: ignore[misc]
        """Saves every `every` steps and at SIGTERM, then commits; reports progress."""

        def __init__(self) -> None:
            self.saved_step: int | None = None
            self.stopped = False

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            planned = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
            if planned is None:
                planned = int(trainer.estimated_stepping_batches)
            run.total_steps = planned
            run.announce()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            step = trainer.global_step
            run.progress(step)
            if run.preempted:
                self.save(trainer, step)
                self.stopped = True
                trainer.should_stop = True  # for a SIGTERM Lightning's handler did not see
            elif every and step % every == 0:
                self.save(trainer, step)

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            # A SIGTERM after this callback's on_train_batch_end: Lightning raises at the end of
            # that batch; this hook runs before its teardown, so the step can still be saved.
            if run.preempted and isinstance(exception, SystemExit):
                self.save(trainer, trainer.global_step)
                self.stopped = True

        def save(self, trainer: Any, step: int) -> None:
            if step == self.saved_step:
                return
            self.saved_step = step
            name = checkpoint_name(step)
            if run.is_committed(name):
                run.commit(name, step)  # checkpoint_kept
                return
            started = time.monotonic()
            trainer.save_checkpoint(os.path.join(run.local_dir(), name, CHECKPOINT_FILE))  # ends in a barrier
            run.commit(name, step, started=started)
            trainer.strategy.barrier("spotjobs_kit commit")
            retire_old_checkpoints(run, keep, ours=lambda c: c.name.startswith("step-"))

    return SpotjobsCheckpoint()
