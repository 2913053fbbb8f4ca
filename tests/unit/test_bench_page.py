"""`python -m bench` writes its table into docs/performance.md: the whole table after a full run,
and after `--only` the rows of the benchmarks that ran, in place, the others kept."""

from __future__ import annotations

from pathlib import Path

import bench.__main__ as bench_main
from bench.report import Figure

PAGE = """# Performance

<!-- bench:begin -->
Measured 2026-11-30 on 2 vCPU.

| benchmark | figure | value | target | met |
|---|---|---|---|---|
| coldstart | submit_job cold start | 0.364 s |  |  |
| submit | cold start | 0.131 s |  |  |
| submit | create latency p50 | 9 s |  |  |
<!-- bench:end -->

How to read it.
"""


def result(bench: str, *figures: Figure) -> dict:
    return {"bench": bench, "figures": [vars(f) for f in figures]}


def table_rows(page: Path) -> list[str]:
    return [line for line in page.read_text().splitlines() if line.startswith("| ") and "benchmark" not in line]


def test_the_page_of_record_is_docs_performance() -> None:
    page = bench_main.PERFORMANCE_PAGE
    assert page == Path(__file__).resolve().parents[2] / "docs" / "performance.md"
    text = page.read_text()
    assert bench_main.BEGIN in text and bench_main.END in text


def test_rows_of_a_benchmark_that_reran_replace_its_old_rows_in_place(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    page.write_text(PAGE)
    bench_main.update_rows(page, [result("coldstart", Figure("submit_job cold start", 0.3, "s"))], "2026-12-02")
    assert table_rows(page) == [
        "| coldstart | submit_job cold start | 0.3 s |  |  |",
        "| submit | cold start | 0.131 s |  |  |",
        "| submit | create latency p50 | 9 s |  |  |",
    ]
    assert "Measured 2026-11-30 on 2 vCPU.\nRerun alone on 2026-12-02: coldstart.\n" in page.read_text()
    assert page.read_text().endswith("<!-- bench:end -->\n\nHow to read it.\n")


def test_rows_of_a_benchmark_new_to_the_table_go_after_its_last_row(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    page.write_text(PAGE)
    bench_main.update_rows(page, [result("status", Figure("wall", 1.5, "s"), Figure("calls", 3))], "2026-12-02")
    assert table_rows(page) == [
        "| coldstart | submit_job cold start | 0.364 s |  |  |",
        "| submit | cold start | 0.131 s |  |  |",
        "| submit | create latency p50 | 9 s |  |  |",
        "| status | wall | 1.5 s |  |  |",
        "| status | calls | 3  |  |  |",
    ]


def test_a_full_run_replaces_everything_between_the_markers(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    page.write_text(PAGE)
    bench_main.update_table(page, "Measured 2026-12-02.\n\n| benchmark | figure | value | target | met |\n")
    assert page.read_text() == (
        "# Performance\n\n<!-- bench:begin -->\nMeasured 2026-12-02.\n\n"
        "| benchmark | figure | value | target | met |\n<!-- bench:end -->\n\nHow to read it.\n"
    )
