"""Planting state in a simulated world (sim/world.py) for the simulator's invariant tests: jobs
Vertex runs, ledger records, a trainer that saves."""

from __future__ import annotations

from typing import Any

from shared.fleet.observations import FleetFact, MachineClass
from shared.fleet.store import object_name
from shared.ledger.records import Attempt, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import JobIndexEntry, LedgerStore
from sim.vertex import SimJob
from sim.workload import IMAGE
from sim.world import World


def job(
    world: World, request_id: str, attempt: int, state: str = "JOB_STATE_RUNNING", strategy: str = "SPOT"
) -> SimJob:
    now = world.clock.now()
    name = f"projects/{world.settings.project}/locations/us-central1/customJobs/{len(world.vertex.jobs) + 1}"
    request = {
        "labels": {"spotjobs-request-id": request_id, "spotjobs-attempt": str(attempt), "spotjobs-deployment": "sim"},
        "jobSpec": {
            "scheduling": {"strategy": strategy},
            "serviceAccount": world.settings.training_service_account,
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "n1-standard-4"},
                    "containerSpec": {"imageUri": IMAGE},
                }
            ],
        },
    }
    sim_job = SimJob(name, "us-central1", request, dict(request["labels"]), state, now, now)
    world.vertex.jobs[name] = sim_job
    return sim_job


def record(world: World, request_id: str, status: RequestStatus, *attempts: Attempt, **fields: object) -> None:
    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
    ledger.restore(
        RequestRecord(request_id, {"custom_job": {}}, "gs://c/", status=status, attempts=list(attempts), **fields)
    )


def attempt(n: int, job_name: str | None = None) -> Attempt:
    return Attempt(n, "us-central1", "SPOT", claimed_at="2026-03-02T08:00:00Z", job=job_name)


def trained(world: World, request_id: str, *, folder_of: str | None = None) -> SimJob:
    """A running job of `request_id` whose trainer writes the kit's plain layout into the folder of
    `folder_of` (its own by default)."""
    running = job(world, request_id, 1)
    prefix = f"gs://{world.settings.checkpoint_bucket}/requests/{folder_of or request_id}/"
    running.request["jobSpec"]["baseOutputDirectory"] = {"outputUriPrefix": prefix}
    world.trainer.layouts[request_id] = "plain"
    return running


def preempted(world: World, sim_job: SimJob, times: int, *, indexed: bool = True) -> SimJob:
    """Vertex preempts `sim_job` `times` times, each announced by its service line, after (or,
    `indexed=False`, without) the ledger's index of the job."""
    if indexed:
        ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
        ledger.index_job(JobIndexEntry(sim_job.request_id, sim_job.attempt, sim_job.location, sim_job.name))
    for _ in range(times):
        sim_job.restarts += 1
        sim_job.vms_reclaimed += 1
        world.emit_log_line(
            sim_job, f"The Spot VM of replica workerpool0-0 was preempted (restart {sim_job.restarts}).", "WARNING"
        )
    return sim_job


def restore(world: World, request_id: str, status: RequestStatus, *attempts: Attempt, **request: Any) -> None:
    LedgerStore(world.storage.client().bucket(world.settings.state_bucket)).restore(
        RequestRecord(
            request_id,
            {"request_id": request_id, "custom_job": {}, **request},
            "gs://c/",
            status=status,
            attempts=list(attempts),
            created_at=world.clock.now().isoformat().replace("+00:00", "Z"),
        )
    )


def attempt_of(sim_job: SimJob, **fields: Any) -> Attempt:
    return Attempt(
        sim_job.attempt, "us-central1", "SPOT", claimed_at="2026-03-02T08:00:00Z", job=sim_job.name, **fields
    )


def write_fact(world: World, fact: FleetFact) -> str:
    name = object_name(MachineClass("n1-standard-4"), fact)
    world.storage.client().bucket(world.settings.state_bucket).blob(name).upload_from_string(b"")
    return name
