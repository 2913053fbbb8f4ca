"""The outbox (shared/deciding/outbox.py) with nothing to send: `flush` of a record with no pending
effect, re-queue or cancel returns at once, without asking any of its steps (most of reconcile's
observations find such a record)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.deciding import outbox
from shared.ledger.records import Attempt, RequestRecord
from shared.log import Logger


def quiet_record(**attempt_fields: Any) -> RequestRecord:
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-06T12:00:00Z", job="j/1", **attempt_fields)
    return RequestRecord("r1", {"request_id": "r1"}, "gs://b/r1/", attempts=[attempt])


def test_a_record_with_nothing_pending_is_flushed_without_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_step(*_: Any, **__: Any) -> Any:
        raise AssertionError("a step ran for a record with nothing pending")

    for step in ("send_cancels", "settle_requeue", "publish_pending"):
        monkeypatch.setattr(outbox, step, no_step)
    assert outbox.flush(None, quiet_record(), Logger()) == (None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "pending",
    [
        lambda r: r.pending_alerts.append({"kind": "k"}),
        lambda r: setattr(r, "prune_pending", True),
        lambda r: r.pending_notices.append({"kind": "k"}),
        lambda r: setattr(r, "requeue", object()),
        lambda r: setattr(r.attempts[0], "cancel_decided_at", "2026-12-06T12:00:00Z"),
    ],
    ids=["alert", "prune", "notice", "requeue", "cancel"],
)
def test_a_record_with_anything_pending_goes_through_the_steps(pending: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    for step in ("send_cancels", "settle_requeue", "publish_pending"):
        monkeypatch.setattr(outbox, step, lambda *_, step=step, **__: ran.append(step) or (None, None))
    record = quiet_record()
    pending(record)
    outbox.flush(type("Ports", (), {"clock": staticmethod(lambda: None)})(), record, Logger())  # type: ignore[arg-type]
    assert ran[0] == "send_cancels" and ran[-1] == "publish_pending"  # (a re-queue waits for an ending job)
