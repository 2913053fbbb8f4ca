"""The fleet's mean Spot lifetime counts only what the VMs ran (the multi-node review of 2026-12-07):
a wait for a machine that a restart the fleet saw ended is no time on Spot, for every VM of the
job; a wait no restart answered stays counted (the fleet cannot tell it from a run whose restarts
it never saw); a summary written before the split keeps the old rule. And an attempt whose end
was never written stops counting at the longest a job can run (its `scheduling.timeout`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.fleet import store
from shared.fleet.estimate import estimate, summarize
from shared.fleet.observations import AttemptSummary, FleetFact, Kind, MachineClass
from shared.fleet.placing import Placer, attempt_placer
from shared.settings import Settings

T0 = datetime(2026, 12, 1, 0, tzinfo=UTC)
LOC = "us-east4"
HOUR = 3600.0
CLASS = MachineClass("a3-highgpu-8g", "NVIDIA_H100_80GB", 8)


def fact(
    kind: Kind, hours: float, seconds: float = 0.0, index: int = 0, replicas: int = 1, count: int = 0
) -> FleetFact:
    return FleetFact(kind, LOC, T0 + timedelta(hours=hours), seconds, count, "k", index, replicas=replicas)


def up_down_up(replicas: int) -> list[FleetFact]:
    """A job of `replicas` VMs up 1 h, one VM reclaimed, 4 h down (Vertex restarting it), up 1 h,
    one VM reclaimed, ended there."""
    return [
        fact(Kind.WAIT, 0, replicas=replicas),
        fact(Kind.PREEMPT, 1, index=0),
        fact(Kind.RESTART, 5, index=1),
        fact(Kind.PREEMPT, 6, index=1),
        fact(Kind.RUN, 6, seconds=6 * HOUR, count=2, replicas=replicas),
    ]


def lifetime_hours(facts: list[FleetFact], now: datetime) -> float:
    lifetime = estimate(facts, LOC, now).mean_lifetime_seconds
    assert lifetime is not None
    return lifetime / HOUR


def test_a_wait_a_restart_ended_is_no_time_on_spot() -> None:
    # 2 h ran over 2 reclaims; the wait after the second (to the run's end) is none.
    assert lifetime_hours(up_down_up(1), T0 + timedelta(hours=7)) == 1.0


def test_a_wait_a_restart_ended_is_no_time_on_spot_for_any_vm_of_the_job() -> None:
    # Two VMs ran 2 h each, two of them reclaimed: 2 h a VM (the review's probe read 6 h).
    assert lifetime_hours(up_down_up(2), T0 + timedelta(hours=7)) == 2.0


def test_a_compacted_attempt_keeps_the_waits_a_restart_ended_apart() -> None:
    facts = up_down_up(2)
    now = T0 + timedelta(days=2)
    summary = FleetFact(Kind.ATTEMPT, LOC, T0 + timedelta(hours=6), attempt_key="k", summary=summarize(facts, now))
    assert lifetime_hours([summary], now) == lifetime_hours(facts, now) == 2.0
    name = store.object_name(CLASS, summary)
    parsed = store.parse_name(name)
    assert parsed is not None and parsed[1] == summary


def test_a_summary_written_before_the_split_keeps_the_old_rule() -> None:
    # An older name: no field for the waits a restart ended, so its whole time on Spot ran.
    old = f"fleet/{CLASS.key}/{LOC}/attempt~{int(T0.timestamp())}~k~21600~0~2~14400~0~-~2"
    parsed = store.parse_name(old)
    assert parsed is not None
    summary = parsed[1]
    assert summary.summary == AttemptSummary(exposure=21600, preemptions=2, restart_waits=14400, wait=0, replicas=2)
    assert lifetime_hours([summary], T0 + timedelta(days=2)) == 6.0


def test_a_wait_no_restart_answered_stays_on_spot() -> None:
    # A trainer without the kit: the fleet never sees its restarts, so the time after a reclaim
    # may be a run (seed 7's would have read seconds a VM): it is counted as before.
    facts = [
        fact(Kind.WAIT, 0),
        fact(Kind.PREEMPT, 1, index=0),
        fact(Kind.RUN, 6, seconds=6 * HOUR, count=1),
    ]
    assert lifetime_hours(facts, T0 + timedelta(hours=7)) == 6.0


def test_an_attempt_whose_end_was_never_written_stops_at_the_longest_job() -> None:
    # Started, reclaimed at 1 h, and its `run` fact lost: a job runs at most its timeout.
    facts = [fact(Kind.WAIT, 0), fact(Kind.PREEMPT, 1, index=0)]
    longest = 24 * HOUR
    later = estimate(facts, LOC, T0 + timedelta(days=5), longest_job_seconds=longest)
    at_bound = estimate(facts, LOC, T0 + timedelta(seconds=longest), longest_job_seconds=longest)
    assert later.mean_lifetime_seconds == at_bound.mean_lifetime_seconds == longest
    assert later.share_available == at_bound.share_available
    # Its preemption's "no capacity now" is an old fact's by then, not the present's.
    assert later.sure < 0.01


def test_placement_bounds_an_attempt_never_closed_by_the_deployments_longest_timeout() -> None:
    h100 = {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8}
    request = {"custom_job": {"jobSpec": {"workerPoolSpecs": [{"machineSpec": h100, "replicaCount": 1}]}}}
    started = [fact(Kind.WAIT, 0)]  # its `run` fact lost
    now = T0 + timedelta(days=3)

    def placer(longest_job_seconds: float) -> Placer:
        return Placer(
            lambda machine_class: started, lambda *_: None, now, 1200, "", longest_job_seconds=longest_job_seconds
        )

    assert placer(7 * 86400).has_capacity(request, LOC) is True  # running now, as far as the fleet knows
    assert placer(86400).has_capacity(request, LOC) is None  # ended two days ago: nothing known now

    class Ports:
        def __init__(self, settings: Settings) -> None:
            self.settings, self.ledger = settings, None

        def clock(self) -> datetime:
            return now

    day = Settings.from_env({"SPOTJOBS_MAX_TIMEOUT_SECONDS": "86400"})
    assert attempt_placer(Ports(day))._longest_job_seconds == 86400  # noqa: SLF001
