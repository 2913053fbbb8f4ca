"""The stray sweep's listing of a location refused for good (issue 43, seed 10018): Vertex answers
403 to `customJobs.list` in one region, and a job someone re-ran there in the console would run and
cost money unseen. Said once per location and error kind, with what to do; a refusal for now
(429, 503) is only retried."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from shared.ledger.store import LedgerStore
from shared.reconcile import run_reconcile
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, make_settings

RUNNING = 3
REFUSED = "us-east4"


@pytest.fixture
def world(gcs_bucket) -> World:
    settings = replace(make_settings(gcs_bucket.name), allowed_locations=("us-central1", REFUSED))
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), settings)


def refuse_listing_in(world: World, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    listing = world.vertex.list_custom_jobs

    def refusing(request: dict[str, Any], **kwargs: Any) -> list[Any]:
        if request["parent"].endswith(f"/locations/{REFUSED}"):
            raise error
        return listing(request, **kwargs)

    monkeypatch.setattr(world.vertex, "list_custom_jobs", refusing)


def sweep_alerts(world: World) -> list[dict[str, Any]]:
    return [m.data for m in world.publisher.on("ops-alerts") if m.data["kind"] == "stray_sweep_refused"]


def test_a_location_whose_listing_is_refused_for_good_is_alerted_once_per_error_kind(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.api_core.exceptions import NotFound, PermissionDenied

    _, job = world.submitted(state=RUNNING)
    world.vertex.add("req-1", 1, REFUSED, state=RUNNING)  # re-run by hand where nobody can list
    refuse_listing_in(world, monkeypatch, PermissionDenied("Permission 'aiplatform.customJobs.list' denied"))
    log = CapturedLog()

    run_reconcile(world.ports, log.logger)
    run_reconcile(world.ports, log.logger)

    [alert] = sweep_alerts(world)
    assert alert["severity"] == "ERROR" and alert["details"]["location"] == REFUSED
    assert alert["details"]["error_kind"] == "PermissionDenied"
    assert "aiplatform.customJobs.list" in alert["message"] and "SPOTJOBS_ALLOWED_LOCATIONS" in alert["message"]
    assert len(log.events("stray_sweep_failed")) == 2  # every pass still says it in the log
    assert world.vertex.cancelled == []  # us-central1 was swept: its job is the recorded one

    refuse_listing_in(world, monkeypatch, NotFound(f"location {REFUSED} not found"))
    run_reconcile(world.ports, log.logger)
    run_reconcile(world.ports, log.logger)

    assert [a["details"]["error_kind"] for a in sweep_alerts(world)] == ["PermissionDenied", "NotFound"]
    assert world.ledger.get("req-1").attempt(1).job == job


@pytest.mark.parametrize(
    ("error", "alerted"),
    [
        ("PermissionDenied", True),  # gRPC's 403
        ("Forbidden", True),  # REST's 403
        ("NotFound", True),  # a location Vertex does not know
        ("TooManyRequests", False),
        ("ServiceUnavailable", False),
        ("InternalServerError", False),
    ],
)
def test_only_a_listing_refused_for_good_is_alerted_and_every_refusal_is_logged(
    world: World, monkeypatch: pytest.MonkeyPatch, error: str, alerted: bool
) -> None:
    from google.api_core import exceptions

    refuse_listing_in(world, monkeypatch, getattr(exceptions, error)("refused"))
    log = CapturedLog()

    run_reconcile(world.ports, log.logger)

    assert [a["details"]["error_kind"] for a in sweep_alerts(world)] == ([error] if alerted else [])
    [line] = log.events("stray_sweep_failed")
    assert line["severity"] == "WARNING" and line["location"] == REFUSED


def refuse_cancels(world: World, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    def refusing(name: str, **_: Any) -> None:
        raise error

    monkeypatch.setattr(world.vertex, "cancel_custom_job", refusing)


def test_a_stray_whose_cancel_is_refused_for_good_is_alerted_once_naming_it(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 954: a job re-run by hand in the console, where Vertex refuses `customJobs.cancel` for
    good: its `stray_job` alert says it is being cancelled, and it runs on. Said once, naming the job."""
    from google.api_core.exceptions import PermissionDenied

    _, job = world.submitted(state=RUNNING)
    stray = world.vertex.add("req-1", 1, "us-central1", state=1)  # re-run by hand, queued
    refuse_cancels(world, monkeypatch, PermissionDenied("Permission 'aiplatform.customJobs.cancel' denied"))
    log = CapturedLog()

    run_reconcile(world.ports, log.logger)
    run_reconcile(world.ports, log.logger)

    [alert] = sweep_alerts(world)
    assert alert["severity"] == "ERROR" and alert["details"]["location"] == "us-central1"
    assert alert["details"]["call"] == "cancel" and alert["details"]["job"] == stray
    assert alert["details"]["error_kind"] == "PermissionDenied"
    assert stray in alert["message"] and "aiplatform.customJobs.cancel" in alert["message"]
    assert len(log.events("stray_sweep_failed")) == 2  # every pass still says it in the log
    assert world.ledger.get("req-1").attempt(1).job == job


def test_a_stray_cancel_refused_for_now_is_only_retried(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from google.api_core.exceptions import ServiceUnavailable

    world.submitted(state=RUNNING)
    world.vertex.add("req-1", 1, "us-central1", state=1)
    refuse_cancels(world, monkeypatch, ServiceUnavailable("try again"))
    log = CapturedLog()

    run_reconcile(world.ports, log.logger)

    assert sweep_alerts(world) == []
    assert len(log.events("stray_sweep_failed")) == 1


def test_a_record_less_stray_whose_cancel_is_refused_for_good_is_alerted_naming_it(
    world: World, monkeypatch: pytest.MonkeyPatch, gcs_bucket
) -> None:
    """The same where the request's record is gone (retention outlived by the stray, seed 954):
    every live job of the request is a stray, and one refused does not stop the others."""
    from google.api_core.exceptions import PermissionDenied

    _, job = world.submitted(state=RUNNING)
    stray = world.vertex.add("req-1", 1, "us-central1", state=1)
    gcs_bucket.blob("requests/req-1.json").delete()
    refuse_cancels(world, monkeypatch, PermissionDenied("Permission 'aiplatform.customJobs.cancel' denied"))

    run_reconcile(world.ports, CapturedLog().logger)
    run_reconcile(world.ports, CapturedLog().logger)

    assert sorted(a["details"]["job"] for a in sweep_alerts(world)) == sorted([job, stray])
