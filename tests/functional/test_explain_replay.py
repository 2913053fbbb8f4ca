"""The captured-style fixtures (tests/events/log_entries/captured, tests/events/jobs) delivered to
the real on_job_event handler, one entry at a time in time order, over a real ledger
(fake-gcs-server) with Vertex and Pub/Sub faked: it takes the decisions `spotjobs explain`
predicts offline, entry by entry and at the end."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from spotjobs_kit.lines import format_line, parse_kit_line

from shared.clock import parse_rfc3339
from shared.deciding.preemptions import preemptions_text
from shared.delivery import Message
from shared.ledger.records import RequestRecord
from shared.ledger.store import LedgerStore
from shared.observe import EventOutcome, handle_job_event
from spotjobs.explaining.entries import explain
from spotjobs.explaining.reading import read_entries
from tests.conftest import EVENTS_DIR
from tests.support.decisions import (
    CapturedLog,
    FakePublisher,
    FakeVertex,
    World,
    make_settings,
)

QUEUED, PENDING, RUNNING, SUCCEEDED, FAILED = 1, 2, 3, 4, 5
STATES = {"JOB_STATE_SUCCEEDED": SUCCEEDED, "JOB_STATE_FAILED": FAILED}
OUTCOMES = {
    "ignored": EventOutcome.IGNORED,
    "irrelevant": EventOutcome.IRRELEVANT,
    "kit_evidence": EventOutcome.OBSERVED,
    "untrusted": EventOutcome.UNTRUSTED,
    "vertex_read": EventOutcome.OBSERVED,
}
# What Vertex reports when each service line is written (the job as the hint finds it).
STATE_AT_LINE = {
    "Waiting for job to be provisioned.": PENDING,
    "Job is preparing.": PENDING,
    "Job is running.": RUNNING,
}


@pytest.fixture
def world(gcs_bucket) -> World:
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))


def oldest_first(name: str) -> list[dict[str, Any]]:
    entries = read_entries((EVENTS_DIR / "log_entries" / "captured" / f"{name}.json").read_text())
    return sorted(reversed(entries), key=lambda e: e["timestamp"])  # gcloud prints newest first


def signed(entry: dict[str, Any], key: str | None) -> dict[str, Any]:
    """The entry as the kit of the test world's attempt prints it (`key` None: unsigned, an old
    kit): the fixtures' lines are signed with the fixture job's key, not the world's."""
    for form in ("jsonPayload", "textPayload"):
        record = parse_kit_line(entry[form]) if form in entry else None
        if record is not None:
            fields = {k: v for k, v in record.fields.items() if k not in ("v", "event", "sig")}
            line = format_line(record.event, fields, key=key)
            entry[form] = json.loads(line) if form == "jsonPayload" else line
    return entry


def holding(name: str, key: str) -> dict[str, Any]:
    """The described job with the test world's key in its env, as submit would have created it."""
    described = json.loads((EVENTS_DIR / "jobs" / f"{name}.json").read_text())
    for pool in described["jobSpec"]["workerPoolSpecs"]:
        for env in pool["containerSpec"]["env"]:
            if env["name"] == "SPOTJOBS_KIT_KEY":
                env["value"] = key
    return described


def claimed_at(record: RequestRecord, moment: str) -> RequestRecord:
    """Attempt 1 claimed when the captured job was created, not today: a kit line older than its
    attempt's claim is refused (shared/deciding/preemptions.py, `kit_line_refusal`)."""
    record.attempts[0].claimed_at = moment
    return record


