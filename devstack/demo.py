"""`spotjobs demo`: one scripted scenario through the real functions on the embedded stack.

The demo starts the embedded stack, registers a preemption plan per request with the Vertex AI
emulator, publishes six job requests to `job-requests` and then only watches: the ledger, the
emulator's record of each job's runs (the trainer's JSON lines say where each run started and
which checkpoints it committed), the checkpoint bucket, the ops-alerts topic and the functions'
decision logs. When every request has ended it asks for a prune pass, waits for the checkpoints to
be pruned, stops the stack and reports per request and in total, with an estimated cost on Spot
and on demand and the goodput (useful training steps / steps computed).

Scenarios (request ids, plans and training data follow `--seed`):

- few-preemptions: preempted a few times, succeeds within attempt 1;
- requeued: preempted 7 times (past Vertex's 6 restarts), re-queued, succeeds on attempt 2
  starting from the last complete checkpoint of attempt 1;
- fallback: the same, with `fallback: {after_spot_attempts: 1, strategy: STANDARD}`;
- duplicate: the same request published twice, one job;
- invalid: rejected with its reasons and an alert, no job;
- code-bug: the trainer fails at a step, an alert, no re-queue.

Progress goes to stderr (a live table on a terminal, plain lines otherwise); the report goes to
stdout, as text or, with `--json`, as one JSON document. The exit status is 0 only when every
scenario ended as designed; otherwise it is 1 and the report says what differed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.ledger import Attempt
from shared.states import TERMINAL_STATUSES
from shared.vertex import JobState, is_terminal

if TYPE_CHECKING:
    from devstack.stack import Stack

PRICES_PATH = Path(__file__).parent / "data" / "prices.json"
ALERTS_SUBSCRIPTION = "ops-alerts-reader"  # the stack's pull subscription on ops-alerts
MACHINE_TYPE = "a2-highgpu-1g"
ACCELERATOR = {"acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
EXECUTOR_IMAGE = "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest"
ALLOWED_IMAGE_PREFIX = "us-docker.pkg.dev/vertex-ai/"
TRAINER_MODULE = "devstack.trainer"
STEPS = 1000
CHECKPOINT_EVERY = 50
STEP_SECONDS = 0.01
FAIL_AT_STEP = 120
VERTEX_MAX_PREEMPTIONS = 7  # six restarts, then the seventh preemption fails the job (STOCKOUT)
# What one demo training step stands for when the scenario is priced.
SECONDS_PER_STEP_PRICED = 60.0
POLL_SECONDS = 0.5
SETTLE_TIMEOUT_SECONDS = 150.0
PRUNE_TIMEOUT_SECONDS = 45.0

SUCCEEDED, FAILED, REJECTED = "succeeded", "failed", "rejected"


# The scenario.


@dataclass(frozen=True)
class ExpectedAttempt:
    strategy: str
    preemptions: int


@dataclass(frozen=True)
class Scenario:
    key: str
    request_id: str
    description: str
    outcome: str  # SUCCEEDED | FAILED | REJECTED
    attempts: tuple[ExpectedAttempt, ...]
    body: bytes
    publish_count: int = 1
    plan: Mapping[str, Any] | None = None  # a Vertex emulator preemption plan

    def expected_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "description": self.description,
            "attempts": [{"strategy": a.strategy, "preemptions": a.preemptions} for a in self.attempts],
        }


def trainer_job(display_name: str, *, data_seed: int, fail_at_step: int | None = None) -> dict[str, Any]:
    """A CustomJob (REST JSON, as a user would POST it) that runs the demo trainer."""
    args = [
        "--steps", str(STEPS), "--checkpoint-every", str(CHECKPOINT_EVERY),
        "--step-seconds", str(STEP_SECONDS), "--seed", str(data_seed),
    ]
    if fail_at_step is not None:
        args += ["--fail-at-step", str(fail_at_step)]
    return {
        "displayName": display_name,
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": MACHINE_TYPE, **ACCELERATOR},
                    "replicaCount": "1",
                    "pythonPackageSpec": {
                        "executorImageUri": EXECUTOR_IMAGE,
                        "packageUris": ["gs://spotjobs-demo-packages/spotjobs-demo-trainer-0.1.tar.gz"],
                        "pythonModule": TRAINER_MODULE,
                        "args": args,
                    },
                }
            ]
        },
    }


def _invalid_job() -> dict[str, Any]:
    """A request breaking several policy rules at once, so the rejection lists every reason."""
    return {
        "displayName": "crypto-miner",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "n1-standard-96"},
                    "replicaCount": "64",
                    "containerSpec": {"imageUri": "docker.io/someone/miner:latest"},
                }
            ],
            "scheduling": {"strategy": "STANDARD"},
        },
    }


def build_scenarios(seed: int) -> list[Scenario]:
    rng = random.Random(seed)

    def request_id(key: str) -> str:
        return f"demo-s{seed}-{key}"

    def plan(key: str, preemptions: int, low: float, high: float) -> dict[str, Any]:
        # A run trains at most `high / STEP_SECONDS` steps before its preemption, so every planned
        # preemption lands before training could finish (a unit test holds this for all seeds).
        return {
            "labels": {"spotjobs-request-id": request_id(key), "spotjobs-attempt": "1"},
            "preemptions": preemptions,
            "after_seconds": round(rng.uniform(low, high), 2),
        }

    def envelope(key: str, **extra: Any) -> bytes:
        job = trainer_job(f"demo-{key}", data_seed=rng.randrange(10**6), **extra.pop("job", {}))
        return json.dumps({"request_id": request_id(key), "custom_job": job, **extra}).encode()

    few = rng.randint(2, 4)
    return [
        Scenario(
            "few-preemptions", request_id("few-preemptions"),
            f"preempted {few} times, resumes each time, succeeds within attempt 1",
            SUCCEEDED, (ExpectedAttempt("SPOT", few),),
            envelope("few-preemptions"), plan=plan("few-preemptions", few, 1.5, 2.2),
        ),
        Scenario(
            "requeued", request_id("requeued"),
            "preempted 7 times (past Vertex's 6 restarts), re-queued, finishes on attempt 2 from its checkpoint",
            SUCCEEDED, (ExpectedAttempt("SPOT", VERTEX_MAX_PREEMPTIONS), ExpectedAttempt("SPOT", 0)),
            envelope("requeued", max_attempts=3),
            plan=plan("requeued", VERTEX_MAX_PREEMPTIONS, 0.9, 1.3),
        ),
        Scenario(
            "fallback", request_id("fallback"),
            "preempted 7 times on Spot, falls back to STANDARD capacity for attempt 2",
            SUCCEEDED, (ExpectedAttempt("SPOT", VERTEX_MAX_PREEMPTIONS), ExpectedAttempt("STANDARD", 0)),
            envelope("fallback", max_attempts=3, fallback={"after_spot_attempts": 1, "strategy": "STANDARD"}),
            plan=plan("fallback", VERTEX_MAX_PREEMPTIONS, 0.9, 1.3),
        ),
        Scenario(
            "duplicate", request_id("duplicate"),
            "published twice; de-duplicated to one job",
            SUCCEEDED, (ExpectedAttempt("SPOT", 0),),
            envelope("duplicate"), publish_count=2,
        ),
        Scenario(
            "invalid", request_id("invalid"),
            "breaks the request policy; rejected with every reason and an alert, no job",
            REJECTED, (),
            json.dumps({"request_id": request_id("invalid"), "custom_job": _invalid_job()}).encode(),
        ),
        Scenario(
            "code-bug", request_id("code-bug"),
            f"the training code fails at step {FAIL_AT_STEP}; an alert, no re-queue",
            FAILED, (ExpectedAttempt("SPOT", 0),),
            envelope("code-bug", job={"fail_at_step": FAIL_AT_STEP}),
        ),
    ]


# What happened: traces built from the emulator's job records, the ledger and the bucket.


@dataclass
class RunTrace:
    """One run of a job's worker, from the trainer's JSON lines."""

    run: int
    start_step: int | None = None  # from the `resume` line; None when it died before resuming
    end_step: int | None = None  # the furthest step the run reported
    checkpoints: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (step, bytes)
    finished: bool = False
    failed: bool = False

    @property
    def steps_computed(self) -> int:
        if self.start_step is None or self.end_step is None:
            return 0
        return max(0, self.end_step - self.start_step)


def runs_from_output(output: Iterable[Mapping[str, Any]]) -> list[RunTrace]:
    """Group a job's stdout lines (`{"run", "stream", "line"}`) into runs."""
    runs: dict[int, RunTrace] = {}
    for item in output:
        event = _trainer_event(item)
        if event is None:
            continue
        run = runs.setdefault(int(item["run"]), RunTrace(int(item["run"])))
        step = event.get("step")
        if isinstance(step, int):
            run.end_step = step if run.end_step is None else max(run.end_step, step)
        kind = event.get("event")
        if kind == "resume" and run.start_step is None and isinstance(step, int):
            run.start_step = step
        elif kind == "checkpoint" and isinstance(step, int):
            run.checkpoints[str(event["checkpoint"])] = (step, int(event.get("bytes", 0)))
        elif kind == "final":
            run.finished = True
        elif kind == "error":
            run.failed = True
    return [runs[n] for n in sorted(runs)]


