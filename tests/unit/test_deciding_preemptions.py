"""shared/deciding/preemptions.py at its edges: a kit line's numbers exactly at their bounds are
still evidence, a run that failed is no preemption even when it is the last seen, and a job seen
waiting is a preemption only after the ledger saw it run."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from spotjobs_kit.lines import KitRecord

from shared.deciding.effects import Effects
from shared.deciding.preemptions import (
    KIT_RUN_KEY,
    count_preemptions,
    kit_line_refusal,
    kit_runs,
    note_kit_line,
)
from shared.jobs import MAX_SPOT_PREEMPTIONS, JobSnapshot, JobState
from shared.ledger.records import Attempt, RequestRecord, evidence_marker
from shared.requests.envelope_options import MAX_SECONDS, MAX_TOTAL_STEPS

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/1"


def record_of(state: str = JobState.RUNNING) -> RequestRecord:
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-02T11:00:00Z", job=JOB, state=state)
    return RequestRecord("r1", {"location": "us-central1"}, "gs://b/r1/", attempts=[attempt])


@pytest.mark.parametrize(
    "numbers",
    [
        {"step": 0},
        {"step": MAX_TOTAL_STEPS},
        {"resumed_step": 0},
        {"total_steps": 1},
        {"bytes": 0},
        {"bytes": 10**15},  # a petabyte (docs/security.md, "Limits")
        {"total_steps": MAX_TOTAL_STEPS},
        {"seconds": 0.0},
        {"seconds_since_checkpoint": 0.0},
        {"seconds": MAX_SECONDS},
        {"steps_per_second": 1.0 / MAX_SECONDS},  # one step in the longest step (pinned, not read)
    ],
)
def test_numbers_exactly_at_their_bounds_are_still_evidence(numbers: dict[str, float]) -> None:
    line = KitRecord("progress", request_id="r1", attempt=1, run=0, **numbers)
    assert kit_line_refusal(record_of().attempt(1), line, NOW) is None


@pytest.mark.parametrize(
    "numbers",
    [
        {"step": -1},
        {"resumed_step": -1},
        {"total_steps": 0},
        {"bytes": -1},
        {"bytes": 10**15 + 1},
        {"seconds": -0.5},
        {"seconds_since_checkpoint": -0.5},
        {"steps_per_second": -0.5},
        {"steps_per_second": 0.5 / MAX_SECONDS},
        {"time": "2026-12-02T09:59:59Z"},
        {"time": "2026-12-02T13:00:01Z"},
    ],
)
def test_numbers_just_past_their_bounds_are_refused(numbers: dict[str, object]) -> None:
    line = KitRecord("progress", request_id="r1", attempt=1, run=0, **numbers)
    assert kit_line_refusal(record_of().attempt(1), line, NOW) is not None


def preemptions_after(*lines: KitRecord) -> int:
    record = record_of()
    attempt = record.attempt(1)
    for line in lines:
        assert note_kit_line(record, attempt, line, NOW, Effects())
    count_preemptions(
        record, attempt, None, None, fresh=False, storm_threshold=99, now=NOW, seen_at=NOW, effects=Effects()
    )
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
        seen_at=NOW,
        effects=Effects(),
    )
    return attempt.preemptions


def test_a_job_seen_queued_is_a_preemption_only_after_the_ledger_saw_it_run() -> None:
    assert seen_waiting(JobState.RUNNING) == 1
    assert seen_waiting(JobState.PENDING) == 0
    assert seen_waiting(JobState.QUEUED) == 0


@pytest.mark.parametrize("time", ["2026-12-02T10:00:00Z", "2026-12-02T13:00:00Z"])
def test_a_line_written_exactly_a_clock_skew_outside_the_attempts_life_is_still_evidence(time: str) -> None:
    # Claimed at 11:00, now 12:00, an hour's skew either side.
    line = KitRecord("progress", request_id="r1", attempt=1, run=0, time=time)
    assert kit_line_refusal(record_of().attempt(1), line, NOW) is None


@pytest.mark.parametrize(("written", "shown"), [("7" * 40, "7" * 40), ("7" * 41, f"{'7' * 40}... (41 characters)")])
def test_a_refused_lines_run_is_shown_whole_up_to_forty_characters(written: str, shown: str) -> None:
    record = record_of()
    effects = Effects()
    line = KitRecord("preempted", request_id="r1", attempt=1, run=None, fields={"run": written})
    assert not note_kit_line(record, record.attempt(1), line, NOW, effects)
    [refused] = effects.lines
    assert refused.fields["run"] == shown


def test_service_lines_past_what_vertex_can_have_done_are_refused_from_the_first_one_past() -> None:
    record = record_of()
    attempt = record.attempt(1)
    most = MAX_SPOT_PREEMPTIONS  # one replica
    refused = []
    for identity in range(most + 1):
        effects = Effects()
        count_preemptions(
            record,
            attempt,
            None,
            f"line-{identity}",
            fresh=False,
            storm_threshold=99,
            now=NOW,
            seen_at=NOW,
            effects=effects,
        )
        refused.append("preemption_evidence_refused" in effects.events)
    assert refused == [False] * most + [True]
    assert attempt.preemptions == most


def test_the_storm_alert_fires_at_its_threshold() -> None:
    record = record_of()
    attempt = record.attempt(1)
    effects = Effects()
    for identity in range(3):
        count_preemptions(
            record,
            attempt,
            None,
            f"line-{identity}",
            fresh=False,
            storm_threshold=3,
            now=NOW,
            seen_at=NOW,
            effects=effects,
        )
    assert [alert.kind for alert in effects.alerts] == ["preemption_storm"]


def test_a_failed_run_before_the_last_is_no_preemption() -> None:
    started = [KitRecord("run_started", request_id="r1", attempt=1, run=run) for run in (0, 1, 2)]
    failed = KitRecord("run_failed", request_id="r1", attempt=1, run=1)
    assert preemptions_after(*started, failed) == 1  # run 0 preempted, run 1 raised, run 2 runs


def test_a_run_marker_past_what_vertex_can_restart_is_no_run() -> None:
    # A marker written before the bound existed (or by an older version) is not evidence now.
    record = record_of()
    record.mark(evidence_marker(KIT_RUN_KEY, 1, "2"))
    record.mark(evidence_marker(KIT_RUN_KEY, 1, str(MAX_SPOT_PREEMPTIONS + 10)))
    assert kit_runs(record, 1) == {2}


def test_a_checkpoint_line_without_its_seconds_adds_no_time() -> None:
    record = record_of()
    attempt = record.attempt(1)
    line = KitRecord("checkpoint_committed", request_id="r1", attempt=1, run=0, step=100)
    assert note_kit_line(record, attempt, line, NOW, Effects())
    assert (attempt.checkpoints_committed, attempt.checkpoint_seconds) == (1, 0.0)


def test_a_negative_step_rate_is_refused_as_out_of_its_bounds_not_as_slow() -> None:
    line = KitRecord("progress", request_id="r1", attempt=1, run=0, steps_per_second=-0.5)
    refusal = kit_line_refusal(record_of().attempt(1), line, NOW)
    assert refusal is not None and refusal.startswith("its steps_per_second is not 0 to ")
