"""A reconcile pass whose Vertex calls in one location all hang (that region's API stalling) ends
within reconcile's function timeout, releases its run lease, and still reconciles the requests of
the other locations (`shared.reconcile_vertex.CallWindow`; docs/ARCHITECTURE.md, "No call waits
for good").

Each call to a stalled location waits out the timeout it names on the pass's clock, then raises
DeadlineExceeded, as the JobService client does. The clock adds the waits one after the other
(the pass's eight workers would overlap some of them): a pass measured on it ends in time only if
it stops sending calls there, not by chance."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from shared.clock import utcnow
from shared.ledger.run_lock import ledger_bucket, lock_path
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.log import Logger
from shared.reconcile import RECONCILE_TASK, RECONCILE_WORKERS, run_reconcile
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decisions import CapturedLog, FakePublisher, World, make_settings
from tests.support.stalled_vertex import PassClock, StalledVertex

RUNNING, SUCCEEDED = 3, 4
STALLED, HEALTHY = "europe-west4", "us-central1"
# Reconcile's function timeout as Terraform deploys it (terraform/functions.tf, `function_builtin`).
RECONCILE_FUNCTION_TIMEOUT_SECONDS = 300.0


@pytest.fixture
def clock() -> PassClock:
    return PassClock()


@pytest.fixture
def world(clock: PassClock) -> World:
    one_call_at_a_time = threading.Lock()

    def serve(_service: str, _operation: str, perform: Any) -> Any:
        with one_call_at_a_time:
            return perform()

    bucket = MemoryStorage(clock=utcnow, io=serve).client().bucket("reconcile-hangs-state")
    settings = make_settings(bucket.name, SPOTJOBS_RECONCILE_TIMEOUT_SECONDS=str(RECONCILE_FUNCTION_TIMEOUT_SECONDS))
    return World(LedgerStore(bucket), StalledVertex(clock, {STALLED}), FakePublisher(), settings)


def ports(world: World, clock: PassClock) -> Ports:
    return replace(world.ports, clock=clock)


def listings_take_the_pass(world: World, clock: PassClock) -> None:
    """Every listing answers only after the pass's whole function timeout has gone by."""
    listing = world.vertex.list_custom_jobs

    def slow_listing(request: dict[str, Any], **kwargs: Any) -> Any:
        clock.wait(RECONCILE_FUNCTION_TIMEOUT_SECONDS)
        return listing(request, **kwargs)

    world.vertex.list_custom_jobs = slow_listing  # type: ignore[method-assign]


def test_a_pass_over_a_stalled_location_ends_in_time_and_still_reconciles_the_others(
    world: World, clock: PassClock
) -> None:
    # The stalled location's requests come first in the active index, the healthy ones after them.
    stalled = [world.submitted(f"a-stalled-{i:03d}", state=RUNNING, location=STALLED)[0] for i in range(100)]
    healthy = [world.submitted(f"z-healthy-{i}", state=RUNNING, location=HEALTHY)[1] for i in range(5)]
    for job in healthy:
        world.vertex.set_state(job, SUCCEEDED)
    began = clock()

    summary = run_reconcile(ports(world, clock), Logger())

    assert (clock() - began).total_seconds() <= RECONCILE_FUNCTION_TIMEOUT_SECONDS
    assert ledger_bucket(world.ledger).get_blob(lock_path(RECONCILE_TASK)) is None  # the lease released
    for i in range(5):
        record = world.ledger.get(f"z-healthy-{i}")
        assert record is not None and record.status == RequestStatus.SUCCEEDED
    assert summary.outcomes["deferred"] == len(stalled)
    # A region's stall is no place to start: the next pass starts from the first again, as the index ran out.
    assert world.ledger.cursor(RECONCILE_TASK) == ""
    assert summary.vertex["stalled_locations"] == [STALLED]


