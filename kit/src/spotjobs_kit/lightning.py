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

Several processes (`trainer.world_size` > 1: DDP across nodes, each VM reclaimed alone):
- Lightning's SIGTERM handler broadcasts from rank 0 inside the handler (a collective the other
  ranks do not join) and stops only the process that got the signal at the end of its batch; the
  others go on into a collective nobody answers. `fit` keeps the handler's one useful part
  (passing the signal to the processes Lightning started itself) and leaves the stop to the kit:
  the callback all-reduces the flag at the end of every batch, so every rank saves that step
  (`peer_sigterm` when another rank got the signal), stops, and exits 143 or the peer status.
- Resuming: Lightning starts the process group only inside `trainer.fit`, after the path is
  given; `fit` agrees on rank 0's checkpoint where Lightning loads it (`resume_start`, after the
  group is up), and gives the group the kit's collective timeout there.
"""

from __future__ import annotations

import os
import time
from typing import Any

from spotjobs_kit._integration import agree_on_resume, preempted_everywhere, retire_old_checkpoints, start_run
from spotjobs_kit.distributed import process_group, rank0_choice
from spotjobs_kit.run import Run, checkpoint_name
from spotjobs_kit.torch import set_collective_timeout

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
    if trainer.world_size > 1:
        _stop_where_the_ranks_agree(trainer)
        _resume_from_rank_0s_choice(trainer, run)
    try:
        trainer.fit(model, *args, ckpt_path=_resume_file(run), **fit_kwargs)
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


def _resume_file(run: Run) -> str | None:
    path = run.resume_path()
    return os.path.join(path, CHECKPOINT_FILE) if path is not None else None


def _stop_where_the_ranks_agree(trainer: Any) -> None:
    """Lightning's SIGTERM handler, as registered by `trainer.fit`, reduced to passing the signal
    on to the processes Lightning launched: no broadcast inside the handler, no stop of this rank
    alone (the kit's callback stops every rank at one step)."""
    connector = trainer._signal_connector
    passed_on: list[int] = []

    def pass_on_to_launched(signum: int, frame: Any) -> None:
        launcher = trainer.strategy.launcher
        if launcher is not None and not passed_on:
            passed_on.append(signum)
            launcher.kill(signum)

    connector._sigterm_notifier_fn = pass_on_to_launched


def _resume_from_rank_0s_choice(trainer: Any, run: Run) -> None:
    """Where Lightning loads the checkpoint, every rank of the group it has started by then, take
    rank 0's resume point (the path given to `fit` was this process's own) and set the kit's
    collective timeout."""
    connector = trainer._checkpoint_connector
    load = connector.resume_start

    def resume_start(checkpoint_path: Any = None, *args: Any, **kwargs: Any) -> None:
        if process_group() is not None:
            set_collective_timeout()
            agree_on_resume(run)
            checkpoint_path = _resume_file(run)
        load(checkpoint_path, *args, **kwargs)

    connector.resume_start = resume_start


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
            if preempted_everywhere(run):  # with several processes, any rank's SIGTERM stops all
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
            if rank0_choice(run.is_committed(name)):  # one decision: the save is collective
                run.commit(name, step)  # checkpoint_kept
                return
            started = time.monotonic()
            trainer.save_checkpoint(os.path.join(run.local_dir(), name, CHECKPOINT_FILE))  # ends in a barrier
            run.commit(name, step, started=started)
            trainer.strategy.barrier("spotjobs_kit commit")
            retire_old_checkpoints(run, keep, ours=lambda c: c.name.startswith("step-"))

    return SpotjobsCheckpoint()
