"""The simulator's Vertex does what Google documents, for every strategy (issue 43): preemption
and STOCKOUT are Spot's alone (https://cloud.google.com/vertex-ai/docs/training/use-spot-vms)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from sim.vertex import SimJob
from sim.world import World


def _created(world: World, strategy: str, fate: str, preemptions: int) -> SimJob:
    """A job of `strategy` created through the JobService, its drawn fate `fate` and `preemptions`."""
    from google.cloud.aiplatform_v1 import CustomJob

    def draw(job: SimJob) -> None:
        job.fate, job.preemptions = fate, preemptions
        job.next_change = world.clock.now()

    world.vertex.fate = draw
    custom_job = CustomJob(
        display_name="r1",
        labels={"spotjobs-request-id": "r1", "spotjobs-attempt": "1"},
        job_spec={
            "worker_pool_specs": [{"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1}],
            "scheduling": {"strategy": strategy},
        },
    )
    parent = f"projects/{world.settings.project}/locations/us-central1"
    return world.vertex.jobs[world.vertex.create_custom_job(parent=parent, custom_job=custom_job).name]


def _run_to_its_end(world: World, job: SimJob) -> list[str]:
    """Moves `job` along until it ends; the service lines it wrote."""
    lines: list[str] = []
    world.vertex.emit = lambda _job, text, _severity: lines.append(text)
    world.vertex.runs = lambda _job, _what: None
    for _ in range(50):
        if not job.live:
            break
        assert job.next_change is not None, f"{job.name} waits for ever in {job.state}"
        world.clock.advance(max(0.0, (job.next_change - world.clock.now()).total_seconds()))
        world.vertex.advance(job)
    return lines


@pytest.mark.parametrize(("fate", "preemptions"), [("succeed", 3), ("stockout", 0)])
def test_a_standard_job_is_never_preempted_nor_stocked_out(fate: str, preemptions: int) -> None:
    """Whatever fate the workload drew for the attempt, an on-demand (STANDARD) job runs to its
    end without a preemption: no reclaimed VM, no restart, no STOCKOUT."""
    world = World(0)
    job = _created(world, "STANDARD", fate, preemptions)

    lines = _run_to_its_end(world, job)

    assert (job.state, job.error, job.restarts, job.vms_reclaimed) == ("JOB_STATE_SUCCEEDED", None, 0, 0)
    assert not [line for line in lines if "preempted" in line]


def test_a_spot_job_keeps_its_drawn_preemptions() -> None:
    world = World(0)
    job = _created(world, "SPOT", "succeed", 2)

    lines = _run_to_its_end(world, job)

    assert job.state == "JOB_STATE_SUCCEEDED" and job.restarts == 2
    assert len([line for line in lines if "preempted" in line]) == 2


@pytest.mark.parametrize("call", ["get", "cancel", "list", "create"])
def test_a_regional_client_refuses_another_regions_job_and_the_seed_fails(call: str) -> None:
    """`Ports.job_service(location)` is one regional endpoint (shared/adapters/clients.py): a job
    or parent of another location through it is refused with the 400 a public capture shows
    (tests/support/vertex.py `wrong_endpoint`), and `calls_through_their_region` names the call."""
    from google.api_core import exceptions as api
    from google.cloud.aiplatform_v1 import CustomJob

    world = World(0)
    job = _created(world, "SPOT", "succeed", 0)  # in us-central1
    parent = f"projects/{world.settings.project}/locations/us-central1"
    calls = {
        "get": lambda client: client.get_custom_job(name=job.name),
        "cancel": lambda client: client.cancel_custom_job(name=job.name),
        "list": lambda client: client.list_custom_jobs(request={"parent": parent, "filter": ""}),
        "create": lambda client: client.create_custom_job(parent=parent, custom_job=CustomJob(), retry=None),
    }

    with pytest.raises(api.InvalidArgument, match="The valid location ID is `europe-west4`"):
        calls[call](world.vertex("europe-west4"))
    from sim.regions import calls_through_their_region

    assert [v.invariant for v in calls_through_their_region(world)] == ["calls_through_their_region"]

    calls[call](world.vertex("us-central1"))  # its own region's client serves it
    assert len(calls_through_their_region(world)) == 1


P, Q, R = "JOB_STATE_PENDING", "JOB_STATE_QUEUED", "JOB_STATE_RUNNING"


@pytest.mark.parametrize(
    ("mode", "states"),
    [("running", [P, R]), ("pending", [P, R, P, R]), ("queued", [P, R, Q, P, R])],
)
def test_the_state_of_a_restart_is_a_named_switchable_assumption(mode: str, states: list[str]) -> None:
    """`restart_state` (sim/vertex.py): Google documents no state for a preempted Spot job waiting
    for a machine again. `running` keeps it RUNNING (the emulator's documented profile), `pending`
    shows it PENDING (the emulator's rich profile), `queued` QUEUED then PENDING (job_state.proto's
    QUEUED: "created or resumed and processing has not yet begun"); RUNNING again once it runs."""
    from sim.vertex import RESTART_STATES, draw_restart_state

    world = World(0, restart_state=mode)
    job = _created(world, "SPOT", "succeed", 1)
    shown: list[str] = []
    world.vertex.runs = lambda _job, _what: None
    while job.live:
        assert job.next_change is not None
        world.clock.advance(max(0.0, (job.next_change - world.clock.now()).total_seconds()))
        world.vertex.advance(job)
        if not shown or shown[-1] != job.state:
            shown.append(job.state)

    assert shown == [*states, "JOB_STATE_SUCCEEDED"] and job.restarts == 1
    assert {draw_restart_state(seed) for seed in range(200)} == set(RESTART_STATES)
    assert World(3).vertex.restart_state == draw_restart_state(3)
    with pytest.raises(ValueError, match="restart_state"):
        draw_restart_state(0, "restarting")


def test_a_restarts_wait_past_the_bound_without_its_alert_is_caught() -> None:
    """Under `restart_state` pending, a preempted job waits PENDING for a machine again (here
    through a Spot outage): a wait of its own, from the preemption, owed its `job_stuck` past the
    bound as the first wait is (shared/deciding/waits.py `track_wait` times it so)."""
    import json

    from shared.alerts import Alert, AlertKind
    from sim import promises

    world = World(0, restart_state="pending")
    job = _created(world, "SPOT", "succeed", 1)
    world.vertex.runs = lambda _job, _what: None
    while job.state != "JOB_STATE_PENDING" or job.start_time is None:
        assert job.next_change is not None
        world.clock.advance(max(0.0, (job.next_change - world.clock.now()).total_seconds()))
        world.vertex.advance(job)
    preempted_at = world.clock.now()
    world.vertex.spot_capacity_back = lambda _location: preempted_at + timedelta(hours=8)
    world.clock.advance(world.settings.stuck_after_seconds + promises.LAG.total_seconds() - 60)
    world.vertex.advance(job)
    assert job.state == "JOB_STATE_PENDING"
    assert [v.detail for v in promises.owed_alerts(world, [AlertKind.JOB_STUCK])] == []

    world.clock.advance(120)

    [owed] = [v.detail for v in promises.owed_alerts(world, [AlertKind.JOB_STUCK])]
    assert "after a restart" in owed
    alert = Alert.of(AlertKind.JOB_STUCK, "said", request_id="r1").to_json()
    world.pubsub.accept(world.settings.ops_alerts_topic, json.dumps(alert).encode(), {})
    assert promises.owed_alerts(world, [AlertKind.JOB_STUCK]) == []


@pytest.mark.parametrize("mode", ["running", "pending", "queued"])
def test_a_restart_waits_for_spot_capacity_whatever_state_it_shows(mode: str) -> None:
    """A preempted Spot job restarts on a Spot VM: through an outage in its location it trains
    again only once capacity is back, as the emulator's runner waits for it before every start
    (devstack/vertex/runner.py `_wait_for_spot_capacity`), whichever state the wait shows."""
    world = World(0, restart_state=mode)
    job = _created(world, "SPOT", "succeed", 1)
    trained: list[tuple[str, object]] = []
    world.vertex.runs = lambda _job, what: trained.append((what, world.clock.now()))
    outage: list[datetime] = []  # its end: Spot capacity goes at the preemption, for 3 h

    def capacity_back(_location: str) -> datetime | None:
        if job.restarts and not outage:
            outage.append(world.clock.now() + timedelta(hours=3))
        return outage[0] if outage and world.clock.now() < outage[0] else None

    world.vertex.spot_capacity_back = capacity_back
    while job.live:
        assert job.next_change is not None
        world.clock.advance(max(0.0, (job.next_change - world.clock.now()).total_seconds()))
        world.vertex.advance(job)

    assert job.state == "JOB_STATE_SUCCEEDED" and outage
    [trained_again] = [at for what, at in trained if what == "train"]  # the run after the restart
    assert trained_again >= outage[0]
