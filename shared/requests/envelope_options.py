"""The envelope's options, each read and bounded: where it runs (`location`, `locations`), how
often (`max_attempts`), when it leaves Spot (`fallback`), what it keeps (`checkpoints`), by when
it must finish (`deadline` with what the work comes with), its place in the quota's line
(`priority`), its budget (`max_cost_usd`), its running time past the job timeout
(`max_runtime`) and where its notices go (`notify`). `capacity` has a module of its own
(`shared.requests.capacity`).

Each reader takes the raw JSON value (the deadline's: the whole body, for what comes with it)
and the violations list, and answers the value, or None (the envelope's default where it has
one) with a violation naming the field: reading never raises and never stops at the first
problem. The bounds are there so that no arithmetic on an untrusted number overflows or means
nothing. What a deployment allows of these values is judged by `shared.requests.policy`; which
keys an envelope has, and its canonical form, by `shared.requests.envelope`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from shared.clock import iso, parse_rfc3339
from shared.errors import Violation
from shared.requests.attempts import FALLBACK_STRATEGIES
from shared.requests.job_schema import field_path

LOCATION_PATTERN = re.compile(r"^[a-z]+(-[a-z]+)+[0-9]+$")
# What a deadline comes with: the work and, optionally, overrides of the estimates.
DEADLINE_DETAILS = ("total_steps", "expected_step_seconds", "changeover_seconds")
# A request's `priority` orders it among those waiting for Vertex's submission quota (higher first).
MAX_PRIORITY = 1_000_000
# Bounds on what a deadline comes with, so that no arithmetic on them overflows or means nothing:
# a deadline within a year of its publish, at most a trillion steps, no step or changeover longer
# than a year.
MAX_DEADLINE_AHEAD = timedelta(days=366)
MAX_TOTAL_STEPS = 10**12
MAX_SECONDS = MAX_DEADLINE_AHEAD.total_seconds()
# A request's budget in US dollars (`max_cost_usd`): bounded so that no arithmetic on it means nothing.
MAX_COST_USD = 10.0**9
# `notify.topic`: a Pub/Sub topic's full path, never an address (no request makes the functions
# call a URL). Project ids and topic names as Pub/Sub documents them
# (https://cloud.google.com/pubsub/docs/create-topic#resource_names).
NOTIFY_TOPIC_PATTERN = re.compile(
    r"^projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/topics/(?!goog)[A-Za-z][A-Za-z0-9._~+%-]{2,254}$"
)


@dataclass(frozen=True)
class Fallback:
    """After `after_spot_attempts` Spot attempts, run the remaining ones with `strategy`."""

    after_spot_attempts: int
    strategy: str

    def to_json(self) -> dict[str, Any]:
        return {"after_spot_attempts": self.after_spot_attempts, "strategy": self.strategy}


@dataclass(frozen=True)
class Deadline:
    """Finish by `at`. The work is `total_steps` (else the trainer kit's, once it runs); the step
    time and the changeover override what spotjobs would estimate (shared/deciding/deadline.py)."""

    at: datetime
    total_steps: int | None = None
    expected_step_seconds: float | None = None
    changeover_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The envelope fields, as the canonical envelope carries them."""
        return {
            "deadline": iso(self.at, timespec="seconds"),
            "total_steps": self.total_steps,
            "expected_step_seconds": self.expected_step_seconds,
            "changeover_seconds": self.changeover_seconds,
        }


def read_location(value: object, path: str, violations: list[Violation]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not LOCATION_PATTERN.fullmatch(value):
        violations.append(Violation(path, f"is {value!r}; expected a region such as 'us-central1'"))
        return None
    return value


def read_locations(value: object, violations: list[Violation]) -> tuple[str, ...]:
    if value is None or value == []:  # the canonical envelope writes [] for "no failover"
        return ()
    if not isinstance(value, list):
        violations.append(Violation("locations", "must be a list of regions in failover order"))
        return ()
    locations = [read_location(item, f"locations[{i}]", violations) for i, item in enumerate(value)]
    if len(set(locations)) != len(locations):
        violations.append(Violation("locations", "lists a region more than once"))
    return tuple(loc for loc in locations if loc)


def read_int(
    value: object, path: str, minimum: int, violations: list[Violation], maximum: int | None = None
) -> int | None:
    if value is None:
        return None
    too_big = maximum is not None and isinstance(value, int) and value > maximum
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum or too_big:
        expected = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
        violations.append(Violation(path, f"is {_shown(value)}; expected an integer {expected}"))
        return None
    return value


def _shown(value: object) -> str:
    """A value as a violation quotes it: a 400-digit number is not repeated whole."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def read_priority(value: object, violations: list[Violation]) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > MAX_PRIORITY:
        violations.append(
            Violation("priority", f"is {value!r}; expected an integer from -{MAX_PRIORITY} to {MAX_PRIORITY}")
        )
        return 0
    return value


def read_fallback(value: object, violations: list[Violation]) -> Fallback | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        violations.append(Violation("fallback", 'expected {"after_spot_attempts": k, "strategy": "STANDARD"}'))
        return None
    for key in value:
        if key not in ("after_spot_attempts", "strategy"):
            violations.append(
                Violation(
                    field_path("fallback", key),
                    "unknown field; expected after_spot_attempts, strategy",
                )
            )
    after = read_int(value.get("after_spot_attempts"), "fallback.after_spot_attempts", 0, violations)
    if "after_spot_attempts" not in value:
        violations.append(Violation("fallback.after_spot_attempts", "is required"))
    strategy = value.get("strategy", "STANDARD")
    if strategy not in FALLBACK_STRATEGIES:
        violations.append(Violation("fallback.strategy", f"is {strategy!r}; allowed: {', '.join(FALLBACK_STRATEGIES)}"))
        return None
    return Fallback(after, strategy) if after is not None else None


def read_deadline(body: Mapping[str, Any], published_at: datetime, violations: list[Violation]) -> Deadline | None:
    value = body.get("deadline")
    if value is None:
        for key in DEADLINE_DETAILS:
            if body.get(key) is not None:
                violations.append(Violation(key, "is used only with a deadline (an RFC 3339 time)"))
        return None
    at = parse_rfc3339(value)
    if at is None:
        violations.append(
            Violation("deadline", f"is {_shown(value)}; expected an RFC 3339 time such as 2026-12-07T09:00:00Z")
        )
    elif at > published_at + MAX_DEADLINE_AHEAD:
        violations.append(
            Violation(
                "deadline", f"is {value!r}; at most {MAX_DEADLINE_AHEAD.days} days after the request is published"
            )
        )
        at = None
    steps = read_int(body.get("total_steps"), "total_steps", 1, violations, MAX_TOTAL_STEPS)
    step_seconds = _read_seconds(body.get("expected_step_seconds"), "expected_step_seconds", violations, positive=True)
    changeover = _read_seconds(body.get("changeover_seconds"), "changeover_seconds", violations, positive=False)
    return Deadline(at, steps, step_seconds, changeover) if at is not None else None


def _read_seconds(value: object, path: str, violations: list[Violation], *, positive: bool) -> float | None:
    if value is None:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    # NaN fails every comparison; infinity and huge integers fail the maximum (compared, never
    # converted: float() of a 400-digit integer raises).
    if not number or not (0 <= value <= MAX_SECONDS) or (positive and value == 0):  # type: ignore[operator]
        low = "> 0" if positive else ">= 0"
        violations.append(
            Violation(path, f"is {_shown(value)}; expected a number of seconds {low} and at most {MAX_SECONDS:.0f}")
        )
        return None
    return float(value)  # type: ignore[arg-type]  # checked above


def read_max_cost(value: object, violations: list[Violation]) -> float | None:
    if value is None:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    # NaN fails every comparison; infinity and huge integers fail the maximum (compared, never converted).
    if not number or not (0 < value <= MAX_COST_USD):  # type: ignore[operator]
        violations.append(
            Violation(
                "max_cost_usd",
                f"is {_shown(value)}; expected a number of US dollars > 0 and at most {MAX_COST_USD:.0f}",
            )
        )
        return None
    return float(value)  # type: ignore[arg-type]  # checked above


def read_max_runtime(value: object, violations: list[Violation]) -> float | None:
    """`max_runtime`: seconds, as a number or a duration string ("1209600s") as Vertex's
    `scheduling.timeout` is written; more than 0."""
    if value is None:
        return None
    text = value.strip() if isinstance(value, str) else None
    if text is not None and re.fullmatch(r"[0-9]+(\.[0-9]{1,9})?s", text):
        value = float(text[:-1])
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not (0 < value <= MAX_SECONDS):  # type: ignore[operator]
        violations.append(
            Violation(
                "max_runtime",
                f"is {_shown(value)}; expected seconds > 0 and at most {MAX_SECONDS:.0f}, "
                'as a number or a duration string such as "1209600s"',
            )
        )
        return None
    return float(value)  # type: ignore[arg-type]  # checked above


def read_notify(value: object, violations: list[Violation]) -> str | None:
    """`notify: {"topic": "projects/P/topics/T"}`: the topic path, or None with a violation."""
    if value is None:
        return None
    if not isinstance(value, dict) or "topic" not in value:
        violations.append(Violation("notify", 'expected {"topic": "projects/PROJECT/topics/TOPIC"}'))
        return None
    for key in value:
        if key != "topic":
            violations.append(Violation(field_path("notify", key), "unknown field; expected topic"))
    topic = value["topic"]
    if not isinstance(topic, str) or not NOTIFY_TOPIC_PATTERN.fullmatch(topic):
        violations.append(
            Violation(
                "notify.topic",
                f"is {_shown(topic)}; expected a Pub/Sub topic path projects/PROJECT/topics/TOPIC (a project id of 6-30 "
                "characters, a topic name of 3-255 not starting with goog; never a URL)",
            )
        )
        return None
    return topic


def read_keep_last(value: object, violations: list[Violation]) -> int | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        violations.append(Violation("checkpoints", 'expected {"keep_last": n}'))
        return None
    for key in value:
        if key != "keep_last":
            violations.append(Violation(field_path("checkpoints", key), "unknown field; expected keep_last"))
    return read_int(value.get("keep_last"), "checkpoints.keep_last", 1, violations)
