"""The simulator's checker has teeth: each invariant reports a violation planted in a world,
whatever the state of the code under test (these run no handler)."""

from __future__ import annotations

import dataclasses
import json
import random
from datetime import timedelta

import pytest
from google.api_core import exceptions as api

from shared.adapters.vertex import parent_path
from shared.alerts import Alert, AlertKind
from shared.ledger.records import RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from sim import flex, invariants
from sim.trainer import LAYOUTS
from sim.vertex import Create
from sim.workload import custom_job, resubmit
from sim.world import World
from tests.support.sim_world import attempt, job, record, trained


@pytest.fixture
def world() -> World:
    return World(0)


def test_two_live_jobs_for_one_request_are_caught(world: World) -> None:
    job(world, "r1", 1, "JOB_STATE_CANCELLING")
    assert invariants.one_live_job_per_request(world) == []
    job(world, "r1", 2, "JOB_STATE_QUEUED", strategy="STANDARD")

    [found] = invariants.one_live_job_per_request(world)
    assert found.invariant == "one_live_job_per_request" and "2 live jobs" in found.detail


def test_a_create_the_policy_forbids_is_caught_on_any_path(world: World) -> None:
    world.settings = type(world.settings).from_env(  # a deployment without FLEX_START
        {**world.workload.env, "SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD"}
    )
    allowed = job(world, "r1", 1).request
    world.vertex.created.append(Create(world.clock.now(), "us-central1", allowed, True))
    assert invariants.policy_on_every_create(world) == []

    forbidden = json.loads(json.dumps(allowed))
    forbidden["jobSpec"]["scheduling"]["strategy"] = "FLEX_START"
    forbidden["jobSpec"]["serviceAccount"] = "someone@else.iam.gserviceaccount.com"
    world.vertex.created.append(Create(world.clock.now(), "us-central1", forbidden, False))

    problems = [v.detail for v in invariants.policy_on_every_create(world)]
    assert any("strategy FLEX_START" in p for p in problems)
    assert any("service account" in p for p in problems)


def test_a_fallback_before_the_minimum_spot_attempts_is_caught(world: World) -> None:
    world.settings = type(world.settings).from_env(
        {**world.workload.env, "SPOTJOBS_MIN_SPOT_ATTEMPTS": "3", "SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD"}
    )
    spot = job(world, "r1", 1).request
    standard = job(world, "r1", 2, strategy="STANDARD").request
    world.vertex.created += [
        Create(world.clock.now(), "us-central1", spot, True),
        Create(world.clock.now(), "us-central1", standard, True),
    ]

    [found] = invariants.policy_on_every_create(world)
    assert "after 1 Spot attempt(s)" in found.detail


def test_an_alert_repeated_per_redelivery_is_caught(world: World) -> None:
    alert = Alert.of(AlertKind.INVALID_REQUEST, "refused", request_id="r1", attempt=1).to_json()
    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})
    world.unconfirmed_alerts[invariants.alert_key(alert)] = 2  # two deliveries crashed after publishing it
    for _ in range(2):
        world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})
    assert invariants.alerts_not_per_redelivery(world) == []

    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})  # one no crash explains

    [found] = invariants.alerts_not_per_redelivery(world)
    assert "invalid_request" in found.detail and "published 4 times (2 publish(es) left unconfirmed" in found.detail


def test_a_second_job_stuck_for_one_wait_in_another_state_is_a_copy_too_many(world: World) -> None:
    """Issue 43: QUEUED 7 h then PENDING 7 h is one wait, owed one `job_stuck`; the code once alerted
    it per state. Copies are told apart by the wait (`wait_began_at`), not the state."""
    began = "2026-03-02T08:00:00.000Z"
    for state in ("JOB_STATE_QUEUED", "JOB_STATE_PENDING"):
        details = {"state": state, "wait_began_at": began, "after_cancel": False}
        alert = Alert.of(AlertKind.JOB_STUCK, "stuck", request_id="r1", attempt=1, details=details).to_json()
        world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})

    [found] = invariants.alerts_not_per_redelivery(world)
    assert "job_stuck" in found.detail and "published 2 times" in found.detail


def test_a_job_stuck_waiting_then_stuck_after_its_cancel_is_two_alerts_not_a_copy(world: World) -> None:
    """Seed 1618: attempt 1's job waited PENDING past the bound (`job_stuck`, once per wait), then
    a move decided its cancel, which Vertex refused for good, and it waited as long again holding
    attempt 2 back (`job_stuck`, once per cancel: docs/deadlines.md). Two decisions with two
    markers, in the same state: a copy of either is still one too many."""
    from dataclasses import replace

    from shared.clock import iso
    from shared.deciding.decisions import Observation, decide
    from shared.jobs import JobState
    from shared.ledger.records import Requeue
    from shared.ledger.states import AttemptOutcome
    from tests.support.decide import NOW, POLICY, make_record
    from tests.support.decide import job as snapshot

    policy = replace(POLICY, stuck_after_seconds=3600)
    pending = snapshot(JobState.PENDING)
    waiting = make_record(state=JobState.PENDING)
    waiting.attempts[0].state_changed_at = iso(NOW - timedelta(hours=1))
    stuck = decide(waiting, Observation(1, pending), policy, NOW)
    moved = stuck.record
    moved.attempts[0].outcome = AttemptOutcome.MOVED
    moved.attempts[0].cancel_decided_at = iso(NOW)  # never sent: Vertex refuses the cancel
    moved.requeue = Requeue(2, "us-east4", "SPOT", "move", decided_at=iso(NOW))
    held = decide(moved, Observation(1, pending), policy, NOW + timedelta(hours=1))
    alerts = [alert.to_json() for alert in (*stuck.effects.alerts, *held.effects.alerts)]
    assert [(a["kind"], a["details"]["state"]) for a in alerts] == [("job_stuck", JobState.PENDING)] * 2
    for alert in alerts:
        world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})
    assert invariants.alerts_not_per_redelivery(world) == []

    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alerts[1]).encode(), {})

    [found] = invariants.alerts_not_per_redelivery(world)
    assert "job_stuck for req-1 attempt 1 published 2 times" in found.detail


def test_an_alert_again_after_a_person_deleted_the_request_s_record_is_not_a_copy(world: World) -> None:
    """The record's markers went with it: the record a redelivery writes anew alerts once more (seed
    100: a claim stalled, a person deleted its record, a redrive claimed it again, and it stalled again)."""
    alert = Alert.of(AlertKind.CLAIM_STALLED, "no job", request_id="r1", attempt=1).to_json()
    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})
    world.tampering.deleted_records.add("r1")
    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})
    assert invariants.alerts_not_per_redelivery(world) == []

    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})

    [found] = invariants.alerts_not_per_redelivery(world)
    assert "claim_stalled for r1 attempt 1 published 3 times" in found.detail


def test_a_publish_a_fault_cut_short_is_counted_for_the_alert_bound(world: World) -> None:
    from sim.world import Task

    alert = Alert.of(AlertKind.PREEMPTION_STORM, "storm", request_id="r1", attempt=1).to_json()
    task = Task("on_job_event", lambda: None, faulty=True)
    world._current = task  # noqa: SLF001 - as a delivery in flight
    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})
    world._count_unconfirmed_alerts(task)  # noqa: SLF001 - no fault after the publish
    assert world.unconfirmed_alerts[invariants.alert_key(alert)] == 0

    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})
    task.faults += 1  # a crash before the confirming write
    world._count_unconfirmed_alerts(task)  # noqa: SLF001

    assert world.unconfirmed_alerts[invariants.alert_key(alert)] == 1


