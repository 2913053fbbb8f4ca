"""Creates paced to Vertex AI's submission quota: a burst waits its turn and drains at the quota's
rate, in order, with no request failed or dead-lettered for it (docs/ARCHITECTURE.md, "Pacing
creates to the quota").

Vertex AI allows each project 60 job submissions per minute per region
(https://cloud.google.com/vertex-ai/docs/quotas). Everything here lives under `pacing/` in the
state bucket, per region:

- **slots**: `pacing/slots/<location>/<n>`, one empty object per `60 / vertex_creates_per_minute`
  seconds of wall time, created once (`if_generation_match=0`). A create is sent only by whoever created the slot
  of that moment, so every instance together sends at most one create per slot: the rate holds
  across instances with no object written twice (GCS sustains about one write per second per
  object name, so a counter object could not). The default pace, 58 a minute, keeps any sixty
  seconds below 61 creates whatever their timing inside their slots.
- **the waiting line**: `pacing/<location>/waiting/<priority>~<request_id>~<attempt>`, one empty
  object per attempt waiting for a slot, written once (every delivery of the attempt names the
  same entry) before the record notes the wait (`waiting_since`: the entry's generation, the
  microsecond GCS committed it), and removed only once the attempt is settled (or its job cannot
  be looked up for good: `shared.paced_submit.leave_line_unlooked`). Its turn is higher
  `priority` first, then that generation: the drainer lists the whole line before each create
  and takes the first, so an entry committed before that listing is never passed by one
  committed after it (GCS lists are strongly consistent).
- **the drainer lease**: `pacing/<location>/drainer.json`, held (compare-and-swap on its
  generation) by at most one submit_job delivery at a time, which creates the waiting attempts in line order, one per slot,
  through the claim protocol (each create is exactly-once for the same reasons as any other), for
  `pacer_run_seconds`. On leaving it re-lists the line, and if anyone waits it publishes the head
  attempt's message to job-requests: that delivery takes the lease and carries on. An entry that
  arrives while the lease is held is seen by the holder's next listing or by that re-list, so no
  waiting attempt is left without a drainer; one that crashed is replaced by reconcile once its
  lease ran out (`shared.pacing_drainer.restart_stalled`).
- **the burst**: `pacing/<location>/burst.json`, created once when a drainer first finds a line
  that needs longer than `quota_alert_after_seconds` to drain (a short line is pacing, not a
  quota problem); its creator publishes the one `quota_limited` alert of the burst (how many
  wait, the expected drain time), then notes it sent: if it died before that, the next drainer
  run that finds the line long sends it. Whoever hands the line over, or restarts it, and finds it empty
  removes it.

This module is the layout and its objects (`Pacer`): what a slot, an entry, the lease and the
burst are, and when an entry is settled. The order of writes that no one waits without a drainer
and no one is passed rests on is its users': the drainer's run (the line listed after the slot is
taken, the hand-over after the lease is released, reconcile's restart) is
`shared.pacing_drainer`, submit's side (an entry before its record) `shared.paced_submit`.

A request waits (acknowledged, never redelivered for it) when anyone is already waiting in its
region, when its moment's slot is taken, or when Vertex answers a create with a rate-limit 429
anyway (another client of the project's quota). A 429 for a resource quota (GPUs, CPUs) is not a
rate: its delivery is acknowledged with the claim released, and reconcile re-publishes it with
backoff (`shared.paced_submit.left_to_reconcile`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.clock import iso
from shared.ledger.records import RequestRecord
from shared.requests.envelope_options import MAX_PRIORITY

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

    from shared.settings import Settings
    from shared.wiring import Ports

PACING_PREFIX = "pacing/"
# Slots of every region, under one prefix: a lifecycle rule deletes them after a day
# (terraform/storage.tf); nothing reads a past slot.
SLOTS_PREFIX = f"{PACING_PREFIX}slots/"
_SEPARATOR = "~"  # in no request id
# Entries per listing page (the most GCS returns): the drainer lists the whole line before each
# create, so a new arrival with a higher priority goes next.
WAITING_PAGE = 1000
# A drainer's lease outlives its run by a create's worth of time; an expired one may be taken.
LEASE_MARGIN_SECONDS = 30.0


@dataclass(frozen=True)
class Waiting:
    """One attempt in the waiting line: its entry's name and generation (when GCS committed it)."""

    location: str
    key: str
    generation: int = 0

    @property
    def request_id(self) -> str:
        return self.key.split(_SEPARATOR)[1]

    @property
    def attempt(self) -> int:
        return int(self.key.split(_SEPARATOR)[2])

    @property
    def turn(self) -> tuple[str, int, str]:
        """Its place in line: priority (higher first; the name starts with it), then arrival."""
        return self.key.split(_SEPARATOR)[0], self.generation, self.key


