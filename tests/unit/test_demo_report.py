"""The demo's pure parts: scenarios, run traces, step accounting, cost, checks, report, rendering."""

from __future__ import annotations

import io
import json
from datetime import UTC

import pytest

from devstack.demo import runner, scenarios
from devstack.demo.cost import Prices, StepAccount, account_steps, estimate_cost
from devstack.demo.report import build_report, check_request, resume_gaps
from devstack.demo.scenarios import build_scenarios
from devstack.demo.traces import AttemptTrace, RequestTrace, RunTrace, runs_from_output
from devstack.demo.view import LiveView, format_table, human_bytes, render_report
from shared.errors import InvalidRequest
from shared.requests.policy import validate_request
from shared.settings import Settings

PRICES = Prices(
    machine_type="a2-highgpu-1g",
    location="us-central1",
    on_demand_per_hour=3.6,
    spot_per_hour=1.2,
    as_of="2025-03-06",
    source="test",
    caveat="test",
)


def line(run: int, event: str, step: int, **fields: object) -> dict[str, object]:
    payload = {"severity": "INFO", "message": event, "event": event, "step": step, **fields}
    return {"run": run, "stream": "stdout", "line": json.dumps(payload)}


def ckpt(run: int, step: int, size: int = 800, **fields: object) -> dict[str, object]:
    return line(run, "checkpoint", step, checkpoint=f"step-{step:06d}/", bytes=size, **fields)


def scenario(key: str) -> scenarios.Scenario:
    return next(s for s in build_scenarios(1) if s.key == key)


def attempt(n: int, strategy: str, runs: list[RunTrace], preemptions: int = 0, **kw: object) -> AttemptTrace:
    return AttemptTrace(
        n=n,
        strategy=strategy,
        location="us-central1",
        job=f"projects/p/locations/l/customJobs/{n}",
        state=kw.get("state", "JOB_STATE_SUCCEEDED"),
        preemptions=preemptions,
        preemptions_injected=preemptions,
        outcome=kw.get("outcome", "succeeded"),
        runs=runs,
    )


def requeued_trace() -> RequestTrace:
    """Attempt 1: 7 runs, each checkpointing on SIGTERM; attempt 2 resumes at 350 and finishes."""
    first_runs = []
    for run in range(1, 8):
        start, end = (run - 1) * 50, run * 50
        first_runs += [line(run, "resume", start), line(run, "stopping", end), ckpt(run, end, reason="sigterm")]
    second = [line(1, "resume", 350)] + [ckpt(1, s) for s in range(400, 1001, 50)] + [line(1, "final", 1000)]
    trace = RequestTrace(
        scenario("requeued"),
        status="SUCCEEDED",
        attempts=[
            attempt(1, "SPOT", runs_from_output(first_runs), 7, state="JOB_STATE_FAILED", outcome="requeued"),
            attempt(2, "SPOT", runs_from_output(second)),
        ],
        vertex_jobs=2,
        checkpoints_present={"step-000950/": 800, "step-001000/": 800},
        reported_pruned=18,
        reported_bytes_freed=18 * 800,
    )
    return trace


# Reading the trainer's lines.


def test_runs_are_grouped_by_run_and_read_from_structured_stdout_only() -> None:
    output = [
        line(1, "resume", 0),
        ckpt(1, 50),
        {"run": 1, "stream": "stderr", "line": '{"event": "checkpoint", "step": 999}'},
        {"run": 1, "stream": "stdout", "line": "plain text from a library"},
        line(1, "stopping", 73),
        ckpt(1, 73, reason="sigterm"),
        line(2, "resume", 73),
        line(2, "final", 100),
    ]
    first, second = runs_from_output(output)
    assert (first.start_step, first.end_step, sorted(first.checkpoints)) == (0, 73, ["step-000050/", "step-000073/"])
    assert (second.start_step, second.end_step, second.finished) == (73, 100, True)
    assert first.steps_computed == 73 and second.steps_computed == 27


