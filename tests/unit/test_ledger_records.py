"""A request's record (shared/ledger/records.py) as data: what its properties say of an attempt and
of the request, the markers that make a decision once, its JSON both ways (defaults, enums, fields
of a newer version), the shape check of every stored field and the error it raises, and the private
copy of values JSON does not have. tests/unit/test_record_copies.py and test_document_shapes.py
drive the copies and the corrupt documents."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import pytest

from shared.jobs import JobState
from shared.ledger.records import (
    Attempt,
    CancelIntent,
    RequestRecord,
    Requeue,
    alert_marker,
    evidence_marker,
    private_copy,
)
from shared.ledger.shapes import known_fields
from shared.ledger.states import AttemptOutcome, RequestStatus

JOB = "projects/p/locations/us-central1/customJobs/123"


def attempt(n: int = 1, strategy: str = "SPOT", **fields: Any) -> Attempt:
    return Attempt(n, "us-central1", strategy, "2026-01-01T00:00:00.000Z", **fields)


def document(**fields: Any) -> dict[str, Any]:
    return {"request_id": "r1", "request": {}, "output_dir": "gs://b/r1/", **fields}


# ---- an attempt ------------------------------------------------------------------------------------


def test_a_cancel_is_pending_from_its_decision_until_it_is_sent() -> None:
    assert not attempt().cancel_pending
    assert attempt(cancel_decided_at="t").cancel_pending
    assert not attempt(cancel_decided_at="t", cancel_sent_at="u").cancel_pending


@pytest.mark.parametrize(
    "state, ending",
    [(JobState.RUNNING, True), ("JOB_STATE_CANCELLING", True), (None, True), (JobState.CANCELLED, False)],
)
def test_an_attempt_told_to_stop_is_ending_until_vertex_ends_its_job(state: str | None, ending: bool) -> None:
    assert attempt(cancel_decided_at="t", state=state).ending is ending
    assert not attempt(state=state).ending


def test_the_mean_checkpoint_interval_needs_two_commits_and_both_times() -> None:
    first, last = "2026-01-01T00:00:00.000Z", "2026-01-01T00:01:00.000Z"
    assert (
        attempt(checkpoints_committed=4, first_checkpoint_at=first, last_checkpoint_at=last).mean_checkpoint_interval
        == 20.0
    )
    assert (
        attempt(checkpoints_committed=2, first_checkpoint_at=first, last_checkpoint_at=last).mean_checkpoint_interval
        == 60.0
    )
    assert (
        attempt(checkpoints_committed=1, first_checkpoint_at=first, last_checkpoint_at=first).mean_checkpoint_interval
        is None
    )
    assert attempt(checkpoints_committed=3, last_checkpoint_at=last).mean_checkpoint_interval is None
    assert attempt(checkpoints_committed=3, first_checkpoint_at=first).mean_checkpoint_interval is None


def test_a_fresh_attempt_has_counted_nothing_and_a_fresh_record_has_nothing_pending() -> None:
    fresh = attempt()
    assert (fresh.preemptions, fresh.republished, fresh.checkpoints_committed, fresh.checkpoint_seconds) == (
        0,
        0,
        0,
        0.0,
    )
    assert fresh.preemptions_unknown is False
    assert RequestRecord("r1", {}, "gs://b/").prune_pending is False


def test_an_attempts_signing_key_is_never_shown_in_its_repr() -> None:
    keyed = attempt(kit_key="s3cret-key")
    assert "s3cret-key" not in repr(keyed)
    assert "s3cret-key" not in repr(RequestRecord("r1", {}, "gs://b/", attempts=[keyed]))
    assert keyed == attempt(kit_key="another")  # the key is not what makes an attempt


def test_a_jobs_id_is_the_last_part_of_its_name() -> None:
    assert attempt(job=JOB).job_id == "123"
    assert attempt(job="123").job_id == "123"  # a bare id (a record written by hand) is its own id
    assert attempt().job_id is None


# ---- a request --------------------------------------------------------------------------------------


def test_the_latest_attempt_and_one_by_number() -> None:
    record = RequestRecord("r1", {}, "gs://b/")
    assert record.latest is None and record.attempt(1) is None
    record.attempts = [attempt(1), attempt(2), attempt(3)]
    assert record.latest is record.attempts[2] and record.attempt(2) is record.attempts[1]
    assert record.attempt(4) is None


def test_spot_attempts_before_an_attempt_count_only_earlier_spot_ones() -> None:
    record = RequestRecord("r1", {}, "gs://b/", attempts=[attempt(1), attempt(2, "STANDARD"), attempt(3), attempt(4)])
    assert [record.spot_attempts_before(n) for n in (1, 2, 3, 4, 5)] == [0, 1, 1, 2, 3]


def test_a_marker_is_added_once_and_counted_by_its_prefix() -> None:
    record = RequestRecord("r1", {}, "gs://b/")
    assert record.mark(alert_marker("submit_failed", 1))
    assert not record.mark("submit_failed:1")
    assert record.mark(evidence_marker("kit_run", 2, "a"))
    assert record.mark(evidence_marker("kit_run", 2, "b"))
    assert record.markers == ["submit_failed:1", "kit_run:2:a", "kit_run:2:b"]
    assert record.count_marks(evidence_marker("kit_run", 2)) == 2
    assert record.count_marks(evidence_marker("kit_run", 3)) == 0
    assert alert_marker("deadline", 3, "x", "y") == "deadline:3:x:y"


def test_pending_effects_are_alerts_or_a_prune_still_to_send() -> None:
    assert not RequestRecord("r1", {}, "gs://b/").has_pending_effects
    assert RequestRecord("r1", {}, "gs://b/", pending_alerts=[{"kind": "k"}]).has_pending_effects
    assert RequestRecord("r1", {}, "gs://b/", prune_pending=True).has_pending_effects


def test_a_record_is_terminal_when_its_status_is() -> None:
    assert RequestRecord("r1", {}, "gs://b/", status=RequestStatus.GAVE_UP).is_terminal
    assert not RequestRecord("r1", {}, "gs://b/", status=RequestStatus.REQUEUED).is_terminal


# ---- the JSON form ----------------------------------------------------------------------------------


def test_a_document_without_a_status_or_attempts_reads_as_a_fresh_claim() -> None:
    read = RequestRecord.from_json(document())
    assert read.status is RequestStatus.CLAIMED and read.attempts == [] and read.requeue is None and read.cancel is None


def test_every_part_reads_back_as_it_was_written() -> None:
    record = RequestRecord(
        "r1",
        {"custom_job": {}},
        "gs://b/r1/",
        status=RequestStatus.CANCELLED,
        attempts=[attempt(outcome=AttemptOutcome.MOVED, spot_outlook={"p": 0.5}, last_checkpoint=[1, 2])],
        requeue=Requeue(2, "l", "SPOT", "moved", "t", newer_fields={"why": 1}),
        cancel=CancelIntent("ana", "t", "because", newer_fields={"ticket": "T-1"}),
    )
    document = record.to_json()
    assert document["schema_version"] == 1  # the layout this version writes, for the versions after it
    assert document["requeue"]["why"] == 1 and document["cancel"]["ticket"] == "T-1"
    read = RequestRecord.from_json(document)
    assert read == record
    assert read.attempts[0].outcome is AttemptOutcome.MOVED and read.status is RequestStatus.CANCELLED
    assert isinstance(read.requeue, Requeue) and isinstance(read.cancel, CancelIntent)


def test_a_stored_document_holds_the_records_own_values_and_the_shown_one_copies() -> None:
    record = RequestRecord("r1", {"a": [1]}, "gs://b/", attempts=[attempt(kit_key="secret")])
    stored = record.to_document()
    assert stored["request"] is record.request and stored["attempts"][0]["kit_key"] == "secret"
    assert stored["requeue"] is None and stored["cancel"] is None
    assert record.to_json()["request"] is not record.request


# ---- the shape of every field ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attempt_fields",
    [
        {"n": True},  # a boolean is no number here
        {"n": 1.0},
        {"preemptions_unknown": 1},
        {"checkpoint_seconds": "1"},
        {"last_checkpoint": [1, "2"]},
        {"last_checkpoint": (1, 2)},
        {"spot_outlook": {"p": "high"}},
        {"spot_outlook": [0.5]},
        {"error": [400]},
        {"outcome": 3},
        {"job": 123},
        {"location": None},
    ],
)
def test_a_stored_field_of_another_type_is_refused(attempt_fields: dict[str, Any]) -> None:
    stored = {"n": 1, "location": "l", "strategy": "SPOT", "claimed_at": "t", **attempt_fields}
    with pytest.raises(TypeError):
        RequestRecord.from_json(document(attempts=[stored]))


@pytest.mark.parametrize(
    "attempt_fields",
    [
        {"checkpoint_seconds": 3},  # an integral number is a float too
        {"checkpoint_seconds": 2.5},
        {"preemptions_unknown": False},
        {"preemptions_unknown": True},
        {"last_checkpoint": [1, 2]},
        {"last_checkpoint": None},
        {"spot_outlook": {"p": 1}},
        {"error": {"code": 3, "details": [{"any": "thing"}]}},
        {"newer_fields": {"x": 1}},  # a newer version's field of that name is kept, not checked
    ],
)
def test_a_stored_field_of_its_type_is_read(attempt_fields: dict[str, Any]) -> None:
    stored = {"n": 1, "location": "l", "strategy": "SPOT", "claimed_at": "t", **attempt_fields}
    read = RequestRecord.from_json(document(attempts=[stored]))
    assert read.to_json()["attempts"][0] | attempt_fields == read.to_json()["attempts"][0]


def test_a_field_of_a_newer_version_anywhere_in_a_document_is_kept_and_the_rest_read() -> None:
    stored = {"n": 1, "gpu_hours": 3.5, "location": "l", "strategy": "SPOT", "claimed_at": "t", "job": JOB}
    read = RequestRecord.from_json({"from_the_future": 1, **document(attempts=[stored])})
    assert read.attempts[0].job == JOB and read.attempts[0].newer_fields == {"gpu_hours": 3.5}
    assert read.request_id == "r1" and read.newer_fields == {"from_the_future": 1}


def test_the_error_names_the_field_its_value_and_the_type_expected() -> None:
    stored = {"n": "one", "location": "l", "strategy": "SPOT", "claimed_at": "t"}
    with pytest.raises(TypeError, match=r"^Attempt\.n is 'one', not <class 'int'>$"):
        RequestRecord.from_json(document(attempts=[stored]))
    unknown = {"n": 1, "location": "l", "strategy": "SPOT", "claimed_at": "t", "outcome": "EXPLODED"}
    with pytest.raises(TypeError, match=r"^Attempt\.outcome is 'EXPLODED', not "):
        RequestRecord.from_json(document(attempts=[unknown]))
    with pytest.raises(TypeError, match=r"^a RequestRecord is \['r1'\], not an object$"):
        RequestRecord.from_json(["r1"])  # type: ignore[arg-type]


def test_a_long_value_is_shown_cut_to_sixty_characters() -> None:
    long_value = "x" * 100
    with pytest.raises(TypeError) as raised:
        RequestRecord.from_json(document(output_dir=[long_value]))
    shown = str(raised.value).split(" is ", 1)[1].split(", not ")[0]
    assert len(shown) == 60 and shown.endswith("...") and shown.startswith("['xxx")
    with pytest.raises(TypeError) as exact:
        RequestRecord.from_json(document(output_dir=["y" * 56]))  # its repr is exactly sixty characters
    assert "'" + "y" * 56 + "']" in str(exact.value)
    with pytest.raises(TypeError) as over:
        RequestRecord.from_json(document(output_dir=["z" * 57]))  # sixty-one: cut
    assert "['" + "z" * 55 + "..., not" in str(over.value)


# ---- the private copy ---------------------------------------------------------------------------------


class Colour(enum.Enum):
    RED = "red"


def test_a_private_copy_of_values_json_does_not_have_is_a_deep_one() -> None:
    nested = {"set": {1, 2}, "tuple": ([1], "a"), "enum": Colour.RED, "status": RequestStatus.RUNNING}
    copied = private_copy(nested)
    assert copied == nested
    assert copied["set"] is not nested["set"] and copied["tuple"][0] is not nested["tuple"][0]
    assert isinstance(copied["tuple"], tuple)
    assert copied["enum"] is Colour.RED and copied["status"] is RequestStatus.RUNNING


# ---- the shape check of a kind of field no record part has yet ---------------------------------------


@dataclass
class _Future:
    """A record part with the kinds of field the shape check promises to judge beyond today's."""

    either: int | str | None = None
    either_required: int | str = 0
    nothing: None = None
    loose: Any = None
    mixed: list[int] | str | None = None
    newer_fields: dict[str, Any] = field(default_factory=dict)


