"""The checkpoint layout rules: what a checkpoint is, its step, whether it is complete, and their order.

One definition for the whole code base: the pruner (shared/pruning/) and the trainer kit
(spotjobs_kit.Run and its framework integrations) both judge checkpoints with these functions, so
a trainer resumes from exactly the checkpoint the pruner never deletes. That is why the rules of
every framework live in this one module. Python 3.9+, standard library only.

A request's checkpoints live under `<output dir>checkpoints/`. A checkpoint is one direct child of
that folder, found by listing it with delimiter "/", never by listing every shard. The rules
below follow what each framework writes (checked against its source and real saves: transformers
5.24, DeepSpeed's engine, Lightning 2.6, torch 2.13 DCP, orbax-checkpoint 0.12, Keras 3.15):

- a prefix (`step-000400/...`) is complete when one of the configured commit markers
  (DEFAULT_COMMIT_MARKERS, overridable by SPOTJOBS_COMMIT_MARKERS: Orbax `commit_success.txt`,
  torch.distributed.checkpoint `.metadata`, TensorFlow `checkpoint`, the kit's `COMMITTED`) exists
  directly under it; markers are found with targeted existence checks, trying first the marker
  that matched last, so a request written by one framework costs one check per checkpoint.
  Whichever marker is found, a folder holding the kit's `COMMITTED` stays complete only while
  the files it lists are there at their sizes (a read of it, and a delimiter listing of each
  folder holding them): one whose files were deleted later is skipped for the previous one. Names
  and sizes only (a step's files have the same sizes at every save): the kit removes a step's
  old markers before saving it again, so a re-save cut short is never judged by them.
  Without a marker, a framework's own completion evidence counts:
  - Hugging Face Trainer `checkpoint-N/`: `trainer_state.json` (the Trainer writes it last) and the
    model files it follows (`model.safetensors`/`pytorch_model.bin`/a PEFT adapter, every shard
    of a `-0000k-of-0000N` set, or DeepSpeed's `latest` with a `global_step*/` folder, or FSDP's
    `pytorch_model_fsdp_*/`), and with several processes' `rng_state_K.pth`, every K from 0 up;
    judged from one delimiter listing of the folder;
  - DeepSpeed `global_stepN/`: named by the `latest` file beside it (DeepSpeed writes the tag
    there after every rank saved), with its model states in it (what the pruner deletes first);
  - Orbax: a `N.orbax-checkpoint-tmp` folder (`-<timestamp>` in older releases) is never complete
    (Orbax itself treats it as unfinished; 0.12 writes `commit_success.txt` into it just before
    the rename); a finalised folder without `commit_success.txt` (an older Orbax's rename) is
    complete when its `_CHECKPOINT_METADATA` carries `commit_timestamp_nsecs`, set at finalisation
    after every write finished, and the folder holds something besides it (a copy cut short
    after the metadata, which sorts first, holds none of the items).
- the files sharing one stem with a checkpoint extension (CHECKPOINT_EXTENSIONS: `ckpt-000400.pt`,
  Lightning's `epoch=3-step=1000.ckpt`, Keras' `ckpt-0002.keras`/`ckpt-2.weights.h5`) are complete
  once they exist: a GCS object (through the FUSE mount too) is listed only once its upload
  finished, and Lightning writes local files through a temporary file (Keras writes local files
  in place: on a local disk a file cut by SIGKILL looks whole, so the kit's Keras integration
  saves into a marked folder instead). When any stem of the folder holds several such files
  (`ckpt-000400.pt` and `ckpt-000400.optim.pt`, uploaded one after another), a listed file no
  longer vouches for its stem: a stem is then complete only once a later stem exists and it
  holds every kind of file (the name past the stem) any stem of the folder holds (a later stem
  may be torn too, left by a run that died before the next resumed from an earlier one), and the
  newest stem never is (a torn first save of such a layout, one file listed and no peer yet, still looks whole:
  save several files into a folder the kit marks instead); TensorFlow
  stems (`ckpt-5.index` with `ckpt-5.data-00000-of-00001`) are complete when the folder's
  `checkpoint` index file names the stem in `model_checkpoint_path` or
  `all_model_checkpoint_paths`, its `.index` exists and every data shard `0..N-1` of its `-of-N`
  count exists (TensorFlow writes the index file last). A file with any other extension is never a
  checkpoint, whatever its name: metrics and logs (`eval_step_1100.json`, `train-step-5.log`).

Checkpoints are ordered by the step number in their name, then by update time. A step number is
recognised in these forms only (case-insensitive, the word not inside a longer word, the number
not followed by a letter or digit, an optional `-`, `_`, `.` or `=` between them):

- after `step` or `global_step` (`step-000400`, `global_step1000`, Lightning's
  `epoch=3-step=1000`): preferred over the words below;
- else after `ckpt`, `checkpoint`, `epoch`, `iter` or `iteration` (`ckpt-000400.pt`, TensorFlow's
  `ckpt-5`, `checkpoint-12/`, `iter_0001000/`), the last such number;
- a directory named by a number alone (Orbax's `400/`). A file named by a bare number is not a
  checkpoint: a date-named log would otherwise look like the newest one.

Any other child (TensorFlow's `checkpoint` index, DeepSpeed's `latest`, a README, `best/`, Lightning's
`last.ckpt`, a Keras BackupAndRestore folder (`latest.weights.h5` and `training_metadata.json`,
overwritten in place), `vocab_32000.txt`, `eval_step_1100.json`) belongs to no one step: it is never
deleted, and never counted as a checkpoint.

The functions over listings are pure; `discover` does the little I/O through a `ListingStore`
(the pruner's GCS store, or one of the kit's storage backends), and `judge_folder` judges one
folder with the same code (the kit, before saving a step it may have committed already). Names
given to and returned by a store are object names: the pruner's are bucket-relative
(`requests/r1/checkpoints/step-000400/`), the kit's are relative to the checkpoint directory
(`step-000400/`, prefix "").
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Protocol

CHECKPOINTS_FOLDER = "checkpoints/"
# Orbax, torch.distributed.checkpoint, TensorFlow's index file, and the kit's (and demo trainer's) marker.
# The deployment's marker list reaches each job in this variable (set by spotjobs' submit), so the
# kit in the container and the pruner judge with one list.
COMMIT_MARKERS_ENV = "SPOTJOBS_COMMIT_MARKERS"
DEFAULT_COMMIT_MARKERS = ("commit_success.txt", ".metadata", "checkpoint", "COMMITTED")
KIT_MARKER = "COMMITTED"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
TF_INDEX_FILE = "checkpoint"
# The extensions of a file that is a checkpoint on its own (TensorFlow's stems aside).
CHECKPOINT_EXTENSIONS = (".pt", ".pth", ".ckpt", ".safetensors", ".bin", ".h5", ".keras", ".msgpack", ".npz")
HF_TRAINER_STATE = "trainer_state.json"
DEEPSPEED_LATEST = "latest"
DEEPSPEED_MODEL_STATES = "model_states.pt"  # each rank's `mp_rank_00_model_states.pt` (ZeRO-3: zero_pp_rank_...)
ORBAX_METADATA = "_CHECKPOINT_METADATA"

_TF_SUFFIX = re.compile(r"\.(?:index|meta|data-\d+-of-\d+)$")
_TF_DATA = re.compile(r"\.data-(\d+)-of-(\d+)$")
_PLAIN_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,11}$")
_ORBAX_TMP = re.compile(r"\.orbax-checkpoint-tmp(?:-\d+)?$")
# "<word><separator?><number>", the word not the tail of a longer one, the number not the head of
# a longer token (`checkpoint_3b` names a size, not a step).
_WORD_NUMBER = r"(?<![A-Za-z])(?:{words})[-_.=]?(\d+)(?![A-Za-z0-9])"
_STEP_WORD_NUMBER = re.compile(_WORD_NUMBER.format(words="global_step|step"), re.IGNORECASE)
_CHECKPOINT_WORD_NUMBER = re.compile(_WORD_NUMBER.format(words="checkpoint|ckpt|epoch|iteration|iter"), re.IGNORECASE)
_BARE_NUMBER = re.compile(r"\d+")
_TF_INDEX_ENTRY = re.compile(
    r'^\s*(?:model_checkpoint_path|all_model_checkpoint_paths)\s*:\s*"((?:[^"\\]|\\.)*)"', re.M
)
_HF_NAME = re.compile(r"checkpoint-\d+/")
_DEEPSPEED_NAME = re.compile(r"global_step\d+/")
_HF_WEIGHTS = frozenset({"model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin"})
_HF_WEIGHT_SHARD = re.compile(r"(model|pytorch_model)-(\d+)-of-(\d+)\.(safetensors|bin)")
_HF_RNG_STATE = re.compile(r"rng_state_(\d+)\.pth")  # one per process when there are several


@dataclass(frozen=True)
class ListedObject:
    """One object as a listing (or a metadata read) returned it."""

    name: str
    generation: int
    size: int
    updated: datetime


@dataclass(frozen=True)
class FolderListing:
    """A delimiter listing: the objects directly in `prefix` and its direct sub-prefixes."""

    prefix: str
    files: tuple[ListedObject, ...] = ()
    subfolders: tuple[str, ...] = ()  # full prefixes, each ending in "/"


class Kind:
    PREFIX = "prefix"
    FILES = "files"


class Evidence:
    """How a checkpoint was judged: what made it complete, or why it is not (reports show it)."""

    MARKER = "commit marker"
    HF_TRAINER_STATE = "Hugging Face trainer_state.json and its model files"
    DEEPSPEED_LATEST = "named by DeepSpeed's latest file"
    DEEPSPEED_INCOMPLETE = "named by DeepSpeed's latest file, without model states"
    ORBAX_METADATA = "Orbax commit timestamp in _CHECKPOINT_METADATA"
    FILES = "checkpoint file"
    FILES_LATER = "checkpoint files of every kind the folder's checkpoints hold, a later checkpoint beside them"
    FILES_NEWEST = "newest checkpoint saved as several files: its last file may still be uploading"
    FILES_KIND_MISSING = "checkpoint files lacking a kind of file another checkpoint of the folder holds"
    TENSORFLOW = "named by the TensorFlow checkpoint index, every shard present"
    NO_MARKER = "no commit marker"
    HF_INCOMPLETE = "Hugging Face checkpoint without trainer_state.json or its model files"
    ORBAX_TMP = "Orbax temporary folder: never finalised"
    ORBAX_METADATA_ALONE = "Orbax _CHECKPOINT_METADATA without anything it commits"
    FILES_MISSING = "a file the kit's marker lists is missing or of another size"
    TENSORFLOW_INCOMPLETE = "TensorFlow stem not named by the index, or shards missing"


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint unit under a request's checkpoints folder."""

    name: str  # relative to the checkpoints folder: "step-000400/" or the stem "ckpt-5"
    kind: str
    step: int
    complete: bool
    # FILES: the unit's files. PREFIX: what made it complete (marker(s), trainer_state.json...);
    # for DeepSpeed, the `latest` file beside it.
    objects: tuple[ListedObject, ...] = ()
    # PREFIX only: every object under it, once listed (None: not listed).
    contents: tuple[ListedObject, ...] | None = None
    evidence: str = ""

    @property
    def updated(self) -> datetime | None:
        """When the unit was last written, as far as what was listed tells."""
        seen = self.contents if self.contents is not None else self.objects
        return max((o.updated for o in seen), default=None)

    def sort_key(self) -> tuple[int, datetime]:
        return (self.step, self.updated or EPOCH)


