"""One run at a time of a scheduled sweep (reconcile, an every-request prune), across instances.

A maintenance tick may arrive while a run is still going: Cloud Scheduler fires on the clock, a
redelivery or an operator's publish arrives at any moment, and the function may serve it on the
same instance or on another. Runs are safe to overlap (every write is a compare-and-swap), but two
sweeps at once double the GCS and Vertex traffic for nothing, so the second one ends at once:
acknowledged, with one INFO line `event=run_in_progress`. Never an error: a tick that finds a run
going is normal, and raising would send it round the retries into the dead-letter topic.

The lock is a lease object in the state bucket, `maintenance/<task>-run.json`:

- taken by creating it with `if_generation_match=0` (exactly one creator wins);
- holding an expiry: a run that died without releasing (instance killed, timeout) leaves a lease
  that the first tick after its expiry takes over, with an overwrite matched on the generation it
  read (exactly one taker wins);
- released by deleting it, matched on the generation this run wrote (a run that outlived its
  lease never deletes its successor's).

The lease is `LEASE_SECONDS`, longer than any function may run (Terraform caps `timeout_seconds`
at 600, `terraform/variables.tf`), so a live run is never taken over; the cost of a crashed run
is at most the ticks within one lease.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.clock import iso, parse_rfc3339, utcnow
from shared.log import Logger

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

    def _document(self) -> str:
        now = self.clock()
        return json.dumps(
            {
                "task": self.task,
                "holder": self.holder,
                "acquired_at": iso(now),
                "expires_at": iso(now + timedelta(seconds=self.lease_seconds)),
            }
        )

    def _write(self, if_generation_match: int) -> bool:
        from google.api_core.exceptions import PreconditionFailed

        blob = self.bucket.blob(lock_path(self.task))
        try:
            blob.upload_from_string(
                self._document(), content_type="application/json", if_generation_match=if_generation_match
            )
        except PreconditionFailed:
            return False
        self.generation = blob.generation
        return True

    def acquire(self) -> bool:
        """Take the lease; False if another run holds an unexpired one (`self.current` says which)."""
        for _ in range(_ROUNDS):
            if self._write(0):
                return True
            found = self.bucket.get_blob(lock_path(self.task))
            if found is None:  # released between our create and our read: create again
                continue
            try:
                self.current = json.loads(found.download_as_bytes(if_generation_match=found.generation))
            except Exception as exc:  # noqa: BLE001 - replaced again, or not JSON: decide from what is known
                from google.api_core.exceptions import NotFound, PreconditionFailed

                if isinstance(exc, (NotFound, PreconditionFailed)):
                    continue
                self.current = {}
            expires = parse_rfc3339(self.current.get("expires_at")) if isinstance(self.current, dict) else None
            if expires is not None and self.clock() < expires:
                return False
            # Expired (or unreadable): take it over, unless someone else just did.
            if self._write(found.generation):
                return True
        return False

    def release(self) -> None:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        if self.generation is None:
            return
        try:
            # The generation check is GCS's (atomic); the read before it is for emulators that
            # ignore ifGenerationMatch on delete (fake-gcs-server does).
            found = self.bucket.get_blob(lock_path(self.task))
            if found is not None and found.generation == self.generation:
                found.delete(if_generation_match=self.generation)
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
