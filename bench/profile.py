"""Where a function's CPU goes: a deterministic profile (cProfile on the thread's CPU clock) of
one run at load, its self time split into parse/validate, ledger, Google client, logging and the
rest, per message.

Every profiled function's self time belongs to the part its file belongs to (`PARTS`); a function
of no part (the standard library, builtins: json, copy, dataclasses, re...) hands its time to its
callers in proportion to what each caller spent in it, until a function of a part takes it. So
`json.dumps` called by the logger counts as logging, called by the ledger as ledger. cProfile's
own overhead inflates small functions; the shares, not the absolute times, are the finding.
"""

from __future__ import annotations

import cProfile
import pstats
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

# (part, substrings of a file path), first match wins.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("logging", ("/shared/log.py",)),
    (
        "Google client",
        (
            "/google/",
            "/grpc/",
            "/requests/",
            "/urllib3/",
            "/proto/",
            "/google_crc32c/",
            "/google_auth",
            "/googleapis_common_protos/",
            "/http/client.py",
            "/ssl.py",
            "/socket.py",
            "/shared/adapters/clients.py",
            "/shared/adapters/vertex.py",
        ),
    ),
    (
        "ledger",
        (
            "/shared/ledger/store.py",
            "/shared/swap.py",
            "/shared/ledger/claims.py",
            "/shared/deciding/decisions.py",
            "/shared/deciding/job_end.py",
            "/shared/deciding/decision_policy.py",
            "/shared/deciding/waits.py",
            "/shared/deciding/stuck.py",
            "/shared/ledger/states.py",
            "/shared/deciding/outbox.py",
            "/shared/deciding/effects.py",
            "/shared/alerts.py",
            "/shared/requests/attempts.py",
            "/shared/deciding/preemptions.py",
        ),
    ),
    (
        "parse/validate",
        (
            "/shared/requests/envelope.py",
            "/shared/requests/envelope_options.py",
            "/shared/requests/request_ids.py",
            "/shared/requests/policy.py",
            "/shared/requests/job_policy.py",
            "/shared/requests/job_schema.py",
            "/shared/image_ref.py",
            "/shared/requests/job_fields.py",
            "/shared/deciding/events.py",
            "/shared/delivery.py",
        ),
    ),
    ("prune planning", ("/shared/pruning/", "/spotjobs_kit/")),
    ("other (ours)", ("/shared/", "/functions/")),
)
ORDER = ("parse/validate", "ledger", "Google client", "logging", "prune planning", "other (ours)", "other")


def part_of(filename: str) -> str | None:
    for part, needles in PARTS:
        if any(needle in filename for needle in needles):
            return part
    return None


def split(stats: pstats.Stats) -> Counter[str]:
    """Seconds of self time per part (see the module docstring)."""
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    shares: dict[Any, dict[str, float]] = {}
    visiting: set[Any] = set()

    def share(key: Any) -> dict[str, float]:
        """Where the time of `key` goes, as fractions per part (memoized; a cycle is "other")."""
        if key in shares:
            return shares[key]
        part = part_of(key[0])
        if part is not None:
            return {part: 1.0}
        callers = table.get(key, (0, 0, 0, 0, {}))[4]
        total = sum(timing[3] for timing in callers.values())
        if key in visiting or not callers or total <= 0:
            return {"other": 1.0}
        visiting.add(key)
        result: dict[str, float] = {}
        for caller, timing in callers.items():
            for name, fraction in share(caller).items():
                result[name] = result.get(name, 0.0) + fraction * timing[3] / total
        visiting.discard(key)
        shares[key] = result
        return result

    parts: Counter[str] = Counter()
    for key, (_, _, self_time, _, _) in table.items():
        if self_time > 0:
            for name, fraction in share(key).items():
                parts[name] += self_time * fraction
    return parts


def profile(run: Callable[[], Any]) -> tuple[Counter[str], float]:
    """Run `run` under the profiler on this thread's CPU clock: (seconds per part, CPU seconds
    without the profiler's bookkeeping outside the run)."""
    profiler = cProfile.Profile(time.thread_time)
    started = time.thread_time()
    profiler.enable()
    try:
        run()
    finally:
        profiler.disable()
    cpu = time.thread_time() - started
    return split(pstats.Stats(profiler)), cpu


def describe(parts: Counter[str], messages: int) -> str:
    """'parse/validate 0.31 ms (4%), ledger ...' per message, in a fixed order."""
    total = sum(parts.values()) or 1.0
    return ", ".join(
        f"{part} {1000 * parts[part] / messages:.2f} ms ({100 * parts[part] / total:.0f}%)"
        for part in ORDER
        if parts.get(part)
    )


def environment_change_figures(label: str, handle: Callable[[int], Any], session: Any, messages: int) -> list[Any]:
    """The profile of `messages` calls of `handle(i)` at load, before and after the change that
    took the largest avoidable share down (shared/adapters/clients.py: read_environment_once: the storage
    session stops re-reading the environment on every call), in the same run; `session` is the
    storage session the handler's ledger uses. Also the CPU per message without the profiler.
    `handle` is called with 0 .. 4 * messages - 1, each index once (a fresh message each)."""
    from bench.report import Figure

    def plain_cpu(offset: int) -> float:
        started = time.thread_time()
        for i in range(messages):
            handle(offset + i)
        return (time.thread_time() - started) / messages

    results = {}
    for n, (name, trust_env) in enumerate((("before", True), ("after", False))):
        session.trust_env = trust_env
        base = n * 2 * messages
        parts, _ = profile(lambda base=base: [handle(base + i) for i in range(messages)])
        results[name] = (parts, plain_cpu(base + messages))
    (before, cpu_before), (after, cpu_after) = results["before"], results["after"]
    client_before = 1000 * before["Google client"] / messages
    client_after = 1000 * after["Google client"] / messages
    return [
        Figure(f"{label}: CPU per message, profiled, before", describe(before, messages)),
        Figure(
            f"{label}: CPU per message, profiled, after (storage session reads the environment once)",
            describe(after, messages),
        ),
        Figure(
            f"{label}: Google client CPU per message (profiled), before -> after",
            f"{client_before:.2f} -> {client_after:.2f}",
            "ms",
        ),
        Figure(
            f"{label}: CPU per message without the profiler, before -> after",
            f"{1000 * cpu_before:.2f} -> {1000 * cpu_after:.2f}",
            "ms",
        ),
    ]
