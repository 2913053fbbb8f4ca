"""The fleet observations in the state bucket: one empty object per observation, its name the whole
fact, so a burst writes no shared document (each name is created once: a repeated delivery finds
it there) and a decision reads a class's window in one listing (a page per thousand).

    fleet/<class key>/<location>/<kind>~<epoch seconds>~<seconds>~<count>~<attempt key>~<index>[~<replicas>]

(A preemption's or a restart's seconds are rounded up: its time is when an observation saw it had
happened, `shared.fleet.recording.new_facts`, and floored it could precede what Vertex did: seed
10044. The others' are floored. `~<replicas>` only for a job of several: a name written before it
reads as one replica, and a one-replica fact keeps the one name it was created under.) A name
carries its fact's time, so one fact may be stored under two (recorded by two observations that saw
the job at different moments, or floored before seed 10044's fix and rounded up after it): the
estimate and `compact` read each (attempt, kind, index) once, at its earliest time
(`shared.fleet.observations.each_once`).

A lifecycle rule deletes them `RETENTION_DAYS` after their creation (terraform/storage.tf); the
reader keeps only the last `ESTIMATE_WINDOW_SECONDS`, so what is read is bounded by what a class's fleet
does in a window (docs/placement.md, "Observations").

`compact` (the hourly prune run's, shared/pruning/runner.py) folds the facts of each attempt
closed more than `COMPACT_AFTER_SECONDS` ago into one, its summary in the name:

    fleet/<class key>/<location>/attempt~<epoch seconds>~<attempt key>~<exposure>~<waited>~<preemptions>~<restart waits>~<wait>~<changeover>~<replicas>~<answered restart waits>

(a name written before the answered restart waits were kept apart ends at the changeover, or at
`~<replicas>` for a job of several, and reads with none: the lifetime's old rule) then deletes them: a window's listing holds one object per old attempt, however many times it was
preempted. It writes the summary before it deletes, and the reader drops the facts of an attempt
that has one, so a read between the two, a second run, or a late write of an old fact counts
nothing twice (the next run deletes the late one).

A process remembers the names it created or found created (`FACTS_KEPT` of them, per storage
client) and does not ask for them again: an open wait is met by every decision on its request, and
each would otherwise be a refused create. A remembered name deleted since is one nobody reads: the
lifecycle rule deletes a fact `RETENTION_DAYS` after its creation, past the window of its time,
and compaction deletes only the facts of an attempt whose summary the reader takes instead."""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from shared.fleet.estimate import closed, summarize
from shared.fleet.observations import AttemptSummary, FleetFact, Kind, MachineClass, epoch

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

FLEET_PREFIX = "fleet/"
ESTIMATE_WINDOW_SECONDS = 7 * 24 * 3600.0  # what the estimate weighs: a week of the fleet's history
RETENTION_DAYS = 8  # the lifecycle rule's age: a day past the window
PAGE = 1000
# An attempt's evidence of capacity halves every hour (shared/fleet/estimate.py): after a day it
# weighs nothing, and its sums are all the estimate needs of it.
COMPACT_AFTER_SECONDS = 24 * 3600.0
_NONE = "-"
# Facts whose time says by when they had happened (an upper bound): stored rounded up.
_HAPPENED_BY = frozenset({Kind.PREEMPT, Kind.RESTART})
# Fact names a process remembers as created, per client: a busy deployment's open waits many times over.
FACTS_KEPT = 8192


def object_name(machine_class: MachineClass, observation: FleetFact) -> str:
    o = observation
    if o.at is None:
        at = 0
    elif o.kind in _HAPPENED_BY:
        at = math.ceil(o.at.timestamp())
    else:
        at = epoch(o.at)
    if o.summary is not None:
        s = o.summary
        sums = (s.exposure, s.waited, s.preemptions, s.restart_waits, s.wait, s.changeover)
        fact = "~".join([Kind.ATTEMPT.value, str(at), o.attempt_key, *(_NONE if v is None else str(v) for v in sums)])
        if s.answered_restart_waits is None:
            fact += _replicas_suffix(s.replicas)
        else:
            fact += f"~{s.replicas}~{s.answered_restart_waits}"
    else:
        fact = f"{o.kind.value}~{at}~{round(o.seconds)}~{o.count}~{o.attempt_key}~{o.index}"
        fact += _replicas_suffix(o.replicas)
    return f"{FLEET_PREFIX}{machine_class.key}/{o.location}/{fact}"


