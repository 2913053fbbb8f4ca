"""Attempt planning: where and how attempt n of a request runs (shared by submit and events)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Placed(Protocol):
    """Where an earlier attempt ran (a ledger `Attempt` is one)."""

    location: str


SPOT = "SPOT"
ON_DEMAND = "STANDARD"  # what a deadline switches to (shared/deciding/deadline_watch.py)
FALLBACK_STRATEGIES = ("STANDARD", "FLEX_START")


def plan_attempt(request: Mapping[str, Any], n: int, previous: Placed | None, after_stockout: bool) -> tuple[str, str]:
    """(location, strategy) for attempt `n` of a canonical envelope.

    Strategy: SPOT, unless `fallback` is set and `n > fallback.after_spot_attempts` (so
    `after_spot_attempts: 0` means no Spot at all).

    Location: attempt 1 runs in `request["location"]`. A later attempt stays where the previous one
    ran, unless that attempt ended in a stockout and `locations` lists alternatives: then it moves to
    the next region in `locations`, wrapping around after the last. Wrapping rather than staying on
    the last region is deliberate: stockouts are transient, an earlier region has had time to
    recover, and `max_attempts` bounds the tour anyway.
    """
    fallback = request.get("fallback")
    if fallback and n > int(fallback["after_spot_attempts"]):
        strategy = str(fallback.get("strategy") or "STANDARD")
    else:
        strategy = SPOT
    locations: list[str] = list(request.get("locations") or [])
    first = str(request.get("location") or (locations[0] if locations else ""))
    if n == 1 or previous is None:
        return first, strategy
    if not after_stockout or len(locations) < 2:
        return previous.location, strategy
    if previous.location not in locations:
        return locations[0], strategy
    following = (locations.index(previous.location) + 1) % len(locations)
    return locations[following], strategy
