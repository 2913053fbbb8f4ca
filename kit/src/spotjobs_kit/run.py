"""One run of a training script under spotjobs: where to resume, how to commit, what to report.
One module because these share one run's state (where it resumed, what it committed, whether
SIGTERM came) and each decision reads the others' (a preempted run's exit, a kept re-save).

    run = Run.start()                      # AIP_CHECKPOINT_DIR; prints run_started
    state = load(run.resume_path(local=True)) if run.resume_step() is not None else fresh()
    run.on_preemption(lambda: save_now())  # or check `run.preempted` in the loop
    with run.checkpoint(step) as folder:   # step-000400/; COMMITTED written last, on success
        save(state, folder)

Identity, from what spotjobs and Vertex put in the worker's environment:
- `SPOTJOBS_REQUEST_ID`, `SPOTJOBS_ATTEMPT`: set by spotjobs' submit on every worker pool;
- `SPOTJOBS_KIT_KEY`: the attempt's own key, set by submit too; the kit signs its lines with it
  (spotjobs counts a line as evidence only if it is signed; unsigned, it only prompts a Vertex read);
- `CLOUD_ML_JOB_ID`, `CLUSTER_SPEC` (`task.type` `workerpool0`..`workerpool3`, `task.index`;
  the primary replica is workerpool0 index 0), else `TF_CONFIG` (`chief`/`master` index 0);
- `RANK` (torchrun, accelerate, Lightning): a process other than rank 0 of its replica is no
  primary either;
- the restart index (`run`): Vertex restarts a preempted job's workers with the same
  environment, so the kit counts its own starts. The primary replica writes one small object per
  start, `<checkpoint dir>/_spotjobs_runs/<attempt-N | job-ID | local>-run-NNNN.json`, created
  only if absent (so two starts never take the same index). The pruner never touches that
  folder: its name carries no step number.

Only the primary replica writes markers and run objects and prints lines; other replicas resume
from the same checkpoint and save into the same folders (synchronise their saves with the
primary's before it leaves `checkpoint()`).

Resuming: `resume_checkpoint` is the newest checkpoint the layout rules judge complete; every
incomplete checkpoint newer than it (a save a preemption tore) is skipped and reported in a
`checkpoint_torn` line after `run_started`. Integrations hand `resume_path()` to the framework
explicitly, never the framework's own "latest" guess.

Committing never un-commits: `checkpoint(step)` for a step already complete is a no-op that says
so (`checkpoint_kept`; the block gets a scratch folder, thrown away), because rewriting the files
of the only resume point in place would tear it. Complete is judged by the rules resuming uses
(`layout.judge_folder`): a step whose marker lists files deleted since is saved again, its old
markers removed first (so a re-save cut short stays torn). A folder a framework wrote itself (HF's
`checkpoint-20/`) is committed with `commit(name, step)` once the framework returned (and, across
processes, after the framework's barrier): its files are fsync'ed, then the marker is written.

SIGTERM (what Vertex sends a Spot VM's containers before reclaiming it, with a grace period of
about 30 s): the handler is installed first thing in `Run.start()`. It prints `preempted`
(`step`: `run.step`, which `checkpoint()` advances and a loop may set; `seconds_since_checkpoint`:
since this run's last commit, or since it started), sets `run.preempted`, then calls the handler
that was there before (a user's or a framework's: chained, not replaced). A framework that
replaces the kit's handler later (HF's `enable_jit_checkpoint`) is chained too once
`reassert_sigterm()` puts the kit's back on top. With `on_preemption(save)`, it then calls
`save()` (which normally uses `run.checkpoint`) and exits with status 143 (128 + SIGTERM). The
callback runs in the main thread wherever the signal interrupted it; if a step must not be
interrupted, check `run.preempted` between steps instead. A SIGTERM that lands during a
`checkpoint()` block lets that checkpoint commit, then exits without calling the callback again.

Whatever the training code or its framework does after a SIGTERM (Lightning 2.6 raises a
`SystemExit` with no code, a Trainer's `train()` returns), the process exits 143 unless
`finish()` was called. The kit and its integrations exit through `exit_preempted()` (a
`SystemExit(143)`, so every exit hook runs); for any other way out, an exit hook (atexit,
registered by `start()`) ends a preempted, unfinished process with status 143 after flushing
stdout and stderr. That last resort skips the exit hooks registered before `start()` (they would
run after it). A SIGTERM after `finish()` (the VM reclaimed while the script writes its model) is
no preemption: no line, no save, no 143; only the handler from before `start()` still runs, and
the process goes on to its end (`finish()` puts the kit's handler back on top first).

In a torch.distributed job, a process stopped by a peer (another process got SIGTERM and all
agreed on the step to save, or a peer is gone) says so in `preempted` (`reason`) and exits with
the peer exit status instead, 134 by default (`spotjobs_kit.distributed`).

Progress: `progress(step)` prints a `progress` line (step, total_steps, steps_per_second) at most
once a minute; one is printed at every commit too. `run_started` carries `total_steps` when known
(`Run.start(total_steps=...)`, or set `run.total_steps` before `announce()`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TextIO

from spotjobs_kit.distributed import (
    PEER_EXIT_STATUS,
    PEER_LOST,
    PEER_SIGTERM,
    is_lost_peer_error,
    peer_exit_status,
    process_group,
)
from spotjobs_kit.layout import (
    COMMIT_MARKERS_ENV,
    DEFAULT_COMMIT_MARKERS,
    KIT_MARKER,
    Checkpoint,
    Kind,
    discover,
    judge_folder,
    newest_complete,
    sorted_checkpoints,
)
from spotjobs_kit.lines import (
    CHECKPOINT_COMMITTED,
    CHECKPOINT_KEPT,
    CHECKPOINT_TORN,
    KEY_ENV,
    PREEMPTED,
    PROGRESS,
    RUN_FAILED,
    RUN_FINISHED,
    RUN_STARTED,
    format_line,
    write_line,
)
from spotjobs_kit.storage import FileStore, KitError, open_store

RUNS_FOLDER = "_spotjobs_runs/"
SIGTERM_EXIT_STATUS = 128 + int(signal.SIGTERM)
PROGRESS_INTERVAL_SECONDS = 60.0
ALREADY_COMMITTED = "already committed"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_UNSET = object()


def checkpoint_name(step: int) -> str:
    """The folder of the checkpoint of `step`: `step-000400/` (a step the layout rules read)."""
    return f"step-{step:06d}/"


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Identity:
    request_id: str | None = None
    attempt: int | None = None
    job_id: str | None = None
    task_type: str | None = None
    task_index: int | None = None
    process_rank: int | None = None  # RANK, set by torchrun and the launchers built on it
    kit_key: str | None = field(default=None, repr=False)  # signs the lines; never printed

    @property
    def primary(self) -> bool:
        return (
            self.task_type in (None, "workerpool0", "chief", "master")
            and self.task_index in (None, 0)
            and self.process_rank in (None, 0)
        )

    @property
    def run_key(self) -> str:
        """Names this job's run objects: starts of the same attempt's job share it."""
        if self.attempt is not None:
            return f"attempt-{self.attempt}"
        if self.job_id:
            return "job-" + _UNSAFE.sub("_", self.job_id)
        return "local"

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Identity:
        task: Any = {}
        for variable in ("CLUSTER_SPEC", "TF_CONFIG"):
            try:
                spec = json.loads(environ.get(variable) or "{}")
            except ValueError:
                continue
            if isinstance(spec, dict) and isinstance(spec.get("task"), dict):
                task = spec["task"]
                break
        attempt = (environ.get("SPOTJOBS_ATTEMPT") or "").strip()
        rank = (environ.get("RANK") or "").strip()
        index = task.get("index")
        return cls(
            request_id=environ.get("SPOTJOBS_REQUEST_ID") or None,
            attempt=int(attempt) if attempt.isdigit() else None,
            job_id=environ.get("CLOUD_ML_JOB_ID") or None,
            task_type=str(task["type"]) if task.get("type") is not None else None,
            task_index=int(index) if isinstance(index, int) or str(index).isdigit() else None,
            process_rank=int(rank) if rank.isdigit() else None,
            kit_key=environ.get(KEY_ENV) or None,
        )


def _markers_from_env(environ: Mapping[str, str]) -> tuple[str, ...]:
    # The same variable (and format) the pruner's settings read: one list for both when set.
    raw = environ.get(COMMIT_MARKERS_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_COMMIT_MARKERS
    return tuple(m.strip() for m in raw.split(",") if m.strip())


class Run:
    """See the module docstring. Build one with `Run.start()`."""

    def __init__(
        self,
        store: Any,
        *,
        identity: Identity,
        markers: Sequence[str] = DEFAULT_COMMIT_MARKERS,
        stream: TextIO | None = None,
    ) -> None:
        self.store = store
        self.identity = identity
        self.markers = tuple(markers)
        self.stream = stream
        self.restart: int | None = None
        self.resume_checkpoint: Checkpoint | None = None
        self.step: int | None = None
        self.preempted_at: float | None = None  # time.monotonic() of the first SIGTERM (or a peer's stop)
        self.sigterm_received = False  # this process got SIGTERM itself
        self.stopped_by_peer: str | None = None  # the reason, when a peer of a distributed job stopped it
        self.peer_exit_status = PEER_EXIT_STATUS  # Run.start() reads the environment's
        self.last_committed: tuple[int, str] | None = None
        self.total_steps: int | None = None
        self.torn: list[Checkpoint] = []  # incomplete checkpoints newer than the resume point
        self.finished = False
        self._started = time.monotonic()
        self._last_commit: float | None = None
        self._checkpoints: list[Checkpoint] = []
        self._announced = False
        self._callback: Callable[[], Any] | None = None
        self._exit_code: int | None = SIGTERM_EXIT_STATUS
        self._saving = 0
        self._previous_handler: Any = _UNSET
        self._chained: list[Callable[..., Any]] = []  # handlers the kit's calls after its own work
        self._in_handler = False
        self._exit_hook_installed = False
        self._exiting = False  # exit_preempted() raised: the exit status is 143 already
        self._progress_mark: tuple[float, int | None] = (self._started, None)  # (time, step) of the last line

    # Starting.

    @classmethod
    def start(
        cls,
        checkpoint_dir: str | None = None,
        *,
        announce: bool = True,
        handle_sigterm: bool = True,
        markers: Sequence[str] | None = None,
        environ: Mapping[str, str] | None = None,
        fuse_root: str | None = None,
        gcs_client: Any = None,
        store: Any = None,
        stream: TextIO | None = None,
        total_steps: int | None = None,
    ) -> Run:
        """Install the SIGTERM hook (and the exit hook), find the newest complete checkpoint,
        count this start, and (with `announce`) print `run_started`, then `checkpoint_torn` for
        each torn checkpoint skipped. `checkpoint_dir` defaults to AIP_CHECKPOINT_DIR;
        `gcs_client`: a google.cloud.storage.Client to use if the store is GCS through the API."""
        environ = os.environ if environ is None else environ
        run = cls(
            None,
            identity=Identity.from_env(environ),
            markers=tuple(markers) if markers is not None else _markers_from_env(environ),
            stream=stream,
        )
        run.total_steps = total_steps
        run.peer_exit_status = peer_exit_status(environ)
        if handle_sigterm:
            run.install_sigterm_handler()  # first: a reclaim can come while we list
            run.install_exit_hook()
        run._report_failures()
        checkpoint_dir = checkpoint_dir or environ.get("AIP_CHECKPOINT_DIR")
        if store is None:
            if not checkpoint_dir:
                raise KitError("no checkpoint directory: AIP_CHECKPOINT_DIR is not set")
            store = open_store(checkpoint_dir, fuse_root=fuse_root, gcs_client=gcs_client)
        run.store = store
        run.refresh()
        run.resume_checkpoint = newest_complete(run._checkpoints)
        run.step = run.resume_step()
        run._progress_mark = (run._started, run.step)
        if run.identity.primary:
            run.restart = run._record_start()
        if announce:
            run.announce()
        return run

    def refresh(self) -> list[Checkpoint]:
        """List the checkpoint directory again; returns the complete checkpoints, newest first."""
        found = discover(self.store, "", self.markers)
        self._checkpoints = list(found.checkpoints)
        return self.complete_checkpoints()

    def _record_start(self) -> int:
        key = self.identity.run_key
        pattern = re.compile(re.escape(key) + r"-run-(\d+)\.json$")
        listing = self.store.list_folder(RUNS_FOLDER)
        taken = [int(m.group(1)) for o in listing.files if (m := pattern.search(o.name))]
        index = max(taken, default=-1) + 1
        for _ in range(100):
            body = {
                "request_id": self.identity.request_id,
                "attempt": self.identity.attempt,
                "job_id": self.identity.job_id,
                "run": index,
                "started_at": _utc_now(),
                "resumed_step": self.resume_step(),
            }
            if self.store.create(f"{RUNS_FOLDER}{key}-run-{index:04d}.json", json.dumps(body).encode()):
                return index
            index += 1
        raise KitError("could not record this run's start: 100 run indexes taken")

    def announce(self, checkpoint: Checkpoint | None | object = _UNSET) -> None:
        """Print `run_started` (once). A trainer that validates checkpoints itself passes the
        one it resumed from (or None), having started with `announce=False`."""
        if checkpoint is not _UNSET:
            self.resume_checkpoint = checkpoint  # type: ignore[assignment]
            self.step = self.resume_step()
            self._progress_mark = (self._progress_mark[0], self.step)
        if self._announced:
            return
        self._announced = True
        resumed = self.resume_checkpoint
        fields: dict[str, Any] = {
            "resumed_step": resumed.step if resumed else None,
            "checkpoint": resumed.name if resumed else None,
        }
        if self.total_steps is not None:
            fields["total_steps"] = self.total_steps
        self.emit(RUN_STARTED, **fields)
        newer = resumed.sort_key() if resumed else None
        self.torn = [
            c
            for c in sorted_checkpoints(self._checkpoints)
            if not c.complete and (newer is None or c.sort_key() > newer)
        ]
        for torn in self.torn:
            self.emit(CHECKPOINT_TORN, step=torn.step, checkpoint=torn.name)

    # Resuming.

    def complete_checkpoints(self) -> list[Checkpoint]:
        """Every complete checkpoint, newest first (the first is where to resume)."""
        return [c for c in reversed(sorted_checkpoints(self._checkpoints)) if c.complete]

    def resume_step(self) -> int | None:
        return self.resume_checkpoint.step if self.resume_checkpoint else None

    def resume_path(self, checkpoint: Checkpoint | None = None, *, local: bool = False) -> str | None:
        """Where the checkpoint to resume from (or `checkpoint`) is: a local path (a FUSE mount
        or a local folder), else its gs:// URI; with `local`, always a local path (downloaded
        into a temporary folder when the store is GCS). A files checkpoint (`ckpt-5`) is given
        by its stem, as frameworks name it. None when there is nothing to resume from."""
        checkpoint = checkpoint or self.resume_checkpoint
        if checkpoint is None:
            return None
        if local and not isinstance(self.store, FileStore):
            names = [checkpoint.name] if checkpoint.kind == Kind.PREFIX else [o.name for o in checkpoint.objects]
            return os.path.join(self.store.fetch(names), checkpoint.name)
        return self.store.location(checkpoint.name)

    # Saving.

    def is_committed(self, name: str) -> bool:
        """Whether the checkpoint folder `name` (`step-000400/`, `checkpoint-20/`) is complete by
        the rules `discover` applies (`judge_folder`): a marker is not enough when the kit's lists
        files that are gone, nor Orbax's `_CHECKPOINT_METADATA` alone. An incomplete folder is
        saved again, its stale objects replaced as the framework replaces them."""
        judged = judge_folder(self.store, "", name, self.markers)
        return judged is not None and judged.complete

    def remove_stale_markers(self, name: str) -> None:
        """Remove the commit markers an earlier save of this step left in a folder no longer
        complete (a file it listed deleted since), before it is saved again (primary only): a
        step's files have the same sizes at every save, and the framework rewrites them one by
        one, so a save cut short would leave the old markers judging a mix of old and new files
        complete."""
        if not self.identity.primary:
            return
        for marker in self.markers:
            if self.store.stat(name + marker) is not None:
                self.store.remove(name + marker)

    def local_dir(self) -> str:
        """The checkpoint directory as a local path (the FUSE mount or a local folder), for a
        framework that writes its checkpoints itself."""
        if not isinstance(self.store, FileStore):
            raise KitError(
                f"{self.checkpoint_dir} is reached through the Cloud Storage API: a framework that writes "
                "its own files needs it as a path (the /gcs/ FUSE mount, or a local folder)"
            )
        return str(self.store.root)

    @contextlib.contextmanager
    def checkpoint(self, step: int, *, commit: bool = True) -> Iterator[str]:
        """A local folder to save the checkpoint of `step` into. On a clean exit its files are
        made durable (fsync'ed, or uploaded for GCS), then the `COMMITTED` marker is written,
        last, with the file list; then `checkpoint_committed` is printed. On an exception nothing
        is committed. `commit=False`: the framework writes its own marker (Orbax, torch DCP); the
        kit times and reports the save, and uploads the markers last. The markers an earlier save
        of the step left (its files deleted since) are removed first. A step already committed (by the
        rules `discover` applies) is not saved again: the block gets a scratch folder, thrown
        away, and `checkpoint_kept` is printed (the committed files stay exactly as they were)."""
        name = checkpoint_name(step)
        started = time.monotonic()
        self._saving += 1
        try:
            if self.is_committed(name):
                scratch = tempfile.mkdtemp(prefix="spotjobs-kit-kept-")
                try:
                    yield scratch
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
                self._kept(step, name)
            else:
                self.remove_stale_markers(name)
                local = self.store.staging(name)
                try:
                    yield local
                except BaseException:
                    self.store.discard(local)
                    raise
                files = self.store.publish(name, local, last=self.markers)
                self._committed(step, name, files, started, write_marker=commit)
        finally:
            self._saving -= 1
        self._exit_if_this_was_the_preemption_save()

    def commit(self, name: str, step: int, *, started: float | None = None) -> bool:
        """Commit a checkpoint folder a framework wrote itself (`checkpoint-20/`), once it has
        returned (across processes: after its barrier; only the primary writes): its files made
        durable, then the `COMMITTED` marker, then `checkpoint_committed`. `started`:
        time.monotonic() when the save that wrote it began (the line's `seconds`); without it, no
        save preceded: a folder complete with the kit's marker already is left alone
        (`checkpoint_kept`), one complete by a framework's marker only (DCP's `.metadata`) gets
        the kit's too. With it, the marker is written whatever one the folder held (a marker left
        from a save whose files were deleted lists files this save replaced). Returns whether
        this call committed it."""
        if not name.endswith("/"):
            name += "/"
        if started is None and self.store.stat(name + KIT_MARKER) is not None and self.is_committed(name):
            self._kept(step, name)
            return False
        began = time.monotonic() if started is None else started
        files = self.store.seal(name) if self.identity.primary else {}
        self._committed(step, name, files, began, write_marker=True)
        return True

    def _committed(self, step: int, name: str, files: dict[str, int], started: float, *, write_marker: bool) -> None:
        files.pop(KIT_MARKER, None)
        if write_marker and self.identity.primary:
            marker = {"v": 1, "step": step, "files": files, "committed_at": _utc_now()}
            self.store.write(name + KIT_MARKER, json.dumps(marker, sort_keys=True).encode())
        self.step = step if self.step is None else max(self.step, step)
        self._last_commit = time.monotonic()
        self.last_committed = (step, name)
        self.emit(
            CHECKPOINT_COMMITTED,
            step=step,
            seconds=round(self._last_commit - started, 3),
            checkpoint=name,
            bytes=sum(files.values()),
        )
        self.progress(step, force=True)

    def _kept(self, step: int, name: str) -> None:
        self.step = step if self.step is None else max(self.step, step)
        self.emit(CHECKPOINT_KEPT, step=step, checkpoint=name, reason=ALREADY_COMMITTED)

    def _exit_if_this_was_the_preemption_save(self) -> None:
        if self.preempted and self._callback is not None and self._exit_code is not None:
            self._exit(self._exit_code)  # this save was the preemption's save

    # Progress.

    def progress(self, step: int, *, force: bool = False) -> None:
        """Note that training reached `step`; print a `progress` line if the last one is a minute
        old (or with `force`), with the steps per second since then."""
        self.step = step if self.step is None else max(self.step, step)  # an async commit lags
        now = time.monotonic()
        since, from_step = self._progress_mark
        if not force and now - since < PROGRESS_INTERVAL_SECONDS:
            return
        elapsed = now - since
        done = step - (from_step or 0)
        rate = round(done / elapsed, 4) if elapsed > 0 and done >= 0 else None
        self._progress_mark = (now, self.step)
        self.emit(PROGRESS, step=self.step, total_steps=self.total_steps, steps_per_second=rate)

    # Preemption.

    @property
    def preempted(self) -> bool:
        return self.preempted_at is not None

    def install_sigterm_handler(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        if self._previous_handler is _UNSET:
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._chain(self._previous_handler)

    def reassert_sigterm(self) -> None:
        """Put the kit's SIGTERM handler back on top if something replaced it (a framework that
        installs its own without calling the one it found); the replacing handler is chained,
        so it still runs, after the kit's."""
        if threading.current_thread() is not threading.main_thread() or self._previous_handler is _UNSET:
            return
        current = signal.getsignal(signal.SIGTERM)
        if current != self._on_sigterm:
            self._chain(current)
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def _chain(self, handler: Any) -> None:
        if callable(handler) and handler != self._on_sigterm and handler not in self._chained:
            self._chained.append(handler)

    def install_exit_hook(self) -> None:
        """Register the exit hook: a preempted, unfinished process exits 143 (the module
        docstring). `close()` removes it."""
        if not self._exit_hook_installed:
            atexit.register(self._exit_after_preemption)
            self._exit_hook_installed = True

    @property
    def exit_status(self) -> int:
        """A preempted run's exit status: 143, unless a peer of a distributed job stopped it and
        this process got no SIGTERM itself: then the peer exit status (`spotjobs_kit.distributed`)."""
        if self.stopped_by_peer is not None and not self.sigterm_received:
            return self.peer_exit_status
        return SIGTERM_EXIT_STATUS

    def exit_preempted(self) -> None:
        """Leave a preempted run: `SystemExit(exit_status)` (the exit hook then has nothing to do)."""
        self._exiting = True
        raise SystemExit(self.exit_status)

    def _exit_after_preemption(self) -> None:
        # With a process group up, the interpreter's teardown destroys it, and gloo then aborts the
        # process (SIGABRT, "terminate called without an active exception") once a peer is gone:
        # a preempted process of a distributed job leaves here, after the later exit hooks.
        if self.preempted and not self.finished and (not self._exiting or process_group() is not None):
            self._exit_now(self.exit_status)

    @staticmethod
    def _exit_now(status: int) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)

    def peer_preempted(self, rank: int) -> None:
        """Another process of this distributed job got SIGTERM, and every process stops at the
        step they agreed on (`spotjobs_kit.distributed.agree_on_stop`): this run is preempted too
        (the primary prints `preempted`, reason `peer_sigterm`), and leaves with the peer exit
        status."""
        if self.preempted or self.finished:
            return
        self._mark_preempted(reason=PEER_SIGTERM, rank=rank)

    def _peer_lost(self, error: BaseException) -> None:
        """A collective failed because a peer is gone: `preempted` (reason `peer_lost`) unless this
        run was preempted already, then leave at once (nothing can be saved without the peer)."""
        if not self.preempted and not self.finished:
            self._mark_preempted(reason=PEER_LOST, error=f"{type(error).__name__}: {error}"[:300])
        self._exiting = True
        self._exit_now(self.exit_status)

    def _mark_preempted(self, reason: str | None = None, **fields: Any) -> None:
        self.preempted_at = time.monotonic()
        self.stopped_by_peer = reason
        if reason is not None:
            fields["reason"] = reason
        since = self._last_commit if self._last_commit is not None else self._started
        self.emit(PREEMPTED, step=self.step, seconds_since_checkpoint=round(self.preempted_at - since, 3), **fields)

    def on_preemption(
        self, callback: Callable[[], Any] | None = None, *, exit_code: int | None = SIGTERM_EXIT_STATUS
    ) -> None:
        """On SIGTERM, call `callback` (your save) and exit with `exit_code` (None: return to
        the interrupted code, `run.preempted` set). A SIGTERM already received runs it now."""
        self.install_sigterm_handler()
        self._callback = callback
        self._exit_code = exit_code
        if self.preempted and callback is not None and not self._saving:
            self._save_and_exit()

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if self.finished:
            # The training is done: nothing to report or save, and no 143 (a restart of a finished
            # run); the process goes on to its end. The frameworks' handlers ended with training.
            if callable(self._previous_handler):
                self._previous_handler(signum, frame)
            return
        if self._in_handler:
            return  # a chained handler that chains back to the kit's (Lightning's does)
        self._in_handler = True
        try:
            self.sigterm_received = True
            first = self.preempted_at is None
            if first:
                self._mark_preempted()
            for handler in list(self._chained):
                handler(signum, frame)
        finally:
            self._in_handler = False
        if first and self._callback is not None and not self._saving:
            self._save_and_exit()

    def _save_and_exit(self) -> None:
        assert self._callback is not None
        self._callback()
        if self._exit_code is not None:
            self._exit(self._exit_code)

    def _exit(self, code: int) -> None:
        if code == SIGTERM_EXIT_STATUS:
            self.exit_preempted()
        raise SystemExit(code)

    # Ending.

    def finish(self, step: int | None = None) -> None:
        """Print `run_finished` (training done). A SIGTERM after this is no preemption: the kit's
        handler (put back on top: a framework may have restored the one it found, as the HF
        Trainer does at the end of `train()`) lets the process go on to its end."""
        if step is not None:
            self.step = step
        self.finished = True
        self.reassert_sigterm()
        self.emit(RUN_FINISHED, step=self.step)

    def _report_failures(self) -> None:
        """Print `run_failed` for an exception the training code lets escape, so a restart after
        a crash is not taken for one after a preemption. In a distributed job, a collective that
        failed because a peer is gone is no crash of this code: the traceback is printed, then
        the run leaves as preempted by its peer (`_peer_lost`)."""
        previous = sys.excepthook

        def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
            if issubclass(kind, (SystemExit, KeyboardInterrupt)):
                previous(kind, value, tb)
            elif process_group() is not None and is_lost_peer_error(value):
                previous(kind, value, tb)
                self._peer_lost(value)
            else:
                self.emit(RUN_FAILED, step=self.step, error=f"{kind.__name__}: {value}"[:300])
                previous(kind, value, tb)

        sys.excepthook = hook

    def close(self) -> None:
        """Put back the SIGTERM handler that was there before `start()`; remove the exit hook."""
        if self._previous_handler is not _UNSET and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = _UNSET
            self._chained.clear()
        if self._exit_hook_installed:
            atexit.unregister(self._exit_after_preemption)
            self._exit_hook_installed = False

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # Lines.

    @property
    def checkpoint_dir(self) -> str:
        return self.store.uri

    def emit(self, event: str, **fields: Any) -> None:
        """Print one kit line (the primary replica only)."""
        if not self.identity.primary:
            return
        ident = self.identity
        line = format_line(
            event,
            {
                "request_id": ident.request_id,
                "attempt": ident.attempt,
                "run": self.restart,
                "job_id": ident.job_id,
                **fields,
                "time": _utc_now(),
            },
            key=ident.kit_key,
        )
        write_line(line, self.stream)
