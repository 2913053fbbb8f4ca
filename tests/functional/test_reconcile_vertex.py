"""Reconcile's Vertex cost (shared/reconcile_vertex.py) over the real ledger code: one listing per
location, a page per thousand jobs, answers every job still running; a `get` only for the jobs
that left it (ended); the pass within its share of the CRUD quota, counted in its summary.

The ledger's bucket is the simulator's in-memory Cloud Storage (sim/gcs.py: generations,
preconditions, ordered paged listings), each call served whole before the next as GCS serves one
request: two thousand requests on fake-gcs-server took 150 s of mostly client CPU, and went past
the test's 300 s on a loaded machine. What is counted here is Vertex calls, not storage ones."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

import shared.reconcile as reconcile
import shared.reconcile_vertex as reconcile_vertex
from shared.alerts import Alert, AlertKind
from shared.clock import iso, parse_iso, utcnow
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import JobIndexEntry, LedgerStore
from shared.log import Logger
from shared.reconcile import run_reconcile
from sim.gcs import MemoryStorage
from tests.support.decisions import FakePublisher, World, make_settings
from tests.support.vertex import FakeVertex

RUNNING, SUCCEEDED = 3, 4


class PagedVertex(FakeVertex):
    """FakeVertex whose list answers in pages of `page_size` (Vertex's default 100), each page
    one call, as the client's pager fetches them: the first by the call, each next one when the
    page before it, naming a `next_page_token`, is used up."""

    def list_custom_jobs(self, request: dict[str, Any], **kwargs: Any) -> Any:
        jobs = super().list_custom_jobs(request, **kwargs)  # the first page's call, counted
        size = int(request.get("page_size") or 100)
        starts = range(0, max(1, len(jobs)), size)
        vertex = self

        class Pager:
            @property
            def pages(self) -> Any:
                for start in starts:
                    if start:
                        vertex.lists += 1  # the next page's call
                    token = str(start + size) if start + size < len(jobs) else ""
                    yield type("Page", (), {"custom_jobs": jobs[start : start + size], "next_page_token": token})()

            def __iter__(self) -> Any:
                return (job for page in self.pages for job in page.custom_jobs)

        return Pager()


@pytest.fixture
def world() -> World:
    one_call_at_a_time = threading.Lock()  # the pass's threads call at once; each call is atomic

    def serve(_service: str, _operation: str, perform: Callable[[], Any]) -> Any:
        with one_call_at_a_time:
            return perform()

    bucket = MemoryStorage(clock=utcnow, io=serve).client().bucket("reconcile-vertex-state")
    return World(LedgerStore(bucket), PagedVertex(), FakePublisher(), make_settings(bucket.name))


def seed_running(world: World, count: int) -> list[str]:
    """`count` requests whose job runs, each as the ledger has it once a pass saw it running: the
    first is submitted and reconciled, the others are copies of its record (restored directly,
    so seeding 2,000 does not take 2,000 decisions)."""
    _, first_job = world.submitted("req-00000", state=RUNNING)
    run_reconcile(world.ports, Logger())
    template = world.ledger.get("req-00000").to_json()

    def seed(k: int) -> str:
        request_id = f"req-{k:05d}"
        job = world.vertex.add(request_id, 1, state=RUNNING)
        data = json.loads(json.dumps(template).replace("req-00000", request_id).replace(first_job, job))
        world.ledger.restore(RequestRecord.from_json(data))
        world.ledger.index_job(JobIndexEntry(request_id, 1, "us-central1", job))
        return job

    with ThreadPoolExecutor(32) as pool:
        return [first_job, *pool.map(seed, range(1, count))]


def one_pass_an_hour_a_call(
    world: World, monkeypatch: Any, when_begun: Callable[[Any], None] | None = None
) -> reconcile_vertex.VertexPass:
    """One reconcile pass on a clock that moves an hour a call, so that the moments a pass, its
    listing and its reads happen are told apart (its window outlasts the hours it ticks);
    `when_begun` is given the clock's next moment as the pass begins. The pass is returned."""
    ticks = iter(range(1, 10_000))
    wide = replace(world.settings, reconcile_timeout_seconds=1e9)
    ticking = replace(world.ports, settings=wide, clock=lambda: utcnow() + timedelta(hours=next(ticks)))
    passes: list[reconcile_vertex.VertexPass] = []
    started = reconcile_vertex.VertexPass.__init__

    def noted(self: reconcile_vertex.VertexPass, *args: Any, **kwargs: Any) -> None:
        started(self, *args, **kwargs)
        passes.append(self)
        if when_begun is not None:
            when_begun(ticking.clock())

    monkeypatch.setattr(reconcile_vertex.VertexPass, "__init__", noted)
    run_reconcile(ticking, Logger())
    [vertex_pass] = passes
    return vertex_pass


def test_a_pass_over_2000_active_requests_lists_by_page_and_gets_only_the_jobs_that_ended(world: World) -> None:
    jobs = seed_running(world, 2000)
    ended = jobs[::50]  # 40 jobs end between passes; the other 1,960 still run
    for name in ended:
        world.vertex.set_state(name, SUCCEEDED)
    world.vertex.lists = world.vertex.gets = 0

    summary = run_reconcile(world.ports, Logger())

    assert summary.active == 2000
    # One listing of the 1,960 unfinished jobs: two pages of a thousand, for the pass and its sweep.
    assert world.vertex.lists == 2
    assert world.vertex.gets == len(ended)  # one per job that changed by ending; none for the rest
    assert summary.vertex["calls"] == {"get": len(ended), "list": 2}
    assert summary.vertex["answered_by_listing"] == 2000 - len(ended)
    assert summary.vertex["share_of_crud_quota"] == round((2 + len(ended)) / 600, 4)
    assert summary.decisions["job_succeeded"] == len(ended)
    finished = {world.ledger.get(f"req-{k:05d}").status for k in range(0, 2000, 50)}
    assert finished == {RequestStatus.SUCCEEDED}


def test_a_pass_past_its_share_of_the_crud_quota_defers_the_rest_to_the_next_pass(world: World) -> None:
    world.settings = replace(world.settings, reconcile_crud_share=10 / 600)  # 10 calls a minute
    jobs = seed_running(world, 30)
    for name in jobs[:20]:
        world.vertex.set_state(name, SUCCEEDED)
    world.vertex.gets = 0

    first = run_reconcile(world.ports, Logger())

    # The listing (one page) is always made; 9 gets fit in what is left; 11 requests wait.
    assert first.vertex["budget_per_minute"] == 10
    assert first.vertex["calls"] == {"get": 9, "list": 1}
    assert first.outcomes["deferred"] == 11 and world.vertex.gets == 9
    second = run_reconcile(world.ports, Logger())
    assert second.outcomes["deferred"] == 2 and second.vertex["calls"]["get"] == 9
    third = run_reconcile(world.ports, Logger())
    assert third.outcomes.get("deferred", 0) == 0
    assert all(world.ledger.get(f"req-{k:05d}").status == RequestStatus.SUCCEEDED for k in range(20))


def test_a_lookup_past_the_budget_is_deferred_unsent(world: World, monkeypatch) -> None:
    """A stale claim's lookup by labels is a list under the budget like a get: once the pass has
    spent its share it is not sent, and the claim waits for the next pass. It was once sent and
    then refused, its answer thrown away and not counted: each later claim did the same."""
    world.settings = replace(world.settings, reconcile_crud_share=5 / 600)  # 5 calls a minute
    monkeypatch.setattr(reconcile, "RECONCILE_WORKERS", 1)  # the index's order: the gets, then the claim
    for name in seed_running(world, 4):
        world.vertex.set_state(name, SUCCEEDED)  # each needs a get
    claimed_at = iso(utcnow() - timedelta(seconds=600))  # past its lease, never re-published: looked up
    envelope = {"schema_version": 1, "request_id": "req-claim", "custom_job": {}, "location": "us-central1"}
    claim = Attempt(1, "us-central1", "SPOT", claimed_at)
    world.ledger.restore(RequestRecord("req-claim", envelope, "gs://c/r/", attempts=[claim]))
    world.vertex.lists = world.vertex.gets = 0

    first = run_reconcile(world.ports, Logger())

    assert world.vertex.lists == 1  # the pass's listing, which took one of the 5; no lookup sent
    assert first.vertex["calls"] == {"get": 4, "list": 1} and world.vertex.gets == 4
    assert first.outcomes["deferred"] == 1
    second = run_reconcile(world.ports, Logger())
    assert second.outcomes["claim_republished"] == 1 and second.vertex["calls"] == {"list": 2}


def test_a_list_asks_for_its_next_page_only_within_the_budget(world: World) -> None:
    """The pager asks for a list's next page lazily, once the page before it is used up: that
    request is budgeted before it is sent, and none is spent after the last page."""
    world.settings = replace(world.settings, reconcile_crud_share=2 / 600)  # 2 calls a minute
    for k in range(2):
        world.vertex.add("req-two", k + 1)
    client = reconcile_vertex.VertexPass(world.ports, Logger(), started=utcnow()).job_service("us-central1")
    request = {
        "parent": "projects/spotjobs-test/locations/us-central1",
        "filter": 'labels.spotjobs-request-id="req-two"',
    }
    world.vertex.lists = 0

    assert len(client.list_custom_jobs(request={**request, "page_size": 2})) == 2  # one page: one call
    with pytest.raises(reconcile_vertex.CrudBudgetSpent):
        client.list_custom_jobs(request={**request, "page_size": 1})  # its first page takes the second call

    assert world.vertex.lists == 2  # the second list's second page was not asked for


def test_requests_the_budget_deferred_are_read_first_by_the_next_pass(world: World, monkeypatch) -> None:
    """Seed 659 (at 60101f2): the listing refused for good, every job needs a get, and a budget
    below the active requests deferred the same ones, in the index's order, on every pass: their
    jobs were never read again (a hung one never said `job_stuck`). The next pass starts at the
    first deferred, so every request is read within a few passes."""
    from google.api_core.exceptions import PermissionDenied

    world.settings = replace(world.settings, reconcile_crud_share=5 / 600)  # 5 calls a minute
    monkeypatch.setattr(reconcile, "RECONCILE_WORKERS", 1)  # which 4 are read first: the index's first
    jobs = seed_running(world, 12)
    read: set[str] = set()
    get = world.vertex.get_custom_job

    def reading(name: str, **kwargs: Any) -> Any:
        read.add(name)
        return get(name, **kwargs)

    def refused(*_: Any, **__: Any) -> Any:
        raise PermissionDenied("Permission 'aiplatform.customJobs.list' denied")

    world.vertex.get_custom_job = reading  # type: ignore[method-assign]
    world.vertex.list_custom_jobs = refused  # type: ignore[method-assign]
    passes = [run_reconcile(world.ports, Logger()) for _ in range(3)]

    # The refused listing was sent: it is one of each pass's 5 calls, 4 gets the rest.
    assert [p.outcomes["deferred"] for p in passes[:2]] == [8, 4]
    assert read == set(jobs)


def test_hundreds_of_claims_backing_off_spend_no_vertex_call_and_starve_nothing(world: World) -> None:
    """Issue 43, defect 4: a burst of claims whose re-publish backs off (a GPU-quota 429 turned
    their creates away) once cost a label lookup each on every pass, and spent the pass's share of
    the CRUD quota before a request whose end event was lost, and the stray sweep, had theirs."""
    claims = 400  # past the pass's 300 calls a minute (half of 600)
    moment = utcnow()
    claimed_at, republished_at = iso(moment - timedelta(seconds=600)), iso(moment - timedelta(seconds=5))

    def backing_off(k: int) -> None:
        claim = Attempt(1, "us-central1", "SPOT", claimed_at)
        claim.republished, claim.republished_at = 1, republished_at  # re-published 5 s ago
        claim.last_create_error = {"code": 429, "message": "TooManyRequests: GPU quota", "at": claimed_at}
        envelope = {"schema_version": 1, "request_id": f"claim-{k:03d}", "custom_job": {}, "location": "us-central1"}
        world.ledger.restore(RequestRecord(f"claim-{k:03d}", envelope, "gs://c/r/", attempts=[claim]))

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(backing_off, range(claims)))
    _, ended = world.submitted("req-ended", state=RUNNING)  # listed after every claim
    world.vertex.set_state(ended, SUCCEEDED)  # its end event was lost: only a get tells
    stray = world.vertex.add("req-ended", 1, state=RUNNING)  # a second job: the sweep cancels it

    summary = run_reconcile(world.ports, Logger())

    assert summary.active == claims + 1 and "deferred" not in summary.outcomes
    assert world.ledger.get("req-ended").status == RequestStatus.SUCCEEDED
    assert world.vertex.cancelled == [stray] and summary.decisions["stray_job_cancelled"] == 1
    assert summary.vertex["calls"] == {"cancel": 1, "get": 1, "list": 1}  # none for a claim backing off
    assert world.publisher.on("job-requests") == []  # each claim's re-publish keeps its turn
    assert world.ledger.get("claim-000").attempts[0].republished == 1


