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
  lease ran out (`restart_stalled`).
- **the burst**: `pacing/<location>/burst.json`, created once when a drainer first finds a line
  that needs longer than `quota_alert_after_seconds` to drain (a short line is pacing, not a
  quota problem); its creator publishes the one `quota_limited` alert of the burst (how many
  wait, the expected drain time), then notes it sent: if it died before that, the next drainer
  run that finds the line long sends it. Whoever hands the line over, or restarts it, and finds it empty
  removes it.

One module on purpose (over 450 lines): the slots, the line, the drainer lease and the burst
share one layout under `pacing/` and one order of writes (an entry before its record, the line
listed after the slot is taken, the hand-over after the lease is released); split apart, the
argument that no one waits without a drainer and no one is passed would span modules that each
look safe.

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
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.alerts import Alert, AlertKind
from shared.clock import iso
from shared.ledger.records import RequestRecord
from shared.log import Logger
from shared.requests.envelope import MAX_PRIORITY

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
# Slots a busy head is waited for before the drainer passes it for the rest of its run; at a slow
# pace at most all of a run's slots but one (`busy_patience`).
BUSY_PATIENCE = 5
# How often a drainer renews its lease (GCS sustains about one write a second to one object).
RENEW_EVERY_SECONDS = 10.0
# A drainer's lease outlives its run by a create's worth of time; an expired one may be taken.
LEASE_MARGIN_SECONDS = 30.0