@dataclass(frozen=True)
class Unmanaged:
    """A child of the checkpoints folder that belongs to no one step; never deleted."""

    name: str
    reason: str


@dataclass(frozen=True)
class RequestCheckpoints:
    """Everything discovery found under one request's checkpoints folder."""

    prefix: str  # object-name prefix of the folder, e.g. "requests/r1/checkpoints/"
    checkpoints: tuple[Checkpoint, ...] = ()
    unmanaged: tuple[Unmanaged, ...] = ()
    marker_hit: str | None = None  # the commit marker found last: try it first next time


# Names and steps.


def step_of(stem: str, *, bare_number: bool = True) -> int | None:
    """The step number a checkpoint name carries in one of the forms the module docstring lists,
    or None: not a checkpoint. `bare_number`: whether a name that is only a number counts (it
    does for directories, not for files)."""
    return _step_of(stem, bare_number)


# Every hourly prune run meets the same names again (two regular expressions each): remembered.
@functools.lru_cache(maxsize=4096)
def _step_of(stem: str, bare_number: bool) -> int | None:
    for pattern in (_STEP_WORD_NUMBER, _CHECKPOINT_WORD_NUMBER):
        numbers = pattern.findall(stem)
        if numbers:
            return int(numbers[-1])
    if bare_number and _BARE_NUMBER.fullmatch(stem):
        return int(stem)
    return None


