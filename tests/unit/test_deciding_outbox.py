"""The outbox (shared/deciding/outbox.py) on the simulator's in-memory Cloud Storage with a clock of
the test's: who publishes a re-queue, the alerts and a cancel (the delivery that decided it at once,
anyone else once the decider is presumed dead: the claim lease), a delayed re-queue's `not_before`,
a published re-queue never claimed, a publish that fails (the rest still tried, what failed stays
pending), and the corrupt-record alert sent once. tests/functional/test_decisions_reconcile.py
drives the same through the functions on fake-gcs-server in real time; here every instant is the
test's."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions

from shared.alerts import Alert, AlertKind
from shared.clock import iso
from shared.deciding.outbox import (
    Mine,
    alert_corrupt_record,
    decide_alert,
    decide_and_flush_alert,
    flush,
    publish_pending,
    run_all,
    send_cancels,
    settle_requeue,
)
from shared.jobs import JobState
from shared.ledger.records import Attempt, CancelIntent, CorruptRecord, RequestRecord, Requeue
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.ledger.store import LedgerStore
from shared.settings import Settings
from shared.swap import Swapped
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decisions import CapturedLog, FakePublisher, make_settings

START = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/111"
LEASE = 120.0  # SPOTJOBS_CLAIM_LEASE_SECONDS below
UNCLAIMED = 900.0  # SPOTJOBS_UNCLAIMED_REQUEUE_SECONDS below


@dataclass
class Clock:
    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def at(self, seconds: float) -> str:
        """The instant `seconds` from the start, as the ledger writes it."""
        return iso(START + timedelta(seconds=seconds))


@dataclass
class Cancels:
    """A Vertex cancel that notes each job it is asked to cancel, or raises `error`."""

    sent: list[tuple[str, str]] = field(default_factory=list)
    error: Exception | None = None

    def __call__(self, location: str, job: str) -> None:
        self.sent.append((location, job))
        if self.error is not None:
            raise self.error


@dataclass
class Outbox:
    clock: Clock
    settings: Settings
    ledger: LedgerStore
    publisher: FakePublisher
    log: CapturedLog
    cancels: Cancels
    topics: tuple[str, ...] | None = None

    @property
    def ports(self) -> Ports:
        return Ports(
            self.settings,
            self.ledger,
            lambda: self.publisher,
            None,  # type: ignore[arg-type]
            clock=self.clock,
            topics=self.topics,
            cancel_job=self.cancels,
        )

    def record(self, **fields: Any) -> RequestRecord:
        """A request whose attempt 1 ran, restored into the ledger with `fields` set."""
        record = RequestRecord(
            "req-1",
            {"request_id": "req-1", "custom_job": {"displayName": "train"}, "location": "us-central1"},
            self.settings.output_dir_for("req-1"),
            status=RequestStatus.RUNNING,
            attempts=[
                Attempt(1, "us-central1", "SPOT", claimed_at=self.clock.at(-600), job=JOB, state=JobState.RUNNING)
            ],
        )
        for name, value in fields.items():
            setattr(record, name, value)
        self.ledger.restore(record)
        return self.stored()

    def stored(self) -> RequestRecord:
        record = self.ledger.get("req-1")
        assert record is not None
        return record

    def requeues(self) -> list[dict[str, Any]]:
        return [m.data for m in self.publisher.on("job-requests")]

    def alerts(self) -> list[dict[str, Any]]:
        return [m.data for m in self.publisher.on("ops-alerts")]

    def prunes(self) -> list[dict[str, Any]]:
        return [m.data for m in self.publisher.on("maintenance")]


@pytest.fixture
def box() -> Outbox:
    clock = Clock()
    settings = make_settings(
        "state", SPOTJOBS_CLAIM_LEASE_SECONDS=str(LEASE), SPOTJOBS_UNCLAIMED_REQUEUE_SECONDS=str(UNCLAIMED)
    )
    bucket = MemoryStorage(clock=clock).client().bucket("state")
    return Outbox(clock, settings, LedgerStore(bucket), FakePublisher(), CapturedLog(), Cancels())


def requeue(clock: Clock, *, decided: float = 0.0, reason: str = "preemption", **fields: Any) -> Requeue:
    return Requeue(
        attempt=2, location="europe-west4", strategy="SPOT", reason=reason, decided_at=clock.at(decided), **fields
    )


def an_alert(clock: Clock, kind: AlertKind = AlertKind.JOB_FAILED, *, at: float = 0.0) -> dict[str, Any]:
    return Alert.of(kind, "attempt 1 failed", request_id="req-1", attempt=1, time=clock.at(at)).to_json()


# ---- the re-queue -----------------------------------------------------------------------------


def test_the_decider_publishes_its_requeue_at_once_and_confirms_it(box: Outbox) -> None:
    record = box.record(requeue=requeue(box.clock), status=RequestStatus.REQUEUED)
    box.clock.now += timedelta(seconds=5)
    message_id, waiting = settle_requeue(box.ports, record, box.log.logger, ours=True, now=box.clock())
    assert (message_id, waiting) == ("1", None)
    [published] = box.requeues()
    assert published["attempt"] == 2
    stored = box.stored().requeue
    assert stored is not None
    assert (stored.message_id, stored.published_at) == ("1", box.clock.at(5))
    [line] = box.log.events("requeue_published")
    assert (line["attempt"], line["location"], line["published_message_id"]) == (2, "europe-west4", "1")


def test_anyone_else_leaves_a_requeue_to_its_decider_until_the_claim_lease_ran_out(box: Outbox) -> None:
    record = box.record(requeue=requeue(box.clock), status=RequestStatus.REQUEUED)
    just_before = START + timedelta(seconds=LEASE - 1)
    message_id, waiting = settle_requeue(box.ports, record, box.log.logger, ours=False, now=just_before)
    assert message_id is None
    assert waiting == "attempt 2 is being re-queued by another delivery"
    assert box.requeues() == []
    at_the_lease = START + timedelta(seconds=LEASE)
    assert settle_requeue(box.ports, record, box.log.logger, ours=False, now=at_the_lease) == ("1", None)
    assert len(box.requeues()) == 1


def test_a_delayed_requeue_waits_for_its_not_before_whoever_decided_it(box: Outbox) -> None:
    record = box.record(requeue=requeue(box.clock, not_before=box.clock.at(60)), status=RequestStatus.REQUEUED)
    early = START + timedelta(seconds=59)
    assert settle_requeue(box.ports, record, box.log.logger, ours=True, now=early) == (None, None)
    assert box.requeues() == []
    # Once due, anyone publishes it (reconcile is who comes back), decider dead or not.
    due = START + timedelta(seconds=60)
    assert settle_requeue(box.ports, record, box.log.logger, ours=False, now=due) == ("1", None)


def test_a_published_requeue_never_claimed_is_published_again_after_the_unclaimed_bound(box: Outbox) -> None:
    record = box.record(
        requeue=requeue(box.clock, message_id="m-0", published_at=box.clock.at(100)), status=RequestStatus.REQUEUED
    )
    before = START + timedelta(seconds=100 + UNCLAIMED - 1)
    assert settle_requeue(box.ports, record, box.log.logger, ours=False, now=before) == (None, None)
    assert box.requeues() == []
    due = START + timedelta(seconds=100 + UNCLAIMED)
    # The delivery that just published it never publishes it again.
    assert settle_requeue(box.ports, record, box.log.logger, ours=True, now=due) == (None, None)
    assert settle_requeue(box.ports, record, box.log.logger, ours=False, now=due) == ("1", None)
    stored = box.stored().requeue
    assert stored is not None
    assert (stored.message_id, stored.published_at) == ("1", iso(due))


def test_a_published_requeue_without_its_publish_time_counts_from_its_decision(box: Outbox) -> None:
    record = box.record(requeue=requeue(box.clock, message_id="m-0"), status=RequestStatus.REQUEUED)
    before = START + timedelta(seconds=UNCLAIMED - 1)
    assert settle_requeue(box.ports, record, box.log.logger, ours=False, now=before) == (None, None)
    due = START + timedelta(seconds=UNCLAIMED)
    assert settle_requeue(box.ports, record, box.log.logger, ours=False, now=due) == ("1", None)


def test_a_function_that_may_not_publish_job_requests_leaves_the_requeue_pending(box: Outbox) -> None:
    box.topics = (box.settings.ops_alerts_topic,)
    record = box.record(requeue=requeue(box.clock), status=RequestStatus.REQUEUED)
    assert settle_requeue(box.ports, record, box.log.logger, ours=True, now=box.clock()) == (None, None)
    assert box.requeues() == []
    stored = box.stored().requeue
    assert stored is not None and stored.message_id is None


def test_a_confirmation_never_overwrites_a_requeue_claimed_or_confirmed_meanwhile(box: Outbox) -> None:
    record = box.record(requeue=requeue(box.clock), status=RequestStatus.REQUEUED)
    # Another delivery's publish was confirmed between our look and our publish.
    box.ledger.update("req-1", lambda current: _confirmed(current, "other"))
    settle_requeue(box.ports, record, box.log.logger, ours=True, now=box.clock())
    stored = box.stored().requeue
    assert stored is not None and stored.message_id == "other"
    # Submit claimed it (the record's requeue is gone): nothing is written back.
    box.ledger.update("req-1", _claimed)
    settle_requeue(box.ports, record, box.log.logger, ours=True, now=box.clock())
    assert box.stored().requeue is None


def _confirmed(current: RequestRecord | None, message_id: str) -> RequestRecord | None:
    assert current is not None and current.requeue is not None
    current.requeue.message_id = message_id
    return current


def _claimed(current: RequestRecord | None) -> RequestRecord | None:
    assert current is not None
    current.requeue = None
    return current


def test_a_requeue_of_another_attempt_is_not_confirmed_by_this_publish(box: Outbox) -> None:
    record = box.record(requeue=requeue(box.clock), status=RequestStatus.REQUEUED)

    def next_one(current: RequestRecord | None) -> RequestRecord | None:
        assert current is not None and current.requeue is not None
        current.requeue.attempt = 3
        return current

    box.ledger.update("req-1", next_one)
    settle_requeue(box.ports, record, box.log.logger, ours=True, now=box.clock())
    stored = box.stored().requeue
    assert stored is not None and (stored.attempt, stored.message_id) == (3, None)


def test_flush_holds_the_next_attempt_while_the_job_it_replaces_has_not_ended(box: Outbox) -> None:
    record = box.record(requeue=requeue(box.clock, reason="deadline"), status=RequestStatus.REQUEUED)
    record.attempts[0].cancel_decided_at = box.clock.at(0)
    record.attempts[0].cancel_sent_at = box.clock.at(0)
    assert record.attempts[0].ending
    assert flush(box.ports, record, box.log.logger, mine=Mine.REQUEUE) == (None, None)
    assert box.requeues() == []
    record.attempts[0].state = JobState.CANCELLED
    assert flush(box.ports, record, box.log.logger, mine=Mine.REQUEUE) == ("1", None)


# ---- alerts and the prune request ---------------------------------------------------------------


def test_the_decider_publishes_its_alerts_and_prune_request_and_clears_them(box: Outbox) -> None:
    alert = an_alert(box.clock)
    record = box.record(pending_alerts=[alert], prune_pending=True, prune_requested_at=box.clock.at(0))
    assert publish_pending(box.ports, record, ours=True, now=box.clock()) is None
    assert box.alerts() == [alert]
    assert box.prunes() == [{"task": "prune", "request_id": "req-1"}]
    assert box.publisher.on("maintenance")[0].attributes == {"task": "prune"}
    stored = box.stored()
    assert (stored.pending_alerts, stored.prune_pending, stored.effects_taken_at) == ([], False, None)


def test_anyone_else_takes_the_effects_over_only_once_their_decider_is_presumed_dead(box: Outbox) -> None:
    alert = an_alert(box.clock, at=10)
    record = box.record(pending_alerts=[alert])
    early = START + timedelta(seconds=10 + LEASE - 1)
    waiting = publish_pending(box.ports, record, ours=False, now=early)
    assert waiting == "effects decided for req-1 are being published by another delivery"
    assert box.alerts() == []
    assert box.stored().effects_taken_at is None  # no write while the decider may be alive
    due = START + timedelta(seconds=10 + LEASE)
    assert publish_pending(box.ports, record, ours=False, now=due) is None
    assert box.alerts() == [alert]
    assert box.stored().pending_alerts == []


def test_the_youngest_pending_effect_decides_when_its_decider_is_presumed_dead(box: Outbox) -> None:
    old, young = an_alert(box.clock, at=0), an_alert(box.clock, AlertKind.JOB_STUCK, at=50)
    record = box.record(pending_alerts=[young, old])
    assert publish_pending(box.ports, record, ours=False, now=START + timedelta(seconds=LEASE + 49)) is not None
    assert publish_pending(box.ports, record, ours=False, now=START + timedelta(seconds=LEASE + 50)) is None
    assert box.alerts() == [young, old]


def test_a_pending_prune_request_counts_from_when_it_was_requested(box: Outbox) -> None:
    record = box.record(prune_pending=True, prune_requested_at=box.clock.at(30))
    assert publish_pending(box.ports, record, ours=False, now=START + timedelta(seconds=LEASE + 29)) is not None
    assert box.prunes() == []
    assert publish_pending(box.ports, record, ours=False, now=START + timedelta(seconds=LEASE + 30)) is None
    assert len(box.prunes()) == 1


def test_a_takeover_is_itself_a_lease_so_two_late_deliveries_publish_once(box: Outbox) -> None:
    alert = an_alert(box.clock)
    record = box.record(pending_alerts=[alert])
    box.publisher.fail_next = 1  # the taker takes over, then its publish fails
    later = START + timedelta(seconds=LEASE)
    with pytest.raises(exceptions.ServiceUnavailable):
        publish_pending(box.ports, record, ours=False, now=later)
    stored = box.stored()
    assert stored.effects_taken_at == iso(later)
    assert stored.pending_alerts == [alert]
    # Another late delivery now waits for the taker, as it would for the decider.
    a_bit_later = later + timedelta(seconds=LEASE - 1)
    assert publish_pending(box.ports, stored, ours=False, now=a_bit_later) is not None
    assert box.alerts() == []
    assert publish_pending(box.ports, stored, ours=False, now=later + timedelta(seconds=LEASE)) is None
    assert box.alerts() == [alert]


def test_of_two_deliveries_that_find_the_decider_dead_at_once_one_publishes(box: Outbox) -> None:
    alert = an_alert(box.clock)
    record = box.record(pending_alerts=[alert])
    later = START + timedelta(seconds=LEASE)
    # Both looked at the same record; the first takes over (and publishes), the second's swap finds it taken.
    assert publish_pending(box.ports, record, ours=False, now=later) is None
    box.ledger.update("req-1", lambda current: _pending_again(current, alert, later))
    assert publish_pending(box.ports, record, ours=False, now=later) is not None
    assert box.alerts() == [alert]


def _pending_again(current: RequestRecord | None, alert: dict[str, Any], taken: datetime) -> RequestRecord | None:
    """The record as the first taker left it while still publishing: taken over, still pending."""
    assert current is not None
    current.pending_alerts = [alert]
    current.effects_taken_at = iso(taken)
    return current


def test_a_failed_publish_stays_pending_and_the_rest_are_still_sent(box: Outbox) -> None:
    first, second = an_alert(box.clock), an_alert(box.clock, AlertKind.JOB_STUCK)
    record = box.record(pending_alerts=[first, second], prune_pending=True, prune_requested_at=box.clock.at(0))
    box.publisher.fail_next = 1  # the prune request, published first
    with pytest.raises(exceptions.ServiceUnavailable):
        publish_pending(box.ports, record, ours=True, now=box.clock())
    assert box.alerts() == [first, second]
    stored = box.stored()
    assert (stored.pending_alerts, stored.prune_pending) == ([], True)


def test_effects_a_function_may_not_publish_stay_pending_for_one_that_may(box: Outbox) -> None:
    box.topics = (box.settings.ops_alerts_topic,)
    alert = an_alert(box.clock)
    record = box.record(pending_alerts=[alert], prune_pending=True, prune_requested_at=box.clock.at(0))
    publish_pending(box.ports, record, ours=True, now=box.clock())
    assert box.alerts() == [alert]
    assert box.prunes() == []
    stored = box.stored()
    assert (stored.pending_alerts, stored.prune_pending) == ([], True)


def test_a_record_with_nothing_pending_publishes_nothing(box: Outbox) -> None:
    record = box.record()
    assert publish_pending(box.ports, record, ours=False, now=box.clock()) is None
    assert box.publisher.messages == []


def test_run_all_tries_every_step_then_raises_the_first_failure() -> None:
    ran: list[str] = []

    def fails(name: str) -> None:
        ran.append(name)
        raise RuntimeError(name)

    with pytest.raises(RuntimeError, match="^first$"):
        run_all([lambda: fails("first"), lambda: ran.append("ok"), lambda: fails("second")])
    assert ran == ["first", "ok", "second"]
    run_all([lambda: ran.append("alone")])
    assert ran[-1] == "alone"


# ---- alerts decided once ---------------------------------------------------------------------


def test_an_alert_is_decided_once_per_marker(box: Outbox) -> None:
    box.record()
    made: list[str] = []

    def alert_for(current: RequestRecord) -> Alert | None:
        made.append(current.request_id)
        return Alert.of(AlertKind.STRAY_JOB, "stray", request_id=current.request_id, time=box.clock.at(0))

    first = decide_alert(box.ports, "req-1", "stray_job:1:9", alert_for)
    assert first.wrote and Mine.written(first) is Mine.EFFECTS
    again = decide_alert(box.ports, "req-1", "stray_job:1:9", alert_for)
    assert not again.wrote and Mine.written(again) is Mine.NONE
    assert made == ["req-1"]
    stored = box.stored()
    assert stored.markers == ["stray_job:1:9"] and len(stored.pending_alerts) == 1


def test_nothing_to_say_or_no_record_decides_nothing(box: Outbox) -> None:
    assert not decide_alert(box.ports, "req-1", "m", lambda _: None).wrote  # no record
    box.record()
    assert not decide_alert(box.ports, "req-1", "m", lambda _: None).wrote
    assert box.stored().markers == []


def test_decide_and_flush_publishes_the_alert_it_decided(box: Outbox) -> None:
    box.record()
    alert = Alert.of(AlertKind.STRAY_JOB, "stray", request_id="req-1", time=box.clock.at(0))
    decide_and_flush_alert(box.ports, "req-1", "stray_job:1:9", lambda _: alert, box.log.logger)
    assert box.alerts() == [alert.to_json()]
    decide_and_flush_alert(box.ports, "req-1", "stray_job:1:9", lambda _: alert, box.log.logger)
    assert len(box.alerts()) == 1
    assert box.stored().pending_alerts == []


def test_a_corrupt_record_is_alerted_once(box: Outbox) -> None:
    error = CorruptRecord("req-9", "not JSON")
    alert_corrupt_record(box.ports, error, box.log.logger)
    alert_corrupt_record(box.ports, error, box.log.logger)
    [alert] = box.alerts()
    assert (alert["kind"], alert["request_id"]) == (AlertKind.LEDGER_CORRUPT.value, "req-9")
    lines = box.log.events("ledger_corrupt")
    assert len(lines) == 2 and {line["severity"] for line in lines} == {"ERROR"}


def test_a_corrupt_records_alert_that_fails_to_publish_is_sent_next_time(box: Outbox) -> None:
    error = CorruptRecord("req-9", "not JSON")
    box.publisher.fail_next = 1
    with pytest.raises(exceptions.ServiceUnavailable):
        alert_corrupt_record(box.ports, error, box.log.logger)
    alert_corrupt_record(box.ports, error, box.log.logger)
    assert len(box.alerts()) == 1


# ---- cancels ---------------------------------------------------------------------------------


def switched(box: Outbox, *, decided: float = 0.0, cancel: CancelIntent | None = None) -> RequestRecord:
    """A deadline switch decided at `decided`: attempt 1's cancel pending, attempt 2 held."""
    box.record(requeue=requeue(box.clock, decided=decided, reason="deadline"), cancel=cancel)

    def cancel_decided(current: RequestRecord | None) -> RequestRecord | None:
        assert current is not None
        current.attempts[0].outcome = AttemptOutcome.SWITCHED_TO_ON_DEMAND
        current.attempts[0].cancel_decided_at = box.clock.at(decided)
        return current

    box.ledger.update("req-1", cancel_decided)
    return box.stored()