# What a drainer's attempt to create one waiting entry came to.
SETTLED = "settled"  # created, found, or nothing left to create: the entry goes
QUOTA = "quota"  # Vertex refused it for the rate anyway: it keeps its place
BUSY = "busy"  # another delivery holds a fresh claim on it, or the create failed for now
# A create of it is in flight or of unknown outcome: its claim is held for a lease (minutes), so
# waiting a few slots cannot help; it is passed at once for the rest of the run.
IN_DOUBT = "in_doubt"
# Vertex refused it for a resource quota (GPUs, CPUs): not a rate, so the line cannot help; it
# leaves the line, its claim released, and reconcile re-publishes it with backoff like any claim
# Vertex turns away for now (`claim_stalled` once), so it never holds back the others behind it.
TURNED_AWAY = "turned_away"


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
        (wall clock, as the slots are)."""
        while self._clock() < deadline:
            if self.take_slot(location):
                return True
            self._sleep(self.slot_seconds - self._clock() % self.slot_seconds + 0.001)
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


# The drainer.


@dataclass(frozen=True)
class Drained:
    held: bool  # whether this call held the lease
    created: int = 0  # entries settled (created or found settled)
    rate_limited: int = 0  # creates Vertex still refused for the rate
    handed_over: str | None = None  # the request whose message carries the drain on


def drain(ports: Ports, location: str, create_one: Callable[[Waiting], str], log: Logger, pacer: Pacer) -> Drained:
    """Create waiting attempts in turn, one per slot, while this delivery holds the drainer lease
    and its run lasts; then hand over to the head of what is left. Once it holds the lease it never
    raises: whatever failed, the lease is released and the line handed over (or left to
    reconcile's restart), since a redelivery of this message may find its own attempt settled and
    carry nothing on."""
    lease = pacer.acquire(location)
    if lease is None:
        return Drained(held=False)
    settled = rate_limited = 0
    passed: set[str] = set()  # heads that stayed busy or are in doubt: passed for the rest of this run
    busy_turns = 0
    patience = busy_patience(pacer, ports.settings)
    burst_seen = False  # looked at once a run, not every slot (one object, ~1 write/s)
    deadline = pacer.now() + ports.settings.pacer_run_seconds
    renewed_at = pacer.now()
    try:
        while lease is not None and pacer.wait_for_slot(location, deadline):
            # The whole line, listed after the slot is ours: whoever is first now goes.
            line = pacer.waiting(location)
            entries = [entry for entry in line if entry.key not in passed]
            if not entries:
                break  # the hand-over below ends the burst of an empty line
            if not burst_seen and len(line) * pacer.slot_seconds > ports.settings.quota_alert_after_seconds:
                burst_seen = True
                _alert_quota_limited(ports, pacer, location, len(line), log)
            head = entries[0]
            outcome = create_one(head)
            if outcome in (SETTLED, TURNED_AWAY):
                # A failed delete leaves it first in line: the next slot finds it settled again.
                left = _leave_line(pacer, head, log)
                settled += int(left and outcome == SETTLED)
            elif outcome == QUOTA:
                rate_limited += 1  # it keeps its place: the next slot tries it again
            # BUSY: the delivery that just put it in line is about to hand its claim over, or the
            # create failed for now: the line waits for it, and passes it only after a while.
            busy_turns = busy_turns + 1 if outcome == BUSY else 0
            if busy_turns >= patience or outcome == IN_DOUBT:
                passed.add(head.key)
                busy_turns = 0
            if pacer.now() - renewed_at >= RENEW_EVERY_SECONDS:  # not every slot: one object, ~1 write/s
                lease, renewed_at = pacer.renew(location, lease), pacer.now()
    except Exception as exc:  # noqa: BLE001 - the run ends; the hand-over (or reconcile) carries the line on
        log.warning("the drainer's run ended early", event="quota_drain_failed", error=f"{type(exc).__name__}: {exc}")
    finally:
        if lease is not None:
            _release(pacer, location, lease, log)
    # Anyone left, passed heads included: the next run waits for them again (a busy head is a
    # fresh claim or a create failing for now; a corrupt record leaves the line, see paced_submit).
    handed_over = _hand_over_or_leave_to_reconcile(ports, pacer, location, log, passed)
    log.info(
        "drained the line of creates waiting for the quota",
        event="quota_drain",
        location=location,
        created=settled,
        rate_limited=rate_limited,
        handed_over_to=handed_over,
    )
    return Drained(True, settled, rate_limited, handed_over)


def busy_patience(pacer: Pacer, settings: Settings) -> int:
    """Slots a busy head is waited for: `BUSY_PATIENCE`, but at most all of the slots a run is
    sure to have but one (a run of R seconds takes at least R // slot of them). Busy turns are
    counted within a run, and the hand-over goes to a head not passed: a head waited for every
    slot of each run (6 creates a minute, 40 s runs: 4 slots) would be handed the line again and
    again, and the requests behind it wait for as long as it stays busy."""
    sure = int(settings.pacer_run_seconds // pacer.slot_seconds)
    return max(1, min(BUSY_PATIENCE, sure - 1))


def _leave_line(pacer: Pacer, entry: Waiting, log: Logger) -> bool:
    try:
        pacer.remove(entry)
    except Exception as exc:  # noqa: BLE001 - it stays first in line, settled: whoever sees it next removes it
        log.warning(
            "could not remove a settled entry from the line; it is removed when next seen",
            event="quota_leave_failed",
            request_id=entry.request_id,
            attempt=entry.attempt,
            error=f"{type(exc).__name__}: {exc}",
        )
        return False
    return True


def _release(pacer: Pacer, location: str, lease: int, log: Logger) -> None:
    try:
        pacer.release(location, lease)
    except Exception as exc:  # noqa: BLE001 - the lease expires; reconcile restarts the line then
        log.warning("could not release the drainer lease", event="quota_release_failed", error=str(exc))


def _hand_over_or_leave_to_reconcile(
    ports: Ports, pacer: Pacer, location: str, log: Logger, passed: Collection[str]
) -> str | None:
    try:
        return hand_over(ports, pacer, location, log, passed)
    except Exception as exc:  # noqa: BLE001 - reconcile restarts a stalled line
        log.warning(
            "could not hand the waiting line over; reconcile restarts it",
            event="quota_handover_failed",
            location=location,
            error=f"{type(exc).__name__}: {exc}",
        )
        return None


def hand_over(ports: Ports, pacer: Pacer, location: str, log: Logger, passed: Collection[str] = ()) -> str | None:
    """If anyone still waits, publish the message of the first attempt in line that needs a create
    (one this run did not pass first: a passed one may be held by a fresh claim, whose delivery
    would be redelivered, not drain): its delivery drains on. Settled heads (and unreadable ones,
    alerted) leave the line on the way; an empty line ends the burst. Returns the request id
    handed to. A publish that fails raises: reconcile restarts the line (`restart_stalled`)."""
    from shared.deciding.outbox import alert_corrupt_record, publish_request_attempt
    from shared.ledger.records import CorruptRecord

    for head in sorted(pacer.waiting(location), key=lambda entry: entry.key in passed):  # stable: in turn
        try:
            record = ports.ledger.get(head.request_id)
        except CorruptRecord as exc:
            alert_corrupt_record(ports, exc, log)  # once repaired, reconcile re-publishes it
            pacer.remove(head)
            continue
        if is_settled(record, head.attempt):
            pacer.remove(head)
            log.info(
                "a settled attempt left the line",
                event="quota_settled_left",
                request_id=head.request_id,
                attempt=head.attempt,
            )
            continue
        if not ports.may_publish(ports.settings.job_requests_topic):
            return None
        assert record is not None  # not settled
        publish_request_attempt(ports, record, head.attempt, location)
        return record.request_id
    pacer.end_burst(location)
    return None


def restart_stalled(ports: Ports, log: Logger) -> list[str]:
    """Reconcile's part, in every region with anything under `pacing/`: a line with no live
    drainer (it crashed, or its hand-over was lost) is handed to its head again, and an empty
    one's burst ends. Returns the locations restarted."""
    pacer = pacer_for(ports)
    restarted = []
    for location in pacer.line_locations():
        try:
            if not pacer.anyone_waiting(location):
                pacer.end_burst(location)  # its drainer may have died before it could
            elif pacer.lease_free(location) and hand_over(ports, pacer, location, log):
                restarted.append(location)
        except Exception as exc:  # noqa: BLE001 - the next pass looks again
            log.warning(
                "could not check the line waiting for the quota",
                event="quota_restart_failed",
                location=location,
                error=f"{type(exc).__name__}: {exc}",
            )
    return restarted


def _alert_quota_limited(ports: Ports, pacer: Pacer, location: str, count: int, log: Logger) -> None:
    """The burst's one alert. Its burst document is created first, so a second drainer never
    sends another, and noted sent after: a drainer that died or failed to publish in between
    leaves it unsent, and the next run that finds the line long sends it (at least once)."""
    from shared.deciding.outbox import publish_alert

    generation = pacer.burst_alert_due(location, count)
    if generation is None:
        return
    drain_seconds = round(count * pacer.slot_seconds)
    alert = Alert.of(
        AlertKind.QUOTA_LIMITED,
        (
            f"{count} job requests in {location} wait for Vertex AI's "
            f"submission quota; they are created in turn at {ports.settings.vertex_creates_per_minute} "
            f"a minute, about {drain_seconds} s to drain"
        ),
        details={
            "location": location,
            "waiting": count,
            "expected_drain_seconds": drain_seconds,
            "creates_per_minute": ports.settings.vertex_creates_per_minute,
        },
    )
    try:
        publish_alert(ports, alert)
    except Exception as exc:  # noqa: BLE001 - the next run sends it
        log.warning("could not publish the quota_limited alert", event="quota_alert_failed", error=str(exc))
        return
    pacer.burst_alerted(location, generation)
    log.warning(alert.message, event="quota_limited", **alert.details)
