"""The prune_checkpoints handler (shared/pruning/runner.py `handle_maintenance`) over the
simulator's in-memory Cloud Storage (sim/gcs.py) and a fake publisher: what its prune_report
alert tells, and how often (issue 43, defects 3 and 8)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest
from google.api_core.exceptions import ServiceUnavailable

from shared.clock import utcnow
from shared.delivery import Message
from shared.ledger.store import REQUESTS_PREFIX, LedgerStore
from shared.log import Logger
from shared.pruning.runner import handle_maintenance
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decisions import FakePublisher, make_settings

STATE, CHECKPOINTS = "prune-state", "prune-checkpoints"


@dataclass
class Deployment:
    """The prune function's world: storage, a publisher, and a clock the test moves."""

    now: datetime = field(default_factory=utcnow)
    publisher: FakePublisher = field(default_factory=FakePublisher)

    def __post_init__(self) -> None:
        self.storage = MemoryStorage(clock=lambda: self.now)
        self.client = self.storage.client()
        settings = make_settings(STATE, SPOTJOBS_CHECKPOINT_BUCKET=CHECKPOINTS)
        ledger = LedgerStore(self.client.bucket(STATE))
        self.ports = Ports(
            settings, ledger, lambda: self.publisher, None, storage=lambda: self.client, clock=lambda: self.now
        )

    def committed(self, request_id: str, *steps: int) -> None:
        """Checkpoints of `request_id` written two hours ago (past every grace period)."""
        written, self.now = self.now, self.now - timedelta(hours=2)
        bucket = self.client.bucket(CHECKPOINTS)
        for step in steps:
            base = f"requests/{request_id}/checkpoints/step-{step:06d}/"
            bucket.blob(base + "model.pt").upload_from_string(b"weights")
            bucket.blob(base + "COMMITTED").upload_from_string(b"{}")
        self.now = written

    def alive(self, request_id: str) -> set[str]:
        prefix = f"requests/{request_id}/checkpoints/"
        return {
            b.name[len(prefix) :].split("/")[0]
            for b in self.client.list_blobs(self.client.bucket(CHECKPOINTS), prefix=prefix)
        }

    def deliver(self, message_id: str, **body: str) -> None:
        handle_maintenance(Message(json.dumps({"task": "prune", **body}).encode(), message_id), Logger(), self.ports)

    def alerts(self, kind: str | None = None) -> list[dict]:
        return [m.data for m in self.publisher.on("ops-alerts") if kind is None or m.data["kind"] == kind]


@pytest.mark.parametrize("body", [{}, {"request_id": "r1"}], ids=["every-request", "one-request"])
def test_a_prune_report_whose_publish_failed_is_sent_by_the_redelivery(body: dict[str, str]) -> None:
    """Defect 3: the redelivered run found nothing left to delete and reported nothing."""
    world = Deployment()
    world.committed("r1", 100, 200, 300)
    world.publisher.fail_next = 1
    with pytest.raises(ServiceUnavailable):
        world.deliver("m1", **body)
    assert world.alive("r1") == {"step-000200", "step-000300"}
    assert world.alerts() == []

    world.now += timedelta(seconds=30)
    world.deliver("m1", **body)
    [report] = world.alerts("prune_report")
    assert "step-000100/" in json.dumps(report["details"])

    world.now += timedelta(hours=1)
    world.deliver("m2", **body)  # reported once it was published: never again
    assert len(world.alerts("prune_report")) == 1


def test_a_report_left_by_a_run_that_died_is_sent_by_a_later_run_once_that_run_is_presumed_dead() -> None:
    world = Deployment()
    world.committed("r1", 100, 200, 300)
    world.publisher.fail_next = 1
    with pytest.raises(ServiceUnavailable):
        world.deliver("m1", request_id="r1")
    world.deliver("m2", request_id="r1")  # another message, while m1's run may still be alive
    assert world.alerts("prune_report") == []
    world.now += timedelta(hours=1)
    world.deliver("m3")
    [report] = world.alerts("prune_report")
    assert "step-000100/" in json.dumps(report["details"])


def test_a_corrupt_ledger_record_is_alerted_once_not_on_every_hourly_run() -> None:
    """Defect 8: each hourly run raised an ERROR prune_report for the same corrupt record."""
    world = Deployment()
    world.committed("r1", 100, 200)
    world.client.bucket(STATE).blob(f"{REQUESTS_PREFIX}r1.json").upload_from_string(b'{"request_id": "r1", ')
    for hour in range(3):
        world.now += timedelta(hours=1)
        world.deliver(f"tick-{hour}")
    assert [a["kind"] for a in world.alerts()] == ["ledger_corrupt"]
    assert world.alive("r1") == {"step-000100", "step-000200"}  # nothing is decided on it


def test_nothing_of_a_request_is_deleted_when_what_it_deletes_cannot_be_recorded_first() -> None:
    from shared.pruning.execute import prune_requests
    from tests.support.prune_store import LAYOUT, MemoryStore, policy, prefix_checkpoint

    store = MemoryStore()
    for step in (100, 200, 300):
        prefix_checkpoint(store, "r1", f"step-000{step}/", at=utcnow() - timedelta(hours=3))
    before = store.names()

    def unrecorded(_request_id: str, _deleting: list[dict]) -> None:
        raise ServiceUnavailable("state bucket")

    result = prune_requests(
        store, ["r1"], read_record=lambda _: None, layout=LAYOUT, policy=policy(), workers=2, before_deleting=unrecorded
    )
    assert store.names() == before
    assert result.retryable_errors == 1  # the delivery fails, and the redelivery prunes


def test_every_request_an_earlier_run_left_unreported_is_named_by_a_later_report() -> None:
    """A report names at most 50 requests of what earlier runs left unreported; the rest were
    settled with them, never named (simulator seed 43: a burst of 300 requests)."""
    from shared.pruning.report import REPORT_LIMIT

    world = Deployment()
    requests = [f"r{k:03d}" for k in range(REPORT_LIMIT + 10)]
    for request_id in requests:
        world.committed(request_id, 100, 200, 300)
    world.publisher.fail_next = 1
    with pytest.raises(ServiceUnavailable):
        world.deliver("m1")
    world.now += timedelta(hours=1)

    world.deliver("m2")
    world.deliver("m3")

    named = {
        left["request_id"]
        for report in world.alerts("prune_report")
        for left in report["details"]["unreported_earlier"]
    }
    assert named == set(requests)
