"""The pruner and the kit over what real frameworks write (tests/unit/framework_layouts.py): each
save complete or torn at any file, any lifecycle. The newest checkpoint its framework completed
survives whole and is where the kit resumes; a request past its retention with nothing complete
keeps its newest; nothing that is not a checkpoint (metrics, logs, BackupAndRestore's folder,
DeepSpeed's `latest`, Lightning's `last.ckpt`) is ever deleted."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spotjobs_kit import Run

from shared.ledger.records import RequestRecord
from shared.ledger.states import RequestStatus
from shared.pruning.execute import prune_requests
from shared.pruning.retention import NEWEST_KEPT_WITHOUT_COMPLETE, Lifecycle
from tests.support.checkpoint_layouts import mirror
from tests.support.framework_layouts import NEVER_CHECKPOINTS, SAVES, Save, write_save
from tests.support.prune_store import LAYOUT, NOW, MemoryStore, folder, policy

saves = st.lists(
    st.tuples(st.sampled_from(sorted(SAVES)), st.integers(1, 9999), st.none() | st.integers(1, 12)),
    max_size=8,
    unique_by=lambda s: s[1],  # one checkpoint per step: "the newest" is one unit
)
lifecycles = st.sampled_from(["untracked", "running", "finished", "expired"])


def record_for(lifecycle: str) -> RequestRecord | None:
    if lifecycle == "untracked":
        return None
    if lifecycle == "running":
        return RequestRecord("r1", {}, "", status=RequestStatus.RUNNING)
    rec = RequestRecord("r1", {}, "", status=RequestStatus.SUCCEEDED)
    rec.finished_at = (NOW - timedelta(days=30 if lifecycle == "expired" else 1)).isoformat()
    return rec


def unit_names(save: Save, written: list[str]) -> set[str]:
    """The written objects that belong to the save's unit (not `latest`, not `last.ckpt`)."""
    start = folder("r1") + (save.unit if save.unit.endswith("/") else save.unit + ".")
    return {n for n in written if n.startswith(start)}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=saves, lifecycle=lifecycles, keep_last=st.integers(1, 3), keep_final=st.booleans())
def test_framework_checkpoints_through_the_pruner_and_the_kit(
    specs, lifecycle: str, keep_last: int, keep_final: bool
) -> None:
    store = MemoryStore()
    never = {store.put(folder("r1") + n, at=NOW - timedelta(days=40)).name for n in NEVER_CHECKPOINTS}
    written: list[tuple[Save, list[str], bool]] = []
    for i, (framework, step, cut) in enumerate(specs):
        save = SAVES[framework](step)
        cut = None if cut is None or cut >= len(save.writes) else cut
        names = write_save(store, "r1", save, cut=cut, at=NOW - timedelta(days=20) + timedelta(minutes=i))
        done = save.complete_after is not None and len(names) >= save.complete_after
        written.append((save, names, done))
    latest = store.texts.get(folder("r1") + "latest")
    complete = [
        (save, names)
        for save, names, done in written
        if done and (save.framework != "deepspeed" or latest == save.unit.rstrip("/"))
    ]
    newest = max(complete, key=lambda c: c[0].step, default=None)
    with tempfile.TemporaryDirectory() as scratch:  # the kit, on the same files
        mirror(store, "r1", Path(scratch) / "checkpoints")
        run = Run.start(str(Path(scratch) / "checkpoints"), environ={}, handle_sigterm=False, announce=False)
        run.close()
        resumed = run.resume_checkpoint
    assert (resumed.name if resumed else None) == (newest[0].unit if newest else None)

    before = store.names()
    result = prune_requests(
        store,
        ["r1"],
        read_record={"r1": record_for(lifecycle)}.get if lifecycle != "untracked" else lambda _: None,
        layout=LAYOUT,
        policy=policy(keep_last=keep_last, keep_final_checkpoint=keep_final),
        workers=2,
        now=NOW,
    )
    after = store.names()
    [report] = result.reports
    assert report.errors == []
    assert never <= after
    assert {folder("r1") + n for n in ("latest", "last.ckpt")} & before <= after
    if newest is not None and (lifecycle != "expired" or keep_final):
        assert unit_names(newest[0], newest[1]) <= after
    if lifecycle == "expired" and keep_final and newest is None and written:
        save, names, _ = max(written, key=lambda w: w[0].step)
        assert unit_names(save, names) <= after
        assert [k["checkpoint"] for k in report.kept if k["reason"] == NEWEST_KEPT_WITHOUT_COMPLETE] == [save.unit]
    assert (report.lifecycle == Lifecycle.RETENTION_EXPIRED) is (lifecycle == "expired")
