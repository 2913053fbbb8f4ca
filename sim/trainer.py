"""The trainer inside each simulated job: it resumes with the kit's own discovery and saves
checkpoints into the folder Vertex gives the job, in the layout of one framework the kit knows,
sometimes torn by the crash, preemption or cancel that ends the save.

- a run (the job entering RUNNING, and each restart after a preemption) lists its checkpoint
  folder with `spotjobs_kit.Run.refresh` (the discovery `Run.start` does: `layout.discover` and
  `newest_complete`) and resumes from what it finds;
- while it runs it saves one to three checkpoints, in strides of 100 to 500 steps, or of a tenth to
  three tenths of its request's declared `total_steps`, past which the run is done (a clean end
  trains on to the total; a run a preemption or failure cuts may exit 0 first: the world then ends
  its job SUCCEEDED); the save the job's end cuts short is torn, in
  that framework's way (the kit's folder cut before its marker, which the kit writes after every
  file it lists, an earlier save's markers removed first: a marker listing a file gone or of
  another size is a deletion's doing, `object_deleted` or a lifecycle rule, never a cut's; an
  Orbax temporary folder, a DeepSpeed folder `latest` does not name, a TensorFlow stem its
  index does not name, a Hugging Face folder without `trainer_state.json`; with the permanent
  fault `two_file_stems`, a plain-PyTorch stem of two files, `ckpt-000400.pt` and
  `ckpt-000400.optim.pt`, torn between them);
- in a share of seeds (`kit_lines`) it writes the kit's lines as the kit does, signed with its
  attempt's key (`SPOTJOBS_KIT_KEY` in the job's environment): `run_started` (the run is the job's
  restart count), `checkpoint_committed` per whole save (none for two-file stems: no marker), and at the run's end `run_finished`,
  `preempted` (Vertex preempts it: the kit's SIGTERM handler) or `run_failed`; a cancel's stop
  writes `preempted` too under the `cancel_sigterm` assumption (below); and at each start, before its first line, the kit's run
  object (`_spotjobs_runs/attempt-N-run-NNNN.json`, where it resumed from), which a timeout
  without a commit heard reads (shared/deciding/folder_progress.py);
- an assumption, `cancel_sigterm` (`CANCEL_SIGTERMS`): Google documents that a cancel ends the job
  CANCELLED (CancelCustomJob, job_service.proto and the REST reference), not how its containers
  are stopped; the emulator stops them as at a preemption (SIGTERM, the grace, SIGKILL:
  devstack/vertex/replicas.py), and the kit's SIGTERM handler then writes `preempted`. `preempted`
  (the default) has a running trainer write that line when its job is cancelled (by spotjobs: an
  operator's cancel, a deadline switch, a move, the stray sweep, a budget stop; or by hand in the
  console); `silent` writes nothing, as before 2026-12-07;
- every save, whole or torn, and every checkpoint `spotjobs resubmit` copied, is kept as ground
  truth (`saves`), written by the simulator and never read back through the kit's rules: the
  invariants (`sim.invariants.resumes_from_newest_complete`, `newest_complete_kept`) compare what
  the kit resumed from and what the pruner left against it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from spotjobs_kit.lines import CHECKPOINT_COMMITTED, PREEMPTED, RUN_FAILED, RUN_FINISHED, RUN_STARTED

from sim.continuations import TIMEOUT_FATES

LAYOUTS = ("plain", "torch", "orbax", "deepspeed", "tensorflow", "huggingface")
TORN_SHARE = 0.35  # of the saves a job's end cuts short
EXITS_BEFORE_THE_CUT = 0.75  # of the runs that commit their declared total just before a preemption or failure
# What a running trainer writes when its job is cancelled (an assumption: the module docstring).
CANCEL_SIGTERMS = ("preempted", "silent")


def declared_total_steps(arrivals: Any) -> dict[str, int]:
    """The `total_steps` each request's own publisher declared (the first such body of the
    request's id; never what a hostile publisher wrote under another request's id)."""
    declared: dict[str, int] = {}
    for arrival in arrivals:
        try:
            body = json.loads(arrival.data)
        except ValueError:
            continue
        if not isinstance(body, dict):
            continue
        request_id, total = body.get("request_id"), body.get("total_steps")
        mine = arrival.own is None or request_id in arrival.own
        if isinstance(request_id, str) and type(total) is int and total > 0 and mine:
            declared.setdefault(request_id, total)
    return declared


@dataclass
class Save:
    """One checkpoint as the trainer (or a copy) wrote it: its objects (relative to the
    checkpoints folder) and their sizes, and whether the save finished."""

    name: str  # the unit as the kit names it: "step-000400/", or a stem ("ckpt-000400" of ".pt")
    step: int
    objects: dict[str, int]
    complete: bool
    written_by: str  # the request whose job wrote it, or "copy of <request>" for a resubmit's copy
    at: datetime


@dataclass
class Resume:
    """One run's start: where the kit resumed from, and what the ground truth says it should."""

    at: datetime
    request_id: str
    attempt: int
    job: str
    folder: str  # the job's checkpoints folder (object prefix)
    own_folder: str  # its request's
    resumed: tuple[str, int] | None
    resumed_by: str | None  # who wrote the checkpoint resumed from
    expected: Save | None  # what it must resume from (`Trainer.newest_resumable`), then
    newest_finished: Save | None  # the newest finished save of the folder, whole or not
    newest_finished_whole: bool = True  # whether that one was still whole, then