def stem_of(file_name: str) -> str:
    """The name shared by a checkpoint's files: TensorFlow suffixes and plain extensions removed.

    `ckpt-5.data-00000-of-00001` and `ckpt-5.index` -> `ckpt-5`; `ckpt-000400.pt` -> `ckpt-000400`;
    `ckpt-2.weights.h5` -> `ckpt-2`; `400.orbax-checkpoint-tmp` -> `400`.
    """
    stem = _TF_SUFFIX.sub("", file_name)
    if stem != file_name:
        return stem
    stem = _ORBAX_TMP.sub("", stem)
    while (shorter := _PLAIN_EXTENSION.sub("", stem)) != stem and shorter:
        stem = shorter
    return stem


def _is_tensorflow_file(file_name: str) -> bool:
    return file_name.endswith(".index") or _TF_DATA.search(file_name) is not None


def is_checkpoint_file(file_name: str) -> bool:
    """Whether a file can be (part of) a checkpoint: a checkpoint extension or a TensorFlow stem's
    suffix. Metrics, logs and JSON never are, whatever step their name carries."""
    return file_name.lower().endswith(CHECKPOINT_EXTENSIONS) or _TF_SUFFIX.search(file_name) is not None


def is_orbax_tmp(relative: str) -> bool:
    """An Orbax temporary folder (`400.orbax-checkpoint-tmp/`, older `...-tmp-1700000000/`)."""
    return _ORBAX_TMP.search(relative.rstrip("/")) is not None


