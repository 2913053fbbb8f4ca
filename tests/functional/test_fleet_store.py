"""The fleet observations on a real GCS API (fake-gcs-server): written once per fact, every class
found by one delimiter listing, a class's window read in one listing, `spotjobs fleet`'s rows
from them, and old attempts compacted without changing the estimate."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from shared.fleet import store
from shared.fleet.estimate import changeover_bound, estimate, summarize
from shared.fleet.observations import FleetFact, Kind, MachineClass
from spotjobs.cli.fleet import fleet_rows

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
H100 = MachineClass("a3-highgpu-8g", "NVIDIA_H100_80GB", 8)
A100 = MachineClass("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1)


def test_facts_round_trip_through_the_bucket(gcs_bucket) -> None:
    facts = [
        FleetFact(Kind.WAIT, "us-east4", NOW - timedelta(minutes=90), 600.0, attempt_key="k-1"),
        FleetFact(Kind.PREEMPT, "us-east4", NOW - timedelta(minutes=30), attempt_key="k-1"),
        FleetFact(Kind.WAITING, "us-central1", NOW - timedelta(minutes=60), attempt_key="k-2"),
    ]
    assert store.write_facts(gcs_bucket, H100, facts) == 3
    assert store.write_facts(gcs_bucket, H100, facts) == 0
    store.write_facts(gcs_bucket, A100, [FleetFact(Kind.WAIT, "us-central1", NOW, 60.0, attempt_key="k-3")])

    assert [c.key for c in store.classes(gcs_bucket)] == [A100.key, H100.key]
    read = store.read(gcs_bucket, H100, NOW)
    assert sorted((o.kind, o.location, o.at, o.seconds) for o in read) == sorted(
        (o.kind, o.location, o.at, o.seconds) for o in facts
    )
    rows = fleet_rows({H100: read}, NOW, lambda machine, location: None)
    assert [(r["location"], r["has_capacity"], r["open_waits"]) for r in rows] == [
        ("us-central1", False, 1),
        ("us-east4", False, 0),
    ]


def spot_attempt(key: str, location: str, began: datetime, *, run_hours: float, preempted: int) -> list[FleetFact]:
    """A Spot attempt that waited 10 minutes, ran `run_hours` with `preempted` preemptions, each
    back after 20 minutes, and ended."""
    got = began + timedelta(minutes=10)
    facts = [
        FleetFact(Kind.WAITING, location, began, attempt_key=key),
        FleetFact(Kind.WAIT, location, got, 600.0, attempt_key=key),
    ]
    for k in range(preempted):
        at = got + timedelta(hours=1 + 2 * k)
        facts.append(FleetFact(Kind.PREEMPT, location, at, attempt_key=key, index=k))
        facts.append(FleetFact(Kind.RESTART, location, at + timedelta(minutes=20), attempt_key=key, index=k + 1))
    ended = got + timedelta(hours=run_hours)
    facts.append(FleetFact(Kind.RUN, location, ended, run_hours * 3600, preempted, attempt_key=key))
    return facts


def fleet_history() -> list[FleetFact]:
    return [
        *spot_attempt("old-1", "us-east4", NOW - timedelta(days=3), run_hours=10, preempted=3),
        *spot_attempt("old-2", "us-east4", NOW - timedelta(days=2), run_hours=6, preempted=2),
        # a wait that found nothing, and an on-demand attempt's changeover, both two days ago
        FleetFact(Kind.WAITING, "us-central1", NOW - timedelta(days=2, hours=1), attempt_key="old-3"),
        FleetFact(Kind.NO_CAPACITY, "us-central1", NOW - timedelta(days=2), 3600.0, attempt_key="old-3"),
        FleetFact(Kind.CHANGEOVER, "us-central1", NOW - timedelta(days=2), 900.0, attempt_key="old-4"),
        # closed an hour ago, and still running: both stay facts
        *spot_attempt("recent", "us-east4", NOW - timedelta(hours=5), run_hours=4, preempted=1),
        FleetFact(Kind.WAITING, "us-east4", NOW - timedelta(hours=3), attempt_key="open"),
        FleetFact(Kind.WAIT, "us-east4", NOW - timedelta(hours=2, minutes=50), 600.0, attempt_key="open"),
    ]


def estimates_of(bucket) -> dict[str, dict[str, object]]:
    facts = store.read(bucket, H100, NOW)
    return {
        location: {**estimate(facts, location, NOW).to_json(), "bound": changeover_bound(facts, location, NOW)}
        for location in ("us-east4", "us-central1")
    }


def names(bucket) -> list[str]:
    return sorted(blob.name.rsplit("/", 1)[1] for blob in bucket.list_blobs(prefix="fleet/"))


def test_attempts_closed_a_day_ago_fold_into_one_object_each_and_the_estimate_does_not_change(gcs_bucket) -> None:
    store.write_facts(gcs_bucket, H100, fleet_history())
    before = estimates_of(gcs_bucket)
    assert len(names(gcs_bucket)) == 9 + 7 + 2 + 1 + 5 + 2

    assert store.compact(gcs_bucket, H100, NOW) == 4
    left = names(gcs_bucket)
    assert len(left) == 4 + 5 + 2  # one per old attempt; the recent and the open ones' facts
    assert sum(name.startswith("attempt~") for name in left) == 4
    assert not any("~old-" in name for name in left if not name.startswith("attempt~"))
    # The same estimate: the sums kept, the evidence of days ago weighed nothing already.
    assert estimates_of(gcs_bucket) == before
    # A second run folds nothing more, and a late write of an old fact is not counted, then deleted.
    assert store.compact(gcs_bucket, H100, NOW) == 0
    late = FleetFact(Kind.PREEMPT, "us-east4", NOW - timedelta(days=3), attempt_key="old-1", index=7)
    assert store.write_facts(gcs_bucket, H100, [late]) == 1
    assert estimates_of(gcs_bucket) == before
    assert store.compact(gcs_bucket, H100, NOW) == 0
    assert names(gcs_bucket) == left


def test_a_run_that_died_between_the_summary_and_the_deletes_counts_nothing_twice(gcs_bucket) -> None:
    history = fleet_history()
    store.write_facts(gcs_bucket, H100, history)
    before = estimates_of(gcs_bucket)
    old = [f for f in history if f.attempt_key == "old-1"]
    summary = FleetFact(
        Kind.ATTEMPT, "us-east4", max(f.at for f in old), attempt_key="old-1", summary=summarize(old, NOW)
    )
    store.write_facts(gcs_bucket, H100, [summary])  # the summary written, its facts not deleted yet
    assert estimates_of(gcs_bucket) == before
    assert store.compact(gcs_bucket, H100, NOW) == 3  # old-1's facts deleted, not folded again
    assert sum(name.startswith("attempt~") for name in names(gcs_bucket)) == 4
    assert estimates_of(gcs_bucket) == before


def test_a_multi_replica_attempt_compacts_with_its_replicas_and_the_same_per_vm_lifetime(gcs_bucket) -> None:
    # two replicas for 10 h, three VMs reclaimed, each back in 20 min: 18 VM-hours ran, over 3 (issue 44)
    two_vms = [
        replace(f, replicas=2) if f.kind in (Kind.WAIT, Kind.RUN) else f
        for f in spot_attempt("pair", "us-east4", NOW - timedelta(days=3), run_hours=10, preempted=3)
    ]
    store.write_facts(gcs_bucket, H100, two_vms)
    before = estimates_of(gcs_bucket)
    assert before["us-east4"]["mean_lifetime_seconds"] == round(18 * 3600 / 3, 1)
    assert store.compact(gcs_bucket, H100, NOW) == 1
    (folded,) = names(gcs_bucket)
    assert folded.startswith("attempt~") and folded.endswith("~2~3600")  # its replicas, its answered waits
    assert estimates_of(gcs_bucket) == before
