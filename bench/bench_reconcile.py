"""reconcile over a year of history: one pass on a ledger of 100,000 finished and 100 active
requests, on the active index and on today's layout (every record listed), in the same run.

The ledger is seeded once into a range-partitioned fake-gcs-server (bench/gcs_farm.py: its
filesystem backend, files written directly; a listing walks one partition, about what a GCS list
page costs) behind the +20 ms latency proxy. Both layouts read the same bucket: the index layout
lists `active/` (its markers are seeded with the records), today's lists `requests/` with the
listing metadata, as `shared/reconcile.py` did before the index (kept below as `legacy_selection`).

The active requests are re-claimed attempts (claimed just now, after a preempted attempt 1), so a
pass reads each record and leaves it to its submit: the pass is the ledger's cost, and Vertex sees
only the stray sweep's one list per location (answered empty here, and counted).
Each pass runs in a fresh child process (`shared.reconcile.run_reconcile`, default settings):
wall time, the selection's own time, peak RSS; the proxy counts its calls by kind. A third pass
has a retention sweep turn due (5 pages of `requests/`, every record within its retention).

    python -m bench.bench_reconcile [--finished 100000] [--active 100] [--latency-ms 20]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.report import Figure, emit, peak_rss_mib

BENCH = "reconcile"
REPO = Path(__file__).resolve().parent.parent
LIST_TARGET = 10
SPEEDUP_TARGET = 50.0
BUCKET = "state"


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def seed_ledger(farm, finished: int, active: int) -> dict[str, int]:
    """`finished` SUCCEEDED records (finished over the last 80 days, inside the retention) and
    `active` re-claimed ones spread among them, their markers, and the maintenance documents of a
    ledger whose index is built and whose sweep ran today."""
    from shared.ledger.records import Attempt, RequestRecord
    from shared.ledger.retention import SWEEP_STATE
    from shared.ledger.states import AttemptOutcome, RequestStatus
    from shared.ledger.store import ACTIVE_PREFIX, INDEX_BUILT, MAINTENANCE_PREFIX, REQUESTS_PREFIX

    now = datetime.now(UTC)
    total = finished + active
    step = max(1, total // max(1, active))
    active_ids = {f"req-{i:07d}" for i in range(step // 2, total, step)}
    ids = [f"req-{i:07d}" for i in range(total)]
    active_ids = set(sorted(active_ids)[:active])
    sweep_state = f"{MAINTENANCE_PREFIX}{SWEEP_STATE}.json"
    names = [f"{REQUESTS_PREFIX}{i}.json" for i in ids] + [f"{ACTIVE_PREFIX}{i}" for i in active_ids]
    names += [INDEX_BUILT, sweep_state]
    farm.create_bucket(BUCKET, names)

    request = {
        "request_id": "x",
        "display_name": "nightly-retrain",
        "worker_pool_specs": [
            {
                "machine_spec": {
                    "machine_type": "n1-standard-8",
                    "accelerator_type": "NVIDIA_TESLA_T4",
                    "accelerator_count": 1,
                },
                "replica_count": 1,
                "container_spec": {"image_uri": "us-docker.pkg.dev/p/r/trainer:1", "args": ["--epochs=10"]},
            }
        ],
    }

    def finished_record(i: int, rid: str) -> tuple[str, bytes, dict[str, str]]:
        ended = now - timedelta(days=80 * i / total)
        record = RequestRecord(
            rid,
            dict(request, request_id=rid),
            f"gs://ckpt/requests/{rid}/",
            status=RequestStatus.SUCCEEDED,
            created_at=_iso(ended - timedelta(hours=3)),
            updated_at=_iso(ended),
            finished_at=_iso(ended),
        )
        record.attempts.append(
            Attempt(
                1,
                "us-central1",
                "SPOT",
                _iso(ended - timedelta(hours=3)),
                job=f"projects/p/locations/us-central1/customJobs/{9000000 + i}",
                state="JOB_STATE_SUCCEEDED",
                outcome=AttemptOutcome.SUCCEEDED,
                ended_at=_iso(ended),
                checkpoints_committed=12,
            )
        )
        record.markers.append("job_succeeded:1")
        body = json.dumps(record.to_json(), separators=(",", ":")).encode()
        return f"{REQUESTS_PREFIX}{rid}.json", body, {"status": "SUCCEEDED"}

    def active_record(i: int, rid: str) -> tuple[str, bytes, dict[str, str]]:
        started = now - timedelta(hours=2)
        record = RequestRecord(
            rid,
            dict(request, request_id=rid),
            f"gs://ckpt/requests/{rid}/",
            status=RequestStatus.CLAIMED,
            created_at=_iso(started),
            updated_at=_iso(now),
        )
        record.attempts.append(
            Attempt(
                1,
                "us-central1",
                "SPOT",
                _iso(started),
                job=f"projects/p/locations/us-central1/customJobs/{9000000 + i}",
                state="JOB_STATE_FAILED",
                outcome=AttemptOutcome.REQUEUED,
                preemptions=1,
            )
        )
        record.attempts.append(Attempt(2, "us-central1", "SPOT", _iso(now)))
        body = json.dumps(record.to_json(), separators=(",", ":")).encode()
        return f"{REQUESTS_PREFIX}{rid}.json", body, {"status": "CLAIMED"}

    records = (active_record(i, rid) if rid in active_ids else finished_record(i, rid) for i, rid in enumerate(ids))
    count = farm.seed(BUCKET, records, updated=now - timedelta(days=1), content_type="application/json")
    farm.seed(
        BUCKET, ((f"{ACTIVE_PREFIX}{rid}", b"", None) for rid in sorted(active_ids)), updated=now - timedelta(hours=2)
    )
    farm.seed(BUCKET, [(INDEX_BUILT, json.dumps({"built_at": _iso(now)}).encode(), None)])
    today = {"position": "", "finished_at": now.isoformat()}
    farm.seed(BUCKET, [(sweep_state, json.dumps(today).encode(), None)], content_type="application/json")
    return {"records": count, "active": len(active_ids)}


# Today's layout: the selection as shared/reconcile.py made it before the active index.


def legacy_selection(ledger, summary, log, *, page_size: int, limit: int) -> list[str]:
    summary.started_at = ledger.cursor("reconcile")
    active: list[str] = []
    token = None
    while not summary.truncated:
        rows, token = ledger.list_requests(page_size=page_size, page_token=token, start_at=summary.started_at)
        for row in rows:
            summary.listed += 1
            if not row.needs_reconcile:
                continue
            if len(active) >= limit:
                summary.truncated = True
                break
            active.append(row.request_id)
        if not token:
            break
    summary.active = len(active)
    return active


def child(layout: str) -> None:
    from google.cloud import storage

    from shared import reconcile
    from shared.ledger.store import LedgerStore
    from shared.log import Logger
    from shared.settings import get_settings
    from shared.wiring import Ports

    def never(*_: object) -> None:
        raise AssertionError("this pass should need no Pub/Sub call")

    class SweepListsOnly:
        """Vertex as this pass meets it: the stray sweep's lists (nothing runs), nothing else."""

        lists = 0

        def __call__(self, location: str) -> SweepListsOnly:
            return self

        def list_custom_jobs(self, request: dict, **_: object) -> list:
            SweepListsOnly.lists += 1
            return []

    selection = legacy_selection if layout == "legacy" else reconcile.requests_to_reconcile
    timed: dict[str, float] = {}

    def timed_selection(*args, **kwargs):
        started = time.perf_counter()
        try:
            return selection(*args, **kwargs)
        finally:
            timed["selection"] = time.perf_counter() - started

    reconcile.requests_to_reconcile = timed_selection
    settings = get_settings()
    client = storage.Client(project=settings.project)
    ports = Ports(settings, LedgerStore(client.bucket(BUCKET)), never, SweepListsOnly())
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    summary = reconcile.run_reconcile(ports, Logger())
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "wall": wall,
                "selection": timed["selection"],
                "summary": summary.to_json(),
                "cpu": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
                "peak_rss_mib": peak_rss_mib(),
                "vertex_lists": SweepListsOnly.lists,
            }
        )
    )


