"""Properties of pruning over generated layouts: the newest complete checkpoint of every request
that is not past its retention survives (past it, with keep_final_checkpoint, the final one, or
the newest of all when none is complete), and nothing outside a request's checkpoints folder (nor
anything without a step number in it) is ever deleted."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.ledger.records import RequestRecord
from shared.ledger.states import TERMINAL_STATUSES, RequestStatus
from shared.pruning.execute import prune_requests
from shared.pruning.retention import Lifecycle
from tests.support.checkpoint_specs import Spec, checkpoint_specs, write
from tests.support.prune_store import LAYOUT, NOW, MemoryStore, folder, policy

statuses = st.sampled_from(
    [
        None,
        RequestStatus.RUNNING,
        RequestStatus.REQUEUED,
        RequestStatus.SUCCEEDED,
        RequestStatus.GAVE_UP,
        RequestStatus.FAILED,
    ]
)
requests = st.lists(
    st.tuples(
        statuses, st.integers(0, 60 * 24 * 14), st.none() | st.integers(-2, 30), st.lists(checkpoint_specs, max_size=12)
    ),
    min_size=1,
    max_size=4,
)

# Objects that share a prefix string with managed names but are not in any checkpoints folder.
OUTSIDE = (
    "requests/{rid}/model/saved_model.pb",
    "requests/{rid}/logs/events.out.tfevents.1",
    "requests/{rid}/checkpoints-old/step-000001/COMMITTED",
    "requests/{rid}/checkpoints",
    "requestsX/{rid}/checkpoints/step-000001/shard",
    "other/{rid}/checkpoints/ckpt-1.pt",
    "requests/README-{rid}",
)
# Numbered user files too: a number that follows no checkpoint word is not a step.
UNMANAGED = (
    "checkpoint",
    "best/weights.bin",
    "notes.txt",
    "vocab_32000.txt",
    "run-20240105-1200.log",
    "eval-7/metrics.json",
)


def effective_complete(spec: Spec) -> bool:
    return spec.complete or spec.kind == "file"  # a file checkpoint is complete once it exists


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=requests, keep_final=st.booleans())
def test_newest_complete_survives_and_nothing_outside_is_touched(layout, keep_final: bool) -> None:
    store = MemoryStore()
    records: dict[str, RequestRecord] = {}
    protected: set[str] = set()  # must survive
    newest_complete: dict[str, list[list[str]]] = {}
    for r, (status, finished_minutes, keep_last, specs) in enumerate(layout):
        rid = f"req-{r}"
        for pattern in OUTSIDE:
            protected.add(store.put(pattern.format(rid=rid)).name)
        for name in UNMANAGED:
            protected.add(store.put(folder(rid) + name).name)
        tf_stems = []
        complete_units: list[tuple[tuple[int, datetime], list[str]]] = []
        every_unit: list[tuple[tuple[int, datetime], list[str]]] = []
        for i, spec in enumerate(specs):
            unit, names = write(store, rid, i, spec)
            if spec.kind == "tensorflow" and spec.complete:
                tf_stems.append(unit)
            key = (spec.step, NOW - timedelta(minutes=spec.minutes_old))
            every_unit.append((key, names))
            if effective_complete(spec):
                complete_units.append((key, names))
        store.texts[folder(rid) + "checkpoint"] = "".join(f'all_model_checkpoint_paths: "{s}"\n' for s in tf_stems)
        if status is not None:
            record = RequestRecord(rid, {"checkpoints": {"keep_last": keep_last}} if keep_last is not None else {}, "")
            record.status = status
            if status in TERMINAL_STATUSES:
                record.finished_at = (NOW - timedelta(minutes=finished_minutes)).isoformat()
            records[rid] = record
        lifecycle = policy().lifecycle_of(records.get(rid), NOW)
        if complete_units and (lifecycle != Lifecycle.RETENTION_EXPIRED or keep_final):
            best = max(key for key, _ in complete_units)
            newest_complete[rid] = [names for key, names in complete_units if key == best]
        elif every_unit and lifecycle == Lifecycle.RETENTION_EXPIRED and keep_final:
            # Nothing complete: the newest checkpoint is kept, complete or not.
            best = max(key for key, _ in every_unit)
            newest_complete[rid] = [names for key, names in every_unit if key == best]

    before = store.names()
    result = prune_requests(
        store,
        store.list_request_ids(LAYOUT.root),
        read_record=records.get,
        layout=LAYOUT,
        policy=policy(keep_final_checkpoint=keep_final),
        workers=3,
        now=NOW,
    )

    assert result.summary["errors"] == 0
    after = store.names()
    assert protected <= after
    for name in before - after:
        rid = name.split("/")[1]
        assert name.startswith(folder(rid)), name
    for rid, candidates in newest_complete.items():
        # With equal (step, time) any one of them is "the newest": at least one survives whole.
        assert any(set(names) <= after for names in candidates), rid
