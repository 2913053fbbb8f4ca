"""Plain PyTorch under the kit: `torch.save` (`Checkpoints`) and torch.distributed.checkpoint
(`DistributedCheckpoints`, sync or async). Imports torch only when called.

    from spotjobs_kit.torch import Checkpoints
    checkpoints = Checkpoints(every=10, total_steps=100)
    state = checkpoints.resume()  # what you saved, or None
    ...
    checkpoints.step_done(step, lambda: {"model": model.state_dict(), "step": step})

What torch 2.13 does (read in its source): `torch.save` writes one file in place, no marker;
`Checkpoints` writes it into `step-000010/state.pt`, fsyncs it, then the kit's marker.
DCP's `save` writes every rank's files, then the coordinator writes `.metadata.tmp`, fsyncs it
and renames it to `.metadata`: `.metadata` present means complete (one of the layout's commit
markers). `async_save` returns a Future (an `AsyncSaveResponse` with a stager): the kit marks
the checkpoint once it has completed, and waits for it before the next save and at SIGTERM.
"""

from __future__ import annotations

import os
import time
from typing import Any

from spotjobs_kit._integration import (
    LoopCheckpoints,
    agree_on_resume,
    remove_stale_markers,
    retire_old_checkpoints,
    start_run,
)
from spotjobs_kit.distributed import collective_timeout_seconds, rank0_choice
from spotjobs_kit.run import Run, checkpoint_name
from spotjobs_kit.storage import KitError

STATE_FILE = "state.pt"


def init_process_group(backend: str | None = None, *, collective_timeout: float | None = None, **kwargs: Any) -> None:
    """`torch.distributed.init_process_group(backend, **kwargs)`, then a collective timeout that
    fits Spot: `collective_timeout` seconds, else SPOTJOBS_KIT_COLLECTIVE_TIMEOUT_SECONDS, else
    120 (torch's: 10 min for NCCL, 30 for gloo). The rendezvous keeps torch's timeout (or
    `timeout=`): a job's replicas may start minutes apart. A process whose collective then times
    out, or finds its peer gone, leaves with the peer exit status (`spotjobs_kit.distributed`)."""
    import torch.distributed as dist

    dist.init_process_group(backend, **kwargs)
    set_collective_timeout(collective_timeout)


def set_collective_timeout(seconds: float | None = None, group: Any = None) -> None:
    """Give the process group's collectives (the default group's, or `group`'s) a timeout that fits
    Spot: `seconds`, else SPOTJOBS_KIT_COLLECTIVE_TIMEOUT_SECONDS, else 120. For a group the
    training code or its framework (Accelerate, Lightning) started; the rendezvous is over."""
    import datetime

    import torch.distributed as dist

    if seconds is None:
        seconds = collective_timeout_seconds(os.environ)
    setter = getattr(dist.distributed_c10d, "_set_pg_timeout", None)
    if setter is None:  # a torch without it (private API, present in 2.13)
        raise KitError(
            "this torch cannot change a process group's timeout: pass timeout= to init_process_group instead"
        )
    setter(datetime.timedelta(seconds=seconds), group)


class Checkpoints(LoopCheckpoints):
    """`torch.save` checkpoints: `save(step, obj)`, `resume()`, and `step_done` for the loop
    (a save every `every` steps; at SIGTERM a save of the step just done, then exit 143).
    `keep`: how many committed checkpoints to keep (older ones retired after a new commit)."""

    def __init__(
        self,
        *,
        every: int | None = None,
        keep: int | None = None,
        total_steps: int | None = None,
        checkpoint_dir: str | None = None,
        run: Run | None = None,
    ) -> None:
        super().__init__(start_run(checkpoint_dir, run=run, total_steps=total_steps), every=every)
        self.keep = keep
        self.run.announce()

    def resume(self, **load_kwargs: Any) -> Any:
        """The object saved in the newest complete checkpoint (`torch.load`), or None."""
        import torch

        path = self.run.resume_path(local=True)
        if path is None:
            return None
        return torch.load(os.path.join(path, STATE_FILE), **load_kwargs)

    def save(self, step: int, state: object) -> None:
        import torch

        with self.run.checkpoint(step) as folder:  # fsync'ed, then the marker; a committed step is kept
            torch.save(state, os.path.join(folder, STATE_FILE))
        retire_old_checkpoints(self.run, self.keep, ours=lambda c: c.name.startswith("step-"))


