"""Checkpoint advice for jobs of several replicas (issue 44): preemptions count reclaimed VMs, so
the rate is per VM-hour, and a job of R replicas is interrupted R times as often as one VM."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.clock import iso
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from spotjobs.reporting.advice import advise, preemption_rates

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def record(request_id: str, replicas: int, hours: float, preemptions: int) -> RequestRecord:
    pools = [{"machineSpec": {"machineType": "a3-highgpu-8g"}, "replicaCount": "1"}]
    if replicas > 1:
        pools.append({"machineSpec": {"machineType": "a3-highgpu-8g"}, "replicaCount": str(replicas - 1)})
    start = NOW - timedelta(hours=hours)
    attempt = Attempt(
        1, "us-central1", "SPOT", iso(start), job="j", started_at=iso(start), ended_at=iso(NOW), preemptions=preemptions
    )
    return RequestRecord(
        request_id,
        {"custom_job": {"jobSpec": {"workerPoolSpecs": pools}}},
        "gs://b/",
        status=RequestStatus.RUNNING,
        attempts=[attempt],
    )


def test_the_rate_is_per_vm_hour_and_a_two_replica_job_is_interrupted_twice_as_often() -> None:
    single = record("one", 1, hours=10, preemptions=1)
    double = record("two", 2, hours=10, preemptions=2)  # 20 VM-hours, 2 VMs reclaimed
    rates = preemption_rates([single, double], NOW)
    [rate] = rates.values()
    assert rate.mtbf_seconds == 30 * 3600 / 3  # 30 VM-hours, 3 reclaims: 10 h per VM
    one, two = advise(single, rates), advise(double, rates)
    assert one is not None and two is not None
    assert one.mtbf_seconds == 10 * 3600
    assert two.mtbf_seconds == 5 * 3600  # any of its two VMs reclaimed stops the job
