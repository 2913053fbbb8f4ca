"""prune_checkpoints: throughput, memory and list calls of a full prune on fake-gcs-server.

Layout per size: R requests x C checkpoints (`step-000100/` ...) x S objects each (S-1 shards and
the `COMMITTED` marker), every request RUNNING in the ledger, default policy (keep_last=2), so
(C-2)/C of the objects are deleted. For each size:
- the full prune (`shared.pruning.runner.run_prune`, settings.prune_workers threads) in a fresh child process,
  through the latency proxy (devstack/fault_proxy.py, +20 ms per request: about a call to real GCS):
  wall time, objects deleted per second, the child's peak RSS, and its list calls, counted;
- a serial one-delete-at-a-time baseline over a sample of the same objects, through the same
  proxy (the sample is then restored), extrapolated to every object the prune deletes;
- the same full prune without the proxy, on an identical second bucket.
Seeding writes directly to fake-gcs-server, in parallel. A list-call check repeats a small layout
with few and many shards per checkpoint: the count must not change. Cold start of the function
is measured against `import google.cloud.aiplatform` in the same run.

fake-gcs-server 1.54 (the one PyPI ships) keeps a bucket's objects in one slice and scans it on
every create, get and delete (about 0.7 us per object held), so seeding is quadratic and at
100,000 objects each delete costs the server ~70 ms of CPU: the 1,000-request size would take
hours, and from ~5,000 objects the emulator, not the client, bounds throughput. Sizes are flags.

    python -m bench.bench_prune [--requests 10 30] [--checkpoints 10] [--shards 10]
                                [--latency-ms 20] [--serial-sample 300] [--no-direct]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.report import Figure, emit

BENCH = "prune"
REPO = Path(__file__).resolve().parent.parent
THROUGHPUT_TARGET = 8.0  # x the serial baseline
RSS_TARGET_MIB = 200.0
COLD_START_CEILING = 0.30
SDK = "google.cloud.aiplatform"


@dataclass(frozen=True)
class Size:
    requests: int
    checkpoints: int
    objects_per_checkpoint: int

    @property
    def objects(self) -> int:
        return self.requests * self.checkpoints * self.objects_per_checkpoint

    def label(self) -> str:
        return f"{self.requests}x{self.checkpoints}x{self.objects_per_checkpoint}"

    def names(self, request: int) -> list[str]:
        """Every object of one request: all shards first, then the markers (written last)."""
        base = f"requests/bench-{request:05d}/checkpoints/"
        steps = [f"{base}step-{(c + 1) * 100:06d}/" for c in range(self.checkpoints)]
        shards = [f"{step}shard-{s:03d}" for step in steps for s in range(self.objects_per_checkpoint - 1)]
        return shards + [f"{step}COMMITTED" for step in steps]

    def deletable(self, request: int, keep_last: int = 2) -> list[str]:
        keep = {f"step-{(c + 1) * 100:06d}/" for c in range(self.checkpoints)[-keep_last:]}
        return [n for n in self.names(request) if n.split("/")[3] + "/" not in keep]


# Seeding, directly and in parallel: the emulator's own cost, not the proxy's, bounds it.

_local = threading.local()


def _session():
    import requests

    if getattr(_local, "session", None) is None:
        _local.session = requests.Session()
    return _local.session


def upload(url: str, bucket: str, names: list[str], body: bytes = b"s" * 256, workers: int = 8) -> None:
    def put(name: str) -> None:
        response = _session().post(
            f"{url}/upload/storage/v1/b/{bucket}/o",
            params={"uploadType": "media", "name": name},
            data=body,
        )
        response.raise_for_status()

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(put, names))


def create_bucket(url: str, name: str) -> None:
    _session().post(f"{url}/storage/v1/b", params={"project": "bench"}, json={"name": name}).raise_for_status()


def seed(url: str, bucket: str, state_bucket: str | None, size: Size) -> float:
    started = time.perf_counter()
    create_bucket(url, bucket)
    names = [n for r in range(size.requests) for n in size.names(r)]
    upload(url, bucket, [n for n in names if not n.endswith("/COMMITTED")])
    upload(url, bucket, [n for n in names if n.endswith("/COMMITTED")])  # as a trainer: last
    if state_bucket:
        create_bucket(url, state_bucket)
        for r in range(size.requests):
            record = {"request_id": f"bench-{r:05d}", "request": {}, "output_dir": "", "status": "RUNNING"}
            _session().post(
                f"{url}/upload/storage/v1/b/{state_bucket}/o",
                params={"uploadType": "media", "name": f"requests/bench-{r:05d}.json"},
                data=json.dumps(record),
            ).raise_for_status()
    return time.perf_counter() - started


# The measured runs.


def serial_baseline(proxy_url: str, direct_url: str, bucket: str, size: Size, sample: int) -> float:
    """Seconds per delete, one at a time through the proxy; the sample is restored afterwards."""
    names: list[str] = []
    for r in range(size.requests):
        names += size.deletable(r)
        if len(names) >= sample:
            break
    names = names[:sample]
    session = _session()
    started = time.perf_counter()
    for name in names:
        session.delete(f"{proxy_url}/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}").raise_for_status()
    per_delete = (time.perf_counter() - started) / len(names)
    # Restore the sample; each touched checkpoint's marker is rewritten last, as it was.
    upload(direct_url, bucket, [n for n in names if not n.endswith("/COMMITTED")])
    upload(direct_url, bucket, sorted({n.rsplit("/", 1)[0] + "/COMMITTED" for n in names}))
    return per_delete


def prune_in_child(storage_url: str, bucket: str, state_bucket: str, workers: int, verify: bool) -> dict:
    env = {
        **os.environ,
        "STORAGE_EMULATOR_HOST": storage_url,
        "SPOTJOBS_CHECKPOINT_BUCKET": bucket,
        "SPOTJOBS_STATE_BUCKET": state_bucket,
        "SPOTJOBS_PRUNE_WORKERS": str(workers),
        "SPOTJOBS_LOG_LEVEL": "ERROR",
    }
    completed = subprocess.run(
        [sys.executable, "-m", "bench.bench_prune", "--child", "--verify" if verify else "--no-verify"],
        cwd=REPO, env=env, capture_output=True, text=True, check=True,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def child(verify: bool) -> None:
    """One full prune, as the function runs it; prints its figures as JSON."""
    from shared.clients import storage_client
    from shared.pruning.runner import run_prune
    from shared.settings import get_settings

    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    result = run_prune(storage_client(), get_settings(), verify_generation=verify)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    peak = after.ru_maxrss / 1024
    print(json.dumps({"wall": wall, "cpu": cpu, "peak_rss_mib": peak, "summary": result.summary}))


def list_calls_for(url: str, size: Size) -> int:
    bucket = f"calls-{size.label()}-{time.monotonic_ns()}"
    state = bucket + "-state"
    seed(url, bucket, state, size)
    return prune_in_child(url, bucket, state, 8, verify=False)["summary"]["calls"]["list"]


def measure_size(fake_gcs: str, proxy, size: Size, args: argparse.Namespace) -> list[Figure]:
    label = size.label()
    tag = f"{time.monotonic_ns()}"
    buckets = {"proxy": f"ckpt-proxy-{tag}", "direct": f"ckpt-direct-{tag}"}
    state = f"state-{tag}"
    seconds = seed(fake_gcs, buckets["proxy"], state, size)
    if not args.no_direct:
        seconds += seed(fake_gcs, buckets["direct"], None, size)
    print(f"[{label}] seeded {size.objects:,} objects per bucket in {seconds:.0f} s", flush=True)

    per_delete = serial_baseline(proxy.url, fake_gcs, buckets["proxy"], size, args.serial_sample)
    run = prune_in_child(proxy.url, buckets["proxy"], state, args.workers, verify=False)
    summary = run["summary"]
    deleted = summary["objects_deleted"]
    expected = sum(len(size.deletable(r)) for r in range(size.requests))
    rate = deleted / run["wall"]
    serial_rate = 1 / per_delete
    speedup = rate / serial_rate
    lists = summary["calls"]["list"]
    calls = sum(summary["calls"].values()) + size.requests  # + one ledger read per request
    latency = per_delete  # one call's round trip through the proxy, as the baseline measured it
    figures = [
        Figure(f"[{label}] objects deleted (expected {expected:,})", deleted, "", f"== {expected}", deleted == expected),
        Figure(f"[{label}] full prune wall, +{args.latency_ms} ms proxy", round(run["wall"], 2), "s"),
        Figure(f"[{label}] full prune throughput, proxy", round(rate, 1), "objects/s"),
        Figure(f"[{label}] serial baseline (sample of {args.serial_sample}, extrapolated to {deleted:,})",
               round(deleted * per_delete, 1), "s"),
        Figure(f"[{label}] serial baseline throughput", round(serial_rate, 1), "objects/s"),
        Figure(f"[{label}] throughput vs serial", round(speedup, 2), "x", f">= {THROUGHPUT_TARGET}",
               speedup >= THROUGHPUT_TARGET),
        Figure(f"[{label}] prune peak RSS", round(run["peak_rss_mib"], 1), "MiB", f"<= {RSS_TARGET_MIB:.0f}",
               run["peak_rss_mib"] <= RSS_TARGET_MIB),
        Figure(f"[{label}] list calls (per request)", f"{lists:,} ({lists / size.requests:.1f})"),
        Figure(f"[{label}] calls made", json.dumps(summary["calls"])),
        # What bounds the client itself: its CPU per call (one core, the GIL) against the latency.
        Figure(f"[{label}] prune client CPU per call", round(1000 * run["cpu"] / calls, 3), "ms"),
        Figure(f"[{label}] client-bound ceiling vs serial (derived)",
               round(min(args.workers / latency, calls / run["cpu"]) * deleted / calls / serial_rate, 1), "x"),
    ]
    if not args.no_direct:
        direct = prune_in_child(fake_gcs, buckets["direct"], state, args.workers, verify=False)
        figures += [
            Figure(f"[{label}] full prune wall, no proxy", round(direct["wall"], 2), "s"),
            Figure(f"[{label}] full prune throughput, no proxy", round(direct["summary"]["objects_deleted"] / direct["wall"], 1), "objects/s"),
            Figure(f"[{label}] prune peak RSS, no proxy", round(direct["peak_rss_mib"], 1), "MiB"),
        ]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--verify", dest="verify", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-verify", dest="verify", action="store_false", help=argparse.SUPPRESS)
    parser.add_argument("--requests", type=int, nargs="+", default=[10, 30], help="one run per size")
    parser.add_argument("--checkpoints", type=int, default=10)
    parser.add_argument("--shards", type=int, default=10, help="objects per checkpoint, marker included")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=None, help="default: settings.prune_workers")
    parser.add_argument("--serial-sample", type=int, default=300)
    parser.add_argument("--no-direct", action="store_true", help="skip the run without the proxy")
    parser.add_argument("--cold-start-runs", type=int, default=3)
    args = parser.parse_args()
    if args.child:
        child(args.verify)
        return

    from bench.coldstart import import_seconds
    from devstack.emulators import start_fake_gcs
    from devstack.fault_proxy import FaultProxy
    from shared.settings import Settings

    args.workers = args.workers or Settings().prune_workers
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as workdir:
        process, fake_gcs = start_fake_gcs(Path(workdir))
        proxy = FaultProxy(fake_gcs, latency_seconds=args.latency_ms / 1000)
        proxy.start()
        try:
            for requests in args.requests:
                figures += measure_size(fake_gcs, proxy, Size(requests, args.checkpoints, args.shards), args)
            few, many = (list_calls_for(fake_gcs, Size(5, args.checkpoints, s)) for s in (3, 30))
            figures.append(Figure(f"list calls, 5 requests x {args.checkpoints} checkpoints, 3 vs 30 objects each",
                                  f"{few} vs {many}", "", "equal", few == many))
        finally:
            proxy.stop()
            process.stop()

    sdk = import_seconds(SDK, args.cold_start_runs)
    prune = import_seconds("functions.prune", args.cold_start_runs)
    figures += [
        Figure(f"import {SDK} (yardstick)", round(sdk, 3), "s"),
        Figure("prune_checkpoints cold start (import functions.prune)", round(prune, 3), "s"),
        Figure("prune_checkpoints cold start / SDK import", round(prune / sdk, 3), "",
               f"<= {COLD_START_CEILING}", prune / sdk <= COLD_START_CEILING),
    ]
    emit(BENCH, figures)


if __name__ == "__main__":
    main()
