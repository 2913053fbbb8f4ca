"""submit_request end to end against a real fake-gcs-server ledger and an in-memory Vertex JobService
that can fail the ways the real one does (refusals, lost responses, a list that lags a create)."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import io
import json
import threading
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions as api
from google.cloud.aiplatform_v1 import CustomJob

from shared.alerts import Alert, AlertKind
from shared.clock import iso
from shared.delivery import Message, handle_delivery
from shared.errors import ConfigurationError, TransientError
from shared.fleet import store
from shared.fleet.observations import FleetFact, Kind, MachineClass
from shared.found_jobs import sweep_strays
from shared.jobs import ENV_KIT_KEY, LABEL_ATTEMPT, LABEL_DEPLOYMENT, LABEL_REQUEST_ID
from shared.ledger.cancelling import cancel_request
from shared.ledger.claims import ClaimInProgress
from shared.ledger.records import Attempt, RequestRecord, Requeue
from shared.ledger.run_lock import ledger_bucket
from shared.ledger.states import RequestStatus
from shared.ledger.store import INDEX_GRACE_SECONDS, LedgerStore
from shared.log import Logger
from shared.observe import EventOutcome, handle_job_event
from shared.redeliveries import MAX_CONFLICT_ALERTS
from shared.requests.envelope import ORIGINAL_PUBLISH_TIME_ATTRIBUTE, REQUEUE_ATTRIBUTES, requeue_message
from shared.requests.request_ids import derived_request_id
from shared.settings import Settings
from shared.submit import SubmitBlocked, SubmitOutcome, SubmitResult, submit_request
from shared.wiring import Ports
from tests.conftest import load_event
from tests.support.decisions import FakePublisher, log_entry
from tests.support.vertex import FakeVertex as FakeJobService

LEASE = 30.0
LIST_LAG = 10.0  # shorter than the lease: a takeover after the lease need not wait more
CREATE_TIMEOUT = 10.0  # a create may be sent up to LEASE - 1.5 * CREATE_TIMEOUT = 15 s after claim
SETTINGS = Settings.from_env(
    {
        "GOOGLE_CLOUD_PROJECT": "proj",
        "SPOTJOBS_LOCATION": "us-central1",
        "SPOTJOBS_CHECKPOINT_BUCKET": "ckpt",
        "SPOTJOBS_CHECKPOINT_PREFIX": "requests",
        "SPOTJOBS_CLAIM_LEASE_SECONDS": str(LEASE),
        "SPOTJOBS_CREATE_TIMEOUT_SECONDS": str(CREATE_TIMEOUT),
        "SPOTJOBS_LIST_LAG_SECONDS": str(LIST_LAG),
        "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": "us-docker.pkg.dev/my-project/",
        "SPOTJOBS_TRAINING_SERVICE_ACCOUNT": "trainer@my-project.iam.gserviceaccount.com",
        "SPOTJOBS_ALLOWED_SERVICE_ACCOUNTS": "trainer@my-project.iam.gserviceaccount.com",
        # The fallback tests ask for STANDARD after Spot; a deployment allows none by default.
        "SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD",
        # Pacing off: these tests are about one request's claim protocol, against a fake Vertex
        # without quotas; tests/functional/test_pacing.py paces.
        "SPOTJOBS_VERTEX_CREATES_PER_MINUTE": "0",
    }
)


@dataclass
class Harness:
    ledger: LedgerStore
    vertex: FakeJobService = field(default_factory=FakeJobService)
    publisher: FakePublisher = field(default_factory=FakePublisher)
    log_stream: io.StringIO = field(default_factory=io.StringIO)
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    settings: Settings = SETTINGS
    locations_used: list[str] = field(default_factory=list)
    client_build_seconds: float = 0.0  # the clock advances this much whenever a client is built

    @property
    def ports(self) -> Ports:
        def job_service(location: str) -> FakeJobService:
            self.locations_used.append(location)
            self.now += timedelta(seconds=self.client_build_seconds)
            return self.vertex

        return Ports(
            settings=self.settings,
            ledger=self.ledger,
            publisher=lambda: self.publisher,  # type: ignore[arg-type, return-value]
            job_service=job_service,  # type: ignore[arg-type]
            clock=lambda: self.now,
            topics={self.settings.ops_alerts_topic},  # what submit_job may publish to
        )

    @property
    def alerts(self) -> list[Alert]:
        return [Alert(**message.data) for message in self.publisher.on("ops-alerts")]

    def deliver(self, data: bytes, message_id: str = "m-1", **attributes: str) -> SubmitOutcome:
        message = Message(data, message_id, attributes, publish_time=self.now)
        return submit_request(message, self.log, self.ports)

    def observed(self, request_id: str, n: int) -> bool:
        """Whether the decision logic has looked at attempt n's job (it records when the job's
        state was first seen; recording a job alone does not)."""
        return self.ledger.get(request_id).attempt(n).state_changed_at is not None

    @property
    def log(self) -> Logger:
        return Logger(stream=self.log_stream).bind(event_id="e-1")

    def log_lines(self, event: str | None = None) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in self.log_stream.getvalue().splitlines()]
        return [line for line in lines if event is None or line.get("event") == event]

    def jobs_for(self, request_id: str) -> list[CustomJob]:
        return [j for j in self.vertex.jobs.values() if j.labels.get(LABEL_REQUEST_ID) == request_id]


@pytest.fixture
def harness(gcs_bucket: Any) -> Harness:
    return Harness(LedgerStore(gcs_bucket))


def envelope(request_id: str = "r1", **fields: Any) -> bytes:
    job = json.loads(load_event("requests/bare_docs.json"))
    return json.dumps({"request_id": request_id, "custom_job": job, **fields}).encode()


DOCS_BODY = load_event("requests/bare_docs.json")


def docs_request_id(harness: Harness) -> str:
    return derived_request_id(json.loads(DOCS_BODY), harness.now)


def test_the_docs_body_becomes_one_spot_job_recorded_in_the_ledger(harness: Harness) -> None:
    outcome = harness.deliver(DOCS_BODY, message_id="4242")
    request_id = docs_request_id(harness)

    assert outcome.result == SubmitResult.CREATED and outcome.request_id == request_id and outcome.attempt == 1
    [job] = harness.vertex.jobs.values()
    assert job.name == outcome.job
    assert job.job_spec.scheduling.strategy == 4  # SPOT
    assert dict(job.labels) == {
        LABEL_REQUEST_ID: request_id,
        LABEL_ATTEMPT: "1",
        LABEL_DEPLOYMENT: SETTINGS.deployment_label,
    }
    assert job.job_spec.base_output_directory.output_uri_prefix == f"gs://ckpt/requests/{request_id}/"
    assert job.job_spec.service_account == "trainer@my-project.iam.gserviceaccount.com"
    submitted = json.loads(DOCS_BODY)["jobSpec"]["workerPoolSpecs"][0]
    assert job.job_spec.worker_pool_specs[0].machine_spec.machine_type == submitted["machineSpec"]["machineType"]
    assert job.job_spec.worker_pool_specs[0].container_spec.image_uri == submitted["containerSpec"]["imageUri"]
    assert harness.locations_used == ["us-central1"]

    record = harness.ledger.get(request_id)
    assert record.status == RequestStatus.SUBMITTED and record.output_dir == f"gs://ckpt/requests/{request_id}/"
    [attempt] = record.attempts
    assert (attempt.job, attempt.state, attempt.strategy, attempt.location) == (
        job.name,
        "JOB_STATE_QUEUED",
        "SPOT",
        "us-central1",
    )
    assert attempt.created_at is not None
    # The ledger keeps the user's job as submitted (REST JSON), not ours.
    assert record.request["custom_job"]["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] == submitted["machineSpec"]
    assert "labels" not in record.request["custom_job"]
    assert "baseOutputDirectory" not in record.request["custom_job"]["jobSpec"]
    index = harness.ledger.find_job(job.name.rsplit("/", 1)[-1])
    assert (index.request_id, index.attempt, index.job) == (request_id, 1, job.name)

    [line] = harness.log_lines("job_created")
    assert line["request_id"] == request_id and line["attempt"] == 1 and line["job"] == job.name
    assert line["event_id"] == "e-1" and line["severity"] == "INFO"
    assert not harness.observed(request_id, 1)  # a job created here has all its events to come


def test_the_configured_commit_markers_reach_every_container_and_the_kit_reads_them(
    harness: Harness, tmp_path: Any
) -> None:
    from spotjobs_kit import Run

    markers = ("done.txt", "COMMITTED")
    harness.settings = Settings.from_env({**SETTINGS.as_env(), "SPOTJOBS_COMMIT_MARKERS": ",".join(markers)})
    two_pools = json.loads(load_event("requests/bare_docs.json"))
    two_pools["jobSpec"]["workerPoolSpecs"].append(dict(two_pools["jobSpec"]["workerPoolSpecs"][0], replicaCount=2))
    harness.deliver(json.dumps({"request_id": "r1", "custom_job": two_pools}).encode())

    [job] = harness.vertex.jobs.values()
    environments = [{e.name: e.value for e in pool.container_spec.env} for pool in job.job_spec.worker_pool_specs]
    assert [env["SPOTJOBS_COMMIT_MARKERS"] for env in environments] == ["done.txt,COMMITTED"] * 2
    # The kit in the container, started with that environment, judges with the pruner's list.
    with Run.start(str(tmp_path), environ=environments[0], handle_sigterm=False, announce=False) as run:
        assert run.markers == harness.settings.commit_markers == markers


def test_every_create_of_an_attempt_gives_its_containers_the_attempts_own_kit_key(
    harness: Harness, tmp_path: Any
) -> None:
    from spotjobs_kit import Run
    from spotjobs_kit.lines import is_signed_with, parse_kit_line

    sent: list[list[dict[str, str]]] = []
    create = harness.vertex.create_custom_job

    def recording_create(*, custom_job: Any, **kwargs: Any) -> Any:
        sent.append(
            [{e.name: e.value for e in pool.container_spec.env} for pool in custom_job.job_spec.worker_pool_specs]
        )
        return create(custom_job=custom_job, **kwargs)

    harness.vertex.create_custom_job = recording_create  # type: ignore[method-assign]
    harness.vertex.create_faults.append(api.TooManyRequests("429 Too Many Requests"))  # refused: sent again
    two_pools = json.loads(load_event("requests/bare_docs.json"))
    two_pools["jobSpec"]["workerPoolSpecs"].append(dict(two_pools["jobSpec"]["workerPoolSpecs"][0], replicaCount=2))
    body = json.dumps({"request_id": "r1", "custom_job": two_pools}).encode()
    with pytest.raises(api.TooManyRequests):
        harness.deliver(body)
    harness.deliver(body)

    key = harness.ledger.get("r1").attempt(1).kit_key
    assert key and len(bytes.fromhex(key)) == 32
    assert [env["SPOTJOBS_KIT_KEY"] for create in sent for env in create] == [key] * 4  # 2 creates, 2 pools
    assert key not in harness.log_stream.getvalue()  # nor in what is shown of the record:
    assert key not in json.dumps(harness.ledger.get("r1").to_json())
    # The kit in the container signs with it.
    stream = io.StringIO()
    with Run.start(str(tmp_path), environ=sent[-1][0], handle_sigterm=False, stream=stream):
        pass
    line = parse_kit_line(stream.getvalue().splitlines()[0])
    assert line is not None and line.request_id == "r1" and is_signed_with(line, key)


def test_an_earlier_copy_of_a_republished_claim_creates_nothing_and_its_republish_creates(harness: Harness) -> None:
    # Seed 1733: with the GPU quota full, reconcile re-published each stalled claim hourly while
    # its earlier copies still queued; every copy took the claim over and sent one more create,
    # so the copies' creates filled the pace and the backlog grew until new requests starved.
    first_published = harness.now
    harness.vertex.create_faults.append(api.TooManyRequests("429 quota: custom_model_training_nvidia_a100_gpus"))
    # acknowledged, its claim released for reconcile's re-publish (seed 1887)
    assert harness.deliver(envelope()).result == SubmitResult.WAITING
    harness.now += timedelta(hours=1)

    def republished(current: RequestRecord) -> RequestRecord:  # reconcile's count before its publish
        attempt = current.attempt(1)
        attempt.republished, attempt.republished_at = attempt.republished + 1, iso(harness.now)
        return current

    harness.ledger.update("r1", republished)
    released = harness.ledger.get("r1").attempt(1).claimed_at
    body, attributes = requeue_message(harness.ledger.get("r1").request, 1, "us-central1")

    earlier_copy = Message(envelope(), "m-1", {}, publish_time=first_published)
    assert submit_request(earlier_copy, harness.log, harness.ports).result == SubmitResult.DUPLICATE
    assert harness.jobs_for("r1") == [] and harness.ledger.get("r1").attempt(1).claimed_at == released
    [said] = harness.log_lines("superseded")
    assert said["severity"] == "INFO" and "re-published since" in said["message"]

    harness.now += timedelta(seconds=1)
    republish = Message(json.dumps(body).encode(), "m-2", attributes, publish_time=harness.now)
    assert submit_request(republish, harness.log, harness.ports).result == SubmitResult.CREATED
    assert len(harness.jobs_for("r1")) == 1


def test_a_redelivery_and_a_second_publish_create_nothing(harness: Harness) -> None:
    first = harness.deliver(envelope(), message_id="m-1")
    again = harness.deliver(envelope(), message_id="m-1")
    other_message = harness.deliver(envelope(max_attempts=2), message_id="m-2")

    assert first.result == SubmitResult.CREATED
    assert again.result == other_message.result == SubmitResult.DUPLICATE
    assert again.job == other_message.job == first.job
    assert harness.vertex.creates == 1 and len(harness.jobs_for("r1")) == 1
    duplicates = harness.log_lines("duplicate")
    assert [line["same_body"] for line in duplicates] == [True, False]
    # The same id with another body: the publisher is told, once, naming both bodies.
    harness.deliver(envelope(max_attempts=2), message_id="m-3")
    [alert] = harness.alerts
    assert alert.kind == "request_id_conflict" and alert.request_id == "r1"
    kept, refused = alert.details["kept_digest"], alert.details["refused_digest"]
    assert kept != refused and kept in alert.message and refused in alert.message
    assert harness.ledger.get("r1").request["max_attempts"] != 2  # the first body is kept


def test_bodies_published_under_a_taken_id_grow_its_record_only_so_far(harness: Harness) -> None:
    """Anyone may publish under any free-or-taken id: each distinct body is told once, but a
    publisher sending thousands cannot grow another request's ledger document without end
    (issue 32: bounded work per message, nothing of another request's record moved)."""
    harness.deliver(envelope(), message_id="m-0")
    for n in range(MAX_CONFLICT_ALERTS + 3):
        harness.deliver(envelope(priority=n + 1), message_id=f"m-{n + 1}")

    assert [a.kind for a in harness.alerts] == ["request_id_conflict"] * MAX_CONFLICT_ALERTS
    record = harness.ledger.get("r1")
    assert record.count_marks("request_id_conflict:") == MAX_CONFLICT_ALERTS
    assert len(harness.log_lines("request_id_conflict_not_alerted")) == 3


def test_another_body_under_a_cancelled_requests_id_is_told_as_under_any_taken_id(harness: Harness) -> None:
    # Simulator seed 257: a cancelled record answered every later message with "cancelled,
    # nothing created" at INFO, so a second body published under its id was dropped unheard.
    harness.deliver(envelope(), message_id="m-1")
    harness.ledger.swap("r1", lambda current: cancel_request(current, by="ana", reason=None, now=harness.now))
    harness.deliver(envelope(), message_id="m-2")  # the same body again: nothing to tell
    assert [a.kind for a in harness.alerts] == []

    for _ in range(2):  # redelivered while the job's cancel waits for on_job_event or reconcile
        with contextlib.suppress(TransientError):
            harness.deliver(envelope(max_attempts=2), message_id="m-3")

    [alert] = harness.alerts
    assert alert.kind == "request_id_conflict" and alert.request_id == "r1"
    assert harness.vertex.creates == 1
    assert harness.ledger.get("r1").request.get("max_attempts") != 2  # the first body is kept


def test_a_training_class_request_runs_as_its_class_account_and_no_other_may(gcs_bucket: Any) -> None:
    """Issue 32: a class's account may write only its class's folders, so its requests run as it
    whatever they name, and no request outside the class may borrow it."""
    vision = "vision-trainer@my-project.iam.gserviceaccount.com"
    settings = dataclasses.replace(SETTINGS, training_classes=(f"vision-={vision}",))
    harness = Harness(LedgerStore(gcs_bucket), settings=settings)

    assert harness.deliver(envelope("vision-resnet")).result == SubmitResult.CREATED
    assert harness.deliver(envelope("nlp-bert")).result == SubmitResult.CREATED
    [in_class] = harness.jobs_for("vision-resnet")
    [outside] = harness.jobs_for("nlp-bert")
    assert (in_class.job_spec.service_account, outside.job_spec.service_account) == (
        vision,
        SETTINGS.training_service_account,
    )

    borrowed = json.loads(envelope("nlp-gpt"))
    borrowed["custom_job"]["jobSpec"]["serviceAccount"] = vision
    escaped = json.loads(envelope("vision-vit"))
    escaped["custom_job"]["jobSpec"]["serviceAccount"] = SETTINGS.training_service_account
    outcomes = [harness.deliver(json.dumps(body).encode()) for body in (borrowed, escaped)]
    assert [(o.result, o.request_id) for o in outcomes] == [
        (SubmitResult.INVALID, "nlp-gpt"),
        (SubmitResult.INVALID, "vision-vit"),
    ]
    assert harness.jobs_for("nlp-gpt") == harness.jobs_for("vision-vit") == []


def test_concurrent_deliveries_of_one_request_create_exactly_one_job(harness: Harness) -> None:
    outcomes: list[SubmitOutcome | Exception] = []
    lock = threading.Lock()

    def deliver(message_id: str) -> None:
        try:
            result: SubmitOutcome | Exception = harness.deliver(envelope(), message_id=message_id)
        except ClaimInProgress as exc:
            result = exc
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=deliver, args=(f"m-{i}",)) for i in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    decisions = sorted(o.result if isinstance(o, SubmitOutcome) else "retry" for o in outcomes)
    assert decisions.count(SubmitResult.CREATED) == 1
    assert set(decisions) <= {SubmitResult.CREATED, SubmitResult.DUPLICATE, "retry"}
    # Those told to retry find the job on redelivery.
    for _ in range(decisions.count("retry")):
        assert harness.deliver(envelope(), message_id="m-again").result == SubmitResult.DUPLICATE
    assert harness.vertex.creates == 1 and len(harness.jobs_for("r1")) == 1


