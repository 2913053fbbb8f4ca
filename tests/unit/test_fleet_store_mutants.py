"""Facts written once each (shared/fleet/store.py `write_facts`): a fact an earlier delivery
recorded, which this process never saw created, is passed over and the facts after it are still
written. The mutation pass found that untested (a refused create was only ever the call's last)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from shared.fleet import store
from shared.fleet.observations import FleetFact, Kind, MachineClass
from sim.gcs import MemoryStorage

NOW = datetime(2026, 12, 6, 12, tzinfo=UTC)
H100 = MachineClass("a3-highgpu-8g", "NVIDIA_H100_80GB", 8)


def test_a_fact_another_delivery_recorded_is_passed_over_and_the_rest_written() -> None:
    storage = MemoryStorage(clock=lambda: NOW)
    earlier = FleetFact(Kind.WAIT, "us-east4", NOW - timedelta(minutes=90), 600.0, attempt_key="k-1")
    later = FleetFact(Kind.PREEMPT, "us-east4", NOW - timedelta(minutes=30), attempt_key="k-1")
    # The earlier delivery ran in another process: its client, so nothing of it is remembered here.
    other: Any = storage.client().bucket("state")
    other.blob(store.object_name(H100, earlier)).upload_from_string(b"")
    bucket: Any = storage.client().bucket("state")
    assert store.write_facts(bucket, H100, [earlier, later]) == 1
    assert sorted((f.kind, f.at) for f in store.read(bucket, H100, NOW)) == sorted(
        (f.kind, f.at) for f in (earlier, later)
    )