def _trainer_event(item: Mapping[str, Any]) -> dict[str, Any] | None:
    line = item.get("line")
    if item.get("stream") != "stdout" or not isinstance(line, str) or not line.startswith("{"):
        return None
    with contextlib.suppress(ValueError):
        parsed = json.loads(line)
        if isinstance(parsed, dict) and "event" in parsed:
            return parsed
    return None


@dataclass
class AttemptTrace:
    n: int
    strategy: str
    location: str
    job: str | None
    state: str | None  # the job's state as Vertex (the emulator) reports it
    preemptions: int  # as counted by spotjobs in the ledger
    preemptions_injected: int  # as the emulator did them
    outcome: str | None
    runs: list[RunTrace] = field(default_factory=list)

    @property
    def start_step(self) -> int | None:
        return next((run.start_step for run in self.runs if run.start_step is not None), None)

    @property
    def last_checkpoint_step(self) -> int | None:
        """The newest checkpoint this attempt committed: where a following attempt must start."""
        return max((step for run in self.runs for step, _ in run.checkpoints.values()), default=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "job": self.job,
            "strategy": self.strategy,
            "location": self.location,
            "state": self.state,
            "preemptions": self.preemptions,
            "preemptions_injected": self.preemptions_injected,
            "outcome": self.outcome,
            "start_step": self.start_step,
            "last_checkpoint_step": self.last_checkpoint_step,
            "runs": [
                {"run": run.run, "start_step": run.start_step, "end_step": run.end_step,
                 "checkpoints": len(run.checkpoints)}
                for run in self.runs
            ],
        }


