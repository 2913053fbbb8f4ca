"""Playing the scenario on a started stack: register the preemption plans, publish the requests,
watch every request end, have checkpoints pruned."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import TYPE_CHECKING, Any

from devstack.demo.observer import AlertCollector, Observer, is_pruned, is_settled
from devstack.demo.scenarios import ALLOWED_IMAGE_PREFIX, STEPS, Scenario
from devstack.demo.traces import RequestTrace
from devstack.demo.view import LiveView, live_rows
from shared.jobs import JobState

if TYPE_CHECKING:
    from devstack.stack import Stack

POLL_SECONDS = 0.5
# How long the prune run and its report may take at most: the wait ends as soon as both are seen, so
# this bounds only a run that never ends. 45 s was too short on a loaded CI machine (the report not
# yet seen while its checkpoints were already gone).
PRUNE_TIMEOUT_SECONDS = 240.0


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
            # The emulator's list does not lag its creates: a takeover need not wait a minute.
            "SPOTJOBS_LIST_LAG_SECONDS": "2",
            # The new-data trigger: a window closes at the first tick a second after its end, and
            # on_trigger sees a definition applied a second ago.
            "SPOTJOBS_TRIGGER_SETTLE_SECONDS": "1",
            "SPOTJOBS_TRIGGER_CACHE_SECONDS": "1",
            # A SUCCEEDED job whose kit's last lines are late waits 5 s for them, not 5 minutes.
            "SPOTJOBS_KIT_LINES_SETTLE_SECONDS": "5",
        },
        # Cloud Scheduler's triggers tick (production: every minute).
        schedule={"triggers": 2},
        # Failed deliveries come back about once a second (production: 10-600 s of backoff), so
        # a minute of attempts outlasts the 15 s claim lease before a message is dead-lettered.
        max_delivery_attempts=60,
        # A failed job's error a second after it ends instead of Vertex's "about a minute".
        vertex_args=("--seed", str(seed), "--error-delay-seconds", "1"),
        # What Google documents, nothing more: preemptions are counted from the trainer kit.
        vertex_signals="documented",
    )


def launch(stack: Stack, scenarios: Sequence[Scenario]) -> list[Scenario]:
    """Publish the requests and land the triggers' data; returns the scenarios with every request
    id known (a trigger's names its window)."""
    for scenario in scenarios:
        if scenario.plan is not None:
            stack.vertex_control("POST", "/emulator/v1/preemption-plans", dict(scenario.plan))
    launched = []
    for scenario in scenarios:
        if scenario.trigger is not None:
            launched.append(land_data(stack, scenario))
            continue
        for _ in range(scenario.publish_count):
            stack.publish("job_requests", scenario.body)
        launched.append(scenario)
    return launched


def land_data(stack: Stack, scenario: Scenario) -> Scenario:
    """Store the trigger (what `spotjobs triggers apply` does), then land its objects in the data
    bucket within one window; fake-gcs-server notifies on_trigger of each."""
    from datetime import datetime

    from shared.triggers.render import Window, request_id_for
    from shared.triggers.store import TriggerStore

    definition = dict(scenario.trigger or {})
    TriggerStore(stack.storage().bucket(stack.settings.state_bucket)).put_definition(definition)
    time.sleep(1.5)  # on_trigger re-reads definitions every second (the demo's setting)
    seconds = int(definition["coalesce_seconds"])
    while time.time() % seconds > 1.0:  # at a window's start: the burst fits in it
        time.sleep(0.05)
    window = Window.containing(datetime.now(UTC), seconds)
    bucket = stack.storage().bucket(definition["source"]["gcs"]["bucket"])
    prefix = definition["source"]["gcs"]["prefix"]
    for i in range(scenario.objects):
        bucket.blob(f"{prefix}part-{i:04d}.jsonl").upload_from_string(f'{{"row": {i}}}\n')
    return scenario.with_request_id(request_id_for(definition["name"], window.id))


def wait_for(condition: Callable[[], bool], timeout: float, on_tick: Callable[[], None]) -> bool:
    """Poll `condition` every POLL_SECONDS (calling `on_tick` first) until true or the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        on_tick()
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)


def due_reclaims(traces: Sequence[RequestTrace], done: set[str]) -> list[tuple[str, str, str]]:
    """(request id, job, replica) of each scenario's own reclaim that is due and not `done`: its
    running job's primary has restarted after the plan's preemption and committed a checkpoint
    since, so the reclaim lands mid-training and the next start has a newer checkpoint to resume."""
    due = []
    for trace in traces:
        replica, request_id = trace.scenario.reclaim_after_restart, trace.scenario.request_id
        if replica is None or request_id in done or not trace.attempts:
            continue
        attempt = trace.attempts[-1]
        latest = attempt.runs[-1] if attempt.runs else None
        restarted = len(attempt.runs) >= 2 and latest is not None and bool(latest.checkpoints) and not latest.finished
        if attempt.job and attempt.state == JobState.RUNNING and restarted:
            due.append((request_id, attempt.job, replica))
    return due


@dataclass
class Played:
    traces: list[RequestTrace]
    alerts: list[dict[str, Any]]
    notes: list[str]  # what did not happen in time
    records: list[dict[str, Any]] = field(default_factory=list)  # the ledger's, at the end


def play(stack: Stack, scenarios: Sequence[Scenario], timeout: float) -> Played:
    """Publish the scenario, watch it end, have checkpoints pruned; returns the final traces."""
    from google.api_core.exceptions import GoogleAPICallError

    keep_last = stack.settings.keep_last
    alerts = AlertCollector(stack).start()
    scenarios = launch(stack, scenarios)
    observer = Observer(stack, scenarios, alerts)
    notes: list[str] = []
    traces: list[RequestTrace] = []
    reclaimed: set[str] = set()  # request ids whose own reclaim was asked for
    with LiveView(sys.stderr, total_steps=STEPS) as view, contextlib.closing(alerts):

        def refresh() -> None:
            try:
                traces[:] = observer.traces()
            except (OSError, GoogleAPICallError) as exc:  # one failed poll; the next may succeed
                view.note(f"could not read the state of the stack this time: {exc}")
                return
            view.update(live_rows(traces))
            for request_id, job, replica in due_reclaims(traces, reclaimed):
                reclaimed.add(request_id)  # asked once: a refused call shows as a difference in the report
                view.note(f"reclaiming {replica} of {request_id}'s job")
                try:
                    stack.vertex_control("POST", f"/emulator/v1/{job}:preempt", {"replica": replica})
                except OSError as exc:
                    view.note(f"the emulator refused to reclaim {replica} of {request_id}'s job: {exc}")

        if not wait_for(lambda: all(is_settled(t) for t in traces), timeout, refresh):
            notes.append(f"not every request ended within {timeout:.0f} s")
        view.note('every request has ended; publishing {"task": "prune"} to the maintenance topic')
        stack.publish("maintenance", json.dumps({"task": "prune"}).encode(), task="prune")
        if not wait_for(lambda: all(is_pruned(t, keep_last) for t in traces), PRUNE_TIMEOUT_SECONDS, refresh):
            notes.append(f"checkpoints were not pruned to {keep_last} within {PRUNE_TIMEOUT_SECONDS:.0f} s")
        traces = observer.traces()
        for trace in traces:
            trace.vertex_jobs = observer.vertex_jobs(trace.scenario.request_id)
        records = observer.records()
    return Played(traces, alerts.alerts, notes, records)