# Completeness.


def parse_tf_index(text: str) -> frozenset[str]:
    """Stems named by a TensorFlow `checkpoint` index file (paths may be absolute or relative)."""
    return frozenset(path.rsplit("/", 1)[-1] for path in _TF_INDEX_ENTRY.findall(text))


def tensorflow_stem_complete(stem: str, file_names: Iterable[str], named: frozenset[str]) -> bool:
    """Named by the index, with its .index file and every data shard of its -of-N count."""
    if stem not in named:
        return False
    names = set(file_names)
    if f"{stem}.index" not in names:
        return False
    shard_counts: set[int] = set()
    shards: set[int] = set()
    for name in names:
        match = _TF_DATA.search(name)
        if match:
            shards.add(int(match.group(1)))
            shard_counts.add(int(match.group(2)))
    if len(shard_counts) != 1:
        return False
    (count,) = shard_counts
    return shards == set(range(count))


def hf_checkpoint_complete(files: Iterable[str], subfolders: Iterable[str]) -> bool:
    """A Hugging Face Trainer `checkpoint-N/` without a marker, from the names directly in it
    (`subfolders` without their trailing "/"): `trainer_state.json`, written last, and the model
    files written before it."""
    names = set(files)
    folders = set(subfolders)
    if HF_TRAINER_STATE not in names:
        return False
    ranks = {int(m[1]) for n in names if (m := _HF_RNG_STATE.fullmatch(n))}
    if ranks and ranks != set(range(max(ranks) + 1)):
        return False  # a process's RNG state missing (each process writes its own)
    if names & _HF_WEIGHTS:
        return True
    shard_sets: dict[tuple[str, int, str], set[int]] = {}
    for name in names:
        match = _HF_WEIGHT_SHARD.fullmatch(name)
        if match:
            shard_sets.setdefault((match[1], int(match[3]), match[4]), set()).add(int(match[2]))
    if any(got == set(range(1, total + 1)) for (_, total, _), got in shard_sets.items()):
        return True
    if DEEPSPEED_LATEST in names and any(f.startswith("global_step") for f in folders):
        return True  # DeepSpeed (ZeRO) keeps the weights in its own folder
    return any(f.startswith("pytorch_model_fsdp_") for f in folders)


def orbax_committed(metadata_text: str | None) -> bool:
    """Whether Orbax's `_CHECKPOINT_METADATA` records a finalised save (`commit_timestamp_nsecs`)."""
    if not metadata_text:
        return False
    try:
        metadata = json.loads(metadata_text)
    except ValueError:
        return False
    return isinstance(metadata, dict) and isinstance(metadata.get("commit_timestamp_nsecs"), int)


def listed_files(marker_text: str | None) -> dict[str, int] | None:
    """The files and sizes the kit's marker lists (`{"files": {"model.ckpt": 1234, ...}}`, names
    relative to the checkpoint folder); None when it lists none (not the kit's format)."""
    if not marker_text:
        return None
    try:
        marker = json.loads(marker_text)
    except ValueError:
        return None
    files = marker.get("files") if isinstance(marker, dict) else None
    if not isinstance(files, dict):
        return None
    return {str(name): size for name, size in files.items() if isinstance(size, int) and not isinstance(size, bool)}


def _is_relative_path(name: str) -> bool:
    return all(part not in ("", ".", "..") for part in name.split("/"))


