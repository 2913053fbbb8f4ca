"""shared/reconcile.py at edges its mutants found: a claim that never got a job is alerted
(`claim_stalled`) once past `max_claim_republishes`, naming as many re-publishes as went before the
one it rides with: the bound; and a claim exactly a lease old is its holder's no more (re-published),
as a claim's lease counts everywhere."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from shared.clock import iso
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.store import LedgerStore
from shared.reconcile import run_reconcile
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, make_settings


def test_a_stalled_claims_alert_names_the_republishes_before_it(gcs_bucket) -> None:
    world = World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))
    world.settings = replace(world.settings, max_claim_republishes=2)
    envelope = {"schema_version": 1, "request_id": "req-1", "custom_job": {}, "location": "us-central1"}
    world.ledger.restore(
        RequestRecord("req-1", envelope, "gs://c/r/req-1/", attempts=[Attempt(1, "us-central1", "SPOT", ago(600))])
    )

    def backoff_passes(current: RequestRecord) -> None:
        current.attempts[0].republished_at = ago(7200)

    log = CapturedLog()
    for _ in range(3):  # the third re-publish is past the bound of two
        run_reconcile(world.ports, log.logger)
        world.rewrite("req-1", backoff_passes)

    assert [line["republished"] for line in log.events("claim_republished")] == [1, 2, 3]

    [alert] = world.publisher.on("ops-alerts")
    assert alert.data["kind"] == "claim_stalled"
    assert alert.data["details"]["republished"] == 2
    assert "no job after 2 re-publishes" in alert.data["message"]


def test_a_claim_exactly_a_lease_old_is_republished(gcs_bucket) -> None:
    world = World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))
    now = datetime.now(UTC).replace(microsecond=0)  # a moment the record's times hold exactly
    claimed_at = iso(now - timedelta(seconds=world.settings.claim_lease_seconds))
    envelope = {"schema_version": 1, "request_id": "req-1", "custom_job": {}, "location": "us-central1"}
    world.ledger.restore(
        RequestRecord("req-1", envelope, "gs://c/r/req-1/", attempts=[Attempt(1, "us-central1", "SPOT", claimed_at)])
    )

    summary = run_reconcile(replace(world.ports, clock=lambda: now), CapturedLog().logger)

    assert summary.outcomes == {"claim_republished": 1}


def ago(seconds: float) -> str:
    return iso(datetime.now(UTC) - timedelta(seconds=seconds))
