"""Stray jobs (shared/deciding/strays.py): which job labelled with a request is one the ledger will
never manage, and its `stray_job` alert decided once per job before the cancel (on the simulator's
in-memory Cloud Storage), with or without a record. tests/functional/test_decisions_reconcile.py
drives the sweep itself."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from google.cloud.aiplatform_v1 import CustomJob

from shared.alerts import AlertKind
from shared.deciding.strays import decide_stray, is_stray, recordless_stray_alert
from shared.jobs import ENV_KIT_KEY, LABEL_ATTEMPT
from shared.ledger.records import Attempt
from shared.ledger.states import AttemptOutcome
from shared.log import Logger
from shared.wiring import Ports
from tests.support.decisions import FakePublisher
from tests.support.strays import NOW, OTHER, RECORDED, RUNNING, SUCCEEDED, memory_ports, running_record, vertex_job

THIRD = "projects/p/locations/us-central1/customJobs/333"


def test_a_live_job_its_attempt_does_not_record_is_a_stray() -> None:
    assert is_stray(running_record(), vertex_job(OTHER))
    assert not is_stray(running_record(), vertex_job(RECORDED))


def test_an_ended_job_is_never_a_stray() -> None:
    assert not is_stray(running_record(), vertex_job(OTHER, state=SUCCEEDED))


@pytest.mark.parametrize("label", [None, "", "two", "7"])
def test_a_job_labelled_for_no_attempt_the_record_claimed_is_a_stray(label: str | None) -> None:
    assert is_stray(running_record(), vertex_job(OTHER, attempt=label))


def test_a_job_of_a_claim_still_being_created_is_not_a_stray_until_the_claim_ends() -> None:
    creating = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-01T11:00:00Z")
    assert not is_stray(running_record(creating), vertex_job(OTHER))
    creating.outcome = AttemptOutcome.FAILED
    assert is_stray(running_record(creating), vertex_job(OTHER))


def test_a_live_job_older_than_its_record_is_a_stray_even_while_the_claim_is_being_created() -> None:
    """A job created before the record was written is an earlier record's of the id (a person
    deleted it, and the id was claimed afresh): no claim of this record will ever record it
    (`find_attempt_job` and on_job_event's adoption skip it), so it is cancelled now rather than
    left training beside the claim's own job."""
    creating = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-01T11:00:00Z")
    fresh = running_record(creating)
    fresh.created_at = "2026-12-01T11:00:00Z"
    older = vertex_job(OTHER)
    older.create_time = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    own = vertex_job(THIRD)
    own.create_time = datetime(2026, 12, 1, 11, 0, 5, tzinfo=UTC)
    assert is_stray(fresh, older)
    assert not is_stray(fresh, own)


def test_a_recordless_strays_alert_names_the_job_and_its_attempt() -> None:
    alert = recordless_stray_alert("req-9", vertex_job(OTHER, attempt="3"), NOW)
    assert (alert.kind, alert.request_id, alert.attempt, alert.job) == (AlertKind.STRAY_JOB.value, "req-9", 3, OTHER)
    assert alert.details == {"stray_job": OTHER, "record": "missing", "cancelled_at": "2026-12-01T12:00:00.000Z"}
    assert recordless_stray_alert("req-9", vertex_job(OTHER, attempt="x"), NOW).attempt is None


@pytest.fixture
def ports() -> Ports:
    return memory_ports()


def test_a_strays_alert_is_decided_once_per_job(ports: Ports) -> None:
    stored = running_record()
    ports.ledger.restore(stored)
    first = decide_stray(ports, stored, vertex_job(OTHER), NOW, Logger())
    assert first.wrote and first.value is not None
    [alert] = first.value.pending_alerts
    assert (alert["kind"], alert["attempt"], alert["job"]) == (AlertKind.STRAY_JOB.value, 1, RECORDED)
    assert alert["details"]["stray_job"] == OTHER
    assert alert["message"] == (
        f"cancelling job {OTHER}: it carries the labels of attempt 1 of req-1, which records {RECORDED}"
    )
    assert not decide_stray(ports, stored, vertex_job(OTHER), NOW, Logger()).wrote  # the next sweep: once
    another = decide_stray(ports, stored, vertex_job(THIRD), NOW, Logger())  # another stray: its own alert
    assert another.wrote and another.value is not None and len(another.value.pending_alerts) == 2


@pytest.mark.parametrize("label", [None, ""])
def test_a_stray_labelled_for_no_attempt_is_alerted_on_the_latest(ports: Ports, label: str | None) -> None:
    creating = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-01T11:00:00Z")
    stored = running_record(creating)
    ports.ledger.restore(stored)
    swapped = decide_stray(ports, stored, vertex_job(OTHER, attempt=label), NOW, Logger())
    assert swapped.value is not None
    [alert] = swapped.value.pending_alerts
    assert alert["attempt"] == 1 and alert["message"].endswith("which records no job")
    assert swapped.value.markers == ["stray_job:0:222"]


def test_a_strays_cancel_publishes_its_own_alert_not_one_another_delivery_is_publishing() -> None:
    """Seed 872: reconcile took over a first stray's pending alert (its decider's publish had
    failed) and published it, its answer lost; the same pass then cancelled a second stray, and
    that cancel's flush published every pending alert as its own: the first stray's alert went
    out twice. Another delivery's pending alert is left to it (or a taker once it is presumed dead)."""
    from shared.alerts import Alert
    from shared.clock import iso
    from shared.found_jobs import cancel_stray
    from shared.log import Logger

    publisher, cancelled = FakePublisher(), []

    class JobService:
        def cancel_custom_job(self, name: str, timeout: float) -> None:
            cancelled.append(name)

    ports = memory_ports(lambda: publisher, lambda _: JobService())
    being_published = Alert.of(
        AlertKind.STRAY_JOB, "first stray", request_id="req-1", attempt=1, details={"stray_job": OTHER}, time=iso(NOW)
    )
    stored = running_record()
    stored.pending_alerts = [being_published.to_json()]
    ports.ledger.restore(stored)

    cancel_stray(ports, stored, vertex_job(THIRD), Logger())

    assert cancelled == [THIRD]
    assert [m.data["details"]["stray_job"] for m in publisher.on("ops-alerts")] == [THIRD]
    left = ports.ledger.get("req-1")
    assert left is not None and left.pending_alerts == [being_published.to_json()]


def keyed_job(kit_key: str | None) -> CustomJob:
    env = [] if kit_key is None else [{"name": ENV_KIT_KEY, "value": kit_key}]
    return CustomJob(
        name=OTHER,
        state=RUNNING,
        labels={LABEL_ATTEMPT: "1"},
        job_spec={"worker_pool_specs": [{"container_spec": {"env": env}}]},
    )


def test_a_job_with_another_claims_kit_key_is_a_stray_while_the_claim_is_being_created() -> None:
    """A create out when a person deleted the id's earlier record, accepted after this one was
    written: its create time cannot tell, the kit key it carries can."""
    claim = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-01T11:00:00Z", kit_key="ab" * 32)
    assert is_stray(running_record(claim), keyed_job("cd" * 32))
    assert not is_stray(running_record(claim), keyed_job("ab" * 32))
    assert not is_stray(running_record(claim), keyed_job(None))  # a job from before the keys: unknown


def test_a_job_with_the_claims_kit_key_is_no_stray_whatever_the_clocks_say() -> None:
    """Vertex's clock two seconds behind ours: the job's create time is before its record's, its
    key is the claim's."""
    claim = Attempt(1, "us-central1", "SPOT", claimed_at="2026-12-01T11:00:00Z", kit_key="ab" * 32)
    claimed = running_record(claim)
    claimed.created_at = "2026-12-01T11:00:02Z"
    own = keyed_job("ab" * 32)
    own.create_time = datetime(2026, 12, 1, 11, 0, tzinfo=UTC)
    assert not is_stray(claimed, own)
    keyless = keyed_job(None)
    keyless.create_time = own.create_time
    assert is_stray(claimed, keyless)  # without a key, the clocks decide


def test_a_strays_run_that_a_read_vouched_for_is_on_its_requests_bill_named_as_a_floor() -> None:
    """A second job of attempt 1 (a create whose answer was lost, then another) ran an hour on an
    A100 on Spot before the sweep found and cancelled it: Vertex bills that hour, so the request's
    spend (`spotjobs status`, `spotjobs report`, its budget) holds it, to the read that saw it run,
    and says the bill is a floor (the stray's end is never read) naming it."""
    from datetime import timedelta

    from shared.fleet.spend import request_spend
    from shared.found_jobs import cancel_stray
    from shared.log import Logger
    from shared.requests.pricing import hourly
    from spotjobs.reporting.bill import bill, render_bill

    class JobService:
        def cancel_custom_job(self, name: str, timeout: float) -> None:
            pass

    ports = memory_ports(job_service=lambda _: JobService())
    stored = running_record()
    ports.ledger.restore(stored)
    stray = CustomJob(
        name=OTHER,
        state=RUNNING,
        labels={LABEL_ATTEMPT: "1"},
        start_time=NOW - timedelta(hours=1),
        job_spec={
            "worker_pool_specs": [{"machine_spec": {"machine_type": "a2-highgpu-1g"}, "replica_count": 1}],
            "scheduling": {"strategy": "SPOT"},
        },
    )

    cancel_stray(ports, stored, stray, Logger())

    after = ports.ledger.get("req-1")
    assert after is not None
    spend = request_spend(after, NOW + timedelta(hours=5))  # billed to the read, however late the bill
    spot = (hourly("a2-highgpu-1g", "us-central1") or (0.0, 0.0))[0]
    assert spend.usd == spot and spend.run_seconds == 3600
    assert spend.floor_of == (OTHER,)
    summary = bill([after.to_json()], NOW)
    [row] = summary["requests"]
    assert row["spent_usd"] == round(spot, 4) and row["floor_of"] == [OTHER]
    assert f"at least ${spot:,.2f}" in render_bill(summary) and f"stray job {OTHER}" in render_bill(summary)
    assert spend.shown().startswith(f"at least ${spot:.2f}") and OTHER in spend.shown()


def test_a_stray_read_without_its_machines_is_billed_as_its_attempts_job_and_one_of_no_attempt_as_unknown() -> None:
    """A listing may leave a job's spec out: the stray repeats its attempt's create, so it is
    billed on the attempt's machines and capacity; labelled for no attempt, its cost is unknown."""
    from datetime import timedelta

    from shared.deciding.strays import stray_of
    from shared.fleet.spend import request_spend
    from shared.requests.pricing import hourly

    a100 = {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "a2-highgpu-1g"}, "replicaCount": 2}]}}
    stored = running_record()
    stored.request["custom_job"] = a100
    bare = vertex_job(OTHER)
    bare.start_time = NOW - timedelta(minutes=30)
    stored.strays = [stray_of(bare, 1, NOW)]
    assert (stored.strays[0].pools, stored.strays[0].strategy) == ([], "")

    spot = (hourly("a2-highgpu-1g", "us-central1") or (0.0, 0.0))[0]
    assert request_spend(stored, NOW).usd == pytest.approx(2 * spot / 2)  # two replicas, half an hour

    stored.strays = [stray_of(vertex_job(THIRD, attempt="x"), None, NOW)]
    stored.strays[0].started_at = "2026-12-01T11:00:00.000Z"
    assert request_spend(stored, NOW).unpriced == ("? in us-central1",)