def files_present(store: ListingStore, unit: str, listed: dict[str, int]) -> bool:
    """Whether every file `listed` (relative to the prefix `unit`) is under it at its size: one
    delimiter listing per folder that holds one. A name that could leave the folder never is."""
    if not all(_is_relative_path(name) for name in listed):
        return False
    folders = {name.rsplit("/", 1)[0] + "/" if "/" in name else "" for name in listed}
    present: dict[str, int] = {}
    for sub in sorted(folders):
        for obj in store.list_folder(unit + sub).files:
            present[obj.name[len(unit) :]] = obj.size
    return all(present.get(name) == size for name, size in listed.items())


def order_markers(markers: Sequence[str], last_hit: str | None) -> list[str]:
    """Markers in the order to look for them: the one that matched last first."""
    if last_hit in markers:
        return [last_hit, *(m for m in markers if m != last_hit)]
    return list(markers)


def completion_objects(
    checkpoint: Checkpoint, folder_prefix: str, contents: Iterable[ListedObject], markers: Sequence[str]
) -> list[ListedObject]:
    """The objects directly in a prefix checkpoint (from its listing `contents`) without which it
    is no longer complete by any rule above: a pruner deletes these first, so what a failed delete
    leaves is an incomplete checkpoint, never one that looks whole with shards missing."""
    unit = f"{folder_prefix}{checkpoint.name}"
    gates = {*markers, HF_TRAINER_STATE, ORBAX_METADATA}
    deepspeed = checkpoint.evidence == Evidence.DEEPSPEED_LATEST
    found = []
    for obj in contents:
        rest = obj.name[len(unit) :] if obj.name.startswith(unit) else "/"
        if "/" not in rest and (rest in gates or (deepspeed and rest.endswith(DEEPSPEED_MODEL_STATES))):
            found.append(obj)
    return found


def copy_order(
    checkpoint: Checkpoint, folder_prefix: str, contents: Iterable[ListedObject], markers: Sequence[str]
) -> list[ListedObject]:
    """The objects of a prefix checkpoint in the order a copy writes them, so that a copy cut
    short is never complete by any rule above: everything else first, then its completion
    objects, the commit markers among them last and the kit's (which lists every file) very
    last. The pruner's deletion order, reversed."""
    unit = f"{folder_prefix}{checkpoint.name}"
    gates = {o.name for o in completion_objects(checkpoint, folder_prefix, contents, markers)}

    def rank(obj: ListedObject) -> tuple[bool, bool, bool, str]:
        leaf = obj.name[len(unit) :]
        return (obj.name in gates, obj.name in gates and leaf in markers, leaf == KIT_MARKER, obj.name)

    return sorted(contents, key=rank)


def evidence_beside(checkpoint: Checkpoint, unmanaged: Iterable[Unmanaged]) -> dict[str, str]:
    """What a copy of `checkpoint` into an empty folder writes beside it, after everything else,
    to be complete there by the rules above (name relative to the folder: text): TensorFlow's
    `checkpoint` index naming its stem, DeepSpeed's `latest` naming its tag (when the folder
    copied from had one: DeepSpeed loads the tag `latest` names)."""
    if checkpoint.evidence == Evidence.TENSORFLOW:
        quoted = '"' + checkpoint.name.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return {TF_INDEX_FILE: f"model_checkpoint_path: {quoted}\nall_model_checkpoint_paths: {quoted}\n"}
    if _DEEPSPEED_NAME.fullmatch(checkpoint.name) and any(u.name == DEEPSPEED_LATEST for u in unmanaged):
        return {DEEPSPEED_LATEST: checkpoint.name.rstrip("/")}
    return {}


# Grouping a listing into units.


@dataclass
class Grouping:
    prefixes: dict[str, int] = field(default_factory=dict)  # "step-000400/" -> step
    stems: dict[str, list[ListedObject]] = field(default_factory=dict)
    unmanaged: list[Unmanaged] = field(default_factory=list)
    tf_index: ListedObject | None = None
    deepspeed_latest: ListedObject | None = None


