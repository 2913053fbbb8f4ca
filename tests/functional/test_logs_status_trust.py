"""`spotjobs logs` and `status` show nothing another job wrote as the request's own (issue 43,
defect 10 and its invariant): the same log entries, a request's signed kit lines and lines forged
under its job id, go to on_job_event (what `status` shows is the ledger it writes) and to `logs`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from spotjobs_kit.lines import format_line as kit_line

from shared.delivery import Message
from shared.ledger.store import LedgerStore
from shared.observe import handle_job_event
from spotjobs.cli.logs import format_line
from spotjobs.cli.status import deadline_view, format_request
from spotjobs.trainer_logs import CloudLogging, request_lines
from tests.support.decisions import CapturedLog, FakePublisher, World, log_entry, make_settings
from tests.support.vertex import FakeVertex

RUNNING = 3


@pytest.fixture
def world(gcs_bucket) -> World:  # noqa: ANN001 - the conftest's bucket
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))


def kit_entry(job: str, n: int, event: str, key: str | None, *, request_id: str, **fields: Any) -> dict[str, Any]:
    """A kit line logged under `job`'s id: whoever wrote the entry chose every field of it."""
    line = kit_line(event, {"request_id": request_id, "attempt": 1, "run": fields.pop("run", 0), **fields}, key=key)
    entry = json.loads(log_entry(job, "", task="workerpool0-0", insert_id=f"{job}-{n}"))
    return {**entry, "jsonPayload": json.loads(line)}


class Entries:
    """entries.list over the entries logged so far, one page."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.entries = entries

    def post(self, url: str, json: dict[str, Any], timeout: float) -> Any:
        page = {"entries": self.entries}
        return type("Response", (), {"status_code": 200, "json": lambda self: page, "text": ""})()


def deliver(world: World, entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        message = Message(json.dumps(entry).encode(), entry["insertId"])
        handle_job_event(message, CapturedLog().logger, settings=world.settings, ports=lambda: world.ports)


def test_status_and_logs_show_only_what_the_requests_own_attempt_signed(world: World) -> None:
    deadline = {"deadline": "2099-01-01T00:00:00Z"}
    _, job = world.submitted("victim", state=RUNNING, request=deadline)
    world.submitted("attacker", state=RUNNING)
    own, attacker = world.kit_key("victim"), world.kit_key("attacker")
    real = [
        kit_entry(job, 1, "run_started", own, request_id="victim", resumed_step=0, total_steps=1000),
        kit_entry(job, 2, "progress", own, request_id="victim", step=100, total_steps=1000, steps_per_second=1.0),
    ]
    forged = [
        kit_entry(job, 3, "preempted", None, request_id="victim", run=7, step=100),
        kit_entry(job, 4, "run_started", attacker, request_id="victim", run=999, resumed_step=0),
        kit_entry(job, 5, "progress", attacker, request_id="victim", step=999, total_steps=1000, steps_per_second=99.0),
        kit_entry(job, 6, "checkpoint_committed", None, request_id="victim", step=900, checkpoint="x", seconds=1.0),
    ]
    deliver(world, real)
    before = world.ledger.get("victim")
    assert before is not None and before.latest is not None and before.latest.total_steps == 1000

    deliver(world, forged)
    after = world.ledger.get("victim")

    assert after is not None
    assert after.to_json() == before.to_json()
    assert format_request(after, world.settings) == format_request(before, world.settings)
    assert deadline_view(after, world.settings) == deadline_view(before, world.settings)

    # `logs` reads the ledger's record (its attempts' keys included) and the same entries.
    source = CloudLogging("p", Entries(real + forged), sleep=lambda seconds: None)
    lines = list(request_lines(lambda: world.ledger.get("victim"), source))
    assert [(line.run, line.event, line.unsigned) for line in lines] == [
        (0, "run_started", False),
        (0, "progress", False),
        *[(0, None, True)] * len(forged),
    ]
    assert all("kit:" not in format_line(line) and "[unsigned]" in format_line(line) for line in lines[2:])
