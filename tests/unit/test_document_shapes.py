"""Stored documents that parse but do not have the shape the code expects (a field missing, null,
of another type, a past or future version's layout) are corrupt, as a document that does not parse
is: one typed error where they are read, and the sweeps over them go on with what comes after.
In memory (the simulator's Cloud Storage): no emulator needed."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from shared.clock import now_iso, utcnow
from shared.ledger.records import Attempt, CorruptRecord, RequestRecord
from shared.ledger.retention import SWEEP_STATE, sweep_step
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.ledger.store import JobIndexEntry, LedgerStore
from sim.gcs import MemoryStorage
from tests.support.decisions import CapturedLog, make_settings

FAR = timedelta(days=400)
Doc = dict[str, Any]


@pytest.fixture
def bucket():
    return MemoryStorage(clock=utcnow).client().bucket("state")


@pytest.fixture
def ledger(bucket) -> LedgerStore:
    return LedgerStore(bucket)


def _finished(ledger: LedgerStore, request_id: str) -> None:
    record = RequestRecord(request_id, {"request_id": request_id}, f"gs://b/{request_id}/")
    record.attempts.append(
        Attempt(1, "l", "SPOT", now_iso(), job="projects/p/locations/l/customJobs/7", outcome=AttemptOutcome.SUCCEEDED)
    )
    record.status = RequestStatus.SUCCEEDED
    record.finished_at = now_iso()
    ledger.restore(record)


def _set(path: str, value: Any) -> Callable[[Doc], Any]:
    """Set `path` ("a.0.b") of the document to `value`; the document itself when `path` is ""."""

    def change(document: Doc) -> Any:
        if not path:
            return value
        *parents, last = path.split(".")
        node: Any = document
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[int(last) if isinstance(node, list) else last] = value
        return document

    return change


def _drop(name: str) -> Callable[[Doc], Doc]:
    return lambda document: {k: v for k, v in document.items() if k != name}


def _future_attempts_by_number(document: Doc) -> Doc:
    """A layout a later version might write: attempts keyed by their number."""
    document["attempts"] = {str(a["n"]): a for a in document["attempts"]}
    return document


WRONG_RECORDS = {
    "attempt null": _set("attempts.0", None),
    "requeue a string": _set("requeue", "soon"),
    "attempts a string": _set("attempts", "1"),
    "document a list": _set("", []),
    "document a string": _set("", "requests/x.json"),
    "status a number": _set("status", 3),
    "request a string": _set("request", "{}"),
    "markers a string": _set("markers", "m"),
    "pending alert a number": _set("pending_alerts", [1]),
    "cancel a list": _set("cancel", ["operator"]),
    "attempt number a string": _set("attempts.0.n", "1"),
    "attempt preemptions null": _set("attempts.0.preemptions", None),
    "attempt outcome unknown": _set("attempts.0.outcome", "EXPLODED"),
    "updated_at a number": _set("updated_at", 1700000000),
    "request_id missing": _drop("request_id"),
    "attempts keyed by number (a future layout)": _future_attempts_by_number,
}


def _overwrite_body(bucket, request_id: str, change: Callable[[Doc], Any]) -> None:
    """Rewrite the record's body with `change` applied, keeping its listing metadata (finished)."""
    name = f"requests/{request_id}.json"
    listed = bucket.get_blob(name)
    document = change(json.loads(listed.download_as_bytes()))
    blob = bucket.blob(name)
    blob.metadata = dict(listed.metadata or {})
    blob.upload_from_string(json.dumps(document), content_type="application/json")


@pytest.mark.parametrize("change", WRONG_RECORDS.values(), ids=WRONG_RECORDS.keys())
def test_a_wrong_shaped_ledger_record_reads_as_corrupt(ledger: LedgerStore, bucket, change) -> None:
    _finished(ledger, "r")
    _overwrite_body(bucket, "r", change)

    with pytest.raises(CorruptRecord) as read:
        ledger.read("r")
    assert read.value.request_id == "r"
    with pytest.raises(CorruptRecord):
        ledger.read_raw("r")


# Of a record's shape, but no time where the sweep needs one: it cannot judge when it finished.
UNTIMED_RECORDS = {
    "finished_at not a time": _set("finished_at", "yesterday"),
    "finished_at empty, updated_at not a time": lambda d: _set("updated_at", "t")(_set("finished_at", "")(d)),
}