def test_claims_the_line_turned_away_are_republished_without_a_lookup_whatever_the_budget(world: World) -> None:
    """Seeds 721 and 878: a GPU burst the line turned away (a resource-quota 429: its claims
    released, nothing sent since they waited) was looked up by labels, one budgeted list each,
    before each re-publish. With a few calls a pass, the claims first in the index took them all
    at their hourly backoff, and the others were never re-published nor alerted (`claim_stalled`)
    for 12 hours. A claim that sent no create since it waited has no job to find."""
    world.settings = replace(world.settings, vertex_crud_per_minute=20, reconcile_crud_share=0.25)  # 5 a minute
    claims = 40
    moment = utcnow()
    released = iso(moment - timedelta(seconds=600))

    def turned_away(k: int) -> None:
        claim = Attempt(1, "us-central1", "SPOT", released)
        claim.waiting_since = iso(moment - timedelta(hours=2))
        claim.last_create_error = {"code": 429, "message": "TooManyRequests: GPU quota", "at": released}
        envelope = {"schema_version": 1, "request_id": f"claim-{k:03d}", "custom_job": {}, "location": "us-central1"}
        world.ledger.restore(RequestRecord(f"claim-{k:03d}", envelope, "gs://c/r/", attempts=[claim]))

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(turned_away, range(claims)))

    summary = run_reconcile(world.ports, Logger())

    assert summary.outcomes == {"claim_republished": claims}
    assert summary.vertex["calls"] == {"list": 1}  # the pass's listing; no label lookup
    assert len(world.publisher.on("job-requests")) == claims
    assert all(world.ledger.get(f"claim-{k:03d}").attempts[0].republished == 1 for k in range(claims))


