"""What the stray sweep says and sends again (a reviewer of the reconcile pass, 2026-12-07): a stray
already CANCELLING (Vertex cancels asynchronously: it stays so until it ends) is recorded and
alerted as any stray, and never cancelled, said cancelled or counted again; a duplicate job's
cancel the pass itself refused (its CRUD budget or its call window) is a deferral, said at INFO as a
stray's is, where one Vertex refused stays an ERROR."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core.exceptions import ServiceUnavailable

from shared.found_jobs import adopt_found_job
from shared.ledger.store import LedgerStore
from shared.reconcile import run_reconcile
from shared.reconcile_vertex import CrudBudgetSpent
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, make_settings

RUNNING, CANCELLING = 3, 6


@pytest.fixture
def world(gcs_bucket) -> World:
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))


def stray_alerts(world: World) -> list[dict[str, Any]]:
    return [m.data for m in world.publisher.on("ops-alerts") if m.data["kind"] == "stray_job"]


def test_a_stray_the_sweep_cancelled_is_not_cancelled_again_while_it_is_cancelling(world: World) -> None:
    world.submitted(state=RUNNING)
    stray = world.vertex.add("req-1", 2, state=RUNNING)  # no attempt 2 was ever claimed
    log = CapturedLog()

    first = run_reconcile(world.ports, log.logger)
    second = run_reconcile(world.ports, log.logger)  # the stray is CANCELLING: still in the listing

    assert world.vertex.cancelled == [stray]
    assert (first.decisions["stray_job_cancelled"], second.decisions["stray_job_cancelled"]) == (1, 0)
    assert [line["job"] for line in log.events("stray_job_cancelled")] == [stray]
    assert [line["severity"] for line in log.events("stray_job_cancelling")] == ["INFO"]
    assert len(stray_alerts(world)) == 1


def test_a_stray_someone_else_cancelled_is_recorded_and_alerted_but_not_cancelled(world: World) -> None:
    world.submitted(state=RUNNING)
    stray = world.vertex.add("req-1", 2, state=CANCELLING)  # re-run in the console, then cancelled there
    log = CapturedLog()

    summary = run_reconcile(world.ports, log.logger)

    assert world.vertex.cancelled == [] and summary.decisions["stray_job_cancelled"] == 0
    assert [stray_noted.job for stray_noted in world.ledger.get("req-1").strays] == [stray]  # its bill
    [alert] = stray_alerts(world)
    assert alert["details"]["stray_job"] == stray
    assert log.events("stray_job_cancelled") == []


def test_a_recordless_stray_already_cancelling_is_alerted_but_not_cancelled(world: World) -> None:
    stray = world.vertex.add("req-gone", 1, state=CANCELLING)  # its record deleted by hand
    log = CapturedLog()

    summary = run_reconcile(world.ports, log.logger)

    assert world.vertex.cancelled == [] and summary.decisions["stray_job_cancelled"] == 0
    [alert] = stray_alerts(world)
    assert alert["details"]["stray_job"] == stray
    [line] = log.events("stray_job_cancelling")
    assert line["severity"] == "INFO" and line["record"] == "missing"


@pytest.mark.parametrize(
    ("refusal", "event", "severity"),
    [
        (CrudBudgetSpent("the pass's share of the CRUD quota is spent"), "duplicate_job_cancel_deferred", "INFO"),
        (ServiceUnavailable("down"), "duplicate_job_cancel_failed", "ERROR"),
    ],
    ids=["by-the-pass", "by-vertex"],
)
def test_a_duplicate_jobs_cancel_the_pass_refused_is_a_deferral_and_one_vertex_refused_an_error(
    world: World, refusal: Exception, event: str, severity: str
) -> None:
    _, first = world.submitted(state=RUNNING)
    second = world.vertex.add("req-1", 1, state=RUNNING)

    def refused(name: str, **_: Any) -> None:
        raise refusal

    world.vertex.cancel_custom_job = refused  # type: ignore[method-assign]
    log = CapturedLog()

    adoption, _ = adopt_found_job(
        world.ports, "req-1", 1, "us-central1", world.vertex.get_custom_job(name=second), log.logger, left="was found"
    )

    assert adoption.job == first
    [line] = [line for line in log.lines if line.get("event", "").startswith("duplicate_job_cancel")]
    assert (line["event"], line["severity"], line["job"]) == (event, severity, second)
