"""Time, in one place: the current UTC moment and the RFC 3339 text the ledger, alerts and logs use."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime, *, timespec: str = "milliseconds") -> str:
    """RFC 3339, UTC, `Z`; milliseconds unless asked otherwise."""
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def now_iso() -> str:
    return iso(utcnow())


def parse_iso(value: str) -> datetime:
    """The inverse of `iso` (any RFC 3339 text with an offset or `Z`)."""
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
