"""Reconcile's Vertex calls: a pass's cost grows with listing pages and with the jobs that ended,
not with the active requests, and stays within a share of the CRUD quota.

Vertex AI allows 600 resource-management (CRUD) calls a minute per project and region
(https://cloud.google.com/vertex-ai/docs/quotas), shared with on_job_event's reads and with
submit. A pass hands every step the clients of a `VertexPass` instead of the plain ones:

- **One listing per location**, made the first time the pass needs a job there: this
  deployment's jobs that have not ended (the stray sweep's filter,
  `shared.adapters.vertex.unfinished_jobs_request`: a thousand a page, as any list of them asks). A `get` of a job it holds is answered from it; the sweep's own list of the
  location is the same listing. It was taken after the pass read its records' selection, so it is
  no older than a `get` made at the start of the pass would have been. A read's times
  (`ReadTimes`, `PassClient.last_read`) are its own call's: the listing's for a get it answered,
  the get's for one sent to Vertex, never the pass's start, before a change the answer may show
  (seed 10119).
- **A `get` only where the listing cannot answer**: a job missing from it has ended (or was
  created moments ago and a lagging list does not show it yet); Vertex is asked, and the decision
  is taken on its answer as before.
- **The budget**: at most `reconcile_crud_share` of `vertex_crud_per_minute` calls in any minute
  of the pass (half the quota by default): gets, lists and cancels alike, the stray sweep's and
  the outbox's (`Ports.cancel_job` is the pass's too). It is spent before a call is sent (a
  list's next page before the pager asks for it): a call past it raises `CrudBudgetSpent` unsent,
  and one sent is counted whatever Vertex answers. The request that needed a refused call
  waits for the next pass (`deferred`), which starts at the first one deferred
  (`shared.reconcile_index.resume_at_deferred`; not at one deferred for a stalled region, see the
  window): the listings are always made (the sweep and every answer depend on them), and counted,
  and so are the sweep's cancels of strays (one per stray a pass, until Vertex takes one: a listing of a budget's worth of
  pages would defer them every pass, for good; seeds 12482, 20719, 21001). A cancel not sent is not forgotten: the outbox's stays pending in its
  record (`Attempt.cancel_pending`), and a stray is still in the next pass's listing (its cancel
  said deferred at INFO, `stray_cancel_deferred`; one Vertex refused or that failed is a WARNING,
  `stray_sweep_failed`).
- **The window** (`CallWindow`): no call to a location whose call ran out its timeout this pass
  (that region's API is stalling: each later call there would hold a worker for its whole
  timeout), and none (a list's next page included: each page is a call with its own timeout)
  that could still be waiting when reconcile's function timeout kills the pass
  (`reconcile_timeout_seconds`, less one more call timeout for the work after the last call). A call
  it refuses is deferred as the budget's are: a pass over a stalled location ends in time, releases
  its run lease, and reconciles the other locations' requests (the next tick finds no lease held).
  A listing that fails where the window is then closed (the listing itself ran out its timeout,
  or was refused) is said as such (`reconcile_listing_deferred`): no get is sent there either,
  and the location's requests wait for the next pass. A get or cancel that ran out its timeout
  defers its request as the calls refused after it do (one WARNING, `reconcile_call_timed_out`):
  the location stalled; the request is not in error, nor where the next pass starts
  (`LocationStalled`: a region stalling for an hour would start every pass there). The requests'
  calls stop one call timeout sooner, and no request is begun after that (`deferred` unread):
  that call timeout is the stray sweep's, which runs after the requests, so a pass whose requests
  outgrow its window (slow storage, thousands of them) still lists and cancels strays, and the
  next pass starts at the first request deferred; a sweep call the window (or the budget)
  refuses all the same, or that ran out its timeout, is said (`stray_sweep_deferred`, `sweep_calls_deferred` in the summary; a location's listing so
  refused once, at INFO, `stray_listing_deferred`: not sent a second time to the same refusal;
  one a transient failure met, a 503, is sent once more, budgeted: `worth_a_second_list`).
  Nor does the sweep begin a request's record read past its last call start
  (`sweep_records_unread`): the reads are as many as the requests with a job listed; nor the
  restart of the quota lines after it (`quota_restart_deferred`), one read a line's head.
- **Only these calls**: gets, lists and cancels, the ones the budget and the window judge. A pass
  sends no create: a waiting attempt is created by the quota line's drainer, which runs in
  submit_job's deliveries (`shared.paced_submit`); the pass only hands a line without a drainer to
  its head by a publish (`shared.pacing_drainer.restart_stalled`), and re-publishes a stale claim.
  A create is counted by Vertex's submission quota, not the CRUD one, so the budget could not
  speak for it anyway. `PassClient` (`shared.pass_client`) fails closed: any other call raises unsent.

A job a `get` answers NotFound for was deleted at Vertex: an answer for good, not an error to
retry on every pass. `read_attempt_job` hands the decision an ended job instead (`vanished_job`).

`usage()` is what the pass's summary line reports: calls by kind, gets answered by the listings,
the budget, and the share of a minute's CRUD quota the pass used.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from shared.adapters.vertex import canceller, parent_path, read_job, unfinished_jobs_request
from shared.clock import iso
from shared.errors import TransientError, is_retryable
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt
from shared.log import Logger
from shared.pass_client import Listing, PassClient, ReadTimes, pages
from shared.wiring import Ports

if TYPE_CHECKING:
    from datetime import datetime

    from google.cloud.aiplatform_v1 import CustomJob

# google.rpc NOT_FOUND: the error a deleted job's settled end carries (no capacity code: not re-queued).
NOT_FOUND_CODE = 5
WINDOW_SECONDS = 60.0


class CallDeferred(TransientError):
    """A call this pass will not send: the request that needed it waits for the next pass."""


class LocationStalled(CallDeferred):
    """A call there ran out its timeout this pass: none other is sent, nor does the next pass start at it."""


class CrudBudgetSpent(CallDeferred):
    """This pass has spent its share of the CRUD quota for the minute: the call waits for the next."""


class CallWindow:
    """Which Vertex calls a pass may still send: none to a location where a call ran out its
    timeout (DeadlineExceeded) this pass, and none started later than one call timeout plus a
    margin of one more before the function's timeout (`ends_at`), so no call is still waiting
    when the instance is killed and what follows the last call (the sweep's reads, the cursor,
    the summary line, the lease's release) has its time. The requests' calls stop one call
    timeout sooner (`requests_last_start`), and no request is begun after it
    (`requests_closed`): that call timeout is the stray sweep's (`sweeping`), which runs after the
    requests, so a pass whose requests outgrow the window still cancels strays (seed 10348)."""

    def __init__(self, ends_at: datetime, call_timeout: float, clock: Callable[[], datetime]) -> None:
        self.last_start = ends_at - timedelta(seconds=2 * call_timeout)
        self.requests_last_start = self.last_start - timedelta(seconds=call_timeout)
        self._clock = clock
        self._lock = threading.Lock()
        self.stalled: set[str] = set()
        self.out_of_time = False
        self.sweeping = False  # the requests are done: the sweep's call timeout is open
        self.sweep_deferred = 0  # the sweep's calls refused
        self.sweep_unread = 0  # the records the sweep began no read of (`sweep_read_refused`)
        self.restart_deferred = False  # the quota lines' restart began no more reads (`restart_read_refused`)
        # Where a call of the pass got a reply (an error included), and where one got none (it ran
        # out its timeout, or met a 503), by how: what `shared.unanswering` counts passes by.
        self.answered: set[str] = set()
        self.unanswered: collections.defaultdict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )

    def requests_closed(self) -> bool:
        """Whether a request begun now could send no call (it waits for the next pass)."""
        with self._lock:
            closed = self._clock() > self.requests_last_start
            self.out_of_time |= closed
            return closed

    def closed_to(self, location: str) -> bool:
        """Whether a call to `location` sent now would be refused."""
        with self._lock:
            return location in self.stalled or self._past_last_start()

    @contextmanager
    def sending(self, location: str) -> Iterator[None]:
        """Around one call to `location`: raises `CallDeferred` instead of sending it when refused.
        A call of the sweep's that ran out its timeout cuts the sweep short as a refused one does:
        a listing the sweep alone makes (a location no request of the pass needed) is its only
        call there, and its strays would run on unsaid. Notes whether Vertex replied: a timeout or
        a 503 is no reply; an error it answers is one."""
        from google.api_core.exceptions import DeadlineExceeded, ServiceUnavailable

        self.admit(location)
        try:
            yield
        except DeadlineExceeded:
            with self._lock:
                self.stalled.add(location)
                self._count_refused()
                self.unanswered[location]["timed_out"] += 1
            raise
        except ServiceUnavailable:
            with self._lock:
                self.unanswered[location]["unavailable"] += 1
            raise
        except CallDeferred:
            raise  # not sent (the budget's refusal), or a list's next page refused after a reply
        except Exception:
            self.note_answer(location)
            raise
        self.note_answer(location)

    def note_answer(self, location: str) -> None:
        """Vertex replied to a call to `location` (a list's page, before its next is asked)."""
        with self._lock:
            self.answered.add(location)

    def admit(self, location: str) -> None:
        """Raises `CallDeferred` if a call to `location` (a list's next page too) would be refused now."""
        with self._lock:
            if location in self.stalled:
                self._count_refused()
                raise LocationStalled(f"a Vertex call in {location} ran out its timeout in this pass")
            if self._past_last_start():
                self.out_of_time = True
                self._count_refused()
                raise CallDeferred("no call timeout is left before reconcile's function timeout")

    def note_budget_refused(self) -> None:
        """A call the pass's CRUD budget refused: one of the sweep's cuts it short as the window's
        refusals do (counted: `stray_sweep_deferred`, `stray_sweep_cut_short`)."""
        with self._lock:
            self._count_refused()

    def sweep_read_refused(self) -> bool:
        """Whether the sweep may begin no more record reads (counted): past its last call start, a
        stray a read found could not be cancelled, and thousands of slow reads (one per request with
        a job listed) would run the pass past its function's timeout, killed with its lease held."""
        with self._lock:
            self.sweep_unread += (refused := self._past_last_start())
            return refused

    def restart_read_refused(self) -> bool:
        """Whether the restart of the quota lines after the sweep (`restart_stalled`) may begin no
        more reads (noted): one read a head, as many as a line has settled heads, would run the
        pass past its function's timeout as the sweep's would."""
        with self._lock:
            refused = self._past_last_start()
            self.restart_deferred |= refused
            return refused

    def _count_refused(self) -> None:
        if self.sweeping:
            self.sweep_deferred += 1

    def _past_last_start(self) -> bool:
        return self._clock() > (self.last_start if self.sweeping else self.requests_last_start)


def worth_a_second_list(failure: Exception) -> bool:
    """Whether a listing that failed is sent once more in the pass (through its budget and window,
    as any list): a transient failure (a 503) may not meet the next call, and the strays the sweep
    did not see would run one more interval. Not the pass's own refusal (its budget or window would
    refuse it again), nor a timeout (its location stalls: the window refuses it), nor a 429 (Vertex's
    quota said wait), nor a refusal for good (403, 404)."""
    from google.api_core.exceptions import DeadlineExceeded, TooManyRequests

    refused_again = isinstance(failure, (CallDeferred, DeadlineExceeded, TooManyRequests))
    return is_retryable(failure) and not refused_again


class CrudBudget:
    """At most `per_minute` calls in any 60 s, counted by kind."""

    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._spent: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()
        self.calls: collections.Counter[str] = collections.Counter()

    def spend(self, kind: str, *, force: bool = False) -> None:
        now = self._clock()
        with self._lock:
            while self._spent and self._spent[0] <= now - WINDOW_SECONDS:
                self._spent.popleft()
            if not force and len(self._spent) >= self.per_minute:
                raise CrudBudgetSpent(f"reconcile's CRUD budget ({self.per_minute} a minute) is spent")
            self._spent.append(now)
            self.calls[kind] += 1


class VertexPass:
    """The Vertex side of one reconcile pass: `ports` hands out its counting clients."""

    def __init__(self, ports: Ports, log: Logger, *, started: datetime) -> None:
        """`started`: when the function began serving the pass (its timeout runs from there)."""
        settings = ports.settings
        self._ports = ports
        self._log = log
        self.budget = CrudBudget(max(1, int(settings.vertex_crud_per_minute * settings.reconcile_crud_share)))
        self.window = CallWindow(
            started + timedelta(seconds=settings.reconcile_timeout_seconds),
            settings.vertex_call_timeout_seconds,
            ports.clock,
        )
        self._listings: dict[str, Listing | None] = {}
        self._listing_locks: collections.defaultdict[str, threading.Lock] = collections.defaultdict(threading.Lock)
        self._lock = threading.Lock()
        self.answered = 0  # gets the listings answered
        self.began = ports.clock()
        # The outbox's cancels too (a request's, a deadline switch's): sent by the pass's clients,
        # each is a CRUD call under the budget and the window like the sweep's.
        cancel_job = canceller(self.job_service, timeout=settings.vertex_call_timeout_seconds)
        self.ports = replace(ports, job_service=self.job_service, cancel_job=cancel_job)

    def job_service(self, location: str) -> PassClient:
        return PassClient(self, location, self._ports.job_service(location))

    def listing(self, location: str, client: Any) -> Listing | None:
        """This deployment's unfinished jobs in `location`, listed once per pass; None if the
        listing failed (every job is then read with a get, where the window still sends one)."""
        return self.listing_made(location, client)[0]

    def listing_made(self, location: str, client: Any) -> tuple[Listing | None, Exception | None]:
        """`listing`, and why it failed if this call made it and a second list would meet the same
        answer (the sweep sends none then; after a transient failure, it lists once more)."""
        with self._lock:
            lock = self._listing_locks[location]
        with lock:
            if location in self._listings:
                return self._listings[location], None
            listing, failure = self._list(location, client)
            self._listings[location] = listing
            return listing, None if failure is None or worth_a_second_list(failure) else failure

    def _list(self, location: str, client: Any) -> tuple[Listing | None, Exception | None]:
        settings = self._ports.settings
        request = unfinished_jobs_request(parent_path(settings.project, location), settings.deployment_label)
        try:
            jobs: dict[str, CustomJob] = {}
            timeout = settings.vertex_call_timeout_seconds
            sent = self._ports.clock()
            with self.window.sending(location):
                self.budget.spend("list", force=True)
                pager = client.list_custom_jobs(request=request, timeout=timeout)
                for page in pages(pager, before_next=lambda: self.next_page(location, force=True)):
                    jobs.update((job.name, job) for job in page)
            return Listing(ReadTimes(sent, self._ports.clock()), jobs), None
        except Exception as exc:  # noqa: BLE001 - the pass reads each job with a get instead, if it may
            if self.window.sweeping:  # no request reads it any more: the sweep says what became of it
                return None, exc
            error = f"{type(exc).__name__}: {exc}"
            if self.window.closed_to(location):  # its gets would be refused too: nothing is read there
                self._log.warning(
                    "sent no listing of this deployment's jobs; the location's requests wait for the next pass",
                    event="reconcile_listing_deferred",
                    location=location,
                    error=error,
                )
            else:
                self._log.warning(
                    "could not list this deployment's jobs; reading each with a get",
                    event="reconcile_listing_failed",
                    location=location,
                    error=error,
                )
            return None, exc

    @contextmanager
    def call(self, location: str, kind: str) -> Iterator[None]:
        """Around one call of `kind` to `location`: the window judges it, then the budget spends it.
        The sweep's cancel of a stray is spent past the budget, as the listing is: a location whose
        unfinished jobs take a budget's worth of pages would otherwise defer it every pass, for
        good (seeds 12482, 20719); one per stray a pass, until Vertex takes one (a CANCELLING stray
        is sent none; one refused is sent again, its alert saying the next pass cancels it)."""
        with self.window.sending(location):
            self._spend(kind, force=kind == "cancel" and self.window.sweeping)
            yield

    def next_page(self, location: str, *, force: bool = False) -> None:
        """Before a list's next page is asked (the page before it came back): the window judges it,
        then the budget spends it."""
        self.window.note_answer(location)
        self.window.admit(location)
        self._spend("list", force=force)

    def _spend(self, kind: str, *, force: bool = False) -> None:
        try:
            self.budget.spend(kind, force=force)
        except CrudBudgetSpent:
            self.window.note_budget_refused()
            raise

    @contextmanager
    def sweeping(self) -> Iterator[None]:
        """Around the stray sweep, once the requests are done: the window's last call timeout is
        its own. A call the window refuses it all the same is said: its strays wait for the next
        pass, and a pass whose every sweep is cut short would leave them running unseen."""
        self.window.sweeping = True
        yield
        if self.window.sweep_deferred or self.window.sweep_unread or self.window.restart_deferred:
            self._log.warning(
                "the stray sweep ran out of its call window or its CRUD budget (or met a stalled location): the strays "
                "it could not list, check or cancel, and the quota lines it could not restart, wait for the next pass",
                event="stray_sweep_deferred",
                calls_deferred=self.window.sweep_deferred,
                records_unread=self.window.sweep_unread,
                quota_restart_deferred=self.window.restart_deferred,
                stalled_locations=sorted(self.window.stalled),
            )

    def note_answered(self) -> None:
        with self._lock:
            self.answered += 1

    def usage(self) -> dict[str, Any]:
        calls = dict(sorted(self.budget.calls.items()))
        total = sum(calls.values())
        quota = self._ports.settings.vertex_crud_per_minute
        return {
            "calls": calls,
            "answered_by_listing": self.answered,
            "budget_per_minute": self.budget.per_minute,
            "share_of_crud_quota": round(total / quota, 4) if quota else None,
            "stalled_locations": sorted(self.window.stalled),
            "out_of_time": self.window.out_of_time,
            "sweep_calls_deferred": self.window.sweep_deferred,
            "sweep_records_unread": self.window.sweep_unread,
            "quota_restart_deferred": self.window.restart_deferred,
        }


def read_attempt_job(ports: Ports, attempt: Attempt, log: Logger) -> tuple[JobSnapshot, ReadTimes]:
    """The attempt's job as a decision reads it (`vanished_job` when Vertex no longer knows it), and
    the read's times (`read_times`)."""
    from google.api_core.exceptions import NotFound

    assert attempt.job is not None  # only an attempt that records its job is observed
    client = ports.job_service(attempt.location)
    sent = ports.clock()
    try:
        job = read_job(client, attempt.job, timeout=ports.settings.vertex_call_timeout_seconds)
        return job, read_times(client, sent, ports.clock())
    except NotFound as exc:
        log.warning(
            f"the job of attempt {attempt.n} is not found at Vertex AI; it is settled as ended",
            event="job_not_found",
            attempt=attempt.n,
            job=attempt.job,
            error=f"{type(exc).__name__}: {exc}",
        )
        answered = ports.clock()
        return vanished_job(attempt, answered), ReadTimes(sent, answered)


def read_times(client: Any, sent: datetime, answered: datetime) -> ReadTimes:
    """The times of `client`'s last read: a pass's client knows them (its listing's, when the
    listing answered); any other's are its call's, `sent` before it and `answered` after."""
    last = client.last_read if isinstance(client, PassClient) else None
    return last or ReadTimes(sent, answered)


def vanished_job(attempt: Attempt, now: datetime) -> JobSnapshot:
    """What a decision reads of a job Vertex no longer knows (deleted out of band): it ended, how
    is unknown, so it FAILED with a NOT_FOUND error. The request then fails with one `job_failed`
    alert naming the job (`spotjobs resubmit` runs it again from its checkpoint), or ends
    CANCELLED if its cancel was asked; a switched attempt's successor is released. Its end is the
    last moment Vertex vouched for it, so no fleet fact claims a run Vertex never reported."""
    assert attempt.job is not None
    last_vouched = attempt.state_changed_at or attempt.started_at or attempt.created_at or attempt.claimed_at
    return JobSnapshot(
        name=attempt.job,
        state=JobState.FAILED,
        error={
            "code": NOT_FOUND_CODE,
            "message": f"job {attempt.job} was not found at Vertex AI (deleted); how it ended is unknown",
        },
        create_time=attempt.created_at,
        start_time=attempt.started_at,
        end_time=last_vouched,
        update_time=iso(now),
    )
