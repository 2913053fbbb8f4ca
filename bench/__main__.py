"""`make bench`: run every benchmark, print one Markdown table, save it to
bench/results/latest.md (with the date and machine) and, when every benchmark ran, put it in
docs/performance.md (between its `bench:begin` / `bench:end` markers); after `--only`, replace the
rows of the benchmarks that ran there."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench.report import markdown_table, parse_results

BENCH_DIR = Path(__file__).resolve().parent
# The page that shows the latest run.
PERFORMANCE_PAGE = BENCH_DIR.parent / "docs" / "performance.md"
# Module and the arguments of the run the performance page reports.
BENCHMARKS = (
    ("bench.coldstart", []),
    ("bench.bench_submit", []),
    ("bench.bench_events", []),
    ("bench.bench_prune", []),
    ("bench.bench_reconcile", []),
    ("bench.bench_load", []),
    ("bench.bench_burst", []),
    ("bench.bench_burst", ["--requests", "120"]),  # the stack acceptance test's burst, timed
    ("bench.bench_reconcile_vertex", []),
    ("bench.bench_triggers", []),
    ("bench.bench_deadline", []),
    ("bench.bench_status", []),
    ("bench.bench_dashboard", []),
    ("bench.bench_sim", []),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="run only these modules")
    args = parser.parse_args()
    results, failed = [], []
    load_before = os.getloadavg()[0]
    for module, extra in BENCHMARKS:
        if args.only and module not in args.only:
            continue
        print(f"== {module}", flush=True)
        completed = subprocess.run(
            [sys.executable, "-m", module, *extra], cwd=BENCH_DIR.parent, stdout=subprocess.PIPE, text=True
        )
        sys.stdout.write(completed.stdout)
        results.extend(parse_results(completed.stdout))
        if completed.returncode != 0:
            failed.append(module)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    machine = (
        f"{os.cpu_count()} vCPU, {platform.machine()}, Python {platform.python_version()}, "
        f"load average {load_before:.1f} at the start and {os.getloadavg()[0]:.1f} at the end "
        "(the machine is shared)"
    )
    table = f"Measured {stamp} on {machine}.\n\n{markdown_table(results)}\n"
    if failed:
        table += f"\nBenchmarks that did not finish: {', '.join(failed)}\n"
    out = BENCH_DIR / "results" / "latest.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(table)
    if not args.only:
        update_table(PERFORMANCE_PAGE, table)
    elif not failed:
        update_rows(PERFORMANCE_PAGE, results, stamp)
    print("\n" + table)
    return 1 if failed else 0


BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def update_table(page: Path, table: str) -> None:
    text = page.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        page.write_text(f"{head}{BEGIN}\n{table}{END}{rest.split(END, 1)[1]}")


def update_rows(page: Path, results: list[dict], stamp: str) -> None:
    """After `--only`: replace the rows of the benchmarks that ran, keep the others."""
    text = page.read_text()
    if BEGIN not in text or END not in text:
        return
    head, rest = text.split(BEGIN, 1)
    body, tail = rest.split(END, 1)
    ran = {r["bench"] for r in results}
    new_rows = markdown_table(results).splitlines()[2:]
    lines, inserted = [], False
    for line in body.splitlines():
        cells = line.split("|")
        if len(cells) > 2 and cells[1].strip() in ran:
            if not inserted:
                lines.extend(new_rows)
                inserted = True
            continue
        lines.append(line)
    if not inserted:  # a benchmark new to the table: after its last row
        last_row = max((i for i, line in enumerate(lines) if line.startswith("|")), default=len(lines) - 1)
        lines[last_row + 1 : last_row + 1] = new_rows
    note = f"Rerun alone on {stamp}: {', '.join(sorted(ran))}."
    lines = [line for line in lines if not line.startswith("Rerun alone on ")]
    stamp_at = next((i for i, line in enumerate(lines) if line.startswith("Measured ")), None)
    if stamp_at is not None:
        lines.insert(stamp_at + 1, note)
    page.write_text(f"{head}{BEGIN}" + "\n".join(lines) + f"\n{END}{tail}")


if __name__ == "__main__":
    sys.exit(main())
