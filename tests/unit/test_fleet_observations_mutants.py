"""What a record whose preemption count is below zero tells the fleet (shared/fleet/observations.py):
a record is readable with any integer there (one written by hand, or by another version), and the
fleet takes no fewer preemptions than none, as it takes no more than Vertex can have done (issue
43: a mutant test_fleet_observations.py left)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.fleet.observations import Kind, observations_of, within_bound
from shared.ledger.records import Attempt, RequestRecord

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
H100 = {
    "custom_job": {
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {
                        "machineType": "a3-highgpu-8g",
                        "acceleratorType": "NVIDIA_H100_80GB",
                        "acceleratorCount": 8,
                    }
                }
            ]
        }
    }
}


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def test_a_count_below_zero_tells_a_run_of_no_preemptions_that_the_estimate_reads() -> None:
    ran = Attempt(
        1,
        "us-east4",
        "SPOT",
        claimed_at=at(0),
        job="j1",
        created_at=at(0),
        started_at=at(5),
        ended_at=at(65),
        preemptions=-2,
    )
    found = observations_of(RequestRecord("r1", H100, "gs://c/r1", attempts=[ran]))
    runs = [o for o in found if o.kind is Kind.RUN]
    assert [(o.seconds, o.count) for o in runs] == [(3600.0, 0)]
    assert within_bound(runs[0]) and not [o for o in found if o.kind is Kind.PREEMPT]
