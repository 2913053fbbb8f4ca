"""reconcile through the embedded stack: with the Vertex emulator's log sink switched off, no job
event reaches on_job_event, and `{"task": "reconcile"}` messages on the maintenance topic alone
must drive every request to the outcome the events would have.

What is asserted is what the design guarantees, in passes: once every request's last job has ended
at Vertex (the trainers' and the emulator's part, on their own clock), the next pass decides each
one (two are allowed: a pass may have begun just before the last end)."""

from __future__ import annotations

import json

import pytest

from shared.jobs import JobState, state_name
from shared.ledger.states import RequestStatus
from tests.support.reconcile_passes import passes_until, reconcile_until
from tests.support.stack_events import jobs_of, new_request_id, set_log_sink, submit

# The world's part (preempted runs, a re-queue's new job) may take minutes on a loaded machine.
pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]


def test_reconcile_alone_reaches_the_same_outcomes(stack) -> None:
    succeeds = new_request_id("rc-pre3")
    requeued = new_request_id("rc-pre7")
    fails = new_request_id("rc-bug")
    expected = {succeeds: RequestStatus.SUCCEEDED, requeued: RequestStatus.SUCCEEDED, fails: RequestStatus.FAILED}
    ledger = stack.ledger()
    set_log_sink(stack, False)
    try:
        submit(stack, succeeds, preemptions=3, after_seconds=1.0, steps=500)
        submit(stack, requeued, preemptions=7, after_seconds=0.3, steps=300)
        submit(stack, fails, fail_at_step=5)

        def settled() -> bool:
            records = {request_id: ledger.get(request_id) for request_id in expected}
            return all(r is not None and r.status == expected[rid] for rid, r in records.items())

        def last_jobs_ended() -> bool:
            """Every request's last job has ended at Vertex, its error set if it failed (the re-queued
            one's second: its first one's end is reconcile's to decide, in the passes meanwhile)."""
            service = stack.job_service()
            for request_id in expected:
                record = ledger.get(request_id)
                if record is None or record.latest is None or record.latest.job is None:
                    return False
                if request_id == requeued and len(record.attempts) < 2:
                    return False
                job = service.get_custom_job(name=record.latest.job)
                ended = state_name(job.state) in JobState.TERMINAL
                if not ended or (state_name(job.state) == JobState.FAILED and not job.error.message):
                    return False
            return True

        try:
            passes_until(stack, last_jobs_ended, "every request's last job to end", timeout=300)
            reconcile_until(stack, settled, "reconcile to settle every request", passes=2)
        except AssertionError:
            print(_diagnosis(stack, ledger, expected))
            raise
    finally:
        set_log_sink(stack, True)

    success, two_attempts, failure = (ledger.get(request_id) for request_id in expected)
    assert [a.outcome for a in success.attempts] == ["succeeded"]
    assert [a.outcome for a in two_attempts.attempts] == ["requeued", "succeeded"]
    assert "STOCKOUT" in two_attempts.attempts[0].error["message"]
    assert len(jobs_of(stack, requeued, two_attempts.attempts[0].location, attempt=2)) == 1
    assert [a.outcome for a in failure.attempts] == ["failed"] and failure.requeue is None
    assert "job_failed:1" in failure.markers

    event_lines = [line for line in stack.function_logs("on_job_event") if line.get("request_id") in expected]
    assert event_lines == [], "with the sink off, every decision came from reconcile"
    reconcile_lines = stack.function_logs("reconcile")
    decided = {
        line["request_id"]
        for line in reconcile_lines
        if line.get("event") in ("requeue", "job_succeeded", "job_failed") and line.get("request_id") in expected
    }
    assert decided == set(expected)
    assert any(line.get("event") == "reconcile_summary" for line in reconcile_lines)


def _diagnosis(stack, ledger, expected) -> str:
    """What a timeout leaves to read: each record, its latest job as Vertex has it, the last
    reconcile passes and the run lease."""
    from shared.ledger.run_lock import lock_path

    service = stack.job_service()
    lines = []
    for request_id in expected:
        record = ledger.get(request_id)
        attempts = [(a.n, a.job, a.state, a.outcome) for a in record.attempts] if record else []
        lines.append(f"{request_id}: {record.status if record else None} {attempts}")
        if record and record.latest and record.latest.job:
            job = service.get_custom_job(name=record.latest.job)
            lines.append(f"  vertex: {job.state.name} error={job.error.message!r}")
    from collections import Counter

    from shared.adapters.vertex import parent_path

    parent = parent_path(stack.settings.project, stack.settings.location)
    states = Counter(job.state.name for job in service.list_custom_jobs(parent=parent))
    lines.append(f"every job in the emulator, by state: {dict(states)}")
    passes = [
        line
        for line in stack.function_logs("reconcile")
        if line.get("event") in ("reconcile_summary", "run_in_progress", "retry")
    ][-10:]
    lines += [json.dumps(line) for line in passes]
    lease = stack.storage().bucket(stack.settings.state_bucket).get_blob(lock_path("reconcile"))
    lines.append(f"lease: {lease.download_as_text() if lease else None}")
    return "\n".join(lines)