@dataclass
class Trainer:
    """Every simulated job's trainer, over the checkpoint bucket of one world."""

    settings: Any
    client: Callable[[], Any]  # the storage client (no faults: the trainer is no function)
    objects: Callable[[], Any]  # the checkpoint bucket's object table, for the ground truth
    clock: Callable[[], datetime]
    rng: random.Random
    saves: dict[str, dict[str, Save]] = field(default_factory=dict)  # folder -> unit -> save
    resumes: list[Resume] = field(default_factory=list)
    layouts: dict[str, str] = field(default_factory=dict)  # a resubmitted request's: its original's
    _step: dict[str, int] = field(default_factory=dict)  # job -> the step it trains at
    # job -> its run's restart index, as the kit counts them: its own starts of the job (one a
    # restart however many replicas' VMs the preemption reclaimed, whatever Vertex counts
    # towards its six: `SimJob.restarts`, which stays 0 per replica and leaps per VM).
    _run: dict[str, int] = field(default_factory=dict)
    changes: int = 0  # saves recorded so far: a checker that read `saves` knows if they moved
    # The torch layout saves a model and an optimizer file per stem (sim.faults, `two_file_stems`).
    two_file_stems: bool = False
    _layout: tuple[Any, Any] | None = None  # (settings, their CheckpointLayout), built at the first use
    # The kit's lines (set by the world for a share of seeds) and where a job's log line goes.
    kit_lines: bool = False
    emit: Callable[[Any, str, str], Any] = lambda job, text, severity: None
    # The steps a request declared (`total_steps`, set by the world): its saves are fractions of
    # them, and a run that reaches them is done. None: strides of 100 to 500 steps, no end.
    total_steps_of: Callable[[str], int | None] = lambda request_id: None
    strides_seed: str = ""
    cancel_sigterm: str = CANCEL_SIGTERMS[0]  # the `cancel_sigterm` assumption (set by the world)
    _strides_of: dict[str, random.Random] = field(default_factory=dict)  # job -> its strides' generator

    # Where things are.

    def own_folder(self, request_id: str) -> str:
        from shared.pruning.folders import CheckpointLayout

        if self._layout is None or self._layout[0] is not self.settings:
            self._layout = (self.settings, CheckpointLayout.from_settings(self.settings))
        return self._layout[1].folder_for(request_id)

    def job_folder(self, job: Any) -> str:
        """`AIP_CHECKPOINT_DIR`: `checkpoints/` under the job's base output directory."""
        uri = ((job.request.get("jobSpec") or {}).get("baseOutputDirectory") or {}).get("outputUriPrefix", "")
        path = uri.split("://", 1)[-1].split("/", 1)[-1]
        return path.rstrip("/") + "/checkpoints/"

    def layout_of(self, request_id: str) -> str:
        """The framework a request trains with (a resubmit keeps its original's)."""
        return self.layouts.get(request_id) or LAYOUTS[sum(request_id.encode()) % len(LAYOUTS)]

    # A run.

    def start(self, job: Any) -> None:
        """The job's container starts: the kit finds the newest complete checkpoint to resume from."""
        from spotjobs_kit.run import Identity, Run
        from spotjobs_kit.storage import GcsStore

        folder = self.job_folder(job)
        store = GcsStore(f"gs://{self.settings.checkpoint_bucket}/{folder}", client=self.client())
        run = Run(store, identity=Identity(job.request_id, job.attempt, job.name), markers=self.settings.commit_markers)
        complete = run.refresh()
        resumed = complete[0] if complete else None
        by = self.saves.get(folder, {}).get(resumed.name) if resumed else None
        self.resumes.append(
            Resume(
                self.clock(),
                job.request_id,
                job.attempt,
                job.name,
                folder,
                self.own_folder(job.request_id),
                (resumed.name, resumed.step) if resumed else None,
                by.written_by if by else ("nobody the simulator knows" if resumed else None),
                self.newest_resumable(folder),
                newest := self.newest_finished(folder),
                newest is None or self.whole(folder, newest),
            )
        )
        self._step[job.name] = resumed.step if resumed else 0
        self._run[job.name] = self._run.get(job.name, -1) + 1
        if self.kit_lines:
            self._record_start(job, folder, resumed.step if resumed else None)
        self._line(
            job,
            RUN_STARTED,
            resumed_step=resumed.step if resumed else None,
            checkpoint=resumed.name if resumed else None,
        )

    def train(self, job: Any, *, ends_in_a_cut: bool) -> bool:
        """The job trained since its last change: one to three saves (a run Vertex ends cleanly
        trains on to its request's declared total, if any); the last torn (sometimes) when what
        comes next ends the run in the middle of it. Whether its trainer exited 0 on its
        own, its request's declared total committed, before what ends the run: the job succeeds."""
        if job.name not in self._step:
            return False
        total = self.total_steps_of(job.request_id)
        count = self.rng.choice((1, 1, 2, 3))
        torn = False
        for k in range(count):
            stride = self.rng.choice((1, 2, 5)) * 100  # drawn for every request: the seed's other draws stay
            step = self._step[job.name] + stride if total is None else self._declared_step(job, total, ends_in_a_cut)
            if step <= self._step[job.name]:
                break  # at the total, or as near it as a run cut short gets: nothing more to save
            torn = ends_in_a_cut and k == count - 1 and self.rng.random() < TORN_SHARE
            self._save_at(job, step, torn=torn)
        while total is not None and not ends_in_a_cut and self._step[job.name] < total:
            self._save_at(job, self._declared_step(job, total, ends_in_a_cut), torn=False)  # on to the total
        step = self._step[job.name]
        finished = total is not None and step >= total and not torn
        if not ends_in_a_cut or finished:  # the kit: past the last planned step the run is done
            self._line(job, RUN_FINISHED, step=step)
        elif job.state == "JOB_STATE_RUNNING" and job.fate == "fail" and not job.preemptions:
            self._line(job, RUN_FAILED, step=step, error="RuntimeError: the simulated training failed")
        elif job.state == "JOB_STATE_RUNNING":  # Vertex preempts it (or it stocked out): SIGTERM
            self._line(job, PREEMPTED, step=step, seconds_since_checkpoint=0.0)
        elif job.state == "JOB_STATE_CANCELLING" and self.cancel_sigterm == "preempted":  # the cancel's SIGTERM
            self._line(job, PREEMPTED, step=step, seconds_since_checkpoint=0.0)
        return finished and (not ends_in_a_cut or self._exits_before_the_cut(job))

    def _strides(self, job: Any) -> random.Random:
        """A generator per job for the draws of a declared total: they stay whatever order jobs move
        in, and a seed's requests without one keep their draws."""
        strides = self._strides_of.get(job.name)
        if strides is None:
            strides = self._strides_of[job.name] = random.Random(f"{self.strides_seed}:{job.name}")
        return strides

    def _save_at(self, job: Any, step: int, *, torn: bool) -> None:
        self._step[job.name] = step
        name = self.save(job, step, torn=torn)
        if not torn and self._vouched(job):
            self._line(job, CHECKPOINT_COMMITTED, step=step, seconds=1.0, checkpoint=name)

    def _declared_step(self, job: Any, total: int, ends_in_a_cut: bool) -> int:
        """The next save's step of a request that declared `total` steps: a tenth to three tenths of
        it further (a request takes several commits), never past it. A run Vertex ends cleanly
        trains on to it; one cut short by a preemption, a stock-out or a failure may reach it; one a
        cancel or the job timeout cuts stays below it (those end the job whatever the trainer does)."""
        step = self._step[job.name] + max(1, round(total * self._strides(job).choice((0.1, 0.2, 0.3))))
        if ends_in_a_cut and (job.state != "JOB_STATE_RUNNING" or job.fate in TIMEOUT_FATES):
            return min(step, max(total - 1, self._step[job.name]))
        return min(step, max(total, self._step[job.name]))

    def _exits_before_the_cut(self, job: Any) -> bool:
        """A run that committed its total in a run Vertex then preempts (or that fails) exits 0
        first, mostly; the rest are cut between the last commit and the exit (seed 4568's window:
        all the work committed, the job not ended). A cancel or the job timeout ends it anyway."""
        if job.state != "JOB_STATE_RUNNING" or job.fate in TIMEOUT_FATES:
            return False
        return self._strides(job).random() < EXITS_BEFORE_THE_CUT

    def _vouched(self, job: Any) -> bool:
        """Whether the kit would print `checkpoint_committed` for a whole save: it does so only
        after the save's marker (spotjobs_kit.run), and a bare stem of two files has none and is
        never complete while newest (docs/kit.md), so a trainer saving such stems gets no line."""
        return not (self.two_file_stems and self.layout_of(job.request_id) == "torch")

    def _line(self, job: Any, event: str, **fields: Any) -> None:
        """One kit line of `job`'s current run, as `spotjobs_kit.Run.emit` writes it."""
        if not self.kit_lines:
            return
        from spotjobs_kit.lines import format_line

        from sim.faults import kit_key_of

        moment = self.clock().isoformat().replace("+00:00", "Z")
        identity = {"request_id": job.request_id, "attempt": job.attempt, "run": self._run.get(job.name, 0)}
        text = format_line(
            event,
            {**identity, "job_id": job.name.rsplit("/", 1)[-1], **fields, "time": moment},
            key=kit_key_of(job.request),
        )
        self.emit(job, text, "INFO")

    def _record_start(self, job: Any, folder: str, resumed_step: int | None) -> None:
        """The run object the kit writes at a start (`spotjobs_kit.Run._record_start`)."""
        from spotjobs_kit.run import RUNS_FOLDER

        body = {
            "request_id": job.request_id,
            "attempt": job.attempt,
            "job_id": job.name.rsplit("/", 1)[-1],
            "run": self._run[job.name],
            "started_at": self.clock().isoformat(),
            "resumed_step": resumed_step,
        }
        name = f"{folder}{RUNS_FOLDER}attempt-{job.attempt}-run-{self._run[job.name]:04d}.json"
        self.client().bucket(self.settings.checkpoint_bucket).blob(name).upload_from_string(json.dumps(body))

    def stop(self, job: Any) -> None:
        self._step.pop(job.name, None)

    # Saving, in each framework's layout.

    def save(self, job: Any, step: int, *, torn: bool) -> str:
        folder = self.job_folder(job)
        layout = self.layout_of(job.request_id)
        earlier = self.saves.get(folder, {})
        if torn and layout == "torch" and self.two_file_stems and (not earlier or f"ckpt-{step:06d}" in earlier):
            # Two saves the listing cannot tell from whole (docs/kit.md says so: such a trainer
            # should save into a marked folder): a torn first save of the folder (one file, no peer
            # yet), and a torn save again of a step saved before (its new model beside the earlier
            # save's optimizer). The simulated trainer tears neither, and records each whole.
            torn = False
        writes, name = getattr(self, f"_{layout}")(folder, step, torn)
        bucket = self.client().bucket(self.settings.checkpoint_bucket)
        for relative, data in writes:
            bucket.blob(folder + relative).upload_from_string(data)
        objects = {r: len(d) for r, d in writes if r.startswith(name)}  # not the evidence beside it
        saves = self.saves.setdefault(folder, {})
        saves[name] = Save(name, step, objects, not torn, job.request_id, self.clock())
        self.changes += 1
        return name

    def _blob(self) -> bytes:
        return b"w" * self.rng.randint(8, 200)

    def _plain(self, folder: str, step: int, torn: bool) -> tuple[list[tuple[str, bytes]], str]:
        """The kit's `Run.checkpoint`: the markers an earlier save of the step left removed first,
        then the files one by one, the marker listing them last; a cut leaves none, some or all
        of the files and no marker (the kit never writes a marker before the files it lists)."""
        from spotjobs_kit.layout import KIT_MARKER
        from spotjobs_kit.run import checkpoint_name

        name = checkpoint_name(step)
        bucket = self.client().bucket(self.settings.checkpoint_bucket)
        for marker in self.settings.commit_markers:
            if folder + name + marker in self.objects():
                bucket.blob(folder + name + marker).delete()
        files = [(name + "model.pt", self._blob()), (name + "optim.pt", self._blob())]
        if torn:
            return files[: self.rng.choice((0, 1, 2))], name
        listed = {n[len(name) :]: len(d) for n, d in files}
        marker = json.dumps({"v": 1, "step": step, "files": listed, "committed_at": "sim"}, sort_keys=True).encode()
        return [*files, (name + KIT_MARKER, marker)], name

    def _torch(self, folder: str, step: int, torn: bool) -> tuple[list[tuple[str, bytes]], str]:
        name = f"ckpt-{step:06d}"  # one object: a cut upload leaves nothing (GCS lists it once whole)
        if self.two_file_stems:  # the model, then the optimizer: a cut between them leaves the first
            model = (f"{name}.pt", self._blob())
            return ([model] if torn else [model, (f"{name}.optim.pt", self._blob())]), name
        return ([] if torn else [(f"{name}.pt", self._blob())]), name

    def _orbax(self, folder: str, step: int, torn: bool) -> tuple[list[tuple[str, bytes]], str]:
        from spotjobs_kit.layout import ORBAX_METADATA

        if torn:  # Orbax writes into a temporary folder and renames it once every item is saved
            return [(f"{step}.orbax-checkpoint-tmp/default/array", self._blob())], f"{step}.orbax-checkpoint-tmp/"
        name = f"{step}/"
        metadata = json.dumps({"commit_timestamp_nsecs": step * 1000}).encode()
        writes = [(name + ORBAX_METADATA, metadata), (name + "default/array", self._blob())]
        if self.rng.random() < 0.5:  # orbax-checkpoint 0.12; an older release renames without it
            writes.append((name + "commit_success.txt", b"Checkpoint commit was successful."))
        return writes, name

    def _deepspeed(self, folder: str, step: int, torn: bool) -> tuple[list[tuple[str, bytes]], str]:
        from spotjobs_kit.layout import DEEPSPEED_LATEST

        name = f"global_step{step}/"
        writes = [
            (name + "mp_rank_00_model_states.pt", self._blob()),
            (name + "zero_pp_rank_0_optim_states.pt", self._blob()),
        ]
        return (writes if torn else [*writes, (DEEPSPEED_LATEST, name.rstrip("/").encode())]), name

    def _tensorflow(self, folder: str, step: int, torn: bool) -> tuple[list[tuple[str, bytes]], str]:
        from spotjobs_kit.layout import TF_INDEX_FILE

        name = f"ckpt-{step}"
        writes = [(f"{name}.data-00000-of-00001", self._blob()), (f"{name}.index", self._blob())]
        if torn:
            return writes, name  # the index file, written last, does not name it
        named = [s.name for s in self.saves.get(folder, {}).values() if s.complete] + [name]
        index = f'model_checkpoint_path: "{name}"\n' + "".join(f'all_model_checkpoint_paths: "{n}"\n' for n in named)
        return [*writes, (TF_INDEX_FILE, index.encode())], name

    def _huggingface(self, folder: str, step: int, torn: bool) -> tuple[list[tuple[str, bytes]], str]:
        from spotjobs_kit.layout import HF_TRAINER_STATE

        name = f"checkpoint-{step}/"
        writes = [(name + "model.safetensors", self._blob())]
        return (writes if torn else [*writes, (name + HF_TRAINER_STATE, b'{"global_step": %d}' % step)]), name

    # The ground truth.

    def whole(self, folder: str, save: Save) -> bool:
        """Whether every object of a finished save is still there at its size."""
        table = self.objects()
        return save.complete and all(
            (obj := table.get(folder + name)) is not None and len(obj.data) == size
            for name, size in save.objects.items()
        )

    def newest_whole(self, folder: str) -> Save | None:
        """The newest finished save of `folder` still whole: what a run there must resume from."""
        whole = [s for s in self.saves.get(folder, {}).values() if self.whole(folder, s)]
        return max(whole, key=lambda s: (s.step, s.at), default=None)

    def newest_resumable(self, folder: str) -> Save | None:
        """What a run in `folder` must resume from: its newest save still whole, but in a folder
        of two-file stems, where a listed file vouches for no stem, the newest whole save that a
        later stem (listed, whole or torn) follows: the kit's documented rule
        (spotjobs_kit.layout), never a torn one."""
        if not (self.two_file_stems and self.layout_of_folder(folder) == "torch"):
            return self.newest_whole(folder)
        table = self.objects()
        saves = self.saves.get(folder, {}).values()
        listed = [s.step for s in saves if any(folder + name in table for name in s.objects)]
        whole = [s for s in saves if self.whole(folder, s) and any(step > s.step for step in listed)]
        return max(whole, key=lambda s: (s.step, s.at), default=None)

    def layout_of_folder(self, folder: str) -> str:
        written = next(iter(self.saves.get(folder, {}).values()), None)
        request_id = written.written_by.removeprefix("copy of ") if written else ""
        return self.layout_of(request_id) if request_id else ""

    def newest_finished(self, folder: str) -> Save | None:
        finished = [s for s in self.saves.get(folder, {}).values() if s.complete]
        return max(finished, key=lambda s: (s.step, s.at), default=None)

    def copied(self, old_request_id: str, new_request_id: str, name: str) -> None:
        """`spotjobs resubmit` copied checkpoint `name` whole into the new request's folder."""
        old, new = self.own_folder(old_request_id), self.own_folder(new_request_id)
        self.layouts[new_request_id] = self.layout_of(old_request_id)
        source = self.saves[old][name]
        self.saves.setdefault(new, {})[name] = Save(
            name, source.step, dict(source.objects), True, f"copy of {old_request_id}", self.clock()
        )
        self.changes += 1