def waiting_entry(location: str, priority: int, request_id: str, attempt: int) -> Waiting:
    """The entry of one attempt: one name whatever delivery writes it, so it is written once."""
    return Waiting(location, _SEPARATOR.join((f"{MAX_PRIORITY - priority:07d}", request_id, str(attempt))))


def generation_time(generation: int) -> str:
    """A GCS generation is the microsecond its write was committed: the entry's arrival."""
    return iso(datetime.fromtimestamp(generation / 1e6, UTC), timespec="microseconds")


def priority_of(record: RequestRecord) -> int:
    return int(record.request.get("priority") or 0)


def hold_for_quota(
    current: RequestRecord | None,
    *,
    n: int,
    claimed_at: str,
    now: datetime,
    lease_seconds: float,
    waiting_since: str,
) -> RequestRecord | None:
    """Attempt n waits for a slot: note since when (once), and hand our claim back (backdated by a
    lease, as after a refused create: nothing was created) so the drainer may take it at once.
    Only our own claim of an attempt without a job; None writes nothing."""
    attempt = current.attempt(n) if current else None
    if current is None or attempt is None or attempt.job is not None or attempt.outcome is not None:
        return None
    if attempt.claimed_at != claimed_at:
        return None
    attempt.waiting_since = attempt.waiting_since or waiting_since
    attempt.claimed_at = iso(now - timedelta(seconds=lease_seconds))
    attempt.create_sent_at = None
    return current


def is_rate_limited(exc: BaseException) -> bool:
    """A 429 for the request rate (RATE_LIMIT_EXCEEDED, or a per-minute quota named in the message:
    https://cloud.google.com/apis/design/errors), not for a resource quota such as GPUs."""
    from google.api_core.exceptions import TooManyRequests

    if not isinstance(exc, TooManyRequests):
        return False
    return getattr(exc, "reason", None) == "RATE_LIMIT_EXCEEDED" or "per minute" in str(exc).lower()


def is_resource_quota(exc: BaseException) -> bool:
    """A 429 that names a quota other than the rate: a resource quota (GPUs, CPUs), which a later
    slot does not clear. A 429 that names no quota at all is not judged one: it keeps its place in
    line and is tried again at the next slot, as a rate 429 is."""
    from google.api_core.exceptions import TooManyRequests

    return isinstance(exc, TooManyRequests) and not is_rate_limited(exc) and "quota" in str(exc).lower()


def is_settled(record: RequestRecord | None, n: int) -> bool:
    """Whether waiting attempt n needs nothing more from the line: it has a job or an outcome, or
    its request finished, was cancelled (or is gone). Its entry leaves the line on sight, whoever
    sees it: a drainer that died after creating it must not leave it first in line for good, nor
    a cancel keep it there (reconcile's lookup finds and cancels a job its sent create made:
    seed 828)."""
    attempt = record.attempt(n) if record else None
    if record is None or attempt is None or record.cancel is not None:
        return True
    return bool(attempt.job or attempt.outcome) or record.is_terminal