def deliver_all(world: World, name: str, entries: list[dict[str, Any]]) -> tuple[str, list[EventOutcome], CapturedLog]:
    """Each entry to handle_job_event, the fake job's state following the service lines."""
    described = json.loads((EVENTS_DIR / "jobs" / f"{name}.json").read_text())
    request_id = described["labels"]["spotjobs-request-id"]
    _, job = world.submitted(request_id, state=QUEUED)
    world.ledger.update(request_id, lambda record: claimed_at(record, described["createTime"]))
    job_id = job.rsplit("/", 1)[-1]
    log = CapturedLog()
    outcomes = []
    key = world.kit_key(request_id)
    for number, entry in enumerate(entries):
        entry = signed(json.loads(json.dumps(entry).replace(described["name"].rsplit("/", 1)[-1], job_id)), key)
        text = entry.get("textPayload")
        if text in STATE_AT_LINE:
            world.vertex.set_state(job, STATE_AT_LINE[text])
        elif text in ("Job completed successfully.", "Job failed."):
            world.vertex.set_state(job, STATES[described["state"]], described.get("error"))
        outcomes.append(
            handle_job_event(
                Message(json.dumps(entry).encode(), f"m-{number}"),
                log.logger,
                settings=world.settings,
                ports=lambda: world.ports,
                now=parse_rfc3339(entry["timestamp"]) + timedelta(seconds=1),
            )
        )
    return request_id, outcomes, log


@pytest.mark.parametrize("name", ["preempted_twice_succeeded", "preempted_7_stockout"])
@pytest.mark.parametrize("with_kit", [True, False], ids=["kit", "no-kit"])
def test_the_handler_decides_what_explain_predicts(world: World, name: str, with_kit: bool) -> None:
    entries = oldest_first(name)
    if not with_kit:  # a trainer without the kit
        entries = [e for e in entries if "spotjobs-kit" not in json.dumps(e)]
    request_id, outcomes, log = deliver_all(world, name, entries)

    key = world.kit_key(request_id)
    report = explain(
        [signed(json.loads(json.dumps(e)), key) for e in entries], world.settings, job_json=holding(name, key)
    )
    replay = report.replay
    assert replay is not None

    assert outcomes == [OUTCOMES[e.action] for e in report.entries]
    assert world.vertex.gets == sum(e.action == "vertex_read" for e in report.entries)
    record = world.ledger.get(request_id)
    attempt = record.attempts[0]
    assert (str(record.status), str(attempt.outcome)) == (replay.status, replay.outcome)
    assert preemptions_text(attempt) == replay.preemptions
    if replay.requeue is None:
        assert record.requeue is None
    else:
        assert record.requeue.attempt == replay.requeue["attempt"]
        assert (record.requeue.location, record.requeue.strategy, record.requeue.reason) == (
            replay.requeue["location"],
            replay.requeue["strategy"],
            replay.requeue["reason"],
        )
        assert len(world.publisher.on("job-requests")) == 1
    assert [m.data["kind"] for m in world.publisher.on("ops-alerts")] == replay.alerts
    decided = set(replay.events)
    assert [line["event"] for line in log.lines if line.get("event") in decided] == replay.events


def test_the_expected_outcomes(world: World) -> None:
    """What the two fixtures stand for, stated once: the handler's ledger after each."""
    request_id, _, _ = deliver_all(world, "preempted_twice_succeeded", oldest_first("preempted_twice_succeeded"))
    record = world.ledger.get(request_id)
    assert (str(record.status), preemptions_text(record.attempts[0])) == ("SUCCEEDED", "2")
    request_id, _, _ = deliver_all(world, "preempted_7_stockout", oldest_first("preempted_7_stockout"))
    record = world.ledger.get(request_id)
    assert (str(record.status), preemptions_text(record.attempts[0])) == ("REQUEUED", "7")
    assert record.requeue is not None and record.requeue.reason == "stockout"


def test_explain_ignores_the_kit_lines_the_handler_ignores(world: World) -> None:
    """Unsigned, or signed with another attempt's key: on_job_event counts neither, and explain
    says so rather than predicting evidence."""
    entries = oldest_first("preempted_twice_succeeded")
    request_id, _, _ = deliver_all(world, "preempted_twice_succeeded", entries)
    kit_lines = ["spotjobs-kit" in json.dumps(e) for e in entries]
    assert any(kit_lines)

    described = holding("preempted_twice_succeeded", world.kit_key(request_id))
    for key, job_json in ((None, None), (None, described), ("x" * 64, described)):
        report = explain([signed(json.loads(json.dumps(e)), key) for e in entries], world.settings, job_json=job_json)
        assert [e.action == "untrusted" for e in report.entries] == kit_lines
        if report.replay is not None:
            assert report.replay.kit_lines_fed == 0 and "were not fed" in " ".join(report.replay.notes)
