"""A bare body's dedupe windows (shared/ledger/dedupe.py): the same content within five minutes of
its first publish is one request, whatever minute boundary lies between; later, a new one; and a
message keeps the window it first landed in, however late or often it comes back."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from shared.ledger.dedupe import place

DEDUPE = 300.0
T0 = datetime(2026, 11, 30, 9, 0, 59, 800000, tzinfo=UTC)


def name(opened: datetime) -> str:
    return f"req-x-{opened:%H%M%S%f}"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def deliver(windows: list, moment: datetime) -> tuple[str, list]:
    request_id, changed = place(windows, moment, DEDUPE, name)
    return request_id, windows if changed is None else changed


def test_a_retry_across_a_minute_boundary_is_one_request_and_six_minutes_later_another() -> None:
    windows: list = []
    first, windows = deliver(windows, T0)  # 09:00:59.8
    retry, windows = deliver(windows, at(0.5))  # 09:01:00.3
    later, windows = deliver(windows, at(360))  # six minutes after the first

    assert first == retry != later
    assert len(windows) == 2


def test_the_window_is_measured_from_the_first_publish() -> None:
    windows: list = []
    first, windows = deliver(windows, T0)
    assert deliver(windows, at(299.9))[0] == first
    assert deliver(windows, at(300.0))[0] != first


def test_a_retry_processed_before_its_first_try_joins_that_window() -> None:
    windows: list = []
    retry, windows = deliver(windows, at(0.5))
    first, windows = deliver(windows, T0)

    assert first == retry
    assert deliver(windows, T0)[1] == windows  # now inside: nothing to write


def test_every_message_keeps_the_window_it_first_landed_in_whatever_the_order() -> None:
    rng = random.Random(7)
    for _ in range(100):
        moments = [at(rng.uniform(0, 1800)) for _ in range(12)]
        windows: list = []
        first_answer: dict[datetime, str] = {}
        for moment in [*moments, *rng.sample(moments, len(moments))]:  # then redelivered, shuffled
            request_id, windows = deliver(windows, moment)
            assert first_answer.setdefault(moment, request_id) == request_id
        spans = sorted((w["lo"], w["hi"]) for w in windows)
        assert all(hi <= next_lo for (_, hi), (next_lo, _) in zip(spans, spans[1:]))  # disjoint


def test_windows_older_than_pubsub_keeps_a_message_are_dropped() -> None:
    windows: list = []
    _, windows = deliver(windows, T0)
    _, windows = deliver(windows, T0 + timedelta(days=40))
    assert len(windows) == 1