def test_a_claim_republished_leaves_an_alert_another_delivery_is_publishing_to_it(world: World) -> None:
    """The re-publish's write decided no alert: one another delivery made pending a moment ago is
    that delivery's to publish (or a taker's once it is presumed dead), not sent twice (the pattern
    the simulator's seed 872 found in the stray sweep)."""
    moment = utcnow()
    released = iso(moment - timedelta(seconds=600))
    claim = Attempt(1, "us-central1", "SPOT", released)
    claim.waiting_since = iso(moment - timedelta(hours=2))
    theirs = Alert.of(AlertKind.LOOKUP_FAILED, "another delivery's", request_id="claim-1", time=iso(moment)).to_json()
    envelope = {"schema_version": 1, "request_id": "claim-1", "custom_job": {}, "location": "us-central1"}
    world.ledger.restore(RequestRecord("claim-1", envelope, "gs://c/r/", attempts=[claim], pending_alerts=[theirs]))

    summary = run_reconcile(world.ports, Logger())

    assert summary.outcomes["claim_republished"] == 1
    assert world.publisher.on("ops-alerts") == []
    assert world.ledger.get("claim-1").pending_alerts == [theirs]


def test_a_restart_wait_a_pass_reads_is_vouched_for_until_its_listing_was_taken_not_the_read(
    world: World, monkeypatch
) -> None:
    """A pass's get may be answered by its listing, taken any time after the pass began and before
    the get: a job read waiting held that state until the listing was sent at least (`Listing.times`),
    not until the read. A clock that moves an hour a call tells the three apart."""
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, RUNNING)  # its start time
    run_reconcile(world.ports, Logger())  # seen running: it started
    world.vertex.set_state(job, 2)  # PENDING: preempted, Vertex waits for a machine
    vertex_pass = one_pass_an_hour_a_call(world, monkeypatch)
    attempt = world.ledger.get("req-1").attempts[0]
    listing = vertex_pass.listing("us-central1", world.vertex)
    assert listing is not None and listing.times.sent > vertex_pass.began
    assert attempt.rewait_seen_until == iso(listing.times.sent)