def test_the_decider_sends_its_cancel_at_once_and_confirms_it(box: Outbox) -> None:
    record = switched(box)
    box.clock.now += timedelta(seconds=3)
    assert send_cancels(box.ports, record, box.log.logger, ours=True, now=box.clock()) is None
    assert box.cancels.sent == [("us-central1", JOB)]
    assert box.stored().attempts[0].cancel_sent_at == box.clock.at(3)
    [line] = box.log.events("attempt_cancel_sent")
    assert (line["attempt"], line["job"]) == (1, JOB)
    # Sent and confirmed: nobody sends it again.
    send_cancels(box.ports, box.stored(), box.log.logger, ours=False, now=box.clock() + timedelta(hours=1))
    assert len(box.cancels.sent) == 1


def test_anyone_else_sends_a_switchs_cancel_only_once_its_decider_is_presumed_dead(box: Outbox) -> None:
    record = switched(box)
    early = START + timedelta(seconds=LEASE - 1)
    waiting = send_cancels(box.ports, record, box.log.logger, ours=False, now=early)
    assert waiting == "the cancel of attempt 1 is being sent by another delivery"
    assert box.cancels.sent == []
    assert send_cancels(box.ports, record, box.log.logger, ours=False, now=START + timedelta(seconds=LEASE)) is None
    assert len(box.cancels.sent) == 1


