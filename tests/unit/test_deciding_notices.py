"""Requester notifications at their edges (shared/deciding/notices.py): `started` from either sign
that a job ran, one `preempted` per preemption numbered from one (one when their number is
unknown), the successor notice's fields taken from the attempt that follows, a caller's notice
of the latest attempt, the spend to the hundredth of a cent; and the publish: a topic refusing
for good is tried once, said in the log, and the record returned is the one stored."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from google.api_core import exceptions

from shared.clock import iso
from shared.deciding.notices import NoticeKind, cost_so_far, note_changes, notify_pending, publish_notices
from shared.fleet.spend import request_spend
from shared.jobs import JobState
from shared.ledger.records import Attempt, RequestRecord, Requeue
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decide import NOW, make_record
from tests.support.decisions import CapturedLog, FakePublisher, make_settings

TOPIC = "projects/team-proj/topics/train-events"
NOTIFY = {"notify": {"topic": TOPIC}}
A100 = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "a2-highgpu-1g"}, "replicaCount": 1}]}}


def told(record: RequestRecord, kind: str) -> list[dict[str, Any]]:
    return [n for n in record.pending_notices if n["kind"] == kind]


def test_started_is_told_from_a_start_time_or_a_running_state_alone() -> None:
    running = make_record(request=NOTIFY, state=JobState.RUNNING)  # seen running, no start time yet
    assert len(told(note_changes(running, NOW), "started")) == 1

    ended = make_record(request=NOTIFY, state=JobState.FAILED)  # ran, then ended
    ended.attempts[0].started_at = iso(NOW)
    assert len(told(note_changes(ended, NOW), "started")) == 1

    queued = make_record(request=NOTIFY, state=JobState.QUEUED)
    assert told(note_changes(queued, NOW), "started") == []


def test_each_preemption_is_told_once_numbered_from_one() -> None:
    record = make_record(request=NOTIFY, state=JobState.RUNNING)
    record.attempts[0].preemptions = 2

    preempted = told(note_changes(record, NOW), "preempted")

    assert [n["preemptions"] for n in preempted] == [1, 2]


def test_preemptions_of_unknown_number_are_told_as_one() -> None:
    record = make_record(request=NOTIFY, state=JobState.FAILED)
    record.attempts[0].preemptions_unknown = True

    assert [n["preemptions"] for n in told(note_changes(record, NOW), "preempted")] == [1]


def test_the_successor_notice_tells_the_attempt_that_follows() -> None:
    record = make_record(request=NOTIFY)
    record.attempts.append(Attempt(2, "europe-west4", "SPOT", claimed_at=iso(NOW)))

    [moved] = told(note_changes(record, NOW), "moved")

    assert (moved["attempt"], moved["next_attempt"], moved["location"], moved["strategy"]) == (
        1,
        2,
        "europe-west4",
        "SPOT",
    )
    assert "reason" not in moved  # no re-queue of its own: the next attempt was claimed


def test_a_requeue_of_a_later_attempt_is_not_the_reason_told_for_an_earlier_one() -> None:
    record = make_record(request=NOTIFY)
    record.attempts.append(Attempt(2, "us-central1", "SPOT", claimed_at=iso(NOW)))
    record.requeue = Requeue(attempt=3, location="us-central1", strategy="SPOT", reason="stockout", decided_at=iso(NOW))

    first, second = told(note_changes(record, NOW), "requeued")

    assert (first["attempt"], first["next_attempt"], "reason" in first) == (1, 2, False)
    assert (second["attempt"], second["next_attempt"], second["reason"]) == (2, 3, "stockout")


def test_a_callers_notice_is_of_the_latest_attempt() -> None:
    record = make_record(request=NOTIFY)
    record.attempts.append(Attempt(2, "us-central1", "STANDARD", claimed_at=iso(NOW)))

    assert notify_pending(record, NoticeKind.BUDGET_REACHED, NOW)

    assert record.pending_notices[-1]["attempt"] == 2


def test_the_spend_so_far_is_told_to_the_hundredth_of_a_cent() -> None:
    record = make_record(request={**NOTIFY, "custom_job": A100}, state=JobState.RUNNING)
    record.attempts[0].started_at = iso(NOW)
    exact = request_spend(record, NOW + timedelta(seconds=1)).usd or 0.0  # unrounded
    assert exact != round(exact, 4)  # the test needs a spend with more places than the notice keeps

    assert cost_so_far(record, NOW + timedelta(seconds=1)) == round(exact, 4)


# Publishing.


class Refusing(FakePublisher):
    """Refuses every publish to TOPIC for good (the topic was deleted), counting the tries."""

    def __init__(self) -> None:
        super().__init__()
        self.tries = 0

    def publish(self, topic: str, data: bytes, **attributes: str) -> Any:
        if topic == TOPIC:
            self.tries += 1
            raise exceptions.NotFound("no topic")
        return super().publish(topic, data, **attributes)


def ports_of(publisher: FakePublisher) -> Ports:
    bucket = MemoryStorage(clock=lambda: NOW).client().bucket("state")
    settings = make_settings("state", SPOTJOBS_ALLOWED_NOTIFY_TOPICS="projects/team-proj/topics/")
    return Ports(settings, LedgerStore(bucket), lambda: publisher, None, clock=lambda: NOW)  # type: ignore[arg-type]


def stored_with_notices(ports: Ports) -> RequestRecord:
    record = make_record(request=NOTIFY, state=JobState.RUNNING)
    record.attempts[0].started_at = iso(NOW)
    ports.ledger.restore(note_changes(record, NOW))  # accepted, started
    stored = ports.ledger.get("req-1")
    assert stored is not None and len(stored.pending_notices) == 2
    return stored


def test_a_topic_refusing_for_good_is_tried_once_and_said_in_the_log() -> None:
    publisher, log = Refusing(), CapturedLog()
    ports = ports_of(publisher)

    publish_notices(ports, stored_with_notices(ports), log.logger)

    assert publisher.tries == 1
    [refused] = log.events("notify_refused")
    assert (refused["severity"], refused["topic"], refused["error"]) == ("WARNING", TOPIC, "NotFound: 404 no topic")


def test_a_publish_returns_the_record_as_stored_and_says_nothing_of_a_refusal() -> None:
    publisher, log = FakePublisher(), CapturedLog()
    ports = ports_of(publisher)

    returned = publish_notices(ports, stored_with_notices(ports), log.logger)

    assert returned.pending_notices == [] and returned == ports.ledger.get("req-1")
    assert log.events("notify_refused") == []


def test_a_record_stored_with_the_refusal_marker_decides_no_more_notifications() -> None:
    """The marker is stored data: its name (`notify_refused:0`) must stay what records already hold."""
    record = make_record(request=NOTIFY, state=JobState.RUNNING)
    record.mark("notify_refused:0")
    assert not notify_pending(record, NoticeKind.BUDGET_REACHED, NOW)
    assert note_changes(record, NOW).pending_notices == []


def test_the_stop_at_the_job_timeout_is_never_told_as_a_preemption() -> None:
    """Vertex stops a job at its `scheduling.timeout` as it stops a preempted one: the kit's
    `preempted` line of the last run counts only once a restart or the job's end confirms it
    (docs/signals.md). A notification cannot be taken back, so it waits for the same: a run
    continued past the timeout is told `requeued` (reason timeout), never `preempted`."""
    from spotjobs_kit.lines import KitRecord

    from shared.deciding.decisions import Observation, decide
    from shared.deciding.events import Signal
    from shared.jobs import JobSnapshot
    from tests.support.decide import JOB1, POLICY, at, job

    def kit(event: str, run: int, **fields: Any) -> Observation:
        line = KitRecord(event=event, request_id="req-1", attempt=1, run=run, job_id="111", **fields)
        return Observation(1, None, Signal.KIT, kit=line, job_name=JOB1)

    def observe(record: RequestRecord, observation: Observation) -> RequestRecord:
        return note_changes(decide(record, observation, POLICY, NOW).record, NOW)

    record = observe(make_record(request=NOTIFY), Observation(1, job(JobState.RUNNING)))
    for line in (kit("run_started", 0, resumed_step=0), kit("checkpoint_committed", 0, step=10), kit("preempted", 0)):
        record = observe(record, line)  # the SIGTERM of the stop at the timeout, before the job's end is read
    assert told(record, "preempted") == []

    error = {"code": 4, "message": "ran past its timeout"}  # DEADLINE_EXCEEDED
    timed_out = JobSnapshot(JOB1, JobState.FAILED, error, create_time=at(1), start_time=at(10), end_time=at(200))
    record = observe(record, Observation(1, timed_out))
    assert told(record, "preempted") == [] and record.attempts[0].preemptions == 0
    assert [(n["kind"], n.get("reason")) for n in told(record, "requeued")] == [("requeued", "timeout")]


def test_a_kit_preemption_is_told_once_a_restart_confirms_it() -> None:
    from spotjobs_kit.lines import KitRecord

    from shared.deciding.decisions import Observation, decide
    from shared.deciding.events import Signal
    from tests.support.decide import JOB1, POLICY, job

    def observe(record: RequestRecord, event: str, run: int) -> RequestRecord:
        line = KitRecord(event=event, request_id="req-1", attempt=1, run=run, job_id="111")
        observation = Observation(1, None, Signal.KIT, kit=line, job_name=JOB1)
        return note_changes(decide(record, observation, POLICY, NOW).record, NOW)

    record = note_changes(
        decide(make_record(request=NOTIFY), Observation(1, job(JobState.RUNNING)), POLICY, NOW).record, NOW
    )
    record = observe(observe(record, "run_started", 0), "preempted", 0)
    assert told(record, "preempted") == []  # the kit's word alone: a stop at the timeout says the same
    record = observe(record, "run_started", 1)  # Vertex restarted it: a preemption
    assert [n["preemptions"] for n in told(record, "preempted")] == [1]


def test_a_preemption_counted_after_the_end_is_kept_and_never_told_after_it() -> None:
    """docs/requests.md: the ending (`succeeded`, `failed`, `gave_up`, `cancelled`) is the last
    event. A kit line read after the job's end can still count a preemption: the record keeps it
    (`spotjobs status` shows it), and no notification follows the ending."""
    from spotjobs_kit.lines import KitRecord

    from shared.deciding.decisions import Observation, decide
    from shared.deciding.events import Signal
    from shared.jobs import JobSnapshot
    from tests.support.decide import JOB1, POLICY, at, job

    def observe(record: RequestRecord, observation: Observation) -> RequestRecord:
        return note_changes(decide(record, observation, POLICY, NOW).record, NOW)

    def kit(event: str, run: int, **fields: Any) -> Observation:
        line = KitRecord(event=event, request_id="req-1", attempt=1, run=run, job_id="111", **fields)
        return Observation(1, None, Signal.KIT, kit=line, job_name=JOB1)

    record = observe(make_record(request=NOTIFY), Observation(1, job(JobState.RUNNING)))
    record = observe(record, kit("run_started", 0, resumed_step=0))
    succeeded = JobSnapshot(JOB1, JobState.SUCCEEDED, None, create_time=at(1), start_time=at(10), end_time=at(200))
    record = observe(record, Observation(1, succeeded))
    [ending] = told(record, "succeeded")

    record = observe(record, kit("run_started", 1, resumed_step=10))  # run 0 was preempted, read late

    assert record.attempts[0].preemptions == 1
    assert max(n["seq"] for n in record.pending_notices) == ending["seq"]


def test_a_budget_reached_after_the_ending_is_not_told() -> None:
    record = note_changes(make_record(request=NOTIFY, state=JobState.SUCCEEDED, status=RequestStatus.SUCCEEDED), NOW)
    assert told(record, "succeeded")

    assert not notify_pending(record, NoticeKind.BUDGET_REACHED, NOW, spent_usd=3.0, max_cost_usd=2.0)
    assert told(record, "budget_reached") == []
