"""Watching the stack: ops alerts as they arrive, and traces read from the ledger, the emulator's
job records, the checkpoint bucket and the functions' decision logs."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from devstack.demo.scenarios import REJECTED, Scenario
from devstack.demo.traces import (
    AttemptTrace,
    RequestTrace,
    replica_preemptions_from_details,
    replica_runs_from_output,
    runs_from_output,
)
from shared.jobs import JobState, is_terminal
from shared.ledger.records import Attempt
from shared.ledger.states import TERMINAL_STATUSES

if TYPE_CHECKING:
    from devstack.stack import Stack

ALERTS_SUBSCRIPTION = "ops-alerts-reader"  # the stack's pull subscription on ops-alerts


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

    def records(self) -> list[dict[str, Any]]:
        """The ledger records of the scenario's requests, as stored (for the HTML report)."""
        found = [self._ledger.get(scenario.request_id) for scenario in self._scenarios]
        return [record.to_json() for record in found if record is not None]

    def vertex_jobs(self, request_id: str) -> int:
        from shared.adapters.vertex import find_jobs, parent_path
        from shared.jobs import LABEL_REQUEST_ID

        settings = self._stack.settings
        parent = parent_path(settings.project, settings.location)
        return len(
            find_jobs(self._jobs, parent, {LABEL_REQUEST_ID: request_id}, timeout=settings.vertex_call_timeout_seconds)
        )

    def _trace(self, scenario: Scenario, duplicates: Mapping[str, int]) -> RequestTrace:
        alerts = self._alerts.alerts
        pruned = [
            entry
            for alert in alerts
            if alert.get("kind") == "prune_report"
            for entry in alert.get("details", {}).get("requests", [])
            if entry.get("request_id") == scenario.request_id
        ]
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
            if scenario.trigger is not None:
                trace.trigger = self._manifest(scenario, record.request_id)
        return trace

    def _manifest(self, scenario: Scenario, request_id: str) -> dict[str, Any] | None:
        """The trigger's window and the manifest its request carries (SPOTJOBS_MANIFEST_URI)."""
        from google.api_core.exceptions import NotFound

        from shared.triggers.render import manifest_uri

        uri = manifest_uri(self._stack.settings, request_id)
        bucket, _, name = uri.removeprefix("gs://").partition("/")
        try:
            manifest = json.loads(self._storage.bucket(bucket).blob(name).download_as_bytes())
        except NotFound:
            return None
        return {
            "name": manifest["trigger"],
            "window_id": manifest["window_id"],
            "window_start": manifest["window_start"],
            "window_end": manifest["window_end"],
            "manifest_uri": uri,
            "manifest_objects": manifest["object_count"],
            "manifest_bytes": manifest.get("total_bytes", 0),
        }

    def _attempt(self, attempt: Attempt) -> AttemptTrace:
        details = self._job_details(attempt.job) if attempt.job else {}
        return AttemptTrace(
            n=attempt.n,
            strategy=attempt.strategy,
            location=attempt.location,
            job=attempt.job,
            state=details.get("state") or attempt.state,
            preemptions=attempt.preemptions,
            preemptions_unknown=attempt.preemptions_unknown,
            preemptions_injected=int(details.get("preemptions", 0)),
            outcome=attempt.outcome,
            runs=runs_from_output(details.get("output", [])),
            replica_runs=replica_runs_from_output(details.get("output", [])),
            replica_preemptions=replica_preemptions_from_details(details),
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

        Read with a plain listing of the trainer's own layout rather than `spotjobs_kit.layout`, on
        purpose: the demo checks what prune_checkpoints reports against the bucket itself.
        """
        from devstack.trainer import COMMIT_MARKER, checkpoint_step, split_gcs_uri

        _, prefix = split_gcs_uri(output_dir + "checkpoints/")
        sizes: dict[str, int] = {}
        committed: set[str] = set()
        for blob in self._storage.list_blobs(self._bucket, prefix=prefix):
            name, _, leaf = blob.name[len(prefix) :].partition("/")
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
    return len(trace.checkpoints_present) <= keep_last and trace.reported_pruned >= len(trace.checkpoints_pruned)
