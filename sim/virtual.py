"""Everything in the functions' code paths that reads the wall clock, sleeps, draws randomness,
starts threads or writes to stderr, made virtual, in one place (`install`), for the simulated world:

| what the code uses                                   | where                                   | in the sim |
|------------------------------------------------------|-----------------------------------------|------------|
| `datetime.now(UTC)`                                  | `shared.clock.utcnow` (every module)    | the virtual clock |
| `time.time`, `time.monotonic`, `time.sleep`          | pacing, ledger.store, swap, log, triggers.runner, reconcile_vertex, pruning.execute | virtual; a sleep advances the clock |
| `Pacer(clock=time.time, sleep=time.sleep)`, `CrudBudget(clock=time.monotonic)` | default arguments, bound at import | replaced defaults |
| `random.uniform` (compare-and-swap backoff)          | `shared.swap`                           | the world's seeded `random.Random` |
| `uuid.uuid4` (a prune run's journal, a lock holder)  | pruning.journal, ledger.run_lock        | from the seed |
| `secrets.token_hex` (an attempt's kit signing key)  | ledger.claims                           | from the seed |
| `ThreadPoolExecutor`                                 | reconcile, ledger.retention, found_jobs, pruning.execute | runs each task at once, in order; a `map`'s and a `submit`'s as its workers would in time |
| `sys.stderr`, the configured log level              | shared.log (the process-wide `logger`, any `Logger` without a stream) | the world's log, at its level, bound to the writing task (`World.write_process_line`) |
| `get_settings()`, `ports_for(name)`                  | the shells, `shared.settings`, `shared.wiring` | the world's settings and Ports |
| `STORAGE_EMULATOR_HOST` (fake-gcs-server workarounds) | pruning.runner, ledger.store            | off: the stand-in is GCS |
| per-process caches                                   | job_locations, triggers.runner, triggers.windows, the ledger's parse and the job's conversion memos | emptied for each world |

`install(world)` points all of it at `world` (the originals are kept; `uninstall` restores them).
"""

from __future__ import annotations

import functools
import gc
import importlib
import random
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from typing import Any

_ORIGINALS: dict[tuple[str, str], Any] = {}


class VirtualClock:
    """The simulated world's time: starts at `start`, moves only when told to (or by a sleep)."""

    def __init__(self, start: datetime) -> None:
        self.now_value = start

    def now(self) -> datetime:
        return self.now_value

    def time(self) -> float:
        return self.now_value.timestamp()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self.now_value += timedelta(seconds=seconds)

    def advance_to(self, moment: datetime) -> None:
        self.now_value = max(self.now_value, moment)


class VirtualTime:
    """A stand-in for the `time` module as the functions use it."""

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock

    def time(self) -> float:
        return self._clock.time()

    def monotonic(self) -> float:
        return self._clock.time()

    perf_counter = monotonic

    def sleep(self, seconds: float) -> None:
        self._clock.sleep(seconds)


class SeededUuid:
    """A stand-in for the `uuid` module as the functions use it: `uuid4` from the world's seed, so
    names made of one (a prune run's journal folder, a lock holder's id) sort the same on replay."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)


class SeededSecrets:
    """A stand-in for the `secrets` module as the functions use it: an attempt's kit signing key
    from the world's seed, so the lines a trainer signs with it (and the names made of their
    digests) are the same on replay."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def token_hex(self, nbytes: int) -> str:
        return self._rng.getrandbits(8 * nbytes).to_bytes(nbytes, "big").hex()