def test_the_requests_own_cancel_is_anyones_to_send_at_once(box: Outbox) -> None:
    record = switched(box, cancel=CancelIntent(by="ops@example.com", at=box.clock.at(0)))
    assert send_cancels(box.ports, record, box.log.logger, ours=False, now=box.clock()) is None
    assert box.cancels.sent == [("us-central1", JOB)]


@pytest.mark.parametrize("gone", [exceptions.NotFound("gone"), exceptions.FailedPrecondition("ended")])
def test_a_job_already_ended_or_gone_needs_no_cancel(box: Outbox, gone: Exception) -> None:
    box.cancels.error = gone
    record = switched(box)
    assert send_cancels(box.ports, record, box.log.logger, ours=True, now=box.clock()) is None
    assert box.stored().attempts[0].cancel_sent_at == box.clock.at(0)
    [line] = box.log.events("cancel_not_needed")
    assert line["job"] == JOB


def test_a_cancel_that_fails_otherwise_stays_pending(box: Outbox) -> None:
    box.cancels.error = exceptions.ServiceUnavailable("busy")
    record = switched(box)
    with pytest.raises(exceptions.ServiceUnavailable):
        send_cancels(box.ports, record, box.log.logger, ours=True, now=box.clock())
    assert box.stored().attempts[0].cancel_pending


