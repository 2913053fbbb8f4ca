"""The preemption times an attempt keeps (`Attempt.preempted_at`, shared/deciding/preemptions.py)
when the job's timeout stop lowers its count (`discount_timeout_stop`): the newest time, the
stop's, goes with it, the earlier ones stay. The mutation pass found the lowering itself untested
(the one test lowered nothing: its count rested on log lines the stop does not touch)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.clock import iso, parse_iso
from shared.deciding.effects import Effects
from shared.deciding.preemptions import (
    KIT_PREEMPTED_KEY,
    KIT_RUN_KEY,
    count_preemptions,
    discount_timeout_stop,
)
from shared.ledger.records import Attempt, RequestRecord, evidence_marker

NOW = datetime(2026, 12, 6, 12, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/1"


def preempted_runs(runs: int) -> tuple[RequestRecord, Attempt]:
    """An attempt whose kit said `preempted` at the end of each of `runs` runs, a minute apart,
    each counted as it came."""
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at=iso(NOW - timedelta(hours=1)), job=JOB)
    record = RequestRecord("r1", {"location": "us-central1"}, "gs://b/r1/", attempts=[attempt])
    for run in range(runs):
        record.mark(evidence_marker(KIT_RUN_KEY, 1, str(run)))
        record.mark(evidence_marker(KIT_PREEMPTED_KEY, 1, str(run)))
        count_preemptions(
            record,
            attempt,
            None,
            None,
            fresh=False,
            storm_threshold=99,
            now=NOW + timedelta(minutes=run),
            seen_at=NOW + timedelta(minutes=run),
            effects=Effects(),
        )
    return record, attempt


def test_a_timeout_stop_takes_the_newest_time_with_the_count_it_lowers() -> None:
    record, attempt = preempted_runs(2)
    assert attempt.preemptions == 2 and len(attempt.preempted_at) == 2
    discount_timeout_stop(record, attempt)
    assert attempt.preemptions == 1
    assert [parse_iso(t) for t in attempt.preempted_at] == [NOW]


def test_a_count_that_was_only_the_stop_keeps_no_time() -> None:
    record, attempt = preempted_runs(1)
    assert attempt.preemptions == 1
    discount_timeout_stop(record, attempt)
    assert (attempt.preemptions, attempt.preempted_at) == (0, [])


def test_a_stop_takes_the_newest_time_of_times_kept_out_of_order() -> None:
    # A record written before its times were kept sorted: the stop's is still the newest.
    record, attempt = preempted_runs(3)
    attempt.preempted_at = [attempt.preempted_at[i] for i in (2, 0, 1)]
    discount_timeout_stop(record, attempt)
    assert attempt.preemptions == 2
    assert [parse_iso(t) for t in attempt.preempted_at] == [NOW, NOW + timedelta(minutes=1)]