def _stale_claim(harness: Harness, request_id: str, age_seconds: float) -> None:
    claimed_at = (
        (harness.now - timedelta(seconds=age_seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )
    from shared.requests.envelope import canonical_envelope, read_request

    request, _ = read_request(envelope(request_id), attributes={}, max_bytes=10**6)
    record = RequestRecord(
        request_id,
        canonical_envelope(request, default_location="us-central1", default_max_attempts=3),
        SETTINGS.output_dir_for(request_id),
        attempts=[Attempt(1, "us-central1", "SPOT", claimed_at)],
    )
    harness.ledger.update(request_id, lambda current: record)


def test_a_crash_between_claim_and_create_is_finished_after_the_lease(harness: Harness) -> None:
    _stale_claim(harness, "r1", age_seconds=LEASE - 5)
    with pytest.raises(ClaimInProgress):
        harness.deliver(envelope())  # the crashed delivery might still be alive: wait
    assert harness.vertex.creates == 0

    harness.now += timedelta(seconds=10)
    outcome = harness.deliver(envelope())

    assert outcome.result == SubmitResult.CREATED
    assert len(harness.jobs_for("r1")) == 1
    assert harness.ledger.get("r1").attempt(1).job == outcome.job
    assert harness.log_lines("claim_taken_over")


def test_a_crash_between_create_and_record_is_settled_by_label_lookup(harness: Harness) -> None:
    _stale_claim(harness, "r1", age_seconds=LEASE + 1)
    existing = harness.vertex.create_custom_job(
        parent="projects/proj/locations/us-central1",
        custom_job=CustomJob(
            labels={
                LABEL_REQUEST_ID: "r1",
                LABEL_ATTEMPT: "1",
                LABEL_DEPLOYMENT: SETTINGS.deployment_label,
            }
        ),
        retry=None,
        timeout=1,
    )

    outcome = harness.deliver(envelope())

    assert outcome.result == SubmitResult.FOUND and outcome.job == existing.name
    assert harness.vertex.creates == 1  # only the one the crashed delivery made
    assert harness.ledger.get("r1").attempt(1).job == existing.name
    assert harness.ledger.find_job(existing.name.rsplit("/", 1)[-1]).request_id == "r1"
    # Its log events came while it was unindexed: the decision logic gets to see it once.
    assert harness.observed("r1", 1)


def test_a_takeover_whose_lookup_vertex_refuses_for_good_says_lookup_failed_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seed 1617: the list permission went missing after a create whose delivery died; reconcile
    # leaves a claim in the quota line to the line, so the take-over's look-up is all it gets.
    _stale_claim(harness, "r1", age_seconds=LEASE + 1)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise api.PermissionDenied("403 Permission 'aiplatform.customJobs.list' denied")

    monkeypatch.setattr(harness.vertex, "list_custom_jobs", refused)

    for _ in range(2):  # redelivered until it dead-letters; the line hands it over again later
        with pytest.raises(SubmitBlocked):
            harness.deliver(envelope())
        harness.now += timedelta(seconds=LEASE + 1)

    [alert] = harness.alerts
    assert (alert.kind, alert.request_id, alert.attempt) == ("lookup_failed", "r1", 1)
    assert "PermissionDenied" in alert.details["error"]
    assert harness.vertex.creates == 0  # the job may exist: never created blind
    assert harness.ledger.get("r1").attempt(1).job is None


def test_a_lost_create_response_is_looked_up_not_retried(harness: Harness) -> None:
    harness.vertex.create_faults.append("lost")

    outcome = harness.deliver(envelope())

    assert outcome.result == SubmitResult.FOUND
    assert harness.vertex.creates == 1 and len(harness.jobs_for("r1")) == 1
    assert harness.ledger.get("r1").attempt(1).job == outcome.job
    assert harness.observed("r1", 1)


def _adopted_and_died_before_counting(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> CustomJob:
    """Simulator seed 35: the create's answer is lost and its look-up lags, Vertex preempts the
    job before any delivery indexes it (the line is kept), and the redelivery that adopts the job
    dies between recording it and counting what was kept."""
    harness.vertex.create_faults.append("lost")
    harness.vertex.list_lag = 1
    with pytest.raises(ClaimInProgress):
        harness.deliver(envelope())
    [job] = harness.jobs_for("r1")
    preempted = log_entry(job.name, "The Spot VM was preempted. Restarting the job (restart 1 of 6).", insert_id="p-1")
    parked = handle_job_event(
        Message(preempted, "e-1"), harness.log, settings=harness.settings, ports=lambda: harness.ports
    )
    assert parked is EventOutcome.PARKED

    def dies(*_: Any) -> None:
        raise RuntimeError("the instance died")

    harness.now += timedelta(seconds=LEASE + 1)
    with monkeypatch.context() as crash:
        crash.setattr("shared.submit.observe_adopted", dies)
        with pytest.raises(SubmitBlocked):
            harness.deliver(envelope())
    recorded = harness.ledger.get("r1").attempt(1)
    assert (recorded.job, recorded.preemptions) == (job.name, 0)  # recorded, the kept line not counted
    return job


def test_a_preemption_kept_before_the_index_is_counted_once_by_the_redelivery_after_a_crash(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next redelivery finds the job recorded: it counts the kept line, once, however often
    it comes."""
    job = _adopted_and_died_before_counting(harness, monkeypatch)

    outcomes = [harness.deliver(envelope()).result for _ in range(2)]

    assert outcomes == [SubmitResult.DUPLICATE] * 2
    assert harness.ledger.get("r1").attempt(1).preemptions == 1
    assert [line["preemptions"] for line in harness.log_lines("preemption")] == [1]
    assert harness.ledger.parked_preemptions(job.name.rsplit("/", 1)[-1]) == {}


def test_a_kept_line_of_a_job_vertex_no_longer_has_leaves_the_redelivery_settled(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job is gone (deleted at Vertex) when the redelivery would count the kept line: no read
    of it will ever answer, so the duplicate is acknowledged with a warning, not redelivered until
    it dead-letters."""
    job = _adopted_and_died_before_counting(harness, monkeypatch)
    harness.vertex.forget(job.name)

    assert harness.deliver(envelope()).result == SubmitResult.DUPLICATE

    [unread] = harness.log_lines("kept_preemptions_unread")
    assert unread["job"] == job.name and "NotFound" in unread["error"]
    assert harness.ledger.get("r1").attempt(1).preemptions == 0


def test_a_lost_create_response_finds_its_own_job_not_one_of_the_requests_deleted_record(harness: Harness) -> None:
    """A job of the id's earlier record (a person deleted it, the stray sweep cancelled the job)
    has the same labels; the look-up after a lost answer takes the job created after this
    record, never the older one (simulator seed 1771, on reconcile's side)."""
    labels = {LABEL_REQUEST_ID: "r1", LABEL_ATTEMPT: "1", LABEL_DEPLOYMENT: SETTINGS.deployment_label}
    earlier_life = harness.vertex.create_custom_job(
        parent="projects/proj/locations/us-central1", custom_job=CustomJob(labels=labels), retry=None, timeout=1
    ).name
    harness.vertex.jobs[earlier_life].create_time = harness.now - timedelta(hours=2)
    harness.vertex.set_state(earlier_life, 7)
    harness.vertex.create_faults.append("lost")

    outcome = harness.deliver(envelope())

    [own] = [job.name for job in harness.jobs_for("r1") if job.name != earlier_life]
    assert outcome.result == SubmitResult.FOUND and outcome.job == own
    assert harness.ledger.get("r1").attempt(1).job == own


def test_a_lost_response_the_list_does_not_show_yet_keeps_the_claim_until_the_lease(
    harness: Harness,
) -> None:
    harness.vertex.create_faults.append("lost")
    harness.vertex.list_lag = 1
    with pytest.raises(ClaimInProgress):
        harness.deliver(envelope())
    claimed_at = harness.ledger.get("r1").attempt(1).claimed_at
    with pytest.raises(ClaimInProgress):
        harness.deliver(envelope())  # an early redelivery must not create a second job

    harness.now += timedelta(seconds=LEASE + 1)
    outcome = harness.deliver(envelope())

    assert outcome.result == SubmitResult.FOUND
    assert harness.vertex.creates == 1 and len(harness.jobs_for("r1")) == 1
    assert harness.ledger.get("r1").attempt(1).claimed_at != claimed_at  # taken over


def test_a_takeover_waits_for_a_lagging_list_before_creating(harness: Harness) -> None:
    # The list lags the create by longer than a lease: the taker finds nothing at first.
    harness.settings = replace(SETTINGS, list_lag_seconds=60.0)
    harness.vertex.create_faults.append("lost")
    harness.vertex.list_lag = 2
    with pytest.raises(ClaimInProgress):
        harness.deliver(envelope())  # the create's outcome is unknown; the list shows nothing
    sent_at = harness.ledger.get("r1").attempt(1).create_sent_at
    assert sent_at is not None

    harness.now += timedelta(seconds=LEASE + 1)
    with pytest.raises(ClaimInProgress):
        harness.deliver(envelope())  # takes the claim over, finds nothing, waits for the list
    assert harness.log_lines("list_lag_wait") and harness.vertex.creates == 1

    harness.now += timedelta(seconds=60)
    outcome = harness.deliver(envelope())

    assert outcome.result == SubmitResult.FOUND
    assert harness.vertex.creates == 1 and len(harness.jobs_for("r1")) == 1


@pytest.mark.parametrize(
    "refusal",
    [api.TooManyRequests("429 Too Many Requests"), api.ResourceExhausted("RESOURCE_EXHAUSTED")],
    ids=["429", "grpc-429"],
)
def test_a_refused_create_is_retried_by_redelivery_without_waiting_for_the_lease(
    harness: Harness, refusal: Exception
) -> None:
    harness.vertex.create_faults.extend([refusal, refusal])
    for _ in range(2):
        with pytest.raises(type(refusal)):
            harness.deliver(envelope())
        assert harness.ledger.get("r1").status == RequestStatus.CLAIMED

    outcome = harness.deliver(envelope())  # same clock: the released claim is taken over at once

    assert outcome.result == SubmitResult.CREATED
    assert harness.vertex.creates == 3 and len(harness.jobs_for("r1")) == 1
    assert [line["event"] for line in harness.log_lines() if line["event"] in ("create_refused", "job_created")] == [
        "create_refused",
        "create_refused",
        "job_created",
    ]


def test_a_create_refused_for_a_resource_quota_is_acknowledged_for_reconciles_republish(harness: Harness) -> None:
    # Not a rate: redelivered in seconds it meets the same spent quota (simulator seed 1887).
    gpus = "The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"
    harness.vertex.create_faults.append(api.TooManyRequests(gpus))

    outcome = harness.deliver(envelope())  # returns: acknowledged, not redelivered

    assert outcome.result == SubmitResult.WAITING and harness.vertex.creates == 1
    attempt = harness.ledger.get("r1").attempt(1)
    assert attempt.job is None and attempt.last_create_error["code"] == 429
    assert harness.deliver(envelope()).result == SubmitResult.CREATED  # the claim was handed back
    assert harness.log_lines("create_refused")


def test_a_permanent_refusal_fails_the_request_with_one_alert(harness: Harness) -> None:
    harness.vertex.create_faults.append(api.InvalidArgument("List of found errors: 1.Field: job_spec..."))

    outcome = harness.deliver(envelope())
    again = harness.deliver(envelope())

    assert outcome.result == SubmitResult.FAILED and again.result == SubmitResult.DUPLICATE
    record = harness.ledger.get("r1")
    assert record.status == RequestStatus.FAILED and record.attempt(1).outcome == "failed"
    assert record.attempt(1).error["code"] == 400
    [alert] = harness.alerts
    assert (alert.kind, alert.severity, alert.request_id, alert.attempt) == (
        "submit_failed",
        "ERROR",
        "r1",
        1,
    )


class RefusingWhileAnotherAlertIsPublishedService(FakeJobService):
    """Refuses our create for good, while another delivery has just made an alert of its own
    pending in the record and is publishing it."""

    def __init__(self, ledger: LedgerStore, now: datetime) -> None:
        super().__init__()
        self.ledger, self.now = ledger, now
        self.theirs: dict[str, Any] | None = None

    def create_custom_job(self, **kwargs: Any) -> CustomJob:
        self.theirs = another_deliverys_alert(self.ledger, self.now)
        raise api.InvalidArgument("refused")


def another_deliverys_alert(ledger: LedgerStore, now: datetime) -> dict[str, Any]:
    """Another delivery's alert, made pending in r1's record a moment ago (it is publishing it)."""
    theirs = Alert.of(AlertKind.STRAY_JOB, "another delivery's", request_id="r1", attempt=1, time=iso(now)).to_json()

    def decided_elsewhere(current: RequestRecord | None) -> RequestRecord:
        current.pending_alerts.append(theirs)
        return current

    ledger.update("r1", decided_elsewhere)
    return theirs


def test_a_refusal_publishes_its_own_alert_not_one_another_delivery_is_publishing(harness: Harness) -> None:
    """Only the `submit_failed` this delivery decided goes out at once; the other stays pending for
    the delivery publishing it (or a taker once that one is presumed dead), else it went out twice
    (the simulator's seed 872 found the same in the stray sweep)."""
    harness.vertex = service = RefusingWhileAnotherAlertIsPublishedService(harness.ledger, harness.now)

    outcome = harness.deliver(envelope())

    assert outcome.result == SubmitResult.FAILED
    assert [alert.kind for alert in harness.alerts] == ["submit_failed"]
    assert harness.ledger.get("r1").pending_alerts == [service.theirs]


def test_a_conflicting_body_publishes_its_own_alert_not_one_another_delivery_is_publishing(harness: Harness) -> None:
    harness.deliver(envelope())
    theirs = another_deliverys_alert(harness.ledger, harness.now)
    with pytest.raises(TransientError, match="being published by another delivery"):  # redelivered until it is
        harness.deliver(envelope(max_attempts=2), message_id="m-2")

    assert [alert.kind for alert in harness.alerts] == ["request_id_conflict"]
    assert harness.ledger.get("r1").pending_alerts == [theirs]


def test_a_requeued_attempt_runs_where_the_requeue_said_with_the_same_output_dir(
    harness: Harness,
) -> None:
    first = harness.deliver(
        envelope(
            locations=["us-central1", "europe-west4"],
            fallback={"after_spot_attempts": 1, "strategy": "STANDARD"},
        )
    )
    requeue = Requeue(
        attempt=2,
        location="europe-west4",
        strategy="STANDARD",
        reason="stockout",
        decided_at="t",
        message_id="m",
    )

    def requeued(current: RequestRecord | None) -> RequestRecord:
        current.attempt(1).outcome = "requeued"
        current.status = RequestStatus.REQUEUED
        current.requeue = requeue
        return current

    stored = harness.ledger.update("r1", requeued)
    message = {**stored.request, "attempt": 2, "location": "europe-west4"}

    outcome = harness.deliver(
        json.dumps(message).encode(), message_id="m-requeue", request_id="r1", **REQUEUE_ATTRIBUTES
    )
    again = harness.deliver(json.dumps(message).encode(), message_id="m-requeue", request_id="r1", **REQUEUE_ATTRIBUTES)

    assert outcome.result == SubmitResult.CREATED and outcome.attempt == 2 and again.result == SubmitResult.DUPLICATE
    jobs = {j.labels[LABEL_ATTEMPT]: j for j in harness.jobs_for("r1")}
    assert set(jobs) == {"1", "2"}
    assert jobs["2"].name.startswith("projects/proj/locations/europe-west4/")
    assert jobs["2"].job_spec.scheduling.strategy == 3  # STANDARD, the fallback
    assert jobs["1"].job_spec.base_output_directory == jobs["2"].job_spec.base_output_directory
    record = harness.ledger.get("r1")
    assert record.requeue is None and record.status == RequestStatus.SUBMITTED
    assert [(a.n, a.location, a.strategy) for a in record.attempts] == [
        (1, "us-central1", "SPOT"),
        (2, "europe-west4", "STANDARD"),
    ]
    assert first.job != outcome.job
    # Both regions a create was sent to are where the stray sweep lists from now on.
    remembered = {b.name for b in harness.ledger._bucket.list_blobs(prefix="maintenance/locations/")}  # noqa: SLF001
    assert remembered == {"maintenance/locations/us-central1", "maintenance/locations/europe-west4"}


H100_JOB = {
    **json.loads(DOCS_BODY),
    "jobSpec": {
        **json.loads(DOCS_BODY)["jobSpec"],
        "workerPoolSpecs": [
            {
                **json.loads(DOCS_BODY)["jobSpec"]["workerPoolSpecs"][0],
                "machineSpec": {
                    "machineType": "a3-highgpu-8g",
                    "acceleratorType": "NVIDIA_H100_80GB",
                    "acceleratorCount": 8,
                },
            }
        ],
    },
}


def seed_fleet(harness: Harness, *facts: FleetFact) -> None:
    """What the fleet's earlier H100 attempts recorded (shared/fleet/recording.py)."""
    h100 = MachineClass("a3-highgpu-8g", "NVIDIA_H100_80GB", 8)
    store.write_facts(harness.ledger._bucket, h100, facts)  # noqa: SLF001


def spot_found_capacity(harness: Harness, location: str, key: str) -> FleetFact:
    return FleetFact(Kind.WAIT, location, harness.now - timedelta(minutes=30), 300.0, attempt_key=key)


def spot_waits(harness: Harness, location: str, key: str) -> FleetFact:
    return FleetFact(Kind.WAITING, location, harness.now - timedelta(hours=3), attempt_key=key)


def test_without_observations_the_first_attempt_runs_in_the_first_allowed_location(harness: Harness) -> None:
    harness.settings = replace(SETTINGS, region_prior=False)  # the fleet's observations alone
    harness.deliver(envelope(custom_job=H100_JOB, locations=["us-central1", "us-east4"]))
    [attempt] = harness.ledger.get("r1").attempts
    assert (attempt.location, attempt.placed) == ("us-central1", "no observations")
    assert harness.locations_used == ["us-central1"]


def test_without_observations_the_shipped_region_prior_places_the_first_attempt(harness: Harness) -> None:
    harness.deliver(envelope(custom_job=H100_JOB, locations=["us-central1", "us-east4"]))
    [attempt] = harness.ledger.get("r1").attempts
    # us-east4: the cheaper Spot, with capacity 99% of the traces' first week (shared/fleet/region_prior.json)
    assert attempt.location == "us-east4" and "the region prior" in attempt.placed
    assert harness.locations_used == ["us-east4"]


def test_the_first_attempt_is_placed_where_the_fleet_saw_spot_capacity(harness: Harness) -> None:
    # us-central1 is the first allowed, but an H100 Spot job has waited there for three hours
    # while one in us-east4 got capacity in five minutes.
    seed_fleet(harness, spot_waits(harness, "us-central1", "a"), spot_found_capacity(harness, "us-east4", "b"))
    outcome = harness.deliver(envelope(custom_job=H100_JOB, locations=["us-central1", "us-east4"]))
    again = harness.deliver(envelope(custom_job=H100_JOB, locations=["us-central1", "us-east4"]))

    assert outcome.result == SubmitResult.CREATED and again.result == SubmitResult.DUPLICATE
    [job] = harness.jobs_for("r1")
    assert job.name.startswith("projects/proj/locations/us-east4/")
    [attempt] = harness.ledger.get("r1").attempts
    assert attempt.location == "us-east4"
    assert attempt.placed.startswith("cheapest expected cost") and "$14.85/h" in attempt.placed


def test_a_requeued_attempt_of_two_worker_pools_keeps_every_pool_replica_machine_and_accelerator(
    harness: Harness,
) -> None:
    # issue 44: a re-queue, a move or a deadline switch changes where and how an attempt runs,
    # never the layout: the primary and both workers, each on its machine with its GPU.
    job = json.loads(load_event("requests/bare_docs.json"))
    pools = job["jobSpec"]["workerPoolSpecs"]
    pools.append({**pools[0], "replicaCount": 2})
    body = {"request_id": "r1", "custom_job": job, "fallback": {"after_spot_attempts": 1, "strategy": "STANDARD"}}
    harness.deliver(json.dumps(body).encode())

    def requeued(current: RequestRecord | None) -> RequestRecord:
        current.attempt(1).outcome = "requeued"
        current.status = RequestStatus.REQUEUED
        current.requeue = Requeue(2, "us-central1", "STANDARD", "preempted", decided_at="t", message_id="m")
        return current

    stored = harness.ledger.update("r1", requeued)
    message = {**stored.request, "attempt": 2, "location": "us-central1"}
    harness.deliver(json.dumps(message).encode(), message_id="m-requeue", request_id="r1", **REQUEUE_ATTRIBUTES)

    def layout(created: CustomJob) -> list[tuple[str, str, int, int]]:
        return [
            (
                p.machine_spec.machine_type,
                p.machine_spec.accelerator_type.name,
                p.machine_spec.accelerator_count,
                p.replica_count,
            )
            for p in created.job_spec.worker_pool_specs
        ]

    jobs = {j.labels[LABEL_ATTEMPT]: j for j in harness.jobs_for("r1")}
    assert jobs["2"].job_spec.scheduling.strategy == 3  # STANDARD
    assert (
        layout(jobs["1"])
        == layout(jobs["2"])
        == [
            ("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1, 1),
            ("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1, 2),
        ]
    )


def test_a_requeue_is_placed_from_the_fleet_estimate_not_only_the_failover_order(harness: Harness) -> None:
    harness.settings = replace(SETTINGS, region_prior=False)  # the fleet's observations alone
    harness.deliver(envelope(custom_job=H100_JOB, locations=["us-central1", "us-east4"]))
    # Attempt 1 was preempted in us-central1 (the re-queue plans it there again); meanwhile the
    # fleet saw Spot jobs wait there and find capacity in us-east4.
    seed_fleet(harness, spot_waits(harness, "us-central1", "a"), spot_found_capacity(harness, "us-east4", "b"))
    requeue = Requeue(attempt=2, location="us-central1", strategy="SPOT", reason="preemption", decided_at="t")

    def requeued(current: RequestRecord | None) -> RequestRecord:
        current.attempt(1).outcome = "requeued"
        current.status = RequestStatus.REQUEUED
        current.requeue = requeue
        return current

    stored = harness.ledger.update("r1", requeued)
    message = {**stored.request, "attempt": 2, "location": "us-central1"}
    outcome = harness.deliver(
        json.dumps(message).encode(), message_id="m-requeue", request_id="r1", **REQUEUE_ATTRIBUTES
    )

    assert outcome.result == SubmitResult.CREATED
    jobs = {j.labels[LABEL_ATTEMPT]: j for j in harness.jobs_for("r1")}
    assert jobs["2"].name.startswith("projects/proj/locations/us-east4/")
    record = harness.ledger.get("r1")
    assert [(a.n, a.location) for a in record.attempts] == [(1, "us-central1"), (2, "us-east4")]
    assert record.attempt(2).placed.startswith("cheapest expected cost")


def test_an_attempt_set_by_a_user_is_rejected(harness: Harness) -> None:
    outcome = harness.deliver(envelope(attempt=2))
    assert outcome.result == SubmitResult.INVALID and harness.vertex.creates == 0
    [alert] = harness.alerts
    assert alert.kind == "invalid_request" and alert.request_id == "r1"
    assert any(v.startswith("attempt: is set only by spotjobs") for v in alert.details["violations"])


def test_a_forged_requeue_marker_gains_nothing_the_ledger_does_not_expect(harness: Harness) -> None:
    # Anyone may set the attribute; the ledger decides whether attempt n is due.
    outcome = harness.deliver(envelope(attempt=2), **REQUEUE_ATTRIBUTES)
    assert outcome.result == SubmitResult.INVALID and harness.vertex.creates == 0
    [alert] = harness.alerts
    assert any("set by the system" in v for v in alert.details["violations"])


INVALID = [
    (
        "invalid_machine_family.json",
        {},
        "custom_job.jobSpec.workerPoolSpecs[0].machineSpec.machineType",
    ),
    ("invalid_tpu.json", {}, "custom_job.jobSpec.workerPoolSpecs[0].machineSpec.tpuTopology"),
    ("invalid_image.json", {}, "custom_job.jobSpec.workerPoolSpecs[0].containerSpec.imageUri"),
    ("invalid_replicas.json", {}, "custom_job.jobSpec.workerPoolSpecs[1].replicaCount"),
    ("invalid_request_id.json", {}, "request_id"),
    ("invalid_unknown_field.json", {}, "jobSpec.workerPoolSpecs[0].machineSpec.machineTyp"),
    ("invalid_wrong_type.json", {}, "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount"),
]


@pytest.mark.parametrize("fixture, attributes, path", INVALID, ids=[i[0] for i in INVALID])
def test_invalid_requests_are_acknowledged_alerted_and_create_nothing(
    harness: Harness, fixture: str, attributes: dict[str, str], path: str
) -> None:
    outcome = harness.deliver(load_event(f"requests/{fixture}"), message_id="m-9", **attributes)

    assert outcome.result == SubmitResult.INVALID
    assert harness.vertex.creates == 0 and harness.ledger.list_statuses()[0] == []
    [alert] = harness.alerts
    assert alert.kind == "invalid_request" and alert.severity == "ERROR"
    assert any(v.startswith(f"{path}: ") for v in alert.details["violations"]), alert.details
    assert alert.details["message_id"] == "m-9"
    [line] = harness.log_lines("invalid_request")
    assert line["severity"] == "ERROR" and line["violations"] == alert.details["violations"]


def test_a_request_over_the_replica_cap_is_alerted_naming_it_and_creates_nothing(harness: Harness) -> None:
    # issue 44: 1 primary + 8 workers, each pool within its own ceiling, 9 VMs in all.
    job = json.loads(load_event("requests/bare_docs.json"))
    pools = job["jobSpec"]["workerPoolSpecs"]
    pools.append({**pools[0], "replicaCount": 8})
    outcome = harness.deliver(json.dumps({"request_id": "r9", "custom_job": job}).encode(), message_id="m-9")

    assert outcome.result == SubmitResult.INVALID
    assert harness.vertex.creates == 0 and harness.ledger.list_statuses()[0] == []
    [alert] = harness.alerts
    assert (alert.kind, alert.request_id) == ("invalid_request", "r9")
    assert alert.details["violations"] == [
        "custom_job.jobSpec.workerPoolSpecs: asks for 9 replicas in all (every pool); "
        "at most 8 per job (SPOTJOBS_MAX_REPLICAS_PER_JOB)"
    ]


def test_a_rejection_is_alerted_once_however_often_its_message_is_delivered(harness: Harness) -> None:
    # Pub/Sub may deliver one message again, even after it was acknowledged: a rejection has no
    # record to hold its alert, so a note per message keeps the duplicates quiet.
    data = load_event("requests/invalid_image.json")
    for _ in range(3):
        assert harness.deliver(data, message_id="m-7").result == SubmitResult.INVALID
    assert harness.deliver(data, message_id="m-8").result == SubmitResult.INVALID  # another message
    assert [a.details["message_id"] for a in harness.alerts] == ["m-7", "m-8"]
    assert len(harness.log_lines("invalid_request")) == 4  # every delivery still logs its rejection


def test_a_rejection_whose_alert_was_not_sent_alerts_on_the_redelivery(harness: Harness) -> None:
    data = load_event("requests/invalid_image.json")
    harness.publisher.fail_next = 1
    with pytest.raises(Exception, match="publish"):
        harness.deliver(data, message_id="m-7")
    assert harness.deliver(data, message_id="m-7").result == SubmitResult.INVALID
    assert [a.details["message_id"] for a in harness.alerts] == ["m-7"]


def test_two_instances_handling_one_rejected_message_at_once_alert_it_once(harness: Harness) -> None:
    """Pub/Sub pushes a message again when its ack deadline passes while the first push still runs:
    the second instance, arriving between the first's check and its publish, must not alert too
    (issue 43: found by the simulator's interleaved deliveries)."""
    data = load_event("requests/invalid_image.json")
    publish = harness.publisher.publish
    second: list[object] = []

    def publish_while_the_second_instance_runs(*args: Any, **kwargs: Any) -> Any:
        if not second:
            second.append("running")
            try:
                second.append(harness.deliver(data, message_id="m-7"))
            except TransientError as exc:
                second.append(exc)
        return publish(*args, **kwargs)

    harness.publisher.publish = publish_while_the_second_instance_runs  # type: ignore[method-assign]
    assert harness.deliver(data, message_id="m-7").result == SubmitResult.INVALID
    [_, told] = second
    assert isinstance(told, TransientError)  # redelivered: by then the alert went out
    assert harness.deliver(data, message_id="m-7").result == SubmitResult.INVALID
    assert [a.details["message_id"] for a in harness.alerts] == ["m-7"]


def test_a_rejection_claimed_by_a_delivery_that_died_is_alerted_after_the_lease(harness: Harness) -> None:
    data = load_event("requests/invalid_image.json")
    note = ledger_bucket(harness.ledger).blob("rejections/m-7")
    note.upload_from_string(json.dumps({"sent": False, "claimed_at": iso(harness.now)}))
    with pytest.raises(TransientError):
        harness.deliver(data, message_id="m-7")  # its holder may still publish
    assert harness.alerts == []
    harness.now += timedelta(seconds=harness.settings.claim_lease_seconds + 1)
    assert harness.deliver(data, message_id="m-7").result == SubmitResult.INVALID
    assert harness.deliver(data, message_id="m-7").result == SubmitResult.INVALID
    assert [a.details["message_id"] for a in harness.alerts] == ["m-7"]


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"", "body: is empty"),
        (b"{not json", "body: is not valid UTF-8 JSON"),
        (b"[1, 2, 3]", "body: is a JSON array"),
        (b"{}" + b" " * SETTINGS.max_request_bytes, "body: is "),
    ],
    ids=["empty", "not-json", "not-an-object", "oversized"],
)
def test_unusable_bodies_are_rejected_with_a_null_request_id(harness: Harness, data: bytes, expected: str) -> None:
    outcome = harness.deliver(data)
    assert outcome.result == SubmitResult.INVALID and outcome.request_id is None
    [alert] = harness.alerts
    assert alert.request_id is None and alert.details["violations"][0].startswith(expected)


def _push_event(data: bytes, message_id: str, **attributes: str) -> dict[str, Any]:
    message = {
        "data": base64.b64encode(data).decode(),
        "messageId": message_id,
        "attributes": attributes,
        "publishTime": datetime.now(UTC).isoformat(),
    }
    return {"message": message, "subscription": "projects/p/subscriptions/s"}


def test_through_handle_delivery_transient_failures_raise_and_invalid_requests_return(
    harness: Harness,
) -> None:
    def handler(message: Message, log: Logger) -> None:
        submit_request(message, log, harness.ports)

    harness.vertex.create_faults.append(api.TooManyRequests("Too Many Requests"))
    with pytest.raises(api.TooManyRequests):
        handle_delivery(
            _push_event(envelope(), "m-1"),
            handler,
            function="submit_job",
            max_age_seconds=60,
            log=harness.log,
        )
    handle_delivery(
        _push_event(envelope(), "m-1"),
        handler,
        function="submit_job",
        max_age_seconds=60,
        log=harness.log,
    )
    handle_delivery(
        _push_event(b"not json", "m-2"),
        handler,
        function="submit_job",
        max_age_seconds=60,
        log=harness.log,
    )

    assert len(harness.jobs_for("r1")) == 1
    assert [a.kind for a in harness.alerts] == ["invalid_request"]
    assert issubclass(ClaimInProgress, TransientError)


# The lease bounds the create: a claim holder never sends a create its lease may not cover.


def test_the_create_is_sent_with_the_configured_timeout(harness: Harness) -> None:
    harness.deliver(envelope())
    assert harness.vertex.create_timeouts == [CREATE_TIMEOUT]


def test_a_claim_whose_lease_could_run_out_during_the_create_sends_no_create(
    harness: Harness,
) -> None:
    # Slow ledger writes or a cold client build ate the lease: a create sent now could still be in
    # flight when a redelivery takes the claim over and creates a second job.
    harness.client_build_seconds = LEASE - 1.5 * CREATE_TIMEOUT
    with pytest.raises(ClaimInProgress):
        harness.deliver(envelope())
    assert harness.vertex.creates == 0
    assert harness.ledger.get("r1").attempt(1).job is None
    [line] = harness.log_lines("claim_expiring")
    assert line["severity"] == "WARNING"

    harness.client_build_seconds = 0.0
    harness.now += timedelta(seconds=LEASE)
    outcome = harness.deliver(envelope())  # takes the claim over with a fresh lease, then creates

    assert outcome.result == SubmitResult.CREATED and len(harness.jobs_for("r1")) == 1


def test_a_claim_with_time_left_for_the_create_creates(harness: Harness) -> None:
    harness.client_build_seconds = LEASE - 1.5 * CREATE_TIMEOUT - 0.5
    assert harness.deliver(envelope()).result == SubmitResult.CREATED


class RacingJobService(FakeJobService):
    """While our create is in flight, another delivery creates and records a second job."""

    def __init__(self, ledger: LedgerStore) -> None:
        super().__init__()
        self.ledger = ledger
        self.ours: str | None = None
        self.other_job: str | None = None

    def create_custom_job(self, **kwargs: Any) -> CustomJob:
        ours = super().create_custom_job(**kwargs)
        if self.other_job is None:
            self.ours = ours.name
            self.other_job = super().create_custom_job(**kwargs).name

            def record_other(current: RequestRecord | None) -> RequestRecord:
                current.attempt(1).job = self.other_job
                return current

            self.ledger.update("r1", record_other)
        return ours


def test_a_job_the_ledger_does_not_record_is_cancelled_so_it_cannot_run_unmanaged(
    harness: Harness,
) -> None:
    harness.vertex = RacingJobService(harness.ledger)

    outcome = harness.deliver(envelope())

    recorded = harness.ledger.get("r1").attempt(1).job
    assert recorded == harness.vertex.other_job != harness.vertex.ours
    assert (outcome.result, outcome.job) == (SubmitResult.DUPLICATE, recorded)
    assert harness.vertex.cancelled == [harness.vertex.ours]
    [duplicate] = harness.log_lines("duplicate_job")
    assert duplicate["severity"] == "ERROR" and duplicate["recorded_job"] == recorded
    [cancelled] = harness.log_lines("stray_job_cancelled")
    assert cancelled["job"] == harness.vertex.ours
    assert harness.log_lines("job_created") == []
    [alert] = harness.alerts  # one stray_job alert, through the outbox
    assert alert.kind == "stray_job" and alert.details["stray_job"] == harness.vertex.ours


def test_a_failed_cancel_of_an_unrecorded_job_is_logged_not_raised(harness: Harness) -> None:
    harness.vertex = RacingJobService(harness.ledger)

    def refuse(*, name: str, timeout: float) -> None:
        raise api.ServiceUnavailable("down")

    harness.vertex.cancel_custom_job = refuse  # type: ignore[method-assign]

    harness.deliver(envelope())

    [line] = harness.log_lines("duplicate_job_cancel_failed")
    assert line["severity"] == "ERROR" and "ServiceUnavailable" in line["error"]


# 503 may come after the server accepted the create: never "definitely not created".


def test_a_503_after_the_create_was_accepted_finds_the_job_instead_of_creating_another(
    harness: Harness,
) -> None:
    harness.vertex.create_faults.append("lost_503")

    outcome = harness.deliver(envelope())

    assert outcome.result == SubmitResult.FOUND
    assert harness.vertex.creates == 1 and len(harness.jobs_for("r1")) == 1
    assert harness.ledger.get("r1").attempt(1).job == outcome.job


def test_a_503_with_no_job_found_keeps_the_claim_until_the_lease(harness: Harness) -> None:
    harness.vertex.create_faults.append(api.ServiceUnavailable("503"))
    with pytest.raises(ClaimInProgress):
        harness.deliver(envelope())
    claimed_at = harness.ledger.get("r1").attempt(1).claimed_at
    assert claimed_at == harness.now.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    with pytest.raises(ClaimInProgress):
        harness.deliver(envelope())  # not backdated: an early redelivery waits
    assert harness.vertex.creates == 1

    harness.now += timedelta(seconds=LEASE + 1)
    outcome = harness.deliver(envelope())

    assert outcome.result == SubmitResult.CREATED and len(harness.jobs_for("r1")) == 1


# Only invalid requests and settled outcomes are acknowledged; anything else is redelivered.


def _forbidden(*args: Any, **kwargs: Any) -> Any:
    raise api.Forbidden("the function may not write the state bucket")


def _no_such_bucket(*args: Any, **kwargs: Any) -> Any:
    raise api.NotFound("the specified bucket does not exist")


@pytest.mark.parametrize("fault", [_forbidden, _no_such_bucket], ids=["403", "404"])
def test_a_ledger_that_refuses_for_good_blocks_the_request_instead_of_losing_it(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, fault: Any
) -> None:
    monkeypatch.setattr(harness.ledger, "update", fault)

    with pytest.raises(SubmitBlocked) as raised:
        harness.deliver(envelope())

    assert isinstance(raised.value, TransientError)  # Pub/Sub redelivers, then dead-letters it
    assert isinstance(raised.value.__cause__, api.GoogleAPICallError)
    [line] = harness.log_lines("submit_blocked")
    assert line["severity"] == "ERROR" and line["request_id"] == "r1"
    assert harness.alerts == [] and harness.vertex.creates == 0


def test_a_blocked_request_is_redelivered_through_handle_delivery(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(harness.ledger, "update", _forbidden)

    def handler(message: Message, log: Logger) -> None:
        submit_request(message, log, harness.ports)

    with pytest.raises(SubmitBlocked):
        handle_delivery(
            _push_event(envelope(), "m-1"),
            handler,
            function="submit_job",
            max_age_seconds=60,
            log=harness.log,
        )


def test_an_unexpected_create_error_keeps_the_claim_and_is_settled_by_lookup(harness: Harness) -> None:
    # Not a verdict on the request, and not known to be pre-send: the job may exist.
    harness.vertex.create_faults.append(ValueError("a bug, not a verdict on the request"))

    with pytest.raises(ClaimInProgress):
        harness.deliver(envelope())

    record = harness.ledger.get("r1")
    assert record.status == RequestStatus.CLAIMED and record.attempt(1).outcome is None
    assert harness.log_lines("create_unknown") and harness.alerts == []


# Re-queues that validation rejects end the request once instead of looping.


def _requeue_attempt_2(harness: Harness, strategy: str = "SPOT", **fields: Any) -> bytes:
    """Attempt 1 runs, then the events function decides and publishes attempt 2."""
    harness.deliver(envelope(**fields))

    def requeued(current: RequestRecord | None) -> RequestRecord:
        current.attempt(1).outcome = "requeued"
        current.status = RequestStatus.REQUEUED
        current.requeue = Requeue(
            attempt=2,
            location="us-central1",
            strategy=strategy,
            reason="preempted",
            decided_at="t",
            message_id="m",
        )
        return current

    stored = harness.ledger.update("r1", requeued)
    return json.dumps({**stored.request, "attempt": 2, "location": "us-central1"}).encode()


def test_a_requeue_the_policy_now_rejects_fails_the_request_and_alerts_once(
    harness: Harness,
) -> None:
    message = _requeue_attempt_2(harness)
    harness.settings = replace(SETTINGS, allowed_machine_families=("a3",))  # policy changed

    first = harness.deliver(message, message_id="m-requeue", request_id="r1", **REQUEUE_ATTRIBUTES)
    # reconcile resent it
    again = harness.deliver(message, message_id="m-requeue", request_id="r1", **REQUEUE_ATTRIBUTES)

    assert first.result == again.result == SubmitResult.INVALID
    record = harness.ledger.get("r1")
    assert record.status == RequestStatus.FAILED and record.requeue is None
    assert record.finished_at is not None and "invalid_request:2" in record.markers
    [alert] = harness.alerts
    assert (alert.kind, alert.request_id, alert.attempt) == ("invalid_request", "r1", 2)
    assert len(harness.log_lines("invalid_request")) == 2
    assert harness.vertex.creates == 1


def test_a_rejected_requeue_publishes_its_own_alert_not_one_another_delivery_is_publishing(
    harness: Harness,
) -> None:
    message = _requeue_attempt_2(harness)
    theirs = another_deliverys_alert(harness.ledger, harness.now)
    harness.settings = replace(SETTINGS, allowed_machine_families=("a3",))  # policy changed
    with pytest.raises(TransientError, match="being published by another delivery"):  # redelivered until it is
        harness.deliver(message, message_id="m-requeue", request_id="r1", **REQUEUE_ATTRIBUTES)

    assert [(alert.kind, alert.attempt) for alert in harness.alerts] == [("invalid_request", 2)]
    assert harness.ledger.get("r1").pending_alerts == [theirs]


@pytest.mark.parametrize(
    "policy, refused",
    [
        ({"allowed_fallback_strategies": ()}, "strategy: is STANDARD; allowed fallback strategies: none"),
        ({"min_spot_attempts": 2}, "strategy: is STANDARD after 1 Spot attempts; at least 2 come first"),
    ],
    ids=["no-standard", "minimum"],
)
def test_an_attempt_the_policy_refuses_is_not_created_whatever_planned_it(
    harness: Harness, policy: dict[str, Any], refused: str
) -> None:
    # The ledger plans attempt 2 on STANDARD (a deadline's switch, a fallback, a record written
    # under an older policy); the deployment's policy at the create is what decides.
    deadline = {"deadline": (harness.now + timedelta(days=1)).isoformat(), "total_steps": 100}
    message = _requeue_attempt_2(harness, strategy="STANDARD", **deadline)
    harness.settings = replace(SETTINGS, **policy)

    first = harness.deliver(message, message_id="m-requeue", request_id="r1", **REQUEUE_ATTRIBUTES)
    again = harness.deliver(message, message_id="m-requeue", request_id="r1", **REQUEUE_ATTRIBUTES)

    assert (first.result, again.result) == (SubmitResult.FAILED, SubmitResult.DUPLICATE)
    assert harness.vertex.creates == 1  # attempt 1's only
    record = harness.ledger.get("r1")
    assert record.status == RequestStatus.FAILED and record.attempt(2).job is None
    [alert] = harness.alerts
    assert (alert.kind, alert.attempt, alert.details["strategy"]) == ("submit_failed", 2, "STANDARD")
    assert refused in alert.message


def test_no_attempt_is_claimed_while_the_job_it_replaces_has_not_ended(harness: Harness) -> None:
    # A deadline switch cancelled attempt 1 (Vertex: CANCELLING) and holds attempt 2 until the
    # job ends; a message for attempt 2 that comes early (forged, or redriven) creates nothing.
    message = _requeue_attempt_2(harness, strategy="STANDARD")

    record, generation = harness.ledger.read("r1")
    spot = record.attempt(1)
    spot.outcome, spot.state = "switched_to_on_demand", "JOB_STATE_CANCELLING"
    spot.cancel_decided_at = spot.cancel_sent_at = harness.now.isoformat()
    record.requeue.message_id = None
    harness.ledger._write(record, generation)  # noqa: SLF001 - as the switch left it (the state machine refuses the shortcut)
    with pytest.raises(ClaimInProgress, match="waits for the job of attempt 1 to end"):
        harness.deliver(message, message_id="m-early", request_id="r1", **REQUEUE_ATTRIBUTES)
    assert harness.vertex.creates == 1 and harness.ledger.get("r1").requeue.attempt == 2

    harness.ledger.update("r1", lambda current: setattr(current.attempt(1), "state", "JOB_STATE_CANCELLED") or current)
    outcome = harness.deliver(message, message_id="m-requeue", request_id="r1", **REQUEUE_ATTRIBUTES)
    assert outcome.result == SubmitResult.CREATED and outcome.attempt == 2


def test_a_requeue_larger_than_the_request_limit_is_still_accepted(harness: Harness) -> None:
    # The canonical envelope re-published on re-queue is bigger than the request as first sent.
    fields = {"fallback": {"after_spot_attempts": 2, "strategy": "STANDARD"}}
    harness.settings = replace(SETTINGS, max_request_bytes=len(envelope(**fields)))
    message = _requeue_attempt_2(harness, **fields)
    assert len(message) > harness.settings.max_request_bytes

    outcome = harness.deliver(message, message_id="m-requeue", request_id="r1", **REQUEUE_ATTRIBUTES)

    assert outcome.result == SubmitResult.CREATED and outcome.attempt == 2


# What the log says matches what happened.


class RefusingAfterRecordedJobService(FakeJobService):
    """Refuses our create for good, after another delivery has already recorded a job."""

    def __init__(self, ledger: LedgerStore) -> None:
        super().__init__()
        self.ledger = ledger

    def create_custom_job(self, **kwargs: Any) -> CustomJob:
        other = super().create_custom_job(**kwargs).name

        def record_other(current: RequestRecord | None) -> RequestRecord:
            current.attempt(1).job = other
            current.status = RequestStatus.SUBMITTED
            return current

        self.ledger.update("r1", record_other)
        raise api.InvalidArgument("refused")


def test_a_refusal_after_the_attempt_got_a_job_is_not_reported_as_a_failed_request(
    harness: Harness,
) -> None:
    harness.vertex = RefusingAfterRecordedJobService(harness.ledger)

    harness.deliver(envelope())

    assert harness.ledger.get("r1").status == RequestStatus.SUBMITTED
    assert harness.log_lines("submit_failed") == [] and harness.alerts == []
    [line] = harness.log_lines("refusal_ignored")
    assert line["severity"] == "WARNING"


def test_a_duplicate_publish_with_a_different_body_is_a_warning(harness: Harness) -> None:
    harness.deliver(envelope())
    harness.deliver(envelope(), message_id="m-2")
    harness.deliver(envelope(max_attempts=5), message_id="m-3")

    same, different = harness.log_lines("duplicate")
    assert (same["severity"], same["same_body"]) == ("INFO", True)
    assert (different["severity"], different["same_body"]) == ("WARNING", False)


def _push_request(event: dict[str, Any]) -> Any:
    """The HTTP request Pub/Sub's push makes with the push body `event` (entry points are HTTP)."""
    import types

    body = json.dumps(event).encode()
    return types.SimpleNamespace(get_data=lambda: body)


def test_submit_job_handles_a_request_of_any_age(monkeypatch: pytest.MonkeyPatch) -> None:
    # A Pub/Sub seek or a long outage must not silently drop job requests: only events go stale.
    from functions import submit as entry

    handled: list[Message] = []
    monkeypatch.setattr(entry, "_handle", lambda message, log: handled.append(message))
    event = _push_event(envelope(), "m-old")
    event["message"]["publishTime"] = (datetime.now(UTC) - timedelta(days=30)).isoformat()

    entry.submit_job(_push_request(event))

    assert [m.message_id for m in handled] == ["m-old"]


def test_submit_job_redelivers_a_request_it_cannot_build_its_clients_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from functions import submit as entry

    def misconfigured(function: str) -> Ports:
        raise ConfigurationError("SPOTJOBS_CLAIM_LEASE_SECONDS=1 must be at least twice ...")

    monkeypatch.setattr("shared.wiring.ports_for", misconfigured)

    with pytest.raises(SubmitBlocked):
        entry.submit_job(_push_request(_push_event(envelope(), "m-1")))


def test_a_replay_of_a_request_whose_document_was_lost_creates_no_second_job(harness: Harness) -> None:
    first = harness.deliver(envelope(), message_id="m-1")
    assert first.result == SubmitResult.CREATED
    harness.ledger._bucket.blob("requests/r1.json").delete()  # an operator, a lifecycle rule

    harness.now += timedelta(days=1)  # the topic is replayed a day later: the message is old
    message = Message(envelope(), "m-1", {}, publish_time=harness.now - timedelta(days=1))
    replayed = submit_request(message, harness.log, harness.ports)

    assert replayed.result == SubmitResult.DUPLICATE and harness.vertex.creates == 1
    assert harness.ledger.get("r1") is None  # nothing claimed afresh
    [alert] = harness.alerts
    assert alert.kind == "ledger_missing" and alert.details["jobs"] == [first.job]


def test_a_redrive_of_a_request_whose_document_was_lost_creates_no_second_job(harness: Harness) -> None:
    """A redriven message is the message it was: it counts from the first publish the redrive
    carries, not from its own fresh one (simulator seed 1771: a person deleted the record, the
    operator's redrive an hour later claimed the id afresh and created a second job)."""
    first = harness.deliver(envelope(), message_id="m-1")
    assert first.result == SubmitResult.CREATED
    harness.ledger._bucket.blob("requests/r1.json").delete()  # a person

    published_first = harness.now
    harness.now += timedelta(hours=1)
    redriven = Message(
        envelope(), "m-2", {ORIGINAL_PUBLISH_TIME_ATTRIBUTE: iso(published_first)}, publish_time=harness.now
    )
    outcome = submit_request(redriven, harness.log, harness.ports)

    assert outcome.result == SubmitResult.DUPLICATE and harness.vertex.creates == 1
    assert harness.ledger.get("r1") is None
    [alert] = harness.alerts
    assert alert.kind == "ledger_missing" and alert.details["jobs"] == [first.job]


def test_a_replay_whose_lookup_vertex_refuses_for_good_is_redelivered_claiming_nothing(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulator seed 3729: the replay guard cannot tell whether jobs of the record-less request
    exist, so nothing is claimed or created and the message is redelivered until it dead-letters
    (the dead-letter alert is its word); there is no claim, so no `lookup_failed`."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise api.PermissionDenied("403 Permission 'aiplatform.customJobs.list' denied")

    monkeypatch.setattr(harness.vertex, "list_custom_jobs", refused)
    replayed = Message(envelope(), "m-1", {}, publish_time=harness.now - timedelta(seconds=LEASE + 1))

    with pytest.raises(SubmitBlocked):
        submit_request(replayed, harness.log, harness.ports)

    assert harness.ledger.get("r1") is None and harness.vertex.creates == 0
    assert harness.alerts == []


def test_a_lost_document_is_alerted_once_per_message_however_often_it_is_delivered(harness: Harness) -> None:
    """Pub/Sub delivers a message again after its ack (simulator seed 3179: a redriven message
    delivered three times published `ledger_missing` three times)."""
    first = harness.deliver(envelope(), message_id="m-1")
    harness.ledger._bucket.blob("requests/r1.json").delete()  # a person

    harness.now += timedelta(hours=1)
    replayed = Message(envelope(), "m-1", {}, publish_time=harness.now - timedelta(hours=1))
    outcomes = [submit_request(replayed, harness.log, harness.ports) for _ in range(3)]

    assert {o.result for o in outcomes} == {SubmitResult.DUPLICATE} and harness.vertex.creates == 1
    [alert] = harness.alerts
    assert alert.kind == "ledger_missing" and alert.details == {"jobs": [first.job], "message_id": "m-1"}


def test_a_fresh_message_without_a_record_is_claimed_without_a_lookup(harness: Harness) -> None:
    outcome = harness.deliver(envelope())
    assert outcome.result == SubmitResult.CREATED and harness.vertex.lists == 0


def test_a_redelivery_inside_the_lease_after_a_person_deleted_the_record_creates_no_second_job(
    harness: Harness,
) -> None:
    """Simulator seed 5085: the first delivery created the job, a person deleted the record a
    minute after the publish, and a redelivery still younger than a lease claimed the id afresh
    and created a second job. The claim's active marker outlives the record: it says one was kept."""
    published = harness.now
    first = harness.deliver(envelope(), message_id="m-1")
    assert first.result == SubmitResult.CREATED
    harness.ledger._bucket.blob("requests/r1.json").delete()  # a person

    harness.now += timedelta(seconds=LEASE / 2)
    again = submit_request(Message(envelope(), "m-1", {}, publish_time=published), harness.log, harness.ports)

    assert again.result == SubmitResult.DUPLICATE and harness.vertex.creates == 1
    assert harness.ledger.get("r1") is None  # nothing claimed afresh
    [alert] = harness.alerts
    assert alert.kind == "ledger_missing" and alert.details == {"jobs": [first.job], "message_id": "m-1"}


def test_a_new_publish_after_a_person_deleted_the_record_is_claimed_afresh(harness: Harness) -> None:
    """The id's earlier job, created before this message was published and ended, is the deleted
    record's: the id is claimed afresh (seed 3667's judgement), its marker notwithstanding."""
    first = harness.deliver(envelope(), message_id="m-1")
    harness.vertex.set_state(first.job, 4)  # SUCCEEDED
    harness.ledger._bucket.blob("requests/r1.json").delete()  # a person

    harness.now += timedelta(seconds=LEASE / 2)
    outcome = harness.deliver(envelope(), message_id="m-2")

    assert outcome.result == SubmitResult.CREATED and harness.vertex.creates == 2
    assert harness.ledger.get("r1").attempt(1).job == outcome.job and harness.alerts == []


def test_a_new_publish_after_a_person_deleted_the_record_waits_for_the_deleted_records_live_job(
    harness: Harness,
) -> None:
    """Simulator seed 10182: a person deleted the record while its job waited, and the publisher's
    retry, a new message, claimed the id afresh beside it: two live jobs of one request, training
    into one checkpoint folder. The deleted record's job is cancelled as the stray it is (one
    `stray_job`), and the message is redelivered until it has ended; then the id is claimed afresh."""
    first = harness.deliver(envelope(), message_id="m-1")
    harness.ledger._bucket.blob("requests/r1.json").delete()  # a person

    harness.now += timedelta(seconds=LEASE / 2)
    retry = Message(envelope(), "m-2", {}, publish_time=harness.now)
    for _ in range(2):  # the first delivery cancels it, the next finds it still cancelling
        with pytest.raises(TransientError):
            submit_request(retry, harness.log, harness.ports)
        assert harness.vertex.creates == 1 and harness.ledger.get("r1") is None

    assert harness.vertex.cancelled == [first.job]  # once: the next delivery found it cancelling
    [alert] = harness.alerts
    assert alert.kind == "stray_job" and alert.job == first.job
    harness.vertex.set_state(first.job, 7)  # CANCELLED
    outcome = submit_request(retry, harness.log, harness.ports)
    assert outcome.result == SubmitResult.CREATED and harness.vertex.creates == 2
    assert harness.ledger.get("r1").attempt(1).job == outcome.job


def test_a_redrive_of_a_publish_that_waited_out_its_deliveries_for_a_deleted_records_job_claims_afresh(
    harness: Harness,
) -> None:
    """Seed 10182's case when the deleted record's job takes its time to end: the first delivery
    older than a lease (here the third; with the default 120 s lease the fifth, 150 s after the
    publish), or the redrive of a message dead-lettered meanwhile, took that job for its own and
    acknowledged with `ledger_missing`, so the request never ran. A job created before the message
    was first published is not its own, whatever the message's age: every delivery waits for it,
    the redrive too, and then claims the id afresh."""
    first = harness.deliver(envelope(), message_id="m-1")
    harness.ledger._bucket.blob("requests/r1.json").delete()  # a person

    harness.now += timedelta(seconds=LEASE / 2)
    published = harness.now
    retry = Message(envelope(), "m-2", {}, publish_time=published)
    for backoff in (10, 20, 40, 80, 0):  # five deliveries, the job still cancelling: dead-lettered
        with pytest.raises(TransientError):
            submit_request(retry, harness.log, harness.ports)
        harness.now += timedelta(seconds=backoff)
    assert harness.vertex.cancelled == [first.job] and harness.vertex.creates == 1

    harness.now = published + timedelta(hours=2)  # `spotjobs dead-letters redrive`
    redriven = Message(envelope(), "m-3", {ORIGINAL_PUBLISH_TIME_ATTRIBUTE: iso(published)}, publish_time=harness.now)
    with pytest.raises(TransientError):  # still cancelling: the redrive waits too, asking no second cancel
        submit_request(redriven, harness.log, harness.ports)
    assert harness.vertex.cancelled == [first.job] and harness.vertex.creates == 1
    harness.vertex.set_state(first.job, 7)  # CANCELLED
    outcome = submit_request(redriven, harness.log, harness.ports)

    assert outcome.result == SubmitResult.CREATED and harness.vertex.creates == 2
    assert harness.ledger.get("r1").attempt(1).job == outcome.job
    [alert] = harness.alerts  # the deleted record's job, cancelled as a stray; no `ledger_missing`
    assert alert.kind == "stray_job" and alert.job == first.job


def test_a_console_copy_of_a_deleted_records_job_is_no_claim_of_the_message_published_again(
    harness: Harness,
) -> None:
    """Simulator seed 10268: a person re-ran the deleted record's job in the console, labels and kit
    key and all, after the request was published again; the copy was created since the first
    publish, so the redrive took it for its own claim's and acknowledged with `ledger_missing`: the
    request never ran. A job carrying the kit key of one created before the first publish is a copy
    of that earlier record's job, not a claim of this message: the redrive claims the id afresh."""
    first = harness.deliver(envelope(), message_id="m-1")
    harness.ledger._bucket.blob("requests/r1.json").delete()  # a person
    harness.now += timedelta(seconds=LEASE / 2)
    published = harness.now
    with pytest.raises(TransientError):  # the deleted record's job lives: the message waits
        submit_request(Message(envelope(), "m-2", {}, publish_time=published), harness.log, harness.ports)
    copy = CustomJob(harness.vertex.jobs[first.job])  # re-run in the console, then cancelled
    copy.name = f"{first.job}01"
    copy.create_time = copy.update_time = published + timedelta(minutes=25)
    copy.state = 7
    harness.vertex.jobs[copy.name] = copy
    harness.vertex.set_state(first.job, 7)  # CANCELLED

    harness.now = published + timedelta(hours=2)  # `spotjobs dead-letters redrive`
    redriven = Message(envelope(), "m-3", {ORIGINAL_PUBLISH_TIME_ATTRIBUTE: iso(published)}, publish_time=harness.now)
    outcome = submit_request(redriven, harness.log, harness.ports)

    assert outcome.result == SubmitResult.CREATED
    assert harness.ledger.get("r1").attempt(1).job == outcome.job
    assert "ledger_missing" not in [alert.kind for alert in harness.alerts]


def test_a_message_waiting_for_a_deleted_records_job_keeps_the_ids_marker_for_the_next_fresh_message(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulator seed 3609: the deleted record's marker, written at its claim, was removed as stale
    (no record, older than `INDEX_GRACE_SECONDS`) while that record's job was still cancelling, so
    a fresh message of the id did not look and created a second live job. A delivery that waits
    for such a job renews the marker: a pass that listed the old one cannot remove it."""
    first = harness.deliver(envelope(), message_id="m-1")
    harness.ledger._bucket.blob("requests/r1.json").delete()  # a person
    claims_marker = harness.ledger.active_entry("r1")
    harness.now += timedelta(seconds=LEASE / 2)
    with pytest.raises(TransientError):
        harness.deliver(envelope(), message_id="m-2")  # published again: it waits, the job cancelling

    assert claims_marker.written is not None
    # fake-gcs-server ignores ifGenerationMatch on a DELETE: the store then checks it itself
    monkeypatch.setattr("shared.ledger.store._emulator_in_use", lambda: True)
    later = claims_marker.written + timedelta(seconds=INDEX_GRACE_SECONDS + 1)
    assert not harness.ledger.remove_stale_marker(claims_marker, None, now=later)  # reconcile's pass
    harness.now += timedelta(seconds=LEASE / 2)
    with pytest.raises(TransientError):  # a fresh message of the id looks, and waits too
        harness.deliver(envelope(), message_id="m-3")
    assert harness.vertex.creates == 1 and harness.vertex.cancelled == [first.job]


def test_the_stray_sweep_keeps_the_ids_marker_while_a_deleted_records_job_lives(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulator seed 10178: a person deleted the record while its job lived; reconcile's pass
    removed the claim's marker as stale (no record, older than `INDEX_GRACE_SECONDS`) and its stray
    sweep cancelled the job, which stayed CANCELLING; a fresh message of the id, finding no marker,
    did not look and created a second live job. The sweep renews the marker of a record-less job
    not ended, so a fresh message looks and waits."""
    first = harness.deliver(envelope(), message_id="m-1")
    harness.ledger._bucket.blob("requests/r1.json").delete()  # a person
    claims_marker = harness.ledger.active_entry("r1")
    assert claims_marker.written is not None
    later = claims_marker.written + timedelta(seconds=INDEX_GRACE_SECONDS + 1)
    assert harness.ledger.remove_stale_marker(claims_marker, None, now=later)  # reconcile's pass
    assert sweep_strays(harness.ports, ["us-central1"], harness.log) == [first.job]

    harness.now += timedelta(seconds=LEASE / 2)
    with pytest.raises(TransientError):  # a fresh message of the id looks, and waits
        harness.deliver(envelope(), message_id="m-2")
    assert harness.vertex.creates == 1 and harness.vertex.cancelled == [first.job]
    renewed = harness.ledger.active_entry("r1")
    # fake-gcs-server ignores ifGenerationMatch on a DELETE: the store then checks it itself
    monkeypatch.setattr("shared.ledger.store._emulator_in_use", lambda: True)
    assert sweep_strays(harness.ports, ["us-central1"], harness.log) == []  # still cancelling: renewed again
    assert not harness.ledger.remove_stale_marker(renewed, None, now=later + timedelta(hours=1))


def test_a_message_of_another_location_waits_for_a_deleted_records_live_job(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulator seed 10267: the deleted record's job ran in us-east4, and another body published
    under the id, naming no location (the default, us-central1), looked only there and created a
    second live job. The look lists every location the stray sweep lists."""
    monkeypatch.setattr("shared.job_locations._remembered", set())  # this instance marks us-east4 at its create
    first = harness.deliver(envelope(locations=["us-east4"]), message_id="m-1")
    assert "/locations/us-east4/" in first.job
    harness.ledger._bucket.blob("requests/r1.json").delete()  # a person
    harness.now += timedelta(seconds=LEASE / 2)

    with pytest.raises(TransientError):
        harness.deliver(envelope(priority=100), message_id="m-2")
    assert harness.vertex.creates == 1 and harness.vertex.cancelled == [first.job]


def test_a_record_written_while_the_replay_guard_looked_is_claimed_not_alerted(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A concurrent delivery's claim and create can land between the guard's read of the record
    and its listing: the job found is that claim's, not a lost record's."""
    first = harness.deliver(envelope(), message_id="m-1")
    harness.vertex.set_state(first.job, 4)  # SUCCEEDED: a live one would hold the new claim back
    harness.ledger._bucket.blob("requests/r1.json").delete()  # a person
    harness.now += timedelta(seconds=LEASE / 2)
    listing = harness.vertex.list_custom_jobs

    def meanwhile_another_delivery_claims_and_creates(request: dict[str, Any], **kwargs: Any) -> Any:
        monkeypatch.setattr(harness.vertex, "list_custom_jobs", listing)
        created = harness.deliver(envelope(), message_id="m-2")  # published after the deletion: claims afresh
        harness.vertex.jobs[created.job].create_time = harness.now  # the fake's clock is the wall's
        return listing(request, **kwargs)

    monkeypatch.setattr(harness.vertex, "list_custom_jobs", meanwhile_another_delivery_claims_and_creates)
    outcome = harness.deliver(envelope(), message_id="m-2")

    assert outcome.result == SubmitResult.DUPLICATE and harness.vertex.creates == 2
    assert harness.alerts == []


def test_a_create_in_flight_when_a_person_deleted_the_record_is_not_recorded_by_the_ids_new_claim(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Delivery 1's create is out when a person deletes the record; a copy of the message, fresh
    (the marker is there, the list does not show the job yet), claims the id afresh and its own
    create's answer is lost. Delivery 1's answer then comes: its job, created before the new
    record, with the deleted record's kit key, is no job of the new record's (`is_stray`, the
    look-ups), so it must not be recorded there: every line it signs would be refused."""
    published = harness.now
    message = Message(envelope(), "m-1", {}, publish_time=published)
    create = harness.vertex.create_custom_job

    def the_answer_comes_after_a_deletion_and_a_fresh_claim(**kwargs: Any) -> Any:
        monkeypatch.setattr(harness.vertex, "create_custom_job", create)
        job = create(**kwargs)
        harness.vertex.jobs[job.name].create_time = job.create_time = datetime.now(UTC) - timedelta(seconds=5)
        harness.ledger._bucket.blob("requests/r1.json").delete()  # a person
        harness.vertex.list_lag = 2  # the guard's list and the lost answer's look-up
        harness.vertex.create_faults.append("lost")
        harness.now += timedelta(seconds=3)
        with pytest.raises(ClaimInProgress):  # claimed afresh, its create's outcome unknown
            submit_request(message, harness.log, harness.ports)
        return job

    monkeypatch.setattr(harness.vertex, "create_custom_job", the_answer_comes_after_a_deletion_and_a_fresh_claim)
    submit_request(message, harness.log, harness.ports)

    [earlier, own] = sorted(harness.jobs_for("r1"), key=lambda job: job.create_time)
    attempt = harness.ledger.get("r1").attempt(1)
    assert attempt.job != earlier.name  # the deleted record's job, with its kit key
    assert earlier.name in harness.vertex.cancelled  # a second job: nothing would manage it
    harness.now += timedelta(seconds=LEASE + 1)
    assert submit_request(message, harness.log, harness.ports).result == SubmitResult.FOUND
    assert harness.ledger.get("r1").attempt(1).job == own.name


def _kit_key_of(job: CustomJob) -> str | None:
    env = job.job_spec.worker_pool_specs[0].container_spec.env
    return next((var.value for var in env if var.name == ENV_KIT_KEY), None)


def test_a_create_accepted_after_the_ids_new_claim_is_not_recorded_by_it(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, but Vertex accepts delivery 1's create only after the new record was written, so
    its create time cannot tell: the kit key it carries, the deleted record's, does. Recorded,
    the new record would refuse every line its job signs, and the job created with the new
    record's key would be cancelled as a second job."""
    message = Message(envelope(), "m-1", {}, publish_time=harness.now)
    create = harness.vertex.create_custom_job

    def accepted_after_a_deletion_and_a_fresh_claim(**kwargs: Any) -> Any:
        monkeypatch.setattr(harness.vertex, "create_custom_job", create)
        harness.ledger._bucket.blob("requests/r1.json").delete()  # a person
        harness.vertex.list_lag = 2  # the guard's list and the lost answer's look-up
        harness.vertex.create_faults.append("lost")
        harness.now += timedelta(seconds=3)
        with pytest.raises(ClaimInProgress):  # claimed afresh, its create's outcome unknown
            submit_request(message, harness.log, harness.ports)
        return create(**kwargs)

    monkeypatch.setattr(harness.vertex, "create_custom_job", accepted_after_a_deletion_and_a_fresh_claim)
    submit_request(message, harness.log, harness.ports)
    harness.now += timedelta(seconds=LEASE + 1)
    submit_request(message, harness.log, harness.ports)  # takes the claim over, looks its job up

    attempt = harness.ledger.get("r1").attempt(1)
    [recorded] = [job for job in harness.jobs_for("r1") if job.name == attempt.job]
    assert _kit_key_of(recorded) == attempt.kit_key  # else every line its job signs is refused
    [other] = [job for job in harness.jobs_for("r1") if job.name != attempt.job]
    assert other.name in harness.vertex.cancelled


def _deliver_at(harness: Harness, moment: datetime, message_id: str, **attributes: str) -> SubmitOutcome:
    message = Message(DOCS_BODY, message_id, attributes, publish_time=moment)
    return submit_request(message, harness.log, harness.ports)


def test_a_bare_body_retried_across_a_minute_boundary_is_one_request_and_six_minutes_later_another(
    harness: Harness,
) -> None:
    first_publish = datetime(2026, 11, 30, 9, 0, 59, 800000, tzinfo=UTC)
    first = _deliver_at(harness, first_publish, "m-1")
    retry = _deliver_at(harness, first_publish + timedelta(seconds=0.5), "m-2")  # 09:01:00.3
    later = _deliver_at(harness, first_publish + timedelta(minutes=6), "m-3")

    assert first.result == SubmitResult.CREATED and retry.result == SubmitResult.DUPLICATE
    assert first.request_id == retry.request_id != later.request_id
    assert later.result == SubmitResult.CREATED
    assert harness.vertex.creates == 2


def test_concurrent_tries_of_a_bare_body_either_side_of_a_minute_are_one_job(harness: Harness) -> None:
    first_publish = datetime(2026, 11, 30, 9, 0, 59, 800000, tzinfo=UTC)
    outcomes: list[SubmitOutcome | Exception] = []
    lock = threading.Lock()

    def deliver(k: int) -> None:
        try:
            result: SubmitOutcome | Exception = _deliver_at(
                harness, first_publish + timedelta(seconds=0.1 * k), f"m-{k}"
            )
        except ClaimInProgress as exc:
            result = exc
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=deliver, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    named = {o.request_id for o in outcomes if isinstance(o, SubmitOutcome)}
    assert len(named) == 1
    assert harness.vertex.creates == 1


def test_a_redriven_bare_body_is_the_request_it_was(harness: Harness) -> None:
    first_publish = datetime(2026, 11, 30, 9, 0, 59, 800000, tzinfo=UTC)
    first = _deliver_at(harness, first_publish, "m-1")
    # An hour later the operator redrives the dead letter: a new message, a new publish time, and
    # the original publish time carried in the attribute redrive sets.
    redriven = _deliver_at(
        harness,
        first_publish + timedelta(hours=1),
        "m-redriven",
        spotjobs_original_publish_time="2026-11-30T09:00:59.800Z",
    )

    assert redriven.request_id == first.request_id and redriven.result == SubmitResult.DUPLICATE
    assert harness.vertex.creates == 1


def test_an_explicit_request_id_wins_over_the_content(harness: Harness) -> None:
    moment = datetime(2026, 11, 30, 9, 0, 59, tzinfo=UTC)
    named = _deliver_at(harness, moment, "m-1", request_id="nightly-1")
    bare = _deliver_at(harness, moment, "m-2")
    assert named.request_id == "nightly-1" and bare.request_id != "nightly-1"
    assert harness.vertex.creates == 2


# Re-queue attributes are honoured only with the ledger's confirmation (issue 32 item 3).


def test_a_forged_requeue_naming_a_pending_attempt_is_rejected_without_touching_the_record(
    harness: Harness,
) -> None:
    _requeue_attempt_2(harness)
    before = harness.ledger.get("r1")
    forged = json.dumps({"request_id": "r1", "attempt": 2}).encode()

    outcome = harness.deliver(forged, message_id="m-forged", request_id="r1", **REQUEUE_ATTRIBUTES)

    assert outcome.result == SubmitResult.INVALID
    after = harness.ledger.get("r1")
    assert after == before and after.status == RequestStatus.REQUEUED and after.requeue.attempt == 2
    [alert] = harness.alerts
    assert alert.kind == "invalid_request" and alert.details["message_id"] == "m-forged"
    # The real re-queue still runs attempt 2.
    real = harness.deliver(_system_requeue(harness, 2), message_id="m-requeue", request_id="r1", **REQUEUE_ATTRIBUTES)
    assert real.result == SubmitResult.CREATED and real.attempt == 2


def test_a_requeue_marker_with_attempt_1_on_an_unknown_request_is_not_claimed_as_new(harness: Harness) -> None:
    forged = envelope("newcomer", attempt=1)

    outcome = harness.deliver(forged, message_id="m-forged", request_id="newcomer", **REQUEUE_ATTRIBUTES)

    assert outcome.result == SubmitResult.INVALID and harness.vertex.creates == 0
    assert harness.ledger.get("newcomer") is None
    [alert] = harness.alerts
    assert any("no record" in v for v in alert.details["violations"])


def _system_requeue(harness: Harness, n: int) -> bytes:
    from shared.requests.envelope import requeue_message

    record = harness.ledger.get("r1")
    body, _ = requeue_message(record.request, n, record.requeue.location)
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("body", "attributes"),
    [
        (DOCS_BODY, {"schedule_time": "9999-12-31T23:59:59Z"}),
        (DOCS_BODY, {"spotjobs_original_publish_time": "9999-12-31T23:59:59Z"}),
        (envelope(deadline="2026-12-07T09:00:00Z", total_steps=10**400, expected_step_seconds=10**400), {}),
    ],
    ids=["schedule_time", "original_publish_time", "huge_numbers"],
)
def test_far_times_and_huge_numbers_are_one_invalid_request_never_an_exception(
    harness: Harness, body: bytes, attributes: dict[str, str]
) -> None:
    # Issue 32 items 5 and 9: acknowledged with one alert, not five deliveries and a dead letter.
    outcome = harness.deliver(body, message_id="m-far", **attributes)

    assert outcome.result == SubmitResult.INVALID and harness.vertex.creates == 0
    [alert] = harness.alerts
    assert alert.kind == "invalid_request"


# The ids the system derives are reserved (issue 32 item 6).


@pytest.mark.parametrize(
    ("body", "attributes", "path"),
    [
        (envelope("req-0123456789abcdef-20261201090000"), {}, "request_id"),
        (envelope("trg-nightly-w20261201t090000z"), {}, "request_id"),
        (DOCS_BODY, {"request_id": "trg-nightly-w20261201t090000z"}, "attributes.request_id"),
    ],
    ids=["derived", "trigger_envelope", "trigger_attribute"],
)
def test_a_publisher_may_not_take_an_id_the_system_derives(
    harness: Harness, body: bytes, attributes: dict[str, str], path: str
) -> None:
    outcome = harness.deliver(body, message_id="m-squat", **attributes)

    assert outcome.result == SubmitResult.INVALID and harness.vertex.creates == 0
    assert harness.ledger.list_statuses()[0] == []
    [alert] = harness.alerts
    assert any(v.startswith(f"{path}: ") and "reserved" in v for v in alert.details["violations"]), alert.details


def test_a_trigger_request_is_accepted_exactly_as_its_window_published_it(harness: Harness) -> None:
    from shared.requests.request_ids import content_digest
    from shared.triggers.store import TriggerStore, window_path

    request_id = "trg-daily-data-w20261201t090000z"
    published = json.loads(envelope(request_id))
    TriggerStore(harness.ledger._bucket).create(  # noqa: SLF001 - the state bucket the ledger lives in
        window_path("daily-data", "w20261201t090000z"),
        {"window_id": "w20261201t090000z", "state": "closing", "request_digest": content_digest(published)},
    )
    other = {**published, "max_attempts": 9}

    squatted = harness.deliver(json.dumps(other).encode(), message_id="m-squat")
    real = harness.deliver(json.dumps(published).encode(), message_id="m-trigger")

    assert squatted.result == SubmitResult.INVALID
    assert real.result == SubmitResult.CREATED and real.request_id == request_id
