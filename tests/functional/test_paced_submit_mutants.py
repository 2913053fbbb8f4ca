"""The quota line's side of submit (shared/paced_submit.py), at the edges its mutants found.

`leave_line_unlooked`: a waiting attempt whose job cannot be looked up for good leaves its region's
line (seed 1617), only while pacing is on: with pacing off no drainer serves the line (`in_line`
says so) and its entry is left as it stands, unsaid, for when pacing is on again.

`create_waiting` (the drainer's create of one head): its claim is never a new request's (an attempt
waits in line only once its record has it), so a record deleted meanwhile is not written anew and
no job is created for it (as for a replayed message: simulator seed 1771); a head whose create a
dead drainer sent is looked up, never created twice; one whose create's outcome is unknown is in
doubt; a corrupt record is alerted and leaves the line.

`wait_in_line`, `in_line`, `turned_away`, `pacing_on`: what each says at its edges."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared.clock import iso
from shared.ledger.claims import Claim
from shared.ledger.records import RequestRecord
from shared.ledger.run_lock import ledger_bucket
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.log import Logger
from shared.paced_submit import (
    SubmitSteps,
    create_waiting,
    in_line,
    leave_line_unlooked,
    pacing_on,
    turned_away,
    wait_in_line,
)
from shared.pacing import Pacer, Waiting, priority_of, waiting_entry
from shared.pacing_drainer import IN_DOUBT, SETTLED
from shared.submit import SUBMIT_STEPS
from shared.wiring import Ports
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, make_settings


def _world(gcs_bucket, creates_per_minute: int) -> World:
    settings = make_settings(gcs_bucket.name, SPOTJOBS_VERTEX_CREATES_PER_MINUTE=str(creates_per_minute))
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), settings)


def _waiting_in_line(world: World) -> RequestRecord:
    """req-1's attempt 1, claimed with its create sent and no job recorded, waiting in line."""
    world.submitted()

    def waiting(current: RequestRecord) -> None:
        attempt = current.attempts[0]
        attempt.job, attempt.state, attempt.waiting_since = None, None, iso(world.ports.clock())
        current.status = RequestStatus.CLAIMED

    world.rewrite("req-1", waiting)
    record = world.ledger.get("req-1")
    Pacer(ledger_bucket(world.ledger), world.settings).enqueue(_entry(record))
    return record


def _entry(record: RequestRecord) -> Waiting:
    return waiting_entry(record.attempts[0].location, priority_of(record), record.request_id, 1)


@pytest.mark.parametrize(("creates_per_minute", "leaves"), [(58, True), (0, False)], ids=["paced", "unpaced"])
def test_an_unlooked_attempt_leaves_the_line_only_while_pacing_is_on(
    gcs_bucket, creates_per_minute: int, leaves: bool
) -> None:
    world = _world(gcs_bucket, creates_per_minute)
    record = _waiting_in_line(world)
    log = CapturedLog()

    leave_line_unlooked(record, record.attempts[0], log.logger, world.ports)

    assert Pacer(ledger_bucket(world.ledger), world.settings).has_entry(_entry(record)) is not leaves
    assert len(log.events("quota_left_unlooked")) == int(leaves)


def test_a_request_deleted_while_the_drainer_claims_its_attempt_is_not_written_anew(gcs_bucket) -> None:
    world = _world(gcs_bucket, 58)
    record = _waiting_in_line(world)

    def deleted_first(envelope: dict[str, Any], n: int, log: Logger, ports: Ports) -> Claim:
        # Deleted between the drainer's read of the record (it was there) and its claim.
        world.ledger._bucket.blob("requests/req-1.json").delete()  # noqa: SLF001
        return SUBMIT_STEPS.claim(envelope, n, log, ports)

    create_waiting(
        _entry(record), CapturedLog().logger, world.ports, SubmitSteps(deleted_first, SUBMIT_STEPS.ensure_job)
    )

    assert world.ledger.get("req-1") is None
    assert world.vertex.creates == 0


def test_the_drainer_looks_up_a_head_whose_create_a_dead_drainer_sent_and_never_creates_it_twice(gcs_bucket) -> None:
    """The head's claim, taken over by the next drainer (its lease ran out) before reconcile's
    lookup came: its create was sent (the earlier drainer died before recording the job), so the
    take-over looks the job up by its labels and records it; nothing is created blind."""
    world = _world(gcs_bucket, 58)
    record = _waiting_in_line(world)
    [job] = world.vertex.jobs  # created by the dead drainer's create, labelled, not recorded
    lease = world.settings.claim_lease_seconds

    def create_sent_lease_out(current: RequestRecord) -> None:
        long_ago = iso(world.ports.clock() - timedelta(seconds=2 * lease))
        current.attempts[0].claimed_at = current.attempts[0].create_sent_at = long_ago
        current.attempts[0].waiting_since = long_ago

    world.rewrite("req-1", create_sent_lease_out)
    log = CapturedLog()

    create_waiting(_entry(record), log.logger, world.ports, SUBMIT_STEPS)

    assert world.vertex.creates == 0
    assert world.ledger.get("req-1").attempts[0].job == job
    [turn] = log.events("quota_turn")  # how long it waited in line
    assert 2 * lease <= turn["waited_seconds"] < 2 * lease + 60


