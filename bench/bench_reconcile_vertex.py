"""reconcile's Vertex cost at scale: one pass over 10,000 active requests whose jobs run (plus
100,000 finished ones), counted by kind against Vertex AI's CRUD quota (600 a minute per region),
before (a get per active request, as reconcile read jobs until shared/reconcile_vertex.py) and
after (one listing per location, a get only for the jobs that ended).

Each pass gets its own copy of the ledger, seeded into the range-partitioned fake-gcs-server of bench/gcs_farm.py behind the
+20 ms latency proxy, as bench/bench_reconcile.py does; 1% of the jobs ended since the last pass.
Vertex is an in-memory JobService that answers lists in pages of up to 1,000 and counts every
call; each pass runs in a fresh child process (`shared.reconcile.run_reconcile`, default settings
but the layout under test).

    python -m bench.bench_reconcile_vertex [--active 10000] [--finished 100000] [--ended 0.01]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.report import Figure, emit

BENCH = "reconcile-vertex"
REPO = Path(__file__).resolve().parent.parent
BUCKET = "state"
LOCATION = "us-central1"
DEPLOYMENT = "bench"
SHARE_TARGET = 0.05  # of one get per active request
CRUD_PER_MINUTE = 600


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def job_name(i: int) -> str:
    return f"projects/bench/locations/{LOCATION}/customJobs/{8_000_000 + i}"


def seed_ledger(farm, bucket: str, finished: int, active: int) -> None:
    """`active` RUNNING requests (their markers too) among `finished` SUCCEEDED ones, and the
    maintenance documents of a ledger whose index is built and whose sweep ran today."""
    from shared.ledger.records import Attempt, RequestRecord
    from shared.ledger.retention import SWEEP_STATE
    from shared.ledger.states import AttemptOutcome, RequestStatus
    from shared.ledger.store import ACTIVE_PREFIX, INDEX_BUILT, MAINTENANCE_PREFIX, REQUESTS_PREFIX

    now = datetime.now(UTC)
    sweep_state = f"{MAINTENANCE_PREFIX}{SWEEP_STATE}.json"
    active_ids = [f"act-{i:06d}" for i in range(active)]
    finished_ids = [f"fin-{i:06d}" for i in range(finished)]
    names = [f"{REQUESTS_PREFIX}{rid}.json" for rid in active_ids + finished_ids]
    names += [f"{ACTIVE_PREFIX}{rid}" for rid in active_ids] + [INDEX_BUILT, sweep_state]
    farm.create_bucket(bucket, names)
    request = {"display_name": "nightly-retrain", "worker_pool_specs": []}
    started = _iso(now - timedelta(hours=2))

    def running(i: int, rid: str) -> tuple[str, bytes, dict[str, str]]:
        record = RequestRecord(
            rid,
            dict(request, request_id=rid),
            f"gs://ckpt/requests/{rid}/",
            status=RequestStatus.RUNNING,
            created_at=started,
            updated_at=started,
        )
        record.attempts.append(
            Attempt(
                1,
                LOCATION,
                "SPOT",
                started,
                job=job_name(i),
                state="JOB_STATE_RUNNING",
                created_at=started,
                started_at=started,
                state_changed_at=started,
            )
        )
        body = json.dumps(record.to_json(), separators=(",", ":")).encode()
        return f"{REQUESTS_PREFIX}{rid}.json", body, {"status": "RUNNING", "created_at": started}

    def succeeded(rid: str) -> tuple[str, bytes, dict[str, str]]:
        record = RequestRecord(
            rid,
            dict(request, request_id=rid),
            f"gs://ckpt/requests/{rid}/",
            status=RequestStatus.SUCCEEDED,
            created_at=started,
            finished_at=started,
        )
        record.attempts.append(Attempt(1, LOCATION, "SPOT", started, outcome=AttemptOutcome.SUCCEEDED))
        body = json.dumps(record.to_json(), separators=(",", ":")).encode()
        return f"{REQUESTS_PREFIX}{rid}.json", body, {"status": "SUCCEEDED"}

    farm.seed(bucket, (running(i, rid) for i, rid in enumerate(active_ids)), content_type="application/json")
    farm.seed(bucket, (succeeded(rid) for rid in finished_ids), content_type="application/json")
    farm.seed(bucket, ((f"{ACTIVE_PREFIX}{rid}", b"", None) for rid in active_ids), updated=now - timedelta(hours=2))
    farm.seed(bucket, [(INDEX_BUILT, json.dumps({"built_at": _iso(now)}).encode(), None)])
    today = {"position": "", "finished_at": now.isoformat()}
    farm.seed(bucket, [(sweep_state, json.dumps(today).encode(), None)], content_type="application/json")


class CountingVertex:
    """`active` jobs of this deployment, RUNNING but for the first `ended` (SUCCEEDED), a list
    answering the unfinished ones in pages of up to 1,000 (one call each), every call counted."""

    def __init__(self, active: int, ended: int) -> None:
        from google.cloud.aiplatform_v1 import CustomJob

        from shared.jobs import LABEL_ATTEMPT, LABEL_DEPLOYMENT, LABEL_REQUEST_ID

        self.calls: dict[str, int] = {"get": 0, "list": 0, "cancel": 0}
        self.jobs = {
            job_name(i): CustomJob(
                name=job_name(i),
                state=4 if i < ended else 3,
                labels={LABEL_REQUEST_ID: f"act-{i:06d}", LABEL_ATTEMPT: "1", LABEL_DEPLOYMENT: DEPLOYMENT},
            )
            for i in range(active)
        }

    def __call__(self, location: str) -> CountingVertex:
        return self

    def get_custom_job(self, *, name: str, **_: object):
        self.calls["get"] += 1
        return self.jobs[name]

    def cancel_custom_job(self, **_: object) -> None:
        self.calls["cancel"] += 1

    def list_custom_jobs(self, request: dict, **_: object):
        unfinished = [job for job in self.jobs.values() if job.state == 3] if "state!=" in request["filter"] else []
        size = min(int(request.get("page_size") or 100), 1000)
        vertex = self

        class Pager:
            @property
            def pages(self):
                for start in range(0, max(1, len(unfinished)), size):
                    vertex.calls["list"] += 1
                    yield type("Page", (), {"custom_jobs": unfinished[start : start + size]})()

            def __iter__(self):
                return (job for page in self.pages for job in page.custom_jobs)

        return Pager()


def child(layout: str, active: int, ended: int) -> None:
    from concurrent.futures import Future
    from dataclasses import replace

    from google.cloud import storage

    from shared import reconcile_vertex
    from shared.ledger.store import LedgerStore
    from shared.log import Logger
    from shared.reconcile import run_reconcile
    from shared.settings import get_settings
    from shared.wiring import Ports

    class AcceptingPublisher:
        """Pub/Sub accepting what the decisions on ended jobs publish (prune requests)."""

        def publish(self, topic: str, data: bytes, **attributes: str) -> Future:
            future: Future = Future()
            future.set_result("1")
            return future

    settings = get_settings()
    if layout == "before":
        # A get per active request, as before the listing; no budget then either.
        reconcile_vertex.VertexPass.listing = lambda self, location, client: None
        settings = replace(settings, reconcile_crud_share=1.0, vertex_crud_per_minute=10**9)
    vertex = CountingVertex(active, ended)
    client = storage.Client(project=settings.project)
    ports = Ports(settings, LedgerStore(client.bucket(f"{BUCKET}-{layout}")), AcceptingPublisher, vertex)
    started = time.perf_counter()
    summary = run_reconcile(ports, Logger())
    print(
        json.dumps(
            {"wall": time.perf_counter() - started, "summary": summary.to_json(), "calls": vertex.calls}, default=str
        )
    )


def run_child(proxy, layout: str, active: int, ended: int) -> dict:
    env = {
        **os.environ,
        "STORAGE_EMULATOR_HOST": proxy.url,
        "SPOTJOBS_STATE_BUCKET": f"{BUCKET}-{layout}",
        "GOOGLE_CLOUD_PROJECT": "bench",
        "SPOTJOBS_LOCATION": LOCATION,
        "SPOTJOBS_DEPLOYMENT": DEPLOYMENT,
        "SPOTJOBS_LOG_LEVEL": "ERROR",
        "SPOTJOBS_RECONCILE_REQUESTS_PER_RUN": str(active),
    }
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.bench_reconcile_vertex",
            "--child",
            layout,
            "--active",
            str(active),
            "--ended-count",
            str(ended),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    if completed.returncode:
        raise RuntimeError(f"{layout} pass failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=["before", "after"], help=argparse.SUPPRESS)
    parser.add_argument("--ended-count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--active", type=int, default=10_000)
    parser.add_argument("--finished", type=int, default=100_000)
    parser.add_argument("--ended", type=float, default=0.01, help="share of the jobs that ended since the last pass")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.active, args.ended_count)
        return

    from bench.gcs_farm import GcsFarm

    ended = round(args.active * args.ended)
    size = f"[{args.active:,} active ({ended} ended since the last pass) + {args.finished:,} finished]"
    with tempfile.TemporaryDirectory() as workdir:
        farm = GcsFarm(Path(workdir), servers=2, per_partition=500).start()
        try:
            started = time.perf_counter()
            for layout in ("before", "after"):  # each pass decides on the ended jobs: one ledger each
                seed_ledger(farm, f"{BUCKET}-{layout}", args.finished, args.active)
            print(f"{BENCH}: seeded in {time.perf_counter() - started:.1f} s", flush=True)
            proxy = farm.proxy(args.latency_ms / 1000)
            before = run_child(proxy, "before", args.active, ended)
            after = run_child(proxy, "after", args.active, ended)
            proxy.stop()
        finally:
            farm.stop()
    for name, run in (("before", before), ("after", after)):
        print(f"{BENCH}: {name}: {json.dumps(run)}", flush=True)
    total = {name: sum(run["calls"].values()) for name, run in (("before", before), ("after", after))}
    share = total["after"] / args.active
    figures = [
        Figure(
            f"{size} Vertex calls per pass, before (a get per request)", json.dumps(before["calls"], sort_keys=True)
        ),
        Figure(
            f"{size} Vertex calls per pass, after (listing + gets of ended jobs)",
            json.dumps(after["calls"], sort_keys=True),
        ),
        Figure(
            f"{size} after / one get per active request",
            round(share, 4),
            "",
            f"<= {SHARE_TARGET}",
            share <= SHARE_TARGET,
        ),
        Figure(
            f"{size} minutes of the CRUD quota ({CRUD_PER_MINUTE}/min) per pass, before / after",
            f"{total['before'] / CRUD_PER_MINUTE:.2f} / {total['after'] / CRUD_PER_MINUTE:.3f}",
        ),
        Figure(
            f"{size} gets answered by the listing, after",
            after["summary"]["vertex"].get("answered_by_listing", 0),
        ),
        Figure(
            f"{size} requests reconciled, before / after",
            f"{before['summary']['active']} / {after['summary']['active']}",
        ),
        Figure(
            f"{size} one pass wall (+20 ms per GCS call), before / after",
            f"{before['wall']:.1f} / {after['wall']:.1f}",
            "s",
        ),
    ]
    emit(BENCH, figures)


if __name__ == "__main__":
    main()
