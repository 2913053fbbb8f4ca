"""Pacing creates to Vertex's submission quota (shared/pacing.py, shared/paced_submit.py), through
submit_request against a real ledger (fake-gcs-server) and an in-memory Vertex with a rate quota:
a burst waits in line and is created in turn (priority first, then arrival), exactly once per
attempt under redelivery and concurrency, never failed, with one quota_limited alert."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from google.api_core import exceptions as api
from google.cloud.aiplatform_v1 import CustomJob

import shared.paced_submit as paced_submit_module
import shared.submit as submit_module
from devstack.vertex.quotas import SUBMISSIONS, SlidingWindow, quota_exceeded
from shared.alerts import Alert
from shared.clock import iso
from shared.delivery import Message
from shared.jobs import LABEL_REQUEST_ID
from shared.ledger.cancelling import cancel_request
from shared.ledger.claims import fail_attempt
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.log import Logger
from shared.paced_submit import drain_line
from shared.pacing import Pacer, Waiting, pacer_for
from shared.pacing_drainer import hand_over
from shared.reconcile import run_reconcile
from shared.requests.envelope import REQUEUE_ATTRIBUTES
from shared.settings import Settings
from shared.submit import SUBMIT_STEPS, SubmitResult, submit_request
from shared.wiring import Ports
from tests.conftest import load_event
from tests.support.decisions import FakePublisher
from tests.support.vertex import FakeVertex as FakeJobService

# A fast pace (a slot every 50 ms) and short drainer runs, so hand-overs happen in a test.
PACED = Settings.from_env(
    {
        "GOOGLE_CLOUD_PROJECT": "proj",
        "SPOTJOBS_LOCATION": "us-central1",
        "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": "us-docker.pkg.dev/my-project/",
        "SPOTJOBS_TRAINING_SERVICE_ACCOUNT": "trainer@my-project.iam.gserviceaccount.com",
        "SPOTJOBS_VERTEX_CREATES_PER_MINUTE": "1200",
        "SPOTJOBS_PACER_RUN_SECONDS": "2",
        # 0.05 s per slot: a line of more than 4 is a burst worth an alert.
        "SPOTJOBS_QUOTA_ALERT_AFTER_SECONDS": "0.2",
    }
)
LOCATION = "us-central1"


class RateLimitedJobService(FakeJobService):
    """FakeJobService whose creates past `limit` in any `window` seconds get Vertex's 429."""

    def __init__(self, limit: int = 0, window: float = 60.0, seconds_per_create: float | None = None) -> None:
        super().__init__()
        # With `seconds_per_create`, each create moves the window's clock on by that much instead
        # of real time: the quota binds however slow the machine is.
        clock = itertools.count(step=seconds_per_create).__next__ if seconds_per_create else time.monotonic
        self.window = SlidingWindow(limit, window=window, clock=clock)
        self.refused = 0
        self.list_filters: list[str] = []

    def list_custom_jobs(self, request: dict[str, str], **kwargs: Any) -> Iterator[CustomJob]:
        self.list_filters.append(request.get("filter", ""))
        return super().list_custom_jobs(request, **kwargs)

    def create_custom_job(self, *, parent: str, custom_job: CustomJob, retry: Any, timeout: float) -> CustomJob:
        if not self.window.try_acquire(parent):
            with self._lock:
                self.creates += 1
                self.refused += 1
            error = quota_exceeded(SUBMISSIONS, "projects/proj")
            raise api.TooManyRequests(error.message, error_info=error.details[0])
        return super().create_custom_job(parent=parent, custom_job=custom_job, retry=retry, timeout=timeout)


def envelope(request_id: str, **fields: Any) -> bytes:
    job = json.loads(load_event("requests/bare_docs.json"))
    return json.dumps({"request_id": request_id, "custom_job": job, **fields}).encode()


