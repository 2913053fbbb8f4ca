"""The Pacer and the drainer (shared/pacing.py, shared/pacing_drainer.py) on the simulator's in-memory Cloud Storage with a
clock of the test's: the slots, the drainer lease (taken, held, renewed, released, taken over once
it runs out), the burst and its one alert, and the drain loop (one create per slot, in turn, a busy
head waited for a while, a head in doubt passed at once, a run that ends at its deadline and never
raises). tests/functional/test_pacing.py drives the same through submit_request on fake-gcs-server
in real time; here every instant is the test's."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.alerts import Alert, AlertKind
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.pacing import Pacer, Waiting, hold_for_quota, priority_of, waiting_entry
from shared.pacing_drainer import (
    BUSY,
    IN_DOUBT,
    QUOTA,
    RENEW_EVERY_SECONDS,
    SETTLED,
    TURNED_AWAY,
    Drained,
    drain,
    hand_over,
    restart_stalled,
)
from shared.settings import Settings
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decisions import CapturedLog, FakePublisher, make_settings

LOCATION = "us-central1"
# docs/ARCHITECTURE.md: a busy head "is waited for five slots" before the drainer passes it.
PATIENCE_SLOTS = 5
START = 1_000_000.0  # a slot boundary at any pace used here


@dataclass
class Clock:
    """The wall clock of the Pacer and of Cloud Storage; sleeping moves it on."""

    now: float = START
    slept: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def utc(self) -> datetime:
        return datetime.fromtimestamp(self.now, UTC)


@dataclass
class Line:
    clock: Clock
    settings: Settings
    bucket: Any
    ledger: LedgerStore
    publisher: FakePublisher
    log: CapturedLog

    @property
    def pacer(self) -> Pacer:
        return Pacer(self.bucket, self.settings, clock=self.clock, sleep=self.clock.sleep)

    @property
    def ports(self) -> Ports:
        return Ports(self.settings, self.ledger, lambda: self.publisher, None)  # type: ignore[arg-type]

    def wait(self, request_id: str, priority: int = 0, attempt: int = 1) -> Waiting:
        """An attempt in line, with its record (its attempt claimed, no job yet)."""
        entry = waiting_entry(LOCATION, priority, request_id, attempt)
        self.pacer.enqueue(entry)
        self.clock.now += 0.001  # arrivals are apart
        record = RequestRecord(
            request_id,
            {"request_id": request_id, "custom_job": {"displayName": "train"}, "priority": priority},
            self.settings.output_dir_for(request_id),
            status=RequestStatus.SUBMITTED,
            attempts=[Attempt(attempt, LOCATION, "SPOT", claimed_at="2026-12-01T00:00:00Z")],
        )
        self.ledger.restore(record)
        return entry

    def drain(self, create_one: Callable[[Waiting], str]) -> Drained:
        return drain(self.ports, LOCATION, create_one, self.log.logger, self.pacer)

    def waiting(self) -> list[str]:
        return [entry.request_id for entry in self.pacer.waiting(LOCATION)]

    def alerts(self, kind: AlertKind) -> list[Alert]:
        return [Alert(**m.data) for m in self.publisher.on("ops-alerts") if m.data["kind"] == kind.value]

    def handed_over(self) -> list[str]:
        return [m.data["request_id"] for m in self.publisher.on("job-requests")]


def paced_line(**env: str) -> Line:
    clock = Clock()
    defaults = {
        "SPOTJOBS_VERTEX_CREATES_PER_MINUTE": "60",  # a slot a second
        "SPOTJOBS_PACER_RUN_SECONDS": "20",
        "SPOTJOBS_QUOTA_ALERT_AFTER_SECONDS": "5",  # a line of more than 5 is a burst
    }
    settings = make_settings("state", **{**defaults, **env})
    bucket = MemoryStorage(clock=clock.utc).client().bucket("state")
    return Line(clock, settings, bucket, LedgerStore(bucket), FakePublisher(), CapturedLog())


@pytest.fixture
def line() -> Line:
    return paced_line()


class Script:
    """create_one, answering from a script per request (the last answer repeats), and noting who
    was tried at which instant."""

    def __init__(self, line: Line, answers: dict[str, list[str]] | None = None) -> None:
        self.line = line
        self.answers = answers or {}
        self.tried: list[str] = []
        self.at: list[float] = []

    def __call__(self, entry: Waiting) -> str:
        self.tried.append(entry.request_id)
        self.at.append(self.line.clock.now)
        script = self.answers.get(entry.request_id, [SETTLED])
        return script.pop(0) if len(script) > 1 else script[0]


# ---- slots ------------------------------------------------------------------------------------


def test_a_slot_is_one_creates_share_of_the_minute_taken_once() -> None:
    line = paced_line(SPOTJOBS_VERTEX_CREATES_PER_MINUTE="30")
    pacer = line.pacer
    assert pacer.slot_seconds == 2.0

    assert pacer.take_slot(LOCATION)
    line.clock.now += 1.999
    assert not pacer.take_slot(LOCATION)  # still the same slot
    assert pacer.take_slot("europe-west4")  # every region has its own
    line.clock.now += 0.001
    assert pacer.take_slot(LOCATION)  # the next one


def test_a_pace_of_one_create_a_minute_is_a_slot_a_minute() -> None:
    assert paced_line(SPOTJOBS_VERTEX_CREATES_PER_MINUTE="1").pacer.slot_seconds == 60.0


def test_waiting_for_a_slot_sleeps_to_the_next_slots_start_and_gives_up_at_the_deadline(line: Line) -> None:
    pacer = line.pacer
    line.clock.now = START + 0.25
    assert pacer.take_slot(LOCATION)

    assert pacer.wait_for_slot(LOCATION, deadline=START + 10)
    assert START + 1 <= line.clock.now < START + 1.01  # woke just after the next slot began
    assert len(line.clock.slept) == 1

    line.clock.now = START + 1.5
    assert not pacer.wait_for_slot(LOCATION, deadline=START + 1.9)  # slot taken, deadline first
    assert not pacer.wait_for_slot(LOCATION, deadline=line.clock.now)  # no time at all


def test_waiting_for_a_slot_never_sleeps_past_the_deadline(line: Line) -> None:
    # A drainer's run ends at its deadline, inside submit_job's 60 s timeout: a sleep to a slot
    # that starts after it ran the delivery up to a whole slot past (sim.durations, seeds 30 and 33).
    pacer = line.pacer
    line.clock.now = START + 0.25
    assert pacer.take_slot(LOCATION)  # this slot is taken; the next starts at START + 1

    assert not pacer.wait_for_slot(LOCATION, deadline=START + 0.9)
    # Waited out its run, and no further: a run that gave up at once would hand over to a run that
    # gives up at once, with no time passing (seed 8, at one create a minute: a slot longer than a run).
    assert line.clock.now == pytest.approx(START + 0.9)


def test_a_run_counts_from_its_deliverys_start_not_from_its_lease(line: Line) -> None:
    """A delivery that spent 15 s on its own claim and entry before it took the lease has 5 s of
    its 20 s run left: a run counted from the lease ran the delivery past its function's timeout
    (sim.durations, seeds 251, 10066 and 10073: 60-63 s of a 60 s timeout)."""
    for request_id in "abcdefghij":
        line.wait(request_id)
    started = line.clock.now
    line.clock.now += 15.0
    script = Script(line)

    drain(replace(line.ports, started_at=started), LOCATION, script, line.log.logger, line.pacer)

    assert script.at and max(script.at) < started + 20.0
    assert len(script.tried) < 10  # the rest are handed over


def test_a_create_is_begun_only_while_its_timeout_fits_in_what_is_left_of_the_deliverys() -> None:
    """A drainer's create, with the calls around it (the claim, the adoption, the hand-over after
    it), is given its create timeout: one begun later than that before submit_job's function
    timeout ran the delivery past it when calls were slow (seed 12243: a create begun 34 s into a
    60 s delivery took 25 s, the hand-over 5 s more). The rest of the line is handed over."""
    line = paced_line(
        SPOTJOBS_PACER_RUN_SECONDS="40", SPOTJOBS_CREATE_TIMEOUT_SECONDS="30", SPOTJOBS_SUBMIT_TIMEOUT_SECONDS="60"
    )
    for i in range(60):
        line.wait(f"r{i:02d}")
    started = line.clock.now = START + 100  # a slot's start: the first create at once
    script = Script(line)

    drained = drain(replace(line.ports, started_at=started), LOCATION, script, line.log.logger, line.pacer)

    last_begin = started + line.settings.submit_timeout_seconds - line.settings.create_timeout_seconds
    assert script.at and max(script.at) <= last_begin
    assert len(script.tried) == 30  # a slot a second from the delivery's start, before its last begin
    assert drained.handed_over == "r30"
    assert line.clock.now <= last_begin + 1  # it handed over then, not at its run's end


def test_a_slot_taken_in_time_whose_listing_ran_past_the_last_begin_creates_nothing_and_hands_over() -> None:
    """Seed 12243's run listed the line and checked its burst for 4.6 s after its slot."""
    line = paced_line(
        SPOTJOBS_PACER_RUN_SECONDS="40", SPOTJOBS_CREATE_TIMEOUT_SECONDS="30", SPOTJOBS_SUBMIT_TIMEOUT_SECONDS="60"
    )
    for request_id in "ab":
        line.wait(request_id)
    started = line.clock.now = START + 100
    pacer = line.pacer
    listing = pacer.waiting

    def slow_listing(location: str) -> list[Waiting]:
        line.clock.now += 5.0
        return listing(location)

    pacer.waiting = slow_listing  # type: ignore[method-assign]
    line.clock.now = started + 29.5  # its own claim and entry took most of the time it had
    script = Script(line)

    drained = drain(replace(line.ports, started_at=started), LOCATION, script, line.log.logger, pacer)

    assert script.tried == []
    assert drained.handed_over == "a"


