"""What checkpoints a request has, and which of them are complete: the pruner's side.

A request's checkpoints live under `<output dir>checkpoints/` (Vertex sets AIP_CHECKPOINT_DIR
there from the job's baseOutputDirectory). The rules that decide what a checkpoint is, its step,
whether it is complete and how checkpoints are ordered live in one place, `spotjobs_kit.layout`
(the trainer kit, kit/src/spotjobs_kit/), so a trainer using the kit resumes from exactly the
checkpoint the pruner never deletes. This module holds the pruner's store interface; discovery
itself (`spotjobs_kit.layout.discover`, one folder listing plus targeted marker checks) is the
kit's, run over the pruner's GCS store.
"""

from __future__ import annotations

from typing import Protocol

from spotjobs_kit.layout import ListedObject, ListingStore


class CheckpointStore(ListingStore, Protocol):
    """What the pruner reads: a delimiter listing, marker checks, TF index reads (the kit's
    `ListingStore`), and full listings of prefix checkpoints it may delete."""

    def list_all(self, prefix: str) -> list[ListedObject]: ...