def test_a_refusal_its_delivery_hit_a_fault_after_is_noted_cut_short(world: World) -> None:
    """The fault may have cut the delivery short before it decided `lookup_failed` (seeds 2418,
    3849): `sim.promises.lookups_refused` leaves such a refusal to one met again."""
    from sim.faults import Refusal
    from sim.world import Task

    world.vertex.refusals.append(Refusal("get", "us-central1", world.clock.now(), None))
    name = f"{parent_path(world.settings.project, 'us-central1')}/customJobs/1"
    task = Task("reconcile", lambda: None, faulty=True, whole=True)
    world._current = task  # noqa: SLF001 - as a delivery in flight
    with pytest.raises(api.PermissionDenied):
        world.vertex.get_custom_job(name=name)
    task.faults += 1  # a 503 on the ledger read deciding its alert
    with pytest.raises(api.PermissionDenied):
        world.vertex.get_custom_job(name=name)  # met again, alike, and nothing went wrong after it
    world._current = None  # noqa: SLF001
    world._note_cut_short(task)  # noqa: SLF001 - the delivery's end

    assert len(world.vertex.refused) == 2
    assert world.refusals_cut_short == {0}


def test_a_ledger_corrupt_alert_of_deliveries_in_flight_together_may_be_published_by_each(world: World) -> None:
    """It is published first and noted after (shared/deciding/outbox.py, at least once): a delivery
    in flight beside the publishing one may have looked before the note (seed 67)."""
    from sim.world import Task

    alert = Alert.of(AlertKind.LEDGER_CORRUPT, "unreadable", request_id="r1").to_json()
    first, second = Task("on_job_event", lambda: None, faulty=True), Task("on_job_event", lambda: None, faulty=True)
    world.tasks += [first, second]
    for task in (first, second):
        world._current = task  # noqa: SLF001 - as a delivery in flight
        world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})
    world._current, world.tasks = None, []  # noqa: SLF001

    assert invariants.alerts_not_per_redelivery(world) == []


def test_a_decided_alert_never_published_is_caught(world: World) -> None:
    record(world, "r1", RequestStatus.FAILED, attempt(1), markers=["job_failed:1"])

    [found] = invariants.alerts_at_least_once(world)
    assert "job_failed:1" in found.detail


def test_a_live_job_the_ledger_does_not_know_is_caught(world: World) -> None:
    stray = job(world, "r1", 1)
    assert invariants.no_unknown_live_job(world)
    record(world, "r1", RequestStatus.RUNNING, attempt(1, stray.name))
    assert invariants.no_unknown_live_job(world) == []


def test_a_live_job_its_claim_could_never_look_up_is_left_to_lookup_failed(world: World) -> None:
    """Seed 84: the job's create was sent, its delivery died before recording it, and Vertex
    refused reconcile's look-up of the claim (and the stray sweep's listing) for good: no code
    can see the job until an operator grants the permission, and `lookup_failed` says so."""
    from sim.vertex import Refused

    unknown = job(world, "r1", 1)
    record(world, "r1", RequestStatus.CLAIMED, attempt(1))
    assert invariants.no_unknown_live_job(world)
    world.vertex.refused.append(Refused(world.clock.now(), "list", unknown.location, "r1", 403, "reconcile"))
    assert invariants.no_unknown_live_job(world) == []


def test_a_live_job_where_the_stray_sweep_is_refused_for_good_is_left_to_its_alert_once_said(
    world: World,
) -> None:
    """Seed 10018: Vertex refuses `customJobs.list` in a location for good, and someone re-runs a
    recorded job there in the console: the stray sweep cannot see the copy until an operator grants
    the permission. Excused only once `stray_sweep_refused` names that location (nothing silent)."""
    from sim.faults import Refusal
    from sim.vertex import Refused

    recorded = job(world, "r1", 1)
    record(world, "r1", RequestStatus.RUNNING, attempt(1, recorded.name))
    job(world, "r1", 1, "JOB_STATE_QUEUED")  # the re-run
    world.vertex.refusals.append(Refusal("list", "us-central1", world.clock.now(), None))
    world.vertex.refused.append(Refused(world.clock.now(), "list", "us-central1", "", 403, "reconcile"))
    assert invariants.no_unknown_live_job(world)  # refused, and nobody told

    def said(location: str) -> None:
        alert = Alert.of(AlertKind.STRAY_SWEEP_REFUSED, "blind", details={"location": location}).to_json()
        world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})

    said("europe-west4")
    assert invariants.no_unknown_live_job(world)  # told of another location
    said("us-central1")
    assert invariants.no_unknown_live_job(world) == []

    world.vertex.refusals[-1] = Refusal(
        "list", "us-central1", world.clock.now() - timedelta(hours=1), world.clock.now()
    )
    assert invariants.no_unknown_live_job(world)  # the permission is back: the sweep's to cancel


def test_a_stray_whose_cancel_is_refused_for_good_is_left_to_its_alert_once_said(world: World) -> None:
    """Seed 954: someone re-runs a recorded job in the console where Vertex refuses
    `customJobs.cancel` for good: the sweep sees the copy and cannot end it. Excused only once a
    `stray_sweep_refused` alert names that job, and only while the refusal stands."""
    from sim.faults import Refusal

    recorded = job(world, "r1", 1)
    record(world, "r1", RequestStatus.RUNNING, attempt(1, recorded.name))
    copy = job(world, "r1", 1, "JOB_STATE_QUEUED")  # the re-run
    world.vertex.refusals.append(Refusal("cancel", "us-central1", world.clock.now(), None))
    assert invariants.no_unknown_live_job(world)  # refused, and nobody told

    def said(job_name: str) -> None:
        details = {"location": "us-central1", "call": "cancel", "job": job_name}
        alert = Alert.of(AlertKind.STRAY_SWEEP_REFUSED, "refused", details=details).to_json()
        world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})

    said(recorded.name)
    assert invariants.no_unknown_live_job(world)  # told of another job
    said(copy.name)
    assert invariants.no_unknown_live_job(world) == []

    world.vertex.refusals[-1] = Refusal(
        "cancel", "us-central1", world.clock.now() - timedelta(hours=1), world.clock.now()
    )
    assert invariants.no_unknown_live_job(world)  # the permission is back: the sweep's to cancel


def test_a_request_left_without_a_job_or_an_end_is_caught(world: World) -> None:
    record(world, "r1", RequestStatus.CLAIMED, attempt(1))
    world.storage.client().bucket(world.settings.state_bucket).blob(
        "pacing/us-central1/waiting/1000000~r2~1"
    ).upload_from_string(b"")

    details = [v.detail for v in invariants.liveness(world)]
    assert any("r1 is CLAIMED" in d for d in details)
    assert any("still in line" in d for d in details)


def test_a_failed_request_without_its_alert_is_caught(world: World) -> None:
    record(world, "r1", RequestStatus.FAILED, attempt(1))

    assert any("with no alert" in v.detail for v in invariants.liveness(world))


