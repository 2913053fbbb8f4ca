"""A request's record: the document the ledger keeps per request (`shared.ledger.store` stores it).

Plain data and its JSON form. Fields this version does not know are kept under `newer_fields` and
written back as they were read: during a rolling deploy an older instance rewrites a record a
newer one wrote, and must not drop what it cannot read. Markers name decisions already made, in
the same compare-and-swap as the decision (`alert_marker`, `evidence_marker`).

Reading a part's JSON (its fields checked against their declared types) is `shared.ledger.shapes`.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar

from shared.clock import now_iso, parse_iso
from shared.errors import SpotjobsError
from shared.jobs import JobSnapshot, JobState
from shared.ledger.shapes import built, known_fields
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.requests.attempts import SPOT

SCHEMA_VERSION = 1

_T = TypeVar("_T")


@dataclass
class Attempt:
    n: int
    location: str
    strategy: str  # "SPOT" or the fallback strategy
    claimed_at: str
    # The machine type its primary worker pools run on when the request lists `capacity`
    # alternatives (shared/fleet/capacity.py); None: the request's own CustomJob, as submitted.
    machine: str | None = None
    job: str | None = None  # full resource name, once created
    state: str | None = None  # Vertex JobState name as last observed, e.g. "JOB_STATE_RUNNING"
    created_at: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    state_changed_at: str | None = None
    # Vertex's update time in the newest read of its job taken in (None: no read said one): a read
    # of the state the record holds updated before it is of an earlier span of it (`is_fresh`,
    # shared/deciding/waits.py).
    vertex_updated_at: str | None = None
    # When its job's current wait began (QUEUED then PENDING in a row): its create, or the end of its
    # last RUNNING; any other stuck state's (CANCELLING, UPDATING, PAUSED) own start; None while it
    # is in none. `job_stuck`, a move (`consider_move`) and the deadline rule's hold time it.
    wait_began_at: str | None = None
    # Its job's waits after it had run (QUEUED or PENDING once RUNNING: a Spot restart waiting for a
    # machine, which Vertex bills none of), as far as reads vouch for them (shared/fleet/spend.py):
    # the seconds of those that ended, and of the one it waits in now, from the update time of its
    # state (`rewait_since`) to the start of the latest read that found it still so.
    rewaited_seconds: float = 0.0
    rewait_since: str | None = None
    rewait_seen_until: str | None = None
    preemptions: int = 0
    # When the newest of them were seen, oldest first (shared/deciding/preemptions.py): how often
    # lately, which a deadline request's move weighs (`shared.deciding.deadline.preempted_often`).
    preempted_at: list[str] = field(default_factory=list)
    # Times reconcile re-published this attempt because its claim never got a job (after a bound,
    # with one alert naming the evidence: never failed for it, see shared/reconcile.py).
    republished: int = 0
    republished_at: str | None = None
    # The last create Vertex turned away for now (429, 503: busy, not a verdict on the request).
    last_create_error: dict[str, Any] | None = None
    error: dict[str, Any] | None = None  # google.rpc.Status {code, message}
    outcome: AttemptOutcome | None = None
    create_sent_at: str | None = None  # when submit sent the create (a lagging list may hide it)
    # When it began waiting for Vertex's submission quota (shared/pacing.py); its place in line.
    waiting_since: str | None = None
    # It ended by preemption, but no evidence said how often: at least once (shared/deciding/preemptions.py).
    preemptions_unknown: bool = False
    # From the trainer kit's checkpoint lines: how many, their total write time, when.
    checkpoints_committed: int = 0
    checkpoint_seconds: float = 0.0
    first_checkpoint_at: str | None = None
    last_checkpoint_at: str | None = None
    last_checkpoint: list[int] | None = None  # [run, step] of the last one counted
    # Its size: the bytes of the files the kit sealed in it (its checkpoint_committed line), what
    # placement weighs of moving it (shared/fleet/placing.py).
    last_checkpoint_bytes: int | None = None
    # From the kit's progress lines: the steps the run plans, and its latest rate.
    total_steps: int | None = None
    steps_per_second: float | None = None
    # A deadline switch (shared/deciding/deadline_watch.py) or the request's cancel
    # (shared/ledger/cancelling.py) decided this attempt's cancel: pending until the outbox sent it.
    cancel_decided_at: str | None = None
    cancel_sent_at: str | None = None
    # The key its containers sign their kit lines with (shared/ledger/claims.py draws it before the
    # create). Stored, never shown: `RequestRecord.to_json` leaves it out.
    kit_key: str | None = field(default=None, repr=False, compare=False)
    # The fleet's estimate of Spot in `location` when a deadline request's claim placed it
    # (`SpotOutlook.to_json`, shared/fleet/placing.py): the deadline rule weighs the wait from it.
    spot_outlook: dict[str, float] | None = None
    # Why it runs in `location` (shared/fleet/placing.py), decided with its claim.
    placed: str | None = None
    # The fleet's changeover bound in `location` when it was claimed (a deadline request's, from
    # the claim's one read of the fleet: shared/fleet/placing.py), which the deadline's d covers.
    fleet_changeover_seconds: float | None = None
    # It ran into Vertex's job timeout after committing progress: the next attempt continues it and
    # is not counted against max_attempts (shared/deciding/continuations.py).
    continued_after_timeout: bool = False
    newer_fields: dict[str, Any] = field(default_factory=dict)  # see `shared.ledger.shapes.known_fields`

    @property
    def cancel_pending(self) -> bool:
        return self.cancel_decided_at is not None and self.cancel_sent_at is None

    @property
    def create_in_doubt(self) -> bool:
        """A create was sent for its claim (`create_sent_at`) and no lookup found it missing since
        (a re-publish after it): its job may have landed and run, even to its end (seed 24: the
        drainer died before it recorded the job). Reconcile's lookup after the claim lease adopts
        the job, or finds none and re-publishes the claim, which then waits for a create."""
        if not self.create_sent_at:
            return False
        return not self.republished_at or parse_iso(self.republished_at) < parse_iso(self.create_sent_at)

    @property
    def ending(self) -> bool:
        """Its job was told to stop (a deadline switch) and Vertex has not been seen to end it:
        the cancel is asynchronous (CANCELLING first), and the next attempt must wait for the end
        or both would train into the request's checkpoints."""
        return self.cancel_decided_at is not None and self.state not in JobState.TERMINAL

    def within_run(self, moment: datetime, job: JobSnapshot | None = None) -> datetime:
        """`moment`, not before its job's start nor past its end as Vertex reported them (as
        recorded, or in `job`, a read not yet taken in): a kit line's time is its job's clock, and a
        read may be taken after the job ended. What a fact seen at `moment` is stamped at."""
        started = self.started_at or (job.start_time if job is not None else None)
        ended = self.ended_at or (job.end_time if job is not None else None)
        bounded = max(moment, parse_iso(started)) if started else moment
        return min(bounded, parse_iso(ended)) if ended else bounded

    @property
    def mean_checkpoint_interval(self) -> float | None:
        """Seconds between two of its commits on average (the kit's lines); None before two."""
        if self.checkpoints_committed < 2 or not self.first_checkpoint_at or not self.last_checkpoint_at:
            return None
        span = parse_iso(self.last_checkpoint_at) - parse_iso(self.first_checkpoint_at)
        return span.total_seconds() / (self.checkpoints_committed - 1)

    @property
    def job_id(self) -> str | None:
        return self.job.rsplit("/", 1)[-1] if self.job else None


