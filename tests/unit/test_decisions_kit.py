"""Decisions on what production gives: the trainer kit's lines and documented job states only.

Vertex documents no restart state and no per-preemption line: a preempted Spot job stays RUNNING
while its worker restarts, and FAILS with a STOCKOUT error once the restarts run out. These tests
feed decide() exactly that, plus the kit's lines, and check the count, the re-queue rule and the
honest "≥1" when nothing said how often.
"""

from __future__ import annotations

import copy
from datetime import datetime

from spotjobs_kit.lines import KitRecord

from shared.deciding.decisions import Decision, Observation, decide
from shared.deciding.events import Signal
from shared.deciding.preemptions import preemptions_text
from shared.jobs import JobState
from shared.ledger.records import RequestRecord
from shared.ledger.states import RequestStatus
from tests.support.decide import JOB1, NOW, POLICY, USER_ERROR, at, job, make_record

DOCUMENTED_STOCKOUT = {"code": 13, "message": "The job failed with a STOCKOUT error."}


def kit(event: str, run: int, **fields: object) -> KitRecord:
    return KitRecord(event=event, request_id="req-1", attempt=1, run=run, job_id="111", **fields)


def line(record: RequestRecord, record_kit: KitRecord, now: datetime = NOW) -> Decision:
    """One kit line, decided twice (as a redelivery would): the second time changes nothing."""
    observation = Observation(1, None, Signal.KIT, kit=record_kit, job_name=JOB1)
    decision = decide(copy.deepcopy(record), observation, POLICY, now)
    again = decide(copy.deepcopy(decision.record), observation, POLICY, now)
    assert again.record == decision.record and not again.effects.lines
    return decision


def read(record: RequestRecord, state: str, **kwargs: object) -> Decision:
    return decide(copy.deepcopy(record), Observation(1, job(state, **kwargs)), POLICY, NOW)


def running() -> RequestRecord:
    return read(make_record(), JobState.RUNNING).record


def test_three_preempted_runs_count_three_once_each() -> None:
    record = running()
    events: list[str] = []
    for run in range(3):
        for item in (kit("run_started", run, resumed_step=run * 50), kit("preempted", run, step=run * 50 + 20)):
            decision = line(record, item)
            record = decision.record
            events += [e for e in decision.effects.events if e == "preemption"]
    record = line(record, kit("run_started", 3, resumed_step=150)).record
    assert record.attempts[0].preemptions == 3 and events == ["preemption"] * 3
    assert record.status == RequestStatus.RUNNING  # the job never left RUNNING: no Vertex read


def test_a_restart_without_a_preempted_line_still_counts() -> None:
    # Killed without notice (grace 0): the run never said "preempted", the next run's start does.
    record = line(running(), kit("run_started", 0, resumed_step=0)).record
    decision = line(record, kit("run_started", 1, resumed_step=0))
    assert decision.record.attempts[0].preemptions == 1
    [preemption] = [l for l in decision.effects.lines if l.event == "preemption"]
    assert preemption.fields["source"] == "kit"


def test_a_stockout_failure_without_evidence_reports_at_least_one_preemption() -> None:
    decision = read(running(), JobState.FAILED, update=200, error=DOCUMENTED_STOCKOUT)
    attempt = decision.record.attempts[0]
    assert decision.record.status == RequestStatus.REQUEUED
    assert attempt.preemptions == 0 and attempt.preemptions_unknown
    assert preemptions_text(attempt) == "≥1"


def test_kit_evidence_requeues_a_failure_whose_error_says_nothing_of_preemption() -> None:
    record = running()
    for item in (kit("run_started", 0), kit("preempted", 0, step=30)):
        record = line(record, item).record
    decision = read(record, JobState.FAILED, update=200, error={"code": 13, "message": "Internal error."})
    assert decision.record.status == RequestStatus.REQUEUED
    assert decision.record.requeue is not None and decision.record.requeue.attempt == 2
    [requeue_line] = [l for l in decision.effects.lines if l.event == "requeue"]
    assert "trainer kit saw its last run preempted" in requeue_line.fields["reason"]
    assert preemptions_text(decision.record.attempts[0]) == "1"


def test_a_trainer_that_exits_1_fails_without_a_requeue_even_after_earlier_preemptions() -> None:
    record = running()
    for item in (kit("run_started", 0), kit("preempted", 0), kit("run_started", 1)):
        record = line(record, item).record
    decision = read(record, JobState.FAILED, update=200, error=USER_ERROR)
    assert decision.record.status == RequestStatus.FAILED and decision.record.requeue is None
    assert [a.kind for a in decision.effects.alerts] == ["job_failed"]
    assert decision.record.attempts[0].preemptions == 1  # the earlier one is still counted