@pytest.mark.parametrize(
    "change", [*WRONG_RECORDS.values(), *UNTIMED_RECORDS.values()], ids=[*WRONG_RECORDS, *UNTIMED_RECORDS]
)
def test_the_retention_sweep_skips_a_wrong_shaped_record_and_goes_on(ledger: LedgerStore, bucket, change) -> None:
    for request_id in ("a-bad", "b-done"):
        _finished(ledger, request_id)
    _overwrite_body(bucket, "a-bad", change)
    corrupt: list[str] = []

    summary = sweep_step(
        ledger,
        CapturedLog().logger,
        settings=make_settings(bucket.name),
        now=utcnow() + FAR,
        on_corrupt=lambda error: corrupt.append(error.request_id),
    )

    assert summary is not None and summary.finished_round
    assert (summary.corrupt, summary.removed) == (1, 1)
    assert corrupt == ["a-bad"]
    assert ledger.read("b-done") == (None, 0)  # the record behind it was retired
    assert ledger.maintenance_state(SWEEP_STATE)["finished_at"]  # its position was saved


def test_a_record_a_newer_version_wrote_with_more_fields_still_reads(ledger: LedgerStore, bucket) -> None:
    _finished(ledger, "r")
    _overwrite_body(bucket, "r", _set("attempts.0.retried_by", {"who": "v2"}))

    record, _ = ledger.read("r")
    assert record is not None and record.attempts[0].newer_fields == {"retried_by": {"who": "v2"}}


WRONG_SWEEP_STATES = {
    "a list": [],
    "finished_at a number": {"finished_at": 5},
    "finished_at not a time": {"finished_at": "yesterday"},
    "position a number": {"position": 7, "finished_at": None},
}


@pytest.mark.parametrize("state", WRONG_SWEEP_STATES.values(), ids=WRONG_SWEEP_STATES.keys())
def test_a_wrong_shaped_sweep_position_starts_a_round_afresh(ledger: LedgerStore, bucket, state) -> None:
    _finished(ledger, "done")
    bucket.blob(f"maintenance/{SWEEP_STATE}.json").upload_from_string(json.dumps(state))

    summary = sweep_step(ledger, CapturedLog().logger, settings=make_settings(bucket.name), now=utcnow() + FAR)

    assert summary is not None and summary.finished_round and summary.removed == 1


@pytest.mark.parametrize("body", ["[]", '"x"', "7", '{"position": 7}', "{not json"])
def test_a_wrong_shaped_cursor_starts_from_the_beginning(ledger: LedgerStore, bucket, body: str) -> None:
    bucket.blob("maintenance/reconcile-cursor.json").upload_from_string(body)

    assert ledger.cursor("reconcile") == ""


@pytest.mark.parametrize(
    "body",
    [
        "[]",
        "null",
        '{"request_id": "r", "attempt": "1", "location": "l", "job": "projects/p/locations/l/customJobs/7"}',
        '{"request_id": null, "attempt": 1, "location": "l", "job": "projects/p/locations/l/customJobs/7"}',
        '{"request_id": "r", "attempt": 1, "location": "l"}',
        "{trunc",
    ],
)
def test_a_wrong_shaped_job_index_entry_reads_as_corrupt(ledger: LedgerStore, bucket, body: str) -> None:
    bucket.blob("jobs/7.json").upload_from_string(body)

    with pytest.raises(CorruptRecord):
        ledger.find_job("7")


def test_a_job_index_entry_with_a_newer_field_still_reads(ledger: LedgerStore, bucket) -> None:
    entry = {"request_id": "r", "attempt": 1, "location": "l", "job": "projects/p/locations/l/customJobs/7"}
    bucket.blob("jobs/7.json").upload_from_string(json.dumps({**entry, "region_hint": "x"}))

    assert ledger.find_job("7") == JobIndexEntry(**entry)


# Trigger documents.


class _Clock:
    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self):
        return self.now


def _trigger_world():
    from shared.triggers.definition import TriggerDefinition
    from shared.triggers.store import TriggerStore

    clock = _Clock()
    bucket = MemoryStorage(clock=clock).client().bucket("state")
    definition = TriggerDefinition("daily", "schedule", {}, {}, coalesce_seconds=3600)
    return clock, bucket, TriggerStore(bucket), definition