@dataclass
class Requeue:
    """Attempt n+1 decided (ledger first), then published (confirmed by `message_id`)."""

    attempt: int
    location: str
    strategy: str
    reason: str
    decided_at: str
    # The machine it runs on, decided with it (a re-queue after a preemption, a deadline switch, a
    # move); None: the request's own, or, with `capacity`, chosen again when it is claimed.
    machine: str | None = None
    not_before: str | None = None
    message_id: str | None = None  # set once the publish is confirmed
    published_at: str | None = None
    newer_fields: dict[str, Any] = field(default_factory=dict)  # see `shared.ledger.shapes.known_fields`


@dataclass
class CancelIntent:
    """Someone asked that the request run no more (`shared.ledger.cancelling`): who, when, why.
    Recorded once; from then on no path creates an attempt for the request."""

    by: str  # the caller's account (the credentials' in the cloud, the local user locally)
    at: str
    reason: str | None = None
    # "operator" (spotjobs cancel), "vertex" (cancelled there by hand), or "budget" (its max_cost_usd
    # reached: shared/deciding/budget_watch.py)
    source: str = "operator"
    newer_fields: dict[str, Any] = field(default_factory=dict)  # see `shared.ledger.shapes.known_fields`


@dataclass
class Stray:
    """A job with the request's labels that the ledger does not record, noted when the stray sweep
    decides its cancel (shared/deciding/strays.py): Vertex bills what it ran, so the request's bill
    holds it (shared/fleet/spend.py), from `started_at` to `seen_until`, the start of the read
    that found it not ended. Its end is never read: that part of the bill is a floor."""

    job: str
    attempt: int | None  # its label's, None when the label names no attempt
    location: str
    # Its scheduling strategy's name and workerPoolSpecs (machineSpec.machineType, replicaCount) as
    # read; both empty when the read left them out: then billed as its attempt's job.
    strategy: str
    pools: list[dict[str, Any]]
    seen_until: str
    started_at: str | None = None  # its startTime as read; None: it had not started then
    newer_fields: dict[str, Any] = field(default_factory=dict)  # see `shared.ledger.shapes.known_fields`