def group_listing(listing: FolderListing) -> Grouping:
    """Split a delimiter listing of a checkpoints folder into candidate units (pure)."""
    grouping = Grouping()
    for full in sorted(listing.subfolders):
        if not full.startswith(listing.prefix) or full == listing.prefix:
            continue  # not a direct child: never ours to judge
        relative = full[len(listing.prefix) :]
        step = step_of(stem_of(relative.rstrip("/")))
        if step is None:
            grouping.unmanaged.append(Unmanaged(relative, "no step number in its name"))
        else:
            grouping.prefixes[relative] = step
    for obj in sorted(listing.files, key=lambda o: o.name):
        if not obj.name.startswith(listing.prefix):
            continue
        relative = obj.name[len(listing.prefix) :]
        if not relative or "/" in relative:
            continue
        if relative == TF_INDEX_FILE:
            grouping.tf_index = obj
            grouping.unmanaged.append(Unmanaged(relative, "TensorFlow checkpoint index"))
            continue
        if relative == DEEPSPEED_LATEST:
            grouping.deepspeed_latest = obj
            grouping.unmanaged.append(Unmanaged(relative, "DeepSpeed's latest file"))
            continue
        stem = stem_of(relative)
        if step_of(stem, bare_number=False) is None:
            grouping.unmanaged.append(Unmanaged(relative, "no step number in its name"))
            continue
        if not is_checkpoint_file(relative):
            grouping.unmanaged.append(Unmanaged(relative, "not a checkpoint file (metrics, logs, JSON...)"))
            continue
        grouping.stems.setdefault(stem, []).append(obj)
    return grouping


def file_units(grouping: Grouping, tf_named: frozenset[str]) -> list[Checkpoint]:
    """The FILES checkpoints of a grouping, judged complete by the rules above (pure)."""
    units = []
    plain = []
    for stem, objects in grouping.stems.items():
        names = [o.name.rsplit("/", 1)[-1] for o in objects]
        step = step_of(stem, bare_number=False)
        assert step is not None  # group_listing keeps only stems with a step
        if any(_is_tensorflow_file(n) for n in names):
            complete = tensorflow_stem_complete(stem, names, tf_named)
            evidence = Evidence.TENSORFLOW if complete else Evidence.TENSORFLOW_INCOMPLETE
            units.append(Checkpoint(stem, Kind.FILES, step, complete, tuple(objects), evidence=evidence))
        else:
            plain.append(Checkpoint(stem, Kind.FILES, step, True, tuple(objects), evidence=Evidence.FILES))
    return units + plain_stems_judged(plain)


def _kinds(checkpoint: Checkpoint) -> frozenset[str]:
    """What tells a stem's files apart: each name without the stem (`.pt`, `.optim.pt`)."""
    return frozenset(o.name.rsplit("/", 1)[-1][len(checkpoint.name) :] for o in checkpoint.objects)


def plain_stems_judged(stems: Sequence[Checkpoint]) -> list[Checkpoint]:
    """Plain stems (not TensorFlow's) re-judged when any of them holds several files: then the
    folder's layout saves a checkpoint as several files, uploaded one after another, and a
    stem's first file is listed while the next still uploads. Such a stem is complete only once
    a later stem exists (its writer moved on) and it holds every kind of file any stem of the
    folder holds: a later stem may be torn too (left by a run that died, before the next one
    resumed from an earlier stem), so what it holds vouches for nothing. The newest never is
    (pure)."""
    if all(len(c.objects) == 1 for c in stems):
        return list(stems)
    ordered = sorted_checkpoints(stems)
    every_kind = frozenset().union(*map(_kinds, ordered))
    judged = []
    for position, c in enumerate(ordered):
        if position == len(ordered) - 1:
            complete, evidence = False, Evidence.FILES_NEWEST
        elif _kinds(c) == every_kind:
            complete, evidence = True, Evidence.FILES_LATER
        else:
            complete, evidence = False, Evidence.FILES_KIND_MISSING
        judged.append(Checkpoint(c.name, c.kind, c.step, complete, c.objects, evidence=evidence))
    return judged


def judge_prefix_listing(
    relative: str,
    step: int,
    folder_prefix: str,
    files: Sequence[ListedObject],
    subfolders: Iterable[str],
    markers: Sequence[str],
) -> Checkpoint:
    """A prefix checkpoint judged from a listing of what is directly in it (pure): its markers,
    else (Hugging Face) trainer_state.json and the model files. Orbax temporary folders never
    count. `files`: full object names; `subfolders`: leaf names."""
    unit = f"{folder_prefix}{relative}"
    direct = {o.name[len(unit) :]: o for o in files if o.name.startswith(unit) and "/" not in o.name[len(unit) :]}
    if is_orbax_tmp(relative):
        return Checkpoint(relative, Kind.PREFIX, step, False, evidence=Evidence.ORBAX_TMP)
    found = tuple(direct[m] for m in markers if m in direct)
    if found:
        return Checkpoint(relative, Kind.PREFIX, step, True, found, evidence=Evidence.MARKER)
    if _HF_NAME.fullmatch(relative):
        if hf_checkpoint_complete(direct, subfolders):
            return Checkpoint(
                relative, Kind.PREFIX, step, True, (direct[HF_TRAINER_STATE],), evidence=Evidence.HF_TRAINER_STATE
            )
        return Checkpoint(relative, Kind.PREFIX, step, False, evidence=Evidence.HF_INCOMPLETE)
    return Checkpoint(relative, Kind.PREFIX, step, False, evidence=Evidence.NO_MARKER)


