"""The promises' invariants (sim/promises.py) have teeth: each reports a violation planted in a
world (a ground-truth state, or a defect patched in), and a clean seed passes them."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions as api

from shared.adapters.vertex import find_attempt_job, find_jobs, parent_path, request_labels
from shared.alerts import Alert, AlertKind
from shared.deciding.deadline import longest_unasked_seconds
from shared.deciding.preemptions import KIT_TIMEOUT_KEY
from shared.fleet.observations import FleetFact, Kind, attempt_key
from shared.ledger.records import Attempt, RequestRecord, evidence_marker
from shared.ledger.run_lock import LEASE_SECONDS
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from sim import faults, invariants, promises, virtual
from sim.continuations import DEADLINE_EXCEEDED_ERROR
from sim.faults import Refusal
from sim.trainer import LAYOUTS, Save
from sim.vertex import STOCKOUT_ERROR, USER_ERROR, Create, Refused, SimJob
from sim.workload import Arrival, forge_kit_line
from sim.world import SimCrash, World
from tests.support.sim_world import attempt_of, job, preempted, restore, trained, write_fact


@pytest.fixture
def world() -> World:
    return World(0)


def publish_alert(world: World, kind: AlertKind, request_id: str | None, **details: Any) -> None:
    alert = Alert.of(kind, "said", request_id=request_id, details=details).to_json()
    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})


def publish_alert_at(world: World, kind: AlertKind, moment: datetime, **details: Any) -> None:
    """An alert of no request, published at `moment` of the world's clock."""
    from shared.clock import iso

    alert = Alert.of(kind, "said", details=details, time=iso(moment)).to_json()
    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})


def catalogue(world: World, kind: AlertKind) -> list[str]:
    return [v.detail for v in promises.owed_alerts(world, [kind])]


# The catalogue.


def test_every_kind_of_the_catalogue_has_a_promise_or_says_why_not() -> None:
    assert promises.unpromised_kinds() == []
    assert not promises.CONDITIONS.keys() & promises.NOT_CHECKED.keys()


def test_a_kind_added_without_its_promise_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(promises.NOT_CHECKED, AlertKind.LEDGER_MISSING)
    assert promises.unpromised_kinds() == [AlertKind.LEDGER_MISSING]


def test_a_trigger_state_left_unreadable_without_its_alert_is_caught(world: World) -> None:
    name = "triggers/daily/state.json"
    world.storage.client().bucket(world.settings.state_bucket).blob(name).upload_from_string(b'{"carry": {}}')
    world.tampering.written[name] = "past_layout"
    assert catalogue(world, AlertKind.TRIGGER_CORRUPT) == [
        "no trigger_corrupt alert: triggers/daily/state.json written as past_layout"
    ]
    publish_alert(world, AlertKind.TRIGGER_CORRUPT, None, trigger="daily")
    assert catalogue(world, AlertKind.TRIGGER_CORRUPT) == []


def test_a_refused_request_without_its_alert_is_caught(world: World) -> None:
    world.workload.arrivals.append(Arrival(999, world.clock.now(), b"{}", {}, "invalid r9-invalid"))
    assert catalogue(world, AlertKind.INVALID_REQUEST) == [
        "no invalid_request alert for r9-invalid: arrival #999 has a refused image"
    ]
    publish_alert(world, AlertKind.INVALID_REQUEST, "r9-invalid")
    assert catalogue(world, AlertKind.INVALID_REQUEST) == []


def test_a_refused_create_without_its_alert_is_caught_unless_vertex_created_the_request_after_it(
    world: World,
) -> None:
    """A create refused while its permission was withdrawn, met by a delivery that died before
    recording it: the claim is re-published, and once the permission is granted again Vertex
    creates the job and the request runs. Nothing failed, so no `submit_failed` is owed (seed 85)."""
    job(world, "r1", 1)  # a job of the request from before the refusal does not speak for it
    world.clock.advance(60)
    world.vertex.refused.append(Refused(world.clock.now(), "create", "us-central1", "r1", 403, "submit_job"))
    assert catalogue(world, AlertKind.SUBMIT_FAILED) == [
        "no submit_failed alert for r1: Vertex answered 403 to submit_job's create in us-central1"
    ]
    world.clock.advance(60)
    job(world, "r1", 2)
    assert catalogue(world, AlertKind.SUBMIT_FAILED) == []


def test_a_storm_at_its_threshold_without_its_alert_is_caught(world: World) -> None:
    storm = preempted(world, job(world, "r1", 1), world.settings.preemption_storm_threshold - 1)
    assert catalogue(world, AlertKind.PREEMPTION_STORM) == []

    preempted(world, storm, 1)  # "N times or more": at N, not above it

    [found] = catalogue(world, AlertKind.PREEMPTION_STORM)
    assert f"preempted {world.settings.preemption_storm_threshold} times" in found
    publish_alert(world, AlertKind.PREEMPTION_STORM, "r1")
    assert catalogue(world, AlertKind.PREEMPTION_STORM) == []


def test_a_storm_of_a_request_whose_record_a_person_left_unreadable_is_not_owed(world: World) -> None:
    preempted(world, job(world, "r1", 1), world.settings.preemption_storm_threshold)
    assert len(catalogue(world, AlertKind.PREEMPTION_STORM)) == 1

    name = "requests/r1.json"  # written by hand as a list (seed 67): nothing is decided on it
    world.storage.client().bucket(world.settings.state_bucket).blob(name).upload_from_string(b"[]")
    world.tampering.written[name] = "list"

    assert catalogue(world, AlertKind.PREEMPTION_STORM) == []


def test_a_storm_announced_before_its_job_was_indexed_is_owed(world: World) -> None:
    """A service line of a job the ledger has not indexed yet (a claim whose create's answer was
    lost) is kept, and counted by the adoption or, should it die before counting, by whoever
    finds the job recorded next (seed 35): a kept line left uncounted is caught."""
    threshold = world.settings.preemption_storm_threshold
    storm = preempted(world, job(world, "r1", 1), 1, indexed=False)  # kept, and never counted
    world.clock.advance(1)
    preempted(world, storm, threshold - 1)  # indexed now, then announced
    assert storm.vms_reclaimed == threshold

    [found] = catalogue(world, AlertKind.PREEMPTION_STORM)
    assert f"preempted {threshold} times, {threshold} of them announced" in found

    # Reconcile's look-up of the claim refused for good: the record never names the job, nothing
    # is decided on its lines, and `lookup_failed` is the word owed (seed 118).
    restore(world, "r1", RequestStatus.CLAIMED, Attempt(1, "us-central1", "SPOT", claimed_at="2026-03-02T08:00:00Z"))
    world.vertex.refused.append(Refused(world.clock.now(), "list", "us-central1", "r1", 403, "reconcile"))
    assert catalogue(world, AlertKind.PREEMPTION_STORM) == []


def test_the_preemptions_of_a_job_never_indexed_are_not_owed_a_storm(world: World) -> None:
    """Never indexed, a job is no claim's that anything adopted: nothing is decided on its lines."""
    preempted(world, job(world, "r1", 1), world.settings.preemption_storm_threshold, indexed=False)

    assert catalogue(world, AlertKind.PREEMPTION_STORM) == []


def test_a_storm_announced_after_a_person_deleted_its_record_is_not_owed(world: World) -> None:
    """Seed 3807: one preemption, then a person deleted the record, then five more while reconcile's
    run lock kept its stray sweep away. With the record gone nothing is decided on the request
    (`object_deleted`): the sweep's record-less `stray_job` is its word, no storm is counted."""
    threshold = world.settings.preemption_storm_threshold
    storm = job(world, "r1", 1)
    restore(world, "r1", RequestStatus.RUNNING, attempt_of(storm))
    preempted(world, storm, 1)
    world.clock.advance(60)
    faults.delete_object(world, what="ledger")
    assert world.tampering.deleted_records == {"r1"}
    world.clock.advance(60)
    preempted(world, storm, threshold + 1)

    assert catalogue(world, AlertKind.PREEMPTION_STORM) == []


@pytest.mark.parametrize(
    ("deleted_after", "owed"), [(promises.LAG - timedelta(seconds=1), False), (promises.LAG, True)]
)
def test_a_storm_is_owed_only_if_it_was_due_before_a_person_deleted_its_record(
    world: World, deleted_after: timedelta, owed: bool
) -> None:
    """Its threshold's line announced, the code has `LAG` to hear it; a record deleted after that
    still owes the storm the code could have said."""
    storm = job(world, "r1", 1)
    restore(world, "r1", RequestStatus.RUNNING, attempt_of(storm))
    preempted(world, storm, world.settings.preemption_storm_threshold)
    world.clock.advance(deleted_after.total_seconds())
    faults.delete_object(world, what="ledger")

    assert len(catalogue(world, AlertKind.PREEMPTION_STORM)) == (1 if owed else 0)


def test_a_last_attempt_stocked_out_without_its_alert_is_caught(world: World) -> None:
    first = job(world, "r1", 1, "JOB_STATE_FAILED")
    first.error = STOCKOUT_ERROR
    restore(world, "r1", RequestStatus.GAVE_UP, attempt_of(first), max_attempts=2)
    assert catalogue(world, AlertKind.ATTEMPTS_EXHAUSTED) == []  # attempt 1 of 2: a re-queue, not the end

    last = job(world, "r1", 2, "JOB_STATE_FAILED")
    last.error = STOCKOUT_ERROR

    assert catalogue(world, AlertKind.ATTEMPTS_EXHAUSTED) == [
        "no attempts_exhausted alert for r1: attempt 2's job stocked out"
    ]


def test_a_deadline_s_last_spot_attempt_stocked_out_then_run_on_demand_owes_no_give_up(world: World) -> None:
    """A deadline outranks max_attempts: its Spot attempts ran out and on-demand finishes the work
    (docs/requests.md), so the request did not give up (seed 190)."""
    last_spot = job(world, "r1-deadline", 2, "JOB_STATE_FAILED")
    last_spot.error = STOCKOUT_ERROR
    on_demand = job(world, "r1-deadline", 3, "JOB_STATE_SUCCEEDED", strategy="STANDARD")
    restore(
        world,
        "r1-deadline",
        RequestStatus.SUCCEEDED,
        attempt_of(last_spot),
        dataclasses.replace(attempt_of(on_demand), strategy="STANDARD"),
        max_attempts=2,
    )

    assert catalogue(world, AlertKind.ATTEMPTS_EXHAUSTED) == []