def _window(bucket, window_id: str, document: Any) -> None:
    """A window of trigger `daily` with one member, its document as given."""
    from shared.triggers import store as paths

    bucket.blob(f"{paths.members_prefix('daily', window_id)}k1").upload_from_string(b"")
    bucket.blob(paths.window_path("daily", window_id)).upload_from_string(json.dumps(document))


WRONG_TRIGGER_DOCUMENTS = {"a list": [], "a string": "closed", "a number": 7, "null": None}


@pytest.mark.parametrize("document", WRONG_TRIGGER_DOCUMENTS.values(), ids=WRONG_TRIGGER_DOCUMENTS.keys())
def test_a_trigger_document_that_is_no_object_reads_as_corrupt(document: Any) -> None:
    from shared.triggers.store import CorruptTriggerDocument

    _clock, bucket, store, _definition = _trigger_world()
    bucket.blob("triggers/daily/state.json").upload_from_string(json.dumps(document))

    with pytest.raises(CorruptTriggerDocument):
        store.read("triggers/daily/state.json")


WRONG_WINDOWS = {
    **WRONG_TRIGGER_DOCUMENTS,
    "window_end missing": {"state": "closed"},
    "window_end a number": {"state": "closed", "window_end": 5},
    "window_end not a time": {"state": "closed", "window_end": "yesterday"},
    "state a list": {"state": ["closed"], "window_end": "2020-01-01T00:00:00Z"},
}


@pytest.mark.parametrize("document", WRONG_WINDOWS.values(), ids=WRONG_WINDOWS.keys())
def test_trigger_retention_keeps_a_wrong_shaped_window_and_retires_the_windows_behind_it(document: Any) -> None:
    from shared.triggers import store as paths
    from shared.triggers.retention import SWEPT_FIELD, retire_windows

    clock, bucket, store, definition = _trigger_world()
    start = clock.now - timedelta(days=40)
    bad, good = (start.strftime("w%Y%m%dt%H0000z"), (start + timedelta(hours=1)).strftime("w%Y%m%dt%H0000z"))
    _window(bucket, bad, document)
    _window(bucket, good, {"state": "closed", "window_end": (start + timedelta(hours=2)).isoformat()})
    store.put(paths.state_path("daily"), {"decided": {}})
    clock.now += timedelta(days=1)
    log = CapturedLog()

    retire_windows(store, definition, clock.now, log.logger)

    left = store.list_names(paths.windows_prefix("daily"))
    assert all(name.startswith(bad) for name in left) and left  # the bad one kept, the one behind it gone
    assert store.read(paths.state_path("daily"))[0][SWEPT_FIELD]  # the sweep finished
    [line] = log.events("trigger_window_unreadable")
    assert line["window_id"] == bad


WRONG_TRIGGER_STATES = {
    **WRONG_TRIGGER_DOCUMENTS,
    "swept a number": {"windows_retired_at": 5},
    "swept not a time": {"windows_retired_at": "yesterday"},
    "carry a string": {"carry": "w20200101t000000z"},
    "decided a list": {"decided": []},
}


@pytest.mark.parametrize("state", WRONG_TRIGGER_STATES.values(), ids=WRONG_TRIGGER_STATES.keys())
def test_trigger_retention_never_raises_on_a_wrong_shaped_state(state: Any) -> None:
    from shared.triggers import store as paths
    from shared.triggers.retention import retire_windows

    clock, bucket, store, definition = _trigger_world()
    bucket.blob(paths.state_path("daily")).upload_from_string(json.dumps(state))

    assert retire_windows(store, definition, clock.now, CapturedLog().logger) == 0


@pytest.mark.parametrize(
    "body", ["[]", '"x"', "null", '{"swept_at": 5}', '{"swept_at": "yesterday"}', "{trunc"], ids=str
)
def test_a_wrong_shaped_deleted_trigger_sweep_note_starts_a_sweep(body: str) -> None:
    from shared.triggers.retention import DELETED_SWEEP_PATH, retire_deleted_triggers

    clock, bucket, store, _definition = _trigger_world()
    store.touch("triggers/gone/state.json")  # a deleted trigger's object, written long ago
    bucket.blob(DELETED_SWEEP_PATH).upload_from_string(body)
    clock.now += timedelta(days=40)

    assert retire_deleted_triggers(store, clock.now, CapturedLog().logger) == 1
    assert store.read(DELETED_SWEEP_PATH)[0]["swept_at"]


