"""Time, in one place: the current UTC moment and the RFC 3339 text the ledger, alerts and logs use."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# How far a time a publisher gives (a schedule time, the first publish time a redrive carries) may
# lie from when Pub/Sub says its message was published. Before: a message waits at most 31 days
# on its topic's subscription and 31 more on the dead-letter topic before a redrive
# (https://cloud.google.com/pubsub/docs/subscription-properties#message_retention_duration).
# After: a scheduler's clock skew. Anything else is refused, not computed with (a year-9999 time
# overflows a window's end).
PUBLISHER_TIME_EARLIEST = timedelta(days=62)
PUBLISHER_TIME_LATEST = timedelta(hours=1)


def utcnow() -> datetime:
    return datetime.now(UTC)


@functools.lru_cache(maxsize=4096)
def iso(moment: datetime, *, timespec: str = "milliseconds") -> str:
    """RFC 3339, UTC, `Z`; milliseconds unless asked otherwise. Remembered: a job's times are
    written again at every read of it, and one delivery stamps several fields with one moment
    (equal moments are one instant, whatever their offsets: one text)."""
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def now_iso() -> str:
    return iso(utcnow())


@functools.lru_cache(maxsize=4096)
def parse_iso(value: str) -> datetime:
    """The inverse of `iso` (any RFC 3339 text with an offset or `Z`). Remembered: a record's
    times are read again at every decision, and a datetime is immutable."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def parse_rfc3339(value: Any) -> datetime | None:
    """An RFC 3339 time as an aware datetime (UTC when it names no offset); None if it is not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def within_publish_range(moment: datetime, published_at: datetime) -> bool:
    """Whether a publisher's `moment` is one its message, published at `published_at`, can have."""
    return published_at - PUBLISHER_TIME_EARLIEST <= moment <= published_at + PUBLISHER_TIME_LATEST
