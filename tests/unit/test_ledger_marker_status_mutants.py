"""A record's new status noted on its active marker after the write that changed it
(shared/ledger/store.py `_note_marker_status`): best effort. A marker gone is not written again and
nothing is said; a patch that fails (a Cloud Storage error, a connection's) is said once as a
WARNING and the write stands. The mutation pass found both untested."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from google.api_core.exceptions import ServiceUnavailable

from shared.ledger.records import RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import ACTIVE_PREFIX, LedgerStore
from sim.gcs import MemoryStorage

NOW = datetime(2026, 12, 6, 12, tzinfo=UTC)


class Patches:
    """The io hook of the in-memory storage: a metadata patch raises `failure` when set."""

    def __init__(self) -> None:
        self.failure: Exception | None = None

    def __call__(self, service: str, operation: str, perform: Any) -> Any:
        if operation == "patch" and self.failure is not None:
            raise self.failure
        return perform()


def running(patches: Patches) -> tuple[LedgerStore, Any]:
    bucket: Any = MemoryStorage(clock=lambda: NOW, io=patches).client().bucket("state")
    ledger = LedgerStore(bucket)
    ledger.restore(RequestRecord("r1", {"request_id": "r1"}, "gs://b/r1/", RequestStatus.RUNNING))
    assert bucket.blob(f"{ACTIVE_PREFIX}r1").exists()
    return ledger, bucket


def succeed(current: RequestRecord | None) -> RequestRecord | None:
    assert current is not None
    current.status = RequestStatus.SUCCEEDED
    return current


def warnings(stderr: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "active_marker_status_not_noted"]


@pytest.mark.parametrize("failure", [ServiceUnavailable("patch failed"), ConnectionResetError("reset")])
def test_a_marker_patch_that_fails_is_said_and_the_write_stands(
    failure: Exception, capsys: pytest.CaptureFixture[str]
) -> None:
    patches = Patches()
    ledger, _ = running(patches)
    patches.failure = failure
    stored = ledger.update("r1", succeed)
    assert stored is not None and stored.status == RequestStatus.SUCCEEDED
    [said] = warnings(capsys.readouterr().err)
    assert (said["severity"], said["request_id"], said["status"]) == ("WARNING", "r1", RequestStatus.SUCCEEDED)


def test_a_marker_gone_is_not_written_again_and_nothing_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    ledger, bucket = running(Patches())
    bucket.blob(f"{ACTIVE_PREFIX}r1").delete()
    stored = ledger.update("r1", succeed)
    assert stored is not None and stored.status == RequestStatus.SUCCEEDED
    assert not bucket.blob(f"{ACTIVE_PREFIX}r1").exists()
    assert warnings(capsys.readouterr().err) == []