def test_a_failed_job_without_its_alert_is_caught(world: World) -> None:
    failed = job(world, "r1", 1, "JOB_STATE_FAILED")
    failed.error = USER_ERROR
    assert len(catalogue(world, AlertKind.JOB_FAILED)) == 1
    world.creates_before_cancel["r1"] = 1  # an operator's cancel excuses it
    assert catalogue(world, AlertKind.JOB_FAILED) == []


@pytest.mark.parametrize(
    ("deleted_after", "owed"), [(promises.LAG - timedelta(seconds=1), False), (promises.LAG, True)]
)
def test_a_failed_job_is_owed_its_alert_only_if_its_record_outlived_the_failure_by_lag(
    world: World, deleted_after: timedelta, owed: bool
) -> None:
    """Seed 560 (on b4035de): a person deleted the record 1.3 s before its job failed; nothing is
    decided on a record that is gone, so `job_failed` is owed only if the code had `LAG` to read the
    failure before the deletion (as `deleted_before` rules for a storm and a timeout)."""
    failed = job(world, "r1", 1, "JOB_STATE_FAILED")
    failed.error = USER_ERROR
    restore(world, "r1", RequestStatus.RUNNING, attempt_of(failed))
    world.clock.advance(deleted_after.total_seconds())
    faults.delete_object(world, what="ledger")

    assert len(catalogue(world, AlertKind.JOB_FAILED)) == (1 if owed else 0)


def test_a_failed_job_whose_record_a_person_left_unreadable_owes_ledger_corrupt_not_job_failed(
    world: World,
) -> None:
    """Seed 60: a person wrote the record unreadable while its job ran; nothing is decided on it
    when the job fails (`ledger_corrupt` is its word)."""
    failed = job(world, "r1", 1, "JOB_STATE_FAILED")
    failed.error = USER_ERROR
    assert len(catalogue(world, AlertKind.JOB_FAILED)) == 1
    name = "requests/r1.json"
    world.storage.client().bucket(world.settings.state_bucket).blob(name).upload_from_string(b'{"request_id": null}')
    world.tampering.written[name] = "field_null"
    assert catalogue(world, AlertKind.JOB_FAILED) == []


def test_a_failed_job_its_claim_never_named_for_a_refused_lookup_owes_lookup_failed(world: World) -> None:
    """Seed 118: the claim's look-up refused for good (a 403 on list), the record never names the
    job, so nothing decides on its end: `lookup_failed` is the word owed, not `job_failed`."""
    failed = job(world, "r1", 1, "JOB_STATE_FAILED")
    failed.error = USER_ERROR
    restore(world, "r1", RequestStatus.CLAIMED, Attempt(1, "us-central1", "SPOT", claimed_at="2026-03-02T08:00:00Z"))
    assert len(catalogue(world, AlertKind.JOB_FAILED)) == 1
    world.vertex.refused.append(Refused(world.clock.now(), "list", "us-central1", "r1", 403, "reconcile"))
    assert catalogue(world, AlertKind.JOB_FAILED) == []
    assert len(catalogue(world, AlertKind.LOOKUP_FAILED)) == 1


def test_what_vertex_let_nobody_read_is_owed_as_a_lookup_failed_not_as_what_it_hid(world: World) -> None:
    """A get permission removed in a job's location (`forbidden`): on_job_event cannot read the
    job before it counts a preemption, nor anyone its end; `lookup_failed` is the word owed (seed 167)."""
    storm = job(world, "r1", 1, "JOB_STATE_FAILED")
    preempted(world, storm, world.settings.preemption_storm_threshold + 3)
    storm.error = USER_ERROR
    storm.end_time = storm.create_time + timedelta(hours=1)
    assert len(catalogue(world, AlertKind.PREEMPTION_STORM)) == len(catalogue(world, AlertKind.JOB_FAILED)) == 1

    # Refused for a while during its run: preemption lines went unread for good, its end was read.
    since = storm.create_time + timedelta(minutes=10)
    world.vertex.refusals.append(Refusal("get", "us-central1", since, since + timedelta(minutes=10)))
    assert catalogue(world, AlertKind.PREEMPTION_STORM) == []
    assert len(catalogue(world, AlertKind.JOB_FAILED)) == 1

    # Refused for good before it ended: its end is hidden too; reconcile's refused get is owed its word.
    world.vertex.refusals.append(Refusal("get", "us-central1", since, None))
    world.vertex.refused.append(Refused(world.clock.now(), "get", "us-central1", "r1", 403, "reconcile"))
    assert catalogue(world, AlertKind.JOB_FAILED) == []
    assert catalogue(world, AlertKind.LOOKUP_FAILED) == [
        "no lookup_failed alert for r1: Vertex answered 403 to reconcile's get in us-central1"
    ]
    publish_alert(world, AlertKind.LOOKUP_FAILED, "r1")
    assert catalogue(world, AlertKind.LOOKUP_FAILED) == []


def test_a_stray_sweep_listing_refused_for_good_owes_its_alert_naming_the_location(world: World) -> None:
    """Seed 10018: the sweep's listing (a list naming no request) refused for good owes one
    `stray_sweep_refused` naming the location; one a request's claim look-up met is `lookup_failed`'s."""
    assert catalogue(world, AlertKind.STRAY_SWEEP_REFUSED) == []
    world.vertex.refusals.append(Refusal("list", "us-east4", world.clock.now(), None))
    world.vertex.refused.append(Refused(world.clock.now(), "list", "us-east4", "r1", 403, "reconcile"))
    assert catalogue(world, AlertKind.STRAY_SWEEP_REFUSED) == []
    world.vertex.refused.append(Refused(world.clock.now(), "list", "us-east4", "", 403, "reconcile"))
    assert catalogue(world, AlertKind.STRAY_SWEEP_REFUSED) == [
        "no stray_sweep_refused alert for us-east4: Vertex answered 403 to the stray sweep's list in us-east4"
    ]
    publish_alert(world, AlertKind.STRAY_SWEEP_REFUSED, None, location="europe-west4")
    assert len(catalogue(world, AlertKind.STRAY_SWEEP_REFUSED)) == 1
    publish_alert(world, AlertKind.STRAY_SWEEP_REFUSED, None, location="us-east4")
    assert catalogue(world, AlertKind.STRAY_SWEEP_REFUSED) == []


def test_a_stray_cancel_refused_for_good_owes_its_alert_naming_the_job(world: World) -> None:
    """Seed 954: the sweep's cancel of a job its record does not name, refused for good, owes one
    `stray_sweep_refused` naming the job; a refused cancel of the recorded job owes it nothing."""
    recorded, copy = job(world, "r1", 1), job(world, "r1", 1, "JOB_STATE_QUEUED")
    restore(world, "r1", RequestStatus.RUNNING, attempt_of(recorded))
    world.vertex.refusals.append(Refusal("cancel", "us-central1", world.clock.now(), None))
    world.vertex.refused.append(Refused(world.clock.now(), "cancel", "us-central1", "r1", 403, "reconcile"))
    assert catalogue(world, AlertKind.STRAY_SWEEP_REFUSED) == [
        f"no stray_sweep_refused alert for us-central1: Vertex answered 403 to the cancel of {copy.name}, "
        "a job of r1 its record does not name"
    ]
    publish_alert(world, AlertKind.STRAY_SWEEP_REFUSED, None, location="us-central1", job=recorded.name)
    assert len(catalogue(world, AlertKind.STRAY_SWEEP_REFUSED)) == 1
    publish_alert(world, AlertKind.STRAY_SWEEP_REFUSED, None, location="us-central1", job=copy.name)
    assert catalogue(world, AlertKind.STRAY_SWEEP_REFUSED) == []


def test_a_stray_cancelled_without_its_alert_is_caught(world: World) -> None:
    """The stray sweep's cancel is kept by the world (`SimVertex.cancels`): a job its record does not
    name, cancelled by the code, owes `stray_job` (defect 6: its alert lost after the cancel)."""
    followed, stray = job(world, "r1", 1), job(world, "r1", 1)
    restore(world, "r1", RequestStatus.RUNNING, attempt_of(followed))
    world.vertex.caller = lambda: "reconcile"
    world.vertex.cancel_custom_job(followed.name)  # a move's cancel: of the job its attempt records
    assert catalogue(world, AlertKind.STRAY_JOB) == []

    world.vertex.cancel_custom_job(stray.name)

    [found] = catalogue(world, AlertKind.STRAY_JOB)
    assert found.startswith("no stray_job alert for r1: reconcile cancelled its job")
    publish_alert(world, AlertKind.STRAY_JOB, "r1")
    assert catalogue(world, AlertKind.STRAY_JOB) == []


def test_a_switch_cancel_of_the_recorded_job_owes_no_stray_job_once_a_person_deleted_the_record(
    world: World,
) -> None:
    """Seed 1504: a deadline switch cancelled the job its attempt recorded, and a person deleted
    the record afterwards: the record named the job when it was cancelled. A live job cancelled
    after its record was deleted is a record-less stray and still owes `stray_job`."""
    world.vertex.caller = lambda: "reconcile"
    for request_id in ("r-switched", "r-orphaned"):
        restore(world, request_id, RequestStatus.RUNNING, attempt_of(job(world, request_id, 1)))
    switched = job_named(world, "r-switched")
    world.vertex.cancel_custom_job(switched)  # the switch's cancel, before the deletion
    world.clock.advance(60)
    for _ in range(2):  # a person deletes both records
        faults.delete_object(world, what="ledger")
    assert world.tampering.deleted_records == {"r-switched", "r-orphaned"}
    world.vertex.cancel_custom_job(job_named(world, "r-orphaned"))  # the sweep's, of a record-less job

    assert [e.split(":")[0] for e in catalogue(world, AlertKind.STRAY_JOB)] == ["no stray_job alert for r-orphaned"]


def job_named(world: World, request_id: str) -> str:
    [name] = [name for name, job in world.vertex.jobs.items() if job.request_id == request_id]
    return name


def test_a_stray_of_a_request_an_operator_cancelled_owes_nothing(world: World) -> None:
    followed, stray = job(world, "r1", 1), job(world, "r1", 2)
    restore(world, "r1", RequestStatus.RUNNING, attempt_of(followed))
    world.vertex.caller = lambda: "on_job_event"
    world.vertex.cancel_custom_job(stray.name)
    assert len(catalogue(world, AlertKind.STRAY_JOB)) == 1
    world.creates_before_cancel["r1"] = 1
    assert catalogue(world, AlertKind.STRAY_JOB) == []


