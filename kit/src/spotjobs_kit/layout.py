"""The checkpoint layout rules: what a checkpoint is, its step, whether it is complete, and their order.

One definition for the whole code base: the pruner (shared/pruning/, through shared/pruning/checkpoints.py)
and the trainer kit (spotjobs_kit.Run) both judge checkpoints with these functions, so a trainer
resumes from exactly the checkpoint the pruner never deletes. Python 3.9+, standard library only.

A request's checkpoints live under `<output dir>checkpoints/`. A checkpoint is one direct child of
that folder, found by listing it with delimiter "/", never by listing every shard:

- a prefix (`step-000400/...`): complete when one of the configured commit markers
  (DEFAULT_COMMIT_MARKERS, overridable by SPOTJOBS_COMMIT_MARKERS: Orbax `commit_success.txt`, torch.distributed.checkpoint `.metadata`,
  TensorFlow `checkpoint`, the demo trainer's `COMMITTED`) exists directly under it. Markers are
  found with targeted existence checks, trying first the marker that matched last, so a request
  written by one framework costs one check per checkpoint.
- the files sharing one stem (`ckpt-000400.pt`; TensorFlow's `ckpt-5.index` with
  `ckpt-5.data-00000-of-00001`): complete once they exist, except TensorFlow stems (a `.index` or
  `.data-*` file), which are complete when the folder's `checkpoint` index file names the stem in
  `model_checkpoint_path` or `all_model_checkpoint_paths`, its `.index` exists and every data shard
  `0..N-1` of its `-of-N` count exists. TensorFlow writes the index file last, so a stem it does
  not name is still being written or was abandoned.

Checkpoints are ordered by the step number in their name, then by update time. A step number is
recognised in these forms only (case-insensitive, the word not inside a longer word, the number
not followed by a letter or digit, an optional `-`, `_`, `.` or `=` between them):

- after `step` or `global_step` (`step-000400`, `global_step1000`, Lightning's
  `epoch=3-step=1000`): preferred over the words below;
- else after `ckpt`, `checkpoint`, `epoch`, `iter` or `iteration` (`ckpt-000400.pt`, TensorFlow's
  `ckpt-5`, `checkpoint-12/`, `iter_0001000/`), the last such number;
- a directory named by a number alone (Orbax's `400/`). A file named by a bare number is not a
  checkpoint: a date-named log would otherwise look like the newest one.

Any other child (TensorFlow's `checkpoint` index, a README, `best/`, `vocab_32000.txt`,
`run-20240105-1200.log`) belongs to no one step: it is never deleted, and never counted as a
checkpoint.

The functions over listings are pure; `discover` does the little I/O through a `ListingStore`
(the pruner's GCS store, or one of the kit's storage backends). Names given to and returned by a
store are object names: the pruner's are bucket-relative (`requests/r1/checkpoints/step-000400/`),
the kit's are relative to the checkpoint directory (`step-000400/`, prefix "").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Protocol

CHECKPOINTS_FOLDER = "checkpoints/"
# Orbax, torch.distributed.checkpoint, TensorFlow's index file, and the kit's (and demo trainer's) marker.
DEFAULT_COMMIT_MARKERS = ("commit_success.txt", ".metadata", "checkpoint", "COMMITTED")
KIT_MARKER = "COMMITTED"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
TF_INDEX_FILE = "checkpoint"

_TF_SUFFIX = re.compile(r"\.(?:index|meta|data-\d+-of-\d+)$")
_TF_DATA = re.compile(r"\.data-(\d+)-of-(\d+)$")
_PLAIN_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,11}$")
_ORBAX_TMP = re.compile(r"\.orbax-checkpoint-tmp-\d+$")
# "<word><separator?><number>", the word not the tail of a longer one, the number not the head of
# a longer token (`checkpoint_3b` names a size, not a step).
_WORD_NUMBER = r"(?<![A-Za-z])(?:{words})[-_.=]?(\d+)(?![A-Za-z0-9])"
_STEP_WORD_NUMBER = re.compile(_WORD_NUMBER.format(words="global_step|step"), re.IGNORECASE)
_CHECKPOINT_WORD_NUMBER = re.compile(_WORD_NUMBER.format(words="checkpoint|ckpt|epoch|iteration|iter"), re.IGNORECASE)
_BARE_NUMBER = re.compile(r"\d+")
_TF_INDEX_ENTRY = re.compile(
    r'^\s*(?:model_checkpoint_path|all_model_checkpoint_paths)\s*:\s*"((?:[^"\\]|\\.)*)"', re.M
)


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


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint unit under a request's checkpoints folder."""

    name: str  # relative to the checkpoints folder: "step-000400/" or the stem "ckpt-5"
    kind: str
    step: int
    complete: bool
    # FILES: the unit's files. PREFIX: the commit marker(s) found in it.
    objects: tuple[ListedObject, ...] = ()
    # PREFIX only: every object under it, once listed (None: not listed).
    contents: tuple[ListedObject, ...] | None = None

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
    `model-400.tar.gz` -> `model-400`; `weights.000400.h5` -> `weights.000400`.
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


