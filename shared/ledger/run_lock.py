"""One run at a time of a scheduled sweep (reconcile, an every-request prune), across instances.

A maintenance tick may arrive while a run is still going: Cloud Scheduler fires on the clock, a
redelivery or an operator's publish arrives at any moment, and the function may serve it on the
same instance or on another. Runs are safe to overlap (every write is a compare-and-swap), but two
sweeps at once double the GCS and Vertex traffic for nothing, so the second one ends at once:
acknowledged, with one INFO line `event=run_in_progress`. Never an error: a tick that finds a run
going is normal, and raising would send it round the retries into the dead-letter topic.

The lock is a lease object in the state bucket, `maintenance/<task>-run.json`:

- taken by creating it with `if_generation_match=0` (exactly one creator wins), tried before any
  read: the lease is mostly free, and a create that loses costs what the read would have. A lease
  found naming this run's own holder is its own (the client retried a create whose reply was lost,
  and the retry was refused): held at the generation read, not deferred to for a whole lease;
- holding an expiry: a run that died without releasing (instance killed, timeout) leaves a lease
  that the first tick after its expiry takes over, with an overwrite matched on the generation it
  read (exactly one taker wins);
- left behind by no error: a write whose reply was lost past the client's retries may have landed,
  so a run whose acquire raises reads the lease back and deletes it if it names this run's
  holder (the error then goes on: its redelivery, or the next tick, finds the lease free);
- released by deleting it, matched on the generation this run wrote (a run that outlived its
  lease never deletes its successor's), with no read first (but on the emulator, which ignores
  the match on a delete).

The lease is `LEASE_SECONDS`, longer than any function may run (Terraform caps `timeout_seconds`
at 600, `terraform/variables.tf`), so a live run is never taken over; the cost of a crashed run
is at most the ticks within one lease.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.clock import iso, parse_rfc3339, utcnow
from shared.errors import ConflictError
from shared.log import Logger
from shared.swap import compare_and_swap

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

# Longer than the longest function timeout Terraform allows (600 s).
LEASE_SECONDS = 660.0
# Rounds of create / read / take over before giving up on a lease that keeps changing hands.
_ROUNDS = 3


def lock_path(task: str) -> str:
    return f"maintenance/{task}-run.json"


def _holder() -> str:
    # Cloud Run names the revision; the host and pid tell instances and processes apart.
    revision = os.environ.get("K_REVISION", "")
    return f"{revision or socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _deletes_ignore_generation(bucket: Bucket) -> bool:
    """Whether a DELETE's `ifGenerationMatch` is ignored: fake-gcs-server's, reached through the real
    client. Judged by the bucket, not the environment alone, so an in-memory stand-in (the
    simulator's) behaves the same whatever a test process set."""
    return bool(os.environ.get("STORAGE_EMULATOR_HOST")) and type(bucket).__module__.startswith("google.cloud.storage")


class RunLock:
    """The lease of one task's runs. `acquire()` then `release()`, or use `run_lock()`."""

    def __init__(
        self,
        bucket: Bucket,
        task: str,
        *,
        lease_seconds: float = LEASE_SECONDS,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.bucket = bucket
        self.task = task
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.holder = _holder()
        self.generation: int | None = None  # set while held
        self.current: dict[str, Any] = {}  # the lease found held by another run
        self._generation_read: int | None = None  # of the lease last read

    def _document(self) -> dict[str, Any]:
        now = self.clock()
        return {
            "task": self.task,
            "holder": self.holder,
            "acquired_at": iso(now),
            "expires_at": iso(now + timedelta(seconds=self.lease_seconds)),
        }

    def _read(self) -> tuple[dict[str, Any] | None, int]:
        """The lease as found (`{}` when unreadable: taken over like an expired one) and its
        generation; (None, 0) when there is none."""
        from google.api_core.exceptions import NotFound, PreconditionFailed

        found = self.bucket.get_blob(lock_path(self.task))
        if found is None:
            return None, 0
        self._generation_read = int(found.generation)
        try:
            lease = json.loads(found.download_as_bytes(if_generation_match=found.generation))
        except (NotFound, PreconditionFailed):
            lease = None  # replaced or released since: a write matched on `found` loses, and we look again
        except ValueError:
            lease = {}
        return (lease if isinstance(lease, dict) else {}), int(found.generation)

    def _write(self, _current: dict[str, Any] | None, lease: dict[str, Any], generation: int) -> bool:
        from google.api_core.exceptions import PreconditionFailed

        blob = self.bucket.blob(lock_path(self.task))
        try:
            blob.upload_from_string(json.dumps(lease), content_type="application/json", if_generation_match=generation)
        except PreconditionFailed:
            return False
        self.generation = blob.generation
        return True

    def _take(self, lease: dict[str, Any] | None) -> dict[str, Any] | None:
        """Ours if there is no lease or it has expired (or cannot be read); else nothing to write."""
        expires = parse_rfc3339(lease.get("expires_at")) if lease else None
        if expires is not None and self.clock() < expires:
            return None
        return self._document()

    def acquire(self) -> bool:
        """Take the lease; False if another run holds an unexpired one (`self.current` says which).
        An error is raised as it came, after deleting the lease if one of our writes left it."""
        try:
            return self._acquire()
        except Exception:
            self._release_if_ours()
            raise

    def _release_if_ours(self) -> None:
        """Delete the lease if it names this run's holder: a create or take-over whose reply was
        lost landed, and nobody else would release it before its expiry. Only a lease naming our
        holder is touched, at the generation read; what cannot be read or deleted expires."""
        with contextlib.suppress(Exception):
            lease, generation = self._read()
            if lease is not None and lease.get("holder") == self.holder:
                self.generation = generation
                self.release()

    def _acquire(self) -> bool:
        if self._write(None, self._document(), 0):  # none there: one create, no look first
            self.current = {}
            return True
        try:
            taken = compare_and_swap(
                self._read, self._write, self._take, private_copy=dict, what=lock_path(self.task), max_conflicts=_ROUNDS
            )
        except ConflictError:
            return False  # the lease keeps changing hands: another run has it
        found = {} if taken.wrote else (taken.value or {})
        if found.get("holder") == self.holder:  # our create landed; the client's retry of it was refused
            self.generation = self._generation_read
            found = {}
        self.current = found
        return self.generation is not None

    def release(self) -> None:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        if self.generation is None:
            return
        try:
            if _deletes_ignore_generation(self.bucket):
                found = self.bucket.get_blob(lock_path(self.task))
                if found is None or found.generation != self.generation:
                    return
            self.bucket.delete_blob(lock_path(self.task), if_generation_match=self.generation)
        except (NotFound, PreconditionFailed):
            pass  # taken over after our lease expired: it is the new run's now
        finally:
            self.generation = None


@contextmanager
def run_lock(
    bucket: Bucket,
    task: str,
    log: Logger,
    *,
    lease_seconds: float = LEASE_SECONDS,
    clock: Callable[[], datetime] = utcnow,
) -> Iterator[bool]:
    """`with run_lock(...) as held:` run only if `held`. When another run holds the lease, logs
    one INFO line `event=run_in_progress` and yields False. The lease is released on the way out,
    whether the run returned or raised (a redelivered run must be able to start again)."""
    lock = RunLock(bucket, task, lease_seconds=lease_seconds, clock=clock)
    if not lock.acquire():
        log.info(
            "a run is in progress; this tick ends here",
            event="run_in_progress",
            task=task,
            holder=lock.current.get("holder") if isinstance(lock.current, dict) else None,
            expires_at=lock.current.get("expires_at") if isinstance(lock.current, dict) else None,
        )
        yield False
        return
    try:
        yield True
    finally:
        try:
            lock.release()
        except Exception as exc:  # noqa: BLE001 - the run is done; the lease expires by itself
            log.warning(
                "could not release the run lease; it expires by itself",
                event="run_lock_unreleased",
                task=task,
                error=f"{type(exc).__name__}: {exc}",
            )


def ledger_bucket(ledger: Any) -> Bucket:
    """The state bucket behind a `LedgerStore` (which keeps it as `_bucket`)."""
    return ledger._bucket  # noqa: SLF001 - LedgerStore has no public accessor yet
