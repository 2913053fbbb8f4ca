"""Finding requests in the ledger for `spotjobs status` (`--status`, `--label`, `--since`, the
count per status on top) without reading every record.

A query for active requests only (`--status active`, running, ...) reads the records the active
index names (`active/<id>` markers: shared/ledger/store.py), one read each, however long the
history. Any other query lists `requests/` with each document's metadata (status, created_at,
labels; the listing's `updated` is its last write) and reads only the newest matches it shows,
plus, once, a document whose metadata cannot tell (written before it held what the query asks).
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.ledger.records import RequestRecord
    from shared.ledger.store import ListedRequest

ACTIVE = "ACTIVE"  # `--status active`: any status that is not terminal
# `--since 24h`: a duration back from now, in these units.
DURATION_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# Records downloaded at once for a listing (each read mostly waits on the network).
RECORD_READERS = 16


def statuses() -> list[str]:
    from shared.ledger.states import RequestStatus

    return [status.value for status in RequestStatus]


def status_filter(text: str) -> str:
    """`--status`: a ledger status in any case, or "active"."""
    value = text.strip().upper()
    if value != ACTIVE and value not in statuses():
        choices = ", ".join(s.lower() for s in [ACTIVE, *statuses()])
        raise argparse.ArgumentTypeError(f"unknown status {text!r}; one of {choices}")
    return value


def label_filter(text: str) -> tuple[str, str]:
    """`--label`: KEY=VALUE (the value may be empty, as a CustomJob label's may)."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (e.g. team=vision)")
    return key.strip(), value.strip()


def since_filter(text: str) -> datetime:
    """`--since`: a duration back from now (90m, 24h, 7d) or an RFC 3339 time or date (UTC unless it
    names an offset)."""
    import re

    from shared.clock import parse_rfc3339, utcnow

    duration = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", text.strip())
    if duration:
        return utcnow() - timedelta(seconds=float(duration[1]) * DURATION_SECONDS[duration[2]])
    moment = parse_rfc3339(text.strip())
    if moment is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (90m, 24h, 7d) nor a time (2026-11-30T08:00:00Z, 2026-11-30)"
        )
    return moment


@dataclass(frozen=True)
class Query:
    """Which requests `status` lists: every filter must hold (empty = no filter)."""

    statuses: frozenset[str] = frozenset()  # ledger statuses, or ACTIVE
    labels: Mapping[str, str] = field(default_factory=dict)
    since: datetime | None = None  # changed at or after

    @property
    def active_only(self) -> bool:
        """Whether only requests the active index holds can match."""
        from shared.ledger.states import TERMINAL_STATUSES

        return bool(self.statuses) and not self.statuses & TERMINAL_STATUSES

    def status_matches(self, status: str) -> bool:
        from shared.ledger.states import TERMINAL_STATUSES

        return (
            not self.statuses
            or status in self.statuses
            or (ACTIVE in self.statuses and status not in TERMINAL_STATUSES)
        )

    def labels_match(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.labels.items())

    def matches(self, record: RequestRecord) -> bool:
        from shared.clock import parse_rfc3339
        from shared.ledger.store import job_labels

        changed = parse_rfc3339(record.updated_at)
        return (
            self.status_matches(record.status)
            and self.labels_match(job_labels(record))
            and (self.since is None or (changed is not None and changed >= self.since))
        )

    def matches_listed(self, row: ListedRequest) -> bool | None:
        """Whether a listed document matches, from its metadata alone; None when the metadata
        cannot tell (a document written before it held the labels or the status): read it."""
        verdicts = []
        if self.statuses:
            verdicts.append(None if row.status is None else self.status_matches(row.status))
        if self.labels:
            verdicts.append(None if row.labels is None else self.labels_match(row.labels))
        if self.since:
            verdicts.append(None if row.updated is None else row.updated >= self.since)
        if False in verdicts:
            return False
        return None if None in verdicts else True


@dataclass(frozen=True)
class Found:
    records: list[RequestRecord]  # the newest `limit` matches, newest first
    counts: Counter[str]  # every match, by status
    reads: int  # records downloaded to find them


def find_records(ledger: Any, query: Query, limit: int) -> Found:
    """The requests `query` matches: the newest `limit` of them and a count of all by status.

    Active requests only (`--status active`, running, ...): the active index names them, so only
    those records are read (a marker may be stale: the record's status decides). Otherwise one
    listing of `requests/` with each document's metadata decides, and only the `limit` newest
    matches are read, plus any document whose metadata cannot tell (written before it held it)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(RECORD_READERS) as pool:
        if query.active_only and ledger.index_built():
            ids = [entry.request_id for entry in every_row(ledger.list_active)]
            read_ahead = [r for r in pool.map(ledger.get, ids) if r is not None and query.matches(r)]
            return _newest(read_ahead, [], limit, pool, ledger, reads=len(ids))
        listed, undecided = [], []
        for row in every_row(ledger.list_requests):
            verdict = query.matches_listed(row)
            if verdict is None or (verdict and not row.created_at):
                undecided.append(row.request_id)
            elif verdict:
                listed.append(row)
        read_ahead = [r for r in pool.map(ledger.get, undecided) if r is not None and query.matches(r)]
        return _newest(read_ahead, listed, limit, pool, ledger, reads=len(undecided))


def _newest(
    read_ahead: list[RequestRecord], listed: list[ListedRequest], limit: int, pool: Any, ledger: Any, *, reads: int
) -> Found:
    """The newest `limit` of the matches (records already read, and rows still to read)."""
    counts = Counter(r.status for r in read_ahead) + Counter(row.status for row in listed)
    candidates: list[tuple[str, str, RequestRecord | None]] = [(r.created_at, r.request_id, r) for r in read_ahead]
    candidates += [(row.created_at or "", row.request_id, None) for row in listed]
    chosen = sorted(candidates, key=lambda c: c[0], reverse=True)[: max(0, limit)]
    to_read = [request_id for _, request_id, record in chosen if record is None]
    fetched = {r.request_id: r for r in pool.map(ledger.get, to_read) if r is not None}
    records = [record or fetched.get(request_id) for _, request_id, record in chosen]
    return Found([r for r in records if r is not None], counts, reads + len(to_read))


def every_row(list_page: Any) -> Iterator[Any]:
    """Every row of a paged ledger listing (`list_requests`, `list_active`)."""
    token: str | None = None
    while True:
        rows, token = list_page(page_size=1000, page_token=token)
        yield from rows
        if not token:
            return


def format_counts(found: Found) -> str:
    """The line above the table: how many requests match, by status, and how many are shown."""
    total = sum(found.counts.values())
    if not total:
        return ""
    by_status = ", ".join(f"{status} {found.counts[status]}" for status in statuses() if found.counts[status])
    shown = f"; the newest {len(found.records)} below" if len(found.records) < total else ""
    return f"{total} request{'s' if total != 1 else ''}: {by_status}{shown}\n"
