"""Checkpoint-interval advice: sqrt(2 x MTBF x checkpoint time) from what the ledger saw."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from shared.clock import iso
from shared.deciding.preemptions import preemptions_text, total_preemptions_text
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from spotjobs.reporting.advice import advise, machine_type, preemption_rates

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def record(request_id: str, *attempts: Attempt, machine: str = "a2-highgpu-1g") -> RequestRecord:
    job = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": machine}}]}}
    return RequestRecord(
        request_id, {"custom_job": job}, "gs://b/", status=RequestStatus.RUNNING, attempts=list(attempts)
    )


def ran(hours: float, preemptions: int, *, unknown: bool = False, location: str = "us-central1") -> Attempt:
    start = NOW - timedelta(hours=hours)
    return Attempt(
        1,
        location,
        "SPOT",
        iso(start),
        job="j",
        started_at=iso(start),
        ended_at=iso(NOW),
        preemptions=preemptions,
        preemptions_unknown=unknown,
    )


def test_mtbf_is_running_time_over_preemptions_per_machine_and_location() -> None:
    records = [
        record("a", ran(10, 4)),
        record("b", ran(6, 0, unknown=True)),  # ended by preemption, count unknown: one
        record("c", ran(100, 1), machine="a3-highgpu-8g"),
        record("d", ran(5, 5, location="europe-west4")),
    ]
    rates = preemption_rates(records, NOW)
    assert rates[("a2-highgpu-1g", "us-central1")].mtbf_seconds == 16 * 3600 / 5
    assert rates[("a3-highgpu-8g", "us-central1")].mtbf_seconds == 100 * 3600
    assert rates[("a2-highgpu-1g", "europe-west4")].mtbf_seconds == 3600


def test_advice_uses_the_kits_checkpoint_time_and_interval() -> None:
    attempt = ran(10, 4)
    attempt.checkpoints_committed, attempt.checkpoint_seconds = 11, 11 * 20.0
    attempt.first_checkpoint_at, attempt.last_checkpoint_at = iso(NOW - timedelta(hours=10)), iso(NOW)
    target = record("a", attempt)
    advice = advise(target, preemption_rates([target], NOW))
    assert advice is not None and machine_type(target) == "a2-highgpu-1g"
    assert advice.mtbf_seconds == 9000 and advice.checkpoint_seconds == 20
    assert advice.interval_used_seconds == 3600
    assert math.isclose(advice.optimal_interval_seconds, math.sqrt(2 * 9000 * 20))
    assert "best about 600 s" in advice.sentence()  # 3 significant digits


def test_without_preemptions_or_checkpoint_lines_the_advice_says_unknown() -> None:
    target = record("a", ran(3, 0))
    advice = advise(target, preemption_rates([target], NOW))
    assert advice is not None and advice.mtbf_seconds is None and advice.optimal_interval_seconds is None
    assert "best about unknown" in advice.sentence()


def test_preemptions_are_never_shown_as_zero_when_a_preempted_end_had_no_count() -> None:
    known, unknown = ran(1, 2), ran(1, 0, unknown=True)
    assert (preemptions_text(known), preemptions_text(unknown)) == ("2", "≥1")
    assert total_preemptions_text([known, unknown]) == "≥3"
    assert total_preemptions_text([known]) == "2"