class WorldStderr:
    """A stand-in for the `sys` module as `shared.log` uses it: `stderr` is the world's log, so
    the lines of a logger without a stream of its own reach the invariants that read it."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.stderr = self
        self._write = write

    def write(self, text: str) -> int:
        self._write(text)
        return len(text)

    def flush(self) -> None:
        pass


def virtual_datetime(clock: VirtualClock) -> type[datetime]:
    class VirtualDatetime(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            moment = clock.now()
            return moment.astimezone(tz) if tz else moment.replace(tzinfo=None)

    return VirtualDatetime


class SyncExecutor:
    """ThreadPoolExecutor's interface, running every task on the calling thread. A crash (a
    BaseException) is not caught: it aborts the handler as a process crash would. A `map` runs its
    calls through `pool` (the world's `World.pool`: as `max_workers` threads would in time, their
    round trips overlapping); without one, one after another. A `submit` runs its call at once, on
    the worker of `lanes` (`World.lanes`) free first, so submitted calls overlap as a `map`'s do;
    the pool's shutdown (its `with` block's end) waits for the last worker, as a pool's does."""

    def __init__(
        self,
        max_workers: int | None = None,
        *_: Any,
        pool: Pool | None = None,
        lanes: Callable[[int], Any] | None = None,
        **__: Any,
    ) -> None:
        self._workers = max_workers or 1  # every pool of the functions names its size
        self._pool = pool
        self._new_lanes = lanes
        self._lanes: Any = None  # the workers, once a call is submitted

    def __enter__(self) -> SyncExecutor:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: Any) -> None:
        if kind is None or issubclass(kind, Exception):  # a crash waits for nothing: the instance is gone
            self.shutdown()

    def shutdown(self, *_: Any, **__: Any) -> None:
        lanes, self._lanes = self._lanes, None
        if lanes is not None:
            lanes.join()

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        if self._lanes is None and self._new_lanes is not None:
            self._lanes = self._new_lanes(self._workers)
        call = functools.partial(_outcome, fn, args, kwargs)
        succeeded, value = self._lanes.run(call) if self._lanes is not None else call()
        future: Future[Any] = Future()
        if succeeded:
            future.set_result(value)
        else:
            future.set_exception(value)
        return future

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any], **_: Any) -> Iterator[Any]:
        """Every call runs now; the results (or the exception a call raised) come in order, as
        a pool's map gives them. No Future per call: a reconcile pass maps hundreds."""
        calls = [functools.partial(_outcome, fn, args) for args in zip(*iterables, strict=False)]
        outcomes = self._pool(self._workers, calls) if self._pool else [call() for call in calls]
        return _results(outcomes)


Pool = Callable[[int, list[Callable[[], Any]]], list[Any]]