def with_contents(
    checkpoint: Checkpoint,
    folder_prefix: str,
    contents: Sequence[ListedObject],
    markers: Sequence[str],
) -> Checkpoint:
    """A PREFIX checkpoint with its contents listed, re-judged from them: a marker (or a Hugging
    Face trainer_state.json) that appeared since discovery makes it complete (never one whose
    kit marker lists files it lacks)."""
    unit = f"{folder_prefix}{checkpoint.name}"
    subfolders = {o.name[len(unit) :].split("/", 1)[0] for o in contents if "/" in o.name[len(unit) :]}
    judged = judge_prefix_listing(checkpoint.name, checkpoint.step, folder_prefix, contents, subfolders, markers)
    # A marker whose listed files are missing was there at discovery: it has not "appeared since".
    if checkpoint.complete or not judged.complete or checkpoint.evidence == Evidence.FILES_MISSING:
        return Checkpoint(
            checkpoint.name,
            checkpoint.kind,
            checkpoint.step,
            checkpoint.complete,
            checkpoint.objects,
            tuple(contents),
            checkpoint.evidence,
        )
    return Checkpoint(
        checkpoint.name, checkpoint.kind, checkpoint.step, True, judged.objects, tuple(contents), judged.evidence
    )


def sorted_checkpoints(checkpoints: Iterable[Checkpoint]) -> list[Checkpoint]:
    return sorted(checkpoints, key=Checkpoint.sort_key)


def newest_complete(checkpoints: Iterable[Checkpoint]) -> Checkpoint | None:
    """The checkpoint to resume from: the newest complete one by (step, update time). The pruner
    keeps it whatever its policy (while the request is active)."""
    complete = [c for c in sorted_checkpoints(checkpoints) if c.complete]
    return complete[-1] if complete else None


# The I/O, through a narrow interface so the rules above stay testable without storage.


class ListingStore(Protocol):
    def list_folder(self, prefix: str) -> FolderListing: ...

    def stat(self, name: str) -> ListedObject | None: ...

    def read_text(self, name: str) -> str | None: ...


def discover(
    store: ListingStore, prefix: str, markers: Sequence[str], *, try_first: str | None = None
) -> RequestCheckpoints:
    """List one checkpoints folder and judge each unit, with one check per prefix checkpoint
    once a marker has matched (`try_first`: the marker other requests' checkpoints had). A
    checkpoint without a marker costs what its framework's rule needs: one listing (Hugging Face),
    the `latest` file read once and a listing of the folder it names (DeepSpeed), one metadata
    read and, when it is committed, one listing (anything else). A complete folder costs a read
    of the kit's marker more, and one listing per folder holding the files it lists."""
    grouping = group_listing(store.list_folder(prefix))
    tf_named: frozenset[str] = frozenset()
    if grouping.tf_index is not None and any(
        _is_tensorflow_file(o.name) for objects in grouping.stems.values() for o in objects
    ):
        tf_named = parse_tf_index(store.read_text(grouping.tf_index.name) or "")
    units = file_units(grouping, tf_named)
    judge = _PrefixJudge(store, prefix, markers, last_hit=try_first, deepspeed_latest=grouping.deepspeed_latest)
    # Newest first: the freshest checkpoints decide what is kept, and set the marker order early.
    for relative, step in sorted(grouping.prefixes.items(), key=lambda kv: -kv[1]):
        units.append(judge.judge(relative, step))
    return RequestCheckpoints(prefix, tuple(sorted_checkpoints(units)), tuple(grouping.unmanaged), judge.last_hit)


def judge_folder(store: ListingStore, prefix: str, relative: str, markers: Sequence[str]) -> Checkpoint | None:
    """One prefix checkpoint (`step-000400/`) judged exactly as `discover` judges it, without
    listing the whole checkpoints folder: what the kit asks before saving a step (again). None
    when the name carries no step number (`discover` counts it as no checkpoint)."""
    step = step_of(stem_of(relative.rstrip("/")))
    if step is None:
        return None
    latest = store.stat(prefix + DEEPSPEED_LATEST) if _DEEPSPEED_NAME.fullmatch(relative) else None
    return _PrefixJudge(store, prefix, markers, deepspeed_latest=latest).judge(relative, step)


