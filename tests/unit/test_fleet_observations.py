"""What a record tells the fleet (shared/fleet/observations.py) and what a decision records of it
(shared/fleet/recording.py): the machine class, each kind of fact with its seconds, Vertex's bound
on preemptions and restarts, stockouts, the stable keys that make a redelivery write nothing
twice, and the advisory write."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core.exceptions import Forbidden, ServiceUnavailable

from shared.fleet import store
from shared.fleet.observations import (
    AttemptSummary,
    FleetFact,
    Kind,
    MachineClass,
    Reading,
    attempt_key,
    observations_of,
    within_bound,
)
from shared.fleet.recording import fleet_facts, new_facts, note_fleet
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.store import LedgerStore
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decisions import CapturedLog, make_settings

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def pool(machine_type: str, accelerator: str | None = None, count: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"machineType": machine_type}
    if accelerator is not None:
        spec["acceleratorType"] = accelerator
    if count is not None:
        spec["acceleratorCount"] = count
    return {"machineSpec": spec}


def job_of(*pools: dict[str, Any] | None) -> dict[str, Any]:
    return {"custom_job": {"jobSpec": {"workerPoolSpecs": list(pools)}}}


H100_REQUEST = job_of(pool("a3-highgpu-8g", "NVIDIA_H100_80GB", 8))


def record(*attempts: Attempt, request: dict[str, Any] | None = None) -> RequestRecord:
    return RequestRecord("r1", H100_REQUEST if request is None else request, "gs://c/r1", attempts=list(attempts))


def spot(n: int = 1, **fields: Any) -> Attempt:
    return Attempt(n, "us-east4", "SPOT", claimed_at=at(0), job=f"j{n}", created_at=at(0), **fields)


def told(found: list[FleetFact]) -> list[tuple[str, float, int, int]]:
    return sorted((o.kind.value, o.seconds, o.count, o.index) for o in found)


# The machine class.


def test_a_class_without_accelerators_is_named_none_and_read_back_without() -> None:
    cpu = MachineClass("n1-standard-8")
    assert cpu.key == "n1-standard-8+none+0"
    assert MachineClass.from_key(cpu.key) == cpu
    assert MachineClass.of_request(job_of(pool("n1-standard-8"))) == cpu


def test_the_class_is_the_first_pools() -> None:
    two = job_of(pool("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1), pool("n1-standard-4"))
    assert MachineClass.of_request(two) == MachineClass("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1)


@pytest.mark.parametrize(
    "request_",
    [{}, {"custom_job": {}}, job_of(), job_of(None), job_of({"machineSpec": {}}), job_of(pool(""))],
)
def test_a_request_without_a_first_machine_type_has_no_class(request_: dict[str, Any]) -> None:
    assert MachineClass.of_request(request_) is None


def test_classes_order_by_their_names() -> None:
    assert sorted([MachineClass("b"), MachineClass("a", "x", 2), MachineClass("a", "x", 1)]) == [
        MachineClass("a", "x", 1),
        MachineClass("a", "x", 2),
        MachineClass("b"),
    ]


# The facts of an attempt.


def test_the_attempt_key_is_the_request_ids_hash_and_n_as_stored_before() -> None:
    # Object names already in the bucket carry it: a new form would write every open fact twice.
    assert attempt_key("r1", 3) == f"{hashlib.sha256(b'r1').hexdigest()[:16]}-3"


def test_a_spot_attempt_tells_its_wait_run_and_counts() -> None:
    ran = record(spot(started_at=at(30), ended_at=at(150), preemptions=2))
    assert told(observations_of(ran)) == [
        ("preempt", 0.0, 0, 0),
        ("preempt", 0.0, 0, 1),
        ("run", 7200.0, 2, 0),
        ("wait", 1800.0, 0, 0),
    ]
    waiting = record(spot())
    assert told(observations_of(waiting)) == [("waiting", 0.0, 0, 0)]
    assert [o.at for o in observations_of(waiting)] == [T0]


def test_an_attempt_without_a_job_tells_nothing() -> None:
    assert observations_of(record(Attempt(1, "us-east4", "SPOT", claimed_at=at(0)))) == []


def test_a_job_found_without_a_create_time_waited_from_its_claim() -> None:
    found = Attempt(1, "us-east4", "SPOT", claimed_at=at(0), job="j1", started_at=at(20))
    assert told(observations_of(record(found))) == [("wait", 1200.0, 0, 0)]
    created = Attempt(1, "us-east4", "SPOT", claimed_at=at(0), job="j1", created_at=at(5), started_at=at(20))
    assert told(observations_of(record(created))) == [("wait", 900.0, 0, 0)]


def test_a_wait_that_ended_without_capacity_is_a_nocap_up_to_its_end() -> None:
    ended = record(spot(ended_at=at(40), outcome="cancelled"))
    assert told(observations_of(ended)) == [("nocap", 2400.0, 0, 0), ("waiting", 0.0, 0, 0)]
    # an end seen before any outcome was decided: a wait that found none all the same
    gone = record(spot(ended_at=at(40)))
    assert told(observations_of(gone)) == [("nocap", 2400.0, 0, 0), ("waiting", 0.0, 0, 0)]
    # an outcome with no end time: a wait of nothing, at its create
    decided = record(spot(outcome="switched_to_on_demand"))
    nocap = [o for o in observations_of(decided) if o.kind is Kind.NO_CAPACITY]
    assert [(o.at, o.seconds) for o in nocap] == [(T0, 0.0)]
    # a move (or a switch) decided before the job's end was seen: the wait lasted until that
    # decision (seed 2486: a 1,697 s wait in us-east4 was written as 0 s, and the next placement
    # saw us-east4 at 99%)
    moved = record(spot(outcome="moved", cancel_decided_at=at(28)))
    nocap = [o for o in observations_of(moved) if o.kind is Kind.NO_CAPACITY]
    assert [(o.at, o.seconds) for o in nocap] == [(T0 + timedelta(minutes=28), 1680.0)]


def test_a_job_running_the_instant_it_was_created_waited_nothing() -> None:
    assert told(observations_of(record(spot(started_at=at(0))))) == [("wait", 0.0, 0, 0)]
    skewed = record(spot(started_at=at(-1)))  # clocks a second apart: no negative wait
    assert told(observations_of(skewed)) == [("wait", 0.0, 0, 0)]


def test_an_on_demand_attempt_tells_only_its_changeover_once_running() -> None:
    ondemand = Attempt(1, "us-east4", "STANDARD", claimed_at=at(0), job="j1", created_at=at(1), started_at=at(11))
    reading = Reading(runs_started=lambda record, n: {0, 1, 2})
    assert told(observations_of(record(ondemand), reading)) == [("changeover", 600.0, 0, 0)]
    pending = Attempt(1, "us-east4", "STANDARD", claimed_at=at(0), job="j1", created_at=at(1))
    assert observations_of(record(pending), reading) == []


def test_preemptions_unknown_count_one_and_no_more_than_vertex_can_do() -> None:
    unknown = record(spot(started_at=at(30), ended_at=at(90), preemptions_unknown=True))
    assert told(observations_of(unknown)) == [("preempt", 0.0, 0, 0), ("run", 3600.0, 1, 0), ("wait", 1800.0, 0, 0)]
    forged = record(spot(started_at=at(30), ended_at=at(90), preemptions=999))
    facts = observations_of(forged)
    assert [o.index for o in facts if o.kind is Kind.PREEMPT] == list(range(7))
    assert [o.count for o in facts if o.kind is Kind.RUN] == [7]
    assert all(within_bound(o) for o in facts)


def test_restarts_are_the_kits_runs_one_to_six_of_a_spot_attempt_vertex_saw_running() -> None:
    reading = Reading(runs_started=lambda record, n: {0, 1, 6, 7, -1})
    ran = observations_of(record(spot(started_at=at(30), preemptions=2)), reading)
    assert sorted(o.index for o in ran if o.kind is Kind.RESTART) == [1, 6]
    assert all(o.at is None for o in ran if o.kind is Kind.RESTART)  # stamped when first recorded
    never_ran = observations_of(record(spot()), reading)
    assert [o for o in never_ran if o.kind is Kind.RESTART] == []


@pytest.mark.parametrize(
    ("error", "stockout"),
    [
        ({"code": 8, "message": "quota"}, True),
        ({"code": 9, "message": "ZONE_RESOURCE_POOL_EXHAUSTED"}, True),
        ({"code": 9, "message": "bad image"}, False),
        ({"code": 3}, False),
        (None, False),
    ],
)
def test_a_stockout_is_resource_exhausted_or_a_stockout_message(error: dict | None, stockout: bool) -> None:
    reading = Reading(is_stockout=lambda message: "EXHAUSTED" in message)
    ended = record(spot(started_at=at(30), ended_at=at(90), error=error))
    facts = observations_of(ended, reading)
    assert [o.kind for o in facts if o.kind is Kind.STOCKOUT] == ([Kind.STOCKOUT] if stockout else [])
    if stockout:
        assert [o.at for o in facts if o.kind is Kind.STOCKOUT] == [T0 + timedelta(minutes=90)]


def test_a_flex_start_wait_that_ran_out_is_no_stockout_of_spot() -> None:
    """FLEX_START's RESOURCE_EXHAUSTED at its maxWaitDuration says Dynamic Workload Scheduler found
    no capacity within the wait, not that Spot had none (the estimate reads stockouts as Spot's)."""
    flex = Attempt(1, "us-east4", "FLEX_START", claimed_at=at(0), job="j1", created_at=at(0), ended_at=at(90))
    facts = observations_of(record(replace(flex, error={"code": 8, "message": "RESOURCE_EXHAUSTED"})))
    assert facts == []


def test_by_default_no_message_is_a_stockout() -> None:
    facts = observations_of(record(spot(started_at=at(30), ended_at=at(90), error={"code": 13, "message": "x"})))
    assert Kind.STOCKOUT not in {o.kind for o in facts}


# Vertex's bound on what a fact may say.


@pytest.mark.parametrize(
    ("fact", "within"),
    [
        (FleetFact(Kind.PREEMPT, "x", T0, index=0), True),
        (FleetFact(Kind.PREEMPT, "x", T0, index=6), True),  # the seventh: six restarts, then the end
        (FleetFact(Kind.PREEMPT, "x", T0, index=7), False),
        (FleetFact(Kind.PREEMPT, "x", T0, index=-1), False),
        (FleetFact(Kind.RESTART, "x", T0, index=0), True),
        (FleetFact(Kind.RESTART, "x", T0, index=6), True),
        (FleetFact(Kind.RESTART, "x", T0, index=7), False),
        (FleetFact(Kind.RESTART, "x", T0, index=-1), False),
        (FleetFact(Kind.RUN, "x", T0, count=0), True),
        (FleetFact(Kind.RUN, "x", T0, count=7), True),
        (FleetFact(Kind.RUN, "x", T0, count=8), False),
        (FleetFact(Kind.RUN, "x", T0, count=-1), False),
        (FleetFact(Kind.ATTEMPT, "x", T0, summary=AttemptSummary(preemptions=0)), True),
        (FleetFact(Kind.ATTEMPT, "x", T0, summary=AttemptSummary(preemptions=7)), True),
        (FleetFact(Kind.ATTEMPT, "x", T0, summary=AttemptSummary(preemptions=8)), False),
        (FleetFact(Kind.ATTEMPT, "x", T0, summary=AttemptSummary(preemptions=-1)), False),
        (FleetFact(Kind.WAIT, "x", T0, 60.0, index=99, count=99), True),
    ],
)
def test_a_fact_past_what_vertex_does_is_out_of_bound(fact: FleetFact, within: bool) -> None:
    assert within_bound(fact) is within


def test_a_fact_and_a_summary_start_from_nothing() -> None:
    assert FleetFact(Kind.WAIT, "x", T0).key == ("", "wait", 0)
    assert (FleetFact(Kind.WAIT, "x", T0).seconds, FleetFact(Kind.WAIT, "x", T0).count) == (0.0, 0)
    assert AttemptSummary() == AttemptSummary(0, 0, 0, 0, None, None)


# What a decision records.


def test_a_wait_that_closed_without_capacity_is_not_opened_again() -> None:
    ended = record(spot(ended_at=at(40), outcome="cancelled"))
    # What closed it, again (create-once: a lost write of it is written now), never the open wait.
    assert [o.kind for o in new_facts(fleet_facts(ended, Reading()), ended, Reading(), T0)] == [Kind.NO_CAPACITY]


def test_with_nothing_known_before_everything_is_new() -> None:
    ran = record(spot(started_at=at(30), preemptions=1))
    assert sorted(o.kind for o in new_facts(None, ran, Reading(), T0)) == [Kind.PREEMPT, Kind.WAIT]


class Fleet:
    """Ports over an in-memory state bucket (sim.gcs), whose fleet writes can be made to fail."""

    def __init__(self, fail_with: Exception | None = None) -> None:
        self.bucket = MemoryStorage(clock=lambda: T0).client().bucket("state")
        self.fail_with = fail_with
        self.log = CapturedLog()
        fleet = self
        self.ports = Ports(make_settings("state"), LedgerStore(self.bucket), lambda: None, None, clock=lambda: T0)  # type: ignore[arg-type]
        original = store.write_facts

        def write_facts(bucket: Any, machine_class: MachineClass, facts: Any) -> int:
            if fleet.fail_with is not None:
                raise fleet.fail_with
            return original(bucket, machine_class, facts)

        self.write_facts = write_facts

    def names(self) -> list[str]:
        return [blob.name for blob in self.bucket.client.list_blobs(self.bucket, prefix="fleet/")]


@pytest.fixture
def fleet(monkeypatch: pytest.MonkeyPatch) -> Fleet:
    made = Fleet()
    monkeypatch.setattr(store, "write_facts", made.write_facts)
    return made


def test_a_decision_writes_what_it_added_under_the_requests_class(fleet: Fleet) -> None:
    ran = record(spot(started_at=at(30), preemptions=1))
    note_fleet(fleet.ports, None, ran, Reading(), T0, fleet.log.logger)
    assert len(fleet.names()) == 2
    assert all(name.startswith("fleet/a3-highgpu-8g+nvidia_h100_80gb+8/us-east4/") for name in fleet.names())


def test_a_request_without_a_class_or_with_nothing_new_writes_nothing(fleet: Fleet) -> None:
    fleet.fail_with = AssertionError("no write expected")
    cpu_less = record(spot(started_at=at(30)), request={"custom_job": {}})
    note_fleet(fleet.ports, None, cpu_less, Reading(), T0, fleet.log.logger)
    on_demand = record(
        Attempt(1, "us-east4", "STANDARD", claimed_at=at(0), job="j1", created_at=at(0), started_at=at(5))
    )
    note_fleet(fleet.ports, fleet_facts(on_demand, Reading()), on_demand, Reading(), T0, fleet.log.logger)
    assert fleet.names() == []


@pytest.mark.parametrize("error", [ServiceUnavailable("busy"), Forbidden("no write on fleet/")])
def test_a_failed_write_loses_the_facts_with_a_warning_not_the_delivery(fleet: Fleet, error: Exception) -> None:
    fleet.fail_with = error
    note_fleet(fleet.ports, None, record(spot(started_at=at(30))), Reading(), T0, fleet.log.logger)
    warnings = [line for line in fleet.log.lines if line["message"] == "fleet observations not recorded"]
    assert [(w["severity"], w["request_id"]) for w in warnings] == [("WARNING", "r1")]


def test_a_bug_in_the_write_is_not_swallowed(fleet: Fleet) -> None:
    fleet.fail_with = KeyError("a bug")
    with pytest.raises(KeyError):
        note_fleet(fleet.ports, None, record(spot(started_at=at(30))), Reading(), T0, fleet.log.logger)


def test_an_attempts_key_is_hashed_once_however_often_its_record_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.fleet import observations

    hashed: list[bytes] = []
    sha256 = hashlib.sha256
    monkeypatch.setattr(observations.hashlib, "sha256", lambda data: hashed.append(data) or sha256(data))
    first = attempt_key("req-hashed-once", 2)
    assert attempt_key("req-hashed-once", 2) == first == f"{sha256(b'req-hashed-once').hexdigest()[:16]}-2"
    assert hashed == [b"req-hashed-once"]
