"""A prune run and the prune_checkpoints handler (shared/pruning/runner.py) on the simulator's
in-memory Cloud Storage with the test's clock: which requests a run covers (one, every one, or a
bounded share resumed by a cursor), when the cursor moves, when deletes check the generation
first, the run lock an hourly run holds, and what a failing fleet compaction does."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core.exceptions import Forbidden, ServiceUnavailable

from shared.delivery import Message
from shared.ledger.run_lock import run_lock
from shared.ledger.store import LedgerStore
from shared.pruning.runner import (
    PRUNE_TASK,
    bounded,
    compact_fleet,
    handle_maintenance,
    parse_maintenance_task,
    run_prune,
)
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decisions import CapturedLog, FakePublisher, make_settings

STATE, CHECKPOINTS = "prune-state", "prune-checkpoints"
START = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


class Deployment:
    """The prune function's world; `failing` names storage operations that fail (503) for now."""

    def __init__(self, **env: str) -> None:
        self.now = START
        self.failing: set[str] = set()
        self.storage = MemoryStorage(clock=lambda: self.now, io=self._io)
        self.client = self.storage.client()
        self.settings = make_settings(STATE, SPOTJOBS_CHECKPOINT_BUCKET=CHECKPOINTS, **env)
        self.publisher = FakePublisher()
        self.log = CapturedLog()
        self.ports = Ports(
            self.settings,
            LedgerStore(self.client.bucket(STATE)),
            lambda: self.publisher,
            None,
            storage=lambda: self.client,
            clock=lambda: self.now,
        )

    def _io(self, _service: str, operation: str, perform: Callable[[], Any]) -> Any:
        if operation in self.failing:
            raise ServiceUnavailable(f"{operation} failed")
        return perform()

    def committed(self, *request_ids: str, steps: tuple[int, ...] = (100, 200, 300)) -> None:
        """Checkpoints written two hours ago (past every grace period)."""
        written, self.now = self.now, self.now - timedelta(hours=2)
        bucket = self.client.bucket(CHECKPOINTS)
        for request_id in request_ids:
            for step in steps:
                base = f"requests/{request_id}/checkpoints/step-{step:06d}/"
                bucket.blob(base + "model.pt").upload_from_string(b"weights")
                bucket.blob(base + "COMMITTED").upload_from_string(b"{}")
        self.now = written

    def pruned(self) -> set[str]:
        """The requests whose oldest checkpoint is gone."""
        names = set(self.storage.objects(CHECKPOINTS))
        return {n.split("/")[1] for n in names if n.endswith("step-000200/COMMITTED")} - {
            n.split("/")[1] for n in names if n.endswith("step-000100/COMMITTED")
        }

    def cursor(self) -> str:
        return self.ports.ledger.cursor(PRUNE_TASK)

    def run(self, **kwargs: Any):
        return run_prune(self.client, self.settings, log=self.log.logger, **kwargs)

    def deliver(self, message_id: str, **body: str) -> None:
        data = json.dumps({"task": "prune", **body}).encode()
        handle_maintenance(Message(data, message_id), self.log.logger, self.ports)


# Which requests a run covers.


def test_bounded_takes_at_most_the_limit_and_says_whether_the_listing_ended() -> None:
    assert bounded(iter(["a", "b", "c"]), 2) == (["a", "b"], False)
    assert bounded(iter(["a", "b"]), 2) == (["a", "b"], True)
    assert bounded(iter(["a"]), 2) == (["a"], True)


@pytest.mark.parametrize("request_id", [5, ["r1"], {"id": "r1"}, True])
def test_a_prune_task_whose_request_id_is_not_a_string_is_not_a_task(request_id: object) -> None:
    assert parse_maintenance_task(json.dumps({"task": "prune", "request_id": request_id}).encode()) == ("prune", None)


def test_a_run_over_every_request_unbounded_covers_them_all_and_leaves_the_cursor() -> None:
    world = Deployment(SPOTJOBS_PRUNE_REQUESTS_PER_RUN="1")
    world.committed("a", "b", "c")
    result = world.run()
    assert world.pruned() == {"a", "b", "c"}
    assert (result.next_cursor, world.cursor()) == (None, "")


def test_a_bounded_run_covers_its_share_and_the_next_run_resumes_after_it() -> None:
    world = Deployment(SPOTJOBS_PRUNE_REQUESTS_PER_RUN="2")
    world.committed("a", "b", "c")
    first = world.run(bounded_run=True)
    assert [r.request_id for r in first.reports] == ["a", "b"]
    assert (first.next_cursor, world.cursor()) == ("b", "b")
    second = world.run(bounded_run=True)
    assert [r.request_id for r in second.reports] == ["c"]
    assert (second.next_cursor, world.cursor()) == ("", "")  # the listing ended: from the top next
    assert world.pruned() == {"a", "b", "c"}
    assert [r.request_id for r in world.run(bounded_run=True).reports] == ["a", "b"]


