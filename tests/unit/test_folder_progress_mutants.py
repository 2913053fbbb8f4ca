"""Where an attempt began and what its folder shows past it (shared/deciding/folder_progress.py),
at the edges the mutation pass found untested: a checkpoint of step 0 after a start from nothing,
objects in the runs folder the kit did not write, a run object whose `resumed_step` is no step,
the order of run objects past 9999 runs, and a look asked where there is nothing to read."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

from spotjobs_kit.layout import KIT_MARKER
from spotjobs_kit.storage import GcsStore

from shared.deciding.folder_progress import NOTHING_RESUMED, folder_progress, progress_in_folder, resumed_step
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from shared.log import Logger
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decisions import FakePublisher, make_settings

NOW = datetime(2026, 12, 6, 15, 0, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/5000000000000000034"
JOB_ID = JOB.rsplit("/", 1)[-1]
BUCKET = "ckpt"


def folder(storage: MemoryStorage) -> GcsStore:
    return GcsStore(f"gs://{BUCKET}/requests/req-1/checkpoints/", client=storage.client())


def write(storage: MemoryStorage, name: str, data: bytes) -> None:
    storage.client().bucket(BUCKET).blob(f"requests/req-1/checkpoints/{name}").upload_from_string(data)


def run_object(storage: MemoryStorage, *, attempt: int = 1, run: int = 0, resumed: Any = None) -> None:
    """The run object the kit writes at a start (spotjobs_kit.run `_record_start`)."""
    body = {"request_id": "req-1", "attempt": attempt, "job_id": JOB_ID, "run": run, "resumed_step": resumed}
    write(storage, f"_spotjobs_runs/attempt-{attempt}-run-{run:04d}.json", json.dumps(body).encode())


def committed(storage: MemoryStorage, step: int) -> None:
    name = f"step-{step:06d}/"
    write(storage, name + "model.pt", b"weights")
    marker = {"v": 1, "step": step, "files": {"model.pt": len(b"weights")}, "committed_at": "t"}
    write(storage, name + KIT_MARKER, json.dumps(marker).encode())


def test_a_first_run_from_no_checkpoint_counts_a_checkpoint_of_step_0() -> None:
    storage = MemoryStorage(clock=lambda: NOW)
    run_object(storage, resumed=None)
    committed(storage, 0)
    assert resumed_step(folder(storage), 1, JOB_ID) == NOTHING_RESUMED
    found = progress_in_folder(folder(storage), 1, JOB_ID, (KIT_MARKER,))
    assert found is not None and found.step == 0


def test_an_object_in_the_runs_folder_that_is_no_run_object_is_passed_over() -> None:
    storage = MemoryStorage(clock=lambda: NOW)
    write(storage, "_spotjobs_runs/README.txt", b"written by hand")
    run_object(storage, resumed=200)
    assert resumed_step(folder(storage), 1, JOB_ID) == 200


def test_a_resumed_step_that_is_no_step_number_is_not_read() -> None:
    storage = MemoryStorage(clock=lambda: NOW)
    run_object(storage, run=0, resumed="200")
    run_object(storage, run=1, resumed=True)
    run_object(storage, run=2, resumed=300)
    assert resumed_step(folder(storage), 1, JOB_ID) == 300


def test_the_run_objects_are_taken_in_the_order_of_their_run_numbers_not_their_names() -> None:
    # "attempt-1-run-10000.json" sorts before "attempt-1-run-9999.json" by name.
    storage = MemoryStorage(clock=lambda: NOW)
    run_object(storage, run=10000, resumed=700)
    run_object(storage, run=9999, resumed=600)
    assert resumed_step(folder(storage), 1, JOB_ID) == 600


def look(*, storage: MemoryStorage | None, job: str | None) -> tuple[object, list[str]]:
    """`folder_progress`'s answer for attempt 1 of a running request, and the calls it made of storage."""
    settings = make_settings("state")
    memory = storage or MemoryStorage(clock=lambda: NOW)
    asked: list[str] = []

    def client() -> Any:
        asked.append("storage")
        return memory.client()

    ports = Ports(
        settings,
        LedgerStore(memory.client().bucket(settings.state_bucket)),
        FakePublisher,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        storage=client if storage is not None else None,
        clock=lambda: NOW,
    )
    attempt = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-06T12:00:00Z", job=job)
    record = RequestRecord(
        "req-1",
        {"request_id": "req-1"},
        settings.output_dir_for("req-1"),
        status=RequestStatus.RUNNING,
        attempts=[attempt],
    )
    found = folder_progress(ports, Logger(stream=io.StringIO()))(record, attempt)
    return found, asked


def test_a_look_without_storage_or_without_a_job_reads_nothing() -> None:
    assert look(storage=None, job=JOB) == (None, [])
    assert look(storage=MemoryStorage(clock=lambda: NOW), job=None) == (None, [])