def test_a_function_that_cannot_cancel_leaves_it_to_those_that_can(box: Outbox) -> None:
    record = switched(box)
    ports = Ports(box.settings, box.ledger, lambda: box.publisher, None, clock=box.clock)  # type: ignore[arg-type]
    waiting = send_cancels(ports, record, box.log.logger, ours=True, now=box.clock())
    assert waiting == "the cancel of attempt 1 is left to on_job_event and reconcile"
    assert box.stored().attempts[0].cancel_pending


def test_a_cancel_confirmed_meanwhile_is_not_confirmed_again(box: Outbox) -> None:
    record = switched(box)

    def sent_by_another(current: RequestRecord | None) -> RequestRecord | None:
        assert current is not None
        current.attempts[0].cancel_sent_at = "2026-12-01T11:00:00Z"
        return current

    box.ledger.update("req-1", sent_by_another)
    send_cancels(box.ports, record, box.log.logger, ours=True, now=box.clock())
    assert box.stored().attempts[0].cancel_sent_at == "2026-12-01T11:00:00Z"


def test_flush_sends_every_pending_thing_and_names_what_it_left(box: Outbox) -> None:
    switched(box)
    alert = an_alert(box.clock)
    box.ledger.update("req-1", lambda current: _pending_again(current, alert, START))
    record = box.stored()
    # Not ours, inside the lease: the cancel and the alert are both left to their decider.
    message_id, waiting = flush(box.ports, record, box.log.logger)
    assert message_id is None
    assert waiting == "the cancel of attempt 1 is being sent by another delivery"
    assert box.cancels.sent == [] and box.alerts() == []
    # Ours: all of it at once (the re-queue waits for the job's end).
    message_id, waiting = flush(box.ports, record, box.log.logger, mine=Mine.REQUEUE | Mine.EFFECTS)
    assert (message_id, waiting) == (None, None)
    assert len(box.cancels.sent) == 1 and len(box.alerts()) == 1 and box.requeues() == []