# ---- the waiting line ---------------------------------------------------------------------------


def test_an_entry_is_written_once_and_keeps_its_first_generation(line: Line) -> None:
    entry = waiting_entry(LOCATION, 0, "r1", 1)
    first = line.pacer.enqueue(entry)
    line.clock.now += 5
    assert first > 0
    assert line.pacer.enqueue(entry) == first
    assert line.pacer.waiting(LOCATION)[0].generation == first
    assert line.pacer.has_entry(entry)


def test_regions_with_anything_under_pacing_are_found_but_not_the_slots(line: Line) -> None:
    line.wait("r1")
    line.pacer.take_slot("asia-east1")
    assert line.pacer.acquire("europe-west4") is not None
    assert line.pacer.line_locations() == ["europe-west4", LOCATION]


def test_anyone_waiting_sees_an_entry_and_its_removal(line: Line) -> None:
    assert not line.pacer.anyone_waiting(LOCATION)
    entry = line.wait("r1")
    assert line.pacer.anyone_waiting(LOCATION)
    line.pacer.remove(entry)
    assert not line.pacer.anyone_waiting(LOCATION)
    line.pacer.remove(entry)  # removed before (a drainer that crashed): no error


# ---- the drainer lease --------------------------------------------------------------------------


def test_the_lease_is_held_for_a_run_a_create_and_a_margin_then_free_to_take_over(line: Line) -> None:
    first, second = line.pacer, line.pacer
    held_for = line.settings.pacer_run_seconds + line.settings.create_timeout_seconds + 30
    assert first.lease_seconds == held_for

    lease = first.acquire(LOCATION)
    assert lease is not None
    assert second.acquire(LOCATION) is None
    line.clock.now += held_for - 0.01
    assert not second.lease_free(LOCATION)
    assert second.acquire(LOCATION) is None
    line.clock.now += 0.01
    assert second.lease_free(LOCATION)  # it ran out at that instant
    taken = second.acquire(LOCATION)
    assert taken is not None and taken != lease
    assert first.renew(LOCATION, lease) is None  # presumed dead, taken over


