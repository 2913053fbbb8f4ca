"""Cold start and memory of every function, as ratios to `import google.cloud.aiplatform`.

Cold start = whole-process wall time of `python -c "import <entry module>"` (interpreter start
included, median of N runs), measured in the same run as the high-level SDK's import, which is
the yardstick the issues set. Peak RSS = ru_maxrss of a fresh process that imports the function
and handles one real event against the embedded stack.

    python -m bench.coldstart [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC
from pathlib import Path

from bench.report import Figure, emit
from devstack.samples import job_request

REPO = Path(__file__).resolve().parent.parent
# Entry module, the cold-start ceiling as a share of the SDK import, and the RSS ceiling (MiB).
FUNCTIONS = {
    "submit_job": ("functions.submit", 0.55, 150),
    "on_job_event": ("functions.events", 0.55, 150),
    "reconcile": ("functions.reconcile", 0.55, 150),
    "prune_checkpoints": ("functions.prune", 0.30, 200),
}
SDK = "google.cloud.aiplatform"


def import_seconds(module: str, runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True, cwd=REPO)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


# The price table (shared/price_table.json) is read on a request's first price lookup (a budget, a
# placement, a report): its parse stays a small part of a cold start.
PRICE_TABLE_CEILING_SECONDS = 0.01


def price_table_figure(runs: int) -> Figure:
    """Median seconds of a fresh process's first `table()`: reading and parsing the file (the
    module itself is imported by every function anyway)."""
    child = (
        "import time\n"
        "from shared.requests.pricing import table\n"
        "started = time.perf_counter(); table(); print(time.perf_counter() - started)\n"
    )
    samples = [
        float(
            subprocess.run([sys.executable, "-c", child], check=True, cwd=REPO, capture_output=True, text=True).stdout
        )
        for _ in range(runs)
    ]
    seconds = statistics.median(samples)
    size = (REPO / "shared" / "price_table.json").stat().st_size // 1024
    return Figure(
        f"price table first read ({size} KiB)",
        round(seconds, 4),
        "s",
        f"<= {PRICE_TABLE_CEILING_SECONDS}",
        seconds <= PRICE_TABLE_CEILING_SECONDS,
    )


def cold_start_figures(module: str, ceiling: float, runs: int) -> list[Figure]:
    """The SDK yardstick, the entry module's import time, and their ratio against `ceiling`."""
    sdk = import_seconds(SDK, runs)
    entry = import_seconds(module, runs)
    ratio = entry / sdk
    return [
        Figure(f"import {SDK} (yardstick)", round(sdk, 3), "s"),
        Figure(f"cold start (import {module})", round(entry, 3), "s"),
        Figure("cold start / SDK import", round(ratio, 3), "", f"<= {ceiling}", ratio <= ceiling),
    ]


def peak_rss_after_one_event(function: str, event: dict, env: dict[str, str]) -> float:
    """MiB. The child handles `event` (a push body, as Pub/Sub posts it) through the entry point."""
    child = (
        "import json, resource, sys, types\n"
        "import functions.main as main\n"
        "body = sys.argv[1].encode()\n"
        f"getattr(main, {function!r})(types.SimpleNamespace(get_data=lambda: body))\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", child, json.dumps(event)],
        check=True,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    ).stdout
    return float(output.strip().splitlines()[-1])


def push_event(data: bytes, topic: str, project: str) -> dict:
    import base64
    from datetime import datetime

    now = datetime.now(UTC).isoformat()
    return {
        "message": {"data": base64.b64encode(data).decode(), "messageId": "bench-1", "publishTime": now},
        "subscription": f"projects/{project}/subscriptions/bench",
    }


def sample_events(stack) -> dict[str, dict]:
    """One realistic event per function: a valid request, a state line of that request's job,
    a reconcile pass and a prune pass."""
    project = stack.options.project
    request = job_request("bench-coldstart", [sys.executable, "-c", "pass"])
    events = {"submit_job": push_event(request, "job-requests", project)}
    return events | {
        "reconcile": push_event(b'{"task": "reconcile"}', "maintenance", project),
        "prune_checkpoints": push_event(b'{"task": "prune"}', "maintenance", project),
    }


def job_event_for(stack, request_id: str) -> dict:
    record = stack.wait_for(
        lambda: (
            (stack.ledger().get(request_id) or None)
            and stack.ledger().get(request_id).latest.job
            and stack.ledger().get(request_id)
        ),
        timeout=60,
        message="the bench request's job",
    )
    job_id = record.latest.job_id
    entry = {
        "insertId": "bench-entry-1",
        "logName": f"projects/{stack.options.project}/logs/ml.googleapis.com%2F{job_id}",
        "resource": {
            "type": "ml_job",
            "labels": {"job_id": job_id, "task_name": "service", "project_id": stack.options.project},
        },
        "severity": "INFO",
        "textPayload": "Job is running.",
        "timestamp": record.latest.claimed_at,
    }
    return push_event(json.dumps(entry).encode(), "job-events", stack.options.project)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    from devstack.stack import Stack, StackOptions

    sdk_seconds = import_seconds(SDK, args.runs)
    figures = [Figure(f"import {SDK} (yardstick)", round(sdk_seconds, 3), "s"), price_table_figure(args.runs)]
    with Stack(StackOptions(functions=())) as stack:
        env = {**os.environ, **stack.env, "SPOTJOBS_LOG_LEVEL": "ERROR"}
        events = sample_events(stack)
        for function, (module, ceiling, rss_ceiling) in FUNCTIONS.items():
            seconds = import_seconds(module, args.runs)
            ratio = seconds / sdk_seconds
            figures.append(Figure(f"{function} cold start", round(seconds, 3), "s"))
            figures.append(
                Figure(f"{function} cold start / SDK import", round(ratio, 3), "", f"<= {ceiling}", ratio <= ceiling)
            )
            event = events.get(function) or job_event_for(stack, "bench-coldstart")
            rss = peak_rss_after_one_event(function, event, env)
            figures.append(
                Figure(
                    f"{function} peak RSS after one event",
                    round(rss, 1),
                    "MiB",
                    f"<= {rss_ceiling}",
                    rss <= rss_ceiling,
                )
            )
    emit("coldstart", figures)


if __name__ == "__main__":
    main()
