"""The alerts log: every ops alert the outbox publishes is also kept in the state bucket, one small
object per alert, so any number of `spotjobs dashboard`s can show the recent ones (the
`ops-alerts-reader` subscription belongs to `spotjobs alerts`: a reader there takes alerts away
from the ops rotation).

`alerts/<yyyy-mm-dd>/<hhmmss.ffffff>-<digest>.json`: the day and time the alert was decided (its
`time`) and a digest of the whole alert, so a listing of a day is in time order and publishing the
same alert again (the outbox is at least once) writes the same object again. It is written just
before the publish: an alert published is in the log, and an alert whose publish then fails stays
pending in its record and is written (to the same name) and published again. A lifecycle rule on
`alerts/` deletes an entry after `LOG_DAYS` (terraform/storage.tf).

Alerts a trigger publishes itself (shared/triggers/: `trigger_failed`, `trigger_corrupt`) do not go
through the outbox and are not in the log.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.alerts import Alert
from shared.clock import parse_rfc3339, utcnow

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

    from shared.ledger.store import LedgerStore
    from shared.wiring import Ports

ALERTS_PREFIX = "alerts/"
LOG_DAYS = 30  # the lifecycle rule deletes an entry a day after this (terraform/storage.tf)
DIGEST_CHARACTERS = 16
READERS = 16  # entries read at once (each read mostly waits on the network)


def entry_name(alert: Alert) -> str:
    """Where `alert` is logged: its decision's day and time, then a digest of all of it."""
    canonical = json.dumps(alert.to_json(), sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:DIGEST_CHARACTERS]
    decided = parse_rfc3339(alert.time) or utcnow()
    return f"{ALERTS_PREFIX}{decided:%Y-%m-%d}/{decided:%H%M%S.%f}-{digest}.json"


def log_alert(ledger: LedgerStore, alert: Alert) -> None:
    """Keep `alert` in the log of `ledger`'s bucket (the same alert again rewrites its entry).
    Raises what the write raises: the caller then does not publish it, and it stays pending."""
    from shared.ledger.run_lock import ledger_bucket

    ledger_bucket(ledger).blob(entry_name(alert)).upload_from_string(
        json.dumps(alert.to_json(), separators=(",", ":"), default=str), content_type="application/json"
    )


def publish_alert(ports: Ports, alert: Alert) -> str:
    """Publish one alert now, logged first: every alert published is in the log. The outbox's
    publish of a pending alert (shared/deciding/outbox.py), and the publish of one no record can
    hold (a request rejected before it has one: its caller raises on failure, so the redelivery
    decides and sends it again)."""
    log_alert(ports.ledger, alert)
    return ports.publish(ports.settings.ops_alerts_topic, alert.to_json(), **alert.attributes())


def recent_alerts(bucket: Bucket, now: datetime, *, limit: int, days: int = 7) -> list[dict[str, Any]]:
    """The newest `limit` alerts of the last `days` days, newest first (an entry that does not read
    as a JSON object, a hand edit, is left out)."""
    names: list[str] = []
    for day in range(days + 1):  # today's, then back: the newest days first
        names += sorted(_names_of(bucket, now - timedelta(days=day)), reverse=True)
        if len(names) >= limit:
            break
    from concurrent.futures import ThreadPoolExecutor  # the dashboard's read only: no function pays for it

    with ThreadPoolExecutor(READERS) as pool:
        entries = list(pool.map(lambda name: _read(bucket, name), names[:limit]))
    return [entry for entry in entries if entry is not None]


def _names_of(bucket: Bucket, day: datetime) -> Iterator[str]:
    prefix = f"{ALERTS_PREFIX}{day:%Y-%m-%d}/"
    for blob in bucket.client.list_blobs(bucket, prefix=prefix, fields="items(name),nextPageToken"):
        yield blob.name


def _read(bucket: Bucket, name: str) -> dict[str, Any] | None:
    from google.api_core.exceptions import NotFound

    try:
        entry = json.loads(bucket.blob(name).download_as_bytes())
    except (NotFound, ValueError, RecursionError):  # expired since listed, or not JSON
        return None
    return entry if isinstance(entry, dict) else None
