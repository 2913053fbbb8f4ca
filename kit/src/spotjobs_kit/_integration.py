"""What the framework integrations share: starting their run, and retiring old checkpoints only
once newer ones are committed (standard library only)."""

from __future__ import annotations

import os
from collections.abc import Callable

from spotjobs_kit.distributed import agree_on_stop, rank0_choice
from spotjobs_kit.layout import Checkpoint, judge_folder
from spotjobs_kit.run import Run


def start_run(fallback_dir: str | None, *, run: Run | None = None, total_steps: int | None = None) -> Run:
    """The run an integration works in: `run` if given, else one over AIP_CHECKPOINT_DIR (the
    folder the framework is then told to write to), else over the framework's own folder.
    `run_started` waits for the integration's `announce()`, once it knows the total steps."""
    if run is not None:
        return run
    checkpoint_dir = os.environ.get("AIP_CHECKPOINT_DIR") or fallback_dir
    return Run.start(checkpoint_dir, announce=False, total_steps=total_steps)


def retire_old_checkpoints(run: Run, keep: int | None, *, ours: Callable[[Checkpoint], bool]) -> list[str]:
    """Delete the complete checkpoints `ours` selects beyond the newest `keep` (primary only; marker
    first). Torn ones are left to the pruner; the newest complete one is never deleted, so a limit
    of 1 never leaves nothing to resume from. Returns the names deleted."""
    if not keep or keep <= 0 or not run.identity.primary:
        return []
    complete = [c for c in run.refresh() if ours(c)]  # newest first
    retired = complete[max(keep, 1) :]
    for checkpoint in retired:
        run.store.remove_folder(checkpoint.name, run.markers)
    return [c.name for c in retired]


def preempted_everywhere(run: Run) -> bool:
    """Whether any process of a torch.distributed job got SIGTERM: every process must save the
    same step (a collective save on some processes only would hang). The flag is all-reduced
    when a process group is up (`spotjobs_kit.distributed.agree_on_stop`: torch already imported
    by the training code, nothing is imported here); else this process's own."""
    return agree_on_stop(run)


def agree_on_resume(run: Run) -> None:
    """Make rank 0's resume point every process's (each listed the folder itself, and two views
    can differ): a no-op without a process group of two or more."""
    mine = run.resume_checkpoint.name if run.resume_checkpoint is not None else None
    chosen = rank0_choice(mine)
    if chosen != mine:  # judged here as rank 0 judged it, or (a view that lags) not yet complete
        run.announce(judge_folder(run.store, "", chosen, run.markers) if chosen is not None else None)


def remove_stale_markers(run: Run, name: str) -> None:
    """`Run.remove_stale_markers`, before a framework saves a step again: the frameworks rewrite
    files in place and DCP replaces `.metadata` only at its end."""
    run.remove_stale_markers(name)


class LoopCheckpoints:
    """A training loop's side of an integration: a save every `every` steps, and at SIGTERM a
    save of the step just finished, then exit 143 (between steps, never inside one; not after
    the last planned step: that run is done). Subclasses say how a framework saves (`save`)."""

    def __init__(self, run: Run, *, every: int | None = None) -> None:
        self.run = run
        self.every = every

    def save(self, step: int, state: object) -> None:
        raise NotImplementedError

    def step_done(self, step: int, state: Callable[[], object]) -> None:
        """Call after each step with a function that returns what to save (built only when saved)."""
        self.run.progress(step)
        if self.preempted_at(step):
            self.save(step, state())
            if self.run.total_steps is None or step < self.run.total_steps:
                self.run.exit_preempted()  # else the training is done: `finish` comes next
        elif self.every and step % self.every == 0:
            self.save(step, state())

    def preempted_at(self, step: int) -> bool:
        """Whether to save at `step` and stop: a SIGTERM, on any process (`preempted_everywhere`)."""
        return preempted_everywhere(self.run)

    def finish(self, step: int) -> None:
        """Training done: `run_finished` (a SIGTERM after this no longer turns the exit into 143)."""
        self.run.finish(step)