def test_state_left_by_finished_requests_is_caught(world: World) -> None:
    bucket = world.storage.client().bucket(world.settings.state_bucket)
    bucket.blob("maintenance/reconcile-cursor.json").upload_from_string(b"{}")
    assert invariants.bounded_state(world) == []
    bucket.blob("dedupe/abc.json").upload_from_string(b"{}")
    record(world, "r1", RequestStatus.SUCCEEDED, attempt(1))

    kinds = sorted(v.detail.split(" object")[0] for v in invariants.bounded_state(world))
    assert kinds == ["1 dedupe", "1 ledger"]


def test_what_a_running_request_keeps_is_not_a_leak(world: World) -> None:
    record(world, "r1", RequestStatus.RUNNING, attempt(1))

    assert invariants.bounded_state(world) == []


def test_the_note_of_a_record_less_stray_still_live_is_not_a_leak(world: World) -> None:
    """Seed 954: a stray outlived its request's record (retention deleted it) and Vertex refuses its
    cancel for good: the sweep says it again a month later (the note's lifecycle rule) while it
    lives. Its note is a leak only once the job has ended."""
    stray = job(world, "r1", 1, "JOB_STATE_QUEUED")
    bucket = world.storage.client().bucket(world.settings.state_bucket)
    bucket.blob(f"rejections/stray-{stray.name.rsplit('/', 1)[-1]}").upload_from_string(b'{"sent": true}')
    assert invariants.bounded_state(world) == []

    stray.state = "JOB_STATE_CANCELLED"
    [leak] = invariants.bounded_state(world)
    assert leak.detail.startswith("1 rejections object(s)")


def test_the_marker_of_a_record_less_request_whose_job_lives_is_not_a_leak(world: World) -> None:
    """Seed 10503: a person's console copy of r1's job outlived r1's record (retention deleted it)
    and Vertex refuses its cancel for good; each stray sweep that lists it not ended renews the id's
    active marker, so a fresh message of the id looks (docs/ARCHITECTURE.md, "Exactly once, and what
    breaks it"). The marker is a leak once the job has ended."""
    stray = job(world, "r1", 1, "JOB_STATE_RUNNING")
    bucket = world.storage.client().bucket(world.settings.state_bucket)
    bucket.blob("active/r1").upload_from_string(b"")
    assert invariants.bounded_state(world) == []

    stray.state = "JOB_STATE_CANCELLED"
    [leak] = invariants.bounded_state(world)
    assert leak.detail == "1 ledger object(s) left after retention, e.g. active/r1"


def test_the_marker_of_a_record_less_request_stays_while_the_sweep_cannot_list_a_location(world: World) -> None:
    """Seed 118: a person deleted r1's record, and Vertex refuses `list` in us-central1 for good; no
    stray sweep can list every location, so none can say that no job of r1 lives, and reconcile
    keeps r1's marker (`remove_recordless_markers`) until the permission is granted. A leak once
    the sweep can list again, or of an id that has a record."""
    from sim.faults import Refusal

    bucket = world.storage.client().bucket(world.settings.state_bucket)
    bucket.blob("active/r1").upload_from_string(b"")
    [leak] = invariants.bounded_state(world)
    assert leak.detail == "1 ledger object(s) left after retention, e.g. active/r1"

    since = world.clock.now() - timedelta(hours=1)
    world.vertex.refusals = [Refusal("list", "us-central1", since, None)]
    assert invariants.bounded_state(world) == []

    world.vertex.refusals = [Refusal("list", "us-central1", since, world.clock.now())]  # granted again
    assert [v.detail for v in invariants.bounded_state(world)] == [leak.detail]


def test_a_burst_document_is_kept_while_its_line_waits(world: World) -> None:
    """Seeds 2605, 3908, 5945: GPU requests wait for good behind a full GPU quota, and their line
    never empties; its burst document ends only when a hand-over finds the line empty
    (docs/ARCHITECTURE.md, "One alert per burst"). It is a leak once no one waits in its line."""
    bucket = world.storage.client().bucket(world.settings.state_bucket)
    bucket.blob("pacing/us-central1/burst.json").upload_from_string(b'{"alerted": true}')
    record(world, "r1", RequestStatus.CLAIMED, attempt(1))
    bucket.blob("pacing/us-central1/waiting/1000000~r1~1").upload_from_string(b"")
    assert invariants.bounded_state(world) == []

    bucket.blob("pacing/europe-west4/burst.json").upload_from_string(b'{"alerted": true}')  # no one waits there
    bucket.blob("pacing/us-central1/waiting/1000000~r1~1").delete()
    details = [v.detail for v in invariants.bounded_state(world)]
    assert details == ["2 pacing object(s) left after retention, e.g. pacing/europe-west4/burst.json"]


def test_a_trigger_whose_state_a_person_left_unreadable_keeps_only_its_undecided_windows(world: World) -> None:
    # Seed 237: a hand-written trigger state stopped every later window from closing, as
    # docs/operations.md says (`trigger_corrupt`: none is decided until it is repaired); those
    # windows are kept by design, not leaked, but a window closed before is still retired.
    bucket = world.storage.client().bucket(world.settings.state_bucket)
    state = "triggers/daily/state.json"
    bucket.blob(state).upload_from_string(b'{"carry": [], "carry_count": [0]}')
    world.tampering.written[state] = "field_other_type"
    undecided = [
        "triggers/daily/open/w2",
        "triggers/daily/windows/w2/objects/a1",
        "triggers/daily/windows/w2/sealed",
        "triggers/daily/windows/w3.json",  # deferred: what the state carries is unknown
    ]
    for name in undecided:
        bucket.blob(name).upload_from_string(b"")
    bucket.blob("triggers/daily/windows/w2.json").upload_from_string(b'{"state": "sealed"}')
    bucket.blob("triggers/daily/windows/w3.json").upload_from_string(b'{"state": "deferred"}')
    assert invariants.bounded_state(world) == []

    bucket.blob("triggers/daily/windows/w1.json").upload_from_string(b'{"state": "closed"}')
    bucket.blob("triggers/daily/windows/w1/objects/a0").upload_from_string(b"")
    [leak] = invariants.bounded_state(world)
    assert leak.detail.startswith("2 triggers object(s)")


def test_the_retention_horizon_is_past_every_retention_setting(world: World) -> None:
    horizon = invariants.retention_horizon_seconds(world.settings)
    assert horizon > world.settings.ledger_retention_seconds
    assert horizon > world.settings.finished_retention_seconds + timedelta(days=1).total_seconds()


def test_a_resume_from_a_torn_checkpoint_is_caught(world: World) -> None:
    running = trained(world, "r1")
    world.trainer.save(running, 100, torn=False)
    world.trainer.save(running, 200, torn=True)
    world.trainer.start(running)  # the kit's discovery skips the torn step 200
    [resume] = world.trainer.resumes
    assert resume.resumed == ("step-000100/", 100)
    assert invariants.resumes_from_newest_complete(world) == []

    world.trainer.resumes.append(dataclasses.replace(resume, resumed=("step-000200/", 200)))

    [found] = invariants.resumes_from_newest_complete(world)
    assert "resumed from step-000200/ (step 200, torn)" in found.detail


