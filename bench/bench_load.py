"""Load: a burst of job requests with duplicates, through the whole embedded stack.

N requests (10% of them published twice) are published at once to job-requests while the
Vertex emulator preempts Spot jobs at a random rate, and enforces Vertex AI's documented request
quotas (60 creates, 600 CRUD calls a minute): the submission rate is then the quota's, as in a
real project. Reported: requests per second submitted
(publish of the first message to the last job created), publish-to-create latency (p50, p95),
jobs created against unique request attempts (must be equal), and the peak RSS of each function
process.

    python -m bench.bench_load [--requests 2000] [--duplicates 0.1] [--preemption-rate 6]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import random
import statistics
import sys
import time
from pathlib import Path

from bench.report import Figure, emit
from devstack.samples import job_request


def request_body(request_id: str) -> bytes:
    # The cheapest real process: the emulator still forks and waits for it.
    return job_request(request_id, ["/bin/sleep", "0.5"])


def group_peak_rss_mib(leader_pid: int) -> float:
    """Largest VmHWM among a process and its children (gunicorn's master and worker)."""
    peaks = []
    for pid in [leader_pid, *_children(leader_pid)]:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks.append(int(line.split()[1]) / 1024)
        except OSError:
            continue
    return max(peaks, default=0.0)


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def list_all_jobs(stack) -> list:
    client = stack.job_service()
    parent = f"projects/{stack.options.project}/locations/{stack.options.location}"
    return list(client.list_custom_jobs(request={"parent": parent, "page_size": 1000}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--duplicates", type=float, default=0.1)
    parser.add_argument("--preemption-rate", type=float, default=6.0, help="per running job-minute")
    parser.add_argument("--max-running", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    from devstack.stack import Stack, StackOptions
    from shared.jobs import LABEL_ATTEMPT, LABEL_REQUEST_ID
    from shared.ledger.states import TERMINAL_STATUSES

    rng = random.Random(args.seed)
    request_ids = [f"load-{i:05d}" for i in range(args.requests)]
    duplicated = rng.sample(request_ids, int(len(request_ids) * args.duplicates))
    messages = [(rid, request_body(rid)) for rid in request_ids + duplicated]
    rng.shuffle(messages)

    options = StackOptions(
        function_env={"SPOTJOBS_LOG_LEVEL": "WARNING", "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": ""},
        max_delivery_attempts=30,  # redelivered about once a second here
        schedule={"reconcile": 30},  # production's scheduler: rescues anything dead-lettered
        vertex_args=(
            "--max-running",
            str(args.max_running),
            "--preemption-rate",
            str(args.preemption_rate),
            "--seed",
            str(args.seed),
            "--grace-seconds",
            "0.2",
            "--queued-seconds",
            "0.05",
            "--pending-seconds",
            "0.05",
        ),
    )
    with Stack(options) as stack:
        from google.cloud import pubsub_v1

        publisher = pubsub_v1.PublisherClient(
            batch_settings=pubsub_v1.types.BatchSettings(max_messages=100, max_latency=0.01)
        )
        topic = stack.topic_path("job_requests")
        published_at: dict[str, float] = {}
        started = time.time()
        futures = []
        for request_id, body in messages:
            published_at.setdefault(request_id, time.time())
            futures.append(publisher.publish(topic, body, request_id=request_id))
        concurrent.futures.wait(futures, timeout=120)
        publish_seconds = time.time() - started
        print(f"published {len(messages)} messages in {publish_seconds:.1f} s", file=sys.stderr)

        ledger = stack.ledger()

        def progress() -> tuple[int, int]:
            statuses = [status for _, status in ledger.iter_statuses()]
            return len(statuses), sum(status in TERMINAL_STATUSES for status in statuses)

        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            known, done = progress()
            print(f"  requests in ledger {known}, finished {done}", file=sys.stderr)
            if done == args.requests:
                break
            time.sleep(5)
        finished_at = time.time()

        jobs = list_all_jobs(stack)
        first_create: dict[str, float] = {}
        attempts_seen: set[tuple[str, str]] = set()
        for job in jobs:
            request_id = job.labels[LABEL_REQUEST_ID]
            attempts_seen.add((request_id, job.labels[LABEL_ATTEMPT]))
            created = job.create_time.timestamp()
            first_create[request_id] = min(created, first_create.get(request_id, created))
        unique_attempts = sum(len(ledger.get(rid).attempts) for rid in request_ids if ledger.get(rid))
        latencies = sorted(first_create[rid] - published_at[rid] for rid in first_create)
        statuses = [status for _, status in ledger.iter_statuses()]
        vertex_stats = stack.vertex_control("GET", "/emulator/v1/stats")
        preemptions = vertex_stats["preemptions"]
        rss = {name: group_peak_rss_mib(stack.processes[f"function-{name}"].pid) for name in stack.function_urls}

    last_create = max(job.create_time.timestamp() for job in jobs) if jobs else started
    figures = [
        Figure("requests (unique)", args.requests),
        Figure("messages published (with duplicates)", len(messages)),
        Figure(
            "requests submitted per second", round(len(first_create) / max(last_create - started, 1e-9), 1), "req/s"
        ),
        Figure("publish-to-create latency p50", round(statistics.median(latencies), 2) if latencies else -1, "s"),
        Figure(
            "publish-to-create latency p95",
            round(latencies[int(0.95 * (len(latencies) - 1))], 2) if latencies else -1,
            "s",
        ),
        Figure("Spot preemptions injected", preemptions),
        Figure("Vertex 429s answered (creates / CRUD)", json.dumps(vertex_stats["quotas"]["refused"], sort_keys=True)),
        Figure(
            "create calls per job",
            round(vertex_stats["creates_attempted"] / max(1, vertex_stats["jobs_created"]), 3),
        ),
        Figure("jobs created", len(jobs)),
        Figure(
            "unique request attempts (ledger)",
            unique_attempts,
            "",
            "= jobs created",
            unique_attempts == len(jobs) == len(attempts_seen),
        ),
        Figure(
            "requests finished",
            sum(s in TERMINAL_STATUSES for s in statuses),
            "",
            f"= {args.requests}",
            sum(s in TERMINAL_STATUSES for s in statuses) == args.requests,
        ),
        Figure("wall time to all finished", round(finished_at - started, 1), "s"),
    ] + [Figure(f"{name} peak RSS", round(mib, 1), "MiB") for name, mib in rss.items()]
    emit("load", figures)


if __name__ == "__main__":
    main()
