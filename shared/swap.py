"""The one compare-and-swap loop, and the one backoff, for every document the functions change in
the state bucket: a ledger record (`shared.ledger.store`), a trigger's documents and a member's
carry (`shared.triggers.store`), a run lease (`shared.ledger.run_lock`) and a bare body's dedupe
windows (`shared.ledger.dedupe`).

Read the document with its generation, give a private copy to a pure transition, write what it
proposes matched on that generation (0 = create), and on a lost race (a 412) wait a little and
decide again from a fresh read. What the call did is a value, `Swapped`: the document as stored,
whether this call's own write put it there, and what the transition's last run decided (the run
whose outcome is stored), so no caller captures its transition's result in a closure.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from shared.errors import ConflictError

T = TypeVar("T")


@dataclass(frozen=True)
class Decided(Generic[T]):
    """What a transition returns when it decides more than the document: `value` is the document
    to write (None, or the one it was given unchanged, to write nothing) and `decision` what it
    decided, handed back as `Swapped.decided`."""

    value: T | None
    decision: Any


@dataclass(frozen=True)
class Swapped(Generic[T]):
    """What one compare-and-swap did."""

    value: T | None  # the document as stored: what this call wrote, or what it found (None: absent)
    wrote: bool  # this call's own write landed (else another delivery's did, or nothing changed)
    decided: Any = None  # `Decided.decision` of the transition's last run; None for a plain one


Transition = Callable[[T | None], "T | Decided[T] | None"]


def backoff_seconds(base: float, attempt: int, cap: float) -> float:
    """`base` doubled `attempt` times, at most `cap`: the one growth rule for a retry's wait."""
    return min(cap, base * 2 ** min(attempt, 32))


def compare_and_swap(
    read: Callable[[], tuple[T | None, int]],
    write: Callable[[T | None, T, int], bool],
    transition: Transition[T],
    *,
    private_copy: Callable[[T], T],
    what: str,
    max_conflicts: int = 20,
) -> Swapped[T]:
    """Run `transition` under compare-and-swap until its proposal is written or it proposes nothing.

    `read()` gives (document or None, generation; 0 when absent). `write(current, proposed,
    generation)` writes matched on the generation and returns False when another writer won (a
    412); anything else it raises is the caller's. A proposal of None, or equal to the current
    document, writes nothing. After `max_conflicts` lost races in a row, ConflictError.
    """
    for conflict in range(max_conflicts):
        current, generation = read()
        outcome = transition(None if current is None else private_copy(current))
        decided = outcome.decision if isinstance(outcome, Decided) else None
        proposed = outcome.value if isinstance(outcome, Decided) else outcome
        if proposed is None or (current is not None and proposed == current):
            return Swapped(current, False, decided)
        if write(current, proposed, generation):
            return Swapped(proposed, True, decided)
        # Someone else wrote first (or our own retried write already landed): decide again, after
        # a random share of a growing wait so racing writers spread out.
        time.sleep(random.uniform(0, backoff_seconds(0.05, conflict, 1.0)))
    raise ConflictError(f"{what} kept changing under us: lost {max_conflicts} compare-and-swap races in a row")
