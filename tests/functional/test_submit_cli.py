"""`spotjobs validate` (offline) and `spotjobs status` (ledger on fake-gcs-server)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shared import settings as settings_module
from shared.ledger.records import Attempt, RequestRecord, Requeue
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from spotjobs.cli import main
from tests.conftest import EVENTS_DIR

REQUESTS = EVENTS_DIR / "requests"


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No network and no credentials: any socket use fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("validate must not touch the network")

    # The class stays a class (a module imported meanwhile may subclass it: PySocks does); only its
    # ways out are refused.
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket.socket, "sendto", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    for variable in (
        "GOOGLE_APPLICATION_CREDENTIALS",
        "PUBSUB_EMULATOR_HOST",
        "STORAGE_EMULATOR_HOST",
    ):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("SPOTJOBS_CHECKPOINT_BUCKET", "team-ckpt")
    settings_module.get_settings.cache_clear()
    yield
    settings_module.get_settings.cache_clear()


def test_validate_prints_the_spot_job_attempt_one_would_create(
    offline: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An operator policy that allows what this request asks for: its fallback and its account.
    monkeypatch.setenv("SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES", "STANDARD")
    monkeypatch.setenv("SPOTJOBS_ALLOWED_SERVICE_ACCOUNTS", "trainer@my-project.iam.gserviceaccount.com")
    settings_module.get_settings.cache_clear()
    code = main(["validate", str(REQUESTS / "envelope_full.json")])

    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    result = json.loads(out)
    assert (result["request_id"], result["attempt"], result["location"], result["strategy"]) == (
        "resnet-nightly-001",
        1,
        "us-central1",
        "SPOT",
    )
    job = result["custom_job"]
    assert job["jobSpec"]["scheduling"] == {"strategy": "SPOT", "timeout": "86400s"}
    assert job["labels"] == {
        "team": "vision",
        "cost-center": "cc-42",
        "spotjobs-request-id": "resnet-nightly-001",
        "spotjobs-attempt": "1",
        "spotjobs-deployment": "spotjobs-state",  # derived from the state bucket
    }
    assert job["jobSpec"]["baseOutputDirectory"] == {"outputUriPrefix": "gs://team-ckpt/requests/resnet-nightly-001/"}
    assert (
        result["request"]["max_attempts"] == 4 and result["parent"] == "projects/spotjobs-local/locations/us-central1"
    )


def test_validate_names_a_bare_body_and_reads_stdin(
    offline: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO((REQUESTS / "bare_docs.json").read_bytes())))
    assert main(["validate", "-", "--request-id", "docs-job"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["request_id"] == "docs-job" and result["custom_job"]["labels"]["spotjobs-request-id"] == "docs-job"

    assert main(["validate", str(REQUESTS / "bare_docs.json")]) == 0
    generated = json.loads(capsys.readouterr().out)["request_id"]
    assert generated.startswith("cli-") and len(generated) == len("cli-") + 12


def test_validate_lists_every_violation_on_stderr_and_exits_2(
    offline: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["validate", str(REQUESTS / "invalid_replicas.json")])

    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "custom_job.jobSpec.workerPoolSpecs[1].machineSpec.acceleratorCount: is 16; at most 8 per replica",
        "custom_job.jobSpec.workerPoolSpecs[1].replicaCount: is 64; at most 8 per pool",
        "custom_job.jobSpec.workerPoolSpecs: asks for 65 replicas in all (every pool); at most 8 per job "
        "(SPOTJOBS_MAX_REPLICAS_PER_JOB)",
        "custom_job.jobSpec.workerPoolSpecs: asks for 1024 accelerators in all (replicas x "
        "accelerators, every pool); at most 16 per job",
    ]


@pytest.mark.parametrize(
    "content, expected",
    [(b"{not json", "body: is not valid UTF-8 JSON"), (b"", "body: is empty")],
)
def test_validate_rejects_a_file_that_is_not_a_request(
    offline: None, capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, expected: str
) -> None:
    path = tmp_path / "request.json"
    path.write_bytes(content)
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.startswith(expected)


def test_validate_reports_a_missing_file(offline: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["validate", str(tmp_path / "absent.json")]) == 2
    assert capsys.readouterr().err.startswith(f"cannot read {tmp_path / 'absent.json'}: No such file")


def test_submit_validates_first_and_publishes_nothing_when_invalid(
    offline: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # The socket guard proves nothing was published: a publish would have to connect.
    assert main(["submit", str(REQUESTS / "invalid_tpu.json")]) == 2
    assert "TPU" in capsys.readouterr().err


def test_the_console_script_runs_validate_as_a_separate_process() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spotjobs.cli",
            "validate",
            str(REQUESTS / "bare_quick.json"),
            "--request-id",
            "cli-1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["custom_job"]["labels"]["spotjobs-attempt"] == "1"


@pytest.fixture
def ledger_env(gcs_bucket: Any, fake_gcs: str, monkeypatch: pytest.MonkeyPatch) -> LedgerStore:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs)
    monkeypatch.setenv("SPOTJOBS_STATE_BUCKET", gcs_bucket.name)
    settings_module.get_settings.cache_clear()
    yield LedgerStore(gcs_bucket)
    settings_module.get_settings.cache_clear()


def _record(request_id: str, created_at: str) -> RequestRecord:
    record = RequestRecord(
        request_id,
        {"request_id": request_id, "max_attempts": 3, "location": "us-central1", "locations": []},
        f"gs://ckpt/requests/{request_id}/",
        status=RequestStatus.REQUEUED,
        attempts=[
            Attempt(
                1,
                "us-central1",
                "SPOT",
                "2026-11-29T10:00:00.000Z",
                job="projects/p/locations/us-central1/customJobs/111",
                state="JOB_STATE_FAILED",
                preemptions=7,
                outcome="requeued",
                error={"code": 8, "message": "STOCKOUT"},
            ),
        ],
        requeue=Requeue(
            2,
            "europe-west4",
            "STANDARD",
            "attempts exhausted by preemption",
            "2026-11-29T11:00:00.000Z",
        ),
        created_at=created_at,
    )
    return record


def test_status_shows_requests_as_a_table_and_as_json(
    ledger_env: LedgerStore, capsys: pytest.CaptureFixture[str]
) -> None:
    for request_id, created in (
        ("older", "2026-11-29T09:00:00.000Z"),
        ("newer", "2026-11-29T10:00:00.000Z"),
    ):
        ledger_env.restore(_record(request_id, created))

    assert main(["status"]) == 0
    counts, *table = capsys.readouterr().out.splitlines()
    assert counts == "2 requests: REQUEUED 2"
    assert table[0].split() == [
        "REQUEST_ID",
        "STATUS",
        "ATTEMPT",
        "LOCATION",
        "STRATEGY",
        "STATE",
        "PREEMPTIONS",
        "JOB",
        "UPDATED",
    ]
    assert [row.split()[:8] for row in table[1:]] == [
        ["newer", "REQUEUED", "1/3", "us-central1", "SPOT", "FAILED", "7", "111"],
        ["older", "REQUEUED", "1/3", "us-central1", "SPOT", "FAILED", "7", "111"],
    ]

    assert main(["status", "older", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["request_id"] == "older" and document["attempts"][0]["preemptions"] == 7

    assert main(["status", "older"]) == 0
    detail = capsys.readouterr().out
    assert "re-queue    attempt 2 in europe-west4 (STANDARD) because attempts exhausted by preemption" in detail
    assert "STOCKOUT" in detail and "requeued" in detail


def test_the_newest_requests_are_chosen_from_the_listing_and_only_they_are_read(
    ledger_env: LedgerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotjobs.cli.status import recent_records

    for k in range(30):
        ledger_env.restore(_record(f"req-{k:02d}", f"2026-11-29T10:{k:02d}:00.000Z"))
    # A document written before its metadata held `created_at`: read to learn its time.
    legacy = ledger_env._bucket.blob("requests/req-07.json")
    document = legacy.download_as_bytes()
    legacy.delete()
    legacy.metadata = {"status": RequestStatus.REQUEUED}
    legacy.upload_from_string(document, content_type="application/json")
    reads: list[str] = []
    real_read = ledger_env.read
    monkeypatch.setattr(ledger_env, "read", lambda rid: (reads.append(rid), real_read(rid))[1])

    records = recent_records(ledger_env, 3)

    assert [r.request_id for r in records] == ["req-29", "req-28", "req-27"]
    assert sorted(reads) == ["req-07", "req-27", "req-28", "req-29"]
    assert not ledger_env.list_requests()[0][7].created_at


def test_status_finds_requests_by_status_label_and_time_on_a_real_storage_client(
    ledger_env: LedgerStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """The labels go through fake-gcs-server's metadata and back in a listing."""
    for request_id, team, status in (
        ("vision-live", "vision", RequestStatus.REQUEUED),
        ("nlp-live", "nlp", RequestStatus.REQUEUED),
        ("vision-done", "vision", RequestStatus.SUCCEEDED),
    ):
        record = _record(request_id, "2026-11-29T10:00:00.000Z")
        record.request["custom_job"] = {"labels": {"team": team}}
        record.status = status
        ledger_env.restore(record)
    ledger_env.mark_index_built()

    assert main(["status", "--status", "active", "--label", "team=vision"]) == 0
    counts, header, *rows = capsys.readouterr().out.splitlines()
    assert counts == "1 request: REQUEUED 1" and [row.split()[0] for row in rows] == ["vision-live"]

    assert main(["status", "--status", "succeeded", "--label", "team=vision", "--since", "1h"]) == 0
    counts, header, *rows = capsys.readouterr().out.splitlines()
    assert counts == "1 request: SUCCEEDED 1" and [row.split()[0] for row in rows] == ["vision-done"]

    assert main(["status", "--label", "team=nlp", "--since", "2000-01-01"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "1 request: REQUEUED 1"


def test_status_of_an_unknown_request_exits_1(ledger_env: LedgerStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "nobody"]) == 1
    assert "no request nobody" in capsys.readouterr().err


def test_validate_shows_the_effective_policy(
    offline: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTJOBS_ALLOWED_NETWORKS", "projects/1/global/networks/train")
    monkeypatch.setenv("SPOTJOBS_TRAINING_CLASSES", "vision-=tc-vision@p.iam.gserviceaccount.com")
    monkeypatch.delenv("SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES", raising=False)  # a stack's export
    settings_module.get_settings.cache_clear()
    assert main(["validate", "--show-policy"]) == 0
    policy = json.loads(capsys.readouterr().out)["policy"]
    assert policy["custom_job"]["training_classes"] == {"vision-*": "tc-vision@p.iam.gserviceaccount.com"}
    assert "jobSpec.workerPoolSpecs[].containerSpec.imageUri" in policy["custom_job"]["allowed_fields"]
    networks = policy["custom_job"]["opt_in_fields"]["SPOTJOBS_ALLOWED_NETWORKS"]
    assert networks["allowed"] == ["projects/1/global/networks/train"]
    assert "jobSpec.network" in networks["fields"]
    assert policy["fallback_strategies"] == "none (Spot only)"
    assert main(["validate"]) == 2 and "--show-policy" in capsys.readouterr().err
