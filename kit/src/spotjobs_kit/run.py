"""One run of a training script under spotjobs: where to resume, how to commit, what to report.

    run = Run.start()                      # AIP_CHECKPOINT_DIR; prints run_started
    state = load(run.resume_path(local=True)) if run.resume_step() is not None else fresh()
    run.on_preemption(lambda: save_now())  # or check `run.preempted` in the loop
    with run.checkpoint(step) as folder:   # step-000400/; COMMITTED written last, on success
        save(state, folder)

Identity, from what spotjobs and Vertex put in the worker's environment:
- `SPOTJOBS_REQUEST_ID`, `SPOTJOBS_ATTEMPT`: set by spotjobs' submit on every worker pool;
- `CLOUD_ML_JOB_ID`, `CLUSTER_SPEC` (`task.type` `workerpool0`..`workerpool3`, `task.index`;
  the primary replica is workerpool0 index 0), else `TF_CONFIG` (`chief`/`master` index 0);
- the restart index (`run`): Vertex restarts a preempted job's workers with the same
  environment, so the kit counts its own starts. The primary replica writes one small object per
  start, `<checkpoint dir>/_spotjobs_runs/<attempt-N | job-ID | local>-run-NNNN.json`, created
  only if absent (so two starts never take the same index). The pruner never touches that
  folder: its name carries no step number.

Only the primary replica writes markers and run objects and prints lines; other replicas resume
from the same checkpoint and save into the same folders (synchronise their saves with the
primary's before it leaves `checkpoint()`).

SIGTERM (what Vertex sends a Spot VM's containers before reclaiming it, with a grace period of
about 30 s): the handler is installed first thing in `Run.start()`. It prints `preempted`
(`step`: `run.step`, which `checkpoint()` advances and a loop may set; `seconds_since_checkpoint`:
since this run's last commit, or since it started) and sets `run.preempted`. With
`on_preemption(save)`, it then calls `save()` (which normally uses `run.checkpoint`) and exits
with status 143 (128 + SIGTERM). The callback runs in the main thread wherever the signal
interrupted it; if a step must not be interrupted, check `run.preempted` between steps instead.
A SIGTERM that lands during a `checkpoint()` block lets that checkpoint commit, then exits
without calling the callback again.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TextIO

from spotjobs_kit.layout import (
    DEFAULT_COMMIT_MARKERS,
    KIT_MARKER,
    Checkpoint,
    Kind,
    discover,
    newest_complete,
    sorted_checkpoints,
)
from spotjobs_kit.lines import (
    CHECKPOINT_COMMITTED,
    PREEMPTED,
    RUN_FAILED,
    RUN_FINISHED,
    RUN_STARTED,
    format_line,
    write_line,
)
from spotjobs_kit.storage import FileStore, KitError, open_store

RUNS_FOLDER = "_spotjobs_runs/"
SIGTERM_EXIT_STATUS = 128 + int(signal.SIGTERM)
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

    @property
    def primary(self) -> bool:
        return self.task_type in (None, "workerpool0", "chief", "master") and self.task_index in (None, 0)

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
        index = task.get("index")
        return cls(
            request_id=environ.get("SPOTJOBS_REQUEST_ID") or None,
            attempt=int(attempt) if attempt.isdigit() else None,
            job_id=environ.get("CLOUD_ML_JOB_ID") or None,
            task_type=str(task["type"]) if task.get("type") is not None else None,
            task_index=int(index) if isinstance(index, int) or str(index).isdigit() else None,
        )


def _markers_from_env(environ: Mapping[str, str]) -> tuple[str, ...]:
    # The same variable (and format) the pruner's settings read: one list for both when set.
    raw = environ.get("SPOTJOBS_COMMIT_MARKERS")
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
        self.preempted_at: float | None = None  # time.monotonic() of the first SIGTERM
        self.last_committed: tuple[int, str] | None = None
        self._started = time.monotonic()
        self._last_commit: float | None = None
        self._checkpoints: list[Checkpoint] = []
        self._announced = False
        self._callback: Callable[[], Any] | None = None
        self._exit_code: int | None = SIGTERM_EXIT_STATUS
        self._saving = 0
        self._previous_handler: Any = _UNSET

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
    ) -> Run:
        """Install the SIGTERM hook, find the newest complete checkpoint, count this start, and
        (with `announce`) print `run_started`. `checkpoint_dir` defaults to AIP_CHECKPOINT_DIR;
        `gcs_client`: a google.cloud.storage.Client to use if the store is GCS through the API."""
        environ = os.environ if environ is None else environ
        run = cls(
            None,
            identity=Identity.from_env(environ),
            markers=tuple(markers) if markers is not None else _markers_from_env(environ),
            stream=stream,
        )
        if handle_sigterm:
            run.install_sigterm_handler()  # first: a reclaim can come while we list
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
        if self._announced:
            return
        self._announced = True
        resumed = self.resume_checkpoint
        self.emit(
            RUN_STARTED,
            resumed_step=resumed.step if resumed else None,
            checkpoint=resumed.name if resumed else None,
        )

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

    @contextlib.contextmanager
    def checkpoint(self, step: int, *, commit: bool = True) -> Iterator[str]:
        """A local folder to save the checkpoint of `step` into. On a clean exit its files are
        made durable (uploaded, for GCS), then the `COMMITTED` marker is written, last, with the
        file list; then `checkpoint_committed` is printed. On an exception nothing is committed.
        `commit=False`: the framework writes its own marker (Orbax, torch DCP); the kit times
        and reports the save only."""
        name = checkpoint_name(step)
        started = time.monotonic()
        self._saving += 1
        try:
            if commit and self.identity.primary:
                self.store.remove(name + KIT_MARKER)  # rewriting a step: never complete while torn
            local = self.store.staging(name)
            try:
                yield local
            except BaseException:
                self.store.discard(local)
                raise
            files = self.store.publish(name, local)
            files.pop(KIT_MARKER, None)
            if commit and self.identity.primary:
                marker = {"v": 1, "step": step, "files": files, "committed_at": _utc_now()}
                self.store.write(name + KIT_MARKER, json.dumps(marker, sort_keys=True).encode())
        finally:
            self._saving -= 1
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
        if self.preempted and self._callback is not None and self._exit_code is not None:
            raise SystemExit(self._exit_code)  # this save was the preemption's save

    # Preemption.

    @property
    def preempted(self) -> bool:
        return self.preempted_at is not None

    def install_sigterm_handler(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        if self._previous_handler is _UNSET:
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)

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
        if self.preempted_at is not None:
            return
        self.preempted_at = time.monotonic()
        since = self._last_commit if self._last_commit is not None else self._started
        self.emit(PREEMPTED, step=self.step, seconds_since_checkpoint=round(self.preempted_at - since, 3))
        if self._callback is not None and not self._saving:
            self._save_and_exit()

    def _save_and_exit(self) -> None:
        assert self._callback is not None
        self._callback()
        if self._exit_code is not None:
            raise SystemExit(self._exit_code)

    # Ending.

    def finish(self, step: int | None = None) -> None:
        """Print `run_finished` (training done)."""
        if step is not None:
            self.step = step
        self.emit(RUN_FINISHED, step=self.step)

    def _report_failures(self) -> None:
        """Print `run_failed` for an exception the training code lets escape, so a restart after
        a crash is not taken for one after a preemption."""
        previous = sys.excepthook

        def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
            if not issubclass(kind, (SystemExit, KeyboardInterrupt)):
                self.emit(RUN_FAILED, step=self.step, error=f"{kind.__name__}: {value}"[:300])
            previous(kind, value, tb)

        sys.excepthook = hook

    def close(self) -> None:
        """Put back the SIGTERM handler that was there before `start()`."""
        if self._previous_handler is not _UNSET and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = _UNSET

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
        )
        write_line(line, self.stream)
