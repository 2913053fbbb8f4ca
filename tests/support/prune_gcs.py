"""Helpers for the prune tests against fake-gcs-server: checkpoint layouts in each format, written
in parallel, and what survives. No tests here."""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from shared.ledger.records import RequestRecord
from shared.pruning.execute import prune_requests
from shared.pruning.folders import CheckpointLayout
from shared.pruning.report import PruneResult
from shared.pruning.retention import PrunePolicy
from shared.pruning.store import GcsPruneStore
from tests.support.framework_layouts import hf_trainer, orbax_renamed_legacy

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

ROOT = "requests/"
# Past every grace period: objects written by the test count as hours old.
LATER = datetime.now(UTC) + timedelta(hours=3)


def policy(**overrides: object) -> PrunePolicy:
    values: dict[str, object] = {
        "keep_last": 2,
        "keep_last_ceiling": 20,
        "incomplete_grace_seconds": 3600.0,
        "finished_retention_seconds": 7 * 86400.0,
        "keep_final_checkpoint": True,
        "commit_markers": ("commit_success.txt", ".metadata", "checkpoint", "COMMITTED"),
    }
    values.update(overrides)
    return PrunePolicy(**values)  # type: ignore[arg-type]


def folder(request_id: str) -> str:
    return f"{ROOT}{request_id}/checkpoints/"


def upload(bucket: Bucket, names: Iterable[str], data: bytes = b"x" * 16) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: bucket.blob(n).upload_from_string(data), names))


@dataclass
class Layout:
    """Objects of one request in one format; `expected` are the relative names that must survive."""

    request_id: str
    batches: list[list[str]] = field(default_factory=list)  # written in order (markers last)
    expected: set[str] = field(default_factory=set)
    tf_index: str | None = None

    texts: dict[str, str] = field(default_factory=dict)  # objects whose content matters

    def write(self, bucket: Bucket) -> None:
        for batch in self.batches:
            upload(bucket, [n for n in batch if n not in self.texts])
            upload_texts(bucket, {n: t for n, t in self.texts.items() if n in batch})
        if self.tf_index is not None:
            bucket.blob(folder(self.request_id) + "checkpoint").upload_from_string(self.tf_index)


def upload_texts(bucket: Bucket, texts: dict[str, str]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: bucket.blob(item[0]).upload_from_string(item[1]), texts.items()))


def _name(fmt: str, step: int) -> str:
    return {
        "demo": f"step-{step:06d}/",
        "orbax": f"{step}/",
        "orbax_legacy": f"{step}/",
        "torch_dcp": f"checkpoint-{step}/",
        "hf": f"checkpoint-{step}/",
        "file": f"ckpt-{step:06d}.pt",
        "lightning": f"epoch=0-step={step}.ckpt",
        "tensorflow": f"ckpt-{step}",
    }[fmt]


# What the framework writes, as observed (tests/unit/framework_layouts.py): all but the last
# object are data, the last one completes the checkpoint.
_OBSERVED = {"hf": hf_trainer, "orbax_legacy": orbax_renamed_legacy}


_MARKER = {"demo": "COMMITTED", "orbax": "commit_success.txt", "torch_dcp": ".metadata"}
_SHARDS = {
    "demo": ["shard-0.json", "shard-1.json"],
    "orbax": ["_METADATA", "default/array.zarr/0.0", "default/array.zarr/.zarray"],
    "torch_dcp": ["__0_0.distcp", "__1_0.distcp"],
}


def checkpoint_objects(fmt: str, step: int, *, complete: bool) -> tuple[list[str], list[str]]:
    """(the unit's data objects, its commit objects) as names relative to the checkpoints folder."""
    name = _name(fmt, step)
    if fmt in ("file", "lightning"):
        return [name], []
    if fmt in _OBSERVED:
        writes = [n for n, _ in _OBSERVED[fmt](step).writes]
        return writes[:-1], (writes[-1:] if complete else [])
    if fmt == "tensorflow":
        data = [f"{name}.data-00000-of-00002", f"{name}.data-00001-of-00002"]
        return data, ([f"{name}.index"] if complete else [])
    return [name + s for s in _SHARDS[fmt]], ([name + _MARKER[fmt]] if complete else [])


def format_layout(
    request_id: str, fmt: str, count: int, *, with_incomplete: bool, keep_last: int = 2, with_metrics: bool = False
) -> Layout:
    """`count` complete checkpoints (steps 100, 200, ...); with_incomplete adds an abandoned one
    before the first (deleted once past grace) and one in progress after the last (kept).
    Files are complete once they exist, so the file formats have no incomplete variant.
    `with_metrics`: beside each checkpoint, a metrics file with its step (`eval_step_100.json`),
    never a checkpoint, never deleted."""
    layout = Layout(request_id)
    if fmt in _OBSERVED:
        for step in [50, *(100 * (i + 1) for i in range(count + 1))]:
            layout.texts.update((folder(request_id) + n, t) for n, t in _OBSERVED[fmt](step).writes if t is not None)
    steps = [100 * (i + 1) for i in range(count)]
    data: list[str] = []
    commits: list[str] = []
    complete_names: list[set[str]] = []
    for step in steps:
        d, c = checkpoint_objects(fmt, step, complete=True)
        data += d
        commits += c
        complete_names.append(set(d) | set(c))
    in_progress: set[str] = set()
    if with_incomplete and fmt not in ("file", "lightning"):
        d, _ = checkpoint_objects(fmt, 50, complete=False)
        data += d
        d, _ = checkpoint_objects(fmt, steps[-1] + 100, complete=False)
        data += d
        in_progress = set(d)
    metrics = [f"eval_step_{step}.json" for step in steps] if with_metrics else []
    layout.batches = [[folder(request_id) + n for n in data + metrics], [folder(request_id) + n for n in commits]]
    layout.expected |= set(metrics)
    for names in complete_names[-keep_last:]:
        layout.expected |= names
    layout.expected |= in_progress
    if fmt == "tensorflow":
        # TensorFlow's CheckpointManager names its last five in the index file, newest last.
        named = [_name(fmt, s) for s in steps][-5:]
        layout.tf_index = "".join(f'all_model_checkpoint_paths: "{n}"\n' for n in named)
        layout.tf_index += f'model_checkpoint_path: "{named[-1]}"\n'
        layout.expected.add("checkpoint")
    return layout


def surviving(bucket: Bucket, request_id: str) -> set[str]:
    base = folder(request_id)
    return {b.name[len(base) :] for b in bucket.client.list_blobs(bucket, prefix=base)}


def all_names(bucket: Bucket) -> set[str]:
    return {b.name for b in bucket.client.list_blobs(bucket)}


def run_prune(
    bucket: Bucket,
    request_ids: Iterable[str] | None = None,
    *,
    records: dict[str, RequestRecord] | None = None,
    now: datetime = LATER,
    store: GcsPruneStore | None = None,
    workers: int = 8,
    **overrides: object,
) -> PruneResult:
    # fake-gcs-server ignores ifGenerationMatch on DELETE: check the generation first, as the
    # functions do whenever STORAGE_EMULATOR_HOST is set.
    store = store or GcsPruneStore(bucket, verify_generation=True)
    layout = CheckpointLayout(bucket.name, ROOT)
    ids = request_ids if request_ids is not None else store.list_request_ids(ROOT)
    records = records or {}
    return prune_requests(
        store, ids, read_record=records.get, layout=layout, policy=policy(**overrides), workers=workers, now=now
    )
