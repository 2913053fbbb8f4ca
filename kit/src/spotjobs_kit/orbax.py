"""JAX with Orbax under the kit (`Checkpoints`). Imports jax and orbax-checkpoint only when called.

    from spotjobs_kit.orbax import Checkpoints
    checkpoints = Checkpoints(every=10, total_steps=STEPS)  # after jax.distributed.initialize, if any
    state, start = checkpoints.resume(state)  # restored with state's structure, or (state, 0)
    for step in range(start + 1, STEPS + 1):
        state = train_step(state, step)
        checkpoints.step_done(step, lambda: state)
    checkpoints.finish(STEPS)

What orbax-checkpoint 0.12.8 does (read in its source, seen on disk with a tiny state):
- an async save of step N into a local path (the `/gcs/` FUSE mount included) writes
  `N.orbax-checkpoint-tmp/`, writes `commit_success.txt` into it and renames it to `N/`; into
  a `gs://` path it writes `N/` in place, `commit_success.txt` last. The kit gives Orbax the
  bucket's gs:// URI whenever the checkpoint directory is one (a folder rename through FUSE is
  not atomic), saves by explicit path (`N/`, no CheckpointManager and its `latest_step()`
  guess) and writes its marker into
  `N/` only after `wait_until_finished()` returned (the rename or the commit file done, on every
  process). A step already committed is not saved again (`checkpoint_kept`).
- resuming restores the kit's newest complete checkpoint by path; newer torn ones are reported
  (`checkpoint_torn`).
- `jax.distributed.initialize` installs JAX's preemption notifier as the process's native
  SIGTERM handler: Python's handler (the kit's) is then never called, although
  `signal.getsignal` still names it. `Checkpoints` (created after `initialize`, as Orbax must
  be) puts the kit's handler back and chains JAX's native one, so the kit sees the SIGTERM and
  JAX's notifier still does (`reached_preemption`); `reassert_sigterm(run)` does the same for a
  kit `Run` started before `initialize`.
- a SIGTERM lets the save in flight finish and commit, then saves the step just done, then exits
  143 (between steps, never inside one; not after the last planned step: that run finishes).
  With several processes, the step saved is the one JAX's preemption sync point agrees on
  (`reached_preemption`), so every process saves the same step (not run here: that needs
  several hosts).
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from spotjobs_kit._integration import LoopCheckpoints, retire_old_checkpoints, start_run
from spotjobs_kit.run import Run
from spotjobs_kit.storage import FileStore

# struct sigaction on Linux (glibc and musl): the handler pointer first, then a 1024-bit mask, then the flags.
_SIGACTION_SIZE = 256
_FLAGS_OFFSET = ctypes.sizeof(ctypes.c_void_p) + 128
_SA_SIGINFO = 4


def _native_sigterm_handler() -> tuple[int | None, int] | None:
    """The process's native SIGTERM handler (address, flags), or None where it cannot be read."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        action = ctypes.create_string_buffer(_SIGACTION_SIZE)
        if libc.sigaction(int(signal.SIGTERM), None, action) != 0:
            return None
    except (OSError, AttributeError):  # no libc sigaction (not Linux)
        return None
    return ctypes.c_void_p.from_buffer(action, 0).value, ctypes.c_int.from_buffer(action, _FLAGS_OFFSET).value


def _calling(address: int, flags: int) -> Callable[[int, Any], None]:
    """A Python SIGTERM handler that calls a native one (kept alive by the closure)."""
    if flags & _SA_SIGINFO:
        three = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(address)
        return lambda signum, frame: three(signum, None, None)
    one = ctypes.CFUNCTYPE(None, ctypes.c_int)(address)
    return lambda signum, frame: one(signum)


def reassert_sigterm(run: Run, *, native: tuple[int | None, int] | None = None) -> bool:
    """Put the kit's SIGTERM handler back on top after something replaced it natively (JAX's
    preemption notifier, installed by `jax.distributed.initialize`), chaining the native one.
    `native`: the native handler as read before the kit's was installed (default: now). Returns
    whether a foreign native handler was found and chained."""
    if threading.current_thread() is not threading.main_thread():
        return False
    before = native if native is not None else _native_sigterm_handler()
    python_level = signal.getsignal(signal.SIGTERM)
    if python_level is None:  # installed outside Python: nothing of the kit's to put back
        return False
    signal.signal(signal.SIGTERM, python_level)  # Python's own native trampoline again
    after = _native_sigterm_handler()
    foreign = before is not None and after is not None and before[0] not in (after[0], None, 0, 1)
    if foreign:
        assert before is not None and before[0] is not None
        signal.signal(signal.SIGTERM, _calling(before[0], before[1]))
    run.reassert_sigterm()  # chains whatever replaced the kit's handler, then the kit's on top
    return foreign


