"""The prune report's outbox (shared/pruning/journal.py) on the simulator's in-memory Cloud Storage
with the test's clock: which documents of earlier runs a run reports (its own message's at once,
another's once its writer is presumed dead), documents that do not read, and removing them once
the report is out, also when another run removed one first or a removal fails."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core.exceptions import ServiceUnavailable

from shared.clock import iso
from shared.ledger.run_lock import LEASE_SECONDS
from shared.pruning.journal import JOURNAL_PREFIX, ReportJournal
from sim.gcs import Bucket, MemoryStorage
from tests.support.decisions import CapturedLog

STATE = "state"
START = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=LEASE_SECONDS)


class World:
    def __init__(self) -> None:
        self.now = START
        self.storage = MemoryStorage(clock=lambda: self.now)
        self.bucket = FlakyBucket(self.storage.client(), STATE)
        self.log = CapturedLog()

    def journal(self, message_id: str) -> ReportJournal:
        return ReportJournal(self.bucket, message_id, lambda: self.now)

    def left_by(self, message_id: str, request_id: str, *checkpoints: str, run: str = "earlier-run") -> str:
        """A document an earlier run of `message_id` wrote now and never removed."""
        name = f"{JOURNAL_PREFIX}{run}/{request_id}.json"
        document = {"message_id": message_id, "recorded_at": iso(self.now), "request_id": request_id}
        self.put(name, {**document, "checkpoints": list(checkpoints)})
        return name

    def put(self, name: str, document: Any) -> None:
        data = document if isinstance(document, bytes) else json.dumps(document).encode()
        self.bucket.blob(name).upload_from_string(data)

    def names(self) -> set[str]:
        return set(self.storage.objects(STATE))


class FlakyBucket(Bucket):
    """The state bucket; removing one of `failing` fails as Cloud Storage may (503)."""

    failing: frozenset[str] = frozenset()

    def delete_blob(self, name: str, **kwargs: Any) -> None:
        if name in self.failing:
            raise ServiceUnavailable("try later")
        super().delete_blob(name, **kwargs)


@pytest.fixture
def world() -> World:
    return World()


def test_what_a_run_records_is_what_a_redelivery_of_its_message_reports(world: World) -> None:
    world.journal("m1").record("r1", [{"checkpoint": "step-000100/"}, {"checkpoint": "step-000200/"}])
    world.now += timedelta(seconds=30)
    [found] = world.journal("m1").left_behind(world.log.logger)
    assert (found.request_id, found.checkpoints, found.recorded_at) == (
        "r1",
        ("step-000100/", "step-000200/"),
        iso(START),
    )
    assert world.journal("m2").left_behind(world.log.logger) == []  # its writer may still be running


@pytest.mark.parametrize(("age", "reported"), [(LEASE - timedelta(seconds=1), False), (LEASE, True)])
def test_another_messages_document_is_reported_once_a_run_may_have_ended(
    world: World, age: timedelta, reported: bool
) -> None:
    world.left_by("m1", "r1", "step-000100/")
    world.now += age
    assert [e.request_id for e in world.journal("m2").left_behind(world.log.logger)] == (["r1"] if reported else [])


def test_a_run_does_not_report_its_own_documents_but_every_other_run_s(world: World) -> None:
    journal = world.journal("m1")
    world.left_by("m1", "early", run="0-early-run")
    world.left_by("m1", "late", run="z-late-run")  # sorts after any run's own folder
    journal.record("mine", [{"checkpoint": "step-000100/"}])
    assert sorted(e.request_id for e in journal.left_behind(world.log.logger)) == ["early", "late"]


@pytest.mark.parametrize(
    "document",
    [
        b"{not json",  # ValueError
        {"message_id": "m1", "recorded_at": "2026-11-01T12:00:00Z", "checkpoints": []},  # KeyError
        {"message_id": "m1", "recorded_at": "2026-11-01T12:00:00Z", "request_id": "r1", "checkpoints": 7},  # TypeError
    ],
    ids=["not-json", "no-request-id", "checkpoints-not-a-list"],
)
def test_a_document_that_does_not_read_is_reported_by_its_name_alone(world: World, document: Any) -> None:
    world.put(f"{JOURNAL_PREFIX}some-run/r1.json", document)
    [found] = world.journal("m2").left_behind(world.log.logger)
    assert (found.name, found.request_id, found.checkpoints) == (f"{JOURNAL_PREFIX}some-run/r1.json", "r1", ())
    assert [line["severity"] for line in world.log.events("prune_journal_unreadable")] == ["WARNING"]


def test_settling_removes_the_runs_documents_and_those_it_reported(world: World) -> None:
    unrelated = world.left_by("m9", "r9")  # another run's, not reported here: it stays
    world.now += timedelta(seconds=1)
    ours = world.left_by("m1", "r1")
    journal = world.journal("m1")
    journal.record("r2", [{"checkpoint": "step-000100/"}])
    reported = journal.left_behind(world.log.logger)
    journal.settle(reported, world.log.logger)
    assert world.names() == {unrelated}
    assert ours not in world.names()


def test_a_document_another_run_removed_first_does_not_stop_the_removal_of_the_rest(world: World) -> None:
    journal = world.journal("m1")
    journal.record("r1", [{"checkpoint": "step-000100/"}])
    journal.record("r2", [{"checkpoint": "step-000100/"}])
    world.bucket.delete_blob(f"{journal.run_prefix}r1.json")  # the other run got there first
    journal.settle([], world.log.logger)
    assert world.names() == set()
    assert world.log.events("prune_journal_unremoved") == []


def test_a_document_that_cannot_be_removed_is_left_for_a_later_report(world: World) -> None:
    journal = world.journal("m1")
    journal.record("r1", [{"checkpoint": "step-000100/"}])
    journal.record("r2", [{"checkpoint": "step-000100/"}])
    stuck = f"{journal.run_prefix}r1.json"
    world.bucket.failing = frozenset({stuck})
    journal.settle([], world.log.logger)
    assert world.names() == {stuck}
    [line] = world.log.events("prune_journal_unremoved")
    assert line["severity"] == "WARNING"