# The pacing line's documents and entries.


def _pacer():
    from shared.pacing import Pacer

    bucket = MemoryStorage(clock=utcnow).client().bucket("state")
    return bucket, Pacer(bucket, make_settings("state"), clock=lambda: 1000.0, sleep=lambda _s: None)


WRONG_PACING_DOCUMENTS = [
    *("[]", '"x"', "null", "7", "{trunc"),
    '{"expires_at": "soon", "alerted": "no"}',
    '{"expires_at": Infinity}',
    '{"expires_at": 1e18}',  # no lease taken now runs out so late: it would hold the line for good
]


@pytest.mark.parametrize("body", WRONG_PACING_DOCUMENTS, ids=str)
def test_a_wrong_shaped_drainer_lease_is_free_to_take(body: str) -> None:
    bucket, pacer = _pacer()
    bucket.blob("pacing/l/drainer.json").upload_from_string(body)

    assert pacer.lease_free("l")
    assert pacer.acquire("l") is not None
    assert not pacer.lease_free("l")  # taken, and readable again


@pytest.mark.parametrize("body", WRONG_PACING_DOCUMENTS, ids=str)
def test_a_wrong_shaped_burst_has_its_alert_still_due(body: str) -> None:
    bucket, pacer = _pacer()
    bucket.blob("pacing/l/burst.json").upload_from_string(body)

    generation = pacer.burst_alert_due("l", 5)
    assert generation is not None
    pacer.burst_alerted("l", generation)
    assert pacer.burst_alert_due("l", 5) is None  # sent once


def test_the_line_passes_over_entries_not_of_its_naming() -> None:
    from shared.pacing import waiting_entry

    bucket, pacer = _pacer()
    for key in ("garbage", "0000001~r", "0000001~r~x", "x~r~1"):
        bucket.blob(f"pacing/l/waiting/{key}").upload_from_string(b"")
    entry = waiting_entry("l", 0, "real", 1)
    pacer.enqueue(entry)

    assert [(w.request_id, w.attempt) for w in pacer.waiting("l")] == [("real", 1)]


# Fleet observations: the object's name is the fact.

WRONG_FLEET_NAMES = [
    "fleet/n1+none+0/l/preempt~99999999999999999999~1~1~k~0",  # a time past any calendar
    "fleet/n1+none+0/l/preempt~-99999999999999999999~1~1~k~0",
    "fleet/n1+none+0/l/attempt~1e400~k~1~1~1~1~1~1",
    "fleet/n1+none+0/l/shrug~1~1~1~k~0",
    "fleet/n1+none+0/l/preempt~1~1",
]


@pytest.mark.parametrize("name", WRONG_FLEET_NAMES)
def test_a_fleet_object_not_of_the_fact_format_is_passed_over(name: str) -> None:
    from shared.fleet import store as fleet
    from shared.fleet.observations import MachineClass

    bucket = MemoryStorage(clock=utcnow).client().bucket("state")
    bucket.blob(name).upload_from_string(b"")

    assert fleet.parse_name(name) is None
    assert fleet.read(bucket, MachineClass("n1", "", 0), utcnow()) == []


@pytest.mark.parametrize("seconds", ["nan", "inf", "1e300", "-99999999999"])
def test_a_fleet_fact_whose_seconds_no_job_can_have_taken_is_passed_over(seconds: str) -> None:
    """A hand-written `run` fact beside a `waiting` one of its attempt: the estimate reads the wait
    closed at the run's start (`shared.fleet.estimate._wait_closed`), and a duration that is not
    a number of seconds since 1970 made that start past any calendar: every estimate of the class
    (a deadline request's claim, a placement) raised, where it had only read nonsense before."""
    from shared.fleet import store as fleet
    from shared.fleet.estimate import estimate
    from shared.fleet.observations import MachineClass

    now = utcnow()
    at = int(now.timestamp()) - 600
    bucket = MemoryStorage(clock=utcnow).client().bucket("state")
    for fact in (f"waiting~{at}~0~0~k~0", f"run~{at + 60}~{seconds}~0~k~0"):
        bucket.blob(f"fleet/n1+none+0/l/{fact}").upload_from_string(b"")

    facts = fleet.read(bucket, MachineClass("n1", "", 0), now)
    assert estimate(facts, "l", now).open_waits == 1
    assert [o.kind.value for o in facts] == ["waiting"]