class _PrefixJudge:
    """Judges prefix checkpoints of one checkpoints folder by the rules in the module docstring,
    carrying what one judgement learnt to the next: the marker that matched last (tried first)
    and the tag DeepSpeed's `latest` file names (read once)."""

    def __init__(
        self,
        store: ListingStore,
        prefix: str,
        markers: Sequence[str],
        *,
        last_hit: str | None = None,
        deepspeed_latest: ListedObject | None = None,
    ) -> None:
        self.store = store
        self.prefix = prefix
        self.markers = markers
        self.last_hit = last_hit
        self.deepspeed_latest = deepspeed_latest
        self._deepspeed_tag: str | None = None

    def judge(self, relative: str, step: int) -> Checkpoint:
        return _checked_against_kit_marker(self.store, self.prefix, self._judge(relative, step))

    def _judge(self, relative: str, step: int) -> Checkpoint:
        store, prefix = self.store, self.prefix
        if is_orbax_tmp(relative):
            return Checkpoint(relative, Kind.PREFIX, step, False, evidence=Evidence.ORBAX_TMP)
        if _HF_NAME.fullmatch(relative):
            listing = store.list_folder(f"{prefix}{relative}")
            subfolders = [s[len(listing.prefix) :].rstrip("/") for s in listing.subfolders]
            return judge_prefix_listing(relative, step, prefix, listing.files, subfolders, self.markers)
        for marker in order_markers(self.markers, self.last_hit):
            found = store.stat(f"{prefix}{relative}{marker}")
            if found is not None:
                self.last_hit = marker
                return Checkpoint(relative, Kind.PREFIX, step, True, (found,), evidence=Evidence.MARKER)
        if _DEEPSPEED_NAME.fullmatch(relative) and self.deepspeed_latest is not None:
            if self._deepspeed_tag is None:
                self._deepspeed_tag = (store.read_text(self.deepspeed_latest.name) or "").strip()
            if self._deepspeed_tag != relative.rstrip("/"):
                return Checkpoint(relative, Kind.PREFIX, step, False, evidence=Evidence.NO_MARKER)
            if not any(o.name.endswith(DEEPSPEED_MODEL_STATES) for o in store.list_folder(prefix + relative).files):
                return Checkpoint(relative, Kind.PREFIX, step, False, evidence=Evidence.DEEPSPEED_INCOMPLETE)
            latest = (self.deepspeed_latest,)
            return Checkpoint(relative, Kind.PREFIX, step, True, latest, evidence=Evidence.DEEPSPEED_LATEST)
        return _judge_orbax_metadata(store, prefix, relative, step)


def _judge_orbax_metadata(store: ListingStore, prefix: str, relative: str, step: int) -> Checkpoint:
    """A folder without a marker: complete when Orbax's `_CHECKPOINT_METADATA` carries the commit
    timestamp and the folder holds something besides it (the items it commits; a copy cut short
    after the metadata, which sorts first, holds none)."""
    unit = f"{prefix}{relative}"
    if not orbax_committed(store.read_text(unit + ORBAX_METADATA)):
        return Checkpoint(relative, Kind.PREFIX, step, False, evidence=Evidence.NO_MARKER)
    listing = store.list_folder(unit)
    metadata = tuple(o for o in listing.files if o.name == unit + ORBAX_METADATA)
    if not listing.subfolders and len(listing.files) == len(metadata):
        return Checkpoint(relative, Kind.PREFIX, step, False, metadata, evidence=Evidence.ORBAX_METADATA_ALONE)
    return Checkpoint(relative, Kind.PREFIX, step, True, metadata, evidence=Evidence.ORBAX_METADATA)


def _checked_against_kit_marker(store: ListingStore, prefix: str, checkpoint: Checkpoint) -> Checkpoint:
    """A complete folder holding the kit's marker stays complete only while the files the marker
    lists are there at their sizes (deleted later: the previous complete checkpoint is the one
    to resume from, not a crash at every restart). Whichever marker was found first."""
    if checkpoint.kind != Kind.PREFIX or not checkpoint.complete:
        return checkpoint
    unit = f"{prefix}{checkpoint.name}"
    listed = listed_files(store.read_text(unit + KIT_MARKER))
    if not listed or files_present(store, unit, listed):
        return checkpoint
    return Checkpoint(
        checkpoint.name, checkpoint.kind, checkpoint.step, False, checkpoint.objects, evidence=Evidence.FILES_MISSING
    )