def test_the_cancels_a_pass_sends_are_within_its_budget_and_a_refused_one_is_sent_by_a_later_pass(
    world: World,
) -> None:
    """The outbox's cancels (a request's cancel, a deadline switch's) are CRUD calls like the
    pass's gets: a burst of them stays within the pass's share of the quota, and one the budget
    refuses stays pending in the record for the next pass, never forgotten."""
    from shared.ledger.cancelling import cancel_request

    world.settings = replace(world.settings, reconcile_crud_share=5 / 600)  # 5 calls a minute
    jobs = seed_running(world, 12)
    for k in range(12):
        world.ledger.swap(f"req-{k:05d}", lambda current: cancel_request(current, by="ana", reason=None, now=utcnow()))

    passes = [run_reconcile(world.ports, Logger()) for _ in range(4)]

    # Each pass: its listing (always made), then 4 cancels fit; the other requests wait.
    assert [p.vertex["calls"].get("cancel", 0) for p in passes] == [4, 4, 4, 0]
    assert [p.outcomes["deferred"] for p in passes[:3]] == [8, 4, 0]
    assert sorted(world.vertex.cancelled) == sorted(jobs)


def test_a_preemption_a_pass_reads_after_it_began_is_not_stamped_before_it_happened(world: World, monkeypatch) -> None:
    """A pass's listing is taken when it first needs a job of the location, possibly long after
    the pass began: a job preempted in between shows its wait in the listing. The preemption the
    read counts is stamped when the listing's answer was back, not when the pass began, before it
    happened (seed 10119: a `preempt` fleet fact 8.6 s before Vertex preempted the VM). A clock that moves
    an hour a call tells the moments apart."""
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, RUNNING)  # its start time
    run_reconcile(world.ports, Logger())  # seen running: it started
    preempted: list[Any] = []

    def preempted_once_begun(now: Any) -> None:
        preempted.append(now)  # after the pass began, before its listing
        world.vertex.set_state(job, 2)  # PENDING: preempted, Vertex waits for a machine

    one_pass_an_hour_a_call(world, monkeypatch, when_begun=preempted_once_begun)
    attempt = world.ledger.get("req-1").attempts[0]
    assert attempt.preemptions == 1
    [stamped] = attempt.preempted_at
    assert parse_iso(stamped) >= preempted[0]