@pytest.mark.parametrize(
    "value, accepted",
    [(1, True), ("one", True), (None, True), (1.5, False), (True, False), ([1], False)],
)
def test_a_field_of_several_types_takes_a_value_of_any_of_them(value: Any, accepted: bool) -> None:
    if accepted:
        assert known_fields(_Future, {"either": value})["either"] == value
    else:
        with pytest.raises(TypeError, match="_Future.either is"):
            known_fields(_Future, {"either": value})


def test_a_field_of_several_types_without_none_refuses_none_and_a_none_field_takes_only_none() -> None:
    assert known_fields(_Future, {"either_required": "x", "nothing": None}) == {
        "either_required": "x",
        "nothing": None,
        "newer_fields": {},
    }
    with pytest.raises(TypeError, match="_Future.either_required is None"):
        known_fields(_Future, {"either_required": None})
    with pytest.raises(TypeError, match="_Future.nothing is 0"):
        known_fields(_Future, {"nothing": 0})


@pytest.mark.parametrize("value", [None, 1, "one", [1, "two"], {"any": ["thing"]}])
def test_a_field_of_any_type_takes_any_json_value(value: Any) -> None:
    assert known_fields(_Future, {"loose": value})["loose"] == value


@pytest.mark.parametrize("value, accepted", [([1, 2], True), ("one", True), (None, True), (["one"], False), (1, False)])
def test_a_field_of_several_types_one_a_container_judges_the_container_by_its_check(value: Any, accepted: bool) -> None:
    # A list is no plain type: its value reaches the union's own check, not the fast path.
    if accepted:
        assert known_fields(_Future, {"mixed": value})["mixed"] == value
    else:
        with pytest.raises(TypeError, match="_Future.mixed is"):
            known_fields(_Future, {"mixed": value})


def test_a_document_as_this_version_writes_it_is_read_without_calling_init(monkeypatch: pytest.MonkeyPatch) -> None:
    record = RequestRecord("r1", {"x": 1}, "gs://b/r1/", attempts=[attempt(1, state=JobState.RUNNING)])
    whole = record.to_document()
    called: list[str] = []
    for cls in (RequestRecord, Attempt):
        init = cls.__init__
        monkeypatch.setattr(
            cls, "__init__", lambda self, *a, init=init, **k: called.append("init") or init(self, *a, **k)
        )
    read = RequestRecord.from_json(private_copy(whole))
    assert called == [] and read == record and read.to_document() == whole
    older = {name: value for name, value in private_copy(whole).items() if name != "finished_at"}
    reordered = dict(reversed(private_copy(whole).items()))
    for other in (older, reordered):  # the fields' defaults, or another order: through __init__
        assert RequestRecord.from_json(other) == record
    assert called == ["init", "init"]
