"""The emulator's named answers to what Google does not document about a multi-replica Spot job.

Documented, and not a mode (https://cloud.google.com/vertex-ai/docs/training/understanding-training-service,
"Restart workers during the training job"; `Scheduling` in
https://github.com/googleapis/googleapis/blob/master/google/cloud/aiplatform/v1/custom_job.proto):
Vertex "can restart your workers from any worker pool with the same hostname"; with
`scheduling.restartJobOnWorkerRestart` it "Restarts the entire CustomJob if a worker gets
restarted"; `scheduling.disableRetries` "overrides `Scheduling.restart_job_on_worker_restart` to
false". The emulator honours both.

Not documented (the Spot page, https://cloud.google.com/vertex-ai/docs/training/use-spot-vms, says
only that "the job fails with a STOCKOUT error and Compute Engine tries to restart the job up to
six times"), so each is a setting whose default is the least surprising reading:

- `preemption_restarts`: what a reclaimed replica's restart restarts when the job does not set
  `restartJobOnWorkerRestart`. `replica` (default): that replica alone, on a new VM with the same
  host name and CLUSTER_SPEC, the others running on (the documented per-worker restart, applied
  to a reclaimed VM: assumed). `job`: every replica, as with the flag (what SkyPilot, Ray Train,
  JobSet and torchrun do on a node loss).
- `survivor_stop`: how the replicas that were not reclaimed are stopped when the whole job
  restarts. `sigterm` (default): SIGTERM, SIGKILL after the grace period, as any container stop
  (assumed). `sigkill`: killed at once, no notice.
- `spot_restart_count`: what counts towards the six restarts. `per_event` (default): one per
  preemption, however many replicas it reclaimed (the page's "restart the job up to six times").
  `per_vm`: one per reclaimed VM. `per_replica`: each replica has its own six.

Documented, half of it (the training-service page's "Common errors", the entry for "The replica
REPLICA_NAME exited with a non-zero status of EXIT_CODE",
https://cloud.google.com/vertex-ai/docs/training/understanding-training-service): an exit of
SIGABRT ("6, or 134 in custom containers") or SIGSEGV (11, or 139) is "potentially transient" and
restarted, up to three times; any other non-zero exit fails the job. What restarts is not said:

- `transient_exit_restarts`: `job` (default): every replica, the others stopped as on a whole-job
  restart (`survivor_stop`); the reading the page's "restarts the job" gives, and what a
  torch.distributed job needs: a survivor that left because its peer was lost cannot rejoin a
  group that is gone. `replica`: that replica alone, at once (the page's per-worker restart "in
  the same VM"), unless the job sets `restartJobOnWorkerRestart`. Either way three per job.

The emulator's own invention, not Google's, and so a setting too:

- `rate_reclaims`: which replicas the random `--preemption-rate` (per minute of a replica's
  running time) reclaims. `each_replica` (default): every replica's VM draws its own delay, as
  Compute Engine reclaims Spot VMs one by one (a job of N VMs is reclaimed about N times as
  often). `primary`: the primary's only, as before jobs had several replicas.

Documented, half of it (`Scheduling.timeout` in custom_job.proto: "The maximum job running time.
The default is 7 days."): the emulator ends a job whose running time (from its first RUNNING)
reaches its `scheduling.timeout`, stopping every replica as a cancel does. How Vertex ends it is
not said:

- `timeout_end`: `failed` (default): JOB_STATE_FAILED with google.rpc code 4 DEADLINE_EXCEEDED
  (assumed: the state is what spotjobs' users report a 7-day run ending with, the code google.rpc's
  for a deadline). `expired`: JOB_STATE_EXPIRED ("The job has expired.", job_state.proto), no error.
  spotjobs tells a timeout by either, or by the run time alone (shared/deciding/continuations.py).

FLEX_START (Dynamic Workload Scheduler, https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws,
`devstack.vertex.flex`): its requirements and its `maxWaitDuration` are documented; what follows
from them is not, for Vertex:

- `flex_wait_expiry`: how a job whose wait ran out ends. `resource_exhausted` (default): FAILED
  with google.rpc RESOURCE_EXHAUSTED (8) and a message saying the resources did not come within
  maxWaitDuration (Compute Engine documents that a flex-start request whose resources do not come
  within its wait fails, https://cloud.google.com/compute/docs/instances/about-flex-start-vms; 8 is
  the code of its resource-pool-exhausted errors). `stockout`: FAILED with the STOCKOUT error a
  Spot job ends with (the signal profile's), Vertex's one documented capacity failure.
- `flex_preemption`: whether a running FLEX_START job is reclaimed. `never` (default): flex-start
  VMs run for their fixed duration (Compute Engine), so plans, `:preempt` and the Spot trace leave
  it alone, as a STANDARD job. `as_spot`: preempted exactly as a Spot job (restarts, STOCKOUT).
- `flex_requirements`: what create answers for a FLEX_START job breaking a documented
  requirement. `invalid_argument` (default): refused, naming it, as every create check.
  `job_failed`: created, then FAILED (INVALID_ARGUMENT, the same message) before it waits.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

PREEMPTION_RESTARTS = ("replica", "job")
SURVIVOR_STOPS = ("sigterm", "sigkill")
SPOT_RESTART_COUNTS = ("per_event", "per_vm", "per_replica")
TRANSIENT_EXIT_RESTARTS = ("job", "replica")
RATE_RECLAIMS = ("each_replica", "primary")
TIMEOUT_ENDS = ("failed", "expired")
FLEX_WAIT_EXPIRIES = ("resource_exhausted", "stockout")
FLEX_PREEMPTIONS = ("never", "as_spot")
FLEX_REQUIREMENTS = ("invalid_argument", "job_failed")


@dataclass(frozen=True)
class ReplicaModes:
    preemption_restarts: str = PREEMPTION_RESTARTS[0]
    survivor_stop: str = SURVIVOR_STOPS[0]
    spot_restart_count: str = SPOT_RESTART_COUNTS[0]
    transient_exit_restarts: str = TRANSIENT_EXIT_RESTARTS[0]
    rate_reclaims: str = RATE_RECLAIMS[0]
    timeout_end: str = TIMEOUT_ENDS[0]
    flex_wait_expiry: str = FLEX_WAIT_EXPIRIES[0]
    flex_preemption: str = FLEX_PREEMPTIONS[0]
    flex_requirements: str = FLEX_REQUIREMENTS[0]

    def __post_init__(self) -> None:
        for name, allowed in (
            ("preemption_restarts", PREEMPTION_RESTARTS),
            ("survivor_stop", SURVIVOR_STOPS),
            ("spot_restart_count", SPOT_RESTART_COUNTS),
            ("transient_exit_restarts", TRANSIENT_EXIT_RESTARTS),
            ("rate_reclaims", RATE_RECLAIMS),
            ("timeout_end", TIMEOUT_ENDS),
            ("flex_wait_expiry", FLEX_WAIT_EXPIRIES),
            ("flex_preemption", FLEX_PREEMPTIONS),
            ("flex_requirements", FLEX_REQUIREMENTS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {list(allowed)}: {getattr(self, name)!r}")

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def parse_modes(body: Any, current: ReplicaModes) -> ReplicaModes:
    """`{"preemption_restarts": ..., "survivor_stop": ..., "spot_restart_count": ...,
    "transient_exit_restarts": ..., "rate_reclaims": ..., "timeout_end": ..., "flex_*": ...}`, each
    optional (unnamed ones keep `current`). Raises ValueError naming the offending field."""
    if not isinstance(body, Mapping):
        raise ValueError("replica modes must be a JSON object")
    unknown = set(body) - set(current.to_json())
    if unknown:
        raise ValueError(f"unknown field(s) in replica modes: {sorted(unknown)}")
    return ReplicaModes(**{**current.to_json(), **body})


def add_mode_arguments(parser: argparse.ArgumentParser) -> None:
    """The emulator's flags for the modes, named as the settings with dashes."""
    for name, allowed, help_text in (
        (
            "preemption_restarts",
            PREEMPTION_RESTARTS,
            "without restartJobOnWorkerRestart, a reclaimed replica restarts alone (replica, default) "
            "or with every other replica (job)",
        ),
        (
            "survivor_stop",
            SURVIVOR_STOPS,
            "on a whole-job restart the replicas not reclaimed get SIGTERM, then SIGKILL after the grace "
            "period (sigterm, default), or SIGKILL at once (sigkill)",
        ),
        (
            "spot_restart_count",
            SPOT_RESTART_COUNTS,
            "what counts towards the six Spot restarts: each preemption (per_event, default), each "
            "reclaimed VM (per_vm), or each replica's own (per_replica)",
        ),
        (
            "transient_exit_restarts",
            TRANSIENT_EXIT_RESTARTS,
            "a replica exiting SIGABRT or SIGSEGV (documented as potentially transient, restarted up to three "
            "times) restarts every replica (job, default) or itself alone (replica)",
        ),
        (
            "rate_reclaims",
            RATE_RECLAIMS,
            "the random --preemption-rate reclaims each replica's VM on its own draw (each_replica, default) "
            "or the primary's only (primary)",
        ),
        (
            "timeout_end",
            TIMEOUT_ENDS,
            "a job that reaches its scheduling.timeout ends FAILED with DEADLINE_EXCEEDED (failed, default) "
            "or EXPIRED (expired)",
        ),
        (
            "flex_wait_expiry",
            FLEX_WAIT_EXPIRIES,
            "a FLEX_START job whose maxWaitDuration ran out ends FAILED with RESOURCE_EXHAUSTED "
            "(resource_exhausted, default) or with the Spot STOCKOUT error (stockout)",
        ),
        (
            "flex_preemption",
            FLEX_PREEMPTIONS,
            "a running FLEX_START job is never preempted (never, default) or preempted as a Spot job (as_spot)",
        ),
        (
            "flex_requirements",
            FLEX_REQUIREMENTS,
            "a FLEX_START job breaking a documented requirement is refused at create (invalid_argument, "
            "default) or created and then FAILED (job_failed)",
        ),
    ):
        parser.add_argument(
            "--" + name.replace("_", "-"),
            choices=allowed,
            default=allowed[0],
            help=help_text + "; undocumented by Google, see devstack.vertex.modes",
        )


def modes_from_args(args: argparse.Namespace) -> ReplicaModes:
    return ReplicaModes(
        preemption_restarts=args.preemption_restarts,
        survivor_stop=args.survivor_stop,
        spot_restart_count=args.spot_restart_count,
        transient_exit_restarts=args.transient_exit_restarts,
        rate_reclaims=args.rate_reclaims,
        timeout_end=args.timeout_end,
        flex_wait_expiry=args.flex_wait_expiry,
        flex_preemption=args.flex_preemption,
        flex_requirements=args.flex_requirements,
    )