def test_a_pass_whose_every_location_stalls_stops_sending_before_the_function_timeout(
    world: World, clock: PassClock
) -> None:
    locations = [f"europe-west{n}" for n in range(1, 13)]  # each costs the pass one hung call
    world.vertex.stalled = set(locations)
    for n, location in enumerate(locations):
        world.submitted(f"req-{n:02d}", state=RUNNING, location=location)
    began = clock()

    summary = run_reconcile(ports(world, clock), Logger())

    assert (clock() - began).total_seconds() <= RECONCILE_FUNCTION_TIMEOUT_SECONDS
    assert world.vertex.hung_calls < len(locations)
    assert ledger_bucket(world.ledger).get_blob(lock_path(RECONCILE_TASK)) is None
    assert summary.outcomes["deferred"] == len(locations)
    assert summary.vertex["out_of_time"] is True


def test_the_cancels_of_a_location_that_stalls_after_its_listing_wait_for_the_next_pass(
    world: World, clock: PassClock
) -> None:
    """The outbox's cancels go through the window as the gets do: once one cancel there runs out
    its timeout, the others are not sent (each would wait its own), and stay pending in their
    records for the next pass; every request waits for it, the ones whose cancel hung too."""
    from shared.ledger.cancelling import cancel_request

    world.vertex.stalled = set()
    for k in range(20):
        world.submitted(f"req-{k:02d}", state=RUNNING, location=STALLED)
        world.ledger.swap(f"req-{k:02d}", lambda current: cancel_request(current, by="ana", reason=None, now=utcnow()))
    listing = world.vertex.list_custom_jobs

    def listing_then_stalling(request: dict[str, Any], **kwargs: Any) -> Any:
        jobs = listing(request, **kwargs)
        world.vertex.stalled.add(STALLED)  # the region's API stalls just after this answer
        return jobs

    world.vertex.list_custom_jobs = listing_then_stalling  # type: ignore[method-assign]
    began = clock()

    summary = run_reconcile(ports(world, clock), Logger())

    assert (clock() - began).total_seconds() <= RECONCILE_FUNCTION_TIMEOUT_SECONDS
    # The pass's workers run at once: the cancels already sent when the first runs out its
    # timeout hang too (at most one a worker); none is sent after it.
    hung = world.vertex.hung_calls
    assert 1 <= hung <= RECONCILE_WORKERS
    assert summary.vertex["stalled_locations"] == [STALLED]
    assert summary.outcomes == {"deferred": 20}
    pending = [a for k in range(20) for a in world.ledger.get(f"req-{k:02d}").attempts if a.cancel_pending]
    assert len(pending) == 20  # none forgotten: the next pass sends them


def test_a_listing_the_window_refuses_says_the_locations_requests_wait_not_that_each_is_read(
    world: World, clock: PassClock
) -> None:
    """A location whose listing ran out its timeout (or that the window closed to) gets no get
    either: its requests wait for the next pass, and the warning says so."""
    for k in range(3):
        world.submitted(f"req-{k}", state=RUNNING, location=STALLED)
    log = CapturedLog()

    summary = run_reconcile(ports(world, clock), log.logger)

    assert summary.outcomes["deferred"] == 3 and world.vertex.hung_calls == 1
    assert log.events("reconcile_listing_failed") == []  # "reading each with a get": none is read
    [line] = log.events("reconcile_listing_deferred")
    assert line["location"] == STALLED