def test_a_stray_that_takes_an_ended_requests_spend_past_its_budget_is_alerted_as_reached() -> None:
    """Simulator seed 20226: an operator cancelled r2-fallback ($0.02 budget) and it ended; a
    person's console re-run of its job ran on until the stray sweep noted and cancelled it. The
    stray's run is the budget's spend (docs/requests.md, "A stray"), and `budget_reached` is owed
    also when the request had ended ("A budget"): no later pass observes an ended request, so the
    note that makes the spend is the observation that must alert."""
    from datetime import timedelta

    from shared.ledger.records import CancelIntent
    from shared.ledger.states import RequestStatus

    ports = memory_ports()
    ended = running_record()
    ended.request["max_cost_usd"] = 0.02
    ended.status = RequestStatus.CANCELLED
    ended.cancel = CancelIntent(by="someone", at="2026-12-01T11:00:10Z")
    ports.ledger.restore(ended)
    stray = CustomJob(
        name=OTHER,
        state=RUNNING,
        labels={LABEL_ATTEMPT: "1"},
        start_time=NOW - timedelta(hours=1),
        job_spec={
            "worker_pool_specs": [{"machine_spec": {"machine_type": "a2-highgpu-1g"}, "replica_count": 1}],
            "scheduling": {"strategy": "SPOT"},
        },
    )

    swapped = decide_stray(ports, ended, stray, NOW, Logger())

    assert swapped.value is not None
    reached = [a for a in swapped.value.pending_alerts if a["kind"] == AlertKind.BUDGET_REACHED.value]
    assert len(reached) == 1 and reached[0]["details"]["stopped"] is False