def test_a_resume_from_another_requests_checkpoint_is_caught(world: World) -> None:
    intruder = trained(world, "r2", folder_of="r1")  # a job given another request's folder
    world.trainer.save(intruder, 300, torn=False)
    world.trainer.start(intruder)
    assert "not its own folder" in invariants.resumes_from_newest_complete(world)[0].detail

    victim = trained(world, "r1")  # what r2's job wrote is in r1's folder now
    world.trainer.start(victim)

    details = [v.detail for v in invariants.resumes_from_newest_complete(world)]
    assert any("written by r2" in d for d in details)


def test_a_pruned_newest_complete_checkpoint_is_caught(world: World) -> None:
    running = trained(world, "r1")
    world.trainer.save(running, 100, torn=False)
    world.trainer.save(running, 200, torn=False)
    assert invariants.newest_complete_kept(world) == []

    world.storage.client().bucket(world.settings.checkpoint_bucket).blob(
        "requests/r1/checkpoints/step-000200/model.pt"
    ).delete()

    [found] = invariants.newest_complete_kept(world)
    assert "step-000200/ (step 200), the newest complete checkpoint of r1" in found.detail
    world.trainer.start(running)  # the next run resumes from 100: the kit is right, the pruner was not
    assert [v.invariant for v in invariants.resumes_from_newest_complete(world)] == ["newest_complete_kept"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layouts_torn_save_is_skipped_and_a_resubmit_cut_short_publishes_nothing(
    world: World, layout: str
) -> None:
    running = trained(world, "r1")
    world.trainer.layouts["r1"] = layout
    world.trainer.save(running, 100, torn=False)
    world.trainer.save(running, 200, torn=True)
    world.trainer.start(running)
    assert world.trainer.resumes[-1].resumed[1] == 100  # type: ignore[index]
    LedgerStore(world.storage.client().bucket(world.settings.state_bucket)).restore(
        RequestRecord(
            "r1",
            {"request_id": "r1", "custom_job": custom_job(random.Random(0), gpu=False)},
            "gs://c/",
            status=RequestStatus.FAILED,
            attempts=[attempt(1, running.name)],
        )
    )

    resubmit(world, cut_at_copy=1)  # the command dies at its first copy
    assert world.pubsub.on(world.settings.job_requests_topic) == []
    resubmit(world, cut_at_copy=None)

    [message] = world.pubsub.on(world.settings.job_requests_topic)
    new_id = message.json()["request_id"]
    copy = trained(world, new_id)
    world.trainer.layouts[new_id] = layout
    world.trainer.start(copy)
    assert world.trainer.resumes[-1].resumed[1] == 100  # type: ignore[index]
    assert invariants.resumes_from_newest_complete(world) == []


def test_a_hostile_step_that_changes_another_request_is_caught(world: World) -> None:
    record(world, "r1", RequestStatus.RUNNING, attempt(1))
    victim = job(world, "r1", 1)
    before = invariants.others_state(world, frozenset({"h1"}))
    record(world, "h1", RequestStatus.CLAIMED, attempt(1))  # its own: allowed
    record(world, "r2", RequestStatus.CLAIMED, attempt(1))  # an id nobody used yet: its own too
    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
    ledger.update("r1", lambda current: current.mark("request_id_conflict:1:abc") and current)  # a second body
    after = invariants.others_state(world, frozenset({"h1"}))
    assert invariants.hostile_step_contained(world, before, after) == []
    assert invariants.records_created(before, after) == {"r2"}

    del world.storage.objects(world.settings.state_bucket)["requests/r1.json"]
    record(world, "r1", RequestStatus.FAILED, attempt(1))
    victim.state = "JOB_STATE_CANCELLING"
    record(world, "trg-daily-data-w20260302t080000z", RequestStatus.CLAIMED, attempt(1))  # a derived id

    [found] = invariants.hostile_step_contained(world, before, invariants.others_state(world, frozenset({"h1"})))
    assert "requests/r1.json (changed: " in found.detail and "status" in found.detail
    assert "JOB_STATE_RUNNING -> JOB_STATE_CANCELLING" in found.detail
    assert "requests/trg-daily-data-w20260302t080000z.json (created)" in found.detail


def test_a_request_leaving_the_quota_line_during_a_hostile_step_is_the_drainers_work(world: World) -> None:
    """The quota line's drainer may run in the hostile message's submit delivery and clear a
    request's entry: that request, left out before the step for its place in line, is no change
    the message made (seed 871: it read as "created", its checkpoint objects as records, and the
    check raised AttributeError)."""
    request_id = "trg-daily-data-w20260302t110500z"
    record(world, request_id, RequestStatus.SUCCEEDED, attempt(1))
    folder = world.trainer.own_folder(request_id)
    world.storage.client().bucket(world.settings.checkpoint_bucket).blob(
        folder + "step-000500/model.pt"
    ).upload_from_string(b"weights")
    entry = (
        world.storage.client()
        .bucket(world.settings.state_bucket)
        .blob(f"pacing/us-central1/waiting/1000000~{request_id}~1")
    )
    entry.upload_from_string(b"")
    before = invariants.others_state(world, frozenset({"h1"}))
    entry.delete()  # the drainer found its attempt done

    after = invariants.others_state(world, frozenset({"h1"}))

    assert invariants.hostile_step_contained(world, before, after) == []
    assert invariants.records_created(before, after) == frozenset()


def test_a_request_a_hostile_step_puts_in_the_quota_line_is_still_compared(world: World) -> None:
    """Only a request in line before the step is left to the drainer: one the step itself put in
    line is no drainer's work."""
    record(world, "r1", RequestStatus.CLAIMED, attempt(1))
    before = invariants.others_state(world, frozenset({"h1"}))
    world.storage.client().bucket(world.settings.state_bucket).blob(
        "pacing/us-central1/waiting/1000000~r1~1"
    ).upload_from_string(b"")

    [found] = invariants.hostile_step_contained(world, before, invariants.others_state(world, frozenset({"h1"})))
    assert "requests/r1.json (changed: " in found.detail


@pytest.mark.parametrize("request_id", ["r1", "trg-daily-data-w20260302t110500z"])
def test_a_hostile_step_that_writes_in_another_requests_folder_is_caught(world: World, request_id: str) -> None:
    """A checkpoint object is no ledger record, though both are named `requests/<id>...` (in
    their own buckets)."""
    record(world, request_id, RequestStatus.RUNNING, attempt(1))
    before = invariants.others_state(world, frozenset({"h1"}))
    folder = world.trainer.own_folder(request_id)
    world.storage.client().bucket(world.settings.checkpoint_bucket).blob(
        folder + "step-000500/model.pt"
    ).upload_from_string(b"forged")

    [found] = invariants.hostile_step_contained(world, before, invariants.others_state(world, frozenset({"h1"})))
    assert f"{folder}step-000500/model.pt (written)" in found.detail


def test_a_hostile_step_may_publish_a_refusal_alert_decided_before_and_nothing_else(world: World) -> None:
    """A delivery that finds another request's effects pending past the lease takes them over
    (shared/deciding/outbox.py): publishing the `notify_refused` alert an earlier delivery decided,
    its marker already set, is the system's own work (seed 1505 read the marker as new)."""
    record(world, "r1", RequestStatus.RUNNING, attempt(1))
    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
    refusal = Alert.of(AlertKind.NOTIFY_REFUSED, "the topic refused", request_id="r1").to_json()

    def decide_refusal(current: RequestRecord | None) -> RequestRecord | None:
        assert current is not None and current.mark("notify_refused:0")
        current.pending_alerts.append(refusal)
        return current

    ledger.update("r1", decide_refusal)
    before = invariants.others_state(world, frozenset({"h1"}))
    ledger.update("r1", lambda current: setattr(current, "pending_alerts", []) or current)  # published, cleared
    assert invariants.hostile_step_contained(world, before, invariants.others_state(world, frozenset({"h1"}))) == []

    ledger.update("r1", lambda current: current.mark("budget_reached:0") and current)  # more than a publish
    [found] = invariants.hostile_step_contained(world, before, invariants.others_state(world, frozenset({"h1"})))
    assert "requests/r1.json (changed: markers, pending_alerts)" in found.detail


def test_another_record_in_a_past_layout_is_compared_as_it_is(world: World) -> None:
    """A record a person rewrote in a past layout (its lists as maps keyed by position,
    `sim.faults.reshape`) is another request's state too: compared as stored, not read as this
    version's lists (the check crashed on its `pending_alerts`, seed 67)."""
    record(world, "r1", RequestStatus.RUNNING, attempt(1))
    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
    ledger.update("r1", lambda current: current.mark("notice:started:1:0") and current)
    stored = world.storage.objects(world.settings.state_bucket)["requests/r1.json"]
    past = json.loads(stored.data)
    past["markers"] = dict(enumerate(past["markers"]))
    past["pending_alerts"] = {"0": {"kind": "budget_reached", "request_id": "r1"}}
    world.storage.client().bucket(world.settings.state_bucket).blob("requests/r1.json").upload_from_string(
        json.dumps(past)
    )

    before = invariants.others_state(world, frozenset({"h1"}))

    assert before["requests/r1.json"]["pending_alerts"] == past["pending_alerts"]
    assert invariants.hostile_step_contained(world, before, invariants.others_state(world, frozenset({"h1"}))) == []


def test_a_forged_requeue_may_claim_only_the_attempt_the_victims_record_decided(world: World) -> None:
    """The attribute marks, the ledger decides (shared/requests/envelope.py): a forged re-queue of
    the due attempt does what the real one would, whichever comes first (seed 31); any other change
    it makes is caught."""
    from shared.ledger.records import Requeue

    decided = Requeue(2, "us-central1", "STANDARD", "deadline", "2026-03-02T08:10:00Z")
    record(world, "r1", RequestStatus.REQUEUED, attempt(1), requeue=decided)
    before = invariants.others_state(world, frozenset({"h1"}))
    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))

    def claim(n: int) -> None:
        def claimed(current: RequestRecord | None) -> RequestRecord:
            current.attempts.append(attempt(n))
            current.requeue, current.status = None, RequestStatus.CLAIMED
            return current

        ledger.update("r1", claimed)

    claim(2)
    job(world, "r1", 2)
    assert invariants.hostile_step_contained(world, before, invariants.others_state(world, frozenset({"h1"}))) == []

    del world.storage.objects(world.settings.state_bucket)["requests/r1.json"]
    record(world, "r1", RequestStatus.REQUEUED, attempt(1), requeue=decided)
    claim(3)  # not the decided attempt
    [found] = invariants.hostile_step_contained(world, before, invariants.others_state(world, frozenset({"h1"})))
    assert "requests/r1.json (changed: attempts" in found.detail and "requeue, status" in found.detail