def parse_name(name: str) -> tuple[MachineClass, FleetFact] | None:
    """The observation a name holds; None for a name not of this format."""
    try:
        _, class_key, location, fact = name.split("/", 3)
        parts = fact.split("~")
        if parts[0] == Kind.ATTEMPT.value:
            _, at, key, exposure, waited, preemptions, restart_waits, wait, changeover, *more = parts
            replicas, answered = _summary_tail(more)
            summary = AttemptSummary(
                int(exposure),
                int(waited),
                int(preemptions),
                int(restart_waits),
                _optional(wait),
                _optional(changeover),
                replicas,
                answered,
            )
            observation = FleetFact(
                Kind.ATTEMPT, location, datetime.fromtimestamp(int(at), UTC), attempt_key=key, summary=summary
            )
        else:
            kind, at, seconds, count, key, index, *more = parts
            observation = FleetFact(
                Kind(kind),
                location,
                datetime.fromtimestamp(int(at), UTC),
                _duration(seconds, int(at)),
                int(count),
                key,
                int(index),
                replicas=_replicas(more),
            )
        return MachineClass.from_key(class_key), observation
    except (ValueError, OverflowError, OSError):  # OverflowError, OSError: a time past any calendar
        return None


def _duration(text: str, at: int) -> float:
    """A fact's seconds: a duration that ended by its time `at` (epoch seconds), so begun after
    1970. Anything else (not a number, negative, longer) no job can have taken, and the estimate's
    arithmetic on it would pass any calendar (a hand-written name)."""
    seconds = float(text)
    if not 0 <= seconds <= at:  # False for NaN too
        raise ValueError(f"seconds {text}: no duration that ended at {at}")
    return seconds


def _optional(text: str) -> int | None:
    return None if text == _NONE else int(text)


def _replicas_suffix(replicas: int) -> str:
    return f"~{replicas}" if replicas > 1 else ""


def _replicas(more: Sequence[str]) -> int:
    """The replica count after a name's fixed parts: none is one; any other tail is no fact."""
    if not more:
        return 1
    (text,) = more  # more than one extra part: ValueError, not this format
    replicas = int(text)
    if replicas < 2:
        raise ValueError(f"replicas {text}: written only for several")
    return replicas


def _summary_tail(more: Sequence[str]) -> tuple[int, int | None]:
    """A summary's replicas and answered restart waits; a name written before the latter (none,
    or the replicas of a job of several) has None."""
    if len(more) < 2:
        return _replicas(more), None
    text, answered = more  # more than two extra parts: ValueError, not this format
    replicas = int(text)
    if replicas < 1 or int(answered) < 0:
        raise ValueError(f"replicas {text}, answered restart waits {answered}")
    return replicas, int(answered)


def write_facts(bucket: Bucket, machine_class: MachineClass, observations: Iterable[FleetFact]) -> int:
    """Create each observation's object once; how many were new. A name this process created or
    found created is not asked for again (the module docstring). A failed upload does not stop the
    others: each fact is its own object, so a 503 loses only its own, and the first failure is
    raised once every other fact was asked for (an advisory write: the caller logs it); asked
    again, only what is missing is written."""
    from google.api_core.exceptions import PreconditionFailed

    written = 0
    failed: Exception | None = None
    for observation in observations:
        name = object_name(machine_class, observation)
        if _created.known(bucket, name):
            continue
        try:
            bucket.blob(name).upload_from_string(b"", content_type="application/octet-stream", if_generation_match=0)
        except PreconditionFailed:
            _created.note(bucket, name)  # recorded by an earlier delivery
            continue
        except Exception as exc:  # noqa: BLE001 - raised below, once the other facts were asked for
            failed = failed or exc
            continue
        _created.note(bucket, name)
        written += 1
    if failed is not None:
        raise failed
    return written