def test_a_job_waiting_past_the_bound_without_its_alert_is_caught(world: World) -> None:
    waiting = job(world, "r1", 1, "JOB_STATE_PENDING")
    world.clock.advance(world.settings.stuck_after_seconds)
    assert catalogue(world, AlertKind.JOB_STUCK) == []  # within the passes that notice it

    world.clock.advance(promises.LAG.total_seconds() + 1)

    [found] = catalogue(world, AlertKind.JOB_STUCK)
    assert f"attempt {waiting.attempt}'s job waited" in found
    publish_alert(world, AlertKind.JOB_STUCK, "r1")
    assert catalogue(world, AlertKind.JOB_STUCK) == []


def test_one_wait_queued_then_pending_past_the_bound_without_its_alert_is_caught(world: World) -> None:
    """Issue 43: Vertex may hold a job QUEUED a while before PENDING (`queued_hold`, sim/vertex.py):
    5 h QUEUED then PENDING is one wait from the create, owed its `job_stuck` past the bound
    though the job was PENDING for less than `stuck_after_seconds`."""
    world.vertex.queued_hold = lambda job: 5 * 3600.0
    waiting = job(world, "r1", 1, "JOB_STATE_QUEUED")
    world.vertex.advance(waiting)
    assert (waiting.state, waiting.next_change) == ("JOB_STATE_QUEUED", waiting.create_time + timedelta(hours=5))
    world.clock.advance(5 * 3600)
    world.vertex.advance(waiting)
    assert waiting.state == "JOB_STATE_PENDING"
    world.clock.advance(world.settings.stuck_after_seconds - 5 * 3600 + promises.LAG.total_seconds())
    assert catalogue(world, AlertKind.JOB_STUCK) == []  # within the passes that notice it

    world.clock.advance(1)

    [found] = catalogue(world, AlertKind.JOB_STUCK)
    assert f"attempt {waiting.attempt}'s job waited" in found
    publish_alert(world, AlertKind.JOB_STUCK, "r1")
    assert catalogue(world, AlertKind.JOB_STUCK) == []


def test_a_reconcile_pass_that_died_near_the_stuck_line_widens_the_bound_by_its_lease(world: World) -> None:
    """Seed 4709: a job PENDING past the threshold ran 22,500.3 s after its create, 0.3 s past the
    bound, while two reconcile passes that died (14:55, 15:10) held the run lock over every tick
    from 14:55 to 15:21, so no pass read it waiting. A dead pass costs the ticks within one lease
    (seed 54's rule for `budgets_held`), where it could hide the line: no earlier."""
    interval = world.settings.reconcile_interval_seconds
    lease_ticks = math.ceil(LEASE_SECONDS / interval) * interval
    waiting = job(world, "r1", 1, "JOB_STATE_PENDING")
    line = world.clock.now() + timedelta(seconds=world.settings.stuck_after_seconds)
    world.clock.advance(world.settings.stuck_after_seconds + promises.LAG.total_seconds() + 1)
    waiting.state, waiting.start_time = "JOB_STATE_RUNNING", world.clock.now()  # it ran, unalerted
    world.dead_reconciles.append(line - timedelta(seconds=LEASE_SECONDS + 1))  # its lease ended before the line
    assert len(catalogue(world, AlertKind.JOB_STUCK)) == 1

    world.dead_reconciles.append(line + timedelta(seconds=interval))
    assert catalogue(world, AlertKind.JOB_STUCK) == []

    world.clock.advance(lease_ticks)  # a wait longer than one dead pass hides is owed again
    waiting.start_time = world.clock.now()
    assert len(catalogue(world, AlertKind.JOB_STUCK)) == 1


def test_a_waiting_job_its_claim_never_named_for_a_refused_lookup_owes_lookup_failed(world: World) -> None:
    """Seed 84: the create's delivery crashed before recording the job, and every later look-up
    was refused for good (a 403 on list): the record never names the job, so nothing can tell it
    waits; `lookup_failed` is the word owed, not `job_stuck`."""
    job(world, "r1", 1, "JOB_STATE_PENDING")
    restore(world, "r1", RequestStatus.CLAIMED, Attempt(1, "us-central1", "SPOT", claimed_at="2026-03-02T08:00:00Z"))
    world.clock.advance(world.settings.stuck_after_seconds + promises.LAG.total_seconds() + 1)
    assert len(catalogue(world, AlertKind.JOB_STUCK)) == 1
    world.vertex.refused.append(Refused(world.clock.now(), "list", "us-central1", "r1", 403, "reconcile"))
    assert catalogue(world, AlertKind.JOB_STUCK) == []
    assert len(catalogue(world, AlertKind.LOOKUP_FAILED)) == 1


def test_a_claim_whose_takeover_lookup_was_refused_owes_lookup_failed_not_job_stuck(world: World) -> None:
    """Seed 1617: the same, met by submit_job's take-over of a claim in the quota line (reconcile
    leaves such a claim to the line, whose hand-overs reach only submit): submit says
    `lookup_failed` itself (shared/attempt_lookup.py), the word owed instead of `job_stuck`."""
    job(world, "r1", 1, "JOB_STATE_PENDING")
    restore(world, "r1", RequestStatus.CLAIMED, Attempt(1, "us-central1", "SPOT", claimed_at="2026-03-02T08:00:00Z"))
    world.clock.advance(world.settings.stuck_after_seconds + promises.LAG.total_seconds() + 1)
    world.vertex.refused.append(Refused(world.clock.now(), "list", "us-central1", "r1", 403, "submit_job"))
    assert catalogue(world, AlertKind.JOB_STUCK) == []
    assert catalogue(world, AlertKind.LOOKUP_FAILED) == [
        "no lookup_failed alert for r1: Vertex answered 403 to submit_job's list in us-central1"
    ]
    publish_alert(world, AlertKind.LOOKUP_FAILED, "r1")
    assert catalogue(world, AlertKind.LOOKUP_FAILED) == []


def test_a_refused_replay_check_owes_no_lookup_failed_but_a_refused_claim_lookup_does(world: World) -> None:
    """Seed 3729: submit's replay guard lists a record-less request's jobs by its request's labels
    (`replayed_without_a_record`), naming no attempt: no claim, no attempt to mark. Its 403 makes
    the message redelivered (`submit_blocked`) until it dead-letters, and the dead-letter alert
    speaks (`awaiting_redrive`); `lookup_failed` is a claim's word, owed for a refused look-up by
    its attempt's labels (`find_attempt_job`), whoever made it."""
    world.vertex.refusals = [Refusal("list", "us-central1", world.clock.now(), None)]
    world.vertex.caller = lambda: "submit_job"
    deployment = world.settings.deployment_label
    parent = parent_path(world.settings.project, "us-central1")
    with pytest.raises(api.PermissionDenied):
        find_jobs(world.vertex, parent, request_labels("r1", deployment), timeout=30.0)
    assert catalogue(world, AlertKind.LOOKUP_FAILED) == []

    with pytest.raises(api.PermissionDenied):
        find_attempt_job(world.vertex, parent, "r1", 1, deployment, since="2026-03-02T08:00:00Z", timeout=30.0)
    assert catalogue(world, AlertKind.LOOKUP_FAILED) == [
        "no lookup_failed alert for r1: Vertex answered 403 to submit_job's list in us-central1"
    ]


def test_a_refused_lookup_only_a_delivery_cut_short_met_owes_no_lookup_failed(world: World) -> None:
    """Seeds 2418 and 3849: the delivery that met the 403 hit a fault of ours after it (a 503 on
    the ledger write or read deciding `lookup_failed`), and nothing met the refusal again: submit's
    redelivery found the request cancelled (no create sent: nothing to look up), reconcile's next
    pass read the live job from its listing. A refusal met again by a delivery that lived on owes it."""
    world.vertex.refused.append(Refused(world.clock.now(), "list", "us-central1", "r1", 403, "submit_job"))
    world.refusals_cut_short.add(0)
    assert catalogue(world, AlertKind.LOOKUP_FAILED) == []

    world.clock.advance(300)
    world.vertex.refused.append(Refused(world.clock.now(), "get", "us-central1", "r1", 403, "reconcile"))
    assert catalogue(world, AlertKind.LOOKUP_FAILED) == [
        "no lookup_failed alert for r1: Vertex answered 403 to reconcile's get in us-central1"
    ]


def test_a_deletion_never_reported_is_caught(world: World) -> None:
    running = trained(world, "r1")
    world.trainer.save(running, 100, torn=False)
    assert catalogue(world, AlertKind.PRUNE_REPORT) == []
    world.storage.client().bucket(world.settings.checkpoint_bucket).blob(
        "requests/r1/checkpoints/step-000100/model.pt"
    ).delete()

    assert len(catalogue(world, AlertKind.PRUNE_REPORT)) == 1
    publish_alert(world, AlertKind.PRUNE_REPORT, None, unreported_earlier=[{"request_id": "r1"}])  # a later run's
    assert catalogue(world, AlertKind.PRUNE_REPORT) == []


def test_a_deadline_passed_unfinished_without_its_alert_is_caught(world: World) -> None:
    late = job(world, "r1", 1, "JOB_STATE_SUCCEEDED")
    deadline = world.clock.now() + timedelta(hours=1)
    late.end_time = deadline + timedelta(seconds=1)
    restore(world, "r1", RequestStatus.SUCCEEDED, attempt_of(late), deadline=deadline.isoformat())

    assert len(catalogue(world, AlertKind.DEADLINE_MISSED)) == 1
    late.end_time = deadline
    assert catalogue(world, AlertKind.DEADLINE_MISSED) == []


def test_a_deadline_missed_alert_without_its_condition_is_a_false_alarm_caught(world: World) -> None:
    """Issue 43: a read taken before the deadline finding the job running, decided after it, said
    the deadline was missed while the job succeeded in time."""
    in_time = job(world, "r1", 1, "JOB_STATE_SUCCEEDED")
    deadline = world.clock.now() + timedelta(hours=1)
    in_time.end_time = deadline - timedelta(seconds=30)
    restore(world, "r1", RequestStatus.SUCCEEDED, attempt_of(in_time), deadline=deadline.isoformat())
    said = Alert.of(AlertKind.DEADLINE_MISSED, "missed", request_id="r1", details={"deadline": deadline.isoformat()})
    alert = {**said.to_json(), "time": (deadline + timedelta(minutes=10)).isoformat()}
    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})

    [found] = promises.false_deadline_alarms(world)
    assert "a job of it succeeded at" in found.detail
    assert any("deadline_missed for r1" in v.detail for v in promises.alert_catalogue(world))
    in_time.end_time = deadline + timedelta(seconds=1)  # done late: the alert was owed
    assert promises.false_deadline_alarms(world) == []
    early = {**alert, "time": (deadline - timedelta(seconds=1)).isoformat()}  # said before the deadline came
    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(early).encode(), {})
    [found] = promises.false_deadline_alarms(world)
    assert "raised at" in found.detail


