"""`spotjobs resubmit` resumes: the new request starts from the newest complete checkpoint of the
old one.

The checkpoint is copied into the new request's own checkpoints folder before the new request is
published, so:
- the new request's folder is empty before the copy (`CheckpointCarrier.folder_empty`; resubmit
  picks or accepts no other id), and every object is written only where none exists: what the
  kit finds there is the copy, never another run's checkpoints under a reused id;
- the copy writes what makes the checkpoint complete after everything else (its completion
  objects, its commit markers, the kit's marker last: `layout.copy_order`), then what lives
  beside the folder (DeepSpeed's `latest`, TensorFlow's `checkpoint` index:
  `layout.evidence_beside`), so a copy cut short is an incomplete checkpoint the kit never resumes
  from, and a second resubmit copies again, under another id;
- the copy is checked before anything is published: every object at its size, and the newest
  complete checkpoint of the new folder, by the kit's rules, is the one copied at its step;
- it is never shared with an attempt of the old request (a copy; the old request has ended, and
  its folder stays as the pruner leaves it), and never pruned while the new request may need it:
  it is the newest complete checkpoint of an active request's folder, which the pruner always
  keeps (shared/pruning/retention.py).
The trainer then resumes from it as after a preemption: the kit reads the newest complete
checkpoint of its folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotjobs_kit.layout import (
    CHECKPOINTS_FOLDER,
    Checkpoint,
    Kind,
    ListedObject,
    copy_order,
    discover,
    evidence_beside,
    newest_complete,
)

from shared.errors import SpotjobsError
from shared.pruning.folders import CheckpointLayout
from shared.pruning.store import GcsPruneStore

if TYPE_CHECKING:
    from google.cloud.storage import Client

    from shared.settings import Settings


class ResumeError(SpotjobsError):
    """The checkpoint could not be carried over whole: the new request must not be published."""


@dataclass(frozen=True)
class CarriedCheckpoint:
    name: str  # relative to the checkpoints folder, e.g. "step-000400/"
    step: int
    objects: int

    def to_json(self) -> dict[str, object]:
        return {"checkpoint": self.name, "step": self.step, "objects": self.objects}


class CopyStore(GcsPruneStore):
    """The pruner's listings and reads, plus writes that never replace an object."""

    def copy(self, source: ListedObject, target: str) -> None:
        """Copy the listed generation of `source` to `target`, which must not exist."""
        from google.api_core.exceptions import PreconditionFailed

        try:
            # ifGenerationMatch=0: only if no live object has the name; ifSourceGenerationMatch:
            # the version judged complete (https://cloud.google.com/storage/docs/request-preconditions).
            self._bucket.copy_blob(
                self._bucket.blob(source.name),
                self._bucket,
                target,
                if_generation_match=0,
                if_source_generation_match=source.generation,
            )
        except PreconditionFailed as exc:
            raise ResumeError(f"{target} exists, or {source.name} changed, while copying") from exc

    def create_text(self, name: str, text: str) -> None:
        from google.api_core.exceptions import PreconditionFailed

        try:
            self._bucket.blob(name).upload_from_string(text, if_generation_match=0)
        except PreconditionFailed as exc:
            raise ResumeError(f"{name} exists while copying") from exc

    def holds_anything(self, prefix: str) -> bool:
        self._count("list")
        return next(iter(self._bucket.client.list_blobs(self._bucket, prefix=prefix, max_results=1)), None) is not None


class CheckpointCarrier:
    """Carries the newest complete checkpoint of one request into another's empty folder."""

    def __init__(self, client: Client, settings: Settings) -> None:
        self.layout = CheckpointLayout.from_settings(settings)
        self.store = CopyStore(client.bucket(self.layout.bucket), verify_generation=False)
        self.markers = settings.commit_markers

    def request_folder(self, request_id: str) -> str:
        """`<root><request_id>/`: the request's output directory, its checkpoints folder in it."""
        return self.layout.folder_for(request_id)[: -len(CHECKPOINTS_FOLDER)]

    def folder_uri(self, request_id: str) -> str:
        return f"gs://{self.layout.bucket}/{self.request_folder(request_id)}"

    def folder_empty(self, request_id: str) -> bool:
        """Whether nothing is stored under the request's folder (after ledger retention, an id
        the ledger has forgotten may still name another run's checkpoints)."""
        return not self.store.holds_anything(self.request_folder(request_id))

    def carry(self, old_request_id: str, new_request_id: str) -> CarriedCheckpoint | None:
        """Copy the newest complete checkpoint of `old_request_id` into `new_request_id`'s
        folder (empty: see `folder_empty`) and check the copy; None when the old request has
        none (the new one starts from zero). Raises ResumeError when the copy is not whole."""
        old_folder, new_folder = self.layout.folder_for(old_request_id), self.layout.folder_for(new_request_id)
        found = discover(self.store, old_folder, self.markers)
        newest = newest_complete(found.checkpoints)
        if newest is None:
            return None
        if newest.kind == Kind.PREFIX:
            objects = copy_order(newest, old_folder, self.store.list_all(old_folder + newest.name), self.markers)
        else:  # a file checkpoint: its files (what completes it lies beside them)
            objects = sorted(newest.objects, key=lambda o: o.name)
        for obj in objects:
            self.store.copy(obj, new_folder + obj.name[len(old_folder) :])
        beside = evidence_beside(newest, found.unmanaged)
        for name, text in beside.items():
            self.store.create_text(new_folder + name, text)
        self._check(newest, objects, old_folder, new_folder)
        return CarriedCheckpoint(newest.name, newest.step, len(objects) + len(beside))

    def _check(self, newest: Checkpoint, objects: list[ListedObject], old_folder: str, new_folder: str) -> None:
        """The copy holds every object at its size, and is, by the kit's rules, the newest
        complete checkpoint of its folder at the same step."""
        copied = {o.name[len(new_folder) :]: o.size for o in self.store.list_all(new_folder)}
        differ = [o.name[len(old_folder) :] for o in objects if copied.get(o.name[len(old_folder) :]) != o.size]
        if differ:
            raise ResumeError(f"the copy of {newest.name} differs from it: {', '.join(differ[:5])}")
        resumed = newest_complete(discover(self.store, new_folder, self.markers).checkpoints)
        if resumed is None or (resumed.name, resumed.step) != (newest.name, newest.step):
            found = f"{resumed.name} (step {resumed.step})" if resumed else "no complete checkpoint"
            raise ResumeError(f"the copy of {newest.name} (step {newest.step}) resumes from {found}")
