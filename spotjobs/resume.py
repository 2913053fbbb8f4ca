"""`spotjobs resubmit` resumes: the new request starts from the newest complete checkpoint of the
old one.

The checkpoint is copied into the new request's own checkpoints folder before the new request is
published, its commit marker last, so:
- it is never shared with an attempt of the old request (a copy; the old request has ended, and
  its folder stays as the pruner leaves it);
- it is never pruned while the new request may need it: it is the newest complete checkpoint of
  an active request's folder, which the pruner always keeps (shared/pruning/retention.py);
- an interrupted copy has no marker, so it is an incomplete checkpoint the trainer kit never
  resumes from (kit layout rules, the same for the kit and the pruner), and a second resubmit
  copies again.
The trainer then resumes from it as after a preemption: the kit reads the newest complete
checkpoint of its folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotjobs_kit.layout import discover, newest_complete

from shared.pruning.folders import CheckpointLayout
from shared.pruning.store import GcsPruneStore

if TYPE_CHECKING:
    from google.cloud.storage import Client

    from shared.settings import Settings


@dataclass(frozen=True)
class CarriedCheckpoint:
    name: str  # relative to the checkpoints folder, e.g. "step-000400/"
    step: int
    objects: int

    def to_json(self) -> dict[str, object]:
        return {"checkpoint": self.name, "step": self.step, "objects": self.objects}


def carry_newest_checkpoint(
    client: Client, settings: Settings, old_request_id: str, new_request_id: str
) -> CarriedCheckpoint | None:
    """Copy the newest complete checkpoint of `old_request_id` into `new_request_id`'s folder;
    None when the old request has none (the new one starts from zero)."""
    layout = CheckpointLayout.from_settings(settings)
    bucket = client.bucket(layout.bucket)
    store = GcsPruneStore(bucket, verify_generation=False)
    old_folder, new_folder = layout.folder_for(old_request_id), layout.folder_for(new_request_id)
    newest = newest_complete(discover(store, old_folder, settings.commit_markers).checkpoints)
    if newest is None:
        return None
    if newest.name.endswith("/"):  # a folder checkpoint: everything under it
        names = [o.name for o in store.list_all(f"{old_folder}{newest.name}")]
    else:  # a file checkpoint: its files
        names = [o.name for o in newest.objects]
    markers = {f"{old_folder}{newest.name}{marker}" for marker in settings.commit_markers}
    # The commit marker last: a copy cut short is an incomplete checkpoint, never resumed from.
    for name in sorted(names, key=lambda n: n in markers):
        bucket.copy_blob(bucket.blob(name), bucket, f"{new_folder}{name[len(old_folder) :]}")
    return CarriedCheckpoint(newest.name, newest.step, len(names))