@dataclass
class RequestTrace:
    scenario: Scenario
    status: str | None = None  # ledger status; None when the ledger has no record
    attempts: list[AttemptTrace] = field(default_factory=list)
    vertex_jobs: int = 0
    checkpoints_present: dict[str, int] = field(default_factory=dict)  # complete ones: name -> bytes
    duplicates_suppressed: int = 0
    alerts: list[dict[str, Any]] = field(default_factory=list)
    # What prune_checkpoints said it deleted for this request (its prune_report alerts).
    reported_pruned: int = 0
    reported_bytes_freed: int = 0

    @property
    def runs(self) -> list[RunTrace]:
        return [run for attempt in self.attempts for run in attempt.runs]

    @property
    def checkpoints_written(self) -> dict[str, tuple[int, int]]:
        written: dict[str, tuple[int, int]] = {}
        for run in self.runs:
            written.update(run.checkpoints)
        return written

    @property
    def checkpoints_pruned(self) -> list[str]:
        return sorted(set(self.checkpoints_written) - set(self.checkpoints_present))

    @property
    def outcome(self) -> str:
        if self.status is None:
            return REJECTED if self.alert_kinds().get("invalid_request") else "missing"
        return self.status.lower()

    def alert_kinds(self) -> dict[str, int]:
        kinds: dict[str, int] = {}
        for alert in self.alerts:
            kinds[alert.get("kind", "?")] = kinds.get(alert.get("kind", "?"), 0) + 1
        return kinds


# The numbers (pure functions of the traces).


@dataclass(frozen=True)
class StepAccount:
    computed: int  # steps trained by any run
    useful: int  # steps in the final model of a request that succeeded
    lost: int  # steps computed but in no checkpoint the next run resumed from


def account_steps(runs: Sequence[RunTrace], succeeded: bool, final_step: int | None) -> StepAccount:
    """Steps computed, useful and lost to preemption over a request's runs, in order."""
    started = [run for run in runs if run.start_step is not None]
    computed = sum(run.steps_computed for run in started)
    lost = 0
    for previous, following in zip(started, started[1:]):
        lost += max(0, (previous.end_step or 0) - (following.start_step or 0))
    useful = (final_step or 0) if succeeded else 0
    return StepAccount(computed=computed, useful=useful, lost=lost)


