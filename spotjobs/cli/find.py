"""Finding requests in the ledger for `spotjobs status` (`--status`, `--label`, `--since`, the
count per status on top) without reading every record.

A query for active requests only (`--status active`, running, ...) lists the active index
(`active/<id>` markers: shared/ledger/store.py), however long the history; each marker carries its
record's status and creation, so for `--status active` the counts and the choice of the newest
come from that one listing, and only the records shown are read (plus a marker's record when the
marker cannot tell: one from before it held them, or a query by label, time or one active status,
which a status one change behind could answer wrongly). Any other query lists `requests/` with
each document's metadata (status, created_at, labels; the listing's `updated` is its last write) and
reads only the newest matches it shows, plus, once, a document whose metadata cannot tell (written
before it held what the query asks).
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
    from shared.ledger.store import ActiveEntry, ListedRequest

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

    Active requests only (`--status active`, running, ...): one listing of the active index, whose
    markers carry each record's status and creation, decides; the records read are the `limit`
    newest matches, and those whose marker cannot tell. Otherwise one listing of `requests/` with
    each document's metadata decides the same way. A record read is judged by itself (a marker's
    status is a hint noted after each change: the record's decides what is shown and counted)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(RECORD_READERS) as pool:
        if query.active_only and ledger.index_built():
            # A marker's status is a hint one change behind at worst: it says which are active,
            # not which are RUNNING (a query for one active status reads every marked record).
            trusted = query.statuses == {ACTIVE}
            rows = (_as_listed(entry, trusted) for entry in every_row(ledger.list_active))
        else:
            rows = every_row(ledger.list_requests)
        listed, undecided = [], []
        for row in rows:
            verdict = query.matches_listed(row)
            if verdict is None or (verdict and not row.created_at):
                undecided.append(row.request_id)
            elif verdict:
                listed.append(row)
        read_ahead = [r for r in pool.map(ledger.get, undecided) if r is not None and query.matches(r)]
        return _newest(read_ahead, listed, limit, pool, ledger, query, reads=len(undecided))


def _as_listed(entry: ActiveEntry, status_trusted: bool) -> ListedRequest:
    """An active marker as a listed document: its status (when trusted) and creation (None when it
    predates them); no labels or time of last write (a query by them reads the record)."""
    from shared.ledger.store import ListedRequest

    status = entry.status if status_trusted else None
    return ListedRequest(entry.request_id, status, False, created_at=entry.created_at)


def _newest(
    read_ahead: list[RequestRecord],
    listed: list[ListedRequest],
    limit: int,
    pool: Any,
    ledger: Any,
    query: Query,
    *,
    reads: int,
) -> Found:
    """The newest `limit` of the matches (records already read, and rows still to read)."""
    counts = Counter(r.status for r in read_ahead) + Counter(row.status for row in listed)
    candidates: list[tuple[str, str, RequestRecord | None]] = [(r.created_at, r.request_id, r) for r in read_ahead]
    candidates += [(row.created_at or "", row.request_id, None) for row in listed]
    chosen = sorted(candidates, key=lambda c: c[0], reverse=True)[: max(0, limit)]
    to_read = [request_id for _, request_id, record in chosen if record is None]
    listed_statuses = {row.request_id: row.status for row in listed}
    fetched = {r.request_id: r for r in pool.map(ledger.get, to_read) if r is not None}
    shown = []
    for _, request_id, record in chosen:
        if record is None:  # counted by its listed status: the record read now decides
            listed_status = listed_statuses[request_id]
            record = fetched.get(request_id)
            if record is None or record.status != listed_status:
                counts[listed_status] -= 1
                if record is None or not query.status_matches(record.status):
                    continue
                counts[record.status] += 1
        shown.append(record)
    return Found(shown, +counts, reads + len(to_read))


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
