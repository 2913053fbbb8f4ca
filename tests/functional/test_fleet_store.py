"""The fleet observations on a real GCS API (fake-gcs-server): written once per fact, every class
found by one delimiter listing, a class's window read in one listing, and `spotjobs fleet`'s rows
from them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.fleet import store
from shared.fleet.observations import FleetFact, Kind, MachineClass
from spotjobs.cli.fleet import fleet_rows

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
H100 = MachineClass("a3-highgpu-8g", "NVIDIA_H100_80GB", 8)
A100 = MachineClass("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1)


def test_facts_round_trip_through_the_bucket(gcs_bucket) -> None:
    facts = [
        FleetFact(Kind.WAIT, "us-east4", NOW - timedelta(minutes=90), 600.0, attempt_key="k-1"),
        FleetFact(Kind.PREEMPT, "us-east4", NOW - timedelta(minutes=30), attempt_key="k-1"),
        FleetFact(Kind.WAITING, "us-central1", NOW - timedelta(minutes=60), attempt_key="k-2"),
    ]
    assert store.write_facts(gcs_bucket, H100, facts) == 3
    assert store.write_facts(gcs_bucket, H100, facts) == 0
    store.write_facts(gcs_bucket, A100, [FleetFact(Kind.WAIT, "us-central1", NOW, 60.0, attempt_key="k-3")])

    assert [c.key for c in store.classes(gcs_bucket)] == [A100.key, H100.key]
    read = store.read(gcs_bucket, H100, NOW)
    assert sorted((o.kind, o.location, o.at, o.seconds) for o in read) == sorted(
        (o.kind, o.location, o.at, o.seconds) for o in facts
    )
    rows = fleet_rows({H100: read}, NOW, lambda machine, location: None)
    assert [(r["location"], r["has_capacity"], r["open_waits"]) for r in rows] == [
        ("us-central1", False, 1),
        ("us-east4", False, 0),
    ]
