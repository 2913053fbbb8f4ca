"""A bare body's dedupe windows as stored (shared/ledger/dedupe.py, `bare_request_id`) on the
simulator's in-memory Cloud Storage: one document per content, written only by compare-and-swap,
so two deliveries racing on a content agree on one request; its Custom-Time is the newest window's
end; windows past the horizon leave with the next write; a moment is judged to the millisecond, as
it is stored. tests/unit/test_dedupe.py drives the placement itself (`place`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.errors import ConflictError
from shared.ledger.dedupe import DEDUPE_PREFIX, HORIZON_SECONDS, MAX_CONFLICTS, bare_request_id, newest_end, place
from sim.gcs import MemoryStorage
from tests.support.interleave import Clock, Interleaved

DEDUPE = 300.0
T0 = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)
DOCUMENT = f"{DEDUPE_PREFIX}d1.json"


def name(opened: datetime) -> str:
    return f"req-{opened:%d%H%M%S%f}"


@pytest.fixture
def bucket() -> Any:
    return MemoryStorage(clock=Clock(T0)).client().bucket("state")


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch) -> None:
    monkeypatch.setattr("shared.swap.time.sleep", lambda _seconds: None)


def seconds(n: float) -> datetime:
    return T0 + timedelta(seconds=n)


def stored(bucket: Any) -> dict[str, Any]:
    return json.loads(bucket.blob(DOCUMENT).download_as_bytes())


def test_the_first_publish_of_a_content_opens_its_window_in_one_document(bucket: Any) -> None:
    assert bare_request_id(bucket, "d1", T0, DEDUPE, name) == name(T0)
    assert stored(bucket) == {
        "windows": [{"lo": "2026-11-30T09:00:00.000Z", "hi": "2026-11-30T09:05:00.000Z", "request_id": name(T0)}]
    }
    document = bucket.get_blob(DOCUMENT)
    assert document.content_type == "application/json"
    assert document.custom_time == seconds(DEDUPE)  # what the lifecycle rule counts from


def test_an_uncontended_delivery_never_backs_off(bucket: Any, monkeypatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr("shared.swap.time.sleep", waits.append)  # the backoff after a lost race
    assert bare_request_id(bucket, "d1", T0, DEDUPE, name) == name(T0)
    assert bare_request_id(bucket, "d1", seconds(3600), DEDUPE, name) == name(seconds(3600))
    assert waits == []


def test_a_delivery_inside_a_window_writes_nothing(bucket: Any) -> None:
    bare_request_id(bucket, "d1", T0, DEDUPE, name)
    generation = bucket.get_blob(DOCUMENT).generation
    assert bare_request_id(bucket, "d1", seconds(120), DEDUPE, name) == name(T0)
    assert bucket.get_blob(DOCUMENT).generation == generation


def test_custom_time_follows_the_newest_window_whatever_order_they_were_opened_in(bucket: Any) -> None:
    bare_request_id(bucket, "d1", seconds(3600), DEDUPE, name)
    bare_request_id(bucket, "d1", T0, DEDUPE, name)  # an older window, opened later (a late retry)
    assert bucket.get_blob(DOCUMENT).custom_time == seconds(3600 + DEDUPE)
    assert [w["request_id"] for w in stored(bucket)["windows"]] == [name(T0), name(seconds(3600))]


def test_the_newest_end_is_the_latest_window_end_in_any_order() -> None:
    windows = [
        {"lo": "2026-11-30T10:00:00.000Z", "hi": "2026-11-30T10:05:00.000Z", "request_id": "b"},
        {"lo": "2026-11-30T09:00:00.000Z", "hi": "2026-11-30T09:05:00.000Z", "request_id": "a"},
    ]
    assert newest_end(windows) == datetime(2026, 11, 30, 10, 5, tzinfo=UTC)
    assert newest_end(list(reversed(windows))) == datetime(2026, 11, 30, 10, 5, tzinfo=UTC)


def test_two_deliveries_racing_on_a_new_content_agree_on_one_request(bucket: Any) -> None:
    theirs: list[str] = []
    racing = Interleaved(bucket, DOCUMENT, write=lambda: theirs.append(bare_request_id(bucket, "d1", T0, DEDUPE, name)))
    ours = bare_request_id(racing, "d1", seconds(1), DEDUPE, name)  # a publisher's second try
    assert ours == theirs[0] == name(T0)
    assert len(stored(bucket)["windows"]) == 1


def test_a_delivery_that_lost_the_race_to_an_extension_reads_the_winners_window(bucket: Any) -> None:
    bare_request_id(bucket, "d1", seconds(600), DEDUPE, name)
    theirs: list[str] = []
    racing = Interleaved(
        bucket, DOCUMENT, write=lambda: theirs.append(bare_request_id(bucket, "d1", seconds(400), DEDUPE, name))
    )
    # Ours would open [T0, T0+300); theirs extends the window at 600 back to 400 first.
    assert bare_request_id(racing, "d1", T0, DEDUPE, name) == name(T0)
    assert theirs == [name(seconds(600))]
    windows = stored(bucket)["windows"]
    assert [(w["lo"], w["request_id"]) for w in windows] == [
        ("2026-11-30T09:00:00.000Z", name(T0)),
        ("2026-11-30T09:06:40.000Z", name(seconds(600))),
    ]


def test_a_content_that_keeps_changing_under_us_gives_up_after_its_conflicts(bucket: Any) -> None:
    from google.api_core.exceptions import PreconditionFailed

    writes: list[int] = []

    class Contended:
        def __getattr__(self, attribute: str) -> Any:
            return getattr(bucket, attribute)

        def blob(self, blob_name: str) -> Any:
            blob = bucket.blob(blob_name)

            def lost(*_args: Any, **_kwargs: Any) -> None:
                writes.append(1)
                raise PreconditionFailed("another delivery wrote first")

            blob.upload_from_string = lost
            return blob

    with pytest.raises(ConflictError):
        bare_request_id(Contended(), "d1", T0, DEDUPE, name)
    assert len(writes) == MAX_CONFLICTS
    assert MAX_CONFLICTS >= 10  # a burst of retries of one content is many racing deliveries


def test_windows_past_the_horizon_leave_with_the_next_write_and_not_before(bucket: Any) -> None:
    bare_request_id(bucket, "d1", T0, DEDUPE, name)  # its window ends at T0 + 300
    just_inside = seconds(DEDUPE + HORIZON_SECONDS - 0.001)
    bare_request_id(bucket, "d1", just_inside, DEDUPE, name)
    assert [w["request_id"] for w in stored(bucket)["windows"]] == [name(T0), name(just_inside)]
    at_horizon = seconds(DEDUPE + HORIZON_SECONDS + DEDUPE)  # the next window opens after it ends
    bare_request_id(bucket, "d1", at_horizon, DEDUPE, name)
    assert [w["request_id"] for w in stored(bucket)["windows"]] == [name(just_inside), name(at_horizon)]


def test_the_horizon_outlasts_what_pubsub_keeps() -> None:
    # docs/ARCHITECTURE.md: a dedupe document is needed "32 days after its newest window's end"; the
    # lifecycle rule deletes it 33 days after its Custom-Time (terraform/storage.tf).
    assert HORIZON_SECONDS == 32 * 86400


def test_a_window_leaves_when_another_opens_the_horizon_after_its_end() -> None:
    # docs/ARCHITECTURE.md: a dedupe document is needed "32 days after its newest window's end".
    old = {"lo": "2026-10-01T09:00:00.000Z", "hi": "2026-10-01T09:05:00.000Z", "request_id": "old"}
    at_horizon = datetime(2026, 10, 1, 9, 5, tzinfo=UTC) + timedelta(days=32)
    before = at_horizon - timedelta(milliseconds=1)
    _, kept = place([old], before, DEDUPE, name)
    assert [w["request_id"] for w in kept] == ["old", name(before)]
    _, dropped = place([old], at_horizon, DEDUPE, name)
    assert [w["request_id"] for w in dropped] == [name(at_horizon)]


def test_a_moment_is_judged_to_the_millisecond_as_it_is_stored() -> None:
    first = datetime(2026, 11, 30, 9, 5, 0, 0, tzinfo=UTC)
    _, windows = place([], first, DEDUPE, name)
    # 299.9995 s before it, to the microsecond; exactly the dedupe time before it, to the millisecond.
    early = first - timedelta(seconds=DEDUPE) + timedelta(microseconds=500)
    request_id, changed = place(windows, early, DEDUPE, name)
    assert request_id != name(first)  # not "shortly before": a window of its own, ending at the first
    assert changed[0]["hi"] == windows[0]["lo"]
    late = datetime(2026, 11, 30, 9, 10, 0, 999_999, tzinfo=UTC)
    request_id, changed = place(windows, late, DEDUPE, name)
    assert changed[-1]["lo"] == "2026-11-30T09:10:00.999Z"
    assert request_id == name(late.replace(microsecond=999_000))


def test_a_window_opened_at_a_moment_is_named_for_that_moment_to_the_millisecond() -> None:
    moment = datetime(2026, 11, 30, 9, 0, 59, 800_400, tzinfo=UTC)
    request_id, windows = place([], moment, DEDUPE, name)
    assert request_id == name(datetime(2026, 11, 30, 9, 0, 59, 800_000, tzinfo=UTC))
    assert windows == [{"lo": "2026-11-30T09:00:59.800Z", "hi": "2026-11-30T09:05:59.800Z", "request_id": request_id}]


def test_a_moment_shortly_before_the_nearest_of_several_later_windows_extends_that_one() -> None:
    _, windows = place([], seconds(2000), DEDUPE, name)
    _, windows = place(windows, seconds(1000), DEDUPE, name)
    request_id, changed = place(windows, seconds(800), DEDUPE, name)
    assert request_id == name(seconds(1000))
    assert [w["lo"] for w in changed] == ["2026-11-30T09:13:20.000Z", "2026-11-30T09:33:20.000Z"]
    request_id, changed = place(windows, seconds(700), DEDUPE, name)  # exactly the dedupe time before
    assert request_id == name(seconds(700)) and len(changed) == 3


def test_a_moment_at_a_windows_end_is_past_it_and_one_at_its_start_inside() -> None:
    _, windows = place([], T0, DEDUPE, name)
    assert place(windows, T0, DEDUPE, name) == (name(T0), None)
    assert place(windows, seconds(DEDUPE), DEDUPE, name)[0] == name(seconds(DEDUPE))
