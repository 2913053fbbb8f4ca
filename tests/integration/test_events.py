"""on_job_event through the embedded stack: the Vertex emulator preempts real trainer processes on
a schedule, its log sink publishes to job-events, and every function is fed by push delivery."""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import pytest

from devstack.samples import job_request
from shared.jobs import LABEL_ATTEMPT, LABEL_REQUEST_ID
from shared.ledger.states import RequestStatus
from tests.support.stack_events import (
    alerts_for,
    jobs_of,
    log_entry,
    new_request_id,
    runs_of,
    set_log_sink,
    submit,
    training_request,
    wait_for_status,
)

pytestmark = pytest.mark.stack


def resumed_steps(stack, job: str) -> list[int]:
    """The step each run of the job started from (its resume)."""
    return [run.start_step for run in runs_of(stack, job)]


def committed_before_each_restart(stack, job: str) -> list[int]:
    """0, then for each run but the last, the newest step it committed: where the next resumes."""
    runs = runs_of(stack, job)
    newest = [max((step for step, _ in run.checkpoints.values()), default=0) for run in runs]
    steps = [0]
    for step in newest[:-1]:
        steps.append(max(step, steps[-1]))
    return steps


def decision_lines(stack, request_id: str, event: str) -> list[dict[str, Any]]:
    return [
        line
        for line in stack.function_logs("on_job_event")
        if line.get("event") == event and line.get("request_id") == request_id
    ]


def test_three_preemptions_succeed_within_one_attempt(stack) -> None:
    request_id = new_request_id("pre3")
    # Documented signals only: the job stays RUNNING; the kit's lines say what happened.
    # Each run is preempted after its first checkpoint (so it runs the kit, which says so, however
    # slow the machine); three runs of about 50 steps leave the fourth steps to train.
    submit(stack, request_id, preemptions=3, after_checkpoints=1, steps=500)

    record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED)
    preemptions = stack.wait_for(
        lambda: len(lines) == 3 and lines if (lines := decision_lines(stack, request_id, "preemption")) else None,
        30,
        "three preemption lines",
    )

    [attempt] = record.attempts
    assert attempt.outcome == "succeeded" and record.requeue is None
    assert stack.vertex_control("GET", f"/emulator/v1/{attempt.job}")["preemptions"] == 3
    assert stack.ledger().get(request_id).attempts[0].preemptions == 3
    assert [line["preemptions"] for line in preemptions] == [1, 2, 3]
    assert all(
        line["severity"] == "WARNING"
        and line["job"] == attempt.job
        and line["attempt"] == 1
        and line["location"] == attempt.location
        for line in preemptions
    )
    assert {line["source"] for line in preemptions} == {"kit"}
    assert decision_lines(stack, request_id, "requeue") == []
    assert len(jobs_of(stack, request_id, attempt.location)) == 1
    assert record.prune_requested_at and record.finished_at
    # Each run resumed from the newest complete checkpoint the one before committed.
    assert resumed_steps(stack, attempt.job) == committed_before_each_restart(stack, attempt.job)


def test_seven_preemptions_requeue_one_attempt_that_resumes_and_succeeds(stack) -> None:
    request_id = new_request_id("pre7")
    # After each run's first checkpoint: every run started (and says so) and attempt 2 has a
    # checkpoint to resume from, however busy the machine; a run reclaimed while Python is still
    # starting would leave no evidence to count.
    submit(stack, request_id, preemptions=7, after_checkpoints=1, steps=1500)

    record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED)

    first, second = record.attempts
    # Vertex documents "a STOCKOUT error", no code: the message is what is matched.
    assert first.outcome == "requeued" and "STOCKOUT" in first.error["message"]
    # Attempt 2 starts where attempt 1's last complete checkpoint left off.
    newest_of_attempt_1 = max(
        (step for run in runs_of(stack, first.job) for step, _ in run.checkpoints.values()), default=0
    )
    assert resumed_steps(stack, second.job)[0] == newest_of_attempt_1 > 0
    assert second.outcome == "succeeded" and second.n == 2
    jobs = jobs_of(stack, request_id, first.location)
    assert len(jobs) == 2 and len(jobs_of(stack, request_id, first.location, attempt=2)) == 1
    output_dirs = {job.job_spec.base_output_directory.output_uri_prefix for job in jobs}
    assert output_dirs == {stack.settings.output_dir_for(request_id)}
    assert len(decision_lines(stack, request_id, "requeue")) == 1
    stack.wait_for(
        lambda: stack.ledger().get(request_id).attempts[0].preemptions == 7,
        30,
        "seven preemptions counted",
    )


