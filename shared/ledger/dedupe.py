"""A bare body's identity: the same content within a dedupe window is one request.

A bare CustomJob body published without a `request_id` attribute (or envelope id, which always
win) is named by its content and the window it falls in, like content-based deduplication in
queues that promise it (Amazon SQS FIFO: the same body within 5 minutes is one message). A
window opens at the first publish (or `schedule_time`) of a content and lasts
`bare_dedupe_seconds` (5 minutes); the same content published again inside it is the same
request, whatever minute boundary lies between; after it, a new window and a new request.

The windows of one content are one document in the state bucket, `dedupe/<sha256 of the
content>.json`, `{"windows": [{"lo", "hi", "request_id"}]}`, changed only by compare-and-swap on
its generation (create with `if_generation_match=0`), so concurrent deliveries of a publisher's
two tries agree on one window: the loser of the race reads the winner's window and joins it.

Windows are disjoint and only grow, so a message, however often and late it is delivered (or
redriven with its original publish time), always lands in the window it landed in first:
- a moment inside a window belongs to it;
- a moment shortly before a window (less than the dedupe time: a retry processed before the
  first try) extends that window back to it;
- otherwise it opens a window `[moment, moment + dedupe)`, which ends before the next one.
Windows older than `HORIZON_SECONDS` (longer than Pub/Sub keeps a message, so no delivery can
still name them) are dropped on the next write, and the whole document goes once its newest window
is that old: every write (a new generation) sets the object's Custom-Time
(https://cloud.google.com/storage/docs/metadata#custom-time) to the newest window's end, and a
lifecycle rule on `dedupe/` (terraform/storage.tf, `days_since_custom_time`) deletes it a day after
the horizon. A content never published again leaves nothing behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.clock import iso, parse_iso
from shared.swap import Decided, compare_and_swap

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

DEDUPE_PREFIX = "dedupe/"
HORIZON_SECONDS = 32 * 86400.0  # Pub/Sub keeps a message at most 31 days
MAX_CONFLICTS = 20

Windows = list[dict[str, str]]


def place(
    windows: Windows, moment: datetime, dedupe_seconds: float, name: Callable[[datetime], str]
) -> tuple[str, Windows | None]:
    """The request id of a content seen at `moment`, and the windows to store (None: unchanged)."""
    moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)  # as stored: milliseconds
    later = [w for w in windows if parse_iso(w["lo"]) > moment]
    for window in windows:
        if parse_iso(window["lo"]) <= moment < parse_iso(window["hi"]):
            return window["request_id"], None
    following = min(later, key=lambda w: parse_iso(w["lo"]), default=None)
    if following is not None and (parse_iso(following["lo"]) - moment).total_seconds() < dedupe_seconds:
        extended = [{**w, "lo": iso(moment)} if w is following else w for w in windows]
        return following["request_id"], extended
    opened = {
        "lo": iso(moment),
        "hi": iso(moment + timedelta(seconds=dedupe_seconds)),
        "request_id": name(moment),
    }
    horizon = moment - timedelta(seconds=HORIZON_SECONDS)
    kept = [w for w in windows if parse_iso(w["hi"]) > horizon]
    return opened["request_id"], sorted([*kept, opened], key=lambda w: w["lo"])


def newest_end(windows: Windows) -> datetime:
    """The end of the newest window: the document is needed until `HORIZON_SECONDS` after it.
    Windows only grow, and one is dropped only by a write opening a later one: it never moves back."""
    return max(parse_iso(w["hi"]) for w in windows)


def bare_request_id(
    bucket: Bucket,
    digest: str,
    moment: datetime,
    dedupe_seconds: float,
    name: Callable[[datetime], str],
) -> str:
    """The request id of the content `digest` published (or scheduled) at `moment`."""
    from google.api_core.exceptions import NotFound, PreconditionFailed

    blob_name = f"{DEDUPE_PREFIX}{digest}.json"

    def read() -> tuple[dict[str, Any] | None, int]:
        blob = bucket.blob(blob_name)
        try:
            return json.loads(blob.download_as_bytes()), int(blob.generation)
        except NotFound:
            return None, 0

    def write(_current: dict[str, Any] | None, document: dict[str, Any], generation: int) -> bool:
        blob = bucket.blob(blob_name)
        blob.custom_time = newest_end(document["windows"])  # what the lifecycle rule counts from
        try:
            blob.upload_from_string(
                json.dumps(document, separators=(",", ":")),
                content_type="application/json",
                if_generation_match=generation,
            )
        except PreconditionFailed:  # another delivery placed this content first: read again
            return False
        return True

    def join(document: dict[str, Any] | None) -> Decided[dict[str, Any]]:
        request_id, changed = place(list((document or {}).get("windows", [])), moment, dedupe_seconds, name)
        return Decided(None if changed is None else {"windows": changed}, request_id)

    placed = compare_and_swap(
        read,
        write,
        join,
        private_copy=lambda doc: json.loads(json.dumps(doc)),
        what=blob_name,
        max_conflicts=MAX_CONFLICTS,
    )
    return placed.decided
