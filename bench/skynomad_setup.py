"""SkyNomad's deadline sweep, rebuilt in the placement bench's event model (`--setup skynomad`).

Parameters from SkyNomad's public artifact (github.com/andylizf/skynomad-artifact, Apache-2.0),
its deadline-sensitivity experiment:

- `scripts_multi/benchmark_components/configs/deadline_sensitivity.py`: the "Global Diverse (6)"
  scenario, `DEFAULT_CHECKPOINT_SIZE` 50 GB and `DEFAULT_RESTART_OVERHEAD` 0.2 h
  (`scenario_config.py`), ratios 1.0 to 3.0;
- `research/data/deadline_sensitivity.csv`, its raw rows: the six zones below (unmerged: each zone
  is a location), a fixed deadline of 51.83 h (311 ticks of 10 min) and the job's work = deadline /
  ratio (49.37 h at 1.05, 25.92 h at 2.0), one job per window, six windows starting at 0, 51.83,
  ..., 259.17 h into the traces;
- `paper_figs/values/deadline_sensitivity.values.csv`: the published mean cost per ratio over the
  six windows (`PUBLISHED`).

The traces are the same as the bench's (`bench/traces/gcp-h100/`, converted from that artifact).
d = 0.2 h is kept exact by cutting each 10-minute tick into five 2-minute ticks (0.2 h = 6 ticks);
the bench otherwise bills and decides per tick as in the shared setup, and egress is priced by
`shared.fleet.transfer.per_gb` (the optimum pays none, so it is a lower bound by at most that).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from bench.bench_placement import Region, Setup

ZONES = (
    "us-central1-a",
    "us-west1-a",
    "europe-west1-c",
    "europe-west3-c",
    "asia-southeast1-b",
    "asia-south2-b",
)
TRACE_TICK_SECONDS = 600
DEADLINE_TRACE_TICKS = 311  # 51.83 h: the artifact's `deadline_hours`
WINDOWS = 6
CHANGEOVER_SECONDS = 720  # 0.2 h, exact
TICK_SECONDS = 120  # divides both the trace's tick and d
CHECKPOINT_GB = 50.0

# paper_figs/values/deadline_sensitivity.values.csv: mean cost in dollars over the six windows,
# (Optimal, SkyNomad) per deadline ratio.
PUBLISHED: dict[float, tuple[float, float]] = {
    1.05: (840.149903, 881.649178),
    1.1: (792.837148, 837.157063),
    1.2: (720.676963, 766.157968),
    1.5: (571.381698, 606.376237),
    2.0: (426.173004, 443.517672),
}


def refine(regions: Sequence[Region], gap: int, tick: int) -> list[Region]:
    """The same traces on a finer tick: each point repeated gap / tick times."""
    if gap % tick:
        raise ValueError(f"a tick of {tick} s does not divide the traces' {gap} s")
    repeat = gap // tick
    return [replace(r, available=tuple(a for a in r.available for _ in range(repeat))) for r in regions]


def setup(regions: Sequence[Region], gap: int, ratio: float) -> tuple[Setup, list[list[int]]]:
    """SkyNomad's setup at one ratio, on `regions` loaded at the traces' own tick `gap`: the
    setup on the 2-minute tick, and its six windows (one job each)."""
    if gap != TRACE_TICK_SECONDS:
        raise ValueError(f"SkyNomad's windows are counted in ticks of {TRACE_TICK_SECONDS} s, not {gap} s")
    fine = refine(regions, gap, TICK_SECONDS)
    deadline_ticks = DEADLINE_TRACE_TICKS * gap // TICK_SECONDS
    built = Setup(
        regions=tuple(fine),
        gap=TICK_SECONDS,
        work_ticks=round(deadline_ticks / ratio),
        deadline_ticks=deadline_ticks,
        changeover_ticks=CHANGEOVER_SECONDS // TICK_SECONDS,
        checkpoint_gb=CHECKPOINT_GB,
    )
    return built, [[window * deadline_ticks] for window in range(WINDOWS)]