def test_a_renewed_lease_runs_a_full_term_from_its_renewal(line: Line) -> None:
    lease = line.pacer.acquire(LOCATION)
    assert lease is not None
    line.clock.now += 40
    renewed = line.pacer.renew(LOCATION, lease)
    assert renewed is not None and renewed != lease
    line.clock.now += line.pacer.lease_seconds - 1
    assert not line.pacer.lease_free(LOCATION)


def test_a_lease_is_released_only_by_its_holder(line: Line) -> None:
    lease = line.pacer.acquire(LOCATION)
    assert lease is not None
    line.clock.now += line.pacer.lease_seconds
    taken = line.pacer.acquire(LOCATION)
    assert taken is not None

    line.pacer.release(LOCATION, lease)  # the presumed dead drainer, back
    assert not line.pacer.lease_free(LOCATION)
    line.pacer.release(LOCATION, taken)
    assert line.pacer.lease_free(LOCATION)
    line.pacer.release(LOCATION, taken)  # released before: no error


# ---- the burst ----------------------------------------------------------------------------------


def test_a_bursts_alert_is_due_until_noted_sent_and_its_end_waits_for_an_empty_line(line: Line) -> None:
    pacer = line.pacer
    opened = pacer.burst_alert_due(LOCATION, 9)
    assert opened is not None
    assert pacer.burst_alert_due(LOCATION, 9) == opened  # its sender died: still due
    pacer.burst_alerted(LOCATION, opened + 1)  # a stale generation: nothing noted
    assert pacer.burst_alert_due(LOCATION, 9) is not None
    pacer.burst_alerted(LOCATION, opened)
    assert pacer.burst_alert_due(LOCATION, 9) is None

    entry = line.wait("r1")
    pacer.end_burst(LOCATION)
    assert pacer.burst_alert_due(LOCATION, 9) is None  # still open: someone waits
    pacer.remove(entry)
    pacer.end_burst(LOCATION)
    assert pacer.burst_alert_due(LOCATION, 1) is not None  # ended: the next burst opens afresh