def test_mine_written_is_the_effects_only_when_the_write_landed() -> None:
    record = RequestRecord("r", {}, "gs://o/")
    assert Mine.written(Swapped(record, wrote=True)) is Mine.EFFECTS
    assert Mine.written(Swapped(record, wrote=False)) is Mine.NONE


def test_a_prune_already_published_does_not_hold_back_the_alerts_takeover(box: Outbox) -> None:
    alert = an_alert(box.clock, at=0)
    record = box.record(pending_alerts=[alert], prune_requested_at=box.clock.at(50))  # its prune went out
    assert publish_pending(box.ports, record, ours=False, now=START + timedelta(seconds=LEASE)) is None
    assert box.alerts() == [alert] and box.prunes() == []
    stored = box.stored()
    assert (stored.pending_alerts, stored.prune_pending, stored.effects_taken_at) == ([], False, None)


def test_effects_published_meanwhile_are_not_taken_over(box: Outbox) -> None:
    alert = an_alert(box.clock)
    record = box.record(pending_alerts=[alert])

    def published_by_the_decider(current: RequestRecord | None) -> RequestRecord | None:
        assert current is not None
        current.pending_alerts = []
        return current

    box.ledger.update("req-1", published_by_the_decider)
    waiting = publish_pending(box.ports, record, ours=False, now=START + timedelta(seconds=LEASE))
    assert waiting is not None
    assert box.alerts() == []
    assert box.stored().effects_taken_at is None


