"""`spotjobs dashboard` (issue 47) through Flask's test client over a real ledger (fake-gcs-server)
and a fake log source: the Requests page's filters and counts, a Request's attempts and cost, the
Fleet page, what a hostile job wrote shown inert, and a cancel that needs the session's token and
this origin."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from spotjobs_kit.lines import format_line as kit_line
from spotjobs_kit.lines import parse_kit_line

from shared.ledger.store import LedgerStore
from spotjobs.dashboard.app import create_app
from spotjobs.trainer_logs import LogLine
from tests.support.dashboard import HOSTILE, KIT_KEY, FakeLogs, deployment, finished, preempted_then_running


@pytest.fixture
def ledger(gcs_bucket) -> LedgerStore:  # noqa: ANN001 - the conftest's bucket
    return LedgerStore(gcs_bucket)


def client_of(ledger: LedgerStore, logs: FakeLogs | None = None, bucket: Any = None) -> Any:
    return create_app(deployment(ledger, logs, bucket)).test_client()


def token_of(client: Any, request_id: str) -> str:
    page = client.get(f"/requests/{request_id}/cancel").get_data(as_text=True)
    found = re.search(r'name="token" value="([^"]+)"', page)
    assert found, page
    return found[1]


def test_a_request_shows_its_checkpoints_and_where_each_attempt_resumes(ledger: LedgerStore) -> None:
    record = preempted_then_running("train-c")
    first, second = record.attempts
    first.checkpoints_committed, first.checkpoint_seconds = 3, 6.0
    first.first_checkpoint_at, first.last_checkpoint_at = "2026-12-01T08:10:00Z", "2026-12-01T08:30:00Z"
    first.last_checkpoint, first.last_checkpoint_bytes = [3, 600], 2_500_000
    second.last_checkpoint_bytes = 787  # a small one is not "0.0 MB"
    ledger.restore(record)

    page = client_of(ledger).get("/requests/train-c").get_data(as_text=True)
    checkpoints = page[page.index('id="checkpoints"') :]
    assert '<td data-attempt="1">1</td><td>3</td><td class="text">run 3, step 600</td>' in checkpoints
    assert "2026-12-01T08:30:00Z" in checkpoints and "600 s" in checkpoints and "2.5 MB" in checkpoints
    assert "787 B" in checkpoints and "0.0 MB" not in checkpoints
    assert "from scratch" in checkpoints  # attempt 1 had nothing to resume from
    assert "step 600 (attempt 1, run 3)" in checkpoints  # attempt 2 resumes from attempt 1's last
    assert '<td data-attempt="2">2</td><td>0</td><td class="text">-</td>' in checkpoints


def test_the_requests_page_counts_filters_and_costs(ledger: LedgerStore) -> None:
    ledger.restore(preempted_then_running("train-a"))
    ledger.restore(finished("train-b"))
    client = client_of(ledger)

    page = client.get("/?all=1").get_data(as_text=True)
    assert "2 requests" in page and 'data-status="RUNNING">RUNNING 1' in page and "SUCCEEDED 1" in page
    assert 'data-request="train-a"' in page and 'data-request="train-b"' in page
    assert "2/3" in page and "europe-west1" in page  # the attempt in progress
    assert re.search(r'class="cost">\$[0-9][0-9,]*\.\d\d<', page)  # a cost so far from the price table

    active = client.get("/?status=active").get_data(as_text=True)
    assert 'data-request="train-a"' in active and 'data-request="train-b"' not in active
    machine = client.get("/?machine=n1-standard-8").get_data(as_text=True)
    assert 'data-request="train-b"' in machine and 'data-request="train-a"' not in machine
    recent = client.get("/?since=1h").get_data(as_text=True)  # changed: the ledger's last write, just now
    assert 'data-request="train-a"' in recent and 'data-request="train-b"' in recent
    bad = client.get("/?status=nonsense&since=yesterday-ish").get_data(as_text=True)
    assert "unknown status" in bad and "neither a duration" in bad


def test_the_requests_page_reads_the_active_index_unless_asked_for_all(ledger: LedgerStore) -> None:
    """At 100,000 finished requests a listing of `requests/` on every poll is slow: the page
    opens on the active requests, as `spotjobs status --status active` reads them."""
    ledger.restore(preempted_then_running("train-a"))
    ledger.restore(finished("train-b"))
    client = client_of(ledger)

    page = client.get("/").get_data(as_text=True)
    assert 'data-request="train-a"' in page and 'data-request="train-b"' not in page
    assert 'id="scope"' in page and 'href="/?all=1"' in page
    everything = client.get("/?all=1").get_data(as_text=True)
    assert 'data-request="train-b"' in everything and 'id="scope"' not in everything
    labelled = client.get("/?since=1h").get_data(as_text=True)  # a filter asked for: every status
    assert 'data-request="train-b"' in labelled


def test_a_request_shows_its_attempts_preemptions_cost_and_log(ledger: LedgerStore) -> None:
    record = preempted_then_running("train-a")
    ledger.restore(record)
    own = LogLine(2, record.attempts[1].job_id, "l1", "2026-12-01T09:04:00Z", "INFO", "step 100 loss 0.5")
    old = LogLine(1, record.attempts[0].job_id, "l0", "2026-12-01T08:02:00Z", "INFO", "step 1 loss 9.9")
    client = client_of(ledger, FakeLogs([old, own]))

    page = client.get("/requests/train-a").get_data(as_text=True)
    assert 'class="bar strategy-SPOT preempted" data-attempt="1"' in page
    assert 'class="bar strategy-STANDARD" data-attempt="2"' in page
    assert "⚡ preempted 2" in page and "europe-west1" in page
    assert re.search(r'id="on-demand">\$[0-9,]+\.\d\d<', page)
    assert "step 100 loss 0.5" in page
    assert "step 1 loss 9.9" not in page  # over an hour before the record last changed (09:03)
    assert 'id="deadline"' not in page  # no deadline asked for

    with_deadline = preempted_then_running("train-d")
    with_deadline.request["deadline"] = "2099-01-01T00:00:00Z"
    ledger.restore(with_deadline)
    deadline = client.get("/requests/train-d").get_data(as_text=True)
    assert 'id="deadline"' in deadline and "deadline 2099-01-01T00:00:00Z: progress unknown" in deadline
    assert client.get("/requests/nobody").status_code == 404
    assert "run this" not in client.get("/requests/train-a?cancel=run+this").get_data(as_text=True)


def test_what_a_hostile_job_wrote_is_inert_and_no_secret_is_shown(ledger: LedgerStore) -> None:
    record = preempted_then_running("train-h", error=HOSTILE + "9" * 5000)
    record.attempts[0].preemptions = 10**400  # a huge number a job's evidence could claim
    ledger.restore(record)
    job = record.attempts[1].job_id
    forged_text = kit_line("preempted", {"request_id": "train-h", "attempt": 2, "run": 0}, key=None)
    forged = LogLine(2, job, "f1", "2026-12-01T09:05:00Z", "INFO", forged_text, claimed_kit=parse_kit_line(forged_text))
    hostile = LogLine(2, job, "h1", "2026-12-01T09:06:00Z", "INFO", HOSTILE)
    response = client_of(ledger, FakeLogs([forged, hostile])).get("/requests/train-h")
    page = response.get_data(as_text=True)

    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\x1b" not in page and "\x07" not in page and "\u202e" not in page
    assert "\\x1b[31m" in page and "\\u202e" in page  # shown as `spotjobs logs` prints them
    assert "9" * 500 not in page and "0" * 100 not in page  # a huge text or number is cut
    assert 'class="line forged"' in page and "[unsigned]" in page
    assert KIT_KEY not in page
    assert "default-src 'self'" in response.headers["Content-Security-Policy"]
    assert response.headers["X-Frame-Options"] == "DENY"
    scripts = re.findall(r"<script[^>]*>", page)
    assert scripts == ['<script src="/static/dashboard.js" defer>']  # no inline script at all


def test_cancel_needs_the_sessions_token_and_this_origin(ledger: LedgerStore) -> None:
    ledger.restore(preempted_then_running("train-c"))
    client = client_of(ledger)
    token = token_of(client, "train-c")

    assert client.post("/requests/train-c/cancel", data={"reason": "x"}).status_code == 403
    assert client.post("/requests/train-c/cancel", data={"token": "guess"}).status_code == 403
    for origin in ("https://evil.example", "null"):  # null: a sandboxed frame, a redirect, a data: page
        assert (
            client.post("/requests/train-c/cancel", data={"token": token}, headers={"Origin": origin}).status_code
            == 403
        )
    cross_site = {"Sec-Fetch-Site": "cross-site"}
    assert client.post("/requests/train-c/cancel", data={"token": token}, headers=cross_site).status_code == 403
    stranger = client_of(ledger)  # another session: its own token, never this one's
    assert stranger.post("/requests/train-c/cancel", data={"token": token}).status_code == 403
    assert ledger.get("train-c").cancel is None

    done = client.post(
        "/requests/train-c/cancel",
        data={"token": token, "reason": "wrong <b>data</b>"},
        headers={"Origin": "http://localhost"},
    )
    assert done.status_code == 303 and done.headers["Location"].endswith("/requests/train-c?cancel=recorded")
    cancel = ledger.get("train-c").cancel
    assert (cancel.by, cancel.reason) == ("ana@example.com", "wrong <b>data</b>")
    page = client.get("/requests/train-c").get_data(as_text=True)
    assert 'id="cancelled"' in page and "wrong &lt;b&gt;data&lt;/b&gt;" in page and 'id="cancel"' not in page


def test_the_fleet_page_shows_what_spotjobs_fleet_shows_and_preemptions_per_location(
    ledger: LedgerStore, gcs_bucket: Any
) -> None:
    from datetime import timedelta

    from shared.clock import utcnow
    from shared.fleet import store
    from shared.fleet.observations import FleetFact, Kind, MachineClass

    now = utcnow()
    h100 = MachineClass("a3-highgpu-8g", "NVIDIA_H100_80GB<script>", 8)
    facts = [
        FleetFact(Kind.RUN, "us-east4", now - timedelta(hours=3), 7200.0, attempt_key="k-1"),
        FleetFact(Kind.PREEMPT, "us-east4", now - timedelta(hours=1), attempt_key="k-1"),
        FleetFact(Kind.PREEMPT, "us-east4", now - timedelta(minutes=30), attempt_key="k-1", index=1),
        FleetFact(Kind.PREEMPT, "us-central1", now - timedelta(minutes=20), attempt_key="k-2"),
    ]
    store.write_facts(gcs_bucket, h100, facts)
    page = client_of(ledger, bucket=gcs_bucket).get("/fleet").get_data(as_text=True)

    assert "capacity now" in page and "us-east4" in page and "a3-highgpu-8g" in page
    assert 'data-width="100.0" data-location="us-east4">2<' in page
    assert 'data-width="50.0" data-location="us-central1">1<' in page
    assert "<script>" not in page.split("</header>", 1)[1]


def test_the_dead_letters_page_shows_each_with_its_redrive_command(ledger: LedgerStore) -> None:
    from spotjobs.deadletters import DELIVERY_COUNT, SOURCE_SUBSCRIPTION, DeadLetter

    hostile = DeadLetter(
        "m-1",
        json.dumps({"request_id": HOSTILE}).encode(),
        {SOURCE_SUBSCRIPTION: "projects/p/subscriptions/job-requests-push", DELIVERY_COUNT: "5"},
        "2026-12-01T08:00:00Z",
    )
    app = create_app(deployment(ledger, dead_letters=lambda: [hostile]))
    page = app.test_client().get("/dead-letters").get_data(as_text=True)
    assert "spotjobs dead-letters redrive --id m-1" in page and "job-requests-push" in page
    assert "request_id=&lt;script&gt;" in page and "<script>alert" not in page and "\x1b" not in page
    assert 'data-poll="0"' in page  # each read leases every message: never polled

    def unreachable() -> list[DeadLetter]:
        raise ConnectionError("no Pub/Sub here")

    broken = create_app(deployment(ledger, dead_letters=unreachable)).test_client().get("/dead-letters")
    assert broken.status_code == 200 and "could not be read: no Pub/Sub here" in broken.get_data(as_text=True)


def test_a_request_for_another_host_name_is_refused(ledger: LedgerStore) -> None:
    """DNS rebinding: a page of evil.example that re-points its name at 127.0.0.1 names its host."""
    client = client_of(ledger)
    assert client.get("/", headers={"Host": "evil.example"}).status_code == 400
    assert client.get("/", headers={"Host": "127.0.0.1:8765"}).status_code == 200
    assert client.get("/", headers={"Host": "[::1]:8765"}).status_code == 200  # --host ::1
    assert client.get("/", headers={"Host": "[::2]:8765"}).status_code == 400


def test_the_other_commands_do_not_load_flask() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from spotjobs.cli import build_parser; build_parser(); print(json.dumps('flask' in sys.modules))"
    )
    shown = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True)
    assert json.loads(shown.stdout) is False


def test_the_deployment_is_the_one_the_cli_reaches(
    gcs_bucket: Any, fake_gcs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state bucket of the settings (here the emulator's, as `spotjobs local up` exports it),
    the local Vertex emulator's logs, and a cancel recorded under the local user."""
    import getpass

    from spotjobs.dashboard.reading import deployment_of
    from spotjobs.trainer_logs import EmulatorLogs
    from tests.support.decisions import make_settings

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs)
    settings = make_settings(gcs_bucket.name, SPOTJOBS_VERTEX_ENDPOINT="http://127.0.0.1:9")
    LedgerStore(gcs_bucket).restore(preempted_then_running("train-e"))
    reached = deployment_of(settings)

    assert isinstance(reached.logs, EmulatorLogs) and reached.operator == getpass.getuser()
    client = create_app(reached).test_client()
    assert 'data-request="train-e"' in client.get("/").get_data(as_text=True)
    page = client.get("/requests/train-e")  # the emulator is not there: the page says so, and stands
    assert page.status_code == 200 and 'id="logs-error"' in page.get_data(as_text=True)
    token = re.search(r'name="token" value="([^"]+)"', client.get("/requests/train-e/cancel").get_data(as_text=True))
    assert client.post("/requests/train-e/cancel", data={"token": token[1]}).status_code == 303
    assert LedgerStore(gcs_bucket).get("train-e").cancel.by == getpass.getuser()


