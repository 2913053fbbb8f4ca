"""`sim.severity.errors_not_transient` has teeth: an ERROR line whose cause is a transient fault the
world injected is caught; a WARNING for one, or an ERROR for a refusal for good, is not."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.api_core import exceptions as api

from sim import invariants, severity, virtual
from sim.world import World


@pytest.fixture
def world() -> World:
    return World(0)


def _deliver(world: World, monkeypatch: pytest.MonkeyPatch, handler: Any) -> str:
    """One maintenance message delivered to `handler` as reconcile's; its message id."""
    monkeypatch.setattr("functions.reconcile._handle", handler)
    world.pubsub.accept(world.settings.maintenance_topic, b'{"task": "reconcile"}', {"task": "reconcile"})
    [delivery] = world.pubsub.deliverable()
    virtual.install(world)
    try:
        world._deliver(delivery, whole=True)  # noqa: SLF001 - one delivery, driven by hand, to its end
    finally:
        virtual.uninstall()
    return delivery.message.message_id


def test_an_error_line_for_an_injected_503_is_caught(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    def reports_a_503_as_an_error(message: Any, log: Any) -> None:
        exc = api.ServiceUnavailable("injected 503 on gcs.read")  # as `World.io` raises it
        log.error("a pass failed", event="reconcile_error", error=f"{type(exc).__name__}: {exc}", request_id="r1")

    _deliver(world, monkeypatch, reports_a_503_as_an_error)
    [found] = severity.errors_not_transient(world)
    assert found.invariant == "errors_not_transient"
    assert "'reconcile_error' (request r1)" in found.detail and "injected 503 on gcs.read" in found.detail
    assert severity.errors_not_transient in invariants.QUIESCENCE
    assert severity.errors_not_transient in invariants.RETENTION


def test_a_transient_fault_said_at_warning_or_a_refusal_for_good_at_error_passes(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    def raises_a_lost_reply(message: Any, log: Any) -> None:  # handle_delivery says it at WARNING, redelivers
        raise api.ServiceUnavailable("the response of gcs.write was lost after it happened")

    def refused_for_good(message: Any, log: Any) -> None:
        log.error("refused", event="reconcile_error", error="PermissionDenied: 403 the caller lacks a permission")

    _deliver(world, monkeypatch, raises_a_lost_reply)
    _deliver(world, monkeypatch, refused_for_good)
    assert severity.errors_not_transient(world) == []


def test_a_line_of_the_process_wide_logger_is_in_the_worlds_log_bound_to_its_task(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shared.log import Logger, logger

    def reports_a_503_through_the_process_wide_logger(message: Any, log: Any) -> None:
        exc = api.ServiceUnavailable("injected 503 on gcs.patch")
        logger.warning("below the world's level", event="kept_out")
        Logger({"component": "ledger"}).error(
            "a write failed", event="ledger_error", error=f"{type(exc).__name__}: {exc}", request_id="r2"
        )

    message_id = _deliver(world, monkeypatch, reports_a_503_through_the_process_wide_logger)
    [found] = severity.errors_not_transient(world)
    assert "'ledger_error' (request r2)" in found.detail and "injected 503 on gcs.patch" in found.detail
    [line] = [json.loads(text) for text in world.log_stream.getvalue().splitlines()]
    assert line["function"] == "reconcile" and line["message_id"] == message_id
    assert line["component"] == "ledger"