def test_a_run_killed_before_it_resumed_computed_nothing() -> None:
    (run,) = runs_from_output([{"run": 1, "stream": "stderr", "line": "Traceback ..."}, line(1, "stopping", 0)])
    assert run.start_step is None and run.steps_computed == 0


# Step accounting.


def test_sigterm_checkpoints_lose_no_steps() -> None:
    trace = requeued_trace()
    account = account_steps(trace.runs, succeeded=True, final_step=1000)
    assert account == StepAccount(computed=350 + 650, useful=1000, lost=0)


def test_steps_after_the_last_checkpoint_of_a_killed_run_are_lost() -> None:
    # Run 1 reached step 80 but was killed while writing its SIGTERM checkpoint: run 2 resumes at 50.
    runs = runs_from_output(
        [line(1, "resume", 0), ckpt(1, 50), line(1, "stopping", 80), line(2, "resume", 50), line(2, "final", 100)]
    )
    assert account_steps(runs, succeeded=True, final_step=100) == StepAccount(computed=130, useful=100, lost=30)


def test_a_failed_request_has_no_useful_steps() -> None:
    runs = runs_from_output([line(1, "resume", 0), ckpt(1, 100), line(1, "error", 120)])
    assert account_steps(runs, succeeded=False, final_step=None) == StepAccount(computed=120, useful=0, lost=0)


def test_resume_gaps_flag_a_run_that_restarted_from_zero() -> None:
    good = requeued_trace().runs
    assert resume_gaps(good) == []
    bad = runs_from_output([line(1, "resume", 0), ckpt(1, 50), line(2, "resume", 0)])
    assert resume_gaps(bad) == ["run 2 started at step 0, the newest complete checkpoint before it was at step 50"]


def test_last_checkpoint_step_is_where_the_next_attempt_must_start() -> None:
    first, second = requeued_trace().attempts
    assert first.last_checkpoint_step == 350 == second.start_step


# Cost.


def test_spot_attempts_are_priced_at_spot_and_fallback_attempts_on_demand() -> None:
    runs = runs_from_output([line(1, "resume", 0), line(1, "final", 60)])
    spot = attempt(1, "SPOT", runs)
    standard = attempt(2, "STANDARD", runs_from_output([line(1, "resume", 0), line(1, "final", 60)]))
    account = StepAccount(computed=120, useful=60, lost=0)
    # 60 steps of 60 s = 1 hour on each strategy.
    cost = estimate_cost([spot, standard], account, PRICES)
    assert cost.as_run_usd == pytest.approx(1.2 + 3.6)
    assert cost.on_demand_usd == pytest.approx(2 * 3.6)


def test_the_on_demand_estimate_excludes_steps_lost_to_preemption() -> None:
    account = StepAccount(computed=90, useful=60, lost=30)
    assert estimate_cost([], account, PRICES).on_demand_usd == pytest.approx(3.6)


def test_the_price_table_in_the_repo_is_dated_and_sourced() -> None:
    prices = Prices.load()
    assert prices.machine_type == scenarios.MACHINE_TYPE
    assert 0 < prices.spot_per_hour < prices.on_demand_per_hour
    assert prices.as_of[:4].isdigit() and prices.source


# Checks.


def test_a_requeued_request_that_resumed_from_its_checkpoint_is_as_designed() -> None:
    assert check_request(requeued_trace(), keep_last=2) == []


def test_differences_name_what_went_wrong() -> None:
    trace = requeued_trace()
    trace.attempts[1].strategy = "STANDARD"
    trace.attempts[0].preemptions = 6
    trace.vertex_jobs = 3
    trace.checkpoints_present = {f"step-{s:06d}/": 1 for s in (900, 950, 1000)}
    differences = check_request(trace, keep_last=2)
    assert "attempt 2 ran STANDARD, expected SPOT" in differences
    assert "attempt 1: spotjobs counted 6 preemption(s), 7 were planned (7 injected)" in differences
    assert "3 Vertex jobs for 2 attempt(s)" in differences
    assert "3 checkpoints kept after pruning, expected at most 2" in differences


