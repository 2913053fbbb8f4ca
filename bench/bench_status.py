"""`spotjobs status --status active --label team=vision` on a ledger of 100,000 finished and 1,000
active requests: wall time, GCS calls and bytes, against a full read of the same ledger.

The records (a quarter of them labelled team=vision, the rest team=nlp; the finished ones last
written from an hour to 80 days ago, the active ones RUNNING, SUBMITTED, CLAIMED or REQUEUED) are written through
`LedgerStore.restore`, so their metadata and active markers are the ledger's own. Two buckets:

- the figure, at full size, in memory (bench/memory_bucket.py): +20 ms per call, as the other
  benchmarks' proxy adds, counting calls and the bytes GCS would send (a listing's object
  resources, a download's body). fake-gcs-server cannot hold 100,000 objects at a per-call cost
  like GCS's (docs/performance.md, "How to read it": prune), and the in-memory bucket makes the same calls the
  store makes, which is what is measured. The query runs as the command does
  (`spotjobs.cli.find.find_records`, then the counts and the table), a full read lists
  `requests/` and downloads every record (16 at a time) to filter them, and a second query,
  `--status failed --label team=vision --since 24h`, shows the listing path (a finished status);
- a smaller ledger (`--farm-finished`, `--farm-active`) copied into fake-gcs-server
  (bench/gcs_farm.py, its +20 ms proxy counting calls), queried by the real command in a child
  process: the same calls against a real storage client and server, wall time of the process.

    python -m bench.bench_status [--finished 100000] [--active 1000] [--latency-ms 20]
                                 [--farm-finished 10000] [--farm-active 100] [--no-farm]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.memory_bucket import MemoryBucket
from bench.report import Figure, emit

BENCH = "status"
REPO = Path(__file__).resolve().parent.parent
BUCKET = "state"
SPEEDUP_TARGET = 20.0
ACTIVE_STATUSES = ("RUNNING", "SUBMITTED", "CLAIMED", "REQUEUED")
VISION_EVERY = 4  # one request in four is team=vision


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def seed(finished: int, active: int, latency_seconds: float) -> tuple[MemoryBucket, int]:
    """The ledger in memory; returns it and how many active requests carry team=vision."""
    from shared.ledger.records import Attempt, RequestRecord
    from shared.ledger.states import AttemptOutcome, RequestStatus
    from shared.ledger.store import LedgerStore

    bucket = MemoryBucket(BUCKET)
    ledger = LedgerStore(bucket)
    now = datetime.now(UTC)
    total = finished + active
    step = max(1, total // max(1, active))
    active_at = set(range(step // 2, total, step)[:active])
    vision_active = 0
    for i in range(total):
        rid = f"req-{i:07d}"
        team = "vision" if zlib.crc32(rid.encode()) % VISION_EVERY == 0 else "nlp"
        job = {
            "displayName": "nightly-retrain",
            "labels": {"team": team, "cost-center": "cc-42"},
            "jobSpec": {
                "workerPoolSpecs": [
                    {
                        "machineSpec": {"machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4"},
                        "replicaCount": "1",
                        "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/trainer:1", "args": ["--epochs=10"]},
                    }
                ]
            },
        }
        is_active = i in active_at
        changed = now - timedelta(minutes=5) if is_active else now - timedelta(hours=1, days=80 * i / total)
        record = RequestRecord(
            rid,
            {"request_id": rid, "max_attempts": 4, "custom_job": job},
            f"gs://ckpt/requests/{rid}/",
            status=RequestStatus(
                ACTIVE_STATUSES[i % len(ACTIVE_STATUSES)] if is_active else ("FAILED" if i % 10 == 0 else "SUCCEEDED")
            ),
            created_at=_iso(changed - timedelta(hours=3)),
            updated_at=_iso(changed),
            finished_at=None if is_active else _iso(changed),
        )
        record.attempts.append(
            Attempt(
                1,
                "us-central1",
                "SPOT",
                _iso(changed - timedelta(hours=3)),
                job=f"projects/p/locations/us-central1/customJobs/{9000000 + i}",
                state="JOB_STATE_RUNNING" if is_active else "JOB_STATE_SUCCEEDED",
                outcome=None if is_active else AttemptOutcome.SUCCEEDED,
                ended_at=None if is_active else _iso(changed),
            )
        )
        ledger.restore(record)
        bucket.set_updated(f"requests/{rid}.json", changed)
        vision_active += is_active and team == "vision"
    ledger.mark_index_built()
    bucket.latency_seconds = latency_seconds
    bucket.reset_counts()
    return bucket, vision_active


def run_query(bucket: MemoryBucket, argv: list[str], limit: int = 100) -> dict:
    """The command's work after it has its client: find, then print the counts and the table."""
    from shared.ledger.store import LedgerStore
    from spotjobs.cli import build_parser
    from spotjobs.cli.find import find_records, format_counts
    from spotjobs.cli.status import format_requests, query_of

    args = build_parser().parse_args(["status", *argv, "--limit", str(limit)])
    bucket.reset_counts()
    started = time.perf_counter()
    found = find_records(LedgerStore(bucket), query_of(args), args.limit)
    text = format_counts(found) + format_requests(found.records)
    wall = time.perf_counter() - started
    return {
        "wall": wall,
        "matches": sum(found.counts.values()),
        "shown": len(found.records),
        "first_line": text.splitlines()[0],
        "calls": dict(bucket.calls),
        "bytes": sum(bucket.bytes.values()),
    }


