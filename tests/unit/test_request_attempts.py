"""Attempts of a request: where and how each runs, the ledger transitions that make it exactly-once,
and the CustomJob an attempt creates. Pure functions: no clients."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.adapters.vertex import build_job_json, label_filter, may_have_created, to_custom_job, to_job_json
from shared.errors import InvalidRequest
from shared.jobs import JobState, is_terminal, state_name
from shared.ledger.claims import ClaimInProgress, claim_attempt, fail_attempt, record_job, release_claim
from shared.ledger.records import Attempt, RequestRecord, Requeue
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.requests.attempts import plan_attempt
from shared.requests.envelope import canonical_envelope, read_request
from shared.settings import Settings
from tests.conftest import load_event

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
LEASE = 120.0
OUTPUT_DIR = "gs://ckpt/requests/r1/"


def envelope(**overrides: Any) -> dict[str, Any]:
    base = {
        "schema_version": 1,
        "request_id": "r1",
        "custom_job": json.loads(load_event("requests/bare_docs.json")),
        "location": "us-central1",
        "locations": [],
        "max_attempts": 3,
        "fallback": None,
        "checkpoints": None,
    }
    return {**base, **overrides}


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def claim(current: RequestRecord | None, n: int = 1, now: datetime = NOW, **env: Any):
    return claim_attempt(current, envelope=envelope(**env), n=n, now=now, lease_seconds=LEASE, output_dir=OUTPUT_DIR)


def record_with(
    *attempts: Attempt, status: str = RequestStatus.SUBMITTED, requeue: Requeue | None = None
) -> RequestRecord:
    return RequestRecord("r1", envelope(), OUTPUT_DIR, status=status, attempts=list(attempts), requeue=requeue)


# plan_attempt


@pytest.mark.parametrize(
    "request_fields, n, previous, after_stockout, expected",
    [
        ({}, 1, None, False, ("us-central1", "SPOT")),
        (
            {"fallback": {"after_spot_attempts": 0, "strategy": "STANDARD"}},
            1,
            None,
            False,
            ("us-central1", "STANDARD"),
        ),
        (
            {"fallback": {"after_spot_attempts": 2, "strategy": "STANDARD"}},
            2,
            Attempt(1, "us-central1", "SPOT", ""),
            False,
            ("us-central1", "SPOT"),
        ),
        (
            {"fallback": {"after_spot_attempts": 2, "strategy": "STANDARD"}},
            3,
            Attempt(2, "us-central1", "SPOT", ""),
            False,
            ("us-central1", "STANDARD"),
        ),
        (
            {"fallback": {"after_spot_attempts": 1, "strategy": "FLEX_START"}},
            2,
            Attempt(1, "us-central1", "SPOT", ""),
            False,
            ("us-central1", "FLEX_START"),
        ),
        # Failover: after a stockout, the next region in `locations`, wrapping around.
        (
            {"location": "us-central1", "locations": ["us-central1", "europe-west4", "asia-east1"]},
            2,
            Attempt(1, "us-central1", "SPOT", ""),
            True,
            ("europe-west4", "SPOT"),
        ),
        (
            {"location": "us-central1", "locations": ["us-central1", "europe-west4", "asia-east1"]},
            3,
            Attempt(2, "asia-east1", "SPOT", ""),
            True,
            ("us-central1", "SPOT"),
        ),
        # Without a stockout the attempt stays where the previous one ran.
        (
            {"location": "us-central1", "locations": ["us-central1", "europe-west4"]},
            2,
            Attempt(1, "europe-west4", "SPOT", ""),
            False,
            ("europe-west4", "SPOT"),
        ),
        # A single region has nowhere to go.
        (
            {"location": "us-central1", "locations": []},
            2,
            Attempt(1, "us-central1", "SPOT", ""),
            True,
            ("us-central1", "SPOT"),
        ),
        # A previous region outside the list restarts the tour at its head.
        (
            {"location": "us-east4", "locations": ["us-central1", "europe-west4"]},
            2,
            Attempt(1, "us-east4", "SPOT", ""),
            True,
            ("us-central1", "SPOT"),
        ),
    ],
)
def test_plan_attempt(
    request_fields: dict,
    n: int,
    previous: Attempt | None,
    after_stockout: bool,
    expected: tuple[str, str],
) -> None:
    assert plan_attempt(envelope(**request_fields), n, previous, after_stockout) == expected


# claim_attempt


def test_attempt_one_of_a_new_request_creates_the_record_with_its_claim() -> None:
    result = claim(None, fallback={"after_spot_attempts": 0, "strategy": "STANDARD"})
    assert result.kind == "claimed" and result.writes
    record = result.record
    assert record.request_id == "r1" and record.status == RequestStatus.CLAIMED and record.output_dir == OUTPUT_DIR
    assert record.attempts == [Attempt(1, "us-central1", "STANDARD", claimed_at="2026-11-29T12:00:00.000Z")]
    assert record.request["custom_job"]["displayName"] == "spot-training-job"


def test_any_later_publish_of_attempt_one_is_a_duplicate_whatever_the_status() -> None:
    for status in (
        RequestStatus.SUBMITTED,
        RequestStatus.RUNNING,
        RequestStatus.REQUEUED,
        RequestStatus.SUCCEEDED,
        RequestStatus.FAILED,
    ):
        created = Attempt(1, "us-central1", "SPOT", iso(NOW), job="projects/p/locations/l/customJobs/1")
        result = claim(record_with(created, status=status))
        assert result.kind == "duplicate" and not result.writes and result.attempt == created


def test_a_fresh_claim_without_a_job_means_another_delivery_is_creating_it() -> None:
    pending = record_with(
        Attempt(1, "us-central1", "SPOT", iso(NOW - timedelta(seconds=LEASE - 1))),
        status=RequestStatus.CLAIMED,
    )
    with pytest.raises(ClaimInProgress):
        claim(pending)


def test_a_stale_claim_is_taken_over_with_a_new_lease() -> None:
    stale = record_with(
        Attempt(1, "us-central1", "SPOT", iso(NOW - timedelta(seconds=LEASE))),
        status=RequestStatus.CLAIMED,
    )
    result = claim(stale)
    assert result.kind == "taken_over" and result.writes
    assert result.attempt.claimed_at == iso(NOW) and result.record.attempt(1).claimed_at == iso(NOW)


def test_a_requeued_attempt_is_claimed_where_the_requeue_decided() -> None:
    first = Attempt(1, "us-central1", "SPOT", iso(NOW), job="j1", outcome="requeued")
    requeue = Requeue(
        attempt=2,
        location="europe-west4",
        strategy="STANDARD",
        reason="stockout",
        decided_at=iso(NOW),
        message_id="m",
    )
    result = claim(record_with(first, status=RequestStatus.REQUEUED, requeue=requeue), n=2)
    assert result.kind == "claimed"
    assert result.record.requeue is None and result.record.status == RequestStatus.CLAIMED
    assert result.record.attempts[-1] == Attempt(2, "europe-west4", "STANDARD", claimed_at=iso(NOW))


@pytest.mark.parametrize(
    "record",
    [
        None,  # no record at all
        record_with(Attempt(1, "us-central1", "SPOT", iso(NOW), job="j1")),  # nothing re-queued
        record_with(
            Attempt(1, "us-central1", "SPOT", iso(NOW), job="j1"),
            requeue=Requeue(attempt=2, location="l", strategy="SPOT", reason="r", decided_at=iso(NOW)),
        ),  # attempt 2 is queued, not 3
    ],
    ids=["no-record", "no-requeue", "other-attempt-queued"],
)
def test_an_attempt_the_ledger_does_not_expect_is_invalid(record: RequestRecord | None) -> None:
    with pytest.raises(InvalidRequest) as caught:
        claim(record, n=3)
    assert [v.path for v in caught.value.violations] == ["attempt"]
    assert "set by the system" in str(caught.value)


def test_a_requeue_arriving_after_the_request_ended_is_a_duplicate() -> None:
    cancelled = record_with(
        Attempt(1, "us-central1", "SPOT", iso(NOW), job="j1"),
        status=RequestStatus.CANCELLED,
        requeue=Requeue(attempt=2, location="l", strategy="SPOT", reason="r", decided_at=iso(NOW)),
    )
    assert claim(cancelled, n=2).kind == "duplicate"


def test_a_failed_attempt_without_a_job_is_not_retried() -> None:
    failed = record_with(
        Attempt(1, "us-central1", "SPOT", iso(NOW - timedelta(hours=1)), outcome="failed"),
        status=RequestStatus.FAILED,
    )
    assert claim(failed).kind == "duplicate"


# record_job, fail_attempt, release_claim


def test_recording_the_job_submits_the_request_once() -> None:
    pending = record_with(Attempt(1, "us-central1", "SPOT", iso(NOW)), status=RequestStatus.CLAIMED)
    recorded = record_job(
        pending,
        n=1,
        job_name="projects/p/locations/l/customJobs/7",
        state=JobState.QUEUED,
        created_at=iso(NOW),
    )
    assert recorded is not None and recorded.status == RequestStatus.SUBMITTED
    assert recorded.attempt(1).job == "projects/p/locations/l/customJobs/7"
    assert recorded.attempt(1).state == JobState.QUEUED and recorded.attempt(1).created_at == iso(NOW)
    assert record_job(recorded, n=1, job_name="projects/p/locations/l/customJobs/8", state="x", created_at="y") is None


def test_recording_keeps_a_state_the_events_function_saw_first() -> None:
    running = record_with(
        Attempt(1, "us-central1", "SPOT", iso(NOW), state=JobState.RUNNING), status=RequestStatus.RUNNING
    )
    recorded = record_job(running, n=1, job_name="j", state=JobState.QUEUED, created_at=iso(NOW))
    assert recorded.attempt(1).state == JobState.RUNNING and recorded.status == RequestStatus.RUNNING


def test_a_permanent_refusal_fails_the_request_with_one_alert_pending() -> None:
    pending = record_with(Attempt(1, "us-central1", "SPOT", iso(NOW)), status=RequestStatus.CLAIMED)
    error = {"code": 400, "message": "bad"}
    failed = fail_attempt(pending, n=1, error=error, now=NOW, reason="refused: bad")
    assert failed.status == RequestStatus.FAILED and failed.finished_at == iso(NOW)
    assert failed.attempt(1).outcome == "failed" and failed.attempt(1).error == error
    assert failed.markers == ["submit_failed:1"]
    [alert] = failed.pending_alerts  # the outbox publishes it, at least once
    assert (alert["kind"], alert["attempt"], alert["message"]) == ("submit_failed", 1, "r1: refused: bad")
    assert fail_attempt(failed, n=1, error=error, now=NOW, reason="again") is None


def test_releasing_a_claim_backdates_only_our_own_claim() -> None:
    ours = iso(NOW)
    pending = record_with(Attempt(1, "us-central1", "SPOT", ours), status=RequestStatus.CLAIMED)
    released = release_claim(pending, n=1, claimed_at=ours, now=NOW, lease_seconds=LEASE)
    assert released.attempt(1).claimed_at == iso(NOW - timedelta(seconds=LEASE))
    assert claim(released).kind == "taken_over"  # the redelivery need not wait
    assert (
        release_claim(
            record_with(Attempt(1, "l", "SPOT", "someone-else")),
            n=1,
            claimed_at=ours,
            now=NOW,
            lease_seconds=LEASE,
        )
        is None
    )


# The CustomJob an attempt creates


def test_the_job_is_the_request_plus_spot_labels_output_dir_and_service_account() -> None:
    user_job = json.loads(load_event("requests/bare_docs.json"))
    user_job["labels"] = {"team": "vision"}
    job = build_job_json(
        user_job,
        request_id="r1",
        attempt=2,
        strategy="SPOT",
        output_dir=OUTPUT_DIR,
        deployment="prod",
        commit_markers=("COMMITTED", "done.txt"),
        service_account="trainer@p.iam.gserviceaccount.com",
    )
    assert job["labels"] == {
        "team": "vision",
        "spotjobs-request-id": "r1",
        "spotjobs-attempt": "2",
        "spotjobs-deployment": "prod",
    }
    assert job["jobSpec"]["scheduling"]["strategy"] == "SPOT"
    assert job["jobSpec"]["baseOutputDirectory"] == {"outputUriPrefix": OUTPUT_DIR}
    assert job["jobSpec"]["serviceAccount"] == "trainer@p.iam.gserviceaccount.com"
    [pool] = job["jobSpec"]["workerPoolSpecs"]
    assert pool["containerSpec"]["env"] == [
        {"name": "SPOTJOBS_REQUEST_ID", "value": "r1"},
        {"name": "SPOTJOBS_ATTEMPT", "value": "2"},
        {"name": "SPOTJOBS_COMMIT_MARKERS", "value": "COMMITTED,done.txt"},
    ]
    del pool["containerSpec"]["env"]
    assert job["jobSpec"]["workerPoolSpecs"] == user_job["jobSpec"]["workerPoolSpecs"]
    assert job["displayName"] == "spot-training-job"
    assert user_job["labels"] == {"team": "vision"}  # the request itself is untouched
    assert to_job_json(to_custom_job(job))["jobSpec"]["scheduling"] == {"strategy": "SPOT"}


def test_a_job_without_display_name_or_scheduling_gets_them_and_keeps_its_own_account() -> None:
    user_job = json.loads(load_event("requests/bare_docs.json"))
    del user_job["displayName"], user_job["jobSpec"]["scheduling"]
    user_job["jobSpec"]["serviceAccount"] = "own@p.iam.gserviceaccount.com"
    job = build_job_json(
        user_job,
        request_id="r1",
        attempt=3,
        strategy="STANDARD",
        output_dir=OUTPUT_DIR,
        deployment="d",
        commit_markers=Settings.commit_markers,
        service_account="d@p",
    )
    assert job["displayName"] == "r1-a3"
    assert job["jobSpec"]["scheduling"] == {"strategy": "STANDARD"}
    assert job["jobSpec"]["serviceAccount"] == "own@p.iam.gserviceaccount.com"


def test_the_canonical_envelope_builds_the_same_job_as_the_message() -> None:
    request, _ = read_request(load_event("requests/envelope_full.json"), attributes={}, max_bytes=10**6)
    stored = canonical_envelope(request, default_location="us-east1", default_max_attempts=3)
    job = build_job_json(
        stored["custom_job"],
        request_id="resnet-nightly-001",
        attempt=1,
        strategy="SPOT",
        output_dir=OUTPUT_DIR,
        deployment="d",
        commit_markers=Settings.commit_markers,
    )
    pool = to_custom_job(job).job_spec.worker_pool_specs[0]
    assert pool.replica_count == 1 and pool.machine_spec.accelerator_count == 8
    assert list(pool.container_spec.args) == ["--epochs", "90"]


def test_an_attempts_job_is_the_built_job_converted_on_every_call_and_on_the_memo() -> None:
    from shared.adapters.vertex import _serialized_job, attempt_custom_job

    user_job = json.loads(load_event("requests/bare_docs.json"))
    user_job["labels"] = {"team": "vision"}
    for attempt, kit_key, markers in ((1, None, ["COMMITTED"]), (2, "k2", ("COMMITTED", "done.txt"))):
        fields = {
            "request_id": "r1",
            "attempt": attempt,
            "strategy": "FLEX_START",
            "output_dir": OUTPUT_DIR,
            "deployment": "prod",
            "commit_markers": markers,
            "service_account": "trainer@p.iam.gserviceaccount.com",
            "kit_key": kit_key,
        }
        expected = to_custom_job(build_job_json(user_job, **fields))
        _serialized_job.cache_clear()
        first, again = attempt_custom_job(user_job, **fields), attempt_custom_job(user_job, **fields)
        assert first == again == expected
        assert first is not again  # a message of its own each time: a caller may change it
        assert _serialized_job.cache_info().hits == 1
    assert user_job["labels"] == {"team": "vision"}  # the request itself is untouched


# Vertex helpers


@pytest.mark.parametrize(
    "state, name, terminal",
    [
        (1, JobState.QUEUED, False),
        (3, JobState.RUNNING, False),
        (4, JobState.SUCCEEDED, True),
        (5, JobState.FAILED, True),
        (7, JobState.CANCELLED, True),
        ("JOB_STATE_PENDING", JobState.PENDING, False),
        ("EXPIRED", JobState.EXPIRED, True),
    ],
)
def test_job_state_names(state: object, name: str, terminal: bool) -> None:
    assert state_name(state) == name and is_terminal(state) is terminal


def test_job_state_enum_members_are_named() -> None:
    from google.cloud.aiplatform_v1 import JobState as Enum

    assert state_name(Enum.JOB_STATE_RUNNING) == JobState.RUNNING


def test_label_filters() -> None:
    assert label_filter({"spotjobs-request-id": "r1", "spotjobs-attempt": "2"}) == (
        'labels.spotjobs-attempt="2" AND labels.spotjobs-request-id="r1"'
    )


@pytest.mark.parametrize(
    "exc, ambiguous",
    [
        ("DeadlineExceeded", True),
        ("GatewayTimeout", True),
        ("InternalServerError", True),
        ("ServiceUnavailable", True),  # gRPC UNAVAILABLE may come after the server accepted it
        ("TooManyRequests", False),
        ("ResourceExhausted", False),
        ("InvalidArgument", False),
        ("PermissionDenied", False),
        ("NotFound", False),
        ("MethodNotImplemented", False),
        # gRPC codes production meets (only the emulator is reached over REST): each can arrive
        # after Vertex accepted the create, so the job is looked up, never taken as refused.
        ("Unknown", True),
        ("Cancelled", True),
        ("DataLoss", True),
        ("Aborted", True),
    ],
)
def test_which_failed_creates_may_have_created_the_job(exc: str, ambiguous: bool) -> None:
    from google.api_core import exceptions as api

    assert may_have_created(getattr(api, exc)("x")) is ambiguous


def test_transport_failures_after_sending_are_ambiguous_before_sending_are_not() -> None:
    import requests

    assert may_have_created(requests.ReadTimeout("read")) is True
    assert may_have_created(requests.ConnectionError("reset")) is True
    assert may_have_created(requests.ConnectTimeout("connect")) is False
    assert may_have_created(ValueError("an error nobody classified")) is True


# The attempt's kit key (issue 32, item 1)


def test_each_attempt_draws_its_own_kit_key_and_a_takeover_keeps_it() -> None:
    first = claim(None)
    key = first.attempt.kit_key
    assert key and len(bytes.fromhex(key)) == 32
    stale = NOW + timedelta(seconds=LEASE + 1)
    assert claim(first.record, now=stale).attempt.kit_key == key  # the same create, sent again
    first.attempt.job, first.attempt.outcome = "j1", "requeued"
    first.record.requeue = Requeue(2, "us-central1", "SPOT", "preemption", iso(NOW))
    second = claim(first.record, n=2)
    assert second.attempt.kit_key and second.attempt.kit_key != key
    assert claim(None).attempt.kit_key != key  # another request's first attempt


def test_the_kit_key_is_stored_and_never_shown() -> None:
    record = claim(None).record
    key = record.attempts[0].kit_key
    stored = RequestRecord.from_json(json.loads(json.dumps(record.to_document())))
    assert stored.attempts[0].kit_key == key
    assert key not in json.dumps(record.to_json()) and key not in repr(record)


def test_the_attempts_kit_key_reaches_every_container_and_package() -> None:
    user_job = json.loads(load_event("requests/bare_docs.json"))
    pools = user_job["jobSpec"]["workerPoolSpecs"]
    pools.append({"pythonPackageSpec": {"executorImageUri": "i", "packageUris": ["gs://b/p"], "pythonModule": "m"}})
    job = build_job_json(
        user_job,
        request_id="r1",
        attempt=1,
        strategy="SPOT",
        output_dir=OUTPUT_DIR,
        deployment="d",
        commit_markers=Settings.commit_markers,
        kit_key="ab" * 32,
    )
    envs = [
        pool.get("containerSpec", pool.get("pythonPackageSpec"))["env"] for pool in job["jobSpec"]["workerPoolSpecs"]
    ]
    assert [{e["name"]: e["value"] for e in env}["SPOTJOBS_KIT_KEY"] for env in envs] == ["ab" * 32] * 2


def test_a_stale_claim_is_not_taken_over_by_another_body_under_its_id() -> None:
    # Found by the simulator's hostile publisher (seed 609): a message reusing a waiting request's
    # id with a body of its own took over that request's claim, a write to another's record.
    stale = record_with(
        Attempt(1, "us-central1", "SPOT", iso(NOW - timedelta(seconds=LEASE))),
        status=RequestStatus.CLAIMED,
    )
    result = claim(stale, priority=100)
    assert result.kind == "duplicate" and not result.writes
    assert result.record.attempt(1).claimed_at == iso(NOW - timedelta(seconds=LEASE))


def test_a_forged_requeue_of_attempt_1_with_another_body_does_not_take_a_stale_claim_over() -> None:
    # Found by the simulator's hostile publisher (seed 830): the re-queue marker is anyone's to set.
    stale = record_with(
        Attempt(1, "us-central1", "SPOT", iso(NOW - timedelta(seconds=LEASE))),
        status=RequestStatus.CLAIMED,
    )
    forged = claim_attempt(
        stale,
        envelope=envelope(priority=100),
        n=1,
        now=NOW,
        lease_seconds=LEASE,
        output_dir=OUTPUT_DIR,
        requeued=True,
    )
    assert forged.kind == "duplicate" and not forged.writes
    handed_over = claim_attempt(
        stale, envelope=envelope(), n=1, now=NOW, lease_seconds=LEASE, output_dir=OUTPUT_DIR, requeued=True
    )
    assert handed_over.kind == "taken_over"  # the line's own hand-over carries the stored body


def test_a_forged_requeue_of_a_later_attempt_with_another_body_does_not_take_a_stale_claim_over() -> None:
    # Found by the simulator (seed 31, once placement moved waiting jobs): the system's re-queue
    # of attempt 2 dead-lettered with its claim stale, and a hostile publisher's full re-queue of
    # attempt 2, its own body under the victim's id, took the claim over and had the job created.
    stale = record_with(
        Attempt(1, "us-central1", "SPOT", iso(NOW - timedelta(hours=1)), outcome=AttemptOutcome.MOVED),
        Attempt(2, "us-east4", "SPOT", iso(NOW - timedelta(seconds=LEASE))),
        status=RequestStatus.CLAIMED,
    )

    def claim_2(body: dict[str, Any]) -> Any:
        return claim_attempt(
            stale, envelope=body, n=2, now=NOW, lease_seconds=LEASE, output_dir=OUTPUT_DIR, requeued=True
        )

    forged = claim_2(envelope(custom_job={"displayName": "mine"}, location="us-east4"))
    assert forged.kind == "duplicate" and not forged.writes
    # the system's own re-queue carries the stored body, run in the attempt's location
    assert claim_2(envelope(location="us-east4")).kind == "taken_over"


def test_the_lines_hand_over_of_attempt_1_placed_in_another_location_takes_its_stale_claim_over() -> None:
    # Found by the simulator (seed 266): placement ran attempt 1 in the request's second location;
    # the quota line's hand-over re-publishes it there, and was taken for another body for ever.
    stale = record_with(
        Attempt(1, "us-east4", "SPOT", iso(NOW - timedelta(seconds=LEASE))), status=RequestStatus.CLAIMED
    )
    handed_over = claim_attempt(
        stale,
        envelope=envelope(location="us-east4"),
        n=1,
        now=NOW,
        lease_seconds=LEASE,
        output_dir=OUTPUT_DIR,
        requeued=True,
    )
    assert handed_over.kind == "taken_over"


def test_a_job_converted_again_is_a_message_and_a_json_of_its_own() -> None:
    """The conversions remember what they parsed; each call still hands out a new object."""
    job_json = {
        "displayName": "t",
        "labels": {"b": "2", "a": "1"},
        "jobSpec": {"workerPoolSpecs": [{"replicaCount": "1"}]},
    }
    first = to_custom_job(job_json)
    first.display_name = "changed"
    first.labels["c"] = "3"
    second = to_custom_job(job_json)
    shown = to_job_json(second)
    shown["labels"]["c"] = "3"

    assert second.display_name == "t" and dict(second.labels) == {"b": "2", "a": "1"}
    assert to_job_json(second) == job_json and to_job_json(first)["displayName"] == "changed"
