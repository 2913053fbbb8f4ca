"""How a benchmark reports: human lines as it goes, then one `BENCH_RESULT {json}` line that
`python -m bench` gathers into the Markdown table of docs/performance.md."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Figure:
    name: str
    value: float | int | str
    unit: str = ""
    target: str = ""  # e.g. "<= 0.55"; empty when the figure is reported, not judged
    ok: bool | None = None


def emit(bench: str, figures: list[Figure]) -> None:
    for figure in figures:
        verdict = "" if figure.ok is None else ("  [met]" if figure.ok else "  [MISSED]")
        target = f"  (target {figure.target})" if figure.target else ""
        print(f"{bench}: {figure.name} = {_fmt(figure.value)} {figure.unit}{target}{verdict}")
    print("BENCH_RESULT " + json.dumps({"bench": bench, "figures": [asdict(f) for f in figures]}), flush=True)


def _fmt(value: float | int | str) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def parse_results(output: str) -> list[dict]:
    return [
        json.loads(line[len("BENCH_RESULT ") :]) for line in output.splitlines() if line.startswith("BENCH_RESULT ")
    ]


def markdown_table(results: list[dict]) -> str:
    rows = ["| benchmark | figure | value | target | met |", "|---|---|---|---|---|"]
    for result in results:
        for f in result["figures"]:
            met = "" if f["ok"] is None else ("yes" if f["ok"] else "**no**")
            rows.append(f"| {result['bench']} | {f['name']} | {_fmt(f['value'])} {f['unit']} | {f['target']} | {met} |")
    return "\n".join(rows)


def peak_rss_mib() -> float:
    """This process's own peak RSS (VmHWM). Not getrusage's ru_maxrss: Linux carries that across
    fork and exec, so a child of a big parent would report the parent's footprint."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