def test_a_takeover_that_publishes_part_keeps_its_lease_on_the_rest(box: Outbox) -> None:
    first, second = an_alert(box.clock), an_alert(box.clock, AlertKind.JOB_STUCK)
    record = box.record(pending_alerts=[first, second])
    box.publisher.fail_next = 1
    later = START + timedelta(seconds=LEASE)
    with pytest.raises(exceptions.ServiceUnavailable):
        publish_pending(box.ports, record, ours=False, now=later)
    stored = box.stored()
    assert stored.pending_alerts == [first]
    assert stored.effects_taken_at == iso(later)  # the rest is still this taker's, for a lease


def test_decide_and_flush_for_a_request_without_a_record_does_nothing(box: Outbox) -> None:
    alert = Alert.of(AlertKind.STRAY_JOB, "stray", request_id="req-1", time=box.clock.at(0))
    decide_and_flush_alert(box.ports, "req-1", "stray_job:1:9", lambda _: alert, box.log.logger)
    assert box.publisher.messages == []


def test_a_cancel_decided_for_an_attempt_without_a_job_sends_nothing(box: Outbox) -> None:
    box.record(cancel=CancelIntent(by="ops@example.com", at=box.clock.at(0)))

    def claimed_without_a_job(current: RequestRecord | None) -> RequestRecord | None:
        assert current is not None
        current.attempts[0].job = None
        current.attempts[0].cancel_decided_at = box.clock.at(0)
        return current

    box.ledger.update("req-1", claimed_without_a_job)
    assert send_cancels(box.ports, box.stored(), box.log.logger, ours=True, now=box.clock()) is None
    assert box.cancels.sent == []