def test_a_bounded_dry_run_leaves_the_cursor_where_it_was() -> None:
    world = Deployment(SPOTJOBS_PRUNE_REQUESTS_PER_RUN="2")
    world.committed("a", "b", "c")
    result = world.run(bounded_run=True, dry_run=True)
    assert [r.request_id for r in result.reports] == ["a", "b"]
    assert (result.next_cursor, world.cursor()) == (None, "")
    assert world.pruned() == set()


def test_a_cursor_that_cannot_be_saved_is_a_warning_and_the_run_stands() -> None:
    world = Deployment(SPOTJOBS_PRUNE_REQUESTS_PER_RUN="2")
    world.committed("a", "b", "c")
    world.failing = {"write"}  # the run writes nothing but its cursor
    result = world.run(bounded_run=True)
    assert world.pruned() == {"a", "b"} and result.next_cursor == "b"
    assert world.cursor() == ""
    [line] = world.log.events("prune_cursor_unsaved")
    assert line["severity"] == "WARNING"


@pytest.mark.parametrize(
    ("emulator", "verify_generation", "verified"),
    [("", None, False), ("localhost:4443", None, True), ("", True, True), ("localhost:4443", False, False)],
)
def test_deletes_check_the_generation_first_where_the_emulator_would_ignore_it(
    monkeypatch: pytest.MonkeyPatch, emulator: str, verify_generation: bool | None, verified: bool
) -> None:
    """fake-gcs-server ignores ifGenerationMatch on a delete: there each delete looks first."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator)
    world = Deployment()
    world.committed("a")
    result = world.run(request_id="a", verify_generation=verify_generation)
    assert world.pruned() == {"a"}
    assert (result.calls["verify"] == result.calls["delete"] == 2) is verified
    assert (result.calls["verify"] == 0) is not verified


# The handler.


def test_an_hourly_run_covers_its_share_of_requests_per_tick() -> None:
    world = Deployment(SPOTJOBS_PRUNE_REQUESTS_PER_RUN="2")
    world.committed("a", "b", "c")
    world.deliver("tick-1")
    assert world.pruned() == {"a", "b"}
    world.now += timedelta(hours=1)
    world.deliver("tick-2")
    assert world.pruned() == {"a", "b", "c"}


def test_an_hourly_tick_during_another_run_ends_but_a_one_request_prune_goes_ahead() -> None:
    world = Deployment()
    world.committed("a", "b")
    with run_lock(world.client.bucket(STATE), PRUNE_TASK, world.log.logger, clock=lambda: world.now) as held:
        assert held
        world.deliver("tick")
        assert world.pruned() == set()
        assert world.log.events("run_in_progress")
        world.deliver("one", request_id="b")
        assert world.pruned() == {"b"}


def test_the_handler_logs_each_request_pruned_and_the_run() -> None:
    world = Deployment()
    world.committed("a")
    world.deliver("tick")
    [line] = world.log.events("checkpoints_pruned")
    assert (line["request_id"], line["deleted"]) == ("a", ["step-000100/"])
    [summary] = world.log.events("prune_summary")
    assert (summary["requests_scanned"], summary["checkpoints_deleted"], summary["next_cursor"]) == (1, 1, "")


def test_a_prune_task_without_a_valid_request_id_is_ignored_with_a_warning() -> None:
    world = Deployment()
    world.committed("a")
    world.deliver("bad", request_id="../a")
    assert world.pruned() == set()
    [line] = world.log.events("invalid_prune_task")
    assert line["severity"] == "WARNING"


# The fleet compaction an hourly run ends with.


@pytest.mark.parametrize("error", [ServiceUnavailable("try later"), Forbidden("no storage.objects.list")])
def test_a_compaction_that_storage_refuses_is_a_warning(error: Exception) -> None:
    world = Deployment()

    def refuse(_service: str, _operation: str, _perform: Callable[[], Any]) -> Any:
        raise error

    world.storage.io = refuse
    compact_fleet(world.client.bucket(STATE), world.now, world.log.logger)
    [line] = world.log.events("fleet_compaction_failed")
    assert line["severity"] == "WARNING"


def test_a_compaction_that_fails_for_a_network_error_is_a_warning() -> None:
    world = Deployment()

    def unreachable(_service: str, _operation: str, _perform: Callable[[], Any]) -> Any:
        raise ConnectionError("connection reset")

    world.storage.io = unreachable
    compact_fleet(world.client.bucket(STATE), world.now, world.log.logger)
    assert world.log.events("fleet_compaction_failed")


def test_a_compaction_that_fails_for_a_bug_raises() -> None:
    world = Deployment()

    def bug(_service: str, _operation: str, _perform: Callable[[], Any]) -> Any:
        raise KeyError("a bug")

    world.storage.io = bug
    with pytest.raises(KeyError):
        compact_fleet(world.client.bucket(STATE), world.now, world.log.logger)