def test_a_pass_whose_requests_outgrow_its_window_still_cancels_its_strays(
    world: World, clock: PassClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stray sweep runs after the requests: a pass whose requests take its whole window (slow
    storage: each takes 3 s of the pass's clock here) must still leave the sweep its call timeout,
    else no pass ever cancels a stray, and the next starts the same way (seed 10348: a console
    re-run of a job, alive for good). The requests not begun in time wait for the next pass."""
    import shared.reconcile as reconcile

    world.vertex.stalled = set()
    requests = [world.submitted(f"req-{k:03d}", state=RUNNING)[0].request_id for k in range(100)]
    rerun = world.vertex.add(requests[0], 1)  # attempt 1 records another job: a console re-run
    each = reconcile.reconcile_request

    def slowly(pass_ports: Ports, request_id: str, log: Logger) -> Any:
        clock.wait(3.0)
        return each(pass_ports, request_id, log)

    monkeypatch.setattr(reconcile, "reconcile_request", slowly)
    log = CapturedLog()
    began = clock()

    summary = run_reconcile(ports(world, clock), log.logger)

    assert world.vertex.cancelled == [rerun]
    assert (clock() - began).total_seconds() <= RECONCILE_FUNCTION_TIMEOUT_SECONDS
    deferred = summary.outcomes["deferred"]
    assert 0 < deferred < len(requests)
    # The next pass starts at the first one deferred (the workers take them in turn, in order).
    assert world.ledger.cursor(RECONCILE_TASK) in requests[len(requests) - deferred - RECONCILE_WORKERS :]
    assert summary.vertex["sweep_calls_deferred"] == 0 and log.events("stray_sweep_deferred") == []


def test_a_sweep_the_window_closes_on_says_its_strays_wait(world: World, clock: PassClock) -> None:
    """A sweep the window cuts short all the same (its listing took the time left: no request's
    record read is begun after it, nor would a cancel be sent) says so in one line, beside the
    summary's count."""
    world.vertex.stalled = set()
    request, _ = world.submitted("req-1", state=RUNNING)
    world.vertex.add(request.request_id, 1)  # a stray
    listings_take_the_pass(world, clock)
    log = CapturedLog()

    summary = run_reconcile(ports(world, clock), log.logger)

    assert world.vertex.cancelled == []
    assert (summary.vertex["sweep_calls_deferred"], summary.vertex["sweep_records_unread"]) == (0, 1)
    [line] = log.events("stray_sweep_deferred")
    assert (line["calls_deferred"], line["records_unread"]) == (0, 1)


def test_a_region_that_stays_stalled_does_not_keep_the_passes_from_the_requests_before_it(
    world: World, clock: PassClock
) -> None:
    """A request deferred because its region stalls is no place for the next pass to start: the
    region stalls there again, so every pass would start at it, and the requests before it in the
    active index would never be read again (a lost end event never seen, the request RUNNING for
    good). Its turn comes round again as the others' do."""
    _, job = world.submitted("a-healthy", state=RUNNING, location=HEALTHY)
    world.submitted("b-stalled", state=RUNNING, location=STALLED)
    run_reconcile(ports(world, clock), Logger())  # the stalled one is deferred
    world.vertex.set_state(job, SUCCEEDED)  # its end event is lost

    for _ in range(3):  # the region stays stalled
        run_reconcile(ports(world, clock), Logger())

    record = world.ledger.get("a-healthy")
    assert record is not None and record.status == RequestStatus.SUCCEEDED


def test_a_listing_whose_pages_come_slowly_sends_no_page_past_the_window(world: World, clock: PassClock) -> None:
    """Each page of a listing is a call of its own, with its own timeout (the pager sends the next
    one once a page is used up): the window judges every one, not the first alone. A location with
    thousands of this deployment's jobs, answered slowly (each page just within its timeout), would
    otherwise have the pass send page after page past its function's timeout, killed there with its
    run lease held."""
    from types import SimpleNamespace

    world.vertex.stalled = set()
    for k in range(3):
        world.submitted(f"req-{k}", state=RUNNING)
    listing = world.vertex.list_custom_jobs
    each_page = 0.9 * world.settings.vertex_call_timeout_seconds

    def paged_slowly(request: dict[str, Any], **kwargs: Any) -> Any:
        jobs = list(listing(request, **kwargs))

        def pages() -> Any:
            for page in range(20):
                clock.wait(each_page)
                yield SimpleNamespace(custom_jobs=jobs if page == 0 else [], next_page_token="" if page == 19 else "on")

        return SimpleNamespace(pages=pages())

    world.vertex.list_custom_jobs = paged_slowly  # type: ignore[method-assign]
    began = clock()

    run_reconcile(ports(world, clock), Logger())

    assert (clock() - began).total_seconds() <= RECONCILE_FUNCTION_TIMEOUT_SECONDS


def test_a_sweep_listing_the_window_refuses_is_one_deferral_said_once(world: World, clock: PassClock) -> None:
    """A location only the sweep lists (an allowed one no request of the pass ran in), whose
    listing the window refuses once the requests took the time: one call deferred, said by the
    sweep's one line, as a stray cancel it refuses is; not three WARNINGs (a listing "deferred"
    whose "requests wait", a second list sent to the same refusal, and a sweep that "could not
    list"), nor two calls counted for the one it did not send."""
    world.settings = replace(world.settings, allowed_locations=(HEALTHY, STALLED))
    world.vertex.stalled = set()
    world.submitted("req-1", state=RUNNING, location=HEALTHY)
    listings_take_the_pass(world, clock)
    log = CapturedLog()

    summary = run_reconcile(ports(world, clock), log.logger)

    assert summary.vertex["sweep_calls_deferred"] == 1
    [line] = log.events("stray_sweep_deferred")
    assert line["calls_deferred"] == 1
    assert log.events("stray_sweep_failed") == []
    assert log.events("reconcile_listing_deferred") == []


def test_a_sweep_whose_record_reads_come_slowly_begins_none_past_the_window(
    world: World, clock: PassClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep reads the record of every request with a job in its listing (a stray is known only
    against it): thousands of them, read slowly (slow storage: 3 s of the pass's clock each here),
    would run the pass past its function's timeout, killed with its run lease held and its summary
    unsaid. No read is begun once the window's last call start has passed (a stray it found could
    not be cancelled anyway): their strays wait for the next pass, said in the sweep's one line."""
    world.vertex.stalled = set()
    for k in range(150):
        world.submitted(f"req-{k:03d}", state=RUNNING)
    read = world.ledger.read

    def slowly(request_id: str) -> Any:
        clock.wait(3.0)
        return read(request_id)

    monkeypatch.setattr(world.ledger, "read", slowly)
    log = CapturedLog()
    began = clock()

    summary = run_reconcile(ports(world, clock), log.logger)

    assert (clock() - began).total_seconds() <= RECONCILE_FUNCTION_TIMEOUT_SECONDS
    unread = summary.vertex["sweep_records_unread"]
    assert 0 < unread < 150
    [line] = log.events("stray_sweep_deferred")
    assert line["records_unread"] == unread


def test_a_restart_of_quota_lines_whose_reads_come_slowly_begins_none_past_the_window(
    world: World, clock: PassClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the sweep the pass restarts the quota lines left without a drainer
    (`restart_stalled`), reading the record of each head in turn until one needs a create: a line
    of many settled heads (a burst cancelled while its drainer was dead), read slowly (3 s of the
    pass's clock each), would run the pass past its function's timeout, killed with its run lease
    held. No read is begun past the window's last call start: the line waits for the next pass,
    said in the summary and in the sweep's one line."""
    from shared.pacing import pacer_for, waiting_entry

    world.vertex.stalled = set()
    pacer = pacer_for(world.ports)
    for k in range(150):  # their records are gone: each head is settled, and read before it leaves
        pacer.enqueue(waiting_entry(HEALTHY, 0, f"gone-{k:03d}", 1))
    get = world.ledger.get

    def slowly(request_id: str) -> Any:
        clock.wait(3.0)
        return get(request_id)

    monkeypatch.setattr(world.ledger, "get", slowly)
    log = CapturedLog()
    began = clock()

    summary = run_reconcile(ports(world, clock), log.logger)

    assert (clock() - began).total_seconds() <= RECONCILE_FUNCTION_TIMEOUT_SECONDS
    assert summary.vertex["quota_restart_deferred"] is True
    [line] = log.events("stray_sweep_deferred")
    assert line["quota_restart_deferred"] is True
    assert 0 < len(pacer.waiting(HEALTHY)) < 150  # the next pass goes on where this one stopped


def cut_short_alerts(world: World) -> list[dict[str, Any]]:
    alerts = world.publisher.on(world.settings.ops_alerts_topic)
    return [m.data for m in alerts if m.data["kind"] == "stray_sweep_cut_short"]


def test_a_sweep_cut_short_pass_after_pass_is_alerted_once_a_run(world: World, clock: PassClock) -> None:
    """A WARNING line a pass whose sweep was cut short writes tells nobody: a deployment whose every
    pass runs out its window before the sweep is done never cancels its strays. Three passes in a
    row cut short are alerted, once for the run of them however long it lasts; a pass that sweeps
    whole ends the run, and the next three cut short are alerted again."""
    world.vertex.stalled = set()
    request, _ = world.submitted("req-1", state=RUNNING)
    world.vertex.add(request.request_id, 1)  # a stray
    list_in_time = world.vertex.list_custom_jobs
    listings_take_the_pass(world, clock)

    for _ in range(2):
        run_reconcile(ports(world, clock), Logger())
    assert cut_short_alerts(world) == []
    for _ in range(3):
        run_reconcile(ports(world, clock), Logger())
    [alert] = cut_short_alerts(world)
    assert alert["details"]["passes"] == 3

    world.vertex.list_custom_jobs = list_in_time  # type: ignore[method-assign]
    run_reconcile(ports(world, clock), Logger())  # sweeps whole: the stray is cancelled
    world.vertex.add(request.request_id, 1)  # another stray
    listings_take_the_pass(world, clock)
    for _ in range(3):
        run_reconcile(ports(world, clock), Logger())
    assert [a["details"]["passes"] for a in cut_short_alerts(world)] == [3, 3]


def test_a_sweep_whose_listing_spent_the_crud_budget_still_cancels_its_stray(world: World, clock: PassClock) -> None:
    """The listing is made past a spent budget, and a location of many unfinished jobs in pages of
    one spends it every pass: a stray's cancel the budget refused was refused by each next pass,
    and the stray ran on for good (seeds 12482, 20719). The sweep's cancel of a stray is spent as
    the listing is: the first pass cancels it, and no pass is cut short for it."""
    world.vertex.stalled = set()
    # One call a minute: the pass's listing (always made, forced) spends it.
    world.settings = replace(world.settings, reconcile_crud_share=1 / world.settings.vertex_crud_per_minute)
    request, _ = world.submitted("req-1", state=RUNNING)
    stray = world.vertex.add(request.request_id, 1)
    log = CapturedLog()

    summaries = [run_reconcile(ports(world, clock), log.logger) for _ in range(3)]

    assert world.vertex.cancelled == [stray]
    assert [s.vertex["sweep_calls_deferred"] for s in summaries] == [0, 0, 0]
    assert log.events("stray_sweep_deferred") == []
    assert cut_short_alerts(world) == []


def test_a_sweep_whose_listing_of_a_location_only_it_lists_stalls_pass_after_pass_is_alerted(
    world: World, clock: PassClock
) -> None:
    """A failover region no request of the pass needed is listed by the sweep alone; when that
    listing runs out its timeout pass after pass, the strays there run on unlisted, as a stray the
    window keeps from its cancel would (docs/operations.md: `stray_sweep_cut_short`, "or a stalled
    location"). Before, only a call the window refused after the stall counted, and the sweep
    sends none there once its listing failed: nobody was told."""
    from shared.job_locations import remember_location

    remember_location(world.ports, STALLED)  # a create was once sent there
    request, _ = world.submitted("req-1", state=RUNNING, location=HEALTHY)
    world.vertex.add(request.request_id, 1, location=STALLED)  # a stray there

    summaries = [run_reconcile(ports(world, clock), Logger()) for _ in range(3)]

    assert [s.vertex["sweep_calls_deferred"] for s in summaries] == [1, 1, 1]
    [alert] = cut_short_alerts(world)
    assert alert["details"]["stalled_locations"] == [STALLED]


def test_a_sweep_that_ends_past_its_last_call_start_with_no_quota_line_is_not_cut_short(
    world: World, clock: PassClock
) -> None:
    """The sweep's listing is sent in time and answered just past the window's last call start,
    and there is no line waiting for the quota: nothing was left for the next pass, so the pass is
    not cut short (no `stray_sweep_deferred` line, no count towards `stray_sweep_cut_short`)."""
    call_timeout = world.settings.vertex_call_timeout_seconds
    # The sweep's last call start is half a call timeout into the pass; the listing takes most of one.
    world.settings = replace(world.settings, reconcile_timeout_seconds=2.5 * call_timeout)
    world.vertex.stalled = set()
    listing = world.vertex.list_custom_jobs

    def listing_answered_late(request: dict[str, Any], **kwargs: Any) -> Any:
        clock.wait(0.9 * call_timeout)
        return listing(request, **kwargs)

    world.vertex.list_custom_jobs = listing_answered_late  # type: ignore[method-assign]
    log = CapturedLog()

    summary = run_reconcile(ports(world, clock), log.logger)

    assert summary.vertex["quota_restart_deferred"] is False
    assert log.events("stray_sweep_deferred") == []


def unanswering_alerts(world: World) -> list[dict[str, Any]]:
    alerts = world.publisher.on(world.settings.ops_alerts_topic)
    return [m.data for m in alerts if m.data["kind"] == "location_unanswering"]


def test_a_location_that_answers_no_call_passes_in_a_row_is_alerted_once_a_run(world: World, clock: PassClock) -> None:
    """A region whose Vertex API stalls leaves its requests unread and uncancelled, said only by
    WARNING lines: three passes in a row that got no reply there are alerted, once for the run of
    them, naming the location; a pass that gets a reply ends the run, and the next stall is a run
    of its own."""
    world.submitted("req-1", state=RUNNING, location=STALLED)
    world.submitted("req-2", state=RUNNING, location=HEALTHY)

    for _ in range(2):
        run_reconcile(ports(world, clock), Logger())
    assert unanswering_alerts(world) == []
    for _ in range(2):
        run_reconcile(ports(world, clock), Logger())
    [alert] = unanswering_alerts(world)
    assert alert["details"]["location"] == STALLED
    assert alert["details"]["passes"] == 3
    assert alert["details"]["timed_out"] >= 1

    world.vertex.stalled = set()
    run_reconcile(ports(world, clock), Logger())  # it answers again: the run ends
    world.vertex.stalled = {STALLED}
    for _ in range(3):
        run_reconcile(ports(world, clock), Logger())
    assert [a["details"]["location"] for a in unanswering_alerts(world)] == [STALLED, STALLED]


def test_a_location_counts_as_unanswering_only_when_no_call_got_a_reply(world: World, clock: PassClock) -> None:
    """Every call meeting a 503 is no reply, as a timeout is; an error Vertex answers (a 403) is a
    reply: that location is not said to have stopped answering (`stray_sweep_refused` says what it
    refuses)."""
    from google.api_core.exceptions import PermissionDenied, ServiceUnavailable

    busy, refusing = "asia-east1", "europe-west1"
    world.vertex.stalled = set()
    world.settings = replace(world.settings, allowed_locations=(HEALTHY, busy, refusing))
    listing = world.vertex.list_custom_jobs

    def answering(request: dict[str, Any], **kwargs: Any) -> Any:
        if busy in request["parent"]:
            raise ServiceUnavailable("the service is currently unavailable")
        if refusing in request["parent"]:
            raise PermissionDenied("aiplatform.customJobs.list denied")
        return listing(request, **kwargs)

    world.vertex.list_custom_jobs = answering  # type: ignore[method-assign]

    for _ in range(3):
        run_reconcile(ports(world, clock), Logger())

    [alert] = unanswering_alerts(world)
    assert alert["details"]["location"] == busy
    assert alert["details"]["unavailable"] == 2  # the sweep's listing, and the one list sent once more