def test_alerts_of_distinct_decisions_are_not_copies(world: World) -> None:
    for refused in ("d1", "d2"):  # two other bodies under one request id: two conflicts to tell
        alert = Alert.of(AlertKind.REQUEST_ID_CONFLICT, "x", request_id="r1", details={"refused_digest": refused})
        world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert.to_json()).encode(), {})

    assert invariants.alerts_not_per_redelivery(world) == []


def test_stray_job_alerts_of_two_strays_of_one_attempt_are_not_copies(world: World) -> None:
    for stray in ("j2", "j3"):  # its marker names each stray job: one alert each
        alert = Alert.of(AlertKind.STRAY_JOB, "x", request_id="r1", attempt=1, details={"stray_job": stray})
        world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert.to_json()).encode(), {})

    assert invariants.alerts_not_per_redelivery(world) == []


def test_two_prune_runs_reporting_one_request_are_two_reports_not_a_copy(world: World) -> None:
    # A run's report (shared/pruning/runner.py): each run that pruned the request says so.
    for _ in range(2):
        report = Alert.of(AlertKind.PRUNE_REPORT, "Pruned 1 checkpoints", request_id="r1").to_json()
        world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(report).encode(), {})
    assert invariants.alerts_not_per_redelivery(world) == []
    # a request's decided alert twice still is
    failed = Alert.of(AlertKind.INVALID_REQUEST, "refused", request_id="r1", attempt=1).to_json()
    for _ in range(2):
        world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(failed).encode(), {})
    [found] = invariants.alerts_not_per_redelivery(world)
    assert "invalid_request" in found.detail


def prune_report(world: World, run: str, request_id: str, *errors: str, deleted: int = 0) -> None:
    """A prune run's report, published by the delivery of prune message `run`."""
    details = {"requests": [{"request_id": request_id, "objects_deleted": deleted, "errors": list(errors)}]}
    severity = "ERROR" if any(": ServiceUnavailable: " not in e for e in errors) else "WARNING"
    alert = Alert.of(AlertKind.PRUNE_REPORT, "pruned", severity=severity, request_id=request_id, details=details)
    message_id = world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert.to_json()).encode(), {})
    world.alert_origins[message_id] = run


def test_one_permanent_error_reported_by_every_prune_run_is_caught(world: World) -> None:
    """Defect 8 of issue 43: a corrupt record raised an ERROR prune_report on every hourly run."""
    corrupt = "planning: CorruptRecord: requests/r1.json is not a ledger record"
    prune_report(world, "m1", "r1", corrupt)
    prune_report(world, "m1", "r1", corrupt)  # its redelivery: the docs' at-least-once
    assert invariants.errors_alerted_once(world) == []

    prune_report(world, "m2", "r1", corrupt)  # the next hour's run: nothing new

    [found] = invariants.errors_alerted_once(world)
    assert found.invariant == "errors_alerted_once" and "2 prune runs" in found.detail and "r1" in found.detail


def test_transient_errors_and_new_deletions_may_repeat_in_run_reports(world: World) -> None:
    busy = "deleting: ServiceUnavailable: 503 the bucket is busy"
    prune_report(world, "m1", "r1", busy)
    prune_report(world, "m2", "r1", busy)
    forbidden = "deleting: Forbidden: 403 on ckpt-000100"
    prune_report(world, "m1", "r2", forbidden, deleted=2)
    prune_report(world, "m2", "r2", forbidden, deleted=1)  # it deleted something else meanwhile
    assert invariants.errors_alerted_once(world) == []


def _claim_republished(world: World, request_id: str, *, seconds_ago: float) -> None:
    """A stale claim (held past its lease) that reconcile re-published `seconds_ago`."""
    now = world.clock.now()
    claim = dataclasses.replace(
        attempt(1),
        claimed_at=(now - timedelta(hours=1)).isoformat(),
        republished=1,
        republished_at=(now - timedelta(seconds=seconds_ago)).isoformat(),
    )
    record(world, request_id, RequestStatus.CLAIMED, claim)