def test_the_pruners_own_report_must_match_the_bucket() -> None:
    trace = requeued_trace()
    trace.reported_pruned = 17
    assert check_request(trace, keep_last=2) == [
        "prune_checkpoints reported 17 checkpoint(s) deleted, 18 are gone from the bucket"
    ]


def test_a_request_that_never_got_its_second_attempt_is_reported() -> None:
    trace = requeued_trace()
    trace.status = "REQUEUED"
    trace.attempts = trace.attempts[:1]
    trace.vertex_jobs = 1
    differences = check_request(trace, keep_last=2)
    assert "outcome is requeued, expected succeeded" in differences
    assert "1 attempt(s), expected 2" in differences


def test_a_rejected_request_needs_an_alert_with_its_violations() -> None:
    trace = RequestTrace(scenario("invalid"))
    assert trace.outcome == "missing"
    assert "outcome is missing, expected rejected" in check_request(trace, keep_last=2)
    trace.alerts = [{"kind": "invalid_request", "details": {"violations": ["machineType: n1"]}}]
    assert trace.outcome == "rejected" and check_request(trace, keep_last=2) == []


def test_a_duplicate_must_have_been_suppressed() -> None:
    runs = runs_from_output([line(1, "resume", 0), ckpt(1, 950), ckpt(1, 1000), line(1, "final", 1000)])
    trace = RequestTrace(
        scenario("duplicate"),
        status="SUCCEEDED",
        attempts=[attempt(1, "SPOT", runs)],
        vertex_jobs=1,
        checkpoints_present={"step-001000/": 800},
        reported_pruned=1,
    )
    assert "published 2 times, 0 duplicate(s) suppressed" in check_request(trace, keep_last=2)
    trace.duplicates_suppressed = 1
    assert check_request(trace, keep_last=2) == []


# The report.


def test_the_report_totals_add_up() -> None:
    trace = requeued_trace()
    failing = RequestTrace(
        scenario("code-bug"),
        status="FAILED",
        attempts=[
            attempt(
                1,
                "SPOT",
                runs_from_output([line(1, "resume", 0), ckpt(1, 100), line(1, "error", 120)]),
                state="JOB_STATE_FAILED",
                outcome="failed",
            )
        ],
        vertex_jobs=1,
        checkpoints_present={"step-000100/": 800},
        alerts=[{"kind": "job_failed", "request_id": "demo-s1-code-bug"}],
    )
    alerts = [{"kind": "job_failed"}, {"kind": "preemption_storm"}, {"kind": "preemption_storm"}]
    report = build_report([trace, failing], seed=1, keep_last=2, prices=PRICES, alerts=alerts, wall_seconds=12.3)
    assert report["scenario_ok"] is True
    totals = report["totals"]
    assert totals["jobs"] == 3 and totals["preemptions"] == 7 and totals["requeues"] == 1
    assert totals["steps_computed"] == 1120 and totals["steps_useful"] == 1000
    assert totals["goodput"] == pytest.approx(1000 / 1120, abs=1e-4)
    assert totals["alerts"] == 3 and totals["alerts_by_kind"] == {"job_failed": 1, "preemption_storm": 2}
    requeued = report["requests"][0]
    assert requeued["checkpoints_written"] == 20 and requeued["checkpoints_kept"] == 2
    assert requeued["checkpoints_pruned"] == 18  # all but step-000950 and step-001000
    assert requeued["bytes_freed"] == 18 * 800
    assert requeued["attempts"][1]["start_step"] == requeued["attempts"][0]["last_checkpoint_step"] == 350
    assert totals["cost_spot_usd"] < totals["cost_on_demand_usd"]
    json.dumps(report)  # the --json output


# The scenario.


def test_scenarios_follow_the_seed() -> None:
    assert build_scenarios(7) == build_scenarios(7)
    assert build_scenarios(7) != build_scenarios(8)
    keys = [s.key for s in build_scenarios(1)]
    assert keys == [
        "few-preemptions",
        "requeued",
        "fallback",
        "duplicate",
        "invalid",
        "code-bug",
        "new-data",
        "two-node",
    ]