def run_child(proxy, layout: str) -> dict:
    env = {
        **os.environ,
        "STORAGE_EMULATOR_HOST": proxy.url,
        "SPOTJOBS_STATE_BUCKET": BUCKET,
        "GOOGLE_CLOUD_PROJECT": "bench",
        "SPOTJOBS_LOCATION": "us-central1",
        "SPOTJOBS_DEPLOYMENT": "bench",
        "SPOTJOBS_LOG_LEVEL": "ERROR",
    }
    proxy.reset_calls()
    completed = subprocess.run(
        [sys.executable, "-m", "bench.bench_reconcile", "--child", layout],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    if completed.returncode:
        raise RuntimeError(f"{layout} pass failed:\n{completed.stderr[-3000:]}")
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    result["calls"] = dict(proxy.reset_calls())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=["legacy", "index"], help=argparse.SUPPRESS)
    parser.add_argument("--finished", type=int, default=100_000)
    parser.add_argument("--active", type=int, default=100)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--per-partition", type=int, default=500)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return

    from bench.gcs_farm import GcsFarm

    size = f"{args.finished:,} finished + {args.active} active"
    with tempfile.TemporaryDirectory() as workdir:
        farm = GcsFarm(Path(workdir), servers=2, per_partition=args.per_partition).start()
        try:
            started = time.perf_counter()
            seeded = seed_ledger(farm, args.finished, args.active)
            print(f"seeded {seeded['records']:,} records in {time.perf_counter() - started:.1f} s", flush=True)
            proxy = farm.proxy(args.latency_ms / 1000)
            index = run_child(proxy, "index")
            legacy = run_child(proxy, "legacy")
            farm.seed(BUCKET, [("maintenance/ledger-sweep.json", b"{}", None)], content_type="application/json")
            sweeping = run_child(proxy, "index")
            proxy.stop()
        finally:
            farm.stop()
    for name, run in (("index", index), ("today", legacy), ("index+sweep", sweeping)):
        print(f"{name}: {json.dumps(run)}", flush=True)
    speedup = legacy["wall"] / index["wall"]
    lists = index["calls"].get("list", 0)
    figures = [
        Figure(
            f"[{size}] active found, index / today's layout",
            f"{index['summary']['active']} / {legacy['summary']['active']}",
            "",
            f"== {args.active}",
            index["summary"]["active"] == legacy["summary"]["active"] == args.active,
        ),
        Figure("one pass, index: list calls", lists, "", f"<= {LIST_TARGET}", lists <= LIST_TARGET),
        Figure("one pass, today's layout: list calls", legacy["calls"].get("list", 0)),
        Figure("one pass, index: calls by kind", json.dumps(index["calls"], sort_keys=True)),
        Figure("one pass, today's layout: calls by kind", json.dumps(legacy["calls"], sort_keys=True)),
        Figure(
            f"one pass, Vertex list calls (stray sweep, {args.active} active requests)",
            index["vertex_lists"],
            "",
            "== 1",
            index["vertex_lists"] == 1,
        ),
        Figure("one pass wall, index (+20 ms per call)", round(index["wall"], 2), "s"),
        Figure("one pass wall, today's layout", round(legacy["wall"], 2), "s"),
        Figure(
            "one pass, today's layout / index",
            round(speedup, 1),
            "x",
            f">= {SPEEDUP_TARGET:.0f}",
            speedup >= SPEEDUP_TARGET,
        ),
        Figure(
            "selection alone (listing + checks), index / today's layout",
            f"{index['selection']:.3f} / {legacy['selection']:.2f}",
            "s",
        ),
        Figure(
            "one pass peak RSS, index / today's layout",
            f"{index['peak_rss_mib']:.0f} / {legacy['peak_rss_mib']:.0f}",
            "MiB",
        ),
        Figure("one pass CPU, index / today's layout", f"{index['cpu']:.2f} / {legacy['cpu']:.2f}", "s"),
        Figure(
            "a pass with a retention sweep turn due: list calls / wall",
            f"{sweeping['calls'].get('list', 0)} / {sweeping['wall']:.2f} s",
        ),
    ]
    emit(BENCH, figures)


if __name__ == "__main__":
    main()