def full_read(bucket: MemoryBucket, argv: list[str]) -> dict:
    """Every record downloaded (16 at a time) and filtered: what finding costs without the index
    and the listing's metadata."""
    from shared.ledger.store import LedgerStore
    from spotjobs.cli import build_parser
    from spotjobs.cli.find import RECORD_READERS, every_row
    from spotjobs.cli.status import query_of

    query = query_of(build_parser().parse_args(["status", *argv]))
    ledger = LedgerStore(bucket)
    bucket.reset_counts()
    started = time.perf_counter()
    ids = [row.request_id for row in every_row(ledger.list_requests)]
    with ThreadPoolExecutor(RECORD_READERS) as pool:
        matches = [r for r in pool.map(ledger.get, ids) if r is not None and query.matches(r)]
    return {
        "wall": time.perf_counter() - started,
        "matches": len(matches),
        "calls": dict(bucket.calls),
        "bytes": sum(bucket.bytes.values()),
    }


def farm_run(finished: int, active: int, latency_seconds: float, argv: list[str]) -> dict:
    """The same kind of ledger, smaller, on fake-gcs-server behind the +20 ms proxy, queried by
    `spotjobs status` in a child process."""
    from bench.gcs_farm import GcsFarm

    bucket, vision_active = seed(finished, active, 0.0)
    objects = list(bucket.objects())
    with tempfile.TemporaryDirectory() as workdir:
        farm = GcsFarm(Path(workdir), servers=2, per_partition=500).start()
        try:
            farm.create_bucket(BUCKET, [name for name, *_ in objects])
            for name, body, metadata, updated in objects:  # one by one: each keeps its own time
                farm.seed(BUCKET, [(name, body, metadata)], updated=updated, content_type="application/json")
            proxy = farm.proxy(latency_seconds)
            env = {
                **os.environ,
                "STORAGE_EMULATOR_HOST": proxy.url,
                "SPOTJOBS_STATE_BUCKET": BUCKET,
                "GOOGLE_CLOUD_PROJECT": "bench",
            }
            proxy.reset_calls()
            started = time.perf_counter()
            completed = subprocess.run(
                [sys.executable, "-c", "import sys; from spotjobs.cli import main; sys.exit(main())", "status", *argv],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
            )
            wall = time.perf_counter() - started
            calls = dict(proxy.reset_calls())
            proxy.stop()
        finally:
            farm.stop()
    if completed.returncode:
        raise RuntimeError(f"spotjobs status failed:\n{completed.stderr[-3000:]}")
    return {
        "wall": wall,
        "first_line": completed.stdout.splitlines()[0],
        "expected": vision_active,
        "calls": calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--finished", type=int, default=100_000)
    parser.add_argument("--active", type=int, default=1_000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--farm-finished", type=int, default=10_000)
    parser.add_argument("--farm-active", type=int, default=100)
    parser.add_argument("--no-farm", action="store_true")
    args = parser.parse_args()
    latency = args.latency_ms / 1000
    active_query = ["--status", "active", "--label", "team=vision"]
    failed_query = ["--status", "failed", "--label", "team=vision", "--since", "24h"]

    started = time.perf_counter()
    bucket, vision_active = seed(args.finished, args.active, latency)
    print(f"seeded {args.finished:,} + {args.active:,} requests in {time.perf_counter() - started:.1f} s", flush=True)
    query = run_query(bucket, active_query)
    print(f"index: {json.dumps(query)}", flush=True)
    listing = run_query(bucket, failed_query)
    print(f"listing: {json.dumps(listing)}", flush=True)
    full = full_read(bucket, active_query)
    print(f"full read: {json.dumps(full)}", flush=True)

    size = f"[{args.finished:,} finished + {args.active:,} active, in memory, +{args.latency_ms:.0f} ms per call]"
    reads = query["calls"].get("download", 0)
    speedup = full["wall"] / query["wall"]
    figures = [
        Figure(
            f"{size} status --status active --label team=vision: matches (full read)",
            f"{query['matches']} ({full['matches']})",
            "",
            f"== {vision_active}",
            query["matches"] == full["matches"] == vision_active,
        ),
        Figure("status --status active --label team=vision: wall", round(query["wall"], 2), "s"),
        Figure(
            "status --status active --label team=vision: GCS calls by kind",
            json.dumps(query["calls"], sort_keys=True),
        ),
        Figure(
            "status --status active --label team=vision: records read",
            reads,
            "",
            f"<= {args.active} (the active ones)",
            reads <= args.active,
        ),
        Figure("status --status active --label team=vision: bytes from GCS", round(query["bytes"] / 1e6, 2), "MB"),
        Figure("full read (every record, 16 at a time): wall", round(full["wall"], 1), "s"),
        Figure("full read: GCS calls by kind", json.dumps(full["calls"], sort_keys=True)),
        Figure("full read: bytes from GCS", round(full["bytes"] / 1e6, 1), "MB"),
        Figure(
            "full read / status --status active (wall)",
            round(speedup, 1),
            "x",
            f">= {SPEEDUP_TARGET:.0f}",
            speedup >= SPEEDUP_TARGET,
        ),
        Figure(
            "status --status failed --label team=vision --since 24h (the listing): wall / GCS calls / records read",
            f"{listing['wall']:.2f} s / {json.dumps(listing['calls'], sort_keys=True)} / {listing['shown']}",
        ),
    ]
    if not args.no_farm:
        farm = farm_run(args.farm_finished, args.farm_active, latency, active_query)
        print(f"fake-gcs-server: {json.dumps(farm)}", flush=True)
        prefix = f"[{args.farm_finished:,} finished + {args.farm_active} active on fake-gcs-server, +{args.latency_ms:.0f} ms]"
        figures += [
            Figure(
                f"{prefix} spotjobs status --status active --label team=vision (child process): wall",
                round(farm["wall"], 2),
                "s",
            ),
            Figure(f"{prefix} its GCS calls by kind", json.dumps(farm["calls"], sort_keys=True)),
            Figure(
                f"{prefix} its first line",
                farm["first_line"],
                "",
                f"{farm['expected']} requests: ...",
                farm["first_line"].split()[0] == str(farm["expected"]),
            ),
        ]
    emit(BENCH, figures)


if __name__ == "__main__":
    main()