def order_markers(markers: Sequence[str], last_hit: str | None) -> list[str]:
    """Markers in the order to look for them: the one that matched last first."""
    if last_hit in markers:
        return [last_hit, *(m for m in markers if m != last_hit)]
    return list(markers)


# Grouping a listing into units.


@dataclass
class Grouping:
    prefixes: dict[str, int] = field(default_factory=dict)  # "step-000400/" -> step
    stems: dict[str, list[ListedObject]] = field(default_factory=dict)
    unmanaged: list[Unmanaged] = field(default_factory=list)
    tf_index: ListedObject | None = None


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
        stem = stem_of(relative)
        if step_of(stem, bare_number=False) is None:
            grouping.unmanaged.append(Unmanaged(relative, "no step number in its name"))
            continue
        grouping.stems.setdefault(stem, []).append(obj)
    return grouping


def file_units(grouping: Grouping, tf_named: frozenset[str]) -> list[Checkpoint]:
    """The FILES checkpoints of a grouping, judged complete by the rules above (pure)."""
    units = []
    for stem, objects in grouping.stems.items():
        names = [o.name.rsplit("/", 1)[-1] for o in objects]
        if any(_is_tensorflow_file(n) for n in names):
            complete = tensorflow_stem_complete(stem, names, tf_named)
        else:
            complete = True
        step = step_of(stem, bare_number=False)
        assert step is not None  # group_listing keeps only stems with a step
        units.append(Checkpoint(stem, Kind.FILES, step, complete, tuple(objects)))
    return units


def prefix_unit(relative: str, step: int, markers_found: Sequence[ListedObject]) -> Checkpoint:
    return Checkpoint(relative, Kind.PREFIX, step, bool(markers_found), tuple(markers_found))


def with_contents(
    checkpoint: Checkpoint,
    folder_prefix: str,
    contents: Sequence[ListedObject],
    markers: Sequence[str],
) -> Checkpoint:
    """A PREFIX checkpoint with its contents listed, re-judged from them: a marker that appeared
    since discovery (the trainer just committed) makes it complete."""
    marker_names = {f"{folder_prefix}{checkpoint.name}{m}" for m in markers}
    found = tuple(o for o in contents if o.name in marker_names)
    return Checkpoint(
        checkpoint.name,
        checkpoint.kind,
        checkpoint.step,
        checkpoint.complete or bool(found),
        found or checkpoint.objects,
        tuple(contents),
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
    once a marker has matched (`try_first`: the marker other requests' checkpoints had)."""
    grouping = group_listing(store.list_folder(prefix))
    tf_named: frozenset[str] = frozenset()
    if grouping.tf_index is not None and any(
        _is_tensorflow_file(o.name) for objects in grouping.stems.values() for o in objects
    ):
        tf_named = parse_tf_index(store.read_text(grouping.tf_index.name) or "")
    units = file_units(grouping, tf_named)
    last_hit = try_first
    # Newest first: the freshest checkpoints decide what is kept, and set the marker order early.
    for relative, step in sorted(grouping.prefixes.items(), key=lambda kv: -kv[1]):
        found = None
        for marker in order_markers(markers, last_hit):
            found = store.stat(f"{prefix}{relative}{marker}")
            if found is not None:
                last_hit = marker
                break
        units.append(prefix_unit(relative, step, [found] if found else []))
    return RequestCheckpoints(prefix, tuple(sorted_checkpoints(units)), tuple(grouping.unmanaged), last_hit)