def test_a_fleet_folder_not_of_a_machine_class_is_passed_over() -> None:
    from shared.fleet import store as fleet
    from shared.fleet.observations import MachineClass

    bucket = MemoryStorage(clock=utcnow).client().bucket("state")
    for name in ("fleet/garbage/l/x", "fleet/n1+none+0/l/x", "fleet/a+b+c/l/x"):
        bucket.blob(name).upload_from_string(b"")

    assert fleet.classes(bucket) == [MachineClass("n1", "", 0)]


# Seed 37: a trigger's state in a past version's layout (lists were maps keyed by position).
PAST_LAYOUT_STATE = {"carry": {}, "carry_count": 0, "decided": {"w20200101t000000z": {"action": "fire", "carried": {}}}}
WRONG_SHAPED_STATES = {
    "past layout": PAST_LAYOUT_STATE,
    "carry a map": {"carry": {"0": "w20200101t000000z"}},
    "carry_count null": {"carry_count": None},
    "a decision a string": {"decided": {"w20200101t000000z": "fire"}},
    "last fire a number": {"last_fired_at": 7},
}


@pytest.mark.parametrize("state", WRONG_SHAPED_STATES.values(), ids=WRONG_SHAPED_STATES.keys())
def test_a_wrong_shaped_trigger_state_reads_as_corrupt(state: Any) -> None:
    from shared.triggers import store as paths
    from shared.triggers.store import CorruptTriggerDocument

    _clock, bucket, store, _definition = _trigger_world()
    bucket.blob(paths.state_path("daily")).upload_from_string(json.dumps(state))

    with pytest.raises(CorruptTriggerDocument):
        store.read(paths.state_path("daily"))


def test_trigger_retention_skips_a_wrong_shaped_state_says_so_and_goes_on() -> None:
    """The windows done with are removed (a deferred one is kept: an unreadable state may still
    carry it), and the corrupt state is handed to `on_corrupt` (the tick alerts it once)."""
    from shared.triggers import store as paths
    from shared.triggers.retention import retire_windows
    from shared.triggers.store import CorruptTriggerDocument

    clock, bucket, store, definition = _trigger_world()
    start = clock.now - timedelta(days=40)
    closed, deferred = (start.strftime("w%Y%m%dt%H0000z"), (start + timedelta(hours=1)).strftime("w%Y%m%dt%H0000z"))
    _window(bucket, closed, {"state": "closed", "window_end": (start + timedelta(hours=1)).isoformat()})
    _window(bucket, deferred, {"state": "deferred", "window_end": (start + timedelta(hours=2)).isoformat()})
    bucket.blob(paths.state_path("daily")).upload_from_string(json.dumps(PAST_LAYOUT_STATE))
    corrupt: list[CorruptTriggerDocument] = []

    removed = retire_windows(store, definition, clock.now, CapturedLog().logger, on_corrupt=corrupt.append)

    assert removed == 2  # the closed window's member and document
    assert {name.split("/")[0].removesuffix(".json") for name in store.list_names(paths.windows_prefix("daily"))} == {
        deferred
    }
    assert [error.path for error in corrupt] == [paths.state_path("daily")]


def test_a_corrupt_trigger_state_is_alerted_once_per_version_of_it() -> None:
    from types import SimpleNamespace

    from shared.triggers import store as paths
    from shared.triggers.publishing import alert_corrupt_state
    from shared.triggers.store import CorruptTriggerDocument

    clock, bucket, store, _definition = _trigger_world()
    published: list[dict[str, Any]] = []
    ports = SimpleNamespace(
        settings=SimpleNamespace(ops_alerts_topic="ops"),
        clock=clock,
        publish=lambda _topic, payload, **_attributes: published.append(payload),
    )
    path = paths.state_path("daily")

    def meet_it() -> None:
        with pytest.raises(CorruptTriggerDocument) as error:
            store.read(path)
        alert_corrupt_state(ports, store, error.value, CapturedLog().logger)

    bucket.blob(path).upload_from_string(json.dumps(PAST_LAYOUT_STATE))
    meet_it()
    meet_it()
    assert [(a["kind"], a["details"]["trigger"]) for a in published] == [("trigger_corrupt", "daily")]
    bucket.blob(path).upload_from_string(b"{trunc")  # written wrong again
    meet_it()
    assert len(published) == 2