def test_the_command_serves_the_pages_on_loopback(gcs_bucket: Any, fake_gcs: str) -> None:
    """`spotjobs dashboard --port N` as an operator runs it, with the local stack's exports."""
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    from devstack.processes import free_port
    from tests.support.vertex import DEPLOYMENT, PROJECT

    LedgerStore(gcs_bucket).restore(preempted_then_running("train-f"))
    port = free_port()
    env = {
        **os.environ,
        "STORAGE_EMULATOR_HOST": fake_gcs,
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        "SPOTJOBS_STATE_BUCKET": gcs_bucket.name,
        "SPOTJOBS_LOCATION": "us-central1",
        "SPOTJOBS_DEPLOYMENT": DEPLOYMENT,
    }
    command = [sys.executable, "-m", "spotjobs.cli", "dashboard", "--port", str(port)]
    server = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        page = ""
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    page = response.read().decode()
                break
            except OSError:
                time.sleep(0.1)
        assert 'data-request="train-f"' in page
    finally:
        server.terminate()
        _, error = server.communicate(timeout=10)
    assert f"spotjobs dashboard on http://127.0.0.1:{port}/" in error and "warning: binding" not in error


def test_the_alerts_page_lists_the_alerts_log_newest_first_and_escaped(ledger: LedgerStore, gcs_bucket: Any) -> None:
    from datetime import timedelta

    from shared.alerts import Alert, AlertKind
    from shared.clock import iso, utcnow
    from shared.deciding.alert_log import log_alert

    now = utcnow()
    older = Alert.of(AlertKind.PREEMPTION_STORM, "attempt 1 preempted 5 times", request_id="train-a", attempt=1)
    hostile = Alert.of(AlertKind.JOB_FAILED, HOSTILE, request_id=HOSTILE, attempt=10**400, details={"x": HOSTILE})
    log_alert(ledger, replace_time(older, iso(now - timedelta(hours=2))))
    log_alert(ledger, replace_time(hostile, iso(now - timedelta(minutes=1))))

    page = client_of(ledger, bucket=gcs_bucket).get("/alerts").get_data(as_text=True)

    table = page[page.index('id="alerts"') :]
    assert table.index('data-kind="job_failed"') < table.index('data-kind="preemption_storm"')  # newest first
    assert 'href="/requests/train-a">train-a</a>' in table and "attempt 1 preempted 5 times" in table
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in table
    assert "\x1b" not in page and "\\x1b[31m" in table and "0" * 100 not in page
    empty = client_of(LedgerStore(gcs_bucket), bucket=None).get("/alerts").get_data(as_text=True)
    assert "no state bucket" in empty


