"""A record's stored document keeps what it must, its shown JSON shares nothing with it (a caller
of `to_json` may edit what it got), the private copy a compare-and-swap transition gets shares
nothing mutable with the record it read, and the CustomJob schema's memo hands every caller a job
of its own."""

from __future__ import annotations

import copy

from shared.errors import Violation
from shared.ledger.records import Attempt, RequestRecord, private_copy
from shared.requests.job_schema import read_custom_job


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