def test_checkpoint_lines_are_counted_once_in_order() -> None:
    record = running()
    lines = (
        (50, 2.0, at(100), 10**9),
        (100, 4.0, at(160), 3 * 10**9),
        (100, 4.0, at(160), 3 * 10**9),
        (50, 2.0, at(100), 10**9),
    )
    for step, seconds, moment, size in lines:
        record = line(
            record, kit("checkpoint_committed", 0, step=step, seconds=seconds, time=moment, bytes=size)
        ).record
    attempt = record.attempts[0]
    assert (attempt.checkpoints_committed, attempt.checkpoint_seconds) == (2, 6.0)
    assert (attempt.first_checkpoint_at, attempt.last_checkpoint_at) == (at(100), at(160))
    # the newest one's size, what placement weighs of moving it (a late older line is not it)
    assert (attempt.last_checkpoint, attempt.last_checkpoint_bytes) == ([0, 100], 3 * 10**9)


def test_a_kit_line_of_another_job_is_not_counted_for_the_recorded_one() -> None:
    record = running()
    observation = Observation(1, None, Signal.KIT, kit=kit("preempted", 0), job_name="projects/p/x/9")
    decision = decide(copy.deepcopy(record), observation, POLICY, NOW)
    assert decision.record.attempts[0].preemptions == 0 and not decision.record.markers


def test_a_worker_restarted_after_its_code_raised_is_no_preemption() -> None:
    record = running()
    for item in (kit("run_started", 0), kit("run_failed", 0, step=12), kit("run_started", 1)):
        record = line(record, item).record
    assert record.attempts[0].preemptions == 0


def test_a_line_that_only_names_the_package_is_no_kit_line() -> None:
    from spotjobs_kit.lines import parse_kit_line

    assert parse_kit_line("Requirement already satisfied: spotjobs-kit in /usr/lib/python3") is None


def test_the_last_run_of_a_stockout_counts_even_if_it_never_said_preempted() -> None:
    record = running()
    for run in range(7):  # seven runs started; the seventh was reclaimed before its line
        record = line(record, kit("run_started", run)).record
    assert record.attempts[0].preemptions == 6
    decision = read(record, JobState.FAILED, update=200, error=DOCUMENTED_STOCKOUT)
    assert decision.record.attempts[0].preemptions == 7
    assert not decision.record.attempts[0].preemptions_unknown


# A SUCCEEDED job is not always a success: Vertex says the process exited 0, the kit says more.


def preempted_then_exited(*runs: int) -> RequestRecord:
    """Runs 0..last started; each preempted; no run_finished (a trainer that exits 0 after SIGTERM)."""
    record = running()
    for run in runs:
        for item in (kit("run_started", run), kit("preempted", run, step=40 * (run + 1))):
            record = line(record, item).record
    return record


def test_a_success_whose_last_run_was_preempted_and_unfinished_is_requeued_with_one_alert() -> None:
    record = preempted_then_exited(0, 1)
    # 400 s after the end: past the settle time, no later run's line came.
    decision = decide(copy.deepcopy(record), Observation(1, job(JobState.SUCCEEDED, update=200)), POLICY, NOW)

    stored = decision.record
    assert decision.waiting is None
    assert stored.status == RequestStatus.REQUEUED and stored.requeue is not None
    assert (stored.requeue.attempt, stored.requeue.location, stored.requeue.reason) == (2, "us-central1", "preemption")
    assert stored.attempts[0].outcome == "requeued" and stored.attempts[0].preemptions == 2
    assert not decision.effects.prune_requested and stored.prune_requested_at is None and not stored.finished_at
    [alert] = decision.effects.alerts
    assert (alert.kind, alert.severity, alert.attempt, alert.details["last_run"]) == (
        "incomplete_success",
        "WARNING",
        1,
        1,
    )
    assert [pending["kind"] for pending in stored.pending_alerts] == ["incomplete_success"]  # the outbox's
    assert decision.effects.events == ("incomplete_success", "requeue") and decision.effects.requeue_decided
    # Delivered again (or by reconcile): decided already, nothing repeats.
    again = decide(copy.deepcopy(stored), Observation(1, job(JobState.SUCCEEDED, update=200)), POLICY, NOW)
    assert again.record == stored and not again.effects.alerts and not again.effects.requeue_decided