def test_a_delivery_of_an_attempt_already_in_line_says_duplicate_with_when_it_first_waited(gcs_bucket) -> None:
    world = _world(gcs_bucket, 58)
    record = _waiting_in_line(world)
    Pacer(ledger_bucket(world.ledger), world.settings).acquire("us-central1")  # another delivery drains
    log = CapturedLog()

    assert wait_in_line(record, record.attempts[0], log.logger, world.ports, SUBMIT_STEPS, paced=False)

    [line] = log.events("duplicate")
    assert "already waits in line; nothing created" in line["message"]
    assert line["waiting_since"] == record.attempts[0].waiting_since  # kept, not its entry's time
    assert log.events("quota_wait") == []


def test_the_drainers_hand_back_of_an_attempt_in_line_says_it_waits_not_duplicate(gcs_bucket) -> None:
    world = _world(gcs_bucket, 58)
    record = _waiting_in_line(world)
    log = CapturedLog()

    assert wait_in_line(record, record.attempts[0], log.logger, world.ports, SUBMIT_STEPS, paced=True)

    [line] = log.events("quota_wait")
    assert "waiting in line for Vertex AI's submission quota" in line["message"]
    assert log.events("duplicate") == []


def test_pacing_is_on_from_one_create_a_minute(gcs_bucket) -> None:
    assert pacing_on(_world(gcs_bucket, 1).ports)
    assert not pacing_on(_world(gcs_bucket, 0).ports)


def test_an_attempt_with_its_job_recorded_is_out_of_line_even_while_its_entry_is_left(gcs_bucket) -> None:
    """A drainer that died after recording the job, before removing the entry: reconcile settles it
    as any attempt with a job; the entry goes at the line's next look."""
    world = _world(gcs_bucket, 58)
    record = _waiting_in_line(world)
    assert in_line(world.ports, record, record.attempts[0])

    record.attempts[0].job = "projects/p/locations/us-central1/customJobs/1"
    assert not in_line(world.ports, record, record.attempts[0])


def test_an_attempt_whose_record_does_not_say_it_waits_is_out_of_line_even_with_an_entry(gcs_bucket) -> None:
    """A delivery that died between writing the entry and noting the wait in the record (entry first,
    then the record): the claim is settled like any stale one."""
    world = _world(gcs_bucket, 58)
    record = _waiting_in_line(world)
    record.attempts[0].waiting_since = None
    assert not in_line(world.ports, record, record.attempts[0])


@pytest.mark.parametrize("creates_per_minute", [0, 58], ids=["unpaced", "never-waited"])
def test_a_create_error_alone_is_no_turning_away(gcs_bucket, creates_per_minute: int) -> None:
    """Turned away is a refusal the line met for an attempt that waited in it: never while pacing
    is off, never for an attempt that never waited (its refusal went to the redelivery)."""
    world = _world(gcs_bucket, creates_per_minute)
    record = _waiting_in_line(world)
    attempt = record.attempts[0]
    attempt.last_create_error = {"code": 429, "message": "gpus", "at": iso(world.ports.clock())}
    Pacer(ledger_bucket(world.ledger), world.settings).remove(_entry(record))
    if creates_per_minute:
        assert turned_away(world.ports, record, attempt)  # it waited, and the line turned it away
        attempt.waiting_since = None
    assert not turned_away(world.ports, record, attempt)


def test_a_corrupt_record_in_line_is_alerted_once_and_leaves_the_line(gcs_bucket) -> None:
    world = _world(gcs_bucket, 58)
    record = _waiting_in_line(world)
    world.ledger._bucket.blob("requests/req-1.json").upload_from_string(b"{not a record")  # noqa: SLF001

    outcome = create_waiting(_entry(record), CapturedLog().logger, world.ports, SUBMIT_STEPS)

    assert outcome == SETTLED
    assert [m.data["kind"] for m in world.publisher.on("ops-alerts")] == ["ledger_corrupt"]


def test_a_head_whose_create_loses_its_answer_is_in_doubt_and_passed_at_once(gcs_bucket) -> None:
    """Its claim was the drainer's own (taken over, never sent before): the create may have made a
    job that the lookup right after does not list yet; the line passes it for this run, and the
    lookup after the lease tells."""
    world = _world(gcs_bucket, 58)
    record = _waiting_in_line(world)
    lease = world.settings.claim_lease_seconds

    def handed_back_long_ago(current: RequestRecord) -> None:
        current.attempts[0].claimed_at = iso(world.ports.clock() - timedelta(seconds=2 * lease))

    world.rewrite("req-1", handed_back_long_ago)
    world.vertex.create_faults.append("lost")
    world.vertex.list_lag = 1  # its lookup right after does not see the job yet

    assert create_waiting(_entry(record), CapturedLog().logger, world.ports, SUBMIT_STEPS) == IN_DOUBT
    assert world.vertex.creates == 1
