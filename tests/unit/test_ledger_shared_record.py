"""A stored document's record as the ledger's reads share it (shared/ledger/records.py,
`shared_record`): parsed once per distinct document and handed to every caller, except a document
without its times, whose defaults are the time of each read; bytes that are no record raise as
`RequestRecord.from_json` does, which the store reads as corrupt."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from shared import clock
from shared.ledger.records import shared_record


def stored(**fields: object) -> bytes:
    return json.dumps({"request_id": "r1", "request": {}, "output_dir": "gs://b/r1/", **fields}).encode()


def test_a_document_is_parsed_once_and_its_record_shared_by_every_read() -> None:
    raw = stored(created_at="2026-01-01T00:00:00.000Z", updated_at="2026-01-01T00:00:01.000Z")
    first = shared_record(raw)
    assert first.request_id == "r1" and first.created_at == "2026-01-01T00:00:00.000Z"
    assert shared_record(raw) is first
    assert shared_record(stored(created_at="t", updated_at="u")) is not first  # another document


@pytest.mark.parametrize("present", [{}, {"created_at": "2026-01-01T00:00:00.000Z"}])
def test_a_document_without_its_times_reads_them_as_the_time_of_each_read(
    present: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = stored(**present)
    monkeypatch.setattr(clock, "utcnow", lambda: datetime(2026, 2, 1, tzinfo=UTC))
    first = shared_record(raw)
    monkeypatch.setattr(clock, "utcnow", lambda: datetime(2026, 3, 1, tzinfo=UTC))
    second = shared_record(raw)
    assert first is not second
    assert (first.updated_at, second.updated_at) == ("2026-02-01T00:00:00.000Z", "2026-03-01T00:00:00.000Z")


@pytest.mark.parametrize(
    "raw, error",
    [(b"{", ValueError), (b"[]", TypeError), (b'"r1"', TypeError), (b'{"request_id": "r1"}', TypeError)],
)
def test_bytes_that_are_no_record_raise_as_a_document_of_another_shape_does(raw: bytes, error: type) -> None:
    with pytest.raises(error):
        shared_record(raw)
