"""The event model of the deadline benchmark (bench/deadline_events.py): it asks production's input
builder about a record kept as the ledger keeps it, and its bisection asks what asking every
moment would."""

from __future__ import annotations

import pytest

import bench.bench_deadline as bench
import bench.deadline_events as events
import shared.deciding.deadline_watch as deadline_watch
from bench.deadline_sim import Trace
from shared.deciding.deadline import Placement, Rule

GAP = 600
HOURS = 3600


def trace_of(bits: str) -> Trace:
    return Trace.of("synthetic", GAP, [int(b) for b in bits])


# Spot for 3 h, none for 2 h, then Spot for 10 min in every hour: preemptions, waits and switches.
FLAKY = trace_of("1" * 18 + "0" * 12 + "100000" * 100)


def job(checkpoint: int, fraction: float = 0.8, work_hours: int = 6) -> events.EventJob:
    work = work_hours * HOURS
    return events.EventJob(work, round(work / fraction / GAP) * GAP, checkpoint, 2.84)


def test_the_event_model_asks_the_production_input_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    assert events.deadline_situation is deadline_watch.deadline_situation
    seen: list[tuple[Placement, int]] = []

    def counted(record, now, **kwargs):
        situation = deadline_watch.deadline_situation(record, now, **kwargs)
        seen.append((situation.placement, situation.work.committed_steps))
        return situation

    monkeypatch.setattr(events, "deadline_situation", counted)
    outcome = events.simulate_events(job(1800), FLAKY, 0, Rule.SPOTJOBS, "seed")
    # Every decision came from a record: committed steps only, and every placement on the way.
    assert {p for p, _ in seen} == set(Placement)
    assert {c for _, c in seen} <= {1800 * i for i in range(13)}
    assert outcome.switches > 0 and outcome.spot_work_hours > 0 and outcome.on_demand_work_hours > 0
    assert outcome.spot_work_hours + outcome.on_demand_work_hours == pytest.approx(6)


@pytest.mark.parametrize("rule", [Rule.GREEDY, Rule.SPOTJOBS])
@pytest.mark.parametrize("checkpoint", [600, 3600])
def test_bisecting_a_stretch_gives_what_asking_at_every_line_and_pass_gives(rule: Rule, checkpoint: int) -> None:
    for seed in ("a", "b"):
        quick = events.simulate_events(job(checkpoint, 0.7), FLAKY, 0, rule, seed)
        assert quick == events.simulate_events(job(checkpoint, 0.7), FLAKY, 0, rule, seed, exhaustive=True)


def test_the_event_cell_has_the_tick_cells_shape() -> None:
    cell = bench.run_event_cells([FLAKY], [0.8], [1800], 0.1, False, 2, 2.84)[0]
    tick = bench.run_cells([FLAKY], [0.8], [0.2], 2, 2.84)[0]
    assert set(tick) <= set(cell) and set(cell["policies"]) == set(bench.EVENT_RULES)
    assert set(cell["policies"]["spotjobs"]) == set(tick["policies"]["spotjobs"])
    assert (cell["model"], cell["checkpoint_seconds"], cell["changeover_tail"]) == ("event", 1800, False)
