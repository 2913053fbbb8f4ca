"""`spotjobs dashboard`'s Requests page over a ledger of 100,000 finished and 1,000 active requests
(issue 47: under 1 s): the page as it opens (the active index, as `spotjobs status --status
active` reads it), the same page over every request (`?all=1`: one listing of `requests/`, the
newest 100 read) and a request's page, each rendered by the app (Flask's test client, so the
templates and the views run as served; no browser).

The ledger is bench_status's (the same records, `LedgerStore.restore`d into bench/memory_bucket.py,
+20 ms per call as the other benchmarks' proxy adds): fake-gcs-server cannot hold 100,000 objects at a
per-call cost like GCS's (docs/performance.md, "How to read it": prune). Each page is read
`--repeat` times (a poll reads it again every 5 s); the figure is the median.

What the page's speed costs the writers: each active marker carries its record's status, noted by a
metadata patch after every write that changes the status. The last figures are a ledger write with
a status change and one without (GCS calls and wall time, the median of `--repeat`).

    python -m bench.bench_dashboard [--finished 100000] [--active 1000] [--latency-ms 20] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from bench.bench_status import seed
from bench.memory_bucket import MemoryBucket
from bench.report import Figure, emit

BENCH = "dashboard"
TARGET_SECONDS = 1.0


def app_over(bucket: MemoryBucket) -> Any:
    """The dashboard over the in-memory ledger; no log source, no cancel (not measured)."""
    from shared.ledger.store import LedgerStore
    from spotjobs.dashboard.app import create_app
    from spotjobs.dashboard.reading import Deployment

    def no_cancel(request_id: str, reason: str | None, by: str) -> Any:
        raise AssertionError("the benchmark cancels nothing")

    return create_app(Deployment(LedgerStore(bucket), None, no_cancel, "bench", bucket.name, bucket))


def timed(client: Any, bucket: MemoryBucket, path: str, repeat: int) -> dict[str, Any]:
    """The median wall time of `repeat` reads of `path`, and the GCS calls of the last."""
    walls = []
    for _ in range(repeat):
        bucket.reset_counts()
        started = time.perf_counter()
        response = client.get(path)
        walls.append(time.perf_counter() - started)
        assert response.status_code == 200, (path, response.status_code)
    page = response.get_data(as_text=True)
    return {
        "wall": statistics.median(walls),
        "rows": page.count("<tr data-request="),
        "calls": dict(bucket.calls),
        "bytes": sum(bucket.bytes.values()),
    }


def write_cost(bucket: MemoryBucket, request_id: str, repeat: int) -> dict[str, Any]:
    """A write that changes the status (SUBMITTED -> RUNNING) against one that changes something
    else, each on a fresh copy of `request_id`'s record: the calls and wall time of the update."""
    from dataclasses import replace

    from shared.ledger.states import RequestStatus
    from shared.ledger.store import LedgerStore

    ledger = LedgerStore(bucket)
    base = ledger.get(request_id)
    assert base is not None, request_id
    results: dict[str, Any] = {}
    changes = (
        ("a status change (its marker's status noted)", RequestStatus.RUNNING),
        ("no status change", RequestStatus.SUBMITTED),
    )
    for name, status in changes:
        walls = []
        for n in range(repeat):
            copy = f"{request_id}-write-{status.lower()}-{n}"
            ledger.restore(replace(base, request_id=copy, status=RequestStatus.SUBMITTED))

            def move(current: Any, status: RequestStatus = status) -> Any:
                current.status = status
                current.markers.append("bench")
                return current

            bucket.reset_counts()
            started = time.perf_counter()
            ledger.update(copy, move)
            walls.append(time.perf_counter() - started)
        results[name] = {"wall": statistics.median(walls), "calls": dict(bucket.calls)}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--finished", type=int, default=100_000)
    parser.add_argument("--active", type=int, default=1_000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    started = time.perf_counter()
    bucket, _ = seed(args.finished, args.active, args.latency_ms / 1000)
    print(f"seeded {args.finished:,} + {args.active:,} requests in {time.perf_counter() - started:.1f} s", flush=True)
    client = app_over(bucket).test_client()
    opening = timed(client, bucket, "/", args.repeat)
    print(f"requests page (active index): {json.dumps(opening)}", flush=True)
    everything = timed(client, bucket, "/?all=1", args.repeat)
    print(f"requests page (?all=1): {json.dumps(everything)}", flush=True)
    one = timed(client, bucket, "/requests/req-0000050", args.repeat)
    print(f"a request's page: {json.dumps(one)}", flush=True)
    writes = write_cost(bucket, "req-0000050", args.repeat)
    print(f"a ledger write: {json.dumps(writes)}", flush=True)

    size = f"[{args.finished:,} finished + {args.active:,} active, in memory, +{args.latency_ms:.0f} ms per call]"
    figures = [
        Figure(
            f"{size} Requests page as it opens (the active index): wall, median of {args.repeat}",
            round(opening["wall"], 2),
            "s",
            f"< {TARGET_SECONDS:.0f}",
            opening["wall"] < TARGET_SECONDS,
        ),
        Figure(
            "Requests page as it opens: rows / GCS calls by kind",
            f"{opening['rows']} / {json.dumps(opening['calls'], sort_keys=True)}",
        ),
        Figure("Requests page as it opens: bytes from GCS", round(opening["bytes"] / 1e6, 2), "MB"),
        Figure("Requests page ?all=1 (a listing of requests/): wall", round(everything["wall"], 2), "s"),
        Figure(
            "Requests page ?all=1: rows / GCS calls by kind",
            f"{everything['rows']} / {json.dumps(everything['calls'], sort_keys=True)}",
        ),
        Figure("a request's page: wall", round(one["wall"], 3), "s"),
        *(
            Figure(
                f"a ledger write with {name}: wall / GCS calls by kind",
                f"{cost['wall']:.3f} s / {json.dumps(cost['calls'], sort_keys=True)}",
            )
            for name, cost in writes.items()
        ),
    ]
    emit(BENCH, figures)


if __name__ == "__main__":
    main()
