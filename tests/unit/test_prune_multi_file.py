"""Issue 43, defect 7: a plain checkpoint saved as several files of one stem (`ckpt-000400.pt` and
`ckpt-000400.optim.pt`, each a `torch.save`) counted as complete as soon as its first file was
listed. While the second still uploaded, the kit would resume from it, and a pruner keeping one
checkpoint deleted `ckpt-000300`, the last whole one. Such a stem is complete only once a later
checkpoint exists (its writer moved on) and it holds every kind of file the folder's stems hold."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path

import pytest
from spotjobs_kit import Run
from spotjobs_kit.layout import Evidence, discover

from tests.support.prune_store import HOUR, NOW, MemoryStore, folder, record, run_prune, surviving

MARKERS = ("commit_success.txt", ".metadata", "checkpoint", "COMMITTED")
TWO_FILES = (".pt", ".optim.pt")


def save(store: MemoryStore, step: int, suffixes: tuple[str, ...] = TWO_FILES, *, at=NOW - 3 * HOUR) -> None:
    for suffix in suffixes:
        store.put(f"{folder('r1')}ckpt-{step:06d}{suffix}", at=at)


def judged(store: MemoryStore) -> list[tuple[str, bool]]:
    return [(c.name, c.complete) for c in discover(store, folder("r1"), MARKERS).checkpoints]


def test_the_pruner_keeps_the_last_whole_checkpoint_while_the_next_ones_second_file_uploads() -> None:
    """The issue's reproduction: keep_last 1, ckpt-000300 whole, ckpt-000400's model file listed
    and its optimizer file still uploading."""
    store = MemoryStore()
    save(store, 300)
    save(store, 400, (".pt",), at=NOW - 2 * HOUR)
    [report] = run_prune(store, {"r1": record(keep_last=1)}).reports
    assert surviving(store) == {"ckpt-000300.pt", "ckpt-000300.optim.pt", "ckpt-000400.pt"}
    assert report.deleted == []


def test_a_multi_file_stem_is_complete_once_a_later_checkpoint_exists_holding_no_other_kind_of_file() -> None:
    store = MemoryStore()
    save(store, 100)
    save(store, 200, (".pt",))  # torn: the run died in its second file, then resumed from 100
    save(store, 300)
    save(store, 400)  # the newest: its writer may still be on a third file
    assert judged(store) == [
        ("ckpt-000100", True),
        ("ckpt-000200", False),
        ("ckpt-000300", True),
        ("ckpt-000400", False),
    ]
    evidence = {c.name: c.evidence for c in discover(store, folder("r1"), MARKERS).checkpoints}
    assert evidence["ckpt-000300"] == Evidence.FILES_LATER
    assert evidence["ckpt-000400"] == Evidence.FILES_NEWEST


def test_single_file_checkpoints_stay_complete_once_listed() -> None:
    """One file per stem (Lightning's .ckpt, a torch.save of everything): GCS lists an object
    only once its upload finished, so the newest is the one to resume from, as before."""
    store = MemoryStore()
    save(store, 100, (".pt",))
    save(store, 200, (".pt",))
    assert judged(store) == [("ckpt-000100", True), ("ckpt-000200", True)]


def test_the_kit_never_resumes_from_a_stem_whose_second_file_is_still_uploading(tmp_path: Path) -> None:
    for step, suffixes in ((300, TWO_FILES), (400, (".pt",))):
        for suffix in suffixes:
            (tmp_path / f"ckpt-{step:06d}{suffix}").write_bytes(b"x")
    run = Run.start(str(tmp_path), environ={}, handle_sigterm=False, stream=io.StringIO())
    assert run.resume_step() == 300


@pytest.mark.parametrize("age", [timedelta(0), 30 * 24 * HOUR])
def test_the_newest_stem_of_a_multi_file_layout_is_kept_whatever_its_age(age: timedelta) -> None:
    store = MemoryStore()
    save(store, 300, at=NOW - 3 * HOUR - age)
    save(store, 400, at=NOW - 2 * HOUR - age)
    run_prune(store, {"r1": record(keep_last=1)})
    assert surviving(store) == {f"ckpt-000{s}{x}" for s in (300, 400) for x in TWO_FILES}


def test_a_request_past_its_retention_keeps_its_newest_multi_file_stem_beside_the_last_whole_one() -> None:
    """Whether the final save finished cannot be told from the listing: both stay."""
    from shared.ledger.states import RequestStatus

    store = MemoryStore()
    for step in (200, 300, 400):
        save(store, step, at=NOW - 9 * 24 * HOUR)
    run_prune(store, {"r1": record(RequestStatus.SUCCEEDED, finished_ago=8 * 24 * HOUR)})
    assert surviving(store) == {f"ckpt-000{s}{x}" for s in (300, 400) for x in TWO_FILES}


def test_a_stem_torn_like_the_stems_after_it_is_not_complete() -> None:
    """Seed 149: a run saved ckpt-000200 whole and died in ckpt-000400's second file; the next run
    resumed from 200 and died in ckpt-000300's. The torn 300 holds every kind of file the torn
    400 after it holds, yet it lacks the optimizer file the folder's whole stems hold: the kit
    resumed from it. Every kind of file the folder's stems hold is what a stem must hold."""
    store = MemoryStore()
    save(store, 200)
    save(store, 400, (".pt",), at=NOW - 2 * HOUR)
    save(store, 300, (".pt",), at=NOW - HOUR)
    assert judged(store) == [("ckpt-000200", True), ("ckpt-000300", False), ("ckpt-000400", False)]
    [report] = run_prune(store, {"r1": record(keep_last=1)}).reports
    assert {"ckpt-000200.pt", "ckpt-000200.optim.pt"} <= surviving(store)
    assert report.deleted == []