def replace_time(alert: Any, time: str) -> Any:
    from dataclasses import replace

    return replace(alert, time=time)


def test_a_live_page_streams_itself_again_when_it_changes(ledger: LedgerStore) -> None:
    """An EventSource asks for text/event-stream: the page comes at once, then again when it changed."""
    from dataclasses import replace

    record = preempted_then_running("train-s")
    ledger.restore(replace(record, attempts=record.attempts[:1]))
    app = create_app(deployment(ledger), poll_milliseconds=50, stream_seconds=5)
    client = app.test_client()
    assert "text/html" in client.get("/requests/train-s").content_type  # a browser's own request: the page

    response = client.get("/requests/train-s", headers={"Accept": "text/event-stream"}, buffered=False)
    assert response.content_type.startswith("text/event-stream")
    chunks = iter(response.response)
    assert next(chunks) == b"retry: 1000\n\n"
    first = next(chunks).decode()
    assert first.startswith("event: page\n") and 'data-attempt="1"' in first and 'data-attempt="2"' not in first
    ledger.update("train-s", lambda current: replace(current, attempts=record.attempts))
    changed = next(chunk.decode() for chunk in chunks if chunk.startswith(b"event: page"))
    assert 'data-attempt="2"' in changed and "<script>" not in changed.replace('<script src="/static/', "")
    response.close()
    assert 'data-poll="0"' in client.get("/dead-letters", headers={"Accept": "text/event-stream"}).get_data(
        as_text=True
    )  # never live: the page itself
