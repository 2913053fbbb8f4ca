"""The placement bench's trace of one run (bench/placement_trace.py): a line at every change of
where a request is, with its slack beyond the net, and the simulator's per-tick watch it reads."""

from __future__ import annotations

import pytest

from bench import placement_trace
from bench.bench_placement import Region, Setup, Spotjobs, simulate_fleet


def preempted_setup() -> Setup:
    """Spot in "cheap" for 10 ticks, then an outage of 20; "dear" always has capacity."""
    cheap = Region("cheap", 10.0, 80.0, (True,) * 10 + (False,) * 20 + (True,) * 70)
    dear = Region("dear", 30.0, 90.0, (True,) * 100)
    return Setup((cheap, dear), gap=600, work_ticks=40, deadline_ticks=60, changeover_ticks=2, checkpoint_gb=0.0)


def test_the_simulator_shows_every_live_job_to_its_watch_once_a_tick() -> None:
    setup = preempted_setup()
    seen: list[tuple[str, int]] = []
    jobs = simulate_fleet(setup, [0, 5], Spotjobs, watch=lambda job, tick: seen.append((job.key, tick)))
    for job in jobs:
        ticks = [tick for key, tick in seen if key == job.key]
        assert ticks == list(range(len(ticks))) and 0 < len(ticks) <= setup.deadline_ticks
        assert job.done >= setup.work_ticks  # the watch is shown the job until it is done


def test_a_trace_has_a_line_per_change_with_the_slack_beyond_the_net() -> None:
    setup = preempted_setup()
    lines = placement_trace.trace(setup, [0])
    assert lines[0] == "r0 starting 0.00 h into the traces:"
    changes = lines[1:-1]
    assert changes[0].split()[:4] == ["0.00", "h", "on", "Spot"] and "cheap" in changes[0]
    # the preemption at 10 ticks (1.67 h) is a change, with the capacity the trace had then, and
    # so is the move that follows it (a new attempt), once production's check (`spares_a_move`)
    # lets it: a changeover later than the bench moved before that check
    assert [line.split()[0] for line in changes] == ["0.00", "1.67", "2.33"]
    assert "waiting for Spot cheap" in changes[1] and changes[1].endswith("capacity: dear")
    assert "on Spot          dear               attempt 2" in changes[2]
    # slack 20 ticks = 10 changeovers, less the net (2d + m: 2.5 changeovers) and the first changeover
    assert "beyond the net   6.5" in changes[0]
    assert lines[-1].startswith("  cost $") and "in time; the optimum $" in lines[-1]


def test_a_run_out_of_range_is_refused() -> None:
    with pytest.raises(SystemExit):
        placement_trace.main(["--setup", "skynomad", "--run", "6"])