def test_a_success_whose_last_run_said_run_finished_is_a_success_at_once() -> None:
    finished = line(preempted_then_exited(0), kit("run_finished", 0, step=600)).record  # preempted in its last save
    restarted = line(preempted_then_exited(0), kit("run_started", 1)).record  # run 1 trained to the end
    restarted = line(restarted, kit("run_finished", 1, step=600)).record
    for record in (finished, restarted):
        decision = read(record, JobState.SUCCEEDED, update=590)  # ended 10 s ago
        assert decision.record.status == RequestStatus.SUCCEEDED and decision.effects.prune_requested
        assert decision.effects.alerts == [] and decision.waiting is None


def test_a_success_whose_last_run_never_said_run_finished_nor_preempted_is_a_success_once_settled() -> None:
    record = line(preempted_then_exited(0), kit("run_started", 1)).record  # a trainer that never calls finish()
    assert read(record, JobState.SUCCEEDED, update=590).waiting  # its run_finished may be on its way
    decision = read(record, JobState.SUCCEEDED, update=200)
    assert decision.record.status == RequestStatus.SUCCEEDED and decision.effects.alerts == []


def test_a_success_without_kit_lines_is_a_success_at_once() -> None:
    decision = read(running(), JobState.SUCCEEDED, update=590)
    assert decision.record.status == RequestStatus.SUCCEEDED and decision.waiting is None


def test_a_success_after_an_unfinished_preempted_run_waits_for_later_kit_lines() -> None:
    record = preempted_then_exited(0)
    just_ended = job(JobState.SUCCEEDED, update=590)  # 10 s ago: run 1's run_started may be on its way
    waiting = decide(copy.deepcopy(record), Observation(1, just_ended), POLICY, NOW)
    assert waiting.waiting and waiting.record.status == RequestStatus.RUNNING
    assert waiting.record.attempts[0].outcome is None and not waiting.effects.alerts
    # They were on their way: the run that trained to the end started after the preempted one.
    record = line(waiting.record, kit("run_started", 1)).record
    record = line(record, kit("run_finished", 1, step=600)).record
    decided = decide(copy.deepcopy(record), Observation(1, just_ended), POLICY, NOW)
    assert decided.record.status == RequestStatus.SUCCEEDED and not decided.effects.alerts


def test_an_incomplete_success_of_the_last_allowed_attempt_gives_up_and_says_why() -> None:
    record = preempted_then_exited(0)
    record.request["max_attempts"] = 1
    decision = read(record, JobState.SUCCEEDED, update=200)
    assert decision.record.status == RequestStatus.GAVE_UP and decision.record.requeue is None
    assert sorted(a.kind for a in decision.effects.alerts) == ["attempts_exhausted", "incomplete_success"]


def test_a_huge_run_index_costs_bounded_memory_and_counts_nothing() -> None:
    # Issue 32 item 8: the run index is any writer's number; nothing is built in proportion to it.
    import tracemalloc

    record = running()
    tracemalloc.start()
    try:
        # Refused, not evidence: each delivery logs its `kit_line_refused` and changes nothing.
        observation = Observation(1, None, Signal.KIT, kit=kit("preempted", 2_000_000, step=1), job_name=JOB1)
        decision = decide(copy.deepcopy(record), observation, POLICY, NOW)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000, peak
    assert decision.record.attempts[0].preemptions == 0 and decision.record.markers == record.markers


def test_runs_within_the_limit_still_count_the_restarts_between_them() -> None:
    from shared.jobs import MAX_SPOT_RESTARTS

    record = line(running(), kit("run_started", MAX_SPOT_RESTARTS)).record
    assert record.attempts[0].preemptions == MAX_SPOT_RESTARTS  # every earlier run ended by a restart


def test_a_crafted_text_payload_is_no_kit_line_and_never_an_exception() -> None:
    # Issue 32 item 8: any job writes log text; nesting deep enough to exhaust the recursion limit
    # (and a text far longer than any kit line) is simply not a kit line.
    from spotjobs_kit.lines import KEY, parse_kit_line

    nested = '{"x":' + "[" * 200_000 + f' "{KEY}"'
    assert parse_kit_line(nested) is None
    assert parse_kit_line("{" * 100_000 + f'"{KEY}"') is None
    assert parse_kit_line({"message": nested}) is None