def test_a_reconcile_lookup_of_a_claim_backing_off_is_caught(world: World) -> None:
    from sim.world import Task

    _claim_republished(world, "r1", seconds_ago=10)  # backs off for 2 x the 120 s lease
    _claim_republished(world, "r2", seconds_ago=600)  # due again: its lookup is the pass's work
    world._current = Task("reconcile", lambda: None, faulty=False)
    world.vertex.looked_up("us-central1", "r1")  # as SimVertex.list_custom_jobs calls it
    world.vertex.looked_up("us-central1", "r2")
    world._current = None

    [found] = invariants.no_lookup_while_backing_off(world)
    assert "r1 a1" in found.detail and "backs off" in found.detail


def test_a_request_whose_message_awaits_its_redrive_is_not_lost(world: World) -> None:
    from sim.pubsub import DEAD_LETTER_TOPIC

    arrival = next(a for a in world.workload.arrivals if a.topic == "job_requests_topic" and b'"request_id"' in a.data)
    rid = json.loads(arrival.data)["request_id"]
    assert any(rid in v.detail for v in invariants.liveness(world))  # published, never handled

    world.pubsub.accept(DEAD_LETTER_TOPIC, arrival.data, dict(arrival.attributes))  # failed 5 times

    assert not any(f"request {rid} was published" in v.detail for v in invariants.liveness(world))


# Requesters' notifications (shared/deciding/notices.py).

NOTIFY_TOPIC = "projects/sim-project/topics/notify-r1"


def notified_record(world: World, *markers: str, **fields: object) -> None:
    LedgerStore(world.storage.client().bucket(world.settings.state_bucket)).restore(
        RequestRecord(
            "r1",
            {"custom_job": {}, "notify": {"topic": NOTIFY_TOPIC}},
            "gs://c/",
            status=RequestStatus.SUCCEEDED,
            attempts=[attempt(1)],
            markers=list(markers),
            **fields,
        )
    )


def test_a_decided_notification_never_published_is_caught(world: World) -> None:
    from shared.deciding.notices import event_id

    notified_record(world, "notice:accepted:1:0", "notice:succeeded:1:0")
    published = {"event_id": event_id("r1", 1, "accepted", 0), "kind": "accepted"}
    world.pubsub.accept("notify-r1", json.dumps(published).encode(), {})

    [found] = invariants.notifications_at_least_once(world)
    assert "notice:succeeded:1:0 of r1 was decided, never published" in found.detail


def test_a_notification_left_pending_is_caught(world: World) -> None:
    notified_record(world, pending_notices=[{"event_id": "x", "kind": "accepted"}])
    assert [v.detail for v in invariants.notifications_at_least_once(world)] == [
        "request r1 still has 1 notification(s) pending"
    ]


def test_notifications_stopped_for_a_topic_that_accepts_is_caught(world: World) -> None:
    notified_record(world, "notice:accepted:1:0", "notify_refused:0")
    assert [v.detail for v in invariants.notifications_at_least_once(world)] == [
        "the notifications of r1 stopped, but its topic notify-r1 accepts publishes"
    ]
    world.pubsub.refusing = frozenset({"notify-r1"})
    world.workload.refusing_topics = frozenset({"notify-r1"})
    assert invariants.notifications_at_least_once(world) == []


def test_a_notification_after_the_requests_ending_is_caught(world: World) -> None:
    def told(request_id: str, kind: str, seq: int) -> None:
        body = {"request_id": request_id, "kind": kind, "seq": seq, "event_id": f"{request_id}/{kind}/{seq}"}
        world.pubsub.accept("notify-r1", json.dumps(body).encode(), {"kind": kind})

    notified_record(world, "notice:accepted:1:0", "notice:succeeded:1:0")
    told("r1", "accepted", 1)
    told("r1", "succeeded", 2)
    told("r1-r2", "preempted", 3)  # its resubmit's, on the topic it copied: not r1's
    assert invariants.ending_is_the_last_notification(world) == []

    told("r1", "preempted", 3)  # a kit line read after the end

    assert [v.detail for v in invariants.ending_is_the_last_notification(world)] == [
        "r1 was told preempted (seq 3) after its end, succeeded (seq 2)"
    ]


def test_a_notification_decided_after_the_requests_ending_is_caught(world: World) -> None:
    notified_record(world, "notice:accepted:1:0", "notice:succeeded:1:0", "notice:preempted:1:0")
    for kind, seq in (("accepted", 1), ("succeeded", 2)):
        world.pubsub.accept("notify-r1", json.dumps({"request_id": "r1", "kind": kind, "seq": seq}).encode(), {})

    assert [v.detail for v in invariants.ending_is_the_last_notification(world)] == [
        "r1 decided 1 notification(s) after its end, succeeded (seq 2)"
    ]


# FLEX_START (sim/flex.py).


def test_a_flex_start_attempt_counted_preempted_is_caught(world: World) -> None:
    waited = job(world, "r1", 1, "JOB_STATE_FAILED", strategy="FLEX_START")
    waited.error = flex.wait_expired_error(86400)
    expired = dataclasses.replace(attempt(1, waited.name), strategy="FLEX_START")
    record(world, "r1", RequestStatus.REQUEUED, expired)
    spot = dataclasses.replace(attempt(1, "spot-job"), preemptions_unknown=True)  # a Spot stockout: "≥1" is right
    record(world, "r2", RequestStatus.GAVE_UP, spot)
    assert flex.flex_start_never_preempted(world) == []
    record(world, "r3", RequestStatus.REQUEUED, dataclasses.replace(expired, preemptions_unknown=True))

    [found] = flex.flex_start_never_preempted(world)

    assert found.invariant == "flex_start_never_preempted"
    assert "r3 attempt 1 ran FLEX_START and is counted preempted (at least once)" in found.detail
    waited.vms_reclaimed = 1  # the model itself must never preempt one
    assert any("Vertex preempted FLEX_START job" in v.detail for v in flex.flex_start_never_preempted(world))


def test_a_flex_start_wait_run_out_without_a_decision_is_caught(world: World) -> None:
    from shared.ledger.states import AttemptOutcome

    for request_id, status, outcome in (
        ("r1", RequestStatus.REQUEUED, AttemptOutcome.REQUEUED),
        ("r2", RequestStatus.GAVE_UP, AttemptOutcome.GAVE_UP),
        ("r3", RequestStatus.SUBMITTED, None),  # nothing decided
        ("r4", RequestStatus.FAILED, AttemptOutcome.FAILED),  # a capacity error is no failure of the job
    ):
        waited = job(world, request_id, 1, "JOB_STATE_FAILED", strategy="FLEX_START")
        waited.error = flex.wait_expired_error(86400)
        ran_out = dataclasses.replace(attempt(1, waited.name), strategy="FLEX_START", outcome=outcome)
        record(world, request_id, status, ran_out)

    found = flex.flex_waits_decided(world)

    assert [v.invariant for v in found] == ["flex_waits_decided"] * 2
    assert "r3 attempt 1: its FLEX_START wait ran out" in found[0].detail and "undecided" in found[0].detail
    assert "r4 attempt 1" in found[1].detail and "the attempt is failed (FAILED)" in found[1].detail