def test_a_burst_past_the_quota_without_its_alert_is_caught(world: World) -> None:
    line = int(2 * world.settings.quota_alert_after_seconds * world.settings.vertex_creates_per_minute / 60) + 2
    for i in range(line):
        world.pubsub.accept(world.settings.job_requests_topic, json.dumps({"request_id": f"b{i}"}).encode(), {})
        restore(world, f"b{i}", RequestStatus.CLAIMED)
    world.workload.gpu_quota_full = False
    world.clock.advance(1)
    assert len(catalogue(world, AlertKind.QUOTA_LIMITED)) == 1
    for i in range(2):  # two created at once: the line was never longer than the quota's share
        job(world, f"b{i}", 1).create_time -= timedelta(seconds=1)
    assert catalogue(world, AlertKind.QUOTA_LIMITED) == []

    world.vertex.jobs.clear()
    publish_alert(world, AlertKind.QUOTA_LIMITED, None)
    assert catalogue(world, AlertKind.QUOTA_LIMITED) == []


def test_a_burst_whose_creates_vertex_refused_for_good_waited_only_until_its_refusals(world: World) -> None:
    """Seed 6509: the create permission was withdrawn, and each request of a burst met its 403 in
    turn (`submit_failed`, no job ever). A refused create had its turn at Vertex: the request stopped
    waiting for the quota then, not at the end of the world."""
    line = int(2 * world.settings.quota_alert_after_seconds * world.settings.vertex_creates_per_minute / 60) + 2
    world.workload.gpu_quota_full = False
    for i in range(line):  # each refused before the next came
        world.pubsub.accept(world.settings.job_requests_topic, json.dumps({"request_id": f"b{i}"}).encode(), {})
        restore(world, f"b{i}", RequestStatus.FAILED)
        world.clock.advance(1)
        world.vertex.refused.append(Refused(world.clock.now(), "create", "us-central1", f"b{i}", 403, "submit_job"))
        world.clock.advance(1)
    world.clock.advance(3600)
    assert catalogue(world, AlertKind.QUOTA_LIMITED) == []


def test_a_burst_the_stalled_region_held_waited_for_the_stall_not_the_quota(world: World) -> None:
    """Seed 12137: us-east4's Vertex API stalled; each submit delivery of a burst bound for
    us-central1, its message past the lease and no record yet, looked for a deleted record's jobs in
    every location and met the stall there, nacked, until the stall ended: the line never held more
    than two. A delivery the stall held ends its request's wait for the quota; the next take of it
    begins one, so a burst taken again at once after the stall is owed the alert again."""
    from sim.world import Task

    line = int(2 * world.settings.quota_alert_after_seconds * world.settings.vertex_creates_per_minute / 60) + 2
    world.workload.gpu_quota_full = False
    world.permanent.stall = faults.Stall("us-east4", 0.0)  # its calls answer 503
    world.interleave = False  # a handler's call goes through at once
    parent = parent_path(world.settings.project, "us-east4")
    for i in range(line):
        message_id = world.pubsub.accept(
            world.settings.job_requests_topic, json.dumps({"request_id": f"b{i}"}).encode(), {}
        )
        restore(world, f"b{i}", RequestStatus.CLAIMED)
        world._current = Task("submit_job", lambda: None, faulty=True, origin=message_id)  # noqa: SLF001
        with pytest.raises(api.ServiceUnavailable):  # the look for a deleted record's jobs
            world.vertex("us-east4").list_custom_jobs(request={"parent": parent}, timeout=30.0)
        world._current = None  # noqa: SLF001
        world.clock.advance(1)
    world.clock.advance(3600)
    world.phase = "quiet"  # the stall is over
    for i in range(line):  # taken again one at a time, each created as it is taken (no wait)
        job(world, f"b{i}", 1)
        world.clock.advance(10)
    assert catalogue(world, AlertKind.QUOTA_LIMITED) == []

    world.vertex.jobs.clear()  # taken again all at once after the stall: a burst in line
    for i in range(line):
        world.submit_takes[f"b{i}"].append(world.clock.now())
    for i in range(line):
        world.clock.advance(10)
        job(world, f"b{i}", 1)
    assert len(catalogue(world, AlertKind.QUOTA_LIMITED)) == 1


def test_one_id_published_with_two_bodies_without_its_alert_is_caught(world: World) -> None:
    import random

    from sim.workload import custom_job

    bodies = [{"request_id": "r1", "custom_job": custom_job(random.Random(k), gpu=False)} for k in (1, 2)]
    world.workload.arrivals = [
        Arrival(k, world.clock.now(), json.dumps(b).encode(), {}, "envelope r1") for k, b in enumerate(bodies)
    ]
    assert len(catalogue(world, AlertKind.REQUEST_ID_CONFLICT)) == 1
    world.workload.arrivals[1].data = world.workload.arrivals[0].data  # a publisher's retry: no conflict
    assert catalogue(world, AlertKind.REQUEST_ID_CONFLICT) == []


def test_a_second_body_for_a_record_a_person_left_unreadable_owes_ledger_corrupt_not_a_conflict(
    world: World,
) -> None:
    """Seed 258: a person wrote burst49's record unreadable, then a second body with its id came;
    submit cannot compare bodies with a record it cannot read (`ledger_corrupt` is its word)."""
    import random

    from sim.workload import custom_job

    bodies = [{"request_id": "r1", "custom_job": custom_job(random.Random(k), gpu=False)} for k in (1, 2)]
    world.workload.arrivals = [
        Arrival(k, world.clock.now(), json.dumps(b).encode(), {}, "envelope r1") for k, b in enumerate(bodies)
    ]
    assert len(catalogue(world, AlertKind.REQUEST_ID_CONFLICT)) == 1
    name = "requests/r1.json"
    world.storage.client().bucket(world.settings.state_bucket).blob(name).upload_from_string(b"<html></html>")
    world.tampering.written[name] = "not_json"

    assert catalogue(world, AlertKind.REQUEST_ID_CONFLICT) == []


def test_a_second_body_published_after_a_person_deleted_the_record_owes_no_conflict(world: World) -> None:
    """Seed 3667: a hostile publisher took burst5 with its body, a person deleted the record, and
    the real body came ten minutes later: no record kept the first, so the id was claimed afresh.
    A second body published before the deletion still owes it."""
    import random

    from sim.workload import custom_job

    first, second = ({"request_id": "r1", "custom_job": custom_job(random.Random(k), gpu=False)} for k in (1, 2))
    start = world.clock.now()
    world.tampering.deleted_records.add("r1")
    world.tampering.records_deleted_at["r1"] = start + timedelta(minutes=10)
    world.workload.arrivals = [
        Arrival(0, start, json.dumps(first).encode(), {}, "hostile victim_id r1"),
        Arrival(1, start + timedelta(minutes=20), json.dumps(second).encode(), {}, "envelope r1"),
    ]
    assert catalogue(world, AlertKind.REQUEST_ID_CONFLICT) == []

    world.workload.arrivals[1].at = start + timedelta(minutes=5)

    assert catalogue(world, AlertKind.REQUEST_ID_CONFLICT) == [
        "no request_id_conflict alert for r1: published with 2 bodies"
    ]


# Nothing stuck without a word.


def test_a_request_unmoved_past_the_bound_without_a_word_is_caught(world: World) -> None:
    waiting = job(world, "r1", 1, "JOB_STATE_PENDING")
    restore(world, "r1", RequestStatus.SUBMITTED, attempt_of(waiting))
    restore(world, "r2", RequestStatus.CLAIMED, Attempt(1, "us-central1", "SPOT", claimed_at="2026-03-02T08:00:00Z"))
    world.clock.advance(promises.stuck_bound(world).total_seconds() - 1)
    assert promises.nothing_stuck_silently(world) == []

    world.clock.advance(2)

    assert sorted(v.detail.split()[1] for v in promises.nothing_stuck_silently(world)) == ["r1", "r2"]
    publish_alert(world, AlertKind.JOB_STUCK, "r1")
    publish_alert(world, AlertKind.CLAIM_STALLED, "r2")
    assert promises.nothing_stuck_silently(world) == []


def test_a_request_in_a_line_that_stopped_draining_is_not_spoken_for_by_its_burst(world: World) -> None:
    """`quota_limited` says a burst is created in turn: it speaks for a request in line while the
    line creates. Seed 1617 (at 721e94c): every hand-over went to a head whose look-up Vertex
    refused for good, and the 20 attempts behind it waited a month, said for by the 08:04 burst."""
    restore(world, "r1", RequestStatus.CLAIMED, Attempt(1, "us-central1", "SPOT", claimed_at="2026-03-02T08:00:00Z"))
    state = world.storage.client().bucket(world.settings.state_bucket)
    state.blob("pacing/us-central1/waiting/0000000~r1~1").upload_from_string(b"")
    publish_alert(world, AlertKind.QUOTA_LIMITED, None)
    world.clock.advance(promises.stuck_bound(world).total_seconds() + 1)
    [silent] = promises.nothing_stuck_silently(world)
    assert "request r1 is CLAIMED" in silent.detail

    created = job(world, "r2", 1, "JOB_STATE_PENDING").request  # the line created within the bound
    world.vertex.created.append(Create(world.clock.now(), "us-central1", created, True))

    assert promises.nothing_stuck_silently(world) == []


def test_the_stuck_bound_is_past_the_documented_ones(world: World) -> None:
    from sim.world import LIVENESS_BOUND

    bound = promises.stuck_bound(world)
    assert bound.total_seconds() > world.settings.stuck_after_seconds
    assert bound < LIVENESS_BOUND  # liveness and this agree: both are judged inside the quiet phase


# Deadlines.


