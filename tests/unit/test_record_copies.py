"""A record's stored document keeps what it must, its shown JSON shares nothing with it (a caller
of `to_json` may edit what it got), the private copy a compare-and-swap transition gets shares
nothing mutable with the record it read, every read of a ledger document (parsed once per
document) hands out a record of the caller's own, and the CustomJob schema's memo hands every caller a
job of its own."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta

import pytest

from shared import clock
from shared.clock import utcnow
from shared.errors import Violation
from shared.ledger.records import Attempt, RequestRecord, private_copy
from shared.ledger.store import LedgerStore
from shared.requests.job_schema import read_custom_job
from sim.gcs import MemoryStorage


def _record() -> RequestRecord:
    record = RequestRecord.from_json(
        {
            "request_id": "r1",
            "request": {"custom_job": {"jobSpec": {"workerPoolSpecs": [{"replicaCount": "1"}]}}, "labels": {"a": "b"}},
            "output_dir": "gs://b/r1",
            "status": "RUNNING",
            "attempts": [
                {"n": 1, "location": "l", "strategy": "SPOT", "claimed_at": "t", "outcome": "requeued", "new": [1]}
            ],
            "requeue": {"attempt": 2, "location": "l", "strategy": "SPOT", "reason": "r", "decided_at": "t", "x": 1},
            "cancel": {"by": "me", "at": "t"},
            "markers": ["m:1:"],
            "pending_alerts": [{"kind": "k", "details": {"n": 1}}],
            "from_the_future": {"kept": True},
        }
    )
    record.attempts[0].kit_key = "secret"
    record.attempts[0].last_checkpoint = [0, 10]
    return record


def test_the_stored_document_keeps_fields_of_newer_versions_in_place_and_kit_keys() -> None:
    document = _record().to_document()

    assert list(document)[-1] == "from_the_future" and "newer_fields" not in document
    assert document["attempts"][0]["new"] == [1] and document["attempts"][0]["kit_key"] == "secret"
    assert document["requeue"]["x"] == 1 and "newer_fields" not in document["cancel"]


def test_the_shown_record_leaves_kit_keys_out_and_shares_nothing_with_the_record() -> None:
    record = _record()
    before = copy.deepcopy(record)

    shown = record.to_json()
    shown["request"]["labels"]["a"] = "changed"
    shown["attempts"][0]["last_checkpoint"].append(99)
    shown["markers"].clear()

    assert "kit_key" not in shown["attempts"][0]
    assert record == before and record.attempts[0].kit_key == "secret"


def _mutable_ids(value: object, seen: set[int]) -> set[int]:
    """The ids of every dict, list and record object reachable from `value`."""
    if isinstance(value, (dict, list, tuple)) or hasattr(value, "__dataclass_fields__"):
        seen.add(id(value))
        members = (
            value.values() if isinstance(value, dict) else vars(value).values() if hasattr(value, "__dict__") else value
        )
        for member in members:
            _mutable_ids(member, seen)
    return seen


def test_a_private_copy_equals_a_deep_copy_and_shares_nothing_mutable() -> None:
    record = _record()
    record.attempts[0].error = {"code": 8, "details": [{"reason": "quota"}]}
    record.newer_fields["pair"] = ({"inside": [1]}, "text")  # not JSON's, yet copied
    before = copy.deepcopy(record)

    copied = private_copy(record)

    assert copied == record and type(copied.attempts[0]) is Attempt
    assert copied.status is record.status and copied.request_id is record.request_id  # immutables are shared
    assert not _mutable_ids(copied, set()) & _mutable_ids(record, set())
    copied.request["labels"]["a"] = "changed"
    copied.attempts[0].error["details"][0]["reason"] = "changed"
    copied.attempts[0].last_checkpoint.append(99)
    copied.requeue.newer_fields["x"] = 2
    copied.newer_fields["pair"][0]["inside"].append(2)
    copied.markers.clear()
    assert record == before


def test_a_job_read_again_is_a_fresh_copy_with_the_same_violations() -> None:
    job = {"jobSpec": {"workerPoolSpecs": [{"replicaCount": 1, "machineSpec": {"machineType": "n1"}}]}}
    first, second = [], []

    one = read_custom_job(job, "custom_job", first)
    one["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["machineType"] = "changed"
    two = read_custom_job(job, "custom_job", second)

    assert two == {"jobSpec": {"workerPoolSpecs": [{"replicaCount": "1", "machineSpec": {"machineType": "n1"}}]}}
    assert first == second == []
    bad: list[Violation] = []
    again: list[Violation] = []
    assert read_custom_job({"jobSpec": {"nope": 1}}, "custom_job", bad) is None
    assert read_custom_job({"jobSpec": {"nope": 1}}, "custom_job", again) is None
    assert bad == again and bad and bad[0].path == "custom_job.jobSpec.nope"


def _ledger_with(record: RequestRecord) -> LedgerStore:
    ledger = LedgerStore(MemoryStorage(clock=utcnow).client().bucket("state"))
    ledger.restore(record)
    return ledger


def test_every_read_of_one_document_is_a_record_of_the_callers_own() -> None:
    record = _record()
    ledger = _ledger_with(record)
    first = ledger.read("r1")[0]
    assert first == record

    first.request["labels"]["a"] = "changed"
    first.attempts[0].last_checkpoint.append(99)
    first.markers.clear()

    assert ledger.read("r1")[0] == record and ledger.get("r1") == record


def test_a_swap_that_writes_nothing_hands_back_a_record_of_the_callers_own() -> None:
    record = _record()
    ledger = _ledger_with(record)

    for transition in (lambda current: None, lambda current: current):
        swapped = ledger.swap("r1", transition)
        assert not swapped.wrote and swapped.value == record
        swapped.value.attempts[0].last_checkpoint.append(99)
        swapped.value.markers.append("changed")
        assert ledger.read("r1")[0] == record


def test_a_document_without_its_times_gets_them_at_each_read(monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = _ledger_with(_record())
    document = json.loads(ledger._bucket.blob("requests/r1.json").download_as_bytes())  # noqa: SLF001
    del document["created_at"], document["updated_at"]  # as a past version wrote it
    ledger._bucket.blob("requests/r1.json").upload_from_string(json.dumps(document))  # noqa: SLF001
    moment = datetime(2026, 1, 1, tzinfo=clock.UTC)

    monkeypatch.setattr(clock, "utcnow", lambda: moment)
    first = ledger.read("r1")[0]
    monkeypatch.setattr(clock, "utcnow", lambda: moment + timedelta(hours=1))
    second = ledger.read("r1")[0]

    assert (first.created_at, second.created_at) == ("2026-01-01T00:00:00.000Z", "2026-01-01T01:00:00.000Z")


def test_a_record_read_ahead_is_handed_out_as_the_callers_own() -> None:
    record = _record()
    ledger = _ledger_with(record)

    assert ledger.prefetch("r1").status == record.status
    handed = ledger.get("r1")
    handed.markers.clear()
    handed.attempts[0].last_checkpoint.append(99)
    ledger.prefetch("r1")

    assert ledger.get("r1") == record and ledger.read("r1")[0] == record
