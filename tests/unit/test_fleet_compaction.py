"""The fleet observations in the state bucket (shared/fleet/store.py) on the simulator's in-memory
storage with the test's clock: names that hold the whole fact and what is not one, the window's
edge, each fact written once, the compaction's day, and two compactions at once or another run's
deletes between a listing and a delete, counting nothing twice."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.fleet import store
from shared.fleet.estimate import estimate
from shared.fleet.observations import AttemptSummary, FleetFact, Kind, MachineClass
from sim.gcs import MemoryStorage

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
DAY = timedelta(days=1)
H100 = MachineClass("a3-highgpu-8g", "NVIDIA_H100_80GB", 8)
CPU = MachineClass("n1-standard-8")
ROOT = Path(__file__).resolve().parents[2]


def bucket() -> Any:
    return MemoryStorage(clock=lambda: NOW).client().bucket("state")


def names(state: Any) -> list[str]:
    return [blob.name.rsplit("/", 1)[1] for blob in state.client.list_blobs(state, prefix="fleet/")]


def closed_spot(key: str, ended: datetime, location: str = "us-east4") -> list[FleetFact]:
    """A Spot attempt that waited 10 min, ran two hours with one preemption, and ended at `ended`."""
    began = ended - timedelta(hours=2)
    return [
        FleetFact(Kind.WAITING, location, began - timedelta(minutes=10), attempt_key=key),
        FleetFact(Kind.WAIT, location, began, 600.0, attempt_key=key),
        FleetFact(Kind.PREEMPT, location, began + timedelta(hours=1), attempt_key=key),
        FleetFact(Kind.RUN, location, ended, 7200.0, 1, attempt_key=key),
    ]


# Names.


def test_a_name_holds_the_whole_fact_and_a_summary_its_sums() -> None:
    fact = FleetFact(Kind.RUN, "us-east4", NOW, 7200.4, 2, "k-1", 0)
    name = store.object_name(H100, fact)
    assert name == f"fleet/a3-highgpu-8g+nvidia_h100_80gb+8/us-east4/run~{int(NOW.timestamp())}~7200~2~k-1~0"
    parsed = store.parse_name(name)
    assert parsed is not None and parsed[0].key == H100.key  # a class is read back by its key (lower case)
    assert parsed[1] == FleetFact(Kind.RUN, "us-east4", NOW, 7200.0, 2, "k-1", 0)
    summary = AttemptSummary(exposure=7200, waited=600, preemptions=1, restart_waits=300, wait=None, changeover=900)
    folded = FleetFact(Kind.ATTEMPT, "us-east4", NOW, attempt_key="k-1", summary=summary)
    name = store.object_name(CPU, folded)
    assert name.endswith(f"/us-east4/attempt~{int(NOW.timestamp())}~k-1~7200~600~1~300~-~900")
    assert store.parse_name(name) == (CPU, folded)


@pytest.mark.parametrize(
    "name",
    [
        "fleet/a3+none+0/us-east4/run~1~2~3~k",  # a part missing
        "fleet/a3+none+0/us-east4/sunny~1~2~3~k~0",  # no such kind
        "fleet/a3+none+0/us-east4/attempt~1~k~1~2~3~4~5",  # a summary's part missing
        "fleet/a3+none+0/us-east4/attempt~1~k~1~2~3~4~5~x",
        "fleet/a3+none/us-east4/wait~1~2~3~k~0",  # not a class's key
        "fleet/a3+none+0/us-east4",
        "fleet/a3+none+0/us-east4/wait~100000000000000000000~2~3~k~0",  # past any calendar (overflow)
        "fleet/a3+none+0/us-east4/wait~1000000000000~2~3~k~0",  # the year 33658
        "fleet/a3+none+0/us-east4/wait~4611686018427387904~2~3~k~0",  # too large for the platform's time
    ],
)
def test_a_name_not_of_the_format_is_no_fact(name: str) -> None:
    assert store.parse_name(name) is None


def test_the_lifecycle_rule_deletes_observations_a_day_past_the_window() -> None:
    storage_tf = (ROOT / "terraform" / "storage.tf").read_text()
    rule = re.search(r'age\s*=\s*(\d+)\s*\n\s*matches_prefix\s*=\s*\["fleet/"\]', storage_tf)
    assert rule is not None and int(rule.group(1)) == store.RETENTION_DAYS
    # what it deletes the reader left out a day before: nothing read is ever missing
    state = bucket()
    retained = timedelta(days=store.RETENTION_DAYS)
    kept = [
        FleetFact(Kind.WAIT, "us-east4", NOW - retained + DAY, 60.0, attempt_key="read"),
        FleetFact(Kind.WAIT, "us-east4", NOW - retained + DAY - timedelta(seconds=1), 60.0, attempt_key="not"),
    ]
    store.write_facts(state, H100, kept)
    assert [o.attempt_key for o in store.read(state, H100, NOW)] == ["read"]


# Writing and reading.


def test_each_fact_is_written_once_and_a_repeated_one_does_not_stop_the_rest() -> None:
    state = bucket()
    first = FleetFact(Kind.WAIT, "us-east4", NOW - DAY, 60.0, attempt_key="k-1")
    assert store.write_facts(state, H100, [first]) == 1
    later = [FleetFact(Kind.PREEMPT, "us-east4", NOW, attempt_key="k-1", index=i) for i in range(2)]
    assert store.write_facts(state, H100, [first, *later]) == 2
    assert len(names(state)) == 3


def test_the_window_is_the_last_week_to_the_second() -> None:
    state = bucket()
    week = timedelta(days=7)
    edge = FleetFact(Kind.WAIT, "us-east4", NOW - week, 60.0, attempt_key="edge")
    out = FleetFact(Kind.WAIT, "us-east4", NOW - week - timedelta(seconds=1), 60.0, attempt_key="out")
    store.write_facts(state, H100, [edge, out])
    assert [o.attempt_key for o in store.read(state, H100, NOW)] == ["edge"]


def test_a_class_reads_only_its_own_observations_and_skips_names_of_another_format() -> None:
    state = bucket()
    store.write_facts(state, H100, [FleetFact(Kind.WAIT, "us-east4", NOW, 60.0, attempt_key="h")])
    store.write_facts(state, CPU, [FleetFact(Kind.WAIT, "us-east4", NOW, 60.0, attempt_key="c")])
    state.blob(f"fleet/{H100.key}/us-east4/README").upload_from_string(b"notes")
    assert [o.attempt_key for o in store.read(state, H100, NOW)] == ["h"]
    assert store.compact(state, H100, NOW) == 0


def test_a_class_folder_of_another_name_is_passed_over() -> None:
    state = bucket()
    store.write_facts(state, CPU, [FleetFact(Kind.WAIT, "us-east4", NOW, 60.0, attempt_key="c")])
    store.write_facts(state, H100, [FleetFact(Kind.WAIT, "us-east4", NOW, 60.0, attempt_key="h")])
    state.blob("fleet/made-by-hand/notes").upload_from_string(b"")
    assert [c.key for c in store.classes(state)] == [H100.key, CPU.key]


# Compaction.


def test_an_attempt_closed_exactly_a_day_ago_is_folded_and_one_a_second_younger_is_not() -> None:
    state = bucket()
    store.write_facts(state, H100, closed_spot("day", NOW - DAY))
    store.write_facts(state, H100, closed_spot("young", NOW - DAY + timedelta(seconds=1)))
    assert store.compact(state, H100, NOW) == 1
    left = names(state)
    assert sum(name.startswith("attempt~") for name in left) == 1
    facts = [name for name in left if not name.startswith("attempt~")]
    assert len(facts) == 4 and all("~young~" in name for name in facts)


def test_an_attempt_still_open_is_not_folded_however_old() -> None:
    state = bucket()
    open_for_days = closed_spot("open", NOW - 3 * DAY)[:3]  # no run: still going
    store.write_facts(state, H100, open_for_days)
    assert store.compact(state, H100, NOW) == 0
    assert len(names(state)) == 3


def test_an_attempt_not_due_does_not_hold_back_the_rest() -> None:
    state = bucket()
    # listed first (its location sorts first): a recent attempt, an open one, an old summary
    store.write_facts(state, H100, closed_spot("recent", NOW - timedelta(hours=1), location="asia-east1"))
    store.write_facts(state, H100, closed_spot("open", NOW - 3 * DAY, location="asia-south1")[:3])
    store.write_facts(state, H100, closed_spot("folded", NOW - 3 * DAY, location="europe-west4"))
    assert store.compact(state, H100, NOW) == 1
    store.write_facts(state, H100, closed_spot("old", NOW - 2 * DAY))
    assert store.compact(state, H100, NOW) == 1
    assert sum(name.startswith("attempt~") for name in names(state)) == 2


def test_several_attempts_due_are_all_folded_and_counted() -> None:
    state = bucket()
    for key in ("a", "b", "c"):
        store.write_facts(state, H100, closed_spot(key, NOW - 2 * DAY))
    assert store.compact(state, H100, NOW) == 3
    assert sorted(names(state)) == sorted(n for n in names(state) if n.startswith("attempt~"))


class Racing:
    """A bucket whose `when`-th call of `operation` first lets `act` run (another instance acting
    between this one's listing and its writes)."""

    def __init__(self, state: Any, operation: str, act: Callable[[], None]) -> None:
        self._state, self._operation, self._act = state, operation, act
        self.client = self

    def list_blobs(self, bucket: Any, **kwargs: Any) -> Any:
        listing = list(self._state.client.list_blobs(self._state, **kwargs))
        if self._operation == "list":
            self._act()
        return listing

    def blob(self, name: str) -> Any:
        return self._state.blob(name)


def estimate_of(state: Any) -> dict[str, object]:
    return estimate(store.read(state, H100, NOW), "us-east4", NOW).to_json()


def test_two_compactions_at_once_fold_each_attempt_once() -> None:
    state = bucket()
    store.write_facts(state, H100, closed_spot("a", NOW - 2 * DAY) + closed_spot("b", NOW - 2 * DAY))
    before = estimate_of(state)
    other: list[int] = []
    racing = Racing(state, "list", lambda: other.append(store.compact(state, H100, NOW)))
    assert store.compact(racing, H100, NOW) == 2  # its summaries were there: it deletes what is left
    assert other == [2]
    assert sorted(names(state)) == sorted(n for n in names(state) if n.startswith("attempt~"))
    assert len(names(state)) == 2
    assert estimate_of(state) == before


def test_a_fact_another_run_deleted_between_the_listing_and_the_delete_stops_nothing() -> None:
    state = bucket()
    store.write_facts(state, H100, closed_spot("a", NOW - 2 * DAY))
    first_fact = next(n for n in names(state) if not n.startswith("attempt~"))

    def delete_one() -> None:
        state.blob(f"fleet/{H100.key}/us-east4/{first_fact}").delete()

    assert store.compact(Racing(state, "list", delete_one), H100, NOW) == 1
    assert [n.split("~")[0] for n in names(state)] == ["attempt"]