def test_a_flex_start_job_waiting_past_its_max_wait_is_caught(world: World) -> None:
    waiting = job(world, "r1", 1, "JOB_STATE_PENDING", strategy="FLEX_START")
    waiting.request["jobSpec"]["scheduling"]["maxWaitDuration"] = "3600s"
    waiting.flex_wait_began = world.clock.now()
    world.clock.advance(3600 + 900)
    assert flex.flex_waits_decided(world) == []  # within the step that moves it on

    world.clock.advance(1)

    [found] = flex.flex_waits_decided(world)
    assert "waited 4501 s, past 3600 s" in found.detail


def test_two_live_flex_start_jobs_for_one_request_are_caught(world: World) -> None:
    job(world, "r1", 1, "JOB_STATE_PENDING", strategy="FLEX_START")
    assert invariants.one_live_job_per_request(world) == []
    job(world, "r1", 2, "JOB_STATE_PENDING", strategy="FLEX_START")

    [found] = invariants.one_live_job_per_request(world)
    assert "a1 FLEX_START JOB_STATE_PENDING, a2 FLEX_START JOB_STATE_PENDING" in found.detail


def test_the_flex_start_invariants_are_checked_once_quiet() -> None:
    assert {flex.flex_start_never_preempted, flex.flex_waits_decided} <= set(invariants.QUIESCENCE)


def test_a_vertex_call_without_a_timeout_or_past_its_bound_is_caught(world: World) -> None:
    from sim import hangs

    bound = hangs.timeout_bound(world)
    world.vertex.call_timeouts[("reconcile", "get", bound)] += 1
    world.vertex.call_timeouts[("world", "list", None)] += 1  # a test's or the world's own call
    assert hangs.vertex_calls_bounded(world) == []

    world.vertex.call_timeouts[("reconcile", "list", None)] += 3
    world.vertex.call_timeouts[("submit_job", "create", bound + 0.5)] += 1
    world.vertex.call_timeouts[("on_job_event", "cancel", 0.0)] += 1

    found = hangs.vertex_calls_bounded(world)
    assert {v.invariant for v in found} == {"vertex_calls_bounded"}
    assert sorted(v.detail.split(" sent ")[0] for v in found) == ["on_job_event", "reconcile", "submit_job"]
    assert any("3 list call(s) with timeout=None" in v.detail for v in found)
    assert hangs.vertex_calls_bounded in invariants.QUIESCENCE


def _reconcile_pass_cancelling(world: World, jobs: int, *, bypass: bool) -> list[str]:
    """A reconcile pass (budget: 5 CRUD calls a minute) that reads `jobs` running jobs in
    us-central1 from its listing and cancels each (the outbox's cancels), then lists europe-west4;
    `bypass`: its cancels go by the plain client, as `Ports.cancel_job` did before cancelrule
    (fbcdd0d: the pass replaced `job_service` alone). The outcome of each cancel, in order."""
    from shared.adapters.vertex import canceller, unfinished_jobs_filter
    from shared.log import Logger
    from shared.reconcile_vertex import CallDeferred, VertexPass
    from sim.world import Task

    world.settings = dataclasses.replace(world.settings, vertex_crud_per_minute=20, reconcile_crud_share=0.25)
    names = [job(world, f"r{k}", 1).name for k in range(jobs)]
    timeout = world.settings.vertex_call_timeout_seconds
    shell = dataclasses.replace(world.ports_for("reconcile"), cancel_job=canceller(world.vertex, timeout=timeout))
    world._current = Task("reconcile", lambda: None, faulty=False, whole=True)  # noqa: SLF001 - a pass in flight
    vertex_pass = VertexPass(shell, Logger(), started=world.clock.now())
    ports = dataclasses.replace(vertex_pass.ports, cancel_job=shell.cancel_job) if bypass else vertex_pass.ports
    outcomes = []
    for name in names:
        ports.job_service("us-central1").get_custom_job(name=name, timeout=timeout)  # answered by the listing
        try:
            ports.cancel_job("us-central1", name)
            outcomes.append("sent")
        except CallDeferred:
            outcomes.append("deferred")
        world.clock.advance(1)
    listing = {"parent": parent_path(world.settings.project, "europe-west4")}
    listing["filter"] = unfinished_jobs_filter(world.settings.deployment_label)
    ports.job_service("europe-west4").list_custom_jobs(request=listing, timeout=timeout)  # made past the budget
    world._current = None  # noqa: SLF001
    return outcomes


def test_a_pass_whose_cancels_bypass_its_crud_budget_is_caught(world: World) -> None:
    from sim import reconcile_budget

    assert _reconcile_pass_cancelling(world, 8, bypass=True) == ["sent"] * 8

    [found] = reconcile_budget.reconcile_within_crud_budget(world)
    assert found.invariant == "reconcile_within_crud_budget"
    assert "4 cancel call(s) past its budget of 5 CRUD calls a minute" in found.detail
    assert reconcile_budget.reconcile_within_crud_budget in invariants.QUIESCENCE


def test_a_pass_within_its_crud_budget_and_its_listings_made_past_it_is_not_flagged(world: World) -> None:
    from sim import reconcile_budget

    # Its us-central1 listing and 4 cancels spend the 5; europe-west4's listing is made all the same.
    assert _reconcile_pass_cancelling(world, 8, bypass=False) == ["sent"] * 4 + ["deferred"] * 4
    assert [c.operation for c in world.vertex.pass_calls] == ["list"] + ["cancel"] * 4 + ["list"]

    assert reconcile_budget.reconcile_within_crud_budget(world) == []


def test_a_pass_whose_listing_pages_past_its_crud_budget_is_not_flagged(world: World) -> None:
    """The listing is always made, every page of it (`VertexPass.next_page` spends each forced):
    a page is a call of its own (`list_page_size`), and the listing's pages past the budget are
    the listing, not calls the budget should have deferred."""
    from sim import reconcile_budget

    world.vertex.page_size = 1  # us-central1's listing of 8 jobs: 8 pages, past the budget of 5
    assert _reconcile_pass_cancelling(world, 8, bypass=False) == ["deferred"] * 8
    pages = [c for c in world.vertex.pass_calls if c.location == "us-central1"]
    assert len(pages) == 8 and len({c.listing for c in pages}) == 1

    assert reconcile_budget.reconcile_within_crud_budget(world) == []


def test_a_stray_s_first_cancel_past_the_crud_budget_is_the_sweep_s_and_a_second_is_caught(world: World) -> None:
    """Seeds 12482, 20719: a listing of pages of one job spent the budget every pass, and the
    sweep's cancel of a person's console copy was deferred by each, for good. The sweep's first
    cancel of a stray is spent as the listing is; a recorded job's cancel, or a stray's second in
    the same pass, is still judged against the budget."""
    from sim import reconcile_budget
    from sim.world import Task

    world.settings = dataclasses.replace(world.settings, vertex_crud_per_minute=20, reconcile_crud_share=0.25)
    recorded = job(world, "r1", 1)
    record(world, "r1", RequestStatus.RUNNING, attempt(1, recorded.name))
    copy = job(world, "r1", 1)  # the re-run in the console
    client = world.vertex("us-central1")
    timeout = world.settings.vertex_call_timeout_seconds
    world._current = Task("reconcile", lambda: None, faulty=False, whole=True)  # noqa: SLF001 - a pass in flight
    for _ in range(5):  # the budget spent
        client.get_custom_job(name=recorded.name, timeout=timeout)
    client.cancel_custom_job(name=copy.name, timeout=timeout)
    assert reconcile_budget.reconcile_within_crud_budget(world) == []

    client.cancel_custom_job(name=copy.name, timeout=timeout)
    world._current = None  # noqa: SLF001
    [found] = reconcile_budget.reconcile_within_crud_budget(world)
    assert "1 cancel call(s) past its budget of 5" in found.detail


