"""Checkpoint folders as property-test data: specs and writing them into a store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from hypothesis import strategies as st

from tests.support.prune_store import NOW, MemoryStore, folder

KINDS = ("prefix", "file", "tensorflow")


MARKERS = ("commit_success.txt", ".metadata", "COMMITTED")


@dataclass(frozen=True)
class Spec:
    kind: str
    step: int
    complete: bool
    minutes_old: int
    marker: str


checkpoint_specs = st.builds(
    Spec,
    kind=st.sampled_from(KINDS),
    step=st.integers(0, 40),
    complete=st.booleans(),
    minutes_old=st.integers(0, 60 * 24 * 10),
    marker=st.sampled_from(MARKERS),
)


def write(store: MemoryStore, rid: str, index: int, spec: Spec) -> tuple[str, list[str]]:
    """Write one checkpoint; returns its unit name and object names."""
    at = NOW - timedelta(minutes=spec.minutes_old)
    base = folder(rid)
    if spec.kind == "prefix":
        unit = f"step-{spec.step:06d}-{index}/"
        names = [f"{base}{unit}shard-{i}" for i in range(2)]
        if spec.complete:
            names.append(f"{base}{unit}{spec.marker}")
    elif spec.kind == "file":
        unit = f"model{index}-step{spec.step}"
        names = [f"{base}{unit}.pt"]
    else:
        unit = f"ckpt{index}_step-{spec.step}"
        names = [f"{base}{unit}.data-00000-of-00001"] + ([f"{base}{unit}.index"] if spec.complete else [])
    for name in names:
        store.put(name, at=at)
    return unit, names
