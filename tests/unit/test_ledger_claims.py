"""The transitions of an attempt before its job runs (shared/ledger/claims.py), at their edges: the
claim's lease to the instant, a re-queue marker on a message the ledger has no record of, another
body under the same id, an attempt's signing key, a job recorded late for an earlier attempt, the
create's send noted only by the claim's holder, and the alerts a failure decides once, with their
evidence. tests/unit/test_request_attempts.py drives the common paths."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.clock import iso
from shared.jobs import JobState
from shared.ledger.cancelling import settle_cancel
from shared.ledger.claims import (
    ClaimInProgress,
    claim_attempt,
    fail_attempt,
    fail_invalid_requeue,
    invalid_request_alert,
    mark_create_sent,
    new_kit_key,
    record_job,
    release_claim,
)
from shared.ledger.records import Attempt, CancelIntent, RequestRecord, Requeue
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.requests.envelope import InvalidJobRequest, requeue_message

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
LEASE = 120.0
JOB = "projects/p/locations/us-central1/customJobs/7"


def envelope(**overrides: Any) -> dict[str, Any]:
    base = {
        "schema_version": 1,
        "request_id": "r1",
        "custom_job": {"displayName": "train"},
        "location": "us-central1",
        "locations": [],
        "max_attempts": 3,
        "fallback": None,
        "checkpoints": None,
    }
    return {**base, **overrides}


def claim(current: RequestRecord | None, n: int = 1, now: datetime = NOW, requeued: bool = False, **env: Any):
    return claim_attempt(
        current, envelope=envelope(**env), n=n, now=now, lease_seconds=LEASE, output_dir="gs://b/r1/", requeued=requeued
    )


def record(*attempts: Attempt, status: RequestStatus = RequestStatus.CLAIMED, **fields: Any) -> RequestRecord:
    return RequestRecord("r1", envelope(), "gs://b/r1/", status=status, attempts=list(attempts), **fields)


def claimed_at(seconds_ago: float) -> Attempt:
    return Attempt(1, "us-central1", "SPOT", iso(NOW - timedelta(seconds=seconds_ago)))


# ---- claim_attempt ------------------------------------------------------------------------------


def test_a_claim_younger_than_its_lease_is_in_progress_and_one_exactly_as_old_is_taken_over() -> None:
    with pytest.raises(ClaimInProgress, match="claimed 120s ago") as raised:
        claim(record(claimed_at(LEASE - 0.001)))
    assert "120s lease" in str(raised.value)
    taken = claim(record(claimed_at(LEASE)))
    assert taken.kind == "taken_over" and taken.attempt.claimed_at == iso(NOW)


def test_a_new_requests_first_attempt_is_planned_as_attempt_one() -> None:
    spot_first = claim(None, fallback={"after_spot_attempts": 1, "strategy": "STANDARD"})
    assert (spot_first.attempt.n, spot_first.attempt.strategy, spot_first.attempt.location) == (
        1,
        "SPOT",
        "us-central1",
    )
    on_demand = claim(None, fallback={"after_spot_attempts": 0, "strategy": "STANDARD"})
    assert on_demand.attempt.strategy == "STANDARD"


def test_a_message_marked_as_a_requeue_is_never_a_new_request() -> None:
    with pytest.raises(InvalidJobRequest) as raised:
        claim(None, requeued=True)
    assert raised.value.request_id == "r1" and raised.value.attempt == 1
    assert "the request has no record" in str(raised.value)


def test_an_attempt_later_than_the_queued_one_is_refused_naming_the_queued_one() -> None:
    queued = Requeue(2, "us-central1", "SPOT", "preempted", iso(NOW))
    first = Attempt(1, "us-central1", "SPOT", iso(NOW), job=JOB, outcome=AttemptOutcome.REQUEUED)
    with pytest.raises(InvalidJobRequest, match="attempt 2 is queued") as raised:
        claim(record(first, status=RequestStatus.REQUEUED, requeue=queued), n=3)
    assert raised.value.attempt == 3
    with pytest.raises(InvalidJobRequest, match="no re-queue is pending"):
        claim(record(first, status=RequestStatus.REQUEUED), n=2)


def test_a_new_attempt_and_a_requeued_one_each_get_a_signing_key_of_their_own() -> None:
    first = claim(None).attempt
    assert len(first.kit_key) == 64 and int(first.kit_key, 16) >= 0  # 32 random bytes, as hex
    assert len(new_kit_key()) == 64 and new_kit_key() != new_kit_key()
    done = Attempt(1, "us-central1", "SPOT", iso(NOW), job=JOB, outcome=AttemptOutcome.REQUEUED, kit_key=first.kit_key)
    queued = Requeue(2, "europe-west4", "SPOT", "stockout", iso(NOW))
    second = claim(record(done, status=RequestStatus.REQUEUED, requeue=queued), n=2).attempt
    assert second.kit_key and len(second.kit_key) == 64 and second.kit_key != first.kit_key


def test_a_takeover_keeps_the_attempts_signing_key() -> None:
    stale = claimed_at(LEASE)
    stale.kit_key = "k" * 64
    assert claim(record(stale)).attempt.kit_key == "k" * 64


def test_a_message_of_a_cancelled_request_names_the_attempt_it_asked_for_or_the_latest() -> None:
    attempts = [Attempt(1, "us-central1", "SPOT", iso(NOW), job=JOB, outcome=AttemptOutcome.REQUEUED)]
    cancelled = record(*attempts, status=RequestStatus.REQUEUED, cancel=CancelIntent("ana", iso(NOW)))
    assert claim(cancelled, n=1).attempt is cancelled.attempts[0]
    assert claim(cancelled, n=2, requeued=True).attempt is cancelled.attempts[0]  # no attempt 2: the latest


def test_another_body_under_the_same_id_never_takes_a_claim_over() -> None:
    stale = record(claimed_at(10 * LEASE))
    conflict = claim(stale, custom_job={"displayName": "another"})
    assert conflict.kind == "duplicate" and conflict.attempt.claimed_at == stale.attempts[0].claimed_at
    moved = claim(stale, location="europe-west4")  # the line's hand-over: the stored body, another location
    assert moved.kind == "taken_over"


def test_a_copy_published_a_lease_before_the_claims_last_republish_is_superseded_by_it() -> None:
    # Seed 1733: a stalled claim re-published hourly while its earlier copies still queued; each
    # copy took the claim over and sent one more create, so the copies' creates filled the pace.
    stalled = claimed_at(3 * LEASE)
    stalled.republished, stalled.republished_at = 4, iso(NOW - timedelta(seconds=LEASE))

    def delivered(published_at: datetime | None) -> Any:
        return claim_attempt(
            record(copy.deepcopy(stalled)),  # each delivery against the record as re-published
            envelope=envelope(),
            n=1,
            now=NOW,
            lease_seconds=LEASE,
            output_dir="gs://b/r1/",
            published_at=published_at,
        )

    earlier = delivered(NOW - timedelta(seconds=2 * LEASE))  # a lease before the re-publish
    assert earlier.kind == "superseded" and not earlier.writes
    assert earlier.attempt.claimed_at == stalled.claimed_at
    assert delivered(NOW - timedelta(seconds=2 * LEASE - 0.001)).kind == "taken_over"  # clocks may differ
    assert delivered(NOW).kind == "taken_over"  # the re-publish itself, or Pub/Sub's redelivery of it
    assert delivered(None).kind == "taken_over"  # the line's drainer delivers no message


def test_an_ended_attempt_or_a_finished_request_is_a_duplicate_even_with_a_stale_claim() -> None:
    ended = claimed_at(10 * LEASE)
    ended.outcome = AttemptOutcome.FAILED
    assert claim(record(ended, status=RequestStatus.FAILED)).kind == "duplicate"
    open_attempt = claimed_at(10 * LEASE)
    assert claim(record(open_attempt, status=RequestStatus.CANCELLED)).kind == "duplicate"


def test_attempt_one_of_a_request_with_later_attempts_is_a_duplicate_of_the_latest() -> None:
    first = Attempt(1, "us-central1", "SPOT", iso(NOW), job=JOB, outcome=AttemptOutcome.REQUEUED)
    second = Attempt(2, "us-central1", "SPOT", iso(NOW))
    current = record(first, second)
    current.attempts.remove(first)  # attempt 1 unknown to the record: nothing to claim
    result = claim(current, n=1)
    assert result.kind == "duplicate" and result.attempt is current.latest


# ---- record_job -----------------------------------------------------------------------------------


def test_a_job_found_late_for_an_earlier_attempt_leaves_the_requests_status() -> None:
    first = Attempt(1, "us-central1", "SPOT", iso(NOW), outcome=None)
    second = Attempt(2, "us-central1", "SPOT", iso(NOW))
    recorded = record_job(record(first, second), n=1, job_name=JOB, state=JobState.QUEUED, created_at=iso(NOW))
    assert recorded.attempt(1).job == JOB and recorded.status is RequestStatus.CLAIMED


def test_a_job_of_an_attempt_the_record_lacks_or_of_no_record_writes_nothing() -> None:
    assert record_job(None, n=1, job_name=JOB, state=JobState.QUEUED, created_at=None) is None
    assert record_job(record(claimed_at(0)), n=2, job_name=JOB, state=JobState.QUEUED, created_at=None) is None


def test_a_job_recorded_for_a_cancelled_request_gets_its_cancel_pending() -> None:
    sent = claimed_at(0)
    sent.create_sent_at = iso(NOW)
    cancelled = record(sent, cancel=CancelIntent("ana", iso(NOW)))
    recorded = record_job(cancelled, n=1, job_name=JOB, state=JobState.QUEUED, created_at=iso(NOW))
    assert recorded.attempt(1).cancel_pending
    ended = record(claimed_at(0), cancel=CancelIntent("ana", iso(NOW)))
    found = record_job(ended, n=1, job_name=JOB, state=JobState.CANCELLED, created_at=iso(NOW))
    assert found.attempt(1).cancel_decided_at is None  # its job has ended: nothing to cancel
    plain = record_job(record(claimed_at(0)), n=1, job_name=JOB, state=JobState.QUEUED, created_at=None)
    assert plain.attempt(1).cancel_decided_at is None


def test_a_job_found_already_ended_is_recorded_with_vertexs_start_and_end() -> None:
    """Adopted after it ended (its create's reply lost), the job's own times are kept with its
    state: a cancel that settles the request before any decision read it ends the attempt when
    Vertex ended it, not when a later line came (the fleet then read a wait the job never had:
    simulator seed 36, a 4,084 s wait for a job that lived 152 s)."""
    cancelled = record(claimed_at(0), cancel=CancelIntent("ana", iso(NOW)))
    found = record_job(
        cancelled,
        n=1,
        job_name=JOB,
        state=JobState.SUCCEEDED,
        created_at=iso(NOW),
        started_at=iso(NOW + timedelta(seconds=90)),
        ended_at=iso(NOW + timedelta(seconds=150)),
    )
    attempt = found.attempt(1)
    assert (attempt.started_at, attempt.ended_at) == (
        iso(NOW + timedelta(seconds=90)),
        iso(NOW + timedelta(seconds=150)),
    )
    assert settle_cancel(found, NOW + timedelta(hours=1))
    assert found.attempt(1).ended_at == iso(NOW + timedelta(seconds=150))
    running = record_job(
        record(claimed_at(0)), n=1, job_name=JOB, state=JobState.RUNNING, created_at=iso(NOW), ended_at=None
    )
    assert running.attempt(1).ended_at is None


# ---- mark_create_sent, release_claim -------------------------------------------------------------


def test_only_the_claims_holder_notes_its_send_and_only_before_the_attempt_settles() -> None:
    ours = iso(NOW - timedelta(seconds=5))
    pending = record(Attempt(1, "us-central1", "SPOT", ours))
    noted = mark_create_sent(pending, n=1, claimed_at=ours, now=NOW)
    assert noted.attempt(1).create_sent_at == iso(NOW)
    assert mark_create_sent(record(Attempt(1, "l", "SPOT", ours)), n=1, claimed_at=iso(NOW), now=NOW) is None
    assert mark_create_sent(record(Attempt(1, "l", "SPOT", ours, job=JOB)), n=1, claimed_at=ours, now=NOW) is None
    failed = Attempt(1, "l", "SPOT", ours, outcome=AttemptOutcome.FAILED)
    assert mark_create_sent(record(failed), n=1, claimed_at=ours, now=NOW) is None
    assert mark_create_sent(record(Attempt(1, "l", "SPOT", ours)), n=2, claimed_at=ours, now=NOW) is None
    assert mark_create_sent(None, n=1, claimed_at=ours, now=NOW) is None


def test_a_cancelled_request_sends_no_create_even_on_a_claim_whose_earlier_send_keeps_it_open() -> None:
    # Seed 48: a delivery noted its send and died before it; the cancel left the attempt open (that
    # create might land); the delivery that took the claim over must not send a second one.
    earlier, ours = iso(NOW - timedelta(seconds=130)), iso(NOW - timedelta(seconds=5))
    open_send = Attempt(1, "us-central1", "SPOT", ours, create_sent_at=earlier)
    cancelled = record(open_send, cancel=CancelIntent("ana", iso(NOW - timedelta(seconds=2))))
    assert mark_create_sent(cancelled, n=1, claimed_at=ours, now=NOW) is None


def test_a_released_claim_forgets_its_send_and_keeps_the_refusal_as_evidence() -> None:
    ours = iso(NOW - timedelta(seconds=5))
    sent = Attempt(1, "us-central1", "SPOT", ours, create_sent_at=ours)
    released = release_claim(
        record(sent), n=1, claimed_at=ours, now=NOW, lease_seconds=LEASE, error={"code": 429, "message": "busy"}
    )
    attempt = released.attempt(1)
    assert attempt.create_sent_at is None and attempt.claimed_at == iso(NOW - timedelta(seconds=LEASE))
    assert attempt.last_create_error == {"code": 429, "message": "busy", "at": iso(NOW)}
    quiet = release_claim(record(Attempt(1, "l", "SPOT", ours)), n=1, claimed_at=ours, now=NOW, lease_seconds=LEASE)
    assert quiet.attempt(1).last_create_error is None
    with_job = record(Attempt(1, "l", "SPOT", ours, job=JOB))
    assert release_claim(with_job, n=1, claimed_at=ours, now=NOW, lease_seconds=LEASE) is None
    assert release_claim(None, n=1, claimed_at=ours, now=NOW, lease_seconds=LEASE) is None
    assert (
        release_claim(record(Attempt(1, "l", "SPOT", ours)), n=2, claimed_at=ours, now=NOW, lease_seconds=LEASE) is None
    )


# ---- fail_attempt, fail_invalid_requeue ------------------------------------------------------------


def test_a_failed_create_alerts_once_with_its_error_location_and_details() -> None:
    error = {"code": 400, "message": "bad"}
    failed = fail_attempt(record(claimed_at(0)), n=1, error=error, now=NOW, reason="refused", job_name="x")
    (alert,) = failed.pending_alerts
    assert alert["details"] == {"error": error, "location": "us-central1", "job_name": "x"}
    assert alert["request_id"] == "r1" and alert["time"] == iso(NOW) and alert["severity"] == "ERROR"
    assert failed.attempt(1).ended_at == iso(NOW)


def test_a_failure_whose_alert_was_decided_before_decides_no_second() -> None:
    already = record(claimed_at(0), markers=["submit_failed:1"])
    failed = fail_attempt(already, n=1, error={"code": 3}, now=NOW, reason="again")
    assert failed.status is RequestStatus.FAILED and failed.pending_alerts == []


def test_a_failure_of_an_attempt_with_a_job_or_of_no_attempt_writes_nothing() -> None:
    with_job = record(Attempt(1, "l", "SPOT", iso(NOW), job=JOB))
    assert fail_attempt(with_job, n=1, error={}, now=NOW, reason="x") is None
    assert fail_attempt(record(claimed_at(0)), n=2, error={}, now=NOW, reason="x") is None
    assert fail_attempt(None, n=1, error={}, now=NOW, reason="x") is None


def requeued_record(**fields: Any) -> RequestRecord:
    first = Attempt(1, "us-central1", "SPOT", iso(NOW), job=JOB, outcome=AttemptOutcome.REQUEUED)
    queued = Requeue(2, "europe-west4", "SPOT", "stockout", iso(NOW))
    return record(first, status=RequestStatus.REQUEUED, requeue=queued, **fields)


def requeue_body(current: RequestRecord, n: int = 2, location: str = "europe-west4") -> bytes:
    return json.dumps(requeue_message(current.request, n, location)[0]).encode()


def test_the_systems_own_requeue_rejected_by_validation_fails_the_request_with_one_alert() -> None:
    current = requeued_record()
    failed = fail_invalid_requeue(
        current, n=2, now=NOW, violations=["a", "b"], message_id="m-1", data=requeue_body(current)
    )
    assert failed.status is RequestStatus.FAILED and failed.finished_at == iso(NOW) and failed.requeue is None
    (alert,) = failed.pending_alerts
    assert alert["kind"] == "invalid_request" and alert["attempt"] == 2
    assert alert["message"] == "Job request r1 rejected: a; b"
    assert alert["details"] == {"violations": ["a", "b"], "message_id": "m-1"}
    assert failed.markers == ["invalid_request:2"]
    again = fail_invalid_requeue(
        requeued_record(markers=["invalid_request:2"]), n=2, now=NOW, violations=["a"], message_id="m", data=b""
    )
    assert again is None  # not the system's body


def test_a_forged_or_stale_requeue_message_leaves_the_record_alone() -> None:
    current = requeued_record()
    args = {"now": NOW, "violations": ["v"], "message_id": "m"}
    assert fail_invalid_requeue(current, n=3, data=requeue_body(current, 3), **args) is None
    assert fail_invalid_requeue(current, n=2, data=requeue_body(current, 2, "us-central1"), **args) is None
    assert fail_invalid_requeue(current, n=2, data=b"not json", **args) is None
    assert fail_invalid_requeue(record(claimed_at(0)), n=2, data=requeue_body(current), **args) is None
    assert fail_invalid_requeue(None, n=2, data=requeue_body(current), **args) is None
    finished = requeued_record()
    finished.status = RequestStatus.CANCELLED
    assert fail_invalid_requeue(finished, n=2, data=requeue_body(finished), **args) is None


def test_a_requeue_rejected_once_alerted_decides_no_second_alert() -> None:
    current = requeued_record(markers=["invalid_request:2"])
    failed = fail_invalid_requeue(current, n=2, now=NOW, violations=["v"], message_id="m", data=requeue_body(current))
    assert failed.status is RequestStatus.FAILED and failed.pending_alerts == []


def test_an_invalid_request_alert_of_an_unnamed_request_says_so() -> None:
    alert = invalid_request_alert(None, None, ["no body"], "m-9", NOW)
    assert alert.message == "Job request (unnamed) rejected: no body"
    assert alert.request_id is None and alert.attempt is None and alert.time == iso(NOW)
