"""A request's checkpoints folder is judged over one listing up to GCS's largest page, 1000
objects, and over the live store past it (shared/pruning/snapshot.py `SNAPSHOT_OBJECTS`): the
mutation pass found the bound untested at its edge."""

from __future__ import annotations

from typing import Any

import pytest

from shared.pruning.snapshot import FolderSnapshot, discovery_store
from shared.pruning.store import GcsPruneStore
from sim.gcs import MemoryStorage
from tests.support.prune_store import NOW

GCS_LARGEST_PAGE = 1000  # what one listing call returns at most


def store_with(objects: int) -> GcsPruneStore:
    bucket: Any = MemoryStorage(clock=lambda: NOW).client().bucket("ckpt-bucket")
    for i in range(objects):
        bucket.blob(f"requests/r1/checkpoints/step-000100/shard-{i:05d}").upload_from_string(b"x")
    return GcsPruneStore(bucket, verify_generation=False)


@pytest.mark.parametrize(("objects", "snapshot"), [(GCS_LARGEST_PAGE, True), (GCS_LARGEST_PAGE + 1, False)])
def test_a_folder_of_one_full_page_is_judged_over_its_listing_and_one_more_object_live(
    objects: int, snapshot: bool
) -> None:
    store = store_with(objects)
    judged_over = discovery_store(store, "requests/r1/checkpoints/")
    assert isinstance(judged_over, FolderSnapshot) is snapshot
    assert (judged_over is store) is not snapshot
    assert store.calls()["list"] == 1
