"""A timeout without a commit heard looks at the checkpoint folder before it fails its request
(shared/deciding/folder_progress.py), on the simulator's in-memory Cloud Storage through
`apply_observation`, as on_job_event, reconcile and submit decide.

Seed 251: a job committed step 200 and ran into its timeout in the same second; a backlog of
on_job_event held its kit lines, the 300 s settle passed with none heard, and the request failed
`timeout_without_progress`; its `checkpoint_committed` was counted 13 s later. The folder the
next attempt resumes from held the commit all along."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from spotjobs_kit.layout import KIT_MARKER

from shared.alerts import AlertKind
from shared.deciding.applying import apply_observation
from shared.deciding.decisions import Observation
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt, RequestRecord, alert_marker
from shared.ledger.states import AttemptOutcome, RequestStatus
from shared.ledger.store import LedgerStore
from shared.log import Logger
from shared.settings import Settings
from shared.wiring import Ports
from sim.gcs import MemoryStorage
from tests.support.decisions import FakePublisher, make_settings

NOW = datetime(2026, 12, 6, 15, 0, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/5000000000000000034"
JOB_ID = JOB.rsplit("/", 1)[-1]
DEADLINE_EXCEEDED = {"code": 4, "message": "The job ran past its scheduling.timeout of 3600 s."}
ONE_HOUR_JOB = {"displayName": "train", "jobSpec": {"scheduling": {"timeout": "3600s"}}}


class Stage:
    """A request whose attempt 1 ran its job, the ledger and the checkpoint bucket in memory."""

    def __init__(self) -> None:
        self.storage = MemoryStorage(clock=lambda: NOW)
        self.client = self.storage.client()
        self.settings: Settings = make_settings("state")
        self.ledger = LedgerStore(self.client.bucket(self.settings.state_bucket))
        self.folder = f"{self.settings.checkpoint_prefix}/req-1/checkpoints/"
        self.stream = io.StringIO()
        attempt = Attempt(
            1,
            "us-central1",
            "SPOT",
            claimed_at="2026-12-06T12:00:00Z",
            job=JOB,
            state=JobState.RUNNING,
            created_at="2026-12-06T12:00:01Z",
        )
        request = {"request_id": "req-1", "custom_job": ONE_HOUR_JOB, "location": "us-central1", "max_attempts": 3}
        self.ledger.restore(
            RequestRecord(
                "req-1",
                request,
                self.settings.output_dir_for("req-1"),
                status=RequestStatus.RUNNING,
                attempts=[attempt],
            )
        )

    def log_lines(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.stream.getvalue().splitlines()]

    def write(self, name: str, data: bytes) -> None:
        self.client.bucket(self.settings.checkpoint_bucket).blob(self.folder + name).upload_from_string(data)

    def kit_started(self, *, attempt: int = 1, job_id: str = JOB_ID, resumed: int | None = None, run: int = 0) -> None:
        """The run object the kit writes at a start (spotjobs_kit.run `_record_start`)."""
        body = {"request_id": "req-1", "attempt": attempt, "job_id": job_id, "run": run, "resumed_step": resumed}
        self.write(f"_spotjobs_runs/attempt-{attempt}-run-{run:04d}.json", json.dumps(body).encode())

    def committed(self, step: int) -> None:
        """A checkpoint the kit committed: its files, then its marker listing them."""
        name = f"step-{step:06d}/"
        self.write(name + "model.pt", b"weights")
        marker = {"v": 1, "step": step, "files": {"model.pt": len(b"weights")}, "committed_at": "t"}
        self.write(name + KIT_MARKER, json.dumps(marker).encode())

    def timed_out(self, *, ended_ago: float = 400.0) -> RequestRecord:
        """The job's end, read from Vertex after the kit lines' settle passed with no commit heard."""
        end = NOW - timedelta(seconds=ended_ago)
        snapshot = JobSnapshot(
            name=JOB,
            state=JobState.FAILED,
            error=DEADLINE_EXCEEDED,
            create_time="2026-12-06T12:00:01Z",
            start_time=(end - timedelta(seconds=20)).isoformat(),
            end_time=end.isoformat(),
            update_time=end.isoformat(),
        )
        ports = Ports(
            self.settings,
            self.ledger,
            FakePublisher,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            storage=lambda: self.client,
            clock=lambda: NOW,
        )
        log = Logger(stream=self.stream, min_severity="WARNING")
        applied = apply_observation(ports, "req-1", Observation(1, snapshot), log)
        assert applied.record is not None
        return applied.record


@pytest.fixture
def stage() -> Stage:
    return Stage()


def test_a_commit_in_the_folder_continues_a_timeout_whose_kit_lines_are_not_heard_yet(stage: Stage) -> None:
    stage.kit_started(resumed=None)
    stage.committed(200)
    record = stage.timed_out()
    first = record.attempt(1)
    assert record.status == RequestStatus.REQUEUED, "failed without progress: its commit was in the folder"
    assert first is not None and first.continued_after_timeout and first.outcome == AttemptOutcome.REQUEUED
    assert record.requeue is not None and (record.requeue.attempt, record.requeue.reason) == (2, "timeout")
    assert alert_marker(AlertKind.TIMEOUT_WITHOUT_PROGRESS, 1) not in record.markers


def test_a_checkpoint_past_where_a_continued_attempt_resumed_is_its_progress(stage: Stage) -> None:
    stage.committed(200)
    stage.kit_started(resumed=200)
    stage.kit_started(resumed=200, run=1)  # a restart after a preemption: where the attempt began stays
    stage.committed(300)
    assert stage.timed_out().status == RequestStatus.REQUEUED


def test_only_the_checkpoint_it_resumed_from_is_no_progress(stage: Stage) -> None:
    stage.committed(200)
    stage.kit_started(resumed=200)
    record = stage.timed_out()
    assert record.status == RequestStatus.FAILED
    assert alert_marker(AlertKind.TIMEOUT_WITHOUT_PROGRESS, 1) in record.markers


def test_a_trainer_without_the_kit_makes_no_progress_the_folder_could_tell(stage: Stage) -> None:
    # Progress stays the kit's word: a checkpoint without the kit's run object of the attempt.
    stage.committed(200)
    record = stage.timed_out()
    assert record.status == RequestStatus.FAILED
    assert alert_marker(AlertKind.TIMEOUT_WITHOUT_PROGRESS, 1) in record.markers


def test_a_run_object_of_another_job_or_attempt_says_nothing_of_this_one(stage: Stage) -> None:
    stage.kit_started(job_id="999")  # another job under the same attempt number (a stray of it)
    stage.kit_started(attempt=2)
    stage.committed(200)
    assert stage.timed_out().status == RequestStatus.FAILED


def test_the_folder_waits_for_the_settle_like_the_lines(stage: Stage) -> None:
    stage.kit_started(resumed=None)
    stage.committed(200)
    record = stage.timed_out(ended_ago=10.0)
    assert record.status == RequestStatus.RUNNING and record.requeue is None


def test_the_first_readable_run_object_of_the_job_says_where_it_began(stage: Stage) -> None:
    from spotjobs_kit.storage import GcsStore

    from shared.deciding.folder_progress import NOTHING_RESUMED, resumed_step

    stage.write("_spotjobs_runs/attempt-1-run-0000.json", b"{not json")
    stage.kit_started(resumed=None, run=1)
    stage.kit_started(resumed=500, run=2)
    store = GcsStore(f"gs://{stage.settings.checkpoint_bucket}/{stage.folder}", client=stage.client)
    assert resumed_step(store, 1, JOB_ID) == NOTHING_RESUMED
    assert resumed_step(store, 3, JOB_ID) is None


def test_a_folder_the_function_may_not_read_leaves_the_kits_lines_to_decide(
    stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.api_core.exceptions import Forbidden
    from spotjobs_kit.storage import GcsStore

    def refused(self: GcsStore, prefix: str) -> None:
        raise Forbidden("fn-events may not list the checkpoint bucket")

    monkeypatch.setattr(GcsStore, "list_folder", refused)
    stage.kit_started(resumed=None)
    stage.committed(200)
    record = stage.timed_out()
    assert record.status == RequestStatus.FAILED
    assert [line["event"] for line in stage.log_lines() if line["severity"] == "WARNING"] == [
        "checkpoint_folder_refused"
    ]