def asked_every(world: World, seconds: float, *, hours: float = 4.0) -> None:
    """Reconcile asked Vertex in us-central1 every `seconds` from now on: the rule's "asked at
    least every m seconds" held."""
    start = world.clock.now() - timedelta(seconds=seconds)
    world.vertex.asked["us-central1"] = [
        start + timedelta(seconds=seconds * i) for i in range(int(hours * 3600 / seconds))
    ]


def deadline_request(world: World, *, changeover: float, ran: float, hours: float = 2.0) -> SimJob:
    asked_every(world, world.settings.reconcile_interval_seconds, hours=hours + 1)
    on_demand = job(world, "r1", 1, "JOB_STATE_SUCCEEDED", strategy="STANDARD")
    on_demand.start_time = on_demand.create_time + timedelta(seconds=changeover)
    on_demand.end_time = on_demand.start_time + timedelta(seconds=ran)
    deadline = world.clock.now() + timedelta(hours=hours)
    restore(
        world,
        "r1",
        RequestStatus.SUCCEEDED,
        attempt_of(on_demand),
        deadline=deadline.isoformat(),
        total_steps=100,
        expected_step_seconds=6.0,
    )
    world.clock.advance(hours * 3600 + promises.LAG.total_seconds() + 1)
    return on_demand


def test_a_deadline_missed_though_the_rule_s_assumptions_held_is_caught(world: World) -> None:
    on_demand = deadline_request(world, changeover=600, ran=600)
    assert promises.deadlines_met(world) == []

    on_demand.end_time = on_demand.create_time + timedelta(hours=3)  # a late switch: done past the deadline
    on_demand.start_time = on_demand.end_time - timedelta(seconds=600)
    on_demand.create_time = on_demand.start_time - timedelta(seconds=600)

    [found] = promises.deadlines_met(world)
    assert "r1 (work 600 s" in found.detail


def test_a_deadline_missed_while_reconcile_asked_nothing_for_longer_than_d_is_excused(world: World) -> None:
    """The rule counts on the job being asked at least every m seconds (docs/deadlines.md); a job
    no record names yet is asked by reconcile alone. Seed 24 (on 241aac2): r9-deadline's job was
    created by a delivery that died before recording it, and reconcile's passes crashed (a 5% fault
    rate), each crashed pass's lease turning the next two ticks away, so none asked Vertex for 90 min."""
    on_demand = deadline_request(world, changeover=600, ran=600)
    created = on_demand.create_time  # the request's too
    on_demand.end_time = created + timedelta(hours=3)  # done past the deadline
    on_demand.start_time = on_demand.end_time - timedelta(seconds=600)
    on_demand.create_time = on_demand.start_time - timedelta(seconds=600)
    assert len(promises.deadlines_met(world)) == 1  # asked every reconcile interval: caught

    # The rule's m is the longest a job goes unasked with one dead pass's lease in it: up to that, caught.
    unasked = longest_unasked_seconds(world.settings.reconcile_interval_seconds)
    asked = world.vertex.asked["us-central1"]
    first = created + timedelta(seconds=unasked)
    world.vertex.asked["us-central1"] = [first] + [at for at in asked if at > first]
    assert len(promises.deadlines_met(world)) == 1

    world.vertex.asked["us-central1"][0] += timedelta(seconds=1)
    assert promises.deadlines_met(world) == []


