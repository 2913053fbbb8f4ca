"""prune_checkpoints at 100,000 objects: spotjobs prune against `gcloud storage rm` and a serial
baseline, on identical object sets, in one run.

Layout: R requests x C checkpoints (`step-000100/` ...) x S objects each (S-1 shards and the
`COMMITTED` marker), every request RUNNING in the ledger, default policy (keep_last=2), so
(C-2)/C of the objects are deleted. The default size is 1,000 x 10 x 10 = 100,000 objects.

Storage is a range-partitioned fake-gcs-server (bench/gcs_farm.py: filesystem backend, seeded by
writing its files directly, behind one proxy adding +20 ms per call, about a call to real GCS):
fake-gcs-server's own backends cost O(objects) per call at this size. For each size, on buckets
seeded identically:
- spotjobs prune: the full run (`shared.pruning.runner.run_prune`, selection included: the
  request listing, each request's ledger read, discovery and planning, then the deletes) in a
  fresh child process: wall, objects/s, peak RSS, list calls (counted by the store and the proxy);
- `gcloud storage rm -I`, given the objects the prune deleted on stdin (what a user would run with
  the list in hand, with its own default parallelism), endpoint pointed at the proxy, anonymous
  credentials, a throwaway CLOUDSDK_CONFIG: wall, objects/s, peak RSS of its processes. It makes
  a GET and a DELETE per object at a steady rate (~35 objects/s here), so by default it is given
  the first `--gcloud-sample` objects of the same list and its wall is extrapolated (all 80,000
  would take ~40 min on this machine; `--gcloud-sample 0` runs them all);
- a serial one-delete-at-a-time baseline over a sample, through the same proxy (the sample is then
  restored), extrapolated to every object the prune deletes.
A list-call check repeats a small layout with few and many shards per checkpoint: the count must
not change. Cold start of the function is measured against `import google.cloud.aiplatform`.

    python -m bench.bench_prune [--requests 1000] [--checkpoints 10] [--shards 10]
                                [--latency-ms 20] [--serial-sample 300] [--no-gcloud]
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
import urllib.parse
from collections import Counter
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

from bench.report import Figure, emit, peak_rss_mib

BENCH = "prune"
REPO = Path(__file__).resolve().parent.parent
THROUGHPUT_TARGET = 8.0  # x the serial baseline
GCLOUD_TARGET = 1.5  # x gcloud storage rm
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


# Seeding: files written straight into the farm's partitions.


def seed(farm, bucket: str, state_bucket: str | None, size: Size, updated) -> float:
    started = time.perf_counter()
    names = [n for r in range(size.requests) for n in size.names(r)]
    farm.create_bucket(bucket, names)
    farm.seed(bucket, ((n, b"s" * 256, None) for n in names), updated=updated)
    if state_bucket:
        records = [f"requests/bench-{r:05d}.json" for r in range(size.requests)]
        farm.create_bucket(state_bucket, records)
        farm.seed(
            state_bucket,
            (
                (
                    name,
                    json.dumps(
                        {"request_id": name[9:-5], "request": {}, "output_dir": "", "status": "RUNNING"}
                    ).encode(),
                    {"status": "RUNNING"},
                )
                for name in records
            ),
            content_type="application/json",
        )
    return time.perf_counter() - started


# The measured runs.


def serial_baseline(proxy_url: str, farm, bucket: str, size: Size, sample: int, updated) -> float:
    """Seconds per delete, one at a time through the proxy; the sample is restored afterwards."""
    import requests

    names: list[str] = []
    for r in range(size.requests):
        names += size.deletable(r)
        if len(names) >= sample:
            break
    names = names[:sample]
    session = requests.Session()
    started = time.perf_counter()
    for name in names:
        session.delete(f"{proxy_url}/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}").raise_for_status()
    per_delete = (time.perf_counter() - started) / len(names)
    farm.seed(bucket, ((n, b"s" * 256, None) for n in names), updated=updated)  # as it was
    return per_delete


def gcloud_rm(proxy_url: str, bucket: str, names: list[str], workdir: Path) -> dict:
    """`gcloud storage rm -I` with `names` on stdin, against the proxy; wall and peak RSS."""
    import shutil

    gcloud = shutil.which("gcloud")
    if gcloud is None:
        raise FileNotFoundError("gcloud is not installed")
    config = workdir / "gcloud-config"
    config.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "CLOUDSDK_CONFIG": str(config),
        "CLOUDSDK_AUTH_DISABLE_CREDENTIALS": "true",
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE": f"{proxy_url}/storage/v1/",
        "CLOUDSDK_CORE_PROJECT": "bench",
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
    }
    stdin = "".join(f"gs://{bucket}/{name}\n" for name in names)
    script = (
        "import json, resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], input=sys.stdin.read(), text=True, capture_output=True)\n"
        "wall = time.perf_counter() - t\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "print(json.dumps({'wall': wall, 'rc': p.returncode, 'peak_rss_mib': rss, 'errors': p.stderr.count('ERROR'), 'tail': p.stderr[-500:]}))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script, gcloud, "storage", "rm", "-I"],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def prune_in_child(
    storage_url: str,
    bucket: str,
    state_bucket: str,
    workers: int,
    verify: bool,
    *,
    profiled: bool = False,
    trust_env: bool = False,
) -> dict:
    env = {
        **os.environ,
        "BENCH_PROFILE": "1" if profiled else "",
        "BENCH_TRUST_ENV": "1" if trust_env else "",
        "STORAGE_EMULATOR_HOST": storage_url,
        "SPOTJOBS_CHECKPOINT_BUCKET": bucket,
        "SPOTJOBS_STATE_BUCKET": state_bucket,
        "SPOTJOBS_PRUNE_WORKERS": str(workers),
        "SPOTJOBS_LOG_LEVEL": "ERROR",
    }
    completed = subprocess.run(
        [sys.executable, "-m", "bench.bench_prune", "--child", "--verify" if verify else "--no-verify"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def child(verify: bool) -> None:
    """One full prune, as the function runs it; prints its figures as JSON."""
    from shared.adapters.clients import storage_client
    from shared.pruning import execute
    from shared.pruning.runner import run_prune
    from shared.settings import get_settings

    client = storage_client()
    if os.environ.get("BENCH_TRUST_ENV"):  # as before shared/adapters/clients.py: read_environment_once
        client._http.trust_env = True  # noqa: SLF001
    parts = None
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    if os.environ.get("BENCH_PROFILE"):
        from bench.profile import profile

        def serial(first, workers):  # every task on this thread, so the profiler sees it all
            backlog = list(first)
            while backlog:
                backlog.extend(backlog.pop(0)())

        execute.run_tasks = serial
        holder = {}
        parts, _ = profile(lambda: holder.update(result=run_prune(client, get_settings(), verify_generation=verify)))
        result = holder["result"]
    else:
        result = run_prune(client, get_settings(), verify_generation=verify)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    peak = peak_rss_mib()
    print(json.dumps({"wall": wall, "cpu": cpu, "peak_rss_mib": peak, "summary": result.summary, "parts": parts}))


def list_calls_for(farm, proxy, size: Size, updated) -> int:
    bucket = f"calls-{size.label()}"
    seed(farm, bucket, bucket + "-state", size, updated)
    return prune_in_child(proxy.url, bucket, bucket + "-state", 8, verify=False)["summary"]["calls"]["list"]


PROFILE_REQUESTS = 20


def profile_figures(farm, proxy, size: Size, updated) -> list[Figure]:
    """Where a prune's CPU goes (bench/profile.py), per object deleted, before and after the
    storage session stops re-reading the environment on every call, on four identical fresh
    buckets: one profiled run each (tasks run serially on one thread, so the profiler sees them
    all), and one plain run each (32 workers) for the CPU without the profiler. No added latency:
    it changes waiting, not CPU."""
    from bench.profile import describe

    latency, proxy.latency_seconds = proxy.latency_seconds, 0.0
    runs = {}
    try:
        for name, trust_env in (("before", True), ("after", False)):
            for profiled in (True, False):
                bucket = f"prof-{name}-{'p' if profiled else 'c'}"
                seed(farm, bucket, bucket + "-state", size, updated)
                runs[name, profiled] = prune_in_child(
                    proxy.url, bucket, bucket + "-state", 32, verify=False, profiled=profiled, trust_env=trust_env
                )
    finally:
        proxy.latency_seconds = latency
    deleted = runs["after", True]["summary"]["objects_deleted"]
    per = {key: 1000 * run["cpu"] / run["summary"]["objects_deleted"] for key, run in runs.items()}
    label = f"prune ({size.label()}, per object deleted)"
    client = {name: 1000 * runs[name, True]["parts"].get("Google client", 0) / deleted for name in ("before", "after")}
    return [
        Figure(f"{label}: CPU, profiled, before", describe(Counter(runs["before", True]["parts"]), deleted)),
        Figure(
            f"{label}: CPU, profiled, after (storage session reads the environment once)",
            describe(Counter(runs["after", True]["parts"]), deleted),
        ),
        Figure(
            f"{label}: Google client CPU (profiled), before -> after",
            f"{client['before']:.2f} -> {client['after']:.2f}",
            "ms",
        ),
        Figure(
            f"{label}: process CPU without the profiler (32 workers), before -> after",
            f"{per['before', False]:.2f} -> {per['after', False]:.2f}",
            "ms",
        ),
    ]


def measure_size(farm, proxy, size: Size, args: argparse.Namespace, workdir: Path) -> list[Figure]:
    from datetime import datetime, timedelta

    label = size.label()
    updated = datetime.now(UTC) - timedelta(days=1)
    buckets = {"spotjobs": f"ckpt-spotjobs-{label}", "gcloud": f"ckpt-gcloud-{label}"}
    state = f"state-{label}"
    seconds = seed(farm, buckets["spotjobs"], state, size, updated)
    if not args.no_gcloud:
        seconds += seed(farm, buckets["gcloud"], None, size, updated)
    print(f"[{label}] seeded {size.objects:,} objects per bucket in {seconds:.0f} s", flush=True)

    per_delete = serial_baseline(proxy.url, farm, buckets["spotjobs"], size, args.serial_sample, updated)
    proxy.reset_calls()
    run = prune_in_child(proxy.url, buckets["spotjobs"], state, args.workers, verify=False)
    proxy_calls = dict(proxy.reset_calls())
    summary = run["summary"]
    deleted = summary["objects_deleted"]
    expected_names = [n for r in range(size.requests) for n in size.deletable(r)]
    expected = len(expected_names)
    rate = deleted / run["wall"]
    serial_rate = 1 / per_delete
    speedup = rate / serial_rate
    lists = summary["calls"]["list"]
    calls = sum(summary["calls"].values()) + size.requests  # + one ledger read per request
    print(f"[{label}] spotjobs prune: {run['wall']:.1f} s, proxy saw {proxy_calls}", flush=True)
    figures = [
        Figure(
            f"[{label}] objects deleted (expected {expected:,})", deleted, "", f"== {expected}", deleted == expected
        ),
        Figure(
            f"[{label}] spotjobs prune wall (selection included), +{args.latency_ms:g} ms per call",
            round(run["wall"], 1),
            "s",
        ),
        Figure(f"[{label}] spotjobs prune throughput", round(rate, 1), "objects/s"),
        Figure(
            f"[{label}] serial baseline (sample of {args.serial_sample}, extrapolated to {deleted:,})",
            round(deleted * per_delete, 1),
            "s",
        ),
        Figure(f"[{label}] serial baseline throughput", round(serial_rate, 1), "objects/s"),
        Figure(
            f"[{label}] spotjobs vs serial",
            round(speedup, 2),
            "x",
            f">= {THROUGHPUT_TARGET}",
            speedup >= THROUGHPUT_TARGET,
        ),
        Figure(
            f"[{label}] spotjobs prune peak RSS",
            round(run["peak_rss_mib"], 1),
            "MiB",
            f"<= {RSS_TARGET_MIB:.0f}",
            run["peak_rss_mib"] <= RSS_TARGET_MIB,
        ),
        Figure(f"[{label}] list calls (per request)", f"{lists:,} ({lists / size.requests:.1f})"),
        Figure(f"[{label}] calls made by the prune", json.dumps(summary["calls"])),
        Figure(f"[{label}] prune client CPU per call", round(1000 * run["cpu"] / calls, 3), "ms"),
    ]
    if not args.no_gcloud:
        given = expected_names[: args.gcloud_sample] if args.gcloud_sample else expected_names
        proxy.reset_calls()
        gcloud = gcloud_rm(proxy.url, buckets["gcloud"], given, workdir)
        gcloud_calls = dict(proxy.reset_calls())
        print(f"[{label}] gcloud storage rm: {gcloud}, proxy saw {gcloud_calls}", flush=True)
        gcloud_rate = gcloud_calls.get("delete", 0) / gcloud["wall"]
        versus = rate / gcloud_rate if gcloud_rate else float("inf")
        extrapolated = "" if len(given) == expected else f", extrapolated from the first {len(given):,}"
        figures += [
            Figure(
                f"[{label}] gcloud storage rm -I wall (the same {expected:,} objects{extrapolated}; "
                f"exit {gcloud['rc']})",
                round(gcloud["wall"] * expected / len(given), 1),
                "s",
            ),
            Figure(f"[{label}] gcloud storage rm throughput", round(gcloud_rate, 1), "objects/s"),
            Figure(f"[{label}] gcloud storage rm calls", json.dumps(gcloud_calls, sort_keys=True)),
            Figure(f"[{label}] gcloud storage rm peak RSS (largest process)", round(gcloud["peak_rss_mib"], 1), "MiB"),
            Figure(
                f"[{label}] spotjobs vs gcloud storage rm",
                round(versus, 2),
                "x",
                f">= {GCLOUD_TARGET}",
                versus >= GCLOUD_TARGET,
            ),
        ]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--verify", dest="verify", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-verify", dest="verify", action="store_false", help=argparse.SUPPRESS)
    parser.add_argument("--requests", type=int, nargs="+", default=[1000], help="one run per size")
    parser.add_argument("--checkpoints", type=int, default=10)
    parser.add_argument("--shards", type=int, default=10, help="objects per checkpoint, marker included")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=None, help="default: settings.prune_workers")
    parser.add_argument("--serial-sample", type=int, default=300)
    parser.add_argument("--no-gcloud", action="store_true", help="skip gcloud storage rm")
    parser.add_argument(
        "--gcloud-sample", type=int, default=4000, help="objects given to gcloud (its rate is steady; 0 = all of them)"
    )
    parser.add_argument("--per-partition", type=int, default=1000, help="objects per farm partition")
    parser.add_argument("--cold-start-runs", type=int, default=3)
    args = parser.parse_args()
    if args.child:
        child(args.verify)
        return

    from datetime import datetime, timedelta

    from bench.coldstart import import_seconds
    from bench.gcs_farm import GcsFarm
    from shared.settings import Settings

    args.workers = args.workers or Settings().prune_workers
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as workdir:
        farm = GcsFarm(Path(workdir), servers=2, per_partition=args.per_partition).start()
        proxy = farm.proxy(args.latency_ms / 1000)
        try:
            for requests in args.requests:
                size = Size(requests, args.checkpoints, args.shards)
                figures += measure_size(farm, proxy, size, args, Path(workdir))
            updated = datetime.now(UTC) - timedelta(days=1)
            few, many = (list_calls_for(farm, proxy, Size(5, args.checkpoints, s), updated) for s in (3, 30))
            figures += profile_figures(farm, proxy, Size(PROFILE_REQUESTS, args.checkpoints, args.shards), updated)
            figures.append(
                Figure(
                    f"list calls, 5 requests x {args.checkpoints} checkpoints, 3 vs 30 objects each",
                    f"{few} vs {many}",
                    "",
                    "equal",
                    few == many,
                )
            )
        finally:
            proxy.stop()
            farm.stop()

    sdk = import_seconds(SDK, args.cold_start_runs)
    prune = import_seconds("functions.prune", args.cold_start_runs)
    figures += [
        Figure(f"import {SDK} (yardstick)", round(sdk, 3), "s"),
        Figure("prune_checkpoints cold start (import functions.prune)", round(prune, 3), "s"),
        Figure(
            "prune_checkpoints cold start / SDK import",
            round(prune / sdk, 3),
            "",
            f"<= {COLD_START_CEILING}",
            prune / sdk <= COLD_START_CEILING,
        ),
    ]
    emit(BENCH, figures)


if __name__ == "__main__":
    main()