def test_a_stray_a_pass_sweeps_is_billed_until_its_listing_was_taken_not_the_sweep(world: World, monkeypatch) -> None:
    """The stray sweep's list of a location is the pass's listing, taken when the pass first needed
    a job there: a stray it finds ran until the listing was taken at least, not until the sweep
    began, later (its bill, `Stray.seen_until`, would count a run no read saw). A clock that moves
    an hour a call tells the two apart."""
    world.submitted(state=RUNNING)
    second = world.vertex.add("req-1", 1, state=RUNNING)  # attempt 1 records another job: a stray
    vertex_pass = one_pass_an_hour_a_call(world, monkeypatch)
    listing = vertex_pass.listing("us-central1", world.vertex)
    assert listing is not None and second in listing.jobs
    [stray] = world.ledger.get("req-1").strays
    assert stray.job == second
    assert stray.seen_until == iso(listing.times.sent)


def test_a_preemption_during_the_listings_round_trip_is_not_stamped_before_it_happened(
    world: World, monkeypatch
) -> None:
    """A listing shows each job as it was when Vertex answered, after the call was sent: a VM
    preempted while the list was on its way (seed 10119: asked at 13:25:13.044, answered at
    13:25:15.045, the preemption at 13:25:14.831) is counted no earlier than the answer, though
    the wait it shows is vouched for only from before the call. A clock that moves an hour a call
    tells the moments apart."""
    _, job = world.submitted(state=RUNNING)
    world.vertex.set_state(job, RUNNING)  # its start time
    run_reconcile(world.ports, Logger())  # seen running: it started
    ticks = iter(range(1, 10_000))
    wide = replace(world.settings, reconcile_timeout_seconds=1e9)  # its window outlasts the hours it ticks
    ticking = replace(world.ports, settings=wide, clock=lambda: utcnow() + timedelta(hours=next(ticks)))
    preempted: list[Any] = []
    listed = world.vertex.list_custom_jobs

    def preempted_on_the_way(request: dict[str, Any], **kwargs: Any) -> Any:
        preempted.append(ticking.clock())  # after the call was sent, before Vertex answered
        world.vertex.set_state(job, 2)  # PENDING: preempted, Vertex waits for a machine
        return listed(request, **kwargs)

    monkeypatch.setattr(world.vertex, "list_custom_jobs", preempted_on_the_way)
    run_reconcile(ticking, Logger())
    attempt = world.ledger.get("req-1").attempts[0]
    [stamped] = attempt.preempted_at
    assert parse_iso(stamped) >= preempted[0]
    assert attempt.rewait_seen_until is not None and parse_iso(attempt.rewait_seen_until) < preempted[0]