class Pacer:
    """The slots, the waiting line, the drainer lease and the burst of one state bucket."""

    def __init__(
        self,
        bucket: Bucket,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._bucket = bucket
        self.slot_seconds = 60.0 / max(1, settings.vertex_creates_per_minute)
        self.lease_seconds = settings.pacer_run_seconds + settings.create_timeout_seconds + LEASE_MARGIN_SECONDS
        self._clock = clock
        self._sleep = sleep

    def now(self) -> float:
        return self._clock()

    # Slots.

    def take_slot(self, location: str) -> bool:
        """Create this moment's slot; False if another create has it."""
        index = int(self._clock() // self.slot_seconds)
        return self._create_once(f"{SLOTS_PREFIX}{location}/{index:012d}", {}) is not None

    def wait_for_slot(self, location: str, deadline: float) -> bool:
        """Take the first free slot from now on, sleeping to each slot's start; False at `deadline`
        (wall clock, as the slots are), never sleeping past it to a slot that starts later: the run
        ends inside its function's timeout (a slot may be longer than a run: one create a minute)."""
        while self._clock() < deadline:
            if self.take_slot(location):
                return True
            to_next_slot = self.slot_seconds - self._clock() % self.slot_seconds + 0.001
            self._sleep(min(to_next_slot, deadline - self._clock()))
        return False

    # The waiting line.

    def enqueue(self, entry: Waiting) -> int:
        """Write the entry once; its generation (the first write's, on any later delivery)."""
        name = f"{_prefix(entry.location)}waiting/{entry.key}"
        generation = self._create_once(name, {})
        if generation is None:
            blob = self._bucket.get_blob(name)
            generation = int(blob.generation) if blob is not None else 0
        return generation

    def line_locations(self) -> list[str]:
        """Every region with a line, a burst or a lease under `pacing/` (one delimiter listing):
        a line outlives the requests that put it there, so no list of active ones finds them all."""
        iterator = self._bucket.client.list_blobs(
            self._bucket, prefix=PACING_PREFIX, delimiter="/", fields="prefixes,nextPageToken"
        )
        prefixes = {prefix for page in iterator.pages for prefix in page.prefixes}
        return sorted(p[len(PACING_PREFIX) : -1] for p in prefixes if p != SLOTS_PREFIX)

    def anyone_waiting(self, location: str) -> bool:
        iterator = self._bucket.client.list_blobs(
            self._bucket, prefix=f"{_prefix(location)}waiting/", max_results=1, fields="items(name)"
        )
        return any(True for _ in next(iterator.pages, ()))

    def waiting(self, location: str) -> list[Waiting]:
        """The whole line, in turn: one listing per thousand waiting (names and generations)."""
        prefix = f"{_prefix(location)}waiting/"
        blobs = self._bucket.client.list_blobs(
            self._bucket, prefix=prefix, page_size=WAITING_PAGE, fields="items(name,generation),nextPageToken"
        )
        entries = [Waiting(location, blob.name[len(prefix) :], int(blob.generation)) for blob in blobs]
        return sorted((entry for entry in entries if _is_entry_key(entry.key)), key=lambda entry: entry.turn)

    def has_entry(self, entry: Waiting) -> bool:
        return self._bucket.get_blob(f"{_prefix(entry.location)}waiting/{entry.key}") is not None

    def remove(self, entry: Waiting) -> None:
        from google.api_core.exceptions import NotFound

        try:
            self._bucket.delete_blob(f"{_prefix(entry.location)}waiting/{entry.key}")
        except NotFound:
            pass  # removed by an earlier drainer that crashed before moving on

    # The drainer lease.

    def acquire(self, location: str) -> int | None:
        """Take the drainer lease: its generation, or None while another drainer holds it."""
        from google.api_core.exceptions import PreconditionFailed

        name = f"{_prefix(location)}drainer.json"
        generation = self._create_once(name, self._lease_body())
        if generation is not None:
            return generation
        blob = self._bucket.get_blob(name)
        if blob is not None and self._held(blob):
            return None
        try:
            return self._write(name, self._lease_body(), int(blob.generation) if blob is not None else 0)
        except PreconditionFailed:
            return None  # another delivery took it first

    def renew(self, location: str, generation: int) -> int | None:
        from google.api_core.exceptions import PreconditionFailed

        try:
            return self._write(f"{_prefix(location)}drainer.json", self._lease_body(), generation)
        except PreconditionFailed:
            return None  # taken over: this drainer was presumed dead

    def release(self, location: str, generation: int) -> None:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        name = f"{_prefix(location)}drainer.json"
        live = self._bucket.get_blob(name)  # fake-gcs-server ignores ifGenerationMatch on a DELETE
        if live is None or int(live.generation) != generation:
            return  # another drainer's now
        try:
            self._bucket.delete_blob(name, if_generation_match=generation)
        except (NotFound, PreconditionFailed):
            pass

    def lease_free(self, location: str) -> bool:
        blob = self._bucket.get_blob(f"{_prefix(location)}drainer.json")
        return blob is None or not self._held(blob)

    def _held(self, lease: Any) -> bool:
        """Whether a drainer lease is live: it runs out later than now, and no later than a lease
        taken now would (a later time, or one that cannot be read, is no lease this code wrote,
        and would hold the line for good)."""
        now = self._clock()
        return now < _lease_expiry(lease) <= now + self.lease_seconds

    # The burst.

    def burst_alert_due(self, location: str, waiting: int) -> int | None:
        """Open the burst (once), or find it open with its alert unsent (its opener died or could
        not publish; this drainer holds the lease now): the document's generation, the alert then
        being this caller's to send. None when the burst's alert was sent."""
        name = f"{_prefix(location)}burst.json"
        body = {"started_at": self._clock(), "waiting_at_start": waiting, "alerted": False}
        generation = self._create_once(name, body)
        if generation is not None:
            return generation
        burst = self._bucket.get_blob(name)
        if burst is None or _stored_object(burst).get("alerted") is True:
            return None
        return int(burst.generation)  # unsent, or unreadable (then rewritten once it is sent)

    def burst_alerted(self, location: str, generation: int) -> None:
        from google.api_core.exceptions import PreconditionFailed

        try:
            self._write(f"{_prefix(location)}burst.json", {"alerted": True, "alerted_at": self._clock()}, generation)
        except PreconditionFailed:
            pass  # ended (the line emptied) or taken on by a newer drainer meanwhile

    def end_burst(self, location: str) -> None:
        """The burst is over when the line is empty: remove its document, read before the listing
        and deleted at the generation read, so a burst that opened after that listing stays."""
        from google.api_core.exceptions import NotFound, PreconditionFailed

        name = f"{_prefix(location)}burst.json"
        burst = self._bucket.get_blob(name)
        if burst is None or self.anyone_waiting(location):
            return
        try:
            self._bucket.delete_blob(name, if_generation_match=int(burst.generation))
        except (NotFound, PreconditionFailed):
            pass

    # Storage.

    def _lease_body(self) -> dict[str, Any]:
        return {"expires_at": self._clock() + self.lease_seconds}

    def _create_once(self, name: str, body: dict[str, Any]) -> int | None:
        """Create `name`; its generation, or None when it exists."""
        from google.api_core.exceptions import PreconditionFailed

        try:
            return self._write(name, body, 0)
        except PreconditionFailed:
            return None

    def _write(self, name: str, body: dict[str, Any], generation: int) -> int:
        blob = self._bucket.blob(name)
        blob.upload_from_string(json.dumps(body), content_type="application/json", if_generation_match=generation)
        return int(blob.generation)


def _prefix(location: str) -> str:
    return f"{PACING_PREFIX}{location}/"


def _is_entry_key(key: str) -> bool:
    """Whether a name under `waiting/` is an entry `waiting_entry` names (priority, request id,
    attempt): one of another naming (a hand-made object, another version's) is no one's turn."""
    parts = key.split(_SEPARATOR)
    return len(parts) == 3 and parts[0].isdigit() and bool(parts[1]) and parts[2].isdigit()


def _stored_object(blob: Any) -> dict[str, Any]:
    """A lease or burst document; {} when it is no JSON object (written by hand, truncated)."""
    try:
        document = json.loads(blob.download_as_bytes())
    except (ValueError, RecursionError):
        return {}
    return document if isinstance(document, dict) else {}


def _lease_expiry(blob: Any) -> float:
    """When a drainer lease runs out; 0 (expired: anyone may take it over, at its generation)
    when its document cannot be read."""
    expires_at = _stored_object(blob).get("expires_at")
    if not isinstance(expires_at, int | float) or isinstance(expires_at, bool) or not math.isfinite(expires_at):
        return 0.0
    return float(expires_at)


def pacer_for(ports: Ports) -> Pacer:
    from shared.ledger.run_lock import ledger_bucket

    return Pacer(ledger_bucket(ports.ledger), ports.settings)
