"""The texts a prune store remembers by generation (shared/pruning/store.py `read_listed`): the
most recently used `LISTED_TEXTS_KEPT` of a client, the least recently used forgotten first. The
mutation pass found the bound and the order of forgetting untested."""

from __future__ import annotations

from typing import Any

import pytest

import shared.pruning.store as prune_store
from shared.pruning.store import GcsPruneStore
from sim.gcs import MemoryStorage
from tests.support.prune_store import NOW


def test_the_least_recently_read_text_is_forgotten_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prune_store, "LISTED_TEXTS_KEPT", 2)
    bucket: Any = MemoryStorage(clock=lambda: NOW).client().bucket("ckpt-bucket")
    for name in ("a", "b", "c"):
        bucket.blob(f"requests/r1/checkpoints/{name}/COMMITTED").upload_from_string(name)
    store = GcsPruneStore(bucket, verify_generation=False)
    a, b, c = store.list_tree("requests/r1/", limit=10) or []

    def reads(*objects: Any) -> int:
        before = store.calls()["read"]
        assert [store.read_listed(o) for o in objects] == [o.name.split("/")[-2] for o in objects]
        return store.calls()["read"] - before

    assert reads(a, b) == 2
    assert reads(a) == 0  # remembered, and now the most recently read
    assert reads(c) == 1  # b, the least recently read, is forgotten
    assert reads(a, c) == 0
    assert reads(b) == 1
