"""on_job_event (shared/observe.py) at the edges its mutants found. It finishes the adoption of a
job indexed and not recorded (`_finish_adoption`) only for a claim in flight: an attempt the record
does not have, or one that records its job already, has nothing to adopt, and its line is
redelivered as any line its record cannot decide yet. A line of a second job of an attempt cancels
that job as a stray; a line exactly the maximum event age old is still read; a preemption line of a
job not indexed yet is kept; a kit line naming another attempt than its job's moves nothing; a line
whose record cannot be read is acknowledged with one alert."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from shared.deciding.preemptions import KIT_RUN_KEY
from shared.delivery import Message
from shared.errors import TransientError
from shared.ledger.records import RequestRecord, evidence_marker
from shared.ledger.store import JobIndexEntry, LedgerStore
from shared.observe import EventOutcome, handle_job_event
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, log_entry, make_settings

RUNNING, SUCCEEDED = 3, 4
PREEMPTED = "The Spot VM was preempted. Restarting the job (restart 1 of 6)."


@pytest.fixture
def world(gcs_bucket) -> World:
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))


def _deliver(world: World, line: bytes, log: CapturedLog) -> EventOutcome:
    return handle_job_event(Message(line, "m-1"), log.logger, settings=world.settings, ports=lambda: world.ports)


def test_a_line_of_a_job_indexed_for_an_attempt_the_record_lacks_is_redelivered(world: World) -> None:
    """An index names attempt 2 (an earlier life's job of the id: the record was deleted and
    written anew, with attempt 1 only): no claim to finish, the line waits, nothing crashes."""
    world.submitted(state=RUNNING)
    earlier_life = world.vertex.add("req-1", 2, state=RUNNING)
    world.ledger.index_job(JobIndexEntry("req-1", 2, "us-central1", earlier_life))
    log = CapturedLog()

    with pytest.raises(TransientError, match="attempt 2 has no job recorded yet"):
        _deliver(world, log_entry(earlier_life, PREEMPTED, insert_id="ins-1"), log)

    assert [a.n for a in world.ledger.get("req-1").attempts] == [1]
    assert log.events("claim_adopted") == []


def test_a_line_of_a_recorded_job_waiting_for_its_kit_lines_reads_its_job_once(world: World) -> None:
    """The job succeeded and its last run's kit lines are not in yet: the job is the attempt's
    own, recorded, with nothing to adopt; each delivery reads it from Vertex once."""
    _, job = world.submitted(state=RUNNING)

    def a_run_started(current: RequestRecord) -> None:
        current.mark(evidence_marker(KIT_RUN_KEY, 1, "0"))

    world.rewrite("req-1", a_run_started)
    world.vertex.set_state(job, SUCCEEDED)
    log = CapturedLog()

    for delivery in (1, 2):
        with pytest.raises(TransientError, match="waiting for its last run.s kit lines"):
            _deliver(world, log_entry(job, "Job completed successfully."), log)
        assert world.vertex.gets == delivery

    assert world.ledger.get("req-1").attempts[0].outcome is None
    assert log.events("claim_adopted") == []


def test_a_line_of_a_second_job_of_an_attempt_cancels_it_as_a_stray(world: World) -> None:
    """The index names attempt 1 for a job its record does not name (another delivery's create,
    found by its labels): nothing would manage it, and it would train into the same folder."""
    _, own = world.submitted(state=RUNNING)
    second = world.vertex.add("req-1", 1, state=RUNNING)
    world.ledger.index_job(JobIndexEntry("req-1", 1, "us-central1", second))

    _deliver(world, log_entry(second, PREEMPTED, insert_id="ins-1"), CapturedLog())

    assert world.vertex.cancelled == [second]
    assert world.ledger.get("req-1").attempts[0].job == own


@pytest.mark.parametrize(("older", "read"), [(0.0, True), (0.001, False)], ids=["the-maximum", "older"])
def test_a_line_is_read_up_to_the_maximum_event_age(world: World, older: float, read: bool) -> None:
    _, job = world.submitted(state=RUNNING)
    written = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)
    line = log_entry(job, PREEMPTED, insert_id="ins-1", timestamp=written.isoformat().replace("+00:00", "Z"))
    now = written + timedelta(seconds=world.settings.max_event_age_seconds + older)

    outcome = handle_job_event(
        Message(line, "m-1"), CapturedLog().logger, settings=world.settings, ports=lambda: world.ports, now=now
    )

    assert (outcome != EventOutcome.STALE) is read


def test_a_preemption_line_of_a_job_not_indexed_yet_is_kept_and_said_as_such(world: World) -> None:
    job = world.vertex.add("req-1", 1, state=RUNNING)  # its create's answer was lost: not indexed
    log = CapturedLog()

    assert _deliver(world, log_entry(job, PREEMPTED, insert_id="ins-1"), log) == EventOutcome.PARKED

    assert [line["evidence"] for line in log.events("preemption_parked")] == ["ins-1"]
    assert log.events("kit_line_parked") == []


@pytest.mark.parametrize("names", [{"request_id": "req-2", "attempt": 1}, {"request_id": "req-1", "attempt": 2}])
def test_a_kit_line_naming_another_attempt_than_its_jobs_moves_nothing(world: World, names: dict) -> None:
    """Signed with the job's own attempt key, yet naming another request or attempt than the index
    gives the job: no principal but that attempt's containers may make a line count for it."""
    from spotjobs_kit.lines import format_line

    _, job = world.submitted(state=RUNNING)
    before = world.ledger.get("req-1")
    payload = json.loads(format_line("preempted", {**names, "run": 0, "step": 30}, key=world.kit_key()))
    line = json.dumps({**json.loads(log_entry(job, "", task="workerpool0-0")), "jsonPayload": payload}).encode()

    assert _deliver(world, line, CapturedLog()) == EventOutcome.UNTRUSTED
    assert world.ledger.get("req-1") == before


def test_a_line_whose_record_cannot_be_read_is_acknowledged_with_one_alert(world: World) -> None:
    _, job = world.submitted(state=RUNNING)
    world.ledger._bucket.blob("requests/req-1.json").upload_from_string(b"{not a record")  # noqa: SLF001

    outcomes = [_deliver(world, log_entry(job, PREEMPTED, insert_id=f"ins-{k}"), CapturedLog()) for k in (1, 2)]

    assert outcomes == [EventOutcome.CORRUPT] * 2  # acknowledged, never redelivered for ever
    assert [m.data["kind"] for m in world.publisher.on("ops-alerts")] == ["ledger_corrupt"]
