"""shared/deciding/preemptions.py at its edges: a kit line's numbers exactly at their bounds are
still evidence, a run that failed is no preemption even when it is the last seen, and a job seen
waiting is a preemption only after the ledger saw it run."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from spotjobs_kit.lines import KitRecord

from shared.deciding.effects import Effects
from shared.deciding.preemptions import MIN_STEPS_PER_SECOND, count_preemptions, kit_line_refusal, note_kit_line
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt, RequestRecord
from shared.requests.envelope import MAX_SECONDS, MAX_TOTAL_STEPS

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/1"


def record_of(state: str = JobState.RUNNING) -> RequestRecord:
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-02T11:00:00Z", job=JOB, state=state)
    return RequestRecord("r1", {"location": "us-central1"}, "gs://b/r1/", attempts=[attempt])


@pytest.mark.parametrize(
    "numbers",
    [
        {"step": MAX_TOTAL_STEPS},
        {"total_steps": MAX_TOTAL_STEPS},
        {"seconds": 0.0},
        {"seconds_since_checkpoint": 0.0},
        {"seconds": MAX_SECONDS},
        {"steps_per_second": MIN_STEPS_PER_SECOND},
    ],
)
def test_numbers_exactly_at_their_bounds_are_still_evidence(numbers: dict[str, float]) -> None:
    line = KitRecord("progress", request_id="r1", attempt=1, run=0, **numbers)
    assert kit_line_refusal(record_of().attempt(1), line, NOW) is None


def preemptions_after(*lines: KitRecord) -> int:
    record = record_of()
    attempt = record.attempt(1)
    for line in lines:
        assert note_kit_line(record, attempt, line, NOW, Effects())
    count_preemptions(record, attempt, None, None, fresh=False, storm_threshold=99, now=NOW, effects=Effects())
    return attempt.preemptions


def test_a_last_run_that_failed_leaves_the_runs_before_it_counted_as_preempted() -> None:
    started = [KitRecord("run_started", request_id="r1", attempt=1, run=run) for run in (0, 1, 2)]
    failed = KitRecord("run_failed", request_id="r1", attempt=1, run=2)
    assert preemptions_after(*started, failed) == 2  # runs 0 and 1 ended by preemption, run 2 raised


def seen_waiting(ledger_state: str) -> int:
    record = record_of(ledger_state)
    attempt = record.attempt(1)
    count_preemptions(
        record,
        attempt,
        JobSnapshot(JOB, JobState.QUEUED),
        None,
        fresh=True,
        storm_threshold=99,
        now=NOW,
        effects=Effects(),
    )
    return attempt.preemptions


def test_a_job_seen_queued_is_a_preemption_only_after_the_ledger_saw_it_run() -> None:
    assert seen_waiting(JobState.RUNNING) == 1
    assert seen_waiting(JobState.PENDING) == 0
    assert seen_waiting(JobState.QUEUED) == 0
