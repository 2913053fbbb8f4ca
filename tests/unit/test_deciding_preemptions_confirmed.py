"""A kit `preempted` line confirmed by the service's word or the job's end (shared/deciding/preemptions.py,
`unconfirmed_kit_preemptions`): the fleet waits only for what rests on the kit's line alone."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.deciding.effects import Effects
from shared.deciding.preemptions import (
    KIT_PREEMPTED_KEY,
    KIT_RUN_KEY,
    PREEMPTION_LINE_KEY,
    count_preemptions,
    discount_timeout_stop,
    unconfirmed_kit_preemptions,
)
from shared.jobs import JobState
from shared.ledger.records import evidence_marker
from shared.ledger.states import AttemptOutcome
from tests.support.decide import make_record


def test_a_kit_preemption_a_service_line_also_shows_is_confirmed() -> None:
    record = make_record(state=JobState.RUNNING)
    attempt = record.attempts[0]
    attempt.preemptions = 1
    record.mark(evidence_marker(KIT_RUN_KEY, 1, "0"))
    record.mark(evidence_marker(KIT_PREEMPTED_KEY, 1, "0"))  # the kit saw the SIGTERM of run 0
    assert unconfirmed_kit_preemptions(record, attempt) == 1  # on the kit's word alone

    record.mark(evidence_marker(PREEMPTION_LINE_KEY, 1, "vertex-line-1"))  # Vertex's log says so too
    assert unconfirmed_kit_preemptions(record, attempt) == 0


def test_the_jobs_end_confirms_a_kit_preemption() -> None:
    record = make_record(state=JobState.FAILED)
    attempt = record.attempts[0]
    attempt.preemptions, attempt.outcome = 1, AttemptOutcome.REQUEUED
    record.mark(evidence_marker(KIT_RUN_KEY, 1, "0"))
    record.mark(evidence_marker(KIT_PREEMPTED_KEY, 1, "0"))
    assert unconfirmed_kit_preemptions(record, attempt) == 0


# Log lines arrive in any order: run 0's `preempted` line may be read before its `run_started`.


def test_run_zeros_preempted_line_read_before_its_start_counts_one() -> None:
    record = make_record(state=JobState.RUNNING)
    attempt = record.attempts[0]
    record.mark(evidence_marker(KIT_PREEMPTED_KEY, 1, "0"))  # no run_started read yet
    now = datetime(2026, 12, 1, tzinfo=UTC)
    count_preemptions(
        record, attempt, None, None, fresh=False, storm_threshold=99, now=now, seen_at=now, effects=Effects()
    )
    assert attempt.preemptions == 1


def test_run_zeros_stop_at_the_timeout_read_before_its_start_is_no_preemption() -> None:
    record = make_record(state=JobState.FAILED)
    attempt = record.attempts[0]
    attempt.preemptions = 1
    record.mark(evidence_marker(KIT_PREEMPTED_KEY, 1, "0"))  # Vertex's SIGTERM at the timeout
    discount_timeout_stop(record, attempt)
    assert attempt.preemptions == 0
