"""submit_job: cold start, memory, and 500 requests published at once through the embedded stack.

Figures:
- cold start: whole-process time of `python -c "import functions.submit"` against
  `python -c "import google.cloud.aiplatform"` in the same run (target <= 0.55 of it);
- peak RSS of a fresh process that imports the entry point and handles one valid request against
  the stack (target <= 150 MiB);
- 500 requests published at once: all submitted, exactly 500 jobs on the Vertex emulator (capacity
  limited, each job's command exits at once), median and p95 publish-to-create latency;
- the function's own overhead per request (validation + ledger: everything but the Vertex create)
  beside a bare `create_custom_job` round trip on the emulator, both measured in-process;
- where its CPU goes (bench/profile.py): a profile of 40 requests split into parse/validate,
  ledger, Google client and logging, before and after the storage session stops re-reading the
  environment on every call (shared/adapters/clients.py: read_environment_once), in the same run.

    python -m bench.bench_submit [--requests 500] [--runs 5]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time
import uuid
from typing import Any

from bench.coldstart import cold_start_figures, peak_rss_after_one_event, push_event
from bench.report import Figure, emit
from devstack.samples import custom_job

BENCH = "submit"
COLD_START_CEILING = 0.55
RSS_CEILING_MIB = 150
EMULATOR_CAPACITY = 4  # running jobs at a time: 500 jobs must not become 500 processes
OVERHEAD_SAMPLES = 40


def request_body(request_id: str, run_label: str) -> bytes:
    job = custom_job(request_id, ["true"], labels={"bench-run": run_label}, scheduling={"strategy": "SPOT"})
    return json.dumps({"request_id": request_id, "custom_job": job}).encode()


def rss_figure(stack: Any) -> Figure:
    env = {**os.environ, **stack.env, "SPOTJOBS_LOG_LEVEL": "ERROR"}
    event = push_event(
        request_body(f"bench-rss-{uuid.uuid4().hex[:6]}", "rss"),
        "job-requests",
        stack.options.project,
    )
    rss = peak_rss_after_one_event("submit_job", event, env)
    return Figure(
        "peak RSS after one request",
        round(rss, 1),
        "MiB",
        f"<= {RSS_CEILING_MIB}",
        rss <= RSS_CEILING_MIB,
    )


def publish_all(stack: Any, count: int, run_label: str) -> dict[str, float]:
    """Publish `count` requests at once; returns request id -> wall-clock publish time."""
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient(
        batch_settings=pubsub_v1.types.BatchSettings(max_messages=100, max_latency=0.01)
    )
    topic = stack.topic_path("job_requests")
    published: dict[str, float] = {}
    futures = []
    for i in range(count):
        request_id = f"bench-{run_label}-{i:04d}"
        published[request_id] = time.time()
        futures.append(publisher.publish(topic, request_body(request_id, run_label), request_id=request_id))
    for future in futures:
        future.result(timeout=120)
    return published


def jobs_of_run(stack: Any, run_label: str) -> list[Any]:
    from shared.adapters.vertex import find_jobs, parent_path

    parent = parent_path(stack.settings.project, stack.settings.location)
    return find_jobs(
        stack.job_service(), parent, {"bench-run": run_label}, timeout=stack.settings.vertex_call_timeout_seconds
    )


def load_figures(stack: Any, count: int) -> list[Figure]:
    run_label = uuid.uuid4().hex[:8]
    started = time.time()
    published = publish_all(stack, count, run_label)
    print(f"{BENCH}: published {count} requests in {time.time() - started:.2f} s", flush=True)

    def created() -> int:
        return sum(
            1
            for line in stack.function_logs("submit_job")
            if line.get("event") == "job_created" and str(line.get("request_id", "")).startswith(f"bench-{run_label}-")
        )

    stack.wait_for(lambda: created() >= count, timeout=900, message=f"{count} jobs created")
    drained = time.time() - started
    jobs = jobs_of_run(stack, run_label)
    per_request: dict[str, list[Any]] = {}
    for job in jobs:
        per_request.setdefault(job.labels["spotjobs-request-id"], []).append(job)
    latencies = sorted(
        per_request[request_id][0].create_time.timestamp() - moment
        for request_id, moment in published.items()
        if request_id in per_request
    )
    exactly_once = len(jobs) == count and len(per_request) == count
    return [
        Figure(f"{count} requests: jobs created", len(jobs), "", f"== {count}", exactly_once),
        Figure(f"{count} requests: all submitted after", round(drained, 1), "s"),
        Figure(f"{count} requests: throughput", round(count / drained, 1), "req/s"),
        Figure("publish-to-create latency median", round(statistics.median(latencies), 2), "s"),
        Figure(
            "publish-to-create latency p95",
            round(latencies[int(0.95 * (len(latencies) - 1))], 2),
            "s",
        ),
    ]


class TimedJobService:
    """Wraps a JobServiceClient and accumulates the time spent in create calls."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.create_seconds = 0.0

    def create_custom_job(self, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self._client.create_custom_job(**kwargs)
        finally:
            self.create_seconds += time.perf_counter() - started

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def overhead_figures(stack: Any, samples: int) -> list[Figure]:
    """Per request, in-process: submit's own work (validation + ledger) vs a bare create round trip."""
    from shared.adapters.vertex import build_job_json, create_custom_job, parent_path, to_custom_job
    from shared.delivery import Message
    from shared.log import Logger
    from shared.requests.policy import validate_request
    from shared.submit import submit_request
    from shared.wiring import Ports

    client = stack.job_service()
    timed = TimedJobService(client)
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    deps = Ports(
        settings=stack.settings,
        ledger=stack.ledger(),
        publisher=lambda: publisher,
        job_service=lambda location: timed,
    )
    log = Logger(stream=io.StringIO())
    run_label = uuid.uuid4().hex[:8]
    submit_request(Message(request_body(f"warm-{run_label}", run_label), "warm"), log, deps)  # imports, clients
    overheads, validations = [], []
    for i in range(samples):
        body = request_body(f"ovh-{run_label}-{i:03d}", run_label)
        timed.create_seconds = 0.0
        started = time.perf_counter()
        submit_request(Message(body, f"m-{i}"), log, deps)
        overheads.append(time.perf_counter() - started - timed.create_seconds)
        started = time.perf_counter()
        validate_request(body, attributes={}, settings=stack.settings)
        validations.append(time.perf_counter() - started)
    parent = parent_path(stack.settings.project, stack.settings.location)
    bare = []
    for i in range(samples):
        job = to_custom_job(
            build_job_json(
                json.loads(request_body("x", run_label))["custom_job"],
                request_id=f"bare-{run_label}-{i}",
                attempt=1,
                strategy="SPOT",
                output_dir=stack.settings.output_dir_for("bare"),
                deployment=stack.settings.deployment_label,
                commit_markers=stack.settings.commit_markers,
            )
        )
        started = time.perf_counter()
        create_custom_job(client, parent, job)
        bare.append(time.perf_counter() - started)
    from bench.profile import environment_change_figures

    profiled = environment_change_figures(
        "one request",
        lambda i: submit_request(Message(request_body(f"prof-{run_label}-{i:04d}", run_label), f"p-{i}"), log, deps),
        deps.ledger._bucket.client._http,
        samples,  # noqa: SLF001 - the ledger's session
    )
    return profiled + [
        Figure(
            "function overhead per request (validation + ledger), median",
            round(statistics.median(overheads) * 1000, 1),
            "ms",
        ),
        Figure(
            "of which validation (parse + policy), median",
            round(statistics.median(validations) * 1000, 2),
            "ms",
        ),
        Figure(
            "bare create_custom_job round trip on the emulator, median",
            round(statistics.median(bare) * 1000, 1),
            "ms",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5, help="import timing runs (median)")
    args = parser.parse_args()

    from devstack.stack import Stack, StackOptions

    figures = cold_start_figures("functions.submit", COLD_START_CEILING, args.runs)
    options = StackOptions(
        functions=("submit_job",),
        function_env={
            "SPOTJOBS_LOG_LEVEL": "INFO",
            "SPOTJOBS_CLAIM_LEASE_SECONDS": "10",
            "SPOTJOBS_CREATE_TIMEOUT_SECONDS": "3",
            "SPOTJOBS_VERTEX_CREATES_PER_MINUTE": "0",  # pacing off with the quota (see below)
        },
        max_delivery_attempts=30,  # redelivered about once a second here
        # Quotas off: this measures submit_job's own throughput and overhead (and bare creates
        # timed back to back), which Vertex's 60 creates a minute would hide; bench/bench_burst.py
        # runs a burst against the documented quotas.
        vertex_quota_submissions_per_minute=0,
        vertex_quota_crud_per_minute=0,
        vertex_args=(
            "--max-running",
            str(EMULATOR_CAPACITY),
            "--no-log-sink",
            "--queued-seconds",
            "0",
            "--pending-seconds",
            "0",
        ),
    )
    with Stack(options) as stack:
        os.environ.update(stack.env)  # the in-process clients below target the stack
        figures.append(rss_figure(stack))
        figures.extend(load_figures(stack, args.requests))
        figures.extend(overhead_figures(stack, OVERHEAD_SAMPLES))
    emit(BENCH, figures)


if __name__ == "__main__":
    main()