def test_last_attempt_preempted_away_gives_up_with_one_alert(stack) -> None:
    request_id = new_request_id("giveup")
    submit(stack, request_id, preemptions=7, after_seconds=0.3, steps=300, max_attempts=1)

    record = wait_for_status(stack, request_id, RequestStatus.GAVE_UP)

    [attempt] = record.attempts
    assert attempt.outcome == "gave_up" and record.requeue is None
    [alert] = alerts_for(stack, request_id, "attempts_exhausted")
    assert (alert["severity"], alert["attempt"], alert["job"]) == ("ERROR", 1, attempt.job)
    assert len(decision_lines(stack, request_id, "attempts_exhausted")) == 1
    assert jobs_of(stack, request_id, attempt.location, attempt=2) == []


def test_fallback_and_failover_shape_the_second_attempt(stack) -> None:
    request_id = new_request_id("fallback")
    submit(
        stack,
        request_id,
        preemptions=7,
        after_seconds=0.3,
        steps=300,
        locations=["us-central1", "europe-west4"],
        fallback={"after_spot_attempts": 1, "strategy": "STANDARD"},
    )

    record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED)

    first, second = record.attempts
    # With both regions priced, placement chooses among them by expected cost (docs/placement.md,
    # shared/fleet/placing.py): the failover order is what it starts from, not where it must run.
    allowed = ("us-central1", "europe-west4")
    assert first.strategy == "SPOT" and first.location in allowed
    assert second.strategy == "STANDARD" and second.location in allowed
    [job] = jobs_of(stack, request_id, second.location, attempt=2)
    assert job.job_spec.scheduling.strategy.name == "STANDARD"
    assert job.job_spec.base_output_directory.output_uri_prefix == stack.settings.output_dir_for(request_id)
    [requeue] = decision_lines(stack, request_id, "requeue")
    assert requeue["failover"] is True and requeue["fallback"] is True


def test_worker_exit_status_1_fails_with_one_alert_and_no_requeue(stack) -> None:
    request_id = new_request_id("userbug")
    submit(stack, request_id, fail_at_step=5)

    record = wait_for_status(stack, request_id, RequestStatus.FAILED)

    [attempt] = record.attempts
    assert attempt.outcome == "failed" and record.requeue is None
    assert "non-zero status of 1" in attempt.error["message"]
    [alert] = alerts_for(stack, request_id, "job_failed")
    assert alert["severity"] == "ERROR" and alert["details"]["error"] == attempt.error
    assert jobs_of(stack, request_id, attempt.location, attempt=2) == []
    assert len(decision_lines(stack, request_id, "job_failed")) == 1


def test_ten_copies_of_the_terminal_event_and_earlier_events_reversed_requeue_once(stack) -> None:
    request_id = new_request_id("dupes")
    set_log_sink(stack, False)
    try:
        submit(stack, request_id, preemptions=7, after_seconds=0.3, steps=300)
        record = stack.wait_for(
            lambda: (r := stack.ledger().get(request_id)) and r.attempts and r.attempts[0].job and r,
            60,
            "attempt 1 created",
        )
        job_name = record.attempts[0].job
        service = stack.job_service()
        stack.wait_for(
            lambda: service.get_custom_job(name=job_name).state.name == "JOB_STATE_FAILED",
            60,
            "attempt 1 to fail with STOCKOUT",
        )
    finally:
        set_log_sink(stack, True)

    terminal = log_entry(job_name, "Job failed.", f"{request_id}-final", "ERROR")
    earlier = [
        log_entry(
            job_name,
            f"The Spot VM of replica workerpool0-0 was preempted. Restarting the job (restart {k} of 6).",
            f"{request_id}-p{k}",
            "WARNING",
        )
        for k in range(6, 0, -1)
    ]
    earlier.append(log_entry(job_name, "Job is running.", f"{request_id}-running"))
    copies = [threading.Thread(target=stack.publish, args=("job_events", terminal)) for _ in range(10)]
    for thread in copies:
        thread.start()
    for thread in copies:
        thread.join()
    for data in earlier:
        stack.publish("job_events", data)

    record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED)

    assert [a.n for a in record.attempts] == [1, 2]
    assert len(jobs_of(stack, request_id, record.attempts[0].location, attempt=2)) == 1
    assert len(jobs_of(stack, request_id, record.attempts[0].location, attempt=3)) == 0
    assert len(decision_lines(stack, request_id, "requeue")) == 1
    assert len(decision_lines(stack, request_id, "requeue_published")) == 1


