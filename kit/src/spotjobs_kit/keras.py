"""Keras 3 under the kit (`fit`). Imports keras only when called (and so its backend).

    from spotjobs_kit import keras as kit_keras
    kit_keras.fit(model, x, y, epochs=EPOCHS, every=10)  # instead of model.fit(...)

What Keras 3.15 does, and what `fit` changes (read in its source, seen on disk):
- `BackupAndRestore` overwrites `latest.weights.h5`, then `training_metadata.json` (the epoch)
  in place, with no marker: a preemption between the two resumes the new weights at the old
  epoch, and one inside the weights file leaves it torn. `ModelCheckpoint` writes a file per
  save, and nothing resumes from it. The kit's callback saves `model.save_weights` (the model's
  and the optimizer's variables) into `step-000010/model.weights.h5` with the kit's marker
  last, every `every` epochs and at SIGTERM; a step already committed is not saved again.
- Keras resumes per epoch (`initial_epoch`): the step of a checkpoint is the number of epochs
  done. `fit` loads the kit's newest complete checkpoint by path (the optimizer built first, as
  BackupAndRestore does) and starts at its epoch; newer torn ones are reported
  (`checkpoint_torn`). A SIGTERM inside an epoch saves at the end of the current batch and
  stops; that epoch runs again from its start on resume, with the weights as saved (as with
  BackupAndRestore's batch saves). Short epochs (`steps_per_epoch`) make resuming finer.
- Keras installs no SIGTERM handler: the kit's sees the signal; `fit` exits 143 after a
  preemption (`model.fit` would return normally once training stopped), unless the SIGTERM came
  at the end of the last epoch, saved: that run finishes.
"""

from __future__ import annotations

import os
from typing import Any

from spotjobs_kit._integration import retire_old_checkpoints, start_run
from spotjobs_kit.run import Run

WEIGHTS_FILE = "model.weights.h5"


def fit(
    model: Any,
    *args: Any,
    epochs: int = 1,
    every: int | None = None,
    keep: int | None = None,
    checkpoint_dir: str | None = None,
    run: Run | None = None,
    **fit_kwargs: Any,
) -> Any:
    """`model.fit(*args, epochs=epochs, ...)` under the kit: resume from the newest complete
    checkpoint (by path), save and commit every `every` epochs and at SIGTERM, keep the newest
    `keep` committed ones, exit 143 after a preemption, `run_finished` after a full run. The
    checkpoint folder is AIP_CHECKPOINT_DIR when set (the FUSE mount on Vertex), else
    `checkpoint_dir`. The model must be built and compiled."""
    fit_kwargs.pop("initial_epoch", None)  # the kit decides, from the checkpoint it resumes
    run = start_run(checkpoint_dir, run=run, total_steps=epochs)
    path = run.resume_path(local=True)
    if path is not None:
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)  # its variables are in the file too
        model.load_weights(os.path.join(path, WEIGHTS_FILE))
    callback = _callback(run, every, keep)
    callbacks = [*(fit_kwargs.pop("callbacks", None) or []), callback]
    try:
        history = model.fit(
            *args, epochs=epochs, initial_epoch=run.resume_step() or 0, callbacks=callbacks, **fit_kwargs
        )
    finally:
        run.announce()  # if training never began
    if run.preempted and (run.step or 0) < epochs:  # the last epoch saved at SIGTERM: the run is done
        run.exit_preempted()
    run.finish(epochs)
    return history


def _callback(run: Run, every: int | None, keep: int | None) -> Any:
    import keras

    class SpotjobsCheckpoint(keras.callbacks.Callback):  # type: ignore[misc]
        """Saves every `every` epochs and at SIGTERM, then commits; reports progress."""

        def __init__(self) -> None:
            super().__init__()
            self.epoch = 0  # the epoch in progress (0-based): the epochs done before it
            self.saved_step: int | None = None

        def on_train_begin(self, logs: Any = None) -> None:
            run.announce()

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            last_batch = self.params.get("steps") is not None and batch + 1 >= self.params["steps"]
            if run.preempted and not last_batch:  # inside the epoch: save what there is, stop
                self.save(self.epoch)
                self.model.stop_training = True

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if self.model.stop_training and self.saved_step == epoch:
                return  # stopped inside this epoch: saved as not done
            done = epoch + 1
            run.progress(done)
            if run.preempted or (every and done % every == 0):
                self.save(done)
            if run.preempted:  # before, or during, that save: it was the last
                self.model.stop_training = True

        def save(self, step: int) -> None:
            if step == self.saved_step:
                return
            self.saved_step = step
            with run.checkpoint(step) as folder:  # a committed step: a scratch folder, kept as it was
                self.model.save_weights(os.path.join(folder, WEIGHTS_FILE))
            retire_old_checkpoints(run, keep, ours=lambda c: c.name.startswith("step-"))

    return SpotjobsCheckpoint()
