"""shared/redeliveries.py at the claim lease's edge. `replayed_without_a_record`: a message younger
than the lease is fresh (a claim precedes every create, so no record means no job); one a lease old
or more may be a replay of a request whose record was lost, and its jobs are looked up before
anything is claimed. `alert_once`: a rejection note claimed a lease ago or more is taken over; an
older version's empty note means sent, one no one can read is taken over."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from shared.alerts import Alert, AlertKind
from shared.clock import iso
from shared.delivery import Message
from shared.errors import TransientError
from shared.ledger.store import LedgerStore
from shared.redeliveries import REJECTION_NOTES, alert_rejection_once, replayed_without_a_record
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, make_settings

NOW = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(("age_in_leases", "replayed"), [(1.0, True), (0.999, False)], ids=["a-lease", "younger"])
def test_a_message_a_lease_old_whose_record_is_gone_and_whose_job_exists_is_a_replay(
    gcs_bucket, age_in_leases: float, replayed: bool
) -> None:
    world = World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))
    world.vertex.add("req-1", 1)  # the job of the request whose record was deleted
    ports = replace(world.ports, clock=lambda: NOW)
    age = timedelta(seconds=world.settings.claim_lease_seconds * age_in_leases)
    envelope = {"request_id": "req-1", "location": "us-central1", "locations": []}
    message = Message(b"{}", "m-1", {}, publish_time=NOW - age)

    assert replayed_without_a_record(message, envelope, CapturedLog().logger, ports) is replayed


@pytest.mark.parametrize(("held_in_leases", "taken_over"), [(1.0, True), (0.999, False)], ids=["a-lease", "younger"])
def test_a_rejection_note_claimed_a_lease_ago_is_taken_over_and_its_alert_sent(
    gcs_bucket, held_in_leases: float, taken_over: bool
) -> None:
    """A delivery that claimed the note a lease ago or more is presumed dead: its alert is sent by
    this one; a younger claim is another delivery's, still alerting (retried)."""
    world = World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))
    ports = replace(world.ports, clock=lambda: NOW)
    claimed_at = NOW - timedelta(seconds=world.settings.claim_lease_seconds * held_in_leases)
    note = f"{REJECTION_NOTES}m-1"
    gcs_bucket.blob(note).upload_from_string(json.dumps({"sent": False, "claimed_at": iso(claimed_at)}))
    alert = Alert.of(AlertKind.INVALID_REQUEST, "req-1 is refused", request_id="req-1", details={"message_id": "m-1"})

    if taken_over:
        alert_rejection_once(ports, alert)
    else:
        with pytest.raises(TransientError, match="another delivery is alerting"):
            alert_rejection_once(ports, alert)

    assert len(world.publisher.on("ops-alerts")) == int(taken_over)


@pytest.mark.parametrize(
    ("note", "sent_now"),
    [(b"", False), (b"{not json", True), (b"[]", True)],
    ids=["an-older-versions-empty-note-was-sent", "unreadable-taken-over", "of-another-shape-taken-over"],
)
def test_a_rejection_note_an_older_version_wrote_or_no_one_can_read(gcs_bucket, note: bytes, sent_now: bool) -> None:
    world = World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))
    gcs_bucket.blob(f"{REJECTION_NOTES}m-1").upload_from_string(note)
    alert = Alert.of(AlertKind.INVALID_REQUEST, "req-1 is refused", request_id="req-1", details={"message_id": "m-1"})

    alert_rejection_once(world.ports, alert)
    alert_rejection_once(world.ports, alert)  # a redelivery: said once at most

    assert len(world.publisher.on("ops-alerts")) == int(sent_now)
