"""`make bench`: run every benchmark, print one Markdown table, and save it to
bench/results/latest.md (with the date and machine) for the README's performance section."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from bench.report import markdown_table, parse_results

BENCH_DIR = Path(__file__).resolve().parent
# Module and the arguments of the run the README reports.
BENCHMARKS = (
    ("bench.coldstart", []),
    ("bench.bench_submit", []),
    ("bench.bench_events", []),
    ("bench.bench_prune", []),
    ("bench.bench_load", []),
    ("bench.bench_triggers", []),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="run only these modules")
    args = parser.parse_args()
    results, failed = [], []
    for module, extra in BENCHMARKS:
        if args.only and module not in args.only:
            continue
        print(f"== {module}", flush=True)
        completed = subprocess.run([sys.executable, "-m", module, *extra], cwd=BENCH_DIR.parent,
                                   stdout=subprocess.PIPE, text=True)
        sys.stdout.write(completed.stdout)
        results.extend(parse_results(completed.stdout))
        if completed.returncode != 0:
            failed.append(module)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    machine = f"{os.cpu_count()} vCPU, {platform.machine()}, Python {platform.python_version()}"
    table = f"Measured {stamp} on {machine}.\n\n{markdown_table(results)}\n"
    if failed:
        table += f"\nBenchmarks that did not finish: {', '.join(failed)}\n"
    out = BENCH_DIR / "results" / "latest.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(table)
    print("\n" + table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
