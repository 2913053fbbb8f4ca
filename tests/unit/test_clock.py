"""shared/clock.py: an RFC 3339 text is parsed once however often it is read again (a record's
times are, at every decision), and each reading is the same moment."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from shared import clock


def test_a_time_read_again_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []

    class Counting(datetime):
        @classmethod
        def fromisoformat(cls, text: str) -> Any:
            parsed.append(text)
            return super().fromisoformat(text)

    monkeypatch.setattr(clock, "datetime", Counting)
    text = "2026-12-06T01:02:03.456Z"
    assert clock.parse_iso(text) == clock.parse_iso(text) == datetime(2026, 12, 6, 1, 2, 3, 456000, tzinfo=UTC)
    assert parsed == ["2026-12-06T01:02:03.456+00:00"]


def test_a_text_that_is_no_time_raises_each_time() -> None:
    for _ in range(2):
        with pytest.raises(ValueError):
            clock.parse_iso("not a time")


def test_a_moment_written_again_is_formatted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    formatted: list[str] = []

    class Counting(datetime):
        def isoformat(self, *args: Any, **kwargs: Any) -> str:
            formatted.append("isoformat")
            return super().isoformat(*args, **kwargs)

    moment = Counting(2026, 12, 6, 1, 2, 3, 456789, tzinfo=UTC)
    assert clock.iso(moment) == clock.iso(moment) == "2026-12-06T01:02:03.456Z"
    assert clock.iso(moment, timespec="microseconds") == "2026-12-06T01:02:03.456789Z"
    assert formatted == ["isoformat", "isoformat"]  # once per moment and precision