def test_a_reconcile_pass_that_died_asked_nothing_for_the_deadline_rule(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass that dies before deciding (its instance gone) decided on no job it listed: its
    listing is no ask the rule's m counts on (docs/deadlines.md); a pass that ends is."""

    def lists_then(dies: bool) -> None:
        def handler(message: Any, log: Any) -> None:
            world.vertex.list_custom_jobs({"parent": parent_path(world.settings.project, "us-central1")})
            if dies:
                raise SimCrash("the instance is gone")

        monkeypatch.setattr("functions.reconcile._handle", handler)
        world.pubsub.accept(world.settings.maintenance_topic, b'{"task": "reconcile"}', {"task": "reconcile"})
        [delivery] = world.pubsub.deliverable()
        virtual.install(world)  # the world's clock, as `World.run` has it
        try:
            world._deliver(delivery)  # noqa: SLF001 - one delivery, driven by hand
            world._finish_tasks()  # noqa: SLF001
        finally:
            virtual.uninstall()

    lists_then(dies=True)
    assert world.vertex.asked["us-central1"] == [] and len(world.dead_reconciles) == 1
    lists_then(dies=False)
    assert len(world.vertex.asked["us-central1"]) == 1


def test_a_deadline_missed_after_a_late_first_create_is_excused(world: World) -> None:
    """Its first job was created more than the bound after the request arrived (the submission
    quota's line, a dead-lettered message: seeds 128 and 24): the rule decided nothing before."""
    on_demand = deadline_request(world, changeover=600, ran=600)
    on_demand.end_time = on_demand.create_time + timedelta(hours=3)  # done past the deadline
    on_demand.start_time = on_demand.end_time - timedelta(seconds=600)
    on_demand.create_time = on_demand.start_time - timedelta(seconds=600)
    world.first_submitted["r1"] = on_demand.create_time - timedelta(seconds=world.settings.changeover_prior_seconds)
    assert len(promises.deadlines_met(world)) == 1  # created within the bound of its arrival: judged

    world.first_submitted["r1"] -= timedelta(seconds=1)
    assert promises.deadlines_met(world) == []


def test_a_deadline_missed_after_a_changeover_past_the_bound_is_excused(world: World) -> None:
    deadline_request(world, changeover=world.settings.changeover_prior_seconds + 1, ran=600, hours=0.5)
    assert promises.deadlines_met(world) == []


def test_a_deadline_missed_after_a_slow_switch_is_excused(world: World) -> None:
    """A changeover runs from a decision to the next instance's first progress (docs/deadlines.md):
    a Spot job the code cancelled to switch, then the on-demand job's create and start, longer than
    d in all, breaks the rule's assumption though each job's own wait was short (seed 24)."""
    d = world.settings.changeover_prior_seconds
    asked_every(world, world.settings.reconcile_interval_seconds)
    spot = job(world, "r1", 1, "JOB_STATE_CANCELLED")
    world.clock.advance(60)
    on_demand = job(world, "r1", 2, "JOB_STATE_SUCCEEDED", strategy="STANDARD")
    on_demand.create_time += timedelta(seconds=d)  # the cancel's delay and the create's wait
    on_demand.start_time = on_demand.create_time + timedelta(seconds=60)
    on_demand.end_time = on_demand.start_time + timedelta(seconds=600)
    deadline = spot.create_time + timedelta(seconds=1900)
    restore(
        world,
        "r1",
        RequestStatus.SUCCEEDED,
        attempt_of(spot),
        attempt_of(on_demand),
        deadline=deadline.isoformat(),
        total_steps=100,
        expected_step_seconds=6.0,
    )
    world.clock.advance(7200)
    [found] = promises.deadlines_met(world)  # nobody cancelled the Spot job: the rule's own wait
    assert "r1 (work 600 s" in found.detail

    world.vertex.cancels.append((spot.create_time + timedelta(seconds=60), spot.name, "reconcile"))
    assert promises.deadlines_met(world) == []


def test_a_deadline_infeasible_from_the_start_is_excused(world: World) -> None:
    deadline_request(world, changeover=10, ran=600, hours=0.1)  # 600 s of work + d > 360 s
    assert promises.deadlines_met(world) == []


def test_a_deadline_missed_waiting_for_a_gpu_quota_past_the_bound_is_excused(world: World) -> None:
    """The rule counts on on-demand being there within d of a decision; a create the GPU quota
    turns away for longer breaks that as a slow changeover does (seed 165: quota full for good)."""
    asked_every(world, world.settings.reconcile_interval_seconds)
    deadline = world.clock.now() + timedelta(hours=1)
    claim = Attempt(1, "us-central1", "SPOT", claimed_at=world.clock.now().isoformat())
    restore(
        world,
        "r1",
        RequestStatus.CLAIMED,
        claim,
        deadline=deadline.isoformat(),
        total_steps=10,
        expected_step_seconds=10.0,
    )
    labels = {"spotjobs-request-id": "r1", "spotjobs-attempt": "1"}
    world.vertex.created.append(Create(world.clock.now(), "us-central1", {"labels": labels}, False))
    world.clock.advance(3600 + promises.LAG.total_seconds() + 1)
    [found] = promises.deadlines_met(world)  # a create refused for another reason excuses nothing
    assert "r1 (work 100 s" in found.detail and "is CLAIMED" in found.detail

    world.vertex.created[-1] = Create(world.vertex.created[-1].at, "us-central1", {"labels": labels}, False, True)
    assert promises.deadlines_met(world) == []


# The fleet.


def test_a_fleet_fact_beyond_what_vertex_did_is_caught(world: World) -> None:
    running = job(world, "r1", 1)
    running.start_time = running.create_time
    running.vms_reclaimed = 1
    key = attempt_key("r1", 1)
    write_fact(world, FleetFact(Kind.PREEMPT, "us-central1", world.clock.now(), attempt_key=key, index=0))
    assert promises.fleet_facts_bounded(world) == []

    name = write_fact(world, FleetFact(Kind.PREEMPT, "us-central1", world.clock.now(), attempt_key=key, index=5))
    write_fact(world, FleetFact(Kind.PREEMPT, "us-central1", world.clock.now(), attempt_key=attempt_key("r9", 1)))

    details = [v.detail for v in promises.fleet_facts_bounded(world)]
    assert f"{name}: preemption #6, Vertex preempted it 1 times" in details
    assert any("no job of its attempt was ever created" in d for d in details)


@pytest.mark.parametrize("later", ["its preemption", "the next attempt"])
def test_an_open_wait_left_past_its_jobs_run_is_caught(world: World, later: str) -> None:
    """The decision that saw the Spot job run lost its `wait` fact; a later decision (one that
    recorded a preemption of it, or the next attempt's) shows the request was decided on since:
    the open wait it left would say no capacity for the estimate's whole window."""
    ran = job(world, "r1", 1)
    ran.start_time = ran.create_time
    ran.vms_reclaimed = 1
    key = attempt_key("r1", 1)
    write_fact(world, FleetFact(Kind.WAITING, "us-central1", ran.create_time, attempt_key=key))
    assert promises.fleet_facts_bounded(world) == []  # nothing decided on it since: not yet owed

    if later == "its preemption":
        write_fact(world, FleetFact(Kind.PREEMPT, "us-central1", world.clock.now(), attempt_key=key, index=0))
    else:
        job(world, "r1", 2)
        write_fact(world, FleetFact(Kind.WAITING, "us-central1", world.clock.now(), attempt_key=attempt_key("r1", 2)))

    [open_wait] = [v.detail for v in promises.fleet_facts_bounded(world)]
    assert open_wait.startswith("r1 attempt 1: its wait is open in the fleet store, though Vertex ran its job")
    write_fact(world, FleetFact(Kind.WAIT, "us-central1", ran.create_time, 0.0, attempt_key=key))
    assert promises.fleet_facts_bounded(world) == []


def test_an_open_wait_of_a_request_reconcile_retired_is_caught(world: World) -> None:
    """The last decision the request got wrote its end and lost every fact of it; nothing decides
    on a finished request again, but the reconcile pass that retires it from the active index
    writes what closed its waits (shared/reconcile_index.py). Retired with only its `waiting`, the
    wait would say no capacity for the estimate's week."""
    ran = job(world, "r1", 1, state="JOB_STATE_SUCCEEDED")
    ran.start_time, ran.end_time = ran.create_time, world.clock.now()
    at = ran.create_time.isoformat()
    ended = attempt_of(ran, created_at=at, started_at=at, ended_at=at, outcome="succeeded")
    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
    ledger.mark_active("r1")  # not retired yet: the pass that retires it owes the close
    restore(world, "r1", RequestStatus.SUCCEEDED, ended)
    write_fact(world, FleetFact(Kind.WAITING, "us-central1", ran.create_time, attempt_key=attempt_key("r1", 1)))
    assert promises.fleet_facts_bounded(world) == []

    del world.storage.objects(world.settings.state_bucket)["active/r1"]  # retired by a pass
    [open_wait] = [v.detail for v in promises.fleet_facts_bounded(world)]
    assert open_wait.startswith("r1 attempt 1: its wait is open in the fleet store, though Vertex ran its job")
    assert open_wait.endswith("and reconcile retired the finished request")
    write_fact(world, FleetFact(Kind.WAIT, "us-central1", ran.create_time, 0.0, attempt_key=attempt_key("r1", 1)))
    assert promises.fleet_facts_bounded(world) == []


def test_an_open_wait_the_estimate_counts_though_its_job_ran_is_caught(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fleet was told the job ran (its `run`), not its `wait`: the estimate must not count
    its wait open. A wait Vertex still has queued, or one the fleet was told nothing else of,
    may be counted."""
    import shared.fleet.estimate

    def counted_open() -> list[str]:
        return [v.detail for v in promises.fleet_facts_bounded(world) if "the estimate counts" in v.detail]

    ran, queued = job(world, "r1", 1), job(world, "r2", 1, state="JOB_STATE_PENDING")
    ran.start_time, ran.end_time = ran.create_time, world.clock.now()
    for waited in (ran, queued):
        key = attempt_key(waited.request_id, 1)
        write_fact(world, FleetFact(Kind.WAITING, "us-central1", waited.create_time, attempt_key=key))
    assert counted_open() == []  # nothing told of r1's job past its create: its end may have been lost
    write_fact(world, FleetFact(Kind.RUN, "us-central1", world.clock.now(), 0.0, attempt_key=attempt_key("r1", 1)))
    assert counted_open() == []

    # The estimate before the fix: only a `wait` or `nocap` ended a wait, and a lost `wait` stayed lost.
    monkeypatch.setattr(shared.fleet.estimate, "ENDS_A_WAIT", frozenset({Kind.WAIT, Kind.NO_CAPACITY}))
    monkeypatch.setattr(shared.fleet.estimate, "_wait_closed", lambda facts: facts)
    [open_wait] = counted_open()
    assert open_wait.endswith(
        "the estimate counts 2 open waits, of which only 1 can be: Vertex ran or ended the others' jobs and the fleet was told"
    )


# Logs and status.


def test_a_forged_line_shown_as_the_request_s_own_is_caught(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    import spotjobs.trainer_logs

    victim = job(world, "r1", 1)
    restore(world, "r1", RequestStatus.RUNNING, attempt_of(victim, kit_key="k"))
    world.emit_log_line(victim, "Job is running.", "INFO")
    forge_kit_line(world)
    assert promises.logs_and_status_own_lines(world) == []

    # Defect 10: every kit line under the request's job id taken as its own.
    monkeypatch.setattr(
        spotjobs.trainer_logs, "verified", lambda line, record: line.__class__(**{**line.__dict__, "signed": True})
    )

    details = [v.detail for v in promises.logs_and_status_own_lines(world)]
    assert any("shows" in d and "as its own preempted (forged: True)" in d for d in details)


def test_status_counting_preemptions_vertex_never_made_is_caught(world: World) -> None:
    victim = job(world, "r1", 1)
    victim.vms_reclaimed = 1
    restore(world, "r1", RequestStatus.RUNNING, attempt_of(victim, preemptions=1))
    assert promises.logs_and_status_own_lines(world) == []
    other = job(world, "r2", 1)
    restore(world, "r2", RequestStatus.RUNNING, attempt_of(other, preemptions=999))  # defect 9's count

    [found] = promises.logs_and_status_own_lines(world)
    assert "r2 attempt 1 shows 999 preemptions; Vertex preempted its job 0 times" in found.detail


def test_a_timeout_stop_whose_end_vertex_hides_for_good_may_stay_counted_once(world: World) -> None:
    """docs/signals.md: the kit's `preempted` line of a job stopped at its timeout counts as a
    preemption until the job's end is seen. A get refused for good in its location since before
    that end hides it from everyone (`lookup_failed` is the word owed): the count stays, and status
    and the record may show that one (seed 1889), no more, and only for a stop at the timeout."""
    from sim import replicas

    def stopped(request_id: str, preemptions: int, error: dict[str, Any]) -> None:
        sim_job = job(world, request_id, 1, "JOB_STATE_FAILED")
        sim_job.error = error
        sim_job.end_time = sim_job.create_time + timedelta(hours=1)
        restore(world, request_id, RequestStatus.RUNNING, attempt_of(sim_job, preemptions=preemptions))

    def caught() -> list[str]:
        checks = (promises.logs_and_status_own_lines, replicas.preemptions_within_reclaimed_vms)
        return [f"{v.invariant} {v.detail.split()[0]}" for check in checks for v in check(world)]

    stopped("r1", 1, DEADLINE_EXCEEDED_ERROR)
    assert caught() == ["status_own_facts r1", "preemptions_within_reclaimed_vms r1"]  # its end was readable
    world.vertex.refusals.append(Refusal("get", "us-central1", world.clock.now(), None))
    assert caught() == []
    stopped("r2", 2, DEADLINE_EXCEEDED_ERROR)  # one more than the stop
    stopped("r3", 1, USER_ERROR)  # no stop at the timeout: its SIGTERM would be a reclaim Vertex never made
    assert sorted(caught()) == [
        "preemptions_within_reclaimed_vms r2",
        "preemptions_within_reclaimed_vms r3",
        "status_own_facts r2",
        "status_own_facts r3",
    ]


# The newest complete checkpoint, by the trainer's ground truth, in every layout.


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_newest_complete_checkpoint_cut_is_caught_in_every_layout(world: World, layout: str) -> None:
    running = trained(world, "r1")
    world.trainer.layouts["r1"] = layout
    world.trainer.save(running, 100, torn=False)
    world.trainer.save(running, 200, torn=False)
    folder = world.trainer.job_folder(running)
    newest = world.trainer.saves[folder][
        max(world.trainer.saves[folder], key=lambda n: world.trainer.saves[folder][n].step)
    ]
    assert invariants.newest_complete_kept(world) == []

    world.storage.client().bucket(world.settings.checkpoint_bucket).blob(folder + sorted(newest.objects)[-1]).delete()

    [found] = invariants.newest_complete_kept(world)
    assert f"{newest.name} (step 200)" in found.detail


def test_a_checkpoint_of_two_files_of_one_stem_is_judged_by_both(world: World) -> None:
    """The trainer writes one file per torch stem; a save of two (model and optimizer, defect 7)
    is whole only while both are there."""
    running = trained(world, "r1")
    folder = world.trainer.job_folder(running)
    bucket = world.storage.client().bucket(world.settings.checkpoint_bucket)
    for step in (300, 400):
        stem = f"ckpt-{step:06d}"
        files = {f"{stem}.pt": b"model", f"{stem}.optim.pt": b"optimizer"}
        for name, data in files.items():
            bucket.blob(folder + name).upload_from_string(data)
        world.trainer.saves.setdefault(folder, {})[stem] = Save(
            stem, step, {n: len(d) for n, d in files.items()}, True, "r1", world.clock.now()
        )
    assert invariants.newest_complete_kept(world) == []

    bucket.blob(folder + "ckpt-000400.optim.pt").delete()

    [found] = invariants.newest_complete_kept(world)
    assert "ckpt-000400 (step 400)" in found.detail


# A clean seed.


def test_a_clean_seed_keeps_every_promise_and_the_promises_are_not_vacuous() -> None:
    from sim import virtual

    world = World(2)
    assert world.run() == []
    virtual.install(world)
    try:
        held = {kind: len(condition(world)) for kind, condition in promises.CONDITIONS.items()}
    finally:
        virtual.uninstall()
    assert sum(held.values()) > 0, held


def test_a_claim_republished_past_the_bound_without_claim_stalled_is_caught(world: World) -> None:
    limit = world.settings.max_claim_republishes

    def republish() -> None:  # as reconcile does: the count written, then the attempt published
        claim = {"n": 1, "job": None, "outcome": None, "republished_at": world.clock.now().isoformat()}
        bucket = world.storage.client().bucket(world.settings.state_bucket)
        bucket.blob("requests/r1.json").upload_from_string(json.dumps({"request_id": "r1", "attempts": [claim]}))
        body = {"request_id": "r1", "attempt": 1, "location": "us-central1"}
        world.pubsub.accept(world.settings.job_requests_topic, json.dumps(body).encode(), {"request_id": "r1"})
        promises.note_republish(world, world.pubsub.on(world.settings.job_requests_topic)[-1])

    for _ in range(limit):
        republish()
        republish()  # a publish retried at once is the same re-publish
        world.clock.advance(600)
    assert catalogue(world, AlertKind.CLAIM_STALLED) == []

    republish()
    [found] = catalogue(world, AlertKind.CLAIM_STALLED)
    assert f"{limit + 1} times" in found
    publish_alert(world, AlertKind.CLAIM_STALLED, "r1")
    assert catalogue(world, AlertKind.CLAIM_STALLED) == []


def test_a_deleted_job_whose_timeout_the_code_had_read_owes_its_timeouts_alert_not_job_failed(world: World) -> None:
    """Seed 97: a job timed out, and a person deleted it while its end waited for the kit's lines;
    the code had read the timeout (its record marks it), so `timeout_without_progress` speaks for it."""
    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
    for request_id, read in (("r-unread", False), ("r-read", True)):
        timed_out = job(world, request_id, 1, "JOB_STATE_FAILED")
        timed_out.error = DEADLINE_EXCEEDED_ERROR
        world.tampering.deleted_jobs[timed_out.name] = request_id
        world.tampering.jobs_deleted_at[timed_out.name] = world.clock.now()
        world.tampering.followed_when_deleted.add(timed_out.name)
        markers = [evidence_marker(KIT_TIMEOUT_KEY, 1)] if read else []
        request = {"request_id": request_id, "custom_job": {}}
        attempts = [attempt_of(timed_out)]
        ledger.restore(RequestRecord(request_id, request, "gs://c/", RequestStatus.FAILED, attempts, markers=markers))
    assert [e.split(":")[0] for e in catalogue(world, AlertKind.JOB_FAILED)] == ["no job_failed alert for r-unread"]


def test_a_deleted_job_whose_timeout_the_code_had_read_owes_no_job_failed_once_a_person_deleted_its_record(
    world: World,
) -> None:
    """Seed 871: the code read the timeout, failed the request with `timeout_without_progress`
    after the job's deletion, and a person deleted the record afterwards: what the code had read
    stays read. A record without the mark, deleted the same way, still owes `job_failed`."""
    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
    for request_id, read in (("r-unread", False), ("r-read", True)):
        timed_out = job(world, request_id, 1, "JOB_STATE_FAILED")
        timed_out.error = DEADLINE_EXCEEDED_ERROR
        world.tampering.deleted_jobs[timed_out.name] = request_id
        world.tampering.jobs_deleted_at[timed_out.name] = world.clock.now()
        world.tampering.followed_when_deleted.add(timed_out.name)
        markers = [evidence_marker(KIT_TIMEOUT_KEY, 1)] if read else []
        request = {"request_id": request_id, "custom_job": {}}
        attempts = [attempt_of(timed_out)]
        ledger.restore(RequestRecord(request_id, request, "gs://c/", RequestStatus.FAILED, attempts, markers=markers))
    world.clock.advance(promises.LAG.total_seconds() + 1)  # the deletion could be read (seed 871: 49 min)
    for _ in range(2):  # a person deletes both records
        faults.delete_object(world, what="ledger")
    assert world.tampering.deleted_records == {"r-unread", "r-read"}
    assert [e.split(":")[0] for e in catalogue(world, AlertKind.JOB_FAILED)] == ["no job_failed alert for r-unread"]


def test_a_notification_topic_that_refused_without_its_alert_is_caught(world: World) -> None:
    restore(world, "r1", RequestStatus.RUNNING, notify={"topic": "projects/sim-project/topics/notify-r1"})
    world.pubsub.refused.append(("notify-r1", world.clock.now()))
    assert catalogue(world, AlertKind.NOTIFY_REFUSED) == [
        "no notify_refused alert for r1: its topic notify-r1 refused a publish"
    ]
    publish_alert(world, AlertKind.NOTIFY_REFUSED, "r1")
    assert catalogue(world, AlertKind.NOTIFY_REFUSED) == []


# FLEX_START (sim/flex.py): a long documented wait is not stuck; a wait that ran out is a capacity error.


def test_a_flex_start_job_waiting_within_its_max_wait_is_not_stuck_and_past_it_is(world: World) -> None:
    waiting = job(world, "r1", 1, "JOB_STATE_PENDING", strategy="FLEX_START")
    waiting.request["jobSpec"]["scheduling"]["maxWaitDuration"] = "28800s"
    restore(world, "r1", RequestStatus.SUBMITTED, dataclasses.replace(attempt_of(waiting), strategy="FLEX_START"))
    world.clock.advance(promises.stuck_bound(world).total_seconds() + 28800 - 1)
    assert catalogue(world, AlertKind.JOB_STUCK) == []
    assert promises.nothing_stuck_silently(world) == []

    world.clock.advance(2)

    [found] = catalogue(world, AlertKind.JOB_STUCK)
    assert "attempt 1's job waited" in found
    [silent] = promises.nothing_stuck_silently(world)
    assert "request r1 is SUBMITTED" in silent.detail


def test_a_last_flex_start_attempt_whose_wait_ran_out_without_its_alert_is_caught(world: World) -> None:
    from sim import flex

    first = job(world, "r1", 1, "JOB_STATE_FAILED", strategy="FLEX_START")
    first.error = flex.wait_expired_error(86400)
    restore(
        world,
        "r1",
        RequestStatus.GAVE_UP,
        dataclasses.replace(attempt_of(first), strategy="FLEX_START"),
        max_attempts=2,
    )
    assert catalogue(world, AlertKind.ATTEMPTS_EXHAUSTED) == []  # attempt 1 of 2: a re-queue, not the end

    last = job(world, "r1", 2, "JOB_STATE_FAILED", strategy="FLEX_START")
    last.error = flex.wait_expired_error(86400)

    assert catalogue(world, AlertKind.ATTEMPTS_EXHAUSTED) == [
        "no attempts_exhausted alert for r1: attempt 2's job waited out its maxWaitDuration"
    ]


def test_a_stuck_timeout_owes_its_alert_unless_a_person_deleted_its_record_before_it_was_due(world: World) -> None:
    """Seed 798: r1-envelope's job timed out without a commit; the code waits
    `kit_lines_settle_seconds` after its end for late kit lines before failing it, and a person
    deleted its record 268 s after that end: nothing was left to decide on, nothing is owed. A
    record deleted once the alert was due (its wait and `LAG` over) still owes it."""
    settle = world.settings.kit_lines_settle_seconds
    for request_id, deleted_after in (("r-early", settle - 32), ("r-late", settle + promises.LAG.total_seconds() + 1)):
        stuck = job(world, request_id, 1, "JOB_STATE_FAILED")
        stuck.fate, stuck.error, stuck.end_time = "timeout_stuck", DEADLINE_EXCEEDED_ERROR, world.clock.now()
        restore(world, request_id, RequestStatus.RUNNING, attempt_of(stuck))
        world.clock.advance(deleted_after)
        faults.delete_object(world, what="ledger")  # the only record in the bucket
        assert request_id in world.tampering.deleted_records

    assert [e.split(":")[0] for e in catalogue(world, AlertKind.TIMEOUT_WITHOUT_PROGRESS)] == [
        "no timeout_without_progress alert for r-late"
    ]


def test_a_live_job_deleted_owes_no_job_failed_once_a_person_deleted_its_record_before_it_could_be_read() -> None:
    """Seed 4179: a person deleted r1's pending job in the console (Vertex cancels it, and deletes it
    once it ended), then r1's ledger record, 40 s before the job ended: with the record gone nothing
    is decided on the request, so the code never read the NotFound that owes `job_failed`. A record
    deleted once the deletion could have been read (at the job's end, plus `LAG`) still owes it."""

    def owed(record_deleted_after_the_end: float) -> list[str]:
        world = World(0)
        live = job(world, "r1", 1, "JOB_STATE_PENDING")
        restore(world, "r1", RequestStatus.SUBMITTED, attempt_of(live, state="JOB_STATE_PENDING"))
        faults.delete_job(world)
        assert live.state == "JOB_STATE_CANCELLING" and live.name in world.tampering.followed_when_deleted
        world.clock.advance(360)
        if record_deleted_after_the_end < 0:
            faults.delete_object(world, what="ledger")
        world.clock.advance(abs(record_deleted_after_the_end))
        world.vertex.advance(live)  # it ends, and the deletion takes effect
        assert live.deleted
        if record_deleted_after_the_end >= 0:
            world.clock.advance(record_deleted_after_the_end)
            faults.delete_object(world, what="ledger")
        assert "r1" in world.tampering.deleted_records
        return catalogue(world, AlertKind.JOB_FAILED)

    assert owed(-40) == []
    late = promises.LAG.total_seconds() + 1
    assert [e.split(":")[0] for e in owed(late)] == ["no job_failed alert for r1"]


def test_a_deleted_job_owes_no_job_failed_if_its_record_was_made_unreadable_before_it_was_read() -> None:
    """Seed 4345: a person deleted r1's job in the console (Vertex cancels it, and deletes it once
    it ended), then wrote r1's ledger record truncated, 2 min after the job ended and before a
    reconcile pass could read the NotFound that owes `job_failed`. Nothing is decided on a record
    the code cannot read (`ledger_corrupt` is its word). A record written so once the deletion
    could have been read (at the job's end, plus `LAG`) still owes it."""

    def owed(written_after_the_end: float) -> list[str]:
        world = World(0)
        live = job(world, "r1", 1, "JOB_STATE_PENDING")
        restore(world, "r1", RequestStatus.SUBMITTED, attempt_of(live, state="JOB_STATE_PENDING"))
        faults.delete_job(world)
        assert live.name in world.tampering.followed_when_deleted
        world.clock.advance(360)
        world.vertex.advance(live)  # it ends, and the deletion takes effect
        assert live.deleted
        world.clock.advance(written_after_the_end)
        faults.write_document(world, document="ledger", shape="truncated")
        assert "r1" in invariants.left_unreadable(world)
        return catalogue(world, AlertKind.JOB_FAILED)

    assert owed(121) == []
    late = promises.LAG.total_seconds() + 1
    assert [e.split(":")[0] for e in owed(late)] == ["no job_failed alert for r1"]


def test_a_deleted_job_whose_gets_vertex_refused_for_good_owes_lookup_failed_not_job_failed(world: World) -> None:
    """Seed 3047: the get permission went missing for good in the job's location before its end was
    read; a person then deleted the ended job. Only a get tells the code a job is gone (NotFound),
    so it never learns of the deletion: reconcile's refused get is owed its `lookup_failed`. A
    refusal that began once the deletion could have been read, or one that was fixed, excuses nothing."""
    ended = job(world, "r1", 1, "JOB_STATE_SUCCEEDED")
    ended.end_time = world.clock.now()
    restore(world, "r1", RequestStatus.SUBMITTED, attempt_of(ended, state="JOB_STATE_RUNNING"))
    world.clock.advance(600)
    faults.delete_job(world)
    assert ended.name in world.tampering.followed_when_deleted
    owed = [f"no job_failed alert for r1: its job {ended.name.rsplit('/', 1)[-1]} was deleted at Vertex"]
    assert catalogue(world, AlertKind.JOB_FAILED) == owed

    deleted_at = world.clock.now()
    world.vertex.refusals.append(Refusal("get", "us-central1", deleted_at + promises.LAG * 2, None))  # read by then
    world.vertex.refusals.append(Refusal("get", "us-central1", ended.end_time, deleted_at + promises.LAG * 2))  # fixed
    assert catalogue(world, AlertKind.JOB_FAILED) == owed

    world.vertex.refusals.append(Refusal("get", "us-central1", ended.end_time + timedelta(minutes=1), None))
    world.vertex.refused.append(Refused(world.clock.now(), "get", "us-central1", "r1", 403, "reconcile"))
    assert catalogue(world, AlertKind.JOB_FAILED) == []
    assert catalogue(world, AlertKind.LOOKUP_FAILED) == [
        "no lookup_failed alert for r1: Vertex answered 403 to reconcile's get in us-central1"
    ]


def test_a_waiting_job_owes_no_job_stuck_once_a_person_deleted_its_record_before_its_line(world: World) -> None:
    """With the record gone nothing is decided on the request: its job is a stray (the sweep
    cancels it, or says its cancel is refused), never `job_stuck`. A record deleted after the
    line, and `LAG` to see it, still owes it (review s10)."""
    bound = promises.stuck_bound(world).total_seconds()
    for request_id, deleted_after in (("r-early", 600.0), ("r-late", bound + 1)):
        waiting = job(world, request_id, 1, "JOB_STATE_PENDING")
        restore(world, request_id, RequestStatus.SUBMITTED, attempt_of(waiting))
        world.clock.advance(deleted_after)
        faults.delete_object(world, what="ledger")  # the only record in the bucket
        world.clock.advance(-deleted_after)
    world.clock.advance(bound + 2)

    assert [e.split(":")[0] for e in catalogue(world, AlertKind.JOB_STUCK)] == ["no job_stuck alert for r-late"]


def test_a_deadline_passed_while_the_claim_waits_for_its_create_without_its_alert_is_caught(world: World) -> None:
    """No job of it lives past the deadline: its claim waits for a create Vertex refuses (review s10)."""
    deadline = world.clock.now() + timedelta(hours=1)
    claim = Attempt(1, "us-central1", "SPOT", claimed_at=world.clock.now().isoformat())
    restore(world, "r1", RequestStatus.CLAIMED, claim, deadline=deadline.isoformat())
    world.clock.advance(3600 + promises.LAG.total_seconds() - 1)
    assert catalogue(world, AlertKind.DEADLINE_MISSED) == []

    world.clock.advance(2)

    [owed] = catalogue(world, AlertKind.DEADLINE_MISSED)
    assert "no deadline_missed alert for r1" in owed


def test_a_location_that_answered_no_call_passes_in_a_row_owes_location_unanswering(world: World) -> None:
    """Passes that sent calls to a location and got no reply to any (each ran out its timeout or met
    a 503; those calls are the pass's only faults) owe `location_unanswering` after three in a row;
    a pass that drew another fault breaks the run, and an alert of an earlier outage, published
    before the last pass that got a reply there, does not speak for this one."""
    from sim.vertex import PassCall
    from sim.world import Task

    location = "us-central1"

    def pass_over(*, answered: bool, other_faults: int = 0) -> None:
        sender = Task("reconcile", lambda: None, faulty=True, faults=int(not answered) + other_faults)
        world.vertex.pass_calls.append(PassCall(world.clock.now(), sender, "list", location))
        if not answered:
            world.vertex.unanswered_calls.add(len(world.vertex.pass_calls) - 1)
        world.clock.advance(300.0)

    earlier_outage = world.clock.now()
    world.clock.advance(60.0)
    pass_over(answered=True)
    for _ in range(2):
        pass_over(answered=False)
    pass_over(answered=False, other_faults=1)  # a GCS fault too: it may not have counted
    for _ in range(2):
        pass_over(answered=False)
    assert catalogue(world, AlertKind.LOCATION_UNANSWERING) == []

    pass_over(answered=False)

    [found] = catalogue(world, AlertKind.LOCATION_UNANSWERING)
    assert found.startswith(f"no location_unanswering alert for {location}: 3 reconcile passes in a row")
    publish_alert_at(world, AlertKind.LOCATION_UNANSWERING, earlier_outage, location=location)
    assert len(catalogue(world, AlertKind.LOCATION_UNANSWERING)) == 1
    publish_alert_at(world, AlertKind.LOCATION_UNANSWERING, world.clock.now(), location=location)
    assert catalogue(world, AlertKind.LOCATION_UNANSWERING) == []


def test_a_stray_that_outlives_passes_in_a_row_owes_stray_sweep_cut_short(world: World) -> None:
    """Passes that listed a stray's location, ran to their end without a fault and did not cancel
    it were cut short: three in a row owe one `stray_sweep_cut_short`; a pass that drew a fault
    (its listing or record read may have failed, said otherwise), or that began before the one
    before it had sent its last call (the two may count one), breaks the run. The alert is owed by
    the last of them: one published later than a claim lease and `LAG` after it is of a later run."""
    from sim.vertex import PassCall
    from sim.world import Task

    followed, stray = job(world, "r1", 1), job(world, "r1", 1)
    restore(world, "r1", RequestStatus.RUNNING, attempt_of(followed))
    faulted = Task("reconcile", lambda: None, faulty=True, faults=1)
    world.clock.advance(promises.LAG.total_seconds())

    def pass_over(sender: Task) -> None:  # its listing, and a cancel it sent 100 s later
        world.vertex.pass_calls.append(PassCall(world.clock.now(), sender, "list", stray.location))
        world.clock.advance(100.0)
        world.vertex.pass_calls.append(PassCall(world.clock.now(), sender, "cancel", stray.location))
        world.clock.advance(200.0)

    for sender in (Task("reconcile", lambda: None, faulty=True) for _ in range(2)):
        pass_over(sender)
    pass_over(faulted)
    pass_over(Task("reconcile", lambda: None, faulty=True))
    overlapping = Task("reconcile", lambda: None, faulty=True)  # began before the last one's cancel
    world.vertex.pass_calls.append(
        PassCall(world.clock.now() - timedelta(seconds=250), overlapping, "list", stray.location)
    )
    pass_over(Task("reconcile", lambda: None, faulty=True))
    assert catalogue(world, AlertKind.STRAY_SWEEP_CUT_SHORT) == []
    pass_over(Task("reconcile", lambda: None, faulty=True))
    pass_over(Task("reconcile", lambda: None, faulty=True))

    [found] = catalogue(world, AlertKind.STRAY_SWEEP_CUT_SHORT)
    assert found.startswith(f"no stray_sweep_cut_short alert: stray {stray.name.rsplit('/', 1)[-1]} of r1")
    third_pass = world.clock.now() - timedelta(seconds=200)  # its last call
    slack = timedelta(seconds=world.settings.claim_lease_seconds) + promises.LAG
    publish_alert_at(world, AlertKind.STRAY_SWEEP_CUT_SHORT, third_pass + slack + timedelta(seconds=1), passes=3)
    assert len(catalogue(world, AlertKind.STRAY_SWEEP_CUT_SHORT)) == 1  # a later run's
    publish_alert_at(world, AlertKind.STRAY_SWEEP_CUT_SHORT, third_pass + timedelta(seconds=1), passes=3)
    assert catalogue(world, AlertKind.STRAY_SWEEP_CUT_SHORT) == []


def test_a_job_its_record_named_until_a_person_deleted_it_is_a_stray_only_from_the_deletion(world: World) -> None:
    """Seed 54: the passes before a person deleted the record that named the job were not cut
    short (the job was no stray then); three whole passes after the deletion still owe the alert."""
    from sim.vertex import PassCall
    from sim.world import Task

    recorded = job(world, "r1", 1)
    restore(world, "r1", RequestStatus.RUNNING, attempt_of(recorded))
    world.clock.advance(promises.LAG.total_seconds())

    def pass_over() -> None:
        world.vertex.pass_calls.append(
            PassCall(world.clock.now(), Task("reconcile", lambda: None, faulty=True), "list", recorded.location)
        )
        world.clock.advance(300.0)

    for _ in range(3):
        pass_over()
    faults.delete_object(world, what="ledger")
    assert world.tampering.deleted_records == {"r1"}
    assert catalogue(world, AlertKind.STRAY_SWEEP_CUT_SHORT) == []
    for _ in range(3):
        pass_over()

    [found] = catalogue(world, AlertKind.STRAY_SWEEP_CUT_SHORT)
    assert found.startswith(f"no stray_sweep_cut_short alert: stray {recorded.name.rsplit('/', 1)[-1]} of r1")


def test_a_deleted_records_job_is_a_stray_only_from_the_deletion(world: World) -> None:
    """Seeds 11415, 11432: passes while the record named the job rightly left it alone; only the
    passes from a person's deletion of the record (`docs/operations.md`: its job is then a stray)
    count towards `stray_sweep_cut_short`."""
    from sim.vertex import PassCall
    from sim.world import Task

    followed = job(world, "r1", 1)
    restore(world, "r1", RequestStatus.RUNNING, attempt_of(followed))
    world.clock.advance(promises.LAG.total_seconds())

    def pass_over() -> None:
        sender = Task("reconcile", lambda: None, faulty=True)
        world.vertex.pass_calls.append(PassCall(world.clock.now(), sender, "list", followed.location))
        world.clock.advance(300.0)

    for _ in range(3):
        pass_over()
    name = "requests/r1.json"
    faults._note_record_deleted(world, "r1", world.storage.objects(world.settings.state_bucket)[name].data)
    world.storage.client().bucket(world.settings.state_bucket).blob(name).delete()
    pass_over()
    pass_over()
    assert catalogue(world, AlertKind.STRAY_SWEEP_CUT_SHORT) == []

    pass_over()

    [found] = catalogue(world, AlertKind.STRAY_SWEEP_CUT_SHORT)
    assert found.startswith(f"no stray_sweep_cut_short alert: stray {followed.name.rsplit('/', 1)[-1]} of r1")
