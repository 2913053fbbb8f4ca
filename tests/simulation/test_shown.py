"""What the dashboard and `status` show, as the simulator checks it (sim/shown.py), has teeth: a
published alert missing from the alerts log, and an active request the active query cannot find,
are each reported; a clean world passes both."""

from __future__ import annotations

import json

import pytest

from shared.alerts import Alert, AlertKind
from shared.deciding.alert_log import entry_name
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from sim import shown
from sim.world import World
from tests.support.sim_world import restore


@pytest.fixture
def world() -> World:
    return World(0)


def publish(world: World, alert: Alert) -> None:
    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert.to_json()).encode(), {})


def test_a_published_alert_missing_from_the_log_is_caught_and_a_logged_one_passes(world: World) -> None:
    logged = Alert.of(AlertKind.JOB_FAILED, "attempt 1 failed", request_id="r1", attempt=1)
    bucket = world.storage.client().bucket(world.settings.state_bucket)
    bucket.blob(entry_name(logged)).upload_from_string(json.dumps(logged.to_json()))
    publish(world, logged)
    assert shown.alerts_logged(world) == []

    missing = Alert.of(AlertKind.JOB_FAILED, "attempt 2 failed", request_id="r1", attempt=2)
    publish(world, missing)
    publish(world, Alert.of(AlertKind.TRIGGER_FAILED, "a trigger's own", details={"trigger": "daily"}))
    [violation] = shown.alerts_logged(world)
    assert violation.invariant == "alerts_logged" and entry_name(missing) in violation.detail


def test_an_active_request_the_active_query_cannot_find_is_caught(world: World) -> None:
    restore(world, "marked", RequestStatus.RUNNING)
    restore(world, "done", RequestStatus.SUCCEEDED)
    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
    ledger.mark_index_built()
    assert shown.active_query_finds_the_active(world) == []

    world.storage.client().bucket(world.settings.state_bucket).blob("active/marked").delete()

    [violation] = shown.active_query_finds_the_active(world)
    assert violation.detail == "marked: active, and not found by the active query"