def test_garbage_foreign_and_irrelevant_events_are_acknowledged_without_a_trace(stack) -> None:
    ledger_before = _requests_state(stack)
    payloads = [
        b"\x00\xffnot json",
        b"[]",
        json.dumps({"resource": {"type": "gce_instance", "labels": {"instance_id": "1"}}}).encode(),
        log_entry(
            "projects/p/locations/us-central1/customJobs/123456789",
            "Job failed.",
            "foreign-1",
            "ERROR",
        ),
        json.dumps(
            {
                "resource": {
                    "type": "ml_job",
                    "labels": {"job_id": "42", "task_name": "workerpool0-0"},
                },
                "textPayload": "epoch 3 loss 0.2",
            }
        ).encode(),
    ]
    message_ids = {stack.publish("job_events", data) for data in payloads}

    def handled() -> list[dict[str, Any]] | None:
        lines = [line for line in stack.function_logs("on_job_event") if line.get("message_id") in message_ids]
        return lines if {line["message_id"] for line in lines} == message_ids else None

    lines = stack.wait_for(handled, 30, "every garbage message to be handled")
    assert sorted(line["event"] for line in lines) == sorted(
        ["ignored_event", "ignored_event", "ignored_event", "foreign_job", "irrelevant_event"]
    )
    assert {line["severity"] for line in lines} <= {"DEBUG", "INFO"}
    assert _requests_state(stack) == ledger_before


def _requests_state(stack: Any) -> set[str]:
    """The state bucket's names but `maintenance/`, which the session stack's prune and reconcile
    runs write on their own schedule (a prune run's report journal, cursors), and `alerts/`, the
    alerts log every other test's alerts write to."""
    names = {b.name for b in stack.storage().list_blobs(stack.settings.state_bucket)}
    return {name for name in names if not name.startswith(("maintenance/", "alerts/"))}


def test_a_trainer_without_the_kit_preempted_seven_times_is_requeued_with_preemptions_unknown(
    stack,
) -> None:
    request_id = new_request_id("nokit")
    # No kit: nothing says how many preemptions there were, only the STOCKOUT at the end.
    stack.vertex_control(
        "POST",
        "/emulator/v1/preemption-plans",
        {"labels": {LABEL_REQUEST_ID: request_id, LABEL_ATTEMPT: "1"}, "preemptions": 7, "after_seconds": 0.2},
    )
    command = [sys.executable, "-c", "import time; time.sleep(30)"]
    stack.publish("job_requests", job_request(request_id, command, max_attempts=1))

    record = wait_for_status(stack, request_id, RequestStatus.GAVE_UP)

    [attempt] = record.attempts
    assert attempt.outcome == "gave_up" and "STOCKOUT" in attempt.error["message"]
    assert attempt.preemptions == 0 and attempt.preemptions_unknown  # "≥1", never 0
    [alert] = alerts_for(stack, request_id, "attempts_exhausted")
    assert alert["details"]["preemptions"] == ["≥1"]


def test_a_kill_without_sigterm_still_counts_the_restart(stack) -> None:
    request_id = new_request_id("nosigterm")
    stack.vertex_control(
        "POST",
        "/emulator/v1/preemption-plans",
        {
            "labels": {LABEL_REQUEST_ID: request_id, LABEL_ATTEMPT: "1"},
            "preemptions": 2,
            "after_checkpoints": 1,  # each run started the kit (run_started) before its kill
            "grace_seconds": 0,  # SIGKILL at once: the run never says "preempted"
        },
    )
    stack.publish("job_requests", training_request(request_id, steps=400))

    record = wait_for_status(stack, request_id, RequestStatus.SUCCEEDED)

    [attempt] = record.attempts
    signals = stack.vertex_control("GET", f"/emulator/v1/{attempt.job}")["signals"]
    assert {s["signal"] for s in signals} == {"SIGKILL"}
    stack.wait_for(lambda: stack.ledger().get(request_id).attempts[0].preemptions == 2, 30, "two restarts counted")


def test_a_resubmitted_gave_up_request_resumes_at_its_step_and_fresh_starts_from_zero(stack) -> None:
    import os
    import subprocess

    from devstack.processes import REPO_ROOT

    request_id = new_request_id("resume")
    submit(stack, request_id, preemptions=7, after_checkpoints=1, steps=1500, max_attempts=1)
    gave_up = wait_for_status(stack, request_id, RequestStatus.GAVE_UP)
    newest = max(step for run in runs_of(stack, gave_up.attempts[0].job) for step, _ in run.checkpoints.values())

    def resubmit(*flags: str) -> dict[str, Any]:
        result = subprocess.run(
            [sys.executable, "-m", "spotjobs.cli", "resubmit", request_id, "--json", *flags],
            cwd=REPO_ROOT,
            env={**os.environ, **stack.env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    resumed = resubmit()
    assert resumed["resumed_from"]["step"] == newest > 0
    record = wait_for_status(stack, resumed["request_id"], RequestStatus.SUCCEEDED)
    assert resumed_steps(stack, record.attempts[0].job)[0] == newest  # where the old one stopped

    fresh = resubmit("--fresh")
    assert fresh["resumed_from"] is None
    record = wait_for_status(stack, fresh["request_id"], RequestStatus.SUCCEEDED)
    assert resumed_steps(stack, record.attempts[0].job)[0] == 0