def test_a_refused_stray_cancel_is_sent_again_past_the_crud_budget_by_each_pass_until_vertex_takes_it(
    world: World,
) -> None:
    """Seed 21001: cancel was refused (403) in us-central1 for good, and a person deleted a
    record while its create was out; its job, a stray, stayed live. Every pass's listing spent the
    budget and its sweep sent the stray's cancel again past it, refused each time: the alert's
    "the next pass cancels it" needs that resend, once the permission is granted. One a pass, not
    a second in the same pass, and none once Vertex took one (the stray is then CANCELLING)."""
    from sim import reconcile_budget
    from sim.faults import Refusal
    from sim.world import Task

    world.settings = dataclasses.replace(world.settings, vertex_crud_per_minute=20, reconcile_crud_share=0.25)
    recorded = job(world, "r1", 1)
    record(world, "r1", RequestStatus.RUNNING, attempt(1, recorded.name))
    copy = job(world, "r1", 1)  # the re-run in the console
    client = world.vertex("us-central1")
    timeout = world.settings.vertex_call_timeout_seconds
    refusal = Refusal("cancel", "us-central1", world.clock.now(), None)
    world.vertex.refusals.append(refusal)

    def a_pass(cancels: int) -> None:
        world._current = Task("reconcile", lambda: None, faulty=False, whole=True)  # noqa: SLF001 - a pass in flight
        for _ in range(5):  # the listing's pages spent the budget
            client.get_custom_job(name=recorded.name, timeout=timeout)
        for _ in range(cancels):
            try:
                client.cancel_custom_job(name=copy.name, timeout=timeout)
            except (api.PermissionDenied, api.FailedPrecondition):  # refused, or ended since it was taken
                pass
        world._current = None  # noqa: SLF001
        world.clock.advance(300)

    a_pass(1)
    a_pass(1)  # the first was refused: the next pass sends it again
    world.vertex.refusals.remove(refusal)  # the permission granted
    a_pass(1)  # Vertex takes it: the stray is CANCELLING
    assert reconcile_budget.reconcile_within_crud_budget(world) == []

    a_pass(2)  # one after Vertex took one, and a second in the same pass
    [found] = reconcile_budget.reconcile_within_crud_budget(world)
    assert "reconcile pass 4 sent 2 cancel call(s) past its budget of 5" in found.detail


def test_a_create_a_pass_sends_is_caught_within_its_budget_or_not(world: World) -> None:
    """A pass's budget and window judge its gets, lists and cancels; a create (Vertex's submission
    quota, not the CRUD one) is none of them, and a pass sends none. Its client once forwarded any
    call it did not wrap to the plain one (`PassClient.__getattr__`, before passcalls): a create
    would have left unbudgeted and outside the window. Planted: one create, well within the budget."""
    from sim import reconcile_budget
    from sim.world import Task

    world.settings = dataclasses.replace(world.settings, vertex_crud_per_minute=20, reconcile_crud_share=0.25)
    parent = parent_path(world.settings.project, "us-central1")
    created = {"display_name": "planted", "labels": {"spotjobs-request-id": "r0", "spotjobs-attempt": "1"}}
    world.vertex("us-central1").create_custom_job(parent=parent, custom_job=created, retry=None, timeout=30.0)
    assert reconcile_budget.reconcile_within_crud_budget(world) == []  # submit's create: no pass's

    world._current = Task("reconcile", lambda: None, faulty=False, whole=True)  # noqa: SLF001 - a pass in flight
    world.vertex("us-central1").create_custom_job(parent=parent, custom_job=created, retry=None, timeout=30.0)
    world._current = None  # noqa: SLF001

    [found] = reconcile_budget.reconcile_within_crud_budget(world)
    assert found.invariant == "reconcile_within_crud_budget"
    assert "reconcile pass 1 sent 1 create call(s)" in found.detail and "us-central1" in found.detail


def test_a_lookup_by_labels_past_a_spent_budget_is_not_sent(world: World) -> None:
    """A stale claim's lookup is a list the budget refuses before it leaves: it was once sent and
    only then refused, each due claim's past the budget (the answer thrown away, uncounted)."""
    from shared.adapters.vertex import label_filter
    from shared.jobs import LABEL_REQUEST_ID
    from shared.log import Logger
    from shared.reconcile_vertex import CallDeferred, VertexPass
    from sim import reconcile_budget
    from sim.world import Task

    world.settings = dataclasses.replace(world.settings, vertex_crud_per_minute=20, reconcile_crud_share=0.25)
    world._current = Task("reconcile", lambda: None, faulty=False, whole=True)  # noqa: SLF001 - a pass in flight
    client = VertexPass(world.ports_for("reconcile"), Logger(), started=world.clock.now()).ports.job_service(
        "us-central1"
    )
    lookup = {"parent": parent_path(world.settings.project, "us-central1")}
    lookup["filter"] = label_filter({LABEL_REQUEST_ID: "r0"})
    outcomes = []
    for _ in range(7):
        try:
            client.list_custom_jobs(request=lookup, timeout=world.settings.vertex_call_timeout_seconds)
            outcomes.append("sent")
        except CallDeferred:
            outcomes.append("deferred")
    world._current = None  # noqa: SLF001

    assert outcomes == ["sent"] * 5 + ["deferred"] * 2
    assert [c.operation for c in world.vertex.pass_calls] == ["list"] * 5
    assert reconcile_budget.reconcile_within_crud_budget(world) == []


def test_a_second_pass_and_a_later_minute_have_budgets_of_their_own(world: World) -> None:
    """Passes are judged apart, and a call a minute after the budget was spent is within it."""
    from sim import reconcile_budget
    from sim.vertex import PassCall

    first, second = object(), object()
    now = world.clock.now()
    world.vertex.pass_calls = [PassCall(now, first, "get", "us-central1") for _ in range(5)]
    world.vertex.pass_calls += [PassCall(now, second, "get", "us-central1") for _ in range(5)]
    world.vertex.pass_calls.append(PassCall(now + timedelta(seconds=60), first, "cancel", "us-central1"))
    world.settings = dataclasses.replace(world.settings, vertex_crud_per_minute=20, reconcile_crud_share=0.25)
    assert reconcile_budget.reconcile_within_crud_budget(world) == []

    world.vertex.pass_calls.append(PassCall(now + timedelta(seconds=59), second, "list", "us-central1", "x"))
    [found] = reconcile_budget.reconcile_within_crud_budget(world)
    assert found.detail.startswith("reconcile pass 2 sent 1 list call(s) past its budget of 5")