def resume_gaps(runs: Sequence[RunTrace]) -> list[str]:
    """Runs that did not start from the newest checkpoint committed before them."""
    problems = []
    newest: int | None = None
    for run in runs:
        if run.start_step is not None and run.start_step != (newest or 0):
            problems.append(
                f"run {run.run} started at step {run.start_step}, the newest complete checkpoint "
                f"before it was at step {newest or 0}"
            )
        steps = [step for step, _ in run.checkpoints.values()]
        if steps:
            newest = max(steps + [newest or 0])
    return problems


@dataclass(frozen=True)
class Prices:
    machine_type: str
    location: str
    on_demand_per_hour: float
    spot_per_hour: float
    as_of: str
    source: str
    caveat: str

    @classmethod
    def load(cls, machine_type: str = MACHINE_TYPE, location: str = "us-central1",
             path: Path = PRICES_PATH) -> Prices:
        data = json.loads(path.read_text())
        row = data["machine_types"][machine_type]["locations"][location]
        return cls(
            machine_type=machine_type,
            location=location,
            on_demand_per_hour=float(row["on_demand_per_hour"]),
            spot_per_hour=float(row["spot_per_hour"]),
            as_of=data["as_of"],
            source=data["source"]["name"],
            caveat=data["source"]["caveat"],
        )


@dataclass(frozen=True)
class Cost:
    as_run_usd: float  # Spot attempts at the Spot price, fallback attempts at the on-demand price
    on_demand_usd: float  # the same training on on-demand capacity: no preemptions, nothing lost


def estimate_cost(
    attempts: Sequence[AttemptTrace], account: StepAccount, prices: Prices,
    seconds_per_step: float = SECONDS_PER_STEP_PRICED,
) -> Cost:
    hours_per_step = seconds_per_step / 3600.0
    as_run = 0.0
    for attempt in attempts:
        rate = prices.spot_per_hour if attempt.strategy == "SPOT" else prices.on_demand_per_hour
        as_run += sum(run.steps_computed for run in attempt.runs) * hours_per_step * rate
    on_demand = (account.computed - account.lost) * hours_per_step * prices.on_demand_per_hour
    return Cost(as_run_usd=as_run, on_demand_usd=on_demand)


def check_request(trace: RequestTrace, keep_last: int) -> list[str]:
    """What differs from the scenario's design (empty: as designed)."""
    scenario = trace.scenario
    differences = []
    if trace.outcome != scenario.outcome:
        differences.append(f"outcome is {trace.outcome}, expected {scenario.outcome}")
    if scenario.outcome == REJECTED:
        violations = [v for a in trace.alerts if a.get("kind") == "invalid_request"
                      for v in a.get("details", {}).get("violations", [])]
        if not violations:
            differences.append("no invalid_request alert naming the violations")
        if trace.vertex_jobs:
            differences.append(f"{trace.vertex_jobs} Vertex job(s) exist for a rejected request")
        return differences
    differences += _attempt_differences(trace)
    if trace.vertex_jobs != len(trace.attempts):
        differences.append(f"{trace.vertex_jobs} Vertex jobs for {len(trace.attempts)} attempt(s)")
    differences += resume_gaps(trace.runs)
    if scenario.publish_count > 1 and trace.duplicates_suppressed < scenario.publish_count - 1:
        differences.append(
            f"published {scenario.publish_count} times, {trace.duplicates_suppressed} duplicate(s) suppressed"
        )
    if scenario.outcome == FAILED and not trace.alert_kinds().get("job_failed"):
        differences.append("no job_failed alert")
    if scenario.outcome == SUCCEEDED:
        differences += _success_differences(trace, keep_last)
    return differences


def _attempt_differences(trace: RequestTrace) -> list[str]:
    expected = trace.scenario.attempts
    if len(trace.attempts) != len(expected):
        return [f"{len(trace.attempts)} attempt(s), expected {len(expected)}"]
    differences = []
    for attempt, want in zip(trace.attempts, expected):
        if attempt.strategy != want.strategy:
            differences.append(f"attempt {attempt.n} ran {attempt.strategy}, expected {want.strategy}")
        if attempt.preemptions != want.preemptions:
            differences.append(
                f"attempt {attempt.n}: spotjobs counted {attempt.preemptions} preemption(s), "
                f"{want.preemptions} were planned ({attempt.preemptions_injected} injected)"
            )
    return differences


