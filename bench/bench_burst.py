"""A burst past Vertex's submission quota, through the whole embedded stack: N requests (a quarter
of them at a higher priority) published at once to an emulator enforcing Vertex AI's documented
request quotas (60 creates and 600 CRUD calls per minute per region). Reported against the limit
(N/60 minutes: nothing can create them faster): wall time from the first publish to the last job
created, create calls per job, 429s Vertex answered, requests failed, dead letters, quota_limited
alerts, and whether the higher priority went first (creation ranks of each priority).

    python -m bench.bench_burst [--requests 600] [--scale 1]

`--scale K` runs the same burst K times faster: the emulator's quotas and spotjobs' pace are
multiplied by K, so the ideal is N/(60K) minutes. Only the per-create work (a few GCS writes and
the create itself) does not shrink with it, so a scaled run is the harder one (that work takes a
larger share of each slot); docs/performance.md reports the unscaled run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import sys
import time
import uuid

from bench.report import Figure, emit
from devstack.samples import job_request

BENCH = "burst"
HIGH = 5  # the priority of every fourth request
RATIO_TARGET = 1.15
CREATES_PER_JOB_TARGET = 1.05
QUOTA_PER_MINUTE = 60  # the documented job submission quota
CRUD_PER_MINUTE = 600
# spotjobs' pace: the quota less the margin that keeps any minute under 61 creates (shared/settings.py).
PACE_PER_MINUTE = 58


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--scale", type=int, default=1, help="run K times faster (quotas and pace times K)")
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()

    from google.cloud import pubsub_v1

    from devstack.stack import Stack, StackOptions

    run = uuid.uuid4().hex[:6]
    priorities = {f"burst-{run}-{i:04d}": HIGH if i % 4 == 0 else 0 for i in range(args.requests)}
    options = StackOptions(
        function_env={
            "SPOTJOBS_LOG_LEVEL": "WARNING",
            "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": "",
            "SPOTJOBS_VERTEX_CREATES_PER_MINUTE": str(PACE_PER_MINUTE * args.scale),
        },
        max_delivery_attempts=30,
        schedule={"reconcile": 60},  # production's safety net, as Cloud Scheduler runs it
        vertex_quota_submissions_per_minute=QUOTA_PER_MINUTE * args.scale,
        vertex_quota_crud_per_minute=CRUD_PER_MINUTE * args.scale,
        vertex_args=("--max-running", "32", "--queued-seconds", "0.05", "--pending-seconds", "0.05"),
    )
    with Stack(options) as stack:
        publisher = pubsub_v1.PublisherClient(
            batch_settings=pubsub_v1.types.BatchSettings(max_messages=100, max_latency=0.01)
        )
        topic = stack.topic_path("job_requests")
        started = time.time()
        futures = []
        for request_id, priority in priorities.items():
            extra = {"priority": priority} if priority else {}
            futures.append(publisher.publish(topic, job_request(request_id, ["/bin/true"], **extra)))
        concurrent.futures.wait(futures, timeout=300)
        print(f"{BENCH}: published {len(futures)} requests in {time.time() - started:.1f} s", file=sys.stderr)

        ledger = stack.ledger()
        deadline = time.monotonic() + args.timeout
        records: dict = {}
        while time.monotonic() < deadline:
            records = {rid: ledger.get(rid) for rid in priorities}
            created = sum(1 for r in records.values() if r and r.attempts and r.attempts[0].job)
            print(
                f"{BENCH}:   {created} of {len(priorities)} created after {time.time() - started:.0f} s",
                file=sys.stderr,
            )
            if created == len(priorities):
                break
            time.sleep(10)
        stats = stack.vertex_control("GET", "/emulator/v1/stats")
        alerts = [a for a in stack.pull_alerts(timeout=3) if a["kind"] == "quota_limited"]
        dead = [m for m in stack.pull("dead-letter-reader", timeout=2) if _request_id(m.data) in priorities]

    created_at = {
        rid: _seconds(r.attempts[0].created_at) for rid, r in records.items() if r and r.attempts and r.attempts[0].job
    }
    wall = max(created_at.values()) - started if created_at else float("nan")
    ideal = len(priorities) / (QUOTA_PER_MINUTE * args.scale) * 60
    ratio = wall / ideal
    creates_per_job = stats["creates_attempted"] / max(1, stats["jobs_created"])
    failed = sum(1 for r in records.values() if r and r.status == "FAILED")
    ranks = {rid: rank for rank, rid in enumerate(sorted(created_at, key=created_at.get), start=1)}
    high = [ranks[rid] for rid in ranks if priorities[rid] == HIGH]
    low = [ranks[rid] for rid in ranks if priorities[rid] != HIGH]
    waited = sum(1 for r in records.values() if r and r.attempts and r.attempts[0].waiting_since)
    scaled = f", time-scaled x{args.scale}" if args.scale != 1 else ""
    size = f"[{len(priorities)} requests at {QUOTA_PER_MINUTE * args.scale}/min{scaled}]"
    figures = [
        Figure(
            f"{size} jobs created",
            stats["jobs_created"],
            "",
            f"== {len(priorities)}",
            stats["jobs_created"] == len(priorities),
        ),
        Figure(f"{size} wall time to all created", round(wall, 1), "s"),
        Figure(f"{size} the quota's ideal (N / quota)", round(ideal, 1), "s"),
        Figure(f"{size} wall time / ideal", round(ratio, 3), "x", f"<= {RATIO_TARGET}", ratio <= RATIO_TARGET),
        Figure(
            f"{size} create calls per job",
            round(creates_per_job, 3),
            "",
            f"<= {CREATES_PER_JOB_TARGET}",
            creates_per_job <= CREATES_PER_JOB_TARGET,
        ),
        Figure(f"{size} 429s Vertex answered (creates / CRUD)", json.dumps(stats["quotas"]["refused"], sort_keys=True)),
        Figure(f"{size} requests that waited in line", waited),
        Figure(f"{size} requests failed", failed, "", "== 0", failed == 0),
        Figure(f"{size} dead letters", len(dead), "", "== 0", not dead),
        Figure(f"{size} quota_limited alerts", len(alerts), "", "<= 1", len(alerts) <= 1),
        Figure(
            f"{size} creation rank, priority {HIGH} / 0: median (last)",
            f"{statistics.median(high):.0f} ({max(high)}) / {statistics.median(low):.0f} ({max(low)})"
            if high and low
            else "-",
        ),
    ]
    emit(BENCH, figures)


def _seconds(moment: str) -> float:
    from shared.clock import parse_iso

    return parse_iso(moment).timestamp()


def _request_id(data: bytes) -> str | None:
    try:
        return json.loads(data).get("request_id")
    except (ValueError, AttributeError):
        return None


if __name__ == "__main__":
    main()