@dataclass
class Line:
    """submit_request with pacing on, and Pub/Sub's part: what submit publishes to job-requests
    (a drainer's hand-over) is delivered again by `pump`."""

    ledger: LedgerStore
    vertex: RateLimitedJobService = field(default_factory=RateLimitedJobService)
    publisher: FakePublisher = field(default_factory=FakePublisher)
    settings: Settings = PACED
    log_stream: io.StringIO = field(default_factory=io.StringIO)
    raised: list[BaseException] = field(default_factory=list)
    delivered: int = 0

    @property
    def ports(self) -> Ports:
        return Ports(
            settings=self.settings,
            ledger=self.ledger,
            publisher=lambda: self.publisher,  # type: ignore[arg-type, return-value]
            job_service=lambda location: self.vertex,  # type: ignore[arg-type, return-value]
            topics={self.settings.ops_alerts_topic, self.settings.job_requests_topic},
        )

    @property
    def pacer(self) -> Pacer:
        return pacer_for(self.ports)

    def deliver(self, data: bytes, message_id: str = "m", **attributes: str) -> Any:
        try:
            return submit_request(Message(data, message_id, attributes), Logger(stream=self.log_stream), self.ports)
        except Exception as exc:  # a delivery that raised is redelivered by Pub/Sub: counted
            self.raised.append(exc)
            return None

    def pump(self, seconds: float = 30.0) -> None:
        """Deliver every hand-over published so far, until the line is empty."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            messages = self.publisher.on("job-requests")[self.delivered :]
            self.delivered += len(messages)
            for message in messages:
                self.deliver(json.dumps(message.data).encode(), "handover", **message.attributes)
            if not self.pacer.anyone_waiting(LOCATION) and not messages:
                return
            time.sleep(0.05)  # another delivery may be draining: its hand-over comes
        raise AssertionError("the line never drained")

    def jobs_by_request(self) -> dict[str, list[CustomJob]]:
        jobs: dict[str, list[CustomJob]] = {}
        for name in sorted(self.vertex.jobs, key=lambda n: int(n.rsplit("/", 1)[1])):  # creation order
            job = self.vertex.jobs[name]
            jobs.setdefault(job.labels[LABEL_REQUEST_ID], []).append(job)
        return jobs

    @property
    def alerts(self) -> list[Alert]:
        return [Alert(**message.data) for message in self.publisher.on("ops-alerts")]

    def events(self, name: str) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in self.log_stream.getvalue().splitlines()]
        return [line for line in lines if line.get("event") == name]


@pytest.fixture
def line(gcs_bucket: Any) -> Line:
    return Line(LedgerStore(gcs_bucket))


@contextlib.contextmanager
def drainer_held(line: Line, location: str = LOCATION) -> Iterator[None]:
    """Hold the drainer lease (as a drainer busy elsewhere would) with someone in line, so every
    delivery inside waits in line; on leaving, the line drains from one hand-over."""
    pacer = line.pacer
    lease = pacer.acquire(location)
    assert lease is not None
    blocker = Waiting(location, "9999999~blocker~1")  # sorts after any priority's entries
    pacer.enqueue(blocker)
    try:
        yield
    finally:
        pacer.remove(blocker)
        pacer.release(location, lease)


def restart(line: Line) -> None:
    """What reconcile does for a line without a drainer: hand it to its head."""
    assert hand_over(line.ports, line.pacer, LOCATION, Logger(stream=line.log_stream))
    line.pump()


def burst(count: int, priority_every: int = 0, prefix: str = "burst") -> list[tuple[str, bytes]]:
    requests = []
    for i in range(count):
        priority = 5 if priority_every and i % priority_every == 0 else 0
        fields = {"priority": priority} if priority else {}
        requests.append((f"{prefix}-{i:03d}", envelope(f"{prefix}-{i:03d}", **fields)))
    return requests


def test_a_burst_waits_in_line_and_is_created_in_turn_priority_first_once_each(line: Line) -> None:
    requests = burst(16, priority_every=4)
    with drainer_held(line):
        for request_id, body in requests:  # in order: each arrives after the one before
            assert line.deliver(body, f"m-{request_id}").result == SubmitResult.WAITING

    restart(line)

    jobs = line.jobs_by_request()
    assert {rid: len(js) for rid, js in jobs.items()} == {rid: 1 for rid, _ in requests}
    records = {rid: line.ledger.get(rid) for rid, _ in requests}
    assert all(r.status == RequestStatus.SUBMITTED for r in records.values())
    in_turn = sorted(
        records, key=lambda rid: (-records[rid].request.get("priority", 0), records[rid].latest.waiting_since)
    )
    assert list(jobs) == in_turn  # created in line order: the four priority-5 requests first
    assert list(jobs)[:4] == ["burst-000", "burst-004", "burst-008", "burst-012"]
    assert line.vertex.creates == 16 and not line.raised
    assert not line.pacer.anyone_waiting(LOCATION)


def test_one_quota_limited_alert_per_burst_names_how_many_wait_and_the_drain_time(line: Line) -> None:
    with drainer_held(line):
        for request_id, body in burst(6):
            line.deliver(body, f"m-{request_id}")
    restart(line)

    [alert] = line.alerts
    assert alert.kind == "quota_limited" and alert.severity == "WARNING"
    assert alert.details["waiting"] == 6
    assert alert.details["expected_drain_seconds"] == round(6 * 60 / PACED.vertex_creates_per_minute)
    # The burst is over once the line is empty: the next one alerts again, once.
    with drainer_held(line):
        for request_id, body in burst(5, prefix="later"):
            line.deliver(body, f"m-{request_id}")
    restart(line)
    assert [a.details["waiting"] for a in line.alerts] == [6, 5]
    # A line that drains within quota_alert_after_seconds is pacing, not a quota problem.
    with drainer_held(line):
        line.deliver(envelope("short-1"), "m-short-1")
        line.deliver(envelope("short-2"), "m-short-2")
    restart(line)
    assert [a.details["waiting"] for a in line.alerts] == [6, 5]


def test_redelivered_and_concurrent_waiting_requests_are_created_once_each(line: Line) -> None:
    requests = burst(10)
    with drainer_held(line):
        with ThreadPoolExecutor(8) as pool:  # every message delivered three times at once
            list(pool.map(lambda item: line.deliver(item[1], f"m-{item[0]}"), requests * 3))
    drains = threading.Thread(target=restart, args=(line,))
    drains.start()
    with ThreadPoolExecutor(4) as pool:  # and again while the line drains
        list(pool.map(lambda item: line.deliver(item[1], f"again-{item[0]}"), requests))
    drains.join()
    line.pump()

    jobs = line.jobs_by_request()
    assert {rid: len(js) for rid, js in jobs.items()} == {rid: 1 for rid, _ in requests}
    for request_id, _ in requests:
        record = line.ledger.get(request_id)
        assert record.status == RequestStatus.SUBMITTED and record.latest.job == jobs[request_id][0].name
    # Only claim races raise (ClaimInProgress: redelivered, then a duplicate), never the quota.
    assert all(type(exc).__name__ == "ClaimInProgress" for exc in line.raised), line.raised


def test_creates_vertex_refuses_for_the_rate_wait_their_turn_again_and_none_fails(line: Line) -> None:
    line.vertex = RateLimitedJobService(limit=3, window=0.5, seconds_per_create=0.1)  # stricter than the pace
    requests = burst(8)
    for request_id, body in requests:
        line.deliver(body, f"m-{request_id}")
    line.pump()
    if line.pacer.anyone_waiting(LOCATION):  # a hand-over raced the last arrival
        restart(line)

    jobs = line.jobs_by_request()
    assert {rid: len(js) for rid, js in jobs.items()} == {rid: 1 for rid, _ in requests}
    assert line.vertex.refused > 0  # the quota did bind
    assert line.vertex.creates == len(requests) + line.vertex.refused
    assert not any(line.ledger.get(rid).status == RequestStatus.FAILED for rid, _ in requests)
    assert not line.raised


def test_a_resource_quota_429_is_not_the_rate_and_is_acknowledged_for_reconciles_republish(line: Line) -> None:
    # Simulator seed 1887: redelivered five times per re-publish, 200 requests refused for a spent
    # GPU quota crowded a CPU request's message out of submit_job's subscription for hours.
    gpus = api.TooManyRequests(
        "The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus"
    )
    line.vertex.create_faults.append(gpus)

    outcome = line.deliver(envelope("gpus"), "m-gpus")

    assert not line.raised and outcome is not None and outcome.result == SubmitResult.WAITING  # acknowledged
    record = line.ledger.get("gpus")
    assert record.latest.waiting_since is None and record.latest.last_create_error["code"] == 429
    assert not line.pacer.anyone_waiting(LOCATION)
    # Its claim was handed back: reconcile's next pass re-publishes it, then backs off.
    summary = run_reconcile(line.ports, Logger(stream=line.log_stream))
    assert summary.outcomes["claim_republished"] == 1
    assert not run_reconcile(line.ports, Logger(stream=line.log_stream)).outcomes["claim_republished"]


def test_reconcile_leaves_a_waiting_attempt_to_the_line_and_restarts_a_line_without_drainer(line: Line) -> None:
    with drainer_held(line):
        for request_id, body in burst(3):
            line.deliver(body, f"m-{request_id}")
    # The drainer is gone (its lease released, no hand-over): reconcile finds the line stalled.
    summary = run_reconcile(line.ports, Logger(stream=line.log_stream))

    assert summary.outcomes["waiting_for_quota"] == 3
    assert summary.decisions["quota_line_restarted"] == 1
    # No lookup by labels for attempts that never sent a create (only the pass's listing).
    assert not [f for f in line.vertex.list_filters if "spotjobs-attempt" in f]
    [handover] = line.publisher.on("job-requests")
    assert handover.attributes == REQUEUE_ATTRIBUTES | {"request_id": "burst-000"}
    line.pump()
    assert sorted(line.jobs_by_request()) == ["burst-000", "burst-001", "burst-002"]


# A line stays live whatever crashed where (issue 28, items 1-4).


class Crash(BaseException):
    """The function instance dies here: nothing after it runs (not an exception anyone catches)."""


def crash_once(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> None:
    real = getattr(owner, name)
    crashed: list[bool] = []

    def once(*args: Any, **kwargs: Any) -> Any:
        if not crashed:
            crashed.append(True)
            raise Crash(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, once)


def forget_the_drainer(line: Line) -> None:
    """A crashed drainer's lease, once it expired (as reconcile finds it)."""
    with contextlib.suppress(api.NotFound):
        line.pacer._bucket.delete_blob(f"pacing/{LOCATION}/drainer.json")  # noqa: SLF001