def _success_differences(trace: RequestTrace, keep_last: int) -> list[str]:
    differences = []
    final = max((run.end_step or 0 for run in trace.runs if run.finished), default=None)
    if final is None:
        differences.append("no run finished training")
    elif final != STEPS:
        differences.append(f"training finished at step {final}, expected {STEPS}")
    if len(trace.checkpoints_present) > keep_last:
        differences.append(
            f"{len(trace.checkpoints_present)} checkpoints kept after pruning, expected at most {keep_last}"
        )
    pruned = len(trace.checkpoints_pruned)
    if trace.checkpoints_written and not pruned:
        differences.append("no checkpoint was pruned")
    if trace.reported_pruned != pruned:
        differences.append(
            f"prune_checkpoints reported {trace.reported_pruned} checkpoint(s) deleted, "
            f"{pruned} are gone from the bucket"
        )
    return differences


def request_report(trace: RequestTrace, keep_last: int, prices: Prices) -> dict[str, Any]:
    succeeded = trace.outcome == SUCCEEDED
    final = max((run.end_step or 0 for run in trace.runs if run.finished), default=None)
    account = account_steps(trace.runs, succeeded, final)
    written = trace.checkpoints_written
    pruned = trace.checkpoints_pruned
    cost = estimate_cost(trace.attempts, account, prices)
    differences = check_request(trace, keep_last)
    return {
        "request_id": trace.scenario.request_id,
        "scenario": trace.scenario.key,
        "expected": trace.scenario.expected_json(),
        "outcome": trace.outcome,
        "ok": not differences,
        "differences": differences,
        "attempts": [attempt.to_json() for attempt in trace.attempts],
        "vertex_jobs": trace.vertex_jobs,
        "steps_computed": account.computed,
        "steps_useful": account.useful,
        "steps_lost": account.lost,
        "checkpoints_written": len(written),
        "checkpoints_kept": len(trace.checkpoints_present),
        "checkpoints_pruned": len(pruned),
        "bytes_freed": sum(written[name][1] for name in pruned),
        "pruner_reported": {"checkpoints_deleted": trace.reported_pruned, "bytes_freed": trace.reported_bytes_freed},
        "duplicates_suppressed": trace.duplicates_suppressed,
        "alerts": trace.alert_kinds(),
        "cost_spot_usd": round(cost.as_run_usd, 2),
        "cost_on_demand_usd": round(cost.on_demand_usd, 2),
    }


def build_report(
    traces: Sequence[RequestTrace], *, seed: int, keep_last: int, prices: Prices,
    alerts: Sequence[Mapping[str, Any]], wall_seconds: float,
) -> dict[str, Any]:
    requests = [request_report(trace, keep_last, prices) for trace in traces]
    computed = sum(r["steps_computed"] for r in requests)
    useful = sum(r["steps_useful"] for r in requests)
    spot = sum(r["cost_spot_usd"] for r in requests)
    on_demand = sum(r["cost_on_demand_usd"] for r in requests)
    kinds: dict[str, int] = {}
    for alert in alerts:
        kinds[str(alert.get("kind"))] = kinds.get(str(alert.get("kind")), 0) + 1
    attempts = [a for r in requests for a in r["attempts"]]
    return {
        "scenario_ok": all(r["ok"] for r in requests),
        "seed": seed,
        "wall_seconds": round(wall_seconds, 1),
        "requests": requests,
        "totals": {
            "jobs": sum(r["vertex_jobs"] for r in requests),
            "preemptions": sum(a["preemptions"] for a in attempts),
            "requeues": sum(1 for a in attempts if a["outcome"] == "requeued"),
            "duplicates_suppressed": sum(r["duplicates_suppressed"] for r in requests),
            "invalid_rejected": sum(1 for r in requests if r["outcome"] == REJECTED),
            "alerts": len(alerts),
            "alerts_by_kind": dict(sorted(kinds.items())),
            "steps_computed": computed,
            "steps_useful": useful,
            "steps_lost": sum(r["steps_lost"] for r in requests),
            "goodput": round(useful / computed, 4) if computed else 0.0,
            "checkpoints_pruned": sum(r["checkpoints_pruned"] for r in requests),
            "bytes_freed": sum(r["bytes_freed"] for r in requests),
            "bytes_freed_reported_by_pruner": sum(r["pruner_reported"]["bytes_freed"] for r in requests),
            "cost_spot_usd": round(spot, 2),
            "cost_on_demand_usd": round(on_demand, 2),
            "savings_pct": round(100.0 * (1 - spot / on_demand), 1) if on_demand else 0.0,
        },
        "pricing": {
            "machine_type": prices.machine_type,
            "location": prices.location,
            "on_demand_per_hour": prices.on_demand_per_hour,
            "spot_per_hour": prices.spot_per_hour,
            "as_of": prices.as_of,
            "source": prices.source,
            "caveat": prices.caveat,
            "scale": f"each demo training step is priced as {SECONDS_PER_STEP_PRICED:.0f} s of "
                     f"{prices.machine_type} time ({STEPS} steps = {STEPS * SECONDS_PER_STEP_PRICED / 3600:.1f} h)",
        },
    }