class _CreatedNames:
    """The fact names known to exist, per storage client (a simulated world's client never sees
    another's), the most recent `FACTS_KEPT` of each."""

    def __init__(self) -> None:
        self._by_client: weakref.WeakKeyDictionary[object, OrderedDict[tuple[str, str], None]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()  # reconcile's workers record facts at once

    def known(self, bucket: Bucket, name: str) -> bool:
        key = (bucket.name, name)
        with self._lock:
            names = self._by_client.get(bucket.client)
            if names is None or key not in names:
                return False
            names.move_to_end(key)
            return True

    def note(self, bucket: Bucket, name: str) -> None:
        with self._lock:
            names = self._by_client.setdefault(bucket.client, OrderedDict())
            names[(bucket.name, name)] = None
            while len(names) > FACTS_KEPT:
                names.popitem(last=False)


_created = _CreatedNames()


def read(
    bucket: Bucket, machine_class: MachineClass, now: datetime, window_seconds: float = ESTIMATE_WINDOW_SECONDS
) -> list[FleetFact]:
    """The class's observations of the window, every location, in one listing."""
    since = now - timedelta(seconds=window_seconds)
    found = [fact for _, fact in _listing(bucket, machine_class)]
    return [o for o in _uncompacted(found) if o.at is not None and o.at >= since]


def _listing(bucket: Bucket, machine_class: MachineClass) -> list[tuple[str, FleetFact]]:
    """Every object of the class's observations, with the fact it names (one listing)."""
    blobs = bucket.client.list_blobs(
        bucket, prefix=f"{FLEET_PREFIX}{machine_class.key}/", page_size=PAGE, fields="items(name),nextPageToken"
    )
    return [(blob.name, parsed[1]) for blob in blobs if (parsed := parse_name(blob.name)) is not None]


def _uncompacted(facts: Sequence[FleetFact]) -> list[FleetFact]:
    """Without the facts of an attempt that has its summary (they may outlive it by a run)."""
    summarized = {(o.location, o.attempt_key) for o in facts if o.summary is not None}
    return [o for o in facts if o.summary is not None or (o.location, o.attempt_key) not in summarized]


def compact(bucket: Bucket, machine_class: MachineClass, now: datetime) -> int:
    """Fold each attempt closed more than `COMPACT_AFTER_SECONDS` ago into one summary object and
    delete its facts (the module docstring); how many attempts were folded."""
    from google.api_core.exceptions import NotFound, PreconditionFailed

    by_attempt: dict[tuple[str, str], list[tuple[str, FleetFact]]] = {}
    for name, fact in _listing(bucket, machine_class):
        by_attempt.setdefault((fact.location, fact.attempt_key), []).append((name, fact))
    cutoff = now - timedelta(seconds=COMPACT_AFTER_SECONDS)
    folded = 0
    for (location, key), named in by_attempt.items():
        facts = [fact for _, fact in named]
        stale = [name for name, fact in named if fact.summary is None]
        if not stale:
            continue
        if not any(fact.summary is not None for fact in facts):  # not folded yet: is it time?
            newest = max((fact.at for fact in facts if fact.at is not None), default=None)
            if newest is None or newest > cutoff or not closed(facts):
                continue
            summary = FleetFact(Kind.ATTEMPT, location, newest, attempt_key=key, summary=summarize(facts, now))
            try:
                bucket.blob(object_name(machine_class, summary)).upload_from_string(
                    b"", content_type="application/octet-stream", if_generation_match=0
                )
            except PreconditionFailed:
                pass  # folded by a run that died before deleting
            folded += 1
        for name in stale:
            try:
                bucket.blob(name).delete()
            except NotFound:
                continue  # deleted by another run
    return folded


def classes(bucket: Bucket) -> list[MachineClass]:
    """Every class with observations (one delimiter listing); a folder of another name is passed over."""
    iterator = bucket.client.list_blobs(bucket, prefix=FLEET_PREFIX, delimiter="/", fields="prefixes,nextPageToken")
    prefixes = {prefix for page in iterator.pages for prefix in page.prefixes}
    return sorted(machine_class for p in prefixes if (machine_class := _class_of(p[len(FLEET_PREFIX) : -1])))


def _class_of(key: str) -> MachineClass | None:
    """The class a folder names; None for a folder not of a class's key (made by hand)."""
    try:
        return MachineClass.from_key(key)
    except ValueError:
        return None