def drainer_died_after_creating_the_head(line: Line, monkeypatch: pytest.MonkeyPatch) -> None:
    """A line of three (burst-000 first) whose drainer created the head's job and died before
    recording it, its lease expired."""
    with drainer_held(line):
        for request_id, body in burst(3):
            line.deliver(body, f"m-{request_id}")
    crash_once(monkeypatch, submit_module, "_record_created")
    with pytest.raises(Crash):
        restart(line)
    forget_the_drainer(line)


def test_a_head_created_by_a_drainer_that_died_before_removing_its_entry_leaves_the_line(
    line: Line, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = burst(3)
    with drainer_held(line):
        for request_id, body in requests:
            line.deliver(body, f"m-{request_id}")
    crash_once(monkeypatch, Pacer, "remove")  # the head's job is created and recorded, then the drainer dies
    with pytest.raises(Crash):
        restart(line)
    assert sorted(line.jobs_by_request()) == ["burst-000"]
    forget_the_drainer(line)

    # Reconcile's restart finds the settled head first in line: it leaves the line, the next one goes.
    summary = run_reconcile(line.ports, Logger(stream=line.log_stream))
    assert summary.decisions["quota_line_restarted"] == 1
    line.pump(seconds=5)

    assert sorted(line.jobs_by_request()) == [rid for rid, _ in requests]
    assert line.vertex.creates == 3
    assert not line.pacer.waiting(LOCATION)


def test_a_failed_delete_of_a_settled_head_does_not_stall_the_line(line: Line, monkeypatch: pytest.MonkeyPatch) -> None:
    requests = burst(3)
    with drainer_held(line):
        for request_id, body in requests:
            line.deliver(body, f"m-{request_id}")
    real_remove = Pacer.remove
    failures: list[str] = []

    def remove_failing_once(self: Pacer, entry: Waiting) -> None:
        if not failures:
            failures.append(entry.key)
            raise api.ServiceUnavailable("the delete of the entry failed")
        real_remove(self, entry)

    monkeypatch.setattr(Pacer, "remove", remove_failing_once)
    restart(line)  # the hand-over's delivery drains the line despite the failed delete

    assert failures and sorted(line.jobs_by_request()) == [rid for rid, _ in requests]
    assert line.vertex.creates == 3 and not line.raised
    assert not line.pacer.waiting(LOCATION)


def burst_document(line: Line) -> Any:
    return line.pacer._bucket.get_blob(f"pacing/{LOCATION}/burst.json")  # noqa: SLF001


def test_the_burst_ends_when_the_run_ends_right_after_creating_the_last_waiting_attempt(
    line: Line, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = burst(6)
    with drainer_held(line):
        for request_id, body in requests:
            line.deliver(body, f"m-{request_id}")
    slots = iter(range(len(requests)))  # exactly one slot per waiting attempt, then the run is over
    monkeypatch.setattr(Pacer, "wait_for_slot", lambda self, location, deadline: next(slots, None) is not None)

    restart(line)

    assert len(line.jobs_by_request()) == 6 and [a.details["waiting"] for a in line.alerts] == [6]
    assert burst_document(line) is None
    # So the next burst alerts again.
    monkeypatch.undo()
    with drainer_held(line):
        for request_id, body in burst(5, prefix="later"):
            line.deliver(body, f"m-{request_id}")
    restart(line)
    assert [a.details["waiting"] for a in line.alerts] == [6, 5]


def test_reconcile_ends_the_burst_of_an_empty_line_whose_drainer_died_before_it_could(line: Line) -> None:
    line.pacer.burst_alert_due(LOCATION, 6)  # the drainer removed the last entry, then died

    run_reconcile(line.ports, Logger(stream=line.log_stream))

    assert burst_document(line) is None


def test_a_request_accepted_at_the_size_limit_is_created_when_the_line_hands_over_to_it(line: Line) -> None:
    job = json.loads(load_event("requests/bare_docs.json"))
    # Non-ASCII text in its arguments: re-published, each such character is written \uXXXX.
    job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"] = ["--prompt", "é" * 2000]
    body = json.dumps(job, ensure_ascii=False, separators=(",", ":")).encode()
    line.settings = replace(PACED, max_request_bytes=len(body))  # accepted at publish, with no byte to spare
    with drainer_held(line):
        assert line.deliver(body, "m-big", request_id="big").result == SubmitResult.WAITING

    restart(line)  # the hand-over re-publishes it as a re-queue of attempt 1: bigger than it was

    assert list(line.jobs_by_request()) == ["big"] and not line.alerts
    assert line.ledger.get("big").status == RequestStatus.SUBMITTED


class GpuQuotaJobService(RateLimitedJobService):
    """Refuses every create that asks for accelerators: the project's GPU quota is spent."""

    def create_custom_job(self, *, parent: str, custom_job: CustomJob, retry: Any, timeout: float) -> CustomJob:
        if any(pool.machine_spec.accelerator_count for pool in custom_job.job_spec.worker_pool_specs):
            with self._lock:
                self.creates += 1
                self.refused += 1
            raise api.TooManyRequests(
                "The following quota metrics exceed quota limits: "
                "aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"
            )
        return super().create_custom_job(parent=parent, custom_job=custom_job, retry=retry, timeout=timeout)


def cpu_envelope(request_id: str) -> bytes:
    job = json.loads(load_event("requests/bare_docs.json"))
    job["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] = {"machineType": "a2-highgpu-1g"}  # no GPU asked for
    return json.dumps({"request_id": request_id, "custom_job": job}).encode()


def test_heads_refused_for_a_gpu_quota_leave_the_line_to_back_off_and_say_so_once(
    line: Line, monkeypatch: pytest.MonkeyPatch
) -> None:
    line.vertex = GpuQuotaJobService()
    line.settings = replace(PACED, max_claim_republishes=0)  # claim_stalled at the first re-publish
    gpus, cpus = burst(8, prefix="gpu"), [(f"cpu-{i}", cpu_envelope(f"cpu-{i}")) for i in range(4)]
    with drainer_held(line):
        for request_id, body in [*gpus, *cpus]:
            line.deliver(body, f"m-{request_id}")
    slots = iter(range(20))  # one drainer run of 20 slots: fewer than five tries of each GPU head
    monkeypatch.setattr(Pacer, "wait_for_slot", lambda self, location, deadline: next(slots, None) is not None)

    restart(line)

    assert sorted(line.jobs_by_request()) == [rid for rid, _ in cpus]  # not held back behind the GPUs
    assert line.vertex.refused == 8  # one try each, then they left the line
    assert not line.pacer.waiting(LOCATION)
    for request_id, _ in gpus:
        record = line.ledger.get(request_id)
        assert record.status == RequestStatus.CLAIMED and record.latest.last_create_error["code"] == 429
    # Reconcile settles them like any claim Vertex turns away for now: re-published with backoff,
    # with one claim_stalled alert each, not reported waiting for the quota forever.
    monkeypatch.undo()
    summary = run_reconcile(line.ports, Logger(stream=line.log_stream))
    assert summary.outcomes["claim_republished"] == 8 and not summary.outcomes["waiting_for_quota"]
    again = run_reconcile(line.ports, Logger(stream=line.log_stream))
    assert not again.outcomes["claim_republished"]  # its backoff
    stalled = [a for a in line.alerts if a.kind == "claim_stalled"]
    assert sorted(a.request_id for a in stalled) == [rid for rid, _ in gpus]
    assert all("nvidia_a100_gpus" in a.message for a in stalled)


def test_a_drainer_that_died_between_opening_the_burst_and_its_alert_leaves_the_alert_to_the_next_run(
    line: Line, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shared.deciding import outbox

    with drainer_held(line):
        for request_id, body in burst(6):
            line.deliver(body, f"m-{request_id}")
    crash_once(monkeypatch, outbox, "publish_alert")  # burst.json is created, then the drainer dies
    with pytest.raises(Crash):
        restart(line)
    assert burst_document(line) is not None and not line.alerts
    forget_the_drainer(line)

    run_reconcile(line.ports, Logger(stream=line.log_stream))  # the next run, on the restarted line
    line.pump(seconds=5)

    assert [a.details["waiting"] for a in line.alerts] == [6]
    assert len(line.jobs_by_request()) == 6 and burst_document(line) is None


def test_reconcile_empties_a_line_in_a_region_where_no_request_is_active_any_more(line: Line) -> None:
    with drainer_held(line, "europe-west4"):
        line.deliver(envelope("away", location="europe-west4"), "m-away")
    assert line.ledger.get("away").latest.location == "europe-west4"
    # It failed while it waited, its alert sent, its entry still in line: no active request names
    # that region any more.
    line.ledger.update(
        "away", lambda current: fail_attempt(current, n=1, error={}, now=datetime.now(UTC), reason="gone")
    )
    line.ledger.update("away", lambda current: replace(current, pending_alerts=[]))
    assert line.ledger.get("away").is_terminal and line.pacer.waiting("europe-west4")

    run_reconcile(line.ports, Logger(stream=line.log_stream))

    assert not line.pacer.waiting("europe-west4")


def test_a_line_left_when_pacing_is_turned_off_is_created_and_emptied_by_reconcile(line: Line) -> None:
    requests = burst(3)
    with drainer_held(line):
        for request_id, body in requests:
            line.deliver(body, f"m-{request_id}")
    line.settings = replace(PACED, vertex_creates_per_minute=0)  # redeployed without pacing: no drainer

    summary = run_reconcile(line.ports, Logger(stream=line.log_stream))
    for message in line.publisher.on("job-requests"):  # the re-published attempts are created at once
        line.deliver(json.dumps(message.data).encode(), "republished", **message.attributes)
    run_reconcile(line.ports, Logger(stream=line.log_stream))  # their settled entries leave the line

    assert not summary.outcomes["waiting_for_quota"]
    assert sorted(line.jobs_by_request()) == [rid for rid, _ in requests]
    assert not line.pacer.waiting(LOCATION)


def test_heads_whose_create_outcome_is_unknown_are_passed_at_once_not_waited_for(
    line: Line, monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown, others = burst(8, prefix="unknown"), burst(4, prefix="other")
    with drainer_held(line):
        for request_id, body in [*unknown, *others]:
            line.deliver(body, f"m-{request_id}")
    # Each of the first eight creates fails with a 500: maybe created, found nowhere yet, so its
    # claim is kept for a lease; retrying it every slot cannot help.
    line.vertex.create_faults.extend(api.InternalServerError("internal error") for _ in unknown)
    slots = iter(range(20))  # one drainer run of 20 slots: fewer than five tries of each
    monkeypatch.setattr(Pacer, "wait_for_slot", lambda self, location, deadline: next(slots, None) is not None)

    assert hand_over(line.ports, line.pacer, LOCATION, Logger(stream=line.log_stream))
    [message] = line.publisher.on("job-requests")
    line.deliver(json.dumps(message.data).encode(), "handover", **message.attributes)  # that one run

    assert sorted(line.jobs_by_request()) == [rid for rid, _ in others]  # not held back behind them
    assert [entry.request_id for entry in line.pacer.waiting(LOCATION)] == [rid for rid, _ in unknown]


def test_a_drainer_whose_listing_fails_mid_run_still_hands_the_line_over(
    line: Line, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = burst(4)
    with drainer_held(line):
        for request_id, body in requests:
            line.deliver(body, f"m-{request_id}")
    real_waiting = Pacer.waiting
    listings: list[int] = []

    def waiting_failing_once_mid_run(self: Pacer, location: str) -> list[Waiting]:
        listings.append(1)
        if len(listings) == 3:  # the hand-over's listing, then the run's first, then this one
            raise api.ServiceUnavailable("the listing failed")
        return real_waiting(self, location)

    monkeypatch.setattr(Pacer, "waiting", waiting_failing_once_mid_run)
    restart(line)

    assert sorted(line.jobs_by_request()) == [rid for rid, _ in requests] and not line.raised
    assert not line.pacer.waiting(LOCATION)


def test_a_head_turned_away_for_a_gpu_quota_stays_out_of_line_until_reconcile_re_publishes_it(
    line: Line, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the simulator (seed 123): a hand-over already published for a head that the next
    run turned away put it back in line, two such heads turning each other away every run."""
    line.vertex = GpuQuotaJobService()
    with drainer_held(line):
        for request_id in ("gpu-a", "gpu-b"):
            line.deliver(envelope(request_id), f"m-{request_id}")
    slots = [1]  # the first run has one slot: it turns gpu-a away and hands the line to gpu-b
    monkeypatch.setattr(Pacer, "wait_for_slot", lambda self, location, deadline: slots.pop() if slots else False)
    assert hand_over(line.ports, line.pacer, LOCATION, Logger(stream=line.log_stream)) == "gpu-a"  # in flight
    drain_line(LOCATION, Logger(stream=line.log_stream), line.ports, SUBMIT_STEPS)
    assert line.vertex.refused == 1 and [e.request_id for e in line.pacer.waiting(LOCATION)] == ["gpu-b"]
    slots.extend([True] * 10)

    line.pump(5)  # gpu-a's hand-over, then gpu-b's

    assert line.vertex.refused == 2  # one try each: neither came back in line, nor was sent again
    assert not line.pacer.waiting(LOCATION) and not line.raised
    assert len(line.events("quota_resource_refused")) == 2
    # They wait for reconcile, which re-publishes them with backoff: then each is tried again.
    summary = run_reconcile(line.ports, Logger(stream=line.log_stream))
    assert summary.outcomes["claim_republished"] == 2
    line.pump(5)
    assert line.vertex.refused == 4
    assert all(line.ledger.get(rid).status == RequestStatus.CLAIMED for rid in ("gpu-a", "gpu-b"))


def cancelled_after_a_dead_drainer_created_it(line: Line, monkeypatch: pytest.MonkeyPatch) -> CustomJob:
    """Seed 828 (at 60101f2): the drainer created the head's job and died before recording it; the
    operator cancelled the request, and the dead drainer's claim lease ran out. The head stayed in
    line (not settled: its create was sent), every hand-over to it ended "cancelled; nothing
    created" and reconcile left it to the line: its job ran 6.5 h unrecorded, without a word."""
    with drainer_held(line):
        for request_id, body in burst(3):
            line.deliver(body, f"m-{request_id}")
    crash_once(monkeypatch, submit_module, "_record_created")  # the create landed, the instance died
    with pytest.raises(Crash):
        restart(line)
    [job] = line.jobs_by_request()["burst-000"]
    forget_the_drainer(line)
    line.ledger.swap("burst-000", partial(cancel_request, by="ana", reason=None, now=datetime.now(UTC)))

    def lease_ran_out(current: Any) -> Any:
        current.attempt(1).claimed_at = iso(datetime.now(UTC) - timedelta(seconds=PACED.claim_lease_seconds))
        return current

    line.ledger.update("burst-000", lease_ran_out)
    return job


def test_reconcile_looks_up_a_cancelled_head_whose_create_a_dead_drainer_sent_and_cancels_its_job(
    line: Line, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = cancelled_after_a_dead_drainer_created_it(line, monkeypatch)

    summary = run_reconcile(line.ports, Logger(stream=line.log_stream))  # its entry still in line

    assert summary.outcomes["claim_adopted"] == 1
    assert line.vertex.cancelled == [job.name]  # nothing of a cancelled request runs
    line.pump(seconds=5)
    assert sorted(line.jobs_by_request()) == ["burst-000", "burst-001", "burst-002"]
    assert not line.pacer.waiting(LOCATION)


def test_the_line_passes_a_cancelled_head_on_and_reconcile_then_cancels_its_job(
    line: Line, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = cancelled_after_a_dead_drainer_created_it(line, monkeypatch)

    restart(line)  # the hand-over goes to the first attempt that needs a create

    assert sorted(line.jobs_by_request()) == ["burst-000", "burst-001", "burst-002"]
    assert not line.pacer.waiting(LOCATION)
    run_reconcile(line.ports, Logger(stream=line.log_stream))
    assert line.vertex.cancelled == [job.name]


@pytest.mark.parametrize("entry_left", [False, True], ids=["in-line", "fell-out-of-line"])
def test_a_head_whose_create_a_dead_drainer_sent_is_found_by_its_lookup_never_created_twice(
    line: Line, monkeypatch: pytest.MonkeyPatch, entry_left: bool
) -> None:
    # The drainer's create is noted as sent before it goes (`create_sent_at`), so neither the next
    # drainer's takeover nor reconcile (main's re-publish without lookup when `never_sent`) skips
    # the lookup that finds it.
    drainer_died_after_creating_the_head(line, monkeypatch)
    assert line.ledger.get("burst-000").attempt(1).create_sent_at
    if entry_left:
        [head] = [entry for entry in line.pacer.waiting(LOCATION) if entry.request_id == "burst-000"]
        line.pacer.remove(head)

    def lease_ran_out(current: Any) -> Any:
        current.attempt(1).claimed_at = iso(datetime.now(UTC) - timedelta(seconds=PACED.claim_lease_seconds))
        return current

    line.ledger.update("burst-000", lease_ran_out)
    for _ in range(3):  # a hand-over that finds its own job carries nothing on: reconcile restarts the line
        run_reconcile(line.ports, Logger(stream=line.log_stream))
        with contextlib.suppress(AssertionError):
            line.pump(seconds=1)

    assert {rid: len(jobs) for rid, jobs in line.jobs_by_request().items()} == {
        "burst-000": 1,
        "burst-001": 1,
        "burst-002": 1,
    }
    assert line.ledger.get("burst-000").attempt(1).job
    assert not line.pacer.waiting(LOCATION)


def test_a_head_whose_lookup_vertex_refuses_for_good_leaves_the_line_to_the_others_and_says_so_once(
    line: Line, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 1617 (at 721e94c): the drainer created the head's job and died before recording it,
    then Vertex refused `customJobs.list` in the region for good. Every hand-over went to the head,
    whose take-over met the refusal and was redelivered until it dead-lettered: the 20 attempts
    behind it waited for a month, with no create and no word after the burst's `quota_limited`."""
    drainer_died_after_creating_the_head(line, monkeypatch)

    def lease_ran_out(current: Any) -> Any:
        current.attempt(1).claimed_at = iso(datetime.now(UTC) - timedelta(seconds=PACED.claim_lease_seconds))
        return current

    line.ledger.update("burst-000", lease_ran_out)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise api.PermissionDenied("403 Permission 'aiplatform.customJobs.list' denied")

    monkeypatch.setattr(line.vertex, "list_custom_jobs", refused)
    for _ in range(3):  # reconcile restarts the line each pass
        run_reconcile(line.ports, Logger(stream=line.log_stream))
        with contextlib.suppress(AssertionError):
            line.pump(seconds=1)

    assert {rid: len(jobs) for rid, jobs in line.jobs_by_request().items()} == {
        "burst-000": 1,  # its job may exist: never created blind, looked up again once Vertex lets it
        "burst-001": 1,
        "burst-002": 1,
    }
    assert not line.pacer.waiting(LOCATION)
    assert [(a.kind, a.request_id) for a in line.alerts if a.kind == "lookup_failed"] == [
        ("lookup_failed", "burst-000")
    ]


def test_a_head_that_died_before_noting_its_wait_and_cannot_be_looked_up_leaves_the_line_to_the_others(
    line: Line, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 1874 (at 1c5db56): the head's first delivery wrote its entry and died before its
    record noted the wait, so its record never said it waited; Vertex then refused
    `customJobs.list` in the region for good. Every take-over of the head looked its job up (no
    noted wait: a create may have gone) and met the refusal, every hand-over went to it, and the
    attempt behind it waited 13 h with no alert naming it (reconcile leaves a waiting attempt to
    the line)."""
    with drainer_held(line):
        crash_once(monkeypatch, paced_submit_module, "hold_for_quota")
        with pytest.raises(Crash):
            line.deliver(envelope("burst-000"), "m-burst-000")
        for request_id, body in burst(3)[1:]:
            line.deliver(body, f"m-{request_id}")
    assert line.ledger.get("burst-000").attempt(1).waiting_since is None
    assert [entry.request_id for entry in line.pacer.waiting(LOCATION)] == ["burst-000", "burst-001", "burst-002"]

    def lease_ran_out(current: Any) -> Any:
        current.attempt(1).claimed_at = iso(datetime.now(UTC) - timedelta(seconds=PACED.claim_lease_seconds))
        return current

    line.ledger.update("burst-000", lease_ran_out)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise api.PermissionDenied("403 Permission 'aiplatform.customJobs.list' denied")

    monkeypatch.setattr(line.vertex, "list_custom_jobs", refused)
    for _ in range(3):  # reconcile restarts the line each pass
        run_reconcile(line.ports, Logger(stream=line.log_stream))
        with contextlib.suppress(AssertionError):
            line.pump(seconds=1)

    assert {rid: len(jobs) for rid, jobs in line.jobs_by_request().items()} == {"burst-001": 1, "burst-002": 1}
    assert not line.pacer.waiting(LOCATION)
    assert [(a.kind, a.request_id) for a in line.alerts if a.kind == "lookup_failed"] == [
        ("lookup_failed", "burst-000")
    ]