# Watching the stack.


class AlertCollector:
    """Receives ops alerts as they are published (a streaming pull on the stack's reader subscription)."""

    def __init__(self, stack: Stack) -> None:
        self._stack = stack
        self._lock = threading.Lock()
        self._alerts: list[dict[str, Any]] = []
        self._subscriber: Any = None
        self._future: Any = None

    def start(self) -> AlertCollector:
        from google.cloud import pubsub_v1

        self._subscriber = pubsub_v1.SubscriberClient()
        self._future = self._subscriber.subscribe(
            self._stack.subscription_path(ALERTS_SUBSCRIPTION), callback=self._receive
        )
        return self

    def close(self) -> None:
        if self._future is not None:
            self._future.cancel()
            with contextlib.suppress(Exception):  # noqa: BLE001 - the stream's end, whatever it was
                self._future.result(timeout=5)
        if self._subscriber is not None:
            self._subscriber.close()

    @property
    def alerts(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._alerts)

    def _receive(self, message: Any) -> None:
        try:
            alert = json.loads(message.data)
        except ValueError:
            alert = {"kind": "unreadable", "data": message.data.decode(errors="replace")}
        with self._lock:
            self._alerts.append(alert)
        message.ack()


class Observer:
    """Reads the ledger, the emulator's job records, the bucket, alerts and decision logs."""

    def __init__(self, stack: Stack, scenarios: Sequence[Scenario], alerts: AlertCollector) -> None:
        self._stack = stack
        self._scenarios = scenarios
        self._alerts = alerts
        self._ledger = stack.ledger()
        self._storage = stack.storage()
        self._bucket = self._storage.bucket(stack.settings.checkpoint_bucket)
        self._jobs = stack.job_service()
        self._final_details: dict[str, dict[str, Any]] = {}  # terminal jobs never change again

    def traces(self) -> list[RequestTrace]:
        duplicates = self._duplicates_by_request()
        return [self._trace(scenario, duplicates) for scenario in self._scenarios]

    def vertex_jobs(self, request_id: str) -> int:
        from shared.vertex import LABEL_REQUEST_ID, find_jobs, parent_path

        settings = self._stack.settings
        parent = parent_path(settings.project, settings.location)
        return len(find_jobs(self._jobs, parent, {LABEL_REQUEST_ID: request_id}))

    def _trace(self, scenario: Scenario, duplicates: Mapping[str, int]) -> RequestTrace:
        alerts = self._alerts.alerts
        pruned = [entry for alert in alerts if alert.get("kind") == "prune_report"
                  for entry in alert.get("details", {}).get("requests", [])
                  if entry.get("request_id") == scenario.request_id]
        trace = RequestTrace(
            scenario,
            alerts=[a for a in alerts if a.get("request_id") == scenario.request_id],
            duplicates_suppressed=duplicates.get(scenario.request_id, 0),
            reported_pruned=sum(int(entry.get("checkpoints_deleted", 0)) for entry in pruned),
            reported_bytes_freed=sum(int(entry.get("bytes_freed", 0)) for entry in pruned),
        )
        record = self._ledger.get(scenario.request_id)
        if record is not None:
            trace.status = record.status
            trace.attempts = [self._attempt(attempt) for attempt in record.attempts]
            trace.checkpoints_present = self._complete_checkpoints(record.output_dir)
        return trace

    def _attempt(self, attempt: Attempt) -> AttemptTrace:
        details = self._job_details(attempt.job) if attempt.job else {}
        return AttemptTrace(
            n=attempt.n,
            strategy=attempt.strategy,
            location=attempt.location,
            job=attempt.job,
            state=details.get("state") or attempt.state,
            preemptions=attempt.preemptions,
            preemptions_injected=int(details.get("preemptions", 0)),
            outcome=attempt.outcome,
            runs=runs_from_output(details.get("output", [])),
        )

    def _job_details(self, job_name: str) -> dict[str, Any]:
        if job_name in self._final_details:
            return self._final_details[job_name]
        details = self._stack.vertex_control("GET", f"/emulator/v1/{job_name}")
        if is_terminal(details.get("state", JobState.UNSPECIFIED)):
            self._final_details[job_name] = details
        return details

    def _complete_checkpoints(self, output_dir: str) -> dict[str, int]:
        """Checkpoint prefixes under the request's AIP_CHECKPOINT_DIR that hold the commit marker.

        Read with a plain listing of the trainer's own layout rather than `shared.checkpoints`, on
        purpose: the demo checks what prune_checkpoints reports against the bucket itself.
        """
        from devstack.trainer import COMMIT_MARKER, checkpoint_step, split_gcs_uri

        _, prefix = split_gcs_uri(output_dir + "checkpoints/")
        sizes: dict[str, int] = {}
        committed: set[str] = set()
        for blob in self._storage.list_blobs(self._bucket, prefix=prefix):
            name, _, leaf = blob.name[len(prefix):].partition("/")
            if checkpoint_step(name + "/") is None:
                continue
            sizes[name + "/"] = sizes.get(name + "/", 0) + int(blob.size or 0)
            if leaf == COMMIT_MARKER:
                committed.add(name + "/")
        return {name: size for name, size in sizes.items() if name in committed}

    def _duplicates_by_request(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for line in self._stack.function_logs("submit_job"):
            if line.get("event") == "duplicate" and line.get("request_id"):
                counts[line["request_id"]] = counts.get(line["request_id"], 0) + 1
        return counts


def is_settled(trace: RequestTrace) -> bool:
    """The request has ended and the evidence its checks need has arrived."""
    scenario = trace.scenario
    if scenario.outcome == REJECTED:
        return trace.outcome == REJECTED or trace.status is not None
    if trace.status not in TERMINAL_STATUSES:
        return False
    if not all(attempt.state and is_terminal(attempt.state) for attempt in trace.attempts):
        return False
    # Preemption events may still be in flight after the decision that ended the request.
    if any(attempt.preemptions < attempt.preemptions_injected for attempt in trace.attempts):
        return False
    if scenario.publish_count > 1 and trace.duplicates_suppressed < scenario.publish_count - 1:
        return False
    return not (trace.status == "FAILED" and not trace.alert_kinds().get("job_failed"))


def is_pruned(trace: RequestTrace, keep_last: int) -> bool:
    """Pruned down to `keep_last`, and the pruner's report of it has arrived."""
    return (
        len(trace.checkpoints_present) <= keep_last
        and trace.reported_pruned >= len(trace.checkpoints_pruned)
    )


# Running it.


def demo_stack_options(seed: int) -> Any:
    from devstack.stack import StackOptions

    return StackOptions(
        function_env={
            # Show the image allowlist at work (the invalid request names another registry).
            "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": ALLOWED_IMAGE_PREFIX,
            "SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD",  # the fallback scenario's
            # A crashed delivery's claim is taken over after 15 s instead of 2 min.
            "SPOTJOBS_CLAIM_LEASE_SECONDS": "15",
            "SPOTJOBS_CREATE_TIMEOUT_SECONDS": "5",
        },
        # Redeliveries after 1-10 s instead of production's 10-600 s, so the demo stays short.
        minimum_backoff_seconds=1,
        maximum_backoff_seconds=10,
        vertex_args=("--seed", str(seed)),
    )


def launch(stack: Stack, scenarios: Sequence[Scenario]) -> None:
    for scenario in scenarios:
        if scenario.plan is not None:
            stack.vertex_control("POST", "/emulator/v1/preemption-plans", dict(scenario.plan))
    for scenario in scenarios:
        for _ in range(scenario.publish_count):
            stack.publish("job_requests", scenario.body)


def wait_for(
    condition: Callable[[], bool], timeout: float, on_tick: Callable[[], None]
) -> bool:
    """Poll `condition` every POLL_SECONDS (calling `on_tick` first) until true or the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        on_tick()
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)


def run_demo(args: argparse.Namespace) -> int:
    from devstack.live_view import render_report
    from devstack.stack import Stack

    started = time.monotonic()
    scenarios = build_scenarios(args.seed)
    prices = Prices.load()
    stack = Stack(demo_stack_options(args.seed))
    _stop_on_sigterm()
    try:
        say("starting the embedded stack (Pub/Sub and GCS emulators, Vertex AI emulator, 4 functions)")
        stack.start()
        say(f"stack ready in {time.monotonic() - started:.1f} s; publishing {len(scenarios)} job requests")
        played = play(stack, scenarios, args.timeout)
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        say("stopping the embedded stack")
        stack.stop()
    report = build_report(
        played.traces, seed=args.seed, keep_last=stack.settings.keep_last, prices=prices,
        alerts=played.alerts, wall_seconds=time.monotonic() - started,
    )
    report["notes"] = played.notes
    report["scenario_ok"] = report["scenario_ok"] and not played.notes
    print(json.dumps(report, indent=2) if args.json else render_report(report), flush=True)
    return 0 if report["scenario_ok"] else 1


@dataclass
class Played:
    traces: list[RequestTrace]
    alerts: list[dict[str, Any]]
    notes: list[str]  # what did not happen in time


def play(stack: Stack, scenarios: Sequence[Scenario], timeout: float) -> Played:
    """Publish the scenario, watch it end, have checkpoints pruned; returns the final traces."""
    from google.api_core.exceptions import GoogleAPICallError

    from devstack.live_view import LiveView, live_rows

    keep_last = stack.settings.keep_last
    alerts = AlertCollector(stack).start()
    observer = Observer(stack, scenarios, alerts)
    launch(stack, scenarios)
    notes: list[str] = []
    traces: list[RequestTrace] = []
    with LiveView(sys.stderr, total_steps=STEPS) as view, contextlib.closing(alerts):

        def refresh() -> None:
            try:
                traces[:] = observer.traces()
            except (OSError, GoogleAPICallError) as exc:  # one failed poll; the next may succeed
                view.note(f"could not read the state of the stack this time: {exc}")
                return
            view.update(live_rows(traces))

        if not wait_for(lambda: all(is_settled(t) for t in traces), timeout, refresh):
            notes.append(f"not every request ended within {timeout:.0f} s")
        view.note("every request has ended; publishing {\"task\": \"prune\"} to the maintenance topic")
        stack.publish("maintenance", json.dumps({"task": "prune"}).encode())
        if not wait_for(lambda: all(is_pruned(t, keep_last) for t in traces), PRUNE_TIMEOUT_SECONDS, refresh):
            notes.append(f"checkpoints were not pruned to {keep_last} within {PRUNE_TIMEOUT_SECONDS:.0f} s")
        traces = observer.traces()
        for trace in traces:
            trace.vertex_jobs = observer.vertex_jobs(trace.scenario.request_id)
    return Played(traces, alerts.alerts, notes)


def say(message: str) -> None:
    print(f"[demo] {message}", file=sys.stderr, flush=True)


def _stop_on_sigterm() -> None:
    # SIGTERM unwinds like Ctrl-C, so the `finally` above stops every process the stack started.
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="play a scripted Spot-preemption scenario on the embedded stack and report on it",
        description="Starts the embedded stack, plays six job requests through the real functions "
        "(preemptions, a re-queue, a fallback to STANDARD, a duplicate, an invalid request, failing "
        "code), prunes checkpoints, stops the stack and reports outcomes, goodput and cost. Exits 0 "
        "only when every scenario ended as designed.",
    )
    parser.add_argument("--json", action="store_true", help="write the report as JSON on stdout")
    parser.add_argument("--seed", type=int, default=1, help="request ids, preemption plans and data (default 1)")
    parser.add_argument(
        "--timeout", type=float, default=SETTLE_TIMEOUT_SECONDS,
        help=f"seconds to wait for every request to end (default {SETTLE_TIMEOUT_SECONDS:.0f})",
    )
    parser.set_defaults(run=run_demo)