def _outcome(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> tuple[bool, Any]:
    try:
        return True, fn(*args, **(kwargs or {}))
    except Exception as exc:  # noqa: BLE001 - raised when its result is reached, as a pool's
        return False, exc


def _results(outcomes: list[tuple[bool, Any]]) -> Iterator[Any]:
    for succeeded, value in outcomes:
        if not succeeded:
            raise value
        yield value


TIME_USERS = (
    "shared.pacing",
    "shared.ledger.store",
    "shared.swap",
    "shared.log",
    "shared.triggers.runner",
    "shared.reconcile_vertex",
    "shared.pruning.execute",
)
EMULATOR_CHECKS = (("shared.pruning.runner", "emulator_in_use"), ("shared.ledger.store", "_emulator_in_use"))
UUID_USERS = ("shared.pruning.journal", "shared.ledger.run_lock")
THREAD_USERS = (
    "shared.reconcile",
    "shared.reconcile_index",
    "shared.ledger.retention",
    "shared.found_jobs",
    "shared.pruning.execute",
)
SETTINGS_USERS = ("shared.settings", "functions.events", "functions.prune", "functions.reconcile", "functions.triggers")
PORTS_USERS = ("shared.wiring", "functions.events", "functions.reconcile")


def _set(module_name: str, attribute: str, value: Any) -> None:
    module = importlib.import_module(module_name)
    _ORIGINALS.setdefault((module_name, attribute), getattr(module, attribute))
    setattr(module, attribute, value)


def install(world: Any) -> None:
    """Point every clock, sleep, random draw, thread pool, settings and Ports lookup at `world`."""
    import shared.pacing
    import shared.reconcile_vertex

    clock: VirtualClock = world.clock
    virtual_time = VirtualTime(clock)
    _set("shared.clock", "datetime", virtual_datetime(clock))
    for name in TIME_USERS:
        _set(name, "time", virtual_time)
    _set("shared.swap", "random", world.rng)
    _set("shared.log", "sys", WorldStderr(world.write_process_line))
    _set("shared.log", "_configured_level", lambda: world.log_level)
    _set("shared.ledger.claims", "secrets", SeededSecrets(random.Random(f"{world.seed}:kit-keys")))
    seeded_uuid = SeededUuid(random.Random(f"{world.seed}:uuid"))
    for name in UUID_USERS:
        _set(name, "uuid", seeded_uuid)
    for name in THREAD_USERS:
        _set(name, "ThreadPoolExecutor", functools.partial(SyncExecutor, pool=world.pool, lanes=world.lanes))
    for name in SETTINGS_USERS:
        _set(name, "get_settings", lambda: world.settings)
    for name in PORTS_USERS:
        _set(name, "ports_for", world.ports_for)
    # The in-memory storage honours ifGenerationMatch on a DELETE, as GCS does: no workaround for
    # fake-gcs-server, whatever STORAGE_EMULATOR_HOST the process has (a stack test's, in a worker
    # that runs seeds too: its extra reads shifted seed 24's run).
    for module_name, attribute in EMULATOR_CHECKS:
        _set(module_name, attribute, lambda: False)
    _set("shared.requests.pricing", "table", world.deployed_price_table)  # the deployment's price table
    # Default arguments are bound at import: replace them.
    shared.pacing.Pacer.__init__.__kwdefaults__.update(clock=virtual_time.time, sleep=virtual_time.sleep)
    shared.reconcile_vertex.CrudBudget.__init__.__kwdefaults__.update(clock=virtual_time.monotonic)
    reset_process_caches()


def reset_process_caches() -> None:
    """What one function instance remembers between deliveries; a world starts with new instances."""
    import shared.adapters.vertex
    import shared.clock
    import shared.job_locations
    import shared.ledger.records
    import shared.requests.job_policy
    import shared.triggers.runner
    import shared.triggers.windows

    shared.job_locations._remembered.clear()  # noqa: SLF001
    shared.triggers.runner._cache.clear()  # noqa: SLF001
    shared.triggers.windows._open_windows.clear()  # noqa: SLF001
    # The parse and conversion memos: pure, but a new instance starts without them (and a time
    # parsed in another world is of that world's virtual datetime class).
    shared.clock.iso.cache_clear()
    shared.clock.parse_iso.cache_clear()
    shared.ledger.records._parsed.cache_clear()  # noqa: SLF001
    shared.requests.job_policy._judged.cache_clear()  # noqa: SLF001
    shared.adapters.vertex._serialized_job.cache_clear()  # noqa: SLF001
    shared.adapters.vertex._job_json_text.cache_clear()  # noqa: SLF001


def freeze_long_lived() -> None:
    """Once a process has run a world (its modules imported, its rules and patterns compiled),
    leave what is alive out of every later garbage collection (`gc.freeze`): else each full
    collection rescans those 200,000 objects, none of them a world's, 6% of the CPU of a run of
    seeds. Call it with no world referenced any more (a world left alive is never collected);
    once a process: a later call does nothing."""
    global _frozen  # noqa: PLW0603 - a process's state, as gc's own
    if not _frozen:
        gc.collect()
        gc.freeze()
        _frozen = True


_frozen = False


def uninstall() -> None:
    import time

    import shared.pacing
    import shared.reconcile_vertex

    for (module_name, attribute), value in _ORIGINALS.items():
        setattr(importlib.import_module(module_name), attribute, value)
    _ORIGINALS.clear()
    shared.pacing.Pacer.__init__.__kwdefaults__.update(clock=time.time, sleep=time.sleep)
    shared.reconcile_vertex.CrudBudget.__init__.__kwdefaults__.update(clock=time.monotonic)


EPOCH_OF_SIMULATION = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
