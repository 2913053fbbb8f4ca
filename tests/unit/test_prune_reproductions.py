"""The issue's reproductions of checkpoints lost by the pruner (issue 22), each failing on the
layout rules before frameworks were known: a request past its retention lost every checkpoint of
a framework that writes none of the configured markers, and metrics files with steps in their
names displaced a running request's only checkpoint. Only names that existed before are
imported, so these run unchanged against the old rules."""

from __future__ import annotations

import pytest

from shared.ledger.states import RequestStatus
from tests.support.framework_layouts import deepspeed, hf_trainer, write_save
from tests.support.prune_store import (
    HOUR,
    NOW,
    MemoryStore,
    folder,
    prefix_checkpoint,
    record,
    run_prune,
    surviving,
)


@pytest.mark.parametrize("save", [hf_trainer, deepspeed], ids=["hf-checkpoint-N", "deepspeed-global_stepN"])
def test_a_request_past_its_retention_keeps_its_final_framework_checkpoint(save) -> None:
    """Reproduction: with no configured marker in them, every checkpoint of an expired request
    was deleted, the final one included although keep_final_checkpoint is set."""
    store = MemoryStore()
    for step in (100, 200, 300):
        write_save(store, "r1", save(step), at=NOW - 9 * 24 * HOUR)
    [report] = run_prune(store, {"r1": record(RequestStatus.SUCCEEDED, finished_ago=8 * 24 * HOUR)}).reports
    final = save(300).unit
    assert {final.rstrip("/")} <= surviving(store)
    assert not {save(100).unit.rstrip("/"), save(200).unit.rstrip("/")} & surviving(store)
    [kept] = [k for k in report.kept if k["step"] is not None]
    assert (kept["checkpoint"], kept["complete"], kept["reason"]) == (
        final,
        True,
        "final checkpoint of a request past its retention",
    )


def test_metrics_files_with_steps_never_push_a_checkpoint_out_of_keep_last() -> None:
    """Reproduction: eval_step_1100.json and eval_step_1200.json counted as two newer complete
    checkpoints, so keep_last=2 deleted the request's only real one."""
    store = MemoryStore()
    prefix_checkpoint(store, "r1", "step-001000/", at=NOW - 3 * HOUR)
    for name in ("eval_step_1100.json", "eval_step_1200.json"):
        store.put(folder("r1") + name, at=NOW - 2 * HOUR)
    [report] = run_prune(store, {"r1": record(keep_last=2)}).reports
    assert surviving(store) == {"step-001000", "eval_step_1100.json", "eval_step_1200.json"}
    assert report.deleted == []
    assert {k["checkpoint"]: k["step"] for k in report.kept} == {
        "step-001000/": 1000,
        "eval_step_1100.json": None,
        "eval_step_1200.json": None,
    }