@pytest.mark.parametrize("seed", [1, 2, 99])
def test_the_demo_requests_pass_the_real_policy_except_the_invalid_one(seed: int) -> None:
    settings = Settings.from_env(runner.demo_stack_options(seed).function_env)
    for item in build_scenarios(seed):
        if item.trigger is not None:
            from datetime import datetime

            from shared.triggers.definition import parse_definition
            from shared.triggers.render import check_request_template

            definition = parse_definition(item.trigger)
            assert check_request_template(definition, settings, datetime.now(UTC)) == []
            assert definition.source["bucket"] == "spotjobs-data"
            continue
        if item.outcome == scenarios.REJECTED:
            with pytest.raises(InvalidRequest) as rejected:
                validate_request(item.body, attributes={}, settings=settings)
            assert len(rejected.value.violations) >= 3
        else:
            request = validate_request(item.body, attributes={}, settings=settings)
            assert request.request_id == item.request_id


@pytest.mark.parametrize("seed", range(50))
def test_every_planned_preemption_lands_before_training_could_finish(seed: int) -> None:
    for item in build_scenarios(seed):
        if item.plan is not None:
            # A run is preempted right after its k-th checkpoint: about k checkpoint periods of
            # steps, one more allowed for the steps it trains until SIGTERM stops it.
            checkpoints = item.plan["after_checkpoints"]
            most_steps_before_last = item.plan["preemptions"] * (checkpoints + 1) * scenarios.CHECKPOINT_EVERY
            assert checkpoints >= 1 and most_steps_before_last < scenarios.STEPS, item.key


def test_the_requeued_plans_preempt_attempt_1_past_vertex_restarts() -> None:
    for key in ("requeued", "fallback"):
        plan = scenario(key).plan
        assert plan is not None and plan["preemptions"] == 7
        assert plan["labels"] == {"spotjobs-request-id": f"demo-s1-{key}", "spotjobs-attempt": "1"}


# Rendering.


def test_the_table_lines_up() -> None:
    assert format_table(("A", "BB"), [{"A": "long", "BB": "x"}]) == ["A     BB", "long  x"]


def test_without_a_terminal_a_line_is_printed_only_when_a_request_changes() -> None:
    stream = io.StringIO()
    view = LiveView(stream, total_steps=100, interactive=False)
    row = {
        "REQUEST": "r",
        "STATUS": "RUNNING",
        "ATTEMPT": "1 SPOT",
        "JOB STATE": "RUNNING",
        "PREEMPTIONS": "0",
        "STEPS": "10",
        "CHECKPOINTS": "1",
    }
    view.update([row])
    view.update([{**row, "STEPS": "20", "CHECKPOINTS": "2"}])
    view.update([{**row, "STATUS": "SUCCEEDED"}])
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "status=SUCCEEDED" in lines[1] and "steps=10/100" in lines[0]
    assert "\x1b[" not in stream.getvalue()


def test_on_a_terminal_the_table_is_redrawn_in_place() -> None:
    stream = io.StringIO()
    view = LiveView(stream, total_steps=100, interactive=True)
    row = {
        "REQUEST": "r",
        "STATUS": "RUNNING",
        "ATTEMPT": "1 SPOT",
        "JOB STATE": "RUNNING",
        "PREEMPTIONS": "0",
        "STEPS": "10",
        "CHECKPOINTS": "1",
    }
    view.update([row])
    view.update([row])
    assert stream.getvalue().count("\x1b[2F") == 1  # header + one row moved over once


def test_the_text_report_says_what_differed() -> None:
    trace = requeued_trace()
    trace.status = "REQUEUED"
    report = build_report([trace], seed=3, keep_last=2, prices=PRICES, alerts=[], wall_seconds=1.0)
    text = render_report(report)
    assert "0 of 1 scenarios ended as designed" in text
    assert "demo-s1-requeued: outcome is requeued, expected succeeded" in text
    assert "Goodput:" in text and "as of 2025-03-06" in text


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (512, 2048, 3 * 1024**2, 5 * 1024**3)] == ["512 B", "2.0 KiB", "3.0 MiB", "5.0 GiB"]
