"""Checkpoint layouts the test suite uses, in one table, and a mirror of a MemoryStore request
folder onto a real directory (what the trainer kit sees through FUSE or on local disk).
No tests here."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from tests.support.prune_store import (
    NOW,
    MemoryStore,
    file_checkpoint,
    folder,
    prefix_checkpoint,
    tf_checkpoint,
    tf_index,
)

HOUR = timedelta(hours=1)
Layout = Callable[[MemoryStore, str], None]


def _every_format(store: MemoryStore, rid: str) -> None:  # test_checkpoints: discover judges every format
    prefix_checkpoint(store, rid, "step-000100/", marker="COMMITTED")
    prefix_checkpoint(store, rid, "step-000200/", marker=None)
    prefix_checkpoint(store, rid, "300/", marker="commit_success.txt")
    prefix_checkpoint(store, rid, "checkpoint-400/", marker=".metadata")
    file_checkpoint(store, rid, "ckpt-000500.pt")
    tf_checkpoint(store, rid, "ckpt-600")
    tf_checkpoint(store, rid, "ckpt-700", index=False)
    tf_index(store, rid, ["ckpt-600"])


def _equal_steps(store: MemoryStore, rid: str) -> None:  # test_checkpoints: ties order by time
    file_checkpoint(store, rid, "ckpt-000100.pt", at=NOW)
    prefix_checkpoint(store, rid, "step-000100/", at=NOW - HOUR)


def _user_files(store: MemoryStore, rid: str) -> None:  # test_prune: numbered user files
    for name in ("ckpt-000400.pt", "ckpt-000500.pt", "run-20240105-1200.log", "vocab_32000.txt"):
        file_checkpoint(store, rid, name)


def _tensorflow(store: MemoryStore, rid: str) -> None:  # test_prune: TF index, stem being written
    for step in (1, 2, 3):
        tf_checkpoint(store, rid, f"ckpt-{step}", at=NOW - 3 * HOUR)
    tf_checkpoint(store, rid, "ckpt-4", index=False, at=NOW)
    tf_index(store, rid, ["ckpt-1", "ckpt-2", "ckpt-3"])


def _tf_not_named(store: MemoryStore, rid: str) -> None:  # a complete-looking stem the index omits
    tf_checkpoint(store, rid, "ckpt-5")
    tf_checkpoint(store, rid, "ckpt-6")
    tf_index(store, rid, ["ckpt-5"])


def _prefixes(store: MemoryStore, rid: str) -> None:  # test_prune: the common case
    for step in (100, 200, 300):
        prefix_checkpoint(store, rid, f"step-{step:06d}/", shards=3)


def _newest_incomplete(store: MemoryStore, rid: str) -> None:  # a save cut by SIGKILL
    for step in (100, 200):
        prefix_checkpoint(store, rid, f"step-{step:06d}/")
    prefix_checkpoint(store, rid, "step-000300/", marker=None)


def _nothing_complete(store: MemoryStore, rid: str) -> None:
    prefix_checkpoint(store, rid, "step-000100/", marker=None)
    tf_checkpoint(store, rid, "ckpt-2", index=False)


def _late_write(store: MemoryStore, rid: str) -> None:  # test_prune: a write after the marker
    for step in (100, 200, 300):
        prefix_checkpoint(store, rid, f"step-{step:06d}/", at=NOW - 5 * HOUR)
    store.put(f"{folder(rid)}step-000100/late.json", at=NOW - 10 * timedelta(minutes=1))


def _frameworks(store: MemoryStore, rid: str) -> None:  # Orbax, Lightning, DeepSpeed, Megatron
    prefix_checkpoint(store, rid, "400/", marker="commit_success.txt")
    file_checkpoint(store, rid, "epoch=3-step=1000.ckpt")
    prefix_checkpoint(store, rid, "global_step900/", marker=".metadata")
    prefix_checkpoint(store, rid, "iter_0001100/", marker=None)
    prefix_checkpoint(store, rid, "best/", marker="COMMITTED")  # no step: never a checkpoint


def _with_kit_runs(store: MemoryStore, rid: str) -> None:  # the kit's own run objects
    _prefixes(store, rid)
    store.put(f"{folder(rid)}_spotjobs_runs/attempt-1-run-0000.json")
    store.put(f"{folder(rid)}_spotjobs_runs/attempt-1-run-0001.json")


def _empty(store: MemoryStore, rid: str) -> None:
    pass


LAYOUTS: dict[str, Layout] = {
    "every format": _every_format,
    "equal steps": _equal_steps,
    "numbered user files": _user_files,
    "tensorflow": _tensorflow,
    "tensorflow stem not in the index": _tf_not_named,
    "prefixes": _prefixes,
    "newest incomplete": _newest_incomplete,
    "nothing complete": _nothing_complete,
    "a write after the marker": _late_write,
    "framework names": _frameworks,
    "with the kit's run objects": _with_kit_runs,
    "empty": _empty,
}


def mirror(store: MemoryStore, rid: str, root: Path) -> None:
    """Write request `rid`'s checkpoints folder under `root`, with the same names, sizes, texts
    and update times (file modification times)."""
    base = folder(rid)
    root.mkdir(parents=True, exist_ok=True)
    for name, obj in store.objects.items():
        if not name.startswith(base):
            continue
        path = root / name[len(base) :]
        path.parent.mkdir(parents=True, exist_ok=True)
        text = store.texts.get(name)
        path.write_bytes(text.encode() if text is not None else b"x" * obj.size)
        stamp = int(obj.updated.timestamp() * 1_000_000_000)
        os.utime(path, ns=(stamp, stamp))
