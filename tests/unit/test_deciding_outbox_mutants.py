"""The outbox's publish of pending effects (shared/deciding/outbox.py) pinned where a slip in the
code would change what is seen: a notification that could not be published is said in the
caller's log, with the caller's context."""

from __future__ import annotations

from shared.clock import iso
from shared.deciding.notices import note_changes
from shared.deciding.outbox import publish_pending
from shared.jobs import JobState
from shared.ledger.store import LedgerStore
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decide import NOW, make_record
from tests.support.decisions import CapturedLog, FakePublisher, make_settings

TOPIC = "projects/team-proj/topics/train-events"


def test_a_notification_left_pending_is_said_in_the_callers_log() -> None:
    publisher, log = FakePublisher(fail_next=1), CapturedLog()
    bucket = MemoryStorage(clock=lambda: NOW).client().bucket("state")
    settings = make_settings("state", SPOTJOBS_ALLOWED_NOTIFY_TOPICS="projects/team-proj/topics/")
    ports = Ports(settings, LedgerStore(bucket), lambda: publisher, None, clock=lambda: NOW)  # type: ignore[arg-type]
    record = make_record(request={"notify": {"topic": TOPIC}}, state=JobState.RUNNING)
    record.attempts[0].started_at = iso(NOW)
    ports.ledger.restore(note_changes(record, NOW))  # accepted, started
    stored = ports.ledger.get("req-1")
    assert stored is not None and len(stored.pending_notices) == 2

    publish_pending(ports, stored, ours=True, now=NOW, log=log.logger.bind(delivery="d-1"))

    [failed] = log.events("notice_publish_failed")
    assert (failed["severity"], failed["delivery"], failed["topic"]) == ("WARNING", "d-1", TOPIC)
    after = ports.ledger.get("req-1")
    assert after is not None and len(after.pending_notices) == 2  # both stay pending, for the next flush