def test_a_stray_that_takes_a_running_request_past_its_budget_logs_the_stop_as_any_decision_does() -> None:
    """docs/operations.md: every decision is also one structured log line. A stray's note that
    brings its running request's spend to its budget stops the request (`budget_reached`, its
    job's cancel pending); the stop's WARNING line was dropped with the note's effects, so the
    logs said nothing of why the request ended."""
    from datetime import timedelta

    from shared.found_jobs import cancel_stray
    from tests.support.decisions import CapturedLog

    class JobService:
        def cancel_custom_job(self, name: str, timeout: float) -> None:
            pass

    ports = memory_ports(job_service=lambda _: JobService())
    stored = running_record()
    stored.request["max_cost_usd"] = 0.02
    ports.ledger.restore(stored)
    stray = CustomJob(
        name=OTHER,
        state=RUNNING,
        labels={LABEL_ATTEMPT: "1"},
        start_time=NOW - timedelta(hours=1),
        job_spec={
            "worker_pool_specs": [{"machine_spec": {"machine_type": "a2-highgpu-1g"}, "replica_count": 1}],
            "scheduling": {"strategy": "SPOT"},
        },
    )
    log = CapturedLog()

    cancel_stray(ports, stored, stray, log.logger)

    after = ports.ledger.get("req-1")
    assert after is not None and after.cancel is not None  # stopped by its budget
    [line] = log.events(AlertKind.BUDGET_REACHED.value)
    assert (line["severity"], line["request_id"], line["stopped"]) == ("WARNING", "req-1", True)