def test_every_pending_cancel_is_sent_past_attempts_with_none(box: Outbox) -> None:
    box.record(cancel=CancelIntent(by="ops@example.com", at=box.clock.at(0)))
    second_job = "projects/p/locations/us-central1/customJobs/222"

    def two_attempts(current: RequestRecord | None) -> RequestRecord | None:
        assert current is not None
        current.attempts[0].state = JobState.FAILED  # ended long ago: nothing to cancel
        current.attempts.append(
            Attempt(2, "us-central1", "SPOT", claimed_at=box.clock.at(0), job=second_job, state=JobState.RUNNING)
        )
        current.attempts[1].cancel_decided_at = box.clock.at(0)
        return current

    box.ledger.update("req-1", two_attempts)
    assert send_cancels(box.ports, box.stored(), box.log.logger, ours=False, now=box.clock()) is None
    assert box.cancels.sent == [("us-central1", second_job)]
    assert box.stored().attempts[1].cancel_sent_at == box.clock.at(0)


def test_a_decider_publishes_its_own_alerts_not_one_another_delivery_decided_just_before(box: Outbox) -> None:
    """Two deliveries decide an alert each in quick succession (a kit line's, then the job's
    end): each write lands, so each flushes as the decider. Each publishes its own; the first's
    alert is not published by the second too (found by the simulator, seed 82, issue 46)."""
    first, second = an_alert(box.clock, AlertKind.PREEMPTION_STORM, at=0), an_alert(box.clock, at=1)
    record = box.record(pending_alerts=[first, second])
    _, waiting = flush(box.ports, record, box.log, mine=Mine.EFFECTS, own_alerts=[second])
    assert box.alerts() == [second]
    assert waiting == "effects decided for req-1 are being published by another delivery"
    assert box.stored().pending_alerts == [first]
    assert flush(box.ports, box.stored(), box.log, mine=Mine.EFFECTS, own_alerts=[first])[1] is None
    assert box.alerts() == [second, first]


def test_decide_and_flush_publishes_its_own_alert_not_one_another_delivery_is_publishing(box: Outbox) -> None:
    """Another delivery decided (or took over) an alert a second ago and is publishing it: a
    decision of another alert publishes only its own at once, and leaves the other to its
    publisher (found by the simulator, seed 872, through the stray sweep's `cancel_stray`)."""
    others = an_alert(box.clock, AlertKind.STRAY_JOB, at=-1)
    box.record(pending_alerts=[others])
    alert = Alert.of(AlertKind.LOOKUP_FAILED, "cannot look up", request_id="req-1", time=box.clock.at(0))
    decide_and_flush_alert(box.ports, "req-1", "lookup_failed:1", lambda _: alert, box.log.logger)
    assert box.alerts() == [alert.to_json()]
    assert box.stored().pending_alerts == [others]
