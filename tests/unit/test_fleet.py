"""Fleet observations (shared/fleet): what a record tells, written once per fact, read in one
listing, and the capacity estimate on scripted observations."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.fleet import store
from shared.fleet.estimate import OPEN_WAIT_GRACE_SECONDS, SpotOutlook, changeover_bound, estimate, upper_bound
from shared.fleet.observations import FleetFact, Kind, MachineClass, Reading, observations_of
from shared.fleet.recording import fleet_facts, new_facts
from shared.ledger.records import Attempt, RequestRecord
from sim.gcs import MemoryStorage

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
H100 = MachineClass("a3-highgpu-8g", "NVIDIA_H100_80GB", 8)
JOB = {
    "custom_job": {
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {
                        "machineType": "a3-highgpu-8g",
                        "acceleratorType": "NVIDIA_H100_80GB",
                        "acceleratorCount": 8,
                    }
                }
            ]
        }
    }
}


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def record(*attempts: Attempt) -> RequestRecord:
    return RequestRecord("r1", JOB, "gs://c/r1", attempts=list(attempts))


def spot(n: int = 1, **fields: Any) -> Attempt:
    return Attempt(n, "us-east4", "SPOT", claimed_at=at(0), job=f"j{n}", created_at=at(0), **fields)


def kinds(observations: list[FleetFact]) -> list[tuple[str, float, int]]:
    return sorted((o.kind.value, o.seconds, o.index) for o in observations)


def test_the_class_is_the_first_pools_machine_and_accelerators() -> None:
    assert MachineClass.of_request(JOB) == H100
    assert MachineClass.from_key(H100.key).key == H100.key  # names are lower case
    assert H100.key == "a3-highgpu-8g+nvidia_h100_80gb+8"


def test_a_record_tells_waits_runs_preemptions_changeovers_and_stockouts() -> None:
    waiting = record(spot())
    assert kinds(observations_of(waiting)) == [("waiting", 0.0, 0)]
    ran = record(
        spot(started_at=at(30), ended_at=at(150), preemptions=2, error={"code": 8, "message": "STOCKOUT"}),
        Attempt(2, "us-central1", "STANDARD", claimed_at=at(150), job="j2", created_at=at(151), started_at=at(161)),
        spot(3, ended_at=at(40), outcome="switched_to_on_demand"),
    )
    assert kinds(observations_of(ran)) == [
        ("changeover", 600.0, 0),
        ("nocap", 2400.0, 0),
        ("preempt", 0.0, 0),
        ("preempt", 0.0, 1),
        ("run", 7200.0, 0),
        ("stockout", 0.0, 0),
        ("wait", 1800.0, 0),
        ("waiting", 0.0, 0),
    ]


def test_a_decision_records_only_what_it_added_and_the_waits_again() -> None:
    now = T0 + timedelta(hours=3)
    before = record(spot(started_at=at(30)))
    after = record(spot(started_at=at(30), preemptions=1))
    added = new_facts(fleet_facts(before, Reading()), after, Reading(), now)
    # The preemption stamped when first recorded; the wait's close again, at its own time.
    assert sorted((o.kind, o.at) for o in added) == [(Kind.PREEMPT, now), (Kind.WAIT, T0 + timedelta(minutes=30))]
    still_waiting = record(spot())
    again = new_facts(fleet_facts(still_waiting, Reading()), still_waiting, Reading(), now)
    assert [o.kind for o in again] == [Kind.WAITING]


@pytest.mark.parametrize(
    ("closed_by", "later"),
    [
        (spot(started_at=at(30)), spot(started_at=at(30), preemptions=1)),  # its `wait` lost
        (
            spot(ended_at=at(40), outcome="switched_to_on_demand"),
            spot(ended_at=at(40), outcome="switched_to_on_demand"),
        ),
    ],
)
def test_a_wait_whose_closing_fact_was_lost_is_closed_by_a_later_decision(closed_by: Attempt, later: Attempt) -> None:
    """The decision that saw the Spot job run (or end without running) wrote the record and lost
    the fact that closes its wait (an advisory write failed, the delivery died between the two, the
    write's reply was lost): the open wait would say no capacity until it left the window. A later
    decision on the record (the next attempt's, a redelivery) writes it, once."""
    bucket = Bucket()
    now = T0 + timedelta(hours=3)
    store.write_facts(bucket, H100, new_facts(None, record(spot()), Reading(), T0))
    assert estimate(store.read(bucket, H100, now), "us-east4", now).open_waits == 1
    seen = fleet_facts(record(closed_by), Reading())  # the record as the lost write left it
    next_attempt = Attempt(2, "us-east4", "STANDARD", claimed_at=at(41), job="j2", created_at=at(41))

    store.write_facts(bucket, H100, new_facts(seen, record(later, next_attempt), Reading(), now))

    assert estimate(store.read(bucket, H100, now), "us-east4", now).open_waits == 0
    names, uploads = len(bucket.names), bucket.uploads
    store.write_facts(bucket, H100, new_facts(seen, record(later, next_attempt), Reading(), now))
    assert (len(bucket.names), bucket.uploads) == (names, uploads)  # written once, not asked for again


@dataclass
class Blob:
    name: str


@dataclass(eq=False)  # one per process: its client is what a process remembers facts by
class Bucket:
    """Just what shared.fleet.store calls: create-once uploads and a prefix listing."""

    name: str = "state"
    names: set[str] = field(default_factory=set)
    uploads: int = 0
    listings: int = 0

    @property
    def client(self) -> Bucket:
        return self

    def blob(self, name: str) -> Any:
        bucket = self

        class Upload:
            def upload_from_string(self, data: bytes, content_type: str, if_generation_match: int) -> None:
                from google.api_core.exceptions import PreconditionFailed

                bucket.uploads += 1
                if if_generation_match == 0 and name in bucket.names:
                    raise PreconditionFailed(name)
                bucket.names.add(name)

        return Upload()

    def list_blobs(self, bucket: Any, prefix: str, **_: Any) -> list[Blob]:
        self.listings += 1
        return [Blob(n) for n in sorted(self.names) if n.startswith(prefix)]


def test_each_fact_is_written_once_and_a_window_is_read_in_one_listing() -> None:
    bucket = Bucket()
    facts = [
        FleetFact(Kind.WAIT, "us-east4", T0, 1800.0, attempt_key="k-1"),
        FleetFact(Kind.PREEMPT, "us-east4", T0 + timedelta(hours=2), attempt_key="k-1"),
        FleetFact(Kind.NO_CAPACITY, "europe-west3", T0 - timedelta(days=9), 600.0, attempt_key="k-2"),
    ]
    assert store.write_facts(bucket, H100, facts) == 3
    assert store.write_facts(bucket, H100, facts) == 0  # a redelivery: every name is there
    assert len(bucket.names) == 3
    read = store.read(bucket, H100, T0 + timedelta(hours=3))
    assert bucket.listings == 1
    assert sorted((o.kind, o.location, o.at, o.seconds) for o in read) == sorted(
        (o.kind, o.location, o.at, o.seconds) for o in facts[:2]
    )  # the one older than the window is left out


def observation(
    kind: Kind, minutes_ago: float, key: str, seconds: float = 0.0, location: str = "us-east4"
) -> FleetFact:
    return FleetFact(kind, location, NOW - timedelta(minutes=minutes_ago), seconds, attempt_key=key)


NOW = T0 + timedelta(days=1)


def test_with_no_evidence_capacity_is_unknown() -> None:
    assert estimate([], "us-east4", NOW).has_capacity is None
    # evidence from elsewhere says nothing about here
    assert estimate([observation(Kind.WAIT, 5, "a", location="us-west1")], "us-east4", NOW).has_capacity is None


def test_a_job_running_on_spot_now_says_there_is_capacity() -> None:
    found = estimate([observation(Kind.WAIT, 60, "a", seconds=300)], "us-east4", NOW)
    assert found.has_capacity is True
    assert found.mean_lifetime_seconds == 3600.0 and found.lifetime_censored  # a lower bound
    assert found.median_wait_seconds == 300.0


def test_a_wait_open_past_the_grace_says_there_is_none() -> None:
    fresh = estimate([observation(Kind.WAITING, OPEN_WAIT_GRACE_SECONDS / 60 - 1, "a")], "us-east4", NOW)
    assert fresh.has_capacity is None and fresh.open_waits == 1  # still provisioning, perhaps
    stale = estimate([observation(Kind.WAITING, 60, "a")], "us-east4", NOW)
    assert stale.has_capacity is False


def test_recent_evidence_outweighs_old() -> None:
    old_yes = [observation(Kind.WAIT, 600, f"y{i}") for i in range(3)] + [
        observation(Kind.RUN, 300, f"y{i}", seconds=18000) for i in range(3)
    ]
    new_no = [observation(Kind.NO_CAPACITY, 10, "n", seconds=3600)]
    assert estimate(old_yes + new_no, "us-east4", NOW).has_capacity is False
    assert estimate(old_yes, "us-east4", NOW).has_capacity is None  # five hours old: too faint


def test_the_mean_lifetime_is_the_time_on_spot_over_the_preemptions() -> None:
    facts = [
        observation(Kind.WAIT, 300, "a"),
        observation(Kind.PREEMPT, 240, "a"),
        replace(observation(Kind.PREEMPT, 100, "a"), index=1),  # its second: one index each
        FleetFact(Kind.RUN, "us-east4", NOW - timedelta(minutes=60), 12000.0, 2, "a"),
        observation(Kind.WAIT, 30, "b"),  # running: 30 more minutes on Spot, no preemption yet
    ]
    found = estimate(facts, "us-east4", NOW)
    assert found.mean_lifetime_seconds == (12000.0 + 1800.0) / 2
    assert not found.lifetime_censored
    assert found.has_capacity is True  # b runs now


def test_the_outlook_kept_for_the_deadline_rule_is_the_share_and_the_lifetime() -> None:
    assert estimate([], "us-east4", NOW).outlook is None  # never on Spot there: nothing to weigh
    facts = [
        observation(Kind.WAIT, 300, "a", seconds=1800),
        observation(Kind.PREEMPT, 240, "a"),
        FleetFact(Kind.RUN, "us-east4", NOW - timedelta(minutes=60), 12000.0, 1, "a"),
    ]
    found = estimate(facts, "us-east4", NOW)
    outlook = found.outlook
    assert outlook is not None
    assert outlook.mean_lifetime_seconds == 12000.0
    assert outlook.share_available == pytest.approx(found.share_available, abs=1e-4)
    # share = lifetime / (lifetime + outage): the mean outage
    share = outlook.share_available
    assert outlook.expected_wait_seconds == pytest.approx(12000.0 * (1 - share) / share)
    assert SpotOutlook(1.0, 5000.0).expected_wait_seconds == 0.0
    assert SpotOutlook(0.0, 5000.0).expected_wait_seconds > 1e6  # never capacity: no end in sight
    # kept in the attempt as JSON; anything else read back is no outlook
    assert SpotOutlook.from_json(outlook.to_json()) == outlook
    assert SpotOutlook.from_json(None) is None
    assert SpotOutlook.from_json({"share_available": "x", "mean_lifetime_seconds": 1.0}) is None


def test_the_lifecycle_rule_outlives_the_window() -> None:
    assert store.RETENTION_DAYS * 86400 > store.ESTIMATE_WINDOW_SECONDS


def test_spotjobs_fleet_shows_each_class_and_location() -> None:
    from spotjobs.cli.fleet import fleet_rows, render

    observed = {
        H100: [
            observation(Kind.WAIT, 90, "a", seconds=600),
            observation(Kind.PREEMPT, 30, "a"),
            observation(Kind.WAITING, 60, "b", location="us-west1"),
        ]
    }
    rows = fleet_rows(observed, NOW, lambda machine, location: (14.85, 82.53) if location == "us-east4" else None)
    assert [(r["location"], r["has_capacity"], r["spot_per_hour"]) for r in rows] == [
        ("us-east4", False, 14.85),  # preempted half an hour ago, restarting without capacity since
        ("us-west1", False, None),
    ]
    assert rows[0]["mean_lifetime_seconds"] == 5400.0 and rows[0]["median_wait_seconds"] == 600.0
    text = render(rows)
    assert "us-east4" in text and "1.5 h" in text and "10 min" in text and "82.53" in text


def test_a_restart_the_kit_saw_is_a_fact_and_says_the_run_has_capacity_again() -> None:
    ran = record(spot(started_at=at(30), preemptions=1))
    reading = Reading(runs_started=lambda record, n: {0, 1})
    assert ("restart", 0.0, 1) in kinds(observations_of(ran, reading))
    preempted = [observation(Kind.WAIT, 300, "a"), observation(Kind.PREEMPT, 60, "a")]
    assert estimate(preempted, "us-east4", NOW).has_capacity is False  # restarting for an hour
    restarted = [*preempted, observation(Kind.RESTART, 50, "a")]
    assert estimate(restarted, "us-east4", NOW).has_capacity is True


def test_the_share_of_time_with_capacity_counts_waits_and_restart_waits_against_time_on_spot() -> None:
    facts = [
        observation(Kind.WAIT, 240, "a", seconds=1800),  # waited 30 min, then ran from 4 h ago
        observation(Kind.PREEMPT, 180, "a"),
        observation(Kind.RESTART, 120, "a"),  # an hour without capacity
        FleetFact(Kind.RUN, "us-east4", NOW, 4 * 3600.0, 1, "a"),
    ]
    found = estimate(facts, "us-east4", NOW)
    on_spot, waited, prior = 3 * 3600, 1800 + 3600, 3600
    assert found.share_available == pytest.approx((on_spot + prior / 2) / (on_spot + waited + prior))
    assert estimate([], "us-east4", NOW).share_available == 0.5


# The fleet's changeover bound (shared/fleet/estimate.py): what a deadline's d covers.


def lognormal_changeovers(n: int) -> list[float]:
    """n changeovers at the evenly spaced quantiles of the event bench's lognormal (median 8 min, p90 15 min)."""
    from statistics import NormalDist

    sigma = math.log(900 / 480) / NormalDist().inv_cdf(0.9)
    return [480 * math.exp(sigma * NormalDist().inv_cdf((i + 0.5) / n)) for i in range(n)]


def test_with_fewer_than_45_changeovers_the_bound_is_their_largest() -> None:
    # 1 - 0.95^44 < 0.9: no order statistic of 44 bounds the p95 with 90% confidence.
    assert upper_bound([600.0, 900.0, 300.0], 0.95, 0.9) == 900.0
    assert upper_bound([float(i) for i in range(1, 45)], 0.95, 0.9) == 44.0
    assert upper_bound([], 0.95, 0.9) is None


def test_with_many_changeovers_the_bound_is_the_order_statistic_above_the_p95_with_90_percent() -> None:
    # P(at most 98 of 100 below the p95) = 0.963 >= 0.9, at most 97: 0.882: the 99th of 100.
    assert upper_bound([float(i) for i in range(1, 101)], 0.95, 0.9) == 99.0
    assert upper_bound([float(i) for i in range(1, 201)], 0.95, 0.9) == 195.0
    assert upper_bound([float(i) for i in range(1, 501)], 0.95, 0.9) == 482.0
    assert (
        upper_bound([float(i) for i in range(1, 20_001)], 0.95, 0.9) == 19_040.0
    )  # no underflow: 19,000 + 1.28 sd (30.8) + 1


def test_the_bound_stays_under_the_prior_without_a_tail_and_rises_into_one() -> None:
    plain = lognormal_changeovers(500)
    assert 1080 < upper_bound(plain, 0.95, 0.9) < 1200  # the p95 is 1,076 s
    tailed = plain[:475] + [2700.0 + 100 * i for i in range(25)]  # 5% from 45 min up
    assert upper_bound(tailed, 0.95, 0.9) >= 2700


def test_the_changeover_bound_reads_the_locations_on_demand_changeovers_seen_by_now() -> None:
    facts = [
        FleetFact(Kind.CHANGEOVER, "us-east4", T0 - timedelta(hours=i + 1), s, attempt_key=str(i))
        for i, s in enumerate((500.0, 4000.0))
    ]
    facts += [
        FleetFact(Kind.CHANGEOVER, "us-central1", T0, 9000.0),  # another location
        FleetFact(Kind.WAIT, "us-east4", T0, 9000.0),  # a Spot wait, no changeover
        FleetFact(Kind.CHANGEOVER, "us-east4", T0 + timedelta(hours=1), 9000.0),  # after now
    ]
    assert changeover_bound(facts, "us-east4", T0) == 4000.0
    assert changeover_bound(facts, "europe-west4", T0) is None


def counted_storage() -> tuple[MemoryStorage, list[str]]:
    """An in-memory store (a client of it per process) and the operations of its I/O calls."""
    calls: list[str] = []

    def io(_service: str, operation: str, perform: Any) -> Any:
        calls.append(operation)
        return perform()

    return MemoryStorage(clock=lambda: T0, io=io), calls


def test_a_process_writes_no_fact_again_that_it_wrote_or_found_written() -> None:
    storage, calls = counted_storage()
    bucket = storage.client().bucket("state")
    waiting = [FleetFact(Kind.WAITING, "us-east4", T0, attempt_key="k-1")]
    assert store.write_facts(bucket, H100, waiting) == 1
    assert store.write_facts(bucket, H100, waiting) == 0  # the open wait seen again
    assert calls == ["write"]
    another_process = storage.client().bucket("state")
    assert store.write_facts(another_process, H100, waiting) == 0  # refused: it is there
    assert store.write_facts(another_process, H100, waiting) == 0  # and now known
    assert calls == ["write", "write"]


def test_a_process_remembers_a_bounded_number_of_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "FACTS_KEPT", 2)
    storage, calls = counted_storage()
    bucket = storage.client().bucket("state")
    facts = [FleetFact(Kind.WAITING, "us-east4", T0, attempt_key=f"k-{n}") for n in range(3)]
    assert store.write_facts(bucket, H100, facts) == 3
    assert store.write_facts(bucket, H100, facts[1:]) == 0
    assert len(calls) == 3
    assert store.write_facts(bucket, H100, facts[:1]) == 0  # forgotten: asked again, refused
    assert len(calls) == 4


def test_a_failed_upload_loses_only_its_own_fact_and_is_raised_after_the_rest() -> None:
    """One 503 among a decision's facts: every other fact is still written, then the failure is
    raised (`note_fleet` logs it); asked again, only the lost fact is written (the others are
    known by name)."""
    from google.api_core.exceptions import ServiceUnavailable

    uploads: list[str] = []

    def io(_service: str, operation: str, perform: Any) -> Any:
        uploads.append(operation)
        if len(uploads) == 1:
            raise ServiceUnavailable("the first upload")
        return perform()

    bucket: Any = MemoryStorage(clock=lambda: T0, io=io).client().bucket("state")
    facts = [
        FleetFact(Kind.WAIT, "us-east4", T0, 1800.0, attempt_key="k-1"),
        FleetFact(Kind.PREEMPT, "us-east4", T0 + timedelta(hours=1), attempt_key="k-1"),
        FleetFact(Kind.RUN, "us-east4", T0 + timedelta(hours=2), 7200.0, 1, attempt_key="k-1"),
    ]
    with pytest.raises(ServiceUnavailable):
        store.write_facts(bucket, H100, facts)
    assert sorted(o.kind for o in store.read(bucket, H100, T0 + timedelta(hours=3))) == [Kind.PREEMPT, Kind.RUN]

    assert store.write_facts(bucket, H100, facts) == 1  # the redelivery: only the lost one
    assert sorted(o.kind for o in store.read(bucket, H100, T0 + timedelta(hours=3))) == sorted(o.kind for o in facts)
    assert uploads.count("write") == 4