@dataclass
class RequestRecord:
    request_id: str
    request: dict[str, Any]  # the normalized job request (see shared.requests.envelope)
    output_dir: str
    status: RequestStatus = RequestStatus.CLAIMED
    attempts: list[Attempt] = field(default_factory=list)
    requeue: Requeue | None = None
    # Markers of what was decided, written in the same compare-and-swap as the decision they
    # guard: "kind:attempt" for alerts decided, and the preemption evidence already counted.
    markers: list[str] = field(default_factory=list)
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    finished_at: str | None = None
    prune_requested_at: str | None = None
    # Decided but not yet confirmed published (see the module docstring): alerts as their JSON,
    # and whether the prune request is still to be sent.
    pending_alerts: list[dict[str, Any]] = field(default_factory=list)
    prune_pending: bool = False
    # The requester's notifications decided, in order, not yet confirmed published to the
    # request's `notify` topic (shared/deciding/notices.py).
    pending_notices: list[dict[str, Any]] = field(default_factory=list)
    # When a delivery took over effects whose decider was presumed dead (one taker at a time).
    effects_taken_at: str | None = None
    cancel: CancelIntent | None = None
    # Jobs of the request the ledger did not record, which the stray sweep cancelled: on its bill.
    strays: list[Stray] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    newer_fields: dict[str, Any] = field(default_factory=dict)  # see `shared.ledger.shapes.known_fields`

    @property
    def latest(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def attempt(self, n: int) -> Attempt | None:
        for attempt in self.attempts:  # a loop, not a generator: asked at every decision
            if attempt.n == n:
                return attempt
        return None

    def spot_attempts_before(self, n: int) -> int:
        """How many Spot attempts came before attempt n (the policy's minimum counts them)."""
        return sum(1 for a in self.attempts if a.n < n and a.strategy == SPOT)

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal

    def mark(self, key: str) -> bool:
        """Add marker `key`; False when it was already there (the decision was made before)."""
        if key in self.markers:
            return False
        self.markers.append(key)
        return True

    def count_marks(self, prefix: str) -> int:
        return sum(1 for key in self.markers if key.startswith(prefix))

    @property
    def has_pending_effects(self) -> bool:
        return bool(self.pending_alerts) or self.prune_pending or bool(self.pending_notices)

    def to_json(self) -> dict[str, Any]:
        """The record as shown (status, explain, reports): without the attempts' kit keys, and
        sharing nothing with the record."""
        shown = private_copy(self.to_document())
        for attempt in shown["attempts"]:
            attempt.pop("kit_key", None)
        return shown

    def to_document(self) -> dict[str, Any]:
        """The record as the ledger stores it, kit keys included (the state bucket, which no job
        reads). Its values are the record's own, not copies: serialize it (`to_json` copies)."""
        document = _with_newer_fields(self)
        document["attempts"] = [_with_newer_fields(attempt) for attempt in self.attempts]
        document["strays"] = [_with_newer_fields(stray) for stray in self.strays]
        for name in ("requeue", "cancel"):
            if document[name] is not None:
                document[name] = _with_newer_fields(document[name])
        return document

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        """The record a document holds. A document of another shape (a field missing, null or of
        another type, a past or future version's layout) raises TypeError or ValueError, as one
        that does not parse does: the store reads either as corrupt (`CorruptRecord`)."""
        data = known_fields(cls, data)
        data["status"] = RequestStatus(data.get("status", RequestStatus.CLAIMED))
        data["attempts"] = [_attempt_from_json(a) for a in data.get("attempts", [])]
        data["strays"] = [built(Stray, known_fields(Stray, s)) for s in data.get("strays", [])]
        if data.get("requeue") is not None:
            data["requeue"] = built(Requeue, known_fields(Requeue, data["requeue"]))
        if data.get("cancel") is not None:
            data["cancel"] = built(CancelIntent, known_fields(CancelIntent, data["cancel"]))
        return built(cls, data)


class CorruptRecord(SpotjobsError):
    """A ledger document that cannot be read (hand-edited, truncated): nothing is decided on it
    until an operator repairs or restores it; `shared.deciding.outbox.alert_corrupt_record` says so once."""

    def __init__(self, request_id: str, reason: str) -> None:
        super().__init__(f"ledger document of {request_id} cannot be read: {reason}")
        self.request_id = request_id
        self.reason = reason


def shared_record(raw: bytes) -> RequestRecord:
    """The record a stored document holds, parsed once per distinct document and shared by every
    caller: never to be changed (`private_copy` it). A delivery reads one document several times,
    and a parse costs several copies. Raises as `RequestRecord.from_json` does (ValueError for
    bytes that are not JSON)."""
    record = _parsed(raw)
    return record if record is not None else RequestRecord.from_json(json.loads(raw))


@functools.lru_cache(maxsize=256)
def _parsed(raw: bytes) -> RequestRecord | None:
    data = json.loads(raw)
    if isinstance(data, dict) and not {"created_at", "updated_at"} <= data.keys():
        return None  # a default of either is the time of the read: parsed at each read
    return RequestRecord.from_json(data)


def _attempt_from_json(data: dict[str, Any]) -> Attempt:
    attempt = built(Attempt, known_fields(Attempt, data))
    if attempt.outcome is not None:
        attempt.outcome = AttemptOutcome(attempt.outcome)
    return attempt


def private_copy(value: _T) -> _T:
    """A deep copy of a record (or of its document) that shares nothing mutable with it: what
    `copy.deepcopy` gives, at a fraction of its cost on this plain data (every compare-and-swap of
    a record copies it once). The record's classes, dicts, lists and tuples are copied member by
    member; strings, numbers and enums are shared, being immutable; anything else goes to
    `copy.deepcopy`."""
    kind = type(value)
    # Members that are immutable scalars are shared without a call: most of a record is.
    if kind is dict:
        return {key: member if type(member) in _SHARED else private_copy(member) for key, member in value.items()}  # type: ignore[attr-defined,return-value]
    if kind is list:
        return [member if type(member) in _SHARED else private_copy(member) for member in value]  # type: ignore[attr-defined,return-value]
    if kind in _SHARED or isinstance(value, Enum):
        return value
    if kind in _RECORD_CLASSES:
        copied = object.__new__(kind)
        members = value.__dict__.copy()
        for name, member in members.items():
            if type(member) not in _SHARED:
                members[name] = private_copy(member)
        copied.__dict__ = members
        return copied
    if kind is tuple:
        return tuple(private_copy(member) for member in value)  # type: ignore[attr-defined,return-value]
    return copy.deepcopy(value)


# The record's own enums among them: a status or an outcome costs no call.
_SHARED = frozenset({str, int, float, bool, type(None), RequestStatus, AttemptOutcome})
_RECORD_CLASSES = frozenset({RequestRecord, Attempt, Requeue, CancelIntent, Stray})


@functools.cache
def _field_order(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if f.name != "newer_fields")


def _with_newer_fields(data: Any) -> dict[str, Any]:
    """A record part's fields in order, then its `newer_fields` folded back in place, as it was read."""
    return {**{name: getattr(data, name) for name in _field_order(type(data))}, **data.newer_fields}


def alert_marker(kind: str, attempt: int, *qualifiers: str) -> str:
    """The marker that says alert `kind` was decided for `attempt` (once per qualifier)."""
    return ":".join((kind, str(attempt), *qualifiers))


def evidence_marker(kind: str, attempt: int, identity: str = "") -> str:
    """The marker of one piece of evidence already counted for `attempt` (e.g. a log line's
    identity); with no identity, the prefix that `RequestRecord.count_marks` counts."""
    return f"{kind}:{attempt}:{identity}"
