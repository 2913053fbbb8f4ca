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
still name them) are dropped on the next write.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.clock import iso, parse_iso
from shared.errors import ConflictError

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
    for attempt in range(MAX_CONFLICTS):
        blob = bucket.blob(blob_name)
        try:
            document: dict[str, Any] = json.loads(blob.download_as_bytes())
            generation = int(blob.generation)
        except NotFound:
            document, generation = {}, 0
        request_id, changed = place(list(document.get("windows", [])), moment, dedupe_seconds, name)
        if changed is None:
            return request_id
        try:
            bucket.blob(blob_name).upload_from_string(
                json.dumps({"windows": changed}, separators=(",", ":")),
                content_type="application/json",
                if_generation_match=generation,
            )
            return request_id
        except PreconditionFailed:  # another delivery placed this content first: read again
            time.sleep(min(0.05 * 2**attempt, 1.0) * random.random())
    raise ConflictError(f"{blob_name}: lost {MAX_CONFLICTS} compare-and-swap races in a row")