# ---- the drainer --------------------------------------------------------------------------------


def test_the_drainer_creates_one_per_slot_in_turn_and_releases_the_lease(line: Line) -> None:
    for request_id in ("a", "b", "c"):
        line.wait(request_id)
    line.wait("urgent", priority=5)
    script = Script(line)
    started = line.clock.now

    drained = line.drain(script)

    assert drained == Drained(held=True, created=4, rate_limited=0, handed_over=None)
    assert line.clock.now - started < 5  # the line empty, the run ends: it does not sit out its 20 s
    assert script.tried == ["urgent", "a", "b", "c"]
    slots = [int(at // line.pacer.slot_seconds) for at in script.at]
    assert [b - a for a, b in zip(slots, slots[1:])] == [1, 1, 1]  # each in the next slot
    assert line.waiting() == []
    assert line.pacer.lease_free(LOCATION)
    assert line.alerts(AlertKind.QUOTA_LIMITED) == []  # 4 slots: pacing, not a burst


def test_a_drainer_finds_the_lease_held_and_leaves_the_line_alone(line: Line) -> None:
    line.wait("a")
    assert line.pacer.acquire(LOCATION) is not None
    script = Script(line)

    drained = line.drain(script)
    assert (drained.held, drained.created, drained.rate_limited, drained.handed_over) == (False, 0, 0, None)
    assert script.tried == []


def test_a_head_refused_for_the_rate_keeps_its_place_and_is_counted(line: Line) -> None:
    line.wait("a")
    line.wait("b")
    script = Script(line, {"a": [QUOTA, QUOTA, SETTLED]})

    drained = line.drain(script)

    assert script.tried == ["a", "a", "a", "b"]
    assert (drained.created, drained.rate_limited) == (2, 2)


def test_a_head_turned_away_leaves_the_line_uncounted(line: Line) -> None:
    line.wait("a")
    line.wait("b")
    drained = line.drain(Script(line, {"a": [TURNED_AWAY]}))
    assert (drained.created, line.waiting()) == (1, [])


def test_a_busy_head_is_waited_for_a_few_slots_then_passed_and_handed_over_to_last(line: Line) -> None:
    line.wait("busy")
    line.wait("b")
    script = Script(line, {"busy": [BUSY]})

    drained = line.drain(script)

    assert script.tried == ["busy"] * PATIENCE_SLOTS + ["b"]
    assert drained.created == 1
    # Passed for this run only: it still waits, and the next drainer is its delivery.
    assert line.waiting() == ["busy"]
    assert drained.handed_over == "busy"
    assert line.handed_over() == ["busy"]


def test_a_busy_head_is_passed_within_a_run_even_at_a_pace_of_fewer_slots_a_run_than_the_patience() -> None:
    """At 6 creates a minute a 40 s run has 4 slots, fewer than the five a busy head is waited
    for: waited for all of them, never passed, it was handed the line again at each run's end, and
    the request behind it waited as long as the head stayed busy (for good, were it stuck) instead
    of five slots. The patience is at most all of a run's slots but one."""
    slow = paced_line(
        SPOTJOBS_VERTEX_CREATES_PER_MINUTE="6", SPOTJOBS_PACER_RUN_SECONDS="40", SPOTJOBS_CREATE_TIMEOUT_SECONDS="20"
    )
    slow.wait("busy")
    slow.wait("b")
    script = Script(slow, {"busy": [BUSY]})

    drained = slow.drain(script)

    assert script.tried == ["busy"] * 3 + ["b"]
    assert (drained.created, slow.waiting()) == (1, ["busy"])


def test_a_short_run_waits_for_a_busy_head_one_slot_and_never_passes_a_refused_one() -> None:
    """The patience is never below one slot: a run sure of two slots waits for a busy head one,
    and a head refused for the rate is no busy one, however short the run: it keeps its place."""
    short = paced_line(SPOTJOBS_VERTEX_CREATES_PER_MINUTE="6", SPOTJOBS_PACER_RUN_SECONDS="20")
    short.wait("busy")
    short.wait("b")
    script = Script(short, {"busy": [BUSY]})
    short.drain(script)
    assert script.tried[:2] == ["busy", "b"]

    shortest = paced_line(SPOTJOBS_VERTEX_CREATES_PER_MINUTE="6", SPOTJOBS_PACER_RUN_SECONDS="10")
    shortest.wait("a")
    shortest.wait("b")
    script = Script(shortest, {"a": [QUOTA, QUOTA, QUOTA]})
    drained = shortest.drain(script)
    assert set(script.tried) == {"a"} and drained.handed_over == "a"


def test_a_head_busy_for_a_while_then_free_is_not_passed(line: Line) -> None:
    line.wait("a")
    line.wait("b")
    script = Script(line, {"a": [BUSY] * (PATIENCE_SLOTS - 1) + [SETTLED]})
    line.drain(script)
    assert script.tried == ["a"] * PATIENCE_SLOTS + ["b"]


def test_busy_turns_start_again_for_each_head(line: Line) -> None:
    line.wait("a")
    line.wait("b")
    line.wait("c")
    busy_then_settled = [BUSY] * (PATIENCE_SLOTS - 1) + [SETTLED]
    script = Script(line, {"a": list(busy_then_settled), "b": list(busy_then_settled)})
    line.drain(script)
    assert script.tried == ["a"] * PATIENCE_SLOTS + ["b"] * PATIENCE_SLOTS + ["c"]


def test_a_head_in_doubt_is_passed_at_once(line: Line) -> None:
    line.wait("doubt")
    line.wait("b")
    script = Script(line, {"doubt": [IN_DOUBT]})

    drained = line.drain(script)

    assert script.tried == ["doubt", "b"]
    assert drained.handed_over == "doubt"


def test_a_run_ends_at_its_deadline_renewing_its_lease_and_hands_over_to_the_head() -> None:
    # A create timeout short enough that the run, not the create's place in the delivery, ends it.
    line = paced_line(SPOTJOBS_PACER_RUN_SECONDS="35", SPOTJOBS_CREATE_TIMEOUT_SECONDS="20")
    for i in range(40):
        line.wait(f"r{i:02d}")
    line.clock.now = START + 100  # a slot's start: the first create at once
    renewals: list[int] = []
    pacer = line.pacer
    renew = pacer.renew

    def noted_renew(location: str, generation: int) -> int | None:
        renewals.append(generation)
        return renew(location, generation)

    pacer.renew = noted_renew  # type: ignore[method-assign]
    script = Script(line)

    drained = drain(line.ports, LOCATION, script, line.log.logger, pacer)

    run = line.settings.pacer_run_seconds
    assert len(script.tried) == run  # a slot a second, the first at once
    assert len(renewals) == run // RENEW_EVERY_SECONDS
    assert len(set(renewals)) == len(renewals)  # each renewal held on to the renewed lease
    assert drained.handed_over == "r35"
    assert line.handed_over() == ["r35"]
    assert line.pacer.lease_free(LOCATION)


def test_a_drainer_whose_lease_was_taken_over_stops_at_its_next_renewal(line: Line) -> None:
    for i in range(30):
        line.wait(f"r{i:02d}")
    other = line.pacer
    script = Script(line)

    def take_over_once_expired(entry: Waiting) -> str:
        if len(script.tried) == 1:  # the first drainer stalls for a lease: presumed dead
            line.clock.now += line.pacer.lease_seconds
            assert other.acquire(LOCATION) is not None
        return script(entry)

    drained = line.drain(take_over_once_expired)

    assert len(script.tried) == 2  # the renewal at the second slot fails: it stops
    assert drained.created == 2
    assert not line.pacer.lease_free(LOCATION)  # the other drainer's lease stays


def test_a_create_that_raises_ends_the_run_without_raising_the_lease_released_the_line_handed_over(
    line: Line,
) -> None:
    line.wait("a")
    line.wait("b")

    def failing(entry: Waiting) -> str:
        raise RuntimeError("Vertex went away")

    drained = line.drain(failing)

    assert (drained.held, drained.created, drained.rate_limited, drained.handed_over) == (True, 0, 0, "a")
    assert line.pacer.lease_free(LOCATION)
    assert [e["event"] for e in line.log.lines if e.get("event", "").startswith("quota_drain")] == [
        "quota_drain_failed",
        "quota_drain",
    ]


def test_a_failed_release_is_logged_and_the_line_still_handed_over(line: Line) -> None:
    line.wait("a")
    line.wait("b")
    pacer = line.pacer

    def failing_release(location: str, generation: int) -> None:
        raise RuntimeError("503")

    pacer.release = failing_release  # type: ignore[method-assign]
    drained = drain(line.ports, LOCATION, Script(line, {"a": [IN_DOUBT]}), line.log.logger, pacer)

    assert drained.handed_over == "a"
    assert line.log.events("quota_release_failed")


def test_a_settled_entry_that_cannot_leave_is_tried_again_and_not_counted(line: Line) -> None:
    line.wait("a")
    pacer = line.pacer
    remove = pacer.remove
    failures = [RuntimeError("503")]

    def flaky_remove(entry: Waiting) -> None:
        if failures:
            raise failures.pop()
        remove(entry)

    pacer.remove = flaky_remove  # type: ignore[method-assign]
    script = Script(line)
    drained = drain(line.ports, LOCATION, script, line.log.logger, pacer)

    assert script.tried == ["a", "a"]
    assert drained.created == 1
    assert line.log.events("quota_leave_failed")


# ---- the burst alert ----------------------------------------------------------------------------


def test_a_line_longer_than_the_alert_bound_sends_one_quota_limited_alert_per_burst(line: Line) -> None:
    for i in range(8):
        line.wait(f"r{i}")
    script = Script(line, {"r0": [QUOTA]})  # the head keeps its place: the line stays long

    line.drain(script)
    line.clock.now += line.pacer.lease_seconds
    line.drain(script)

    alerts = line.alerts(AlertKind.QUOTA_LIMITED)
    assert len(alerts) == 1
    assert alerts[0].details == {
        "location": LOCATION,
        "waiting": 8,
        "expected_drain_seconds": 8,
        "creates_per_minute": 60,
    }


def test_a_line_exactly_at_the_alert_bound_is_pacing_not_a_burst(line: Line) -> None:
    for i in range(5):  # 5 slots of a second: the bound, not beyond it
        line.wait(f"r{i}")
    line.drain(Script(line))
    assert line.alerts(AlertKind.QUOTA_LIMITED) == []


def test_an_alert_that_could_not_be_published_is_sent_by_the_next_run(line: Line) -> None:
    for i in range(8):
        line.wait(f"r{i}")
    script = Script(line, {"r0": [QUOTA]})
    line.publisher.fail_next = 1

    line.drain(script)
    assert line.alerts(AlertKind.QUOTA_LIMITED) == []
    assert script.tried  # the run went on creating
    line.clock.now += line.pacer.lease_seconds
    line.drain(script)

    assert len(line.alerts(AlertKind.QUOTA_LIMITED)) == 1


# ---- hand-over and reconcile's restart -----------------------------------------------------------


def test_the_hand_over_skips_settled_heads_and_ends_the_burst_of_an_empty_line(line: Line) -> None:
    gone = waiting_entry(LOCATION, 9, "gone", 1)  # its record is gone: settled
    line.pacer.enqueue(gone)
    line.wait("a")
    assert hand_over(line.ports, line.pacer, LOCATION, line.log.logger) == "a"
    assert line.waiting() == ["a"]

    opened = line.pacer.burst_alert_due(LOCATION, 9)
    line.pacer.remove(waiting_entry(LOCATION, 0, "a", 1))
    assert hand_over(line.ports, line.pacer, LOCATION, line.log.logger) is None
    assert line.pacer.burst_alert_due(LOCATION, 1) != opened  # the old burst ended


def test_a_function_that_may_not_publish_to_job_requests_hands_over_to_no_one(line: Line) -> None:
    line.wait("a")
    ports = Ports(line.settings, line.ledger, lambda: line.publisher, None, topics={"ops-alerts"})  # type: ignore[arg-type]
    assert hand_over(ports, line.pacer, LOCATION, line.log.logger) is None
    assert line.handed_over() == []


def test_reconcile_restarts_only_a_line_without_a_live_drainer(line: Line) -> None:
    # reconcile's Pacer reads the wall clock: the leases are taken at instants of it.
    line.wait("a")
    line.clock.now = time.time()
    lease = line.pacer.acquire(LOCATION)
    assert lease is not None
    assert restart_stalled(line.ports, line.log.logger) == []

    line.pacer.release(LOCATION, lease)
    line.clock.now = time.time() - line.pacer.lease_seconds - 1
    assert line.pacer.acquire(LOCATION) is not None  # a drainer that died a lease ago
    assert restart_stalled(line.ports, line.log.logger) == [LOCATION]
    assert line.handed_over() == ["a"]


def test_reconcile_ends_the_burst_of_an_empty_line_and_goes_on_past_a_region_that_fails(line: Line) -> None:
    line.pacer.burst_alert_due("europe-west4", 9)
    line.wait("a")
    ledger_get = line.ledger.get

    def failing_get(request_id: str) -> Any:
        raise RuntimeError("503")

    line.ledger.get = failing_get  # type: ignore[method-assign]
    assert restart_stalled(line.ports, line.log.logger) == []
    assert line.log.events("quota_restart_failed")
    assert line.pacer.burst_alert_due("europe-west4", 1) is not None  # ended, opens afresh

    line.ledger.get = ledger_get  # type: ignore[method-assign]
    assert restart_stalled(line.ports, line.log.logger) == [LOCATION]


# ---- races between two instances, at one object ------------------------------------------------


class Interleaved:
    """The bucket, with another instance's step run at one object just before or just after this
    instance reads it (`get_blob`), or just before it swaps it (a write at a generation): the
    races between a look and a write."""

    def __init__(
        self,
        bucket: Any,
        name: str,
        *,
        before: Callable[[], object] = lambda: None,
        after: Callable[[], object] = lambda: None,
        before_swap: Callable[[], object] = lambda: None,
    ) -> None:
        self._bucket, self._name = bucket, name
        self._before, self._after, self._before_swap = before, after, before_swap

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._bucket, attribute)

    def get_blob(self, name: str, **kwargs: Any) -> Any:
        if name == self._name:
            self._before()
        blob = self._bucket.get_blob(name, **kwargs)
        if name == self._name:
            self._after()
        return blob

    def blob(self, name: str, **kwargs: Any) -> Any:
        blob = self._bucket.blob(name, **kwargs)
        if name != self._name:
            return blob
        upload = blob.upload_from_string

        def swapped(data: Any, *args: Any, if_generation_match: int | None = None, **options: Any) -> None:
            if if_generation_match:  # not a create
                self._before_swap()
            upload(data, *args, if_generation_match=if_generation_match, **options)

        blob.upload_from_string = swapped
        return blob


LEASE = f"pacing/{LOCATION}/drainer.json"
BURST = f"pacing/{LOCATION}/burst.json"


def racing(line: Line, name: str, **steps: Callable[[], object]) -> Pacer:
    return Pacer(Interleaved(line.bucket, name, **steps), line.settings, clock=line.clock, sleep=line.clock.sleep)


def test_an_expired_lease_taken_over_by_another_between_our_look_and_our_take_is_theirs(line: Line) -> None:
    assert line.pacer.acquire(LOCATION) is not None
    line.clock.now += line.pacer.lease_seconds  # that drainer died
    theirs: list[int | None] = []
    ours = racing(line, LEASE, before_swap=lambda: theirs.append(line.pacer.acquire(LOCATION)))

    assert ours.acquire(LOCATION) is None
    assert theirs[0] is not None and not line.pacer.lease_free(LOCATION)


def test_a_lease_taken_over_between_our_look_and_our_release_stays_theirs(line: Line) -> None:
    lease = line.pacer.acquire(LOCATION)
    assert lease is not None

    def taken_over() -> None:
        line.clock.now += line.pacer.lease_seconds
        assert line.pacer.acquire(LOCATION) is not None

    racing(line, LEASE, after=taken_over).release(LOCATION, lease)
    assert not line.pacer.lease_free(LOCATION)


def test_a_burst_noted_sent_by_its_drainer_while_another_ends_it_stays(line: Line) -> None:
    opened = line.pacer.burst_alert_due(LOCATION, 9)
    assert opened is not None
    racing(line, BURST, after=lambda: line.pacer.burst_alerted(LOCATION, opened)).end_burst(LOCATION)
    assert line.pacer.burst_alert_due(LOCATION, 9) is None  # still open, its alert sent


def test_a_lease_released_between_our_create_and_our_look_is_taken(line: Line) -> None:
    lease = line.pacer.acquire(LOCATION)
    assert lease is not None
    ours = racing(line, LEASE, before=lambda: line.pacer.release(LOCATION, lease))

    assert ours.acquire(LOCATION) is not None
    assert not line.pacer.lease_free(LOCATION)


def test_a_lease_removed_between_our_look_and_our_release_is_no_error(line: Line) -> None:
    lease = line.pacer.acquire(LOCATION)
    assert lease is not None
    ours = racing(line, LEASE, after=lambda: line.bucket.delete_blob(LEASE))
    ours.release(LOCATION, lease)
    assert line.pacer.lease_free(LOCATION)


def test_a_burst_ended_between_opening_it_and_reading_it_owes_no_alert(line: Line) -> None:
    assert line.pacer.burst_alert_due(LOCATION, 9) is not None
    ours = racing(line, BURST, before=lambda: line.bucket.delete_blob(BURST))
    assert ours.burst_alert_due(LOCATION, 9) is None


def test_a_burst_ended_by_another_while_we_end_it_is_no_error(line: Line) -> None:
    assert line.pacer.burst_alert_due(LOCATION, 9) is not None
    ours = racing(line, BURST, after=lambda: line.bucket.delete_blob(BURST))
    ours.end_burst(LOCATION)
    assert line.pacer.burst_alert_due(LOCATION, 1) is not None  # ended: opens afresh


def test_an_entry_removed_as_it_is_written_again_has_no_arrival(line: Line) -> None:
    entry = line.wait("a")
    name = f"pacing/{LOCATION}/waiting/{entry.key}"
    ours = racing(line, name, before=lambda: line.pacer.remove(entry))
    assert ours.enqueue(entry) == 0


# ---- a request's place ----------------------------------------------------------------------------


def test_a_request_without_a_priority_waits_as_priority_zero(line: Line) -> None:
    plain = RequestRecord("plain", {"request_id": "plain"}, "gs://b/plain/")
    zero = RequestRecord("zero", {"request_id": "zero", "priority": 0}, "gs://b/zero/")
    one = RequestRecord("one", {"request_id": "one", "priority": 1}, "gs://b/one/")
    below = RequestRecord("below", {"request_id": "below", "priority": -1}, "gs://b/below/")
    assert priority_of(below) < priority_of(plain) == priority_of(zero) < priority_of(one)


def test_no_hold_for_an_attempt_the_record_does_not_have() -> None:
    record = RequestRecord("r1", {}, "gs://b/r1/", attempts=[Attempt(1, LOCATION, "SPOT", "T")])
    hold = {"claimed_at": "T", "now": datetime(2026, 12, 1, tzinfo=UTC), "lease_seconds": 60, "waiting_since": "A"}
    assert hold_for_quota(record, n=2, **hold) is None
    assert hold_for_quota(None, n=1, **hold) is None


def test_an_unreadable_head_leaves_the_line_alerted_and_the_next_gets_the_line(line: Line) -> None:
    line.wait("corrupt", priority=5)
    line.wait("a")
    line.bucket.blob("requests/corrupt.json").upload_from_string(b"{truncated", content_type="application/json")

    assert hand_over(line.ports, line.pacer, LOCATION, line.log.logger) == "a"
    assert line.waiting() == ["a"]
    assert [alert.request_id for alert in line.alerts(AlertKind.LEDGER_CORRUPT)] == ["corrupt"]


def test_a_hand_over_that_cannot_publish_ends_the_run_quietly_for_reconcile(line: Line) -> None:
    line.wait("doubt")
    line.wait("b")
    line.publisher.fail_next = 1  # the hand-over's publish

    drained = line.drain(Script(line, {"doubt": [IN_DOUBT]}))

    assert (drained.created, drained.handed_over) == (1, None)
    assert line.log.events("quota_handover_failed")
    assert line.pacer.lease_free(LOCATION)


def test_a_lease_nested_too_deep_to_read_is_free_to_take(line: Line) -> None:
    line.bucket.blob(LEASE).upload_from_string("[" * 100_000)
    assert line.pacer.lease_free(LOCATION)


def test_each_busy_head_gets_the_same_patience_whatever_came_before_it(line: Line) -> None:
    for request_id in ("free", "busy1", "busy2", "c"):
        line.wait(request_id)
    script = Script(line, {"free": [BUSY, SETTLED], "busy1": [BUSY], "busy2": [BUSY]})

    line.drain(script)

    assert script.tried == ["free"] * 2 + ["busy1"] * PATIENCE_SLOTS + ["busy2"] * PATIENCE_SLOTS + ["c"]


def test_an_entry_naming_no_request_is_no_ones_turn(line: Line) -> None:
    line.bucket.blob(f"pacing/{LOCATION}/waiting/0000001~~1").upload_from_string(b"")
    line.wait("a")
    assert line.waiting() == ["a"]
