"""The prune handler (maintenance messages, summary line, alert, cursor) and `spotjobs prune`,
against fake-gcs-server."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.alerts import Alert
from shared.delivery import Message
from shared.ledger.store import LedgerStore
from shared.log import Logger
from shared.pruning.runner import handle_maintenance
from shared.settings import Settings
from shared.wiring import Ports
from tests.support.decisions import FakePublisher
from tests.support.prune_gcs import folder, format_layout, surviving, upload

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def state_bucket(gcs_bucket):
    return gcs_bucket.client.create_bucket(gcs_bucket.name + "-state")


@pytest.fixture
def prune_settings(gcs_bucket, state_bucket, fake_gcs, monkeypatch) -> Settings:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs)  # what tells prune it runs on the emulator
    return Settings(checkpoint_bucket=gcs_bucket.name, state_bucket=state_bucket.name, prune_workers=4)


def handle(data: bytes, settings: Settings, client) -> tuple[list[dict], list[Alert]]:
    stream = io.StringIO()
    publisher = FakePublisher()
    ports = Ports(
        settings,
        LedgerStore(client.bucket(settings.state_bucket)),
        publisher=lambda: publisher,
        job_service=lambda location: None,
        storage=lambda: client,
    )
    handle_maintenance(Message(data, "m-1"), Logger(stream=stream, min_severity="DEBUG"), ports)
    alerts = [Alert(**message.data) for message in publisher.on("ops-alerts")]
    return [json.loads(line) for line in stream.getvalue().splitlines()], alerts


def test_prune_one_request_logs_a_summary_and_reports(gcs_bucket, prune_settings) -> None:
    for rid in ("req-1", "req-2"):
        format_layout(rid, "demo", 5, with_incomplete=False).write(gcs_bucket)

    lines, alerts = handle(b'{"task": "prune", "request_id": "req-1"}', prune_settings, gcs_bucket.client)

    assert {n.split("/")[0] for n in surviving(gcs_bucket, "req-1")} == {"step-000400", "step-000500"}
    assert len(surviving(gcs_bucket, "req-2")) == 5 * 3  # not asked for
    [summary] = [line for line in lines if line.get("event") == "prune_summary"]
    assert (summary["severity"], summary["requests_scanned"], summary["checkpoints_deleted"]) == ("INFO", 1, 3)
    assert summary["objects_deleted"] == 9 and summary["bytes_freed"] == 9 * 16
    [alert] = alerts
    assert (alert.kind, alert.severity, alert.request_id) == ("prune_report", "INFO", "req-1")


def test_nothing_to_delete_means_no_alert(gcs_bucket, prune_settings) -> None:
    format_layout("req-1", "file", 2, with_incomplete=False).write(gcs_bucket)
    lines, alerts = handle(b'{"task": "prune"}', prune_settings, gcs_bucket.client)
    assert alerts == []
    assert [line["objects_deleted"] for line in lines if line.get("event") == "prune_summary"] == [0]


def test_a_request_whose_record_cannot_be_read_keeps_every_checkpoint_and_alerts_once(
    gcs_bucket, state_bucket, prune_settings
) -> None:
    """An unreadable ledger record: nothing of its request is deleted, one ledger_corrupt alert
    (not an ERROR prune_report on every hourly run, issue 43 defect 8)."""
    format_layout("req-1", "file", 2, with_incomplete=False).write(gcs_bucket)
    before = surviving(gcs_bucket, "req-1")
    state_bucket.blob("requests/req-1.json").upload_from_string(b"{not a record")  # unreadable ledger

    lines, alerts = handle(b'{"task": "prune"}', prune_settings, gcs_bucket.client)
    _, again = handle(b'{"task": "prune"}', prune_settings, gcs_bucket.client)

    assert surviving(gcs_bucket, "req-1") == before
    [corrupt] = [line for line in lines if line.get("event") == "ledger_corrupt"]
    assert (corrupt["severity"], corrupt["request_id"]) == ("ERROR", "req-1")
    assert [(a.kind, a.severity, a.request_id) for a in alerts] == [("ledger_corrupt", "ERROR", "req-1")]
    assert again == []


@pytest.mark.parametrize("data", [b'{"task": "reconcile"}', b"not json"])
def test_other_maintenance_tasks_are_ignored_with_one_debug_line(gcs_bucket, prune_settings, data: bytes) -> None:
    lines, alerts = handle(data, prune_settings, gcs_bucket.client)
    assert [(line["severity"], line["event"]) for line in lines] == [("DEBUG", "ignored_task")]
    assert alerts == []


def test_bounded_runs_resume_from_the_cursor(gcs_bucket, prune_settings) -> None:
    from dataclasses import replace

    settings = replace(prune_settings, prune_requests_per_run=3)
    upload(gcs_bucket, [f"{folder(f'r{i}')}ckpt-{s}.pt" for i in range(7) for s in (1, 2, 3)])
    scanned = []
    for _ in range(4):
        lines, _ = handle(b'{"task": "prune"}', settings, gcs_bucket.client)
        [summary] = [line for line in lines if line.get("event") == "prune_summary"]
        scanned.append((summary["requests_scanned"], summary["next_cursor"]))
    assert scanned == [(3, "r2"), (3, "r5"), (1, ""), (3, "r2")]
    assert all(len(surviving(gcs_bucket, f"r{i}")) == 2 for i in range(7))


def _cli(args: list[str], settings: Settings, fake_gcs: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **settings.as_env(), "STORAGE_EMULATOR_HOST": fake_gcs}
    return subprocess.run(
        [sys.executable, "-m", "spotjobs.cli", "prune", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_dry_run_shows_the_plan_then_a_run_carries_it_out(gcs_bucket, prune_settings, fake_gcs) -> None:
    format_layout("req-1", "demo", 4, with_incomplete=True).write(gcs_bucket)
    before = surviving(gcs_bucket, "req-1")

    dry = _cli(["--dry-run", "--json"], prune_settings, fake_gcs)
    assert dry.returncode == 0, dry.stderr
    [plan] = json.loads(dry.stdout)
    assert surviving(gcs_bucket, "req-1") == before
    assert plan["request_id"] == "req-1" and plan["dry_run"] is True
    assert {d["checkpoint"] for d in plan["deleted"]} == {"step-000100/", "step-000200/"}
    assert {k["checkpoint"] for k in plan["kept"]} == {"step-000300/", "step-000400/", "step-000500/", "step-000050/"}
    assert all(entry["reason"] for entry in plan["kept"] + plan["deleted"])

    done = _cli(["--request-id", "req-1", "--json"], prune_settings, fake_gcs)
    assert done.returncode == 0, done.stderr
    [result] = json.loads(done.stdout)
    assert result["bytes_freed"] == 6 * 16 and result["objects_deleted"] == 6
    # The abandoned step-000050/ was written just now: within the grace period, it stays.
    assert {n.split("/")[0] for n in surviving(gcs_bucket, "req-1")} == {
        "step-000050",
        "step-000300",
        "step-000400",
        "step-000500",
    }

    text = _cli(["--dry-run"], prune_settings, fake_gcs)
    assert "keep      step-000400/" in text.stdout and "1 requests" in text.stdout


def test_the_hourly_run_compacts_the_fleets_old_observations(gcs_bucket, state_bucket, prune_settings) -> None:
    from datetime import UTC, datetime, timedelta

    from shared.fleet import store
    from shared.fleet.observations import FleetFact, Kind, MachineClass

    h100 = MachineClass("a3-highgpu-8g", "NVIDIA_H100_80GB", 8)
    days_ago = datetime.now(UTC) - timedelta(days=2)
    store.write_facts(
        state_bucket,
        h100,
        [
            FleetFact(Kind.WAITING, "us-east4", days_ago, attempt_key="a-1"),
            FleetFact(Kind.NO_CAPACITY, "us-east4", days_ago + timedelta(hours=1), 3600.0, attempt_key="a-1"),
            FleetFact(Kind.CHANGEOVER, "us-east4", days_ago, 900.0, attempt_key="a-2"),
        ],
    )
    lines, _ = handle(b'{"task": "prune"}', prune_settings, gcs_bucket.client)
    [compacted] = [line for line in lines if line.get("event") == "fleet_compacted"]
    assert (compacted["machine_class"], compacted["attempts"]) == (h100.key, 2)
    kinds = sorted(fact.kind for fact in store.read(state_bucket, h100, datetime.now(UTC)))
    assert kinds == [Kind.ATTEMPT, Kind.ATTEMPT]
    # one request's prune (a request just finished) leaves the fleet alone
    lines, _ = handle(b'{"task": "prune", "request_id": "r1"}', prune_settings, gcs_bucket.client)
    assert not [line for line in lines if line.get("event") == "fleet_compacted"]