class DistributedCheckpoints(LoopCheckpoints):
    """torch.distributed.checkpoint saves of a state dict, every process calling them (as DCP
    requires): `save(step, state_dict)`, `resume(state_dict)` (loads in place, returns the step),
    `step_done` for the loop. With `async_save`, `save` returns while the files are written;
    the checkpoint is marked committed when DCP's future completes, and `wait()` (called before
    the next save, at SIGTERM and by `finish`) waits for that."""

    def __init__(
        self,
        *,
        every: int | None = None,
        keep: int | None = None,
        async_save: bool = False,
        total_steps: int | None = None,
        checkpoint_dir: str | None = None,
        run: Run | None = None,
    ) -> None:
        super().__init__(start_run(checkpoint_dir, run=run, total_steps=total_steps), every=every)
        self.keep = keep
        self.async_save = async_save
        self._pending: tuple[Any, int, str, float] | None = None  # (future, step, name, started)
        self._group = self._async_group() if async_save else None
        self.run.announce()

    @staticmethod
    def _async_group() -> Any:
        """A process group of its own for async saves (as DCP's docs advise): their collectives
        run in a thread while the loop's (and the kit's SIGTERM agreement) use the default one."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        return dist.new_group(backend="gloo")  # every process builds its checkpoints together

    def resume(self, state_dict: dict[str, Any]) -> int:
        """Load the newest complete checkpoint into `state_dict` (in place); its step, else 0.
        With several processes, the checkpoint rank 0 found, on every process."""
        import torch.distributed.checkpoint as dcp

        agree_on_resume(self.run)
        path = self.run.resume_path()
        if path is None:
            return 0
        dcp.load(state_dict, checkpoint_id=path)
        return self.run.resume_step() or 0

    def save(self, step: int, state: Any) -> None:
        import torch.distributed.checkpoint as dcp

        self.wait()  # one save at a time; the previous one is committed before the next begins
        name = checkpoint_name(step)
        committed = self.run.is_committed(name)
        if not committed:
            remove_stale_markers(self.run, name)  # before any rank writes (they wait for rank 0's answer)
        if rank0_choice(committed):  # DCP would rewrite the committed files in place
            self.run.commit(name, step)  # checkpoint_kept
            return
        folder = os.path.join(self.run.local_dir(), name)
        started = time.monotonic()
        if not self.async_save:
            dcp.save(state, checkpoint_id=folder)  # returns once .metadata is in place
            self._commit(step, name, started)
            return
        future = dcp.async_save(state, checkpoint_id=folder, process_group=self._group)
        self._pending = (getattr(future, "upload_completion", future), step, name, started)
        if self.run.preempted:
            self.wait()  # the emergency save: committed before the process leaves

    def wait(self) -> None:
        """Wait for an async save in flight, then commit it."""
        if self._pending is None:
            return
        future, step, name, started = self._pending
        self._pending = None
        future.result()
        self._commit(step, name, started)

    def finish(self, step: int) -> None:
        self.wait()
        super().finish(step)

    def _commit(self, step: int, name: str, started: float) -> None:
        # DCP's .metadata already makes it complete (every rank wrote before it was renamed in);
        # the kit's marker lists the files and the line reports it.
        self.run.commit(name, step, started=started)
        retire_old_checkpoints(self.run, self.keep, ours=lambda c: c.name.startswith("step-"))
