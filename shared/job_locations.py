"""Where this deployment's jobs may be: every location a create was sent to is remembered (one
empty object each, `maintenance/locations/<location>`, written before the first create there), so
the stray sweep and a look for a deleted record's job list every one of them, with the default
and the allowed locations, whatever the requests reconciled in a pass."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from shared.ledger.run_lock import ledger_bucket
from shared.wiring import Ports

LOCATIONS_PREFIX = "maintenance/locations/"
_remembered: set[tuple[str, str]] = set()  # (state bucket, location) this instance has marked
_remembered_lock = threading.Lock()


def remember_location(ports: Ports, location: str) -> None:
    """Mark `location` as one this deployment sends creates to (before the first create there)."""
    from google.api_core.exceptions import PreconditionFailed

    bucket = ledger_bucket(ports.ledger)
    key = (bucket.name, location)
    with _remembered_lock:
        if key in _remembered:
            return
    try:
        bucket.blob(f"{LOCATIONS_PREFIX}{location}").upload_from_string(b"", if_generation_match=0)
    except PreconditionFailed:
        pass  # marked before
    with _remembered_lock:
        _remembered.add(key)


def sweep_locations(ports: Ports, seen: Iterable[str] = ()) -> list[str]:
    """Every location the stray sweep lists: the default, the allowed ones, every one a create
    was sent to (remembered), and `seen` (the locations of the requests reconciled)."""
    settings = ports.settings
    bucket = ledger_bucket(ports.ledger)
    remembered = {
        blob.name[len(LOCATIONS_PREFIX) :]
        for blob in bucket.client.list_blobs(bucket, prefix=LOCATIONS_PREFIX, fields="items(name),nextPageToken")
    }
    return sorted({settings.location, *settings.allowed_locations, *remembered, *seen} - {""})