class Checkpoints(LoopCheckpoints):
    """Orbax saves of a JAX pytree, every process calling them (as Orbax requires): `resume`,
    `step_done` for the loop (a save every `every` steps; at SIGTERM a save of the step just
    done, then exit 143), `save`, `wait`, `finish`. `async_save` (default): a save returns once
    the arrays are copied off the device; it is committed once Orbax finished writing it, waited
    for before the next save, at SIGTERM and by `finish` (Orbax's own `commit_success.txt` makes
    it complete for the layout rules in between). `keep`: how
    many committed checkpoints to keep (older ones retired after a new commit)."""

    def __init__(
        self,
        *,
        every: int | None = None,
        keep: int | None = None,
        async_save: bool = True,
        total_steps: int | None = None,
        checkpoint_dir: str | None = None,
        run: Run | None = None,
    ) -> None:
        import jax
        import orbax.checkpoint as ocp

        native = _native_sigterm_handler()  # JAX's notifier, if jax.distributed.initialize came first
        super().__init__(start_run(checkpoint_dir, run=run, total_steps=total_steps), every=every)
        reassert_sigterm(self.run, native=native)
        self.keep = keep
        self.async_save = async_save
        handler = ocp.StandardCheckpointHandler()
        self.checkpointer = ocp.AsyncCheckpointer(handler) if async_save else ocp.Checkpointer(handler)
        # A bucket by its gs:// URI even when the FUSE mount is there: Orbax then writes in place
        # with commit_success.txt last, where through the mount it would rename a folder, which
        # Cloud Storage FUSE does object by object (a cut rename leaves a partial `N/`).
        store = self.run.store
        on_gcs = store.uri.startswith("gs://")
        self.directory = store.uri if on_gcs or not isinstance(store, FileStore) else os.path.abspath(store.root)
        self._pending: tuple[int, str, float] | None = None  # (step, name, started)
        self.processes = jax.process_count()
        self.run.announce()

    def resume(self, state: Any) -> tuple[Any, int]:
        """The newest complete checkpoint restored with `state`'s structure, shapes and dtypes,
        and its step; `(state, 0)` when there is none."""
        import jax
        import orbax.checkpoint as ocp

        path = self.run.resume_path()
        if path is None:
            return state, 0
        if not path.startswith("gs://"):
            path = os.path.abspath(path)  # Orbax (tensorstore) takes absolute paths only
        abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, state)
        restored = self.checkpointer.restore(path, args=ocp.args.StandardRestore(abstract))
        return restored, self.run.resume_step() or 0

    def save(self, step: int, state: Any) -> None:
        import orbax.checkpoint as ocp

        self.wait()  # one save at a time; the previous one is committed before the next begins
        name = f"{step}/"
        if self.run.is_committed(name):  # never rewrite a committed step's files
            self.run.commit(name, step)  # checkpoint_kept
            return
        started = time.monotonic()
        self.checkpointer.save(os.path.join(self.directory, str(step)), args=ocp.args.StandardSave(state), force=True)
        self._pending = (step, name, started)
        if not self.async_save or self.run.preempted:
            self.wait()

    def wait(self) -> None:
        """Wait for the save in flight (its rename or commit file), then commit it."""
        if self._pending is None:
            return
        step, name, started = self._pending
        self._pending = None
        if self.async_save:
            self.checkpointer.wait_until_finished()
        self.run.commit(name, step, started=started)  # files fsync'ed, then the kit's marker
        retire_old_checkpoints(self.run, self.keep, ours=lambda c: c.name.rstrip("/").isdigit())

    def preempted_at(self, step: int) -> bool:
        """One process: whether the kit saw SIGTERM. Several: whether JAX's preemption sync point
        is this step (every process saves the same step; one that saw SIGTERM earlier trains on
        until then), which JAX's notifier, chained to the kit's handler, still feeds."""
        if self.processes == 1:
            return self.run.preempted
        from orbax.checkpoint import multihost

        return bool(multihost.reached_preemption(step))

    def finish(self, step: int) -> None:
        self.wait()
        self.checkpointer.close()
        super().finish(step)
