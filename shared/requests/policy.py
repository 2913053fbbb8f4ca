"""Request policy: what this deployment lets a job request ask for (configuration, not code).

Validation flows one way: `shared.requests.envelope` reads the message (envelope, schema), then this module
checks what was read: the envelope's options here, the CustomJob in `shared.requests.job_policy` (an
allowlist of field paths, then value checks). Every check reports a `Violation(path, message)`
naming the field and what is allowed, and all of them run, so a rejected publisher learns
everything wrong with a request at once. The limits come from `Settings` (see the "Request
policy" section there); `describe_policy` shows them as a publisher meets them
(`spotjobs validate --show-policy`).

Why these rules:
- an allowlist, failing closed: the CustomJob schema has far more than a training job needs
  (VPC peering, interactive shells, NFS mounts, other teams' reservations ...); each field outside
  the allowlist is refused by path until an operator opts in to it, and a field a library upgrade
  adds is refused until it is classified;
- machine families: Spot training capacity exists for A2/A3 (the Spot docs); the list is a setting;
- no TPUs: TPU pods have their own Spot semantics this system does not manage;
- images: Vertex pulls with its own agent, so IAM cannot stop a publisher naming any image; the
  allowlist is enforced here on parsed references at path boundaries (empty = any image, with a
  loud warning);
- service accounts: a job acts as its service account; only listed ones and the deployment's
  training account (the default) may be named; with neither, none may;
- baseOutputDirectory: must be unset or exactly the request's own directory
  `gs://<checkpoint bucket>/<prefix>/<request_id>/`, and AIP_* variables cannot be overridden, so
  a request cannot resume from, or overwrite, another request's checkpoints;
- scheduling.strategy: spotjobs submits SPOT; on-demand capacity is asked for through `fallback`
  or `capacity`, which only the strategies an operator allows may use
  (`allowed_fallback_strategies`, the one allowlist of strategies other than SPOT);
- capacity alternatives: each machine is judged as the job on it would be (families, ceilings),
  each strategy by that allowlist, FLEX_START by its documented requirements on that machine; a
  deadline needs STANDARD on every alternative (the deadline rule's switch runs on the machine the
  attempt runs on), and Spot must be listed while Spot attempts come first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from shared.clock import iso, utcnow
from shared.errors import Violation
from shared.jobs import FLEX_START
from shared.log import Logger
from shared.requests.attempts import ON_DEMAND, SPOT
from shared.requests.budget import check_budget
from shared.requests.capacity import job_on_machine
from shared.requests.envelope import SYSTEM_FIELDS, InvalidJobRequest, JobRequest, read_request
from shared.requests.job_fields import ALLOWED, FIELDS, OPT_INS, OUTPUT_ONLY
from shared.requests.job_policy import (
    RESERVED_ENV_NAMES,
    RESERVED_ENV_PREFIXES,
    allowed_service_accounts,
    check_custom_job,
)
from shared.settings import Settings

_warned_unrestricted_images = False


def validate_request(
    data: bytes,
    *,
    attributes: Mapping[str, str],
    settings: Settings,
    published_at: datetime | None = None,
) -> JobRequest:
    """Read, then check a message; return the request or raise InvalidJobRequest with every
    violation."""
    request, violations = read_request(
        data,
        attributes=attributes,
        max_bytes=settings.max_request_bytes,
        published_at=published_at,
    )
    violations.extend(check_policy(request, settings, now=published_at))
    if violations:
        raise InvalidJobRequest(violations, request_id=request.request_id, attempt=request.attempt)
    return request


def check_policy(request: JobRequest, settings: Settings, now: datetime | None = None) -> list[Violation]:
    """Every policy violation of a (possibly partially read) request; `now` is when it was
    published (a redelivery a day late is judged as when it was sent), else the present."""
    out: list[Violation] = []
    if request.custom_job is not None:
        out.extend(check_custom_job(request.custom_job, request.job_path, request.request_id, settings))
    if request.max_attempts is not None and request.max_attempts > settings.max_attempts_ceiling:
        out.append(
            Violation(
                "max_attempts",
                f"is {request.max_attempts}; at most {settings.max_attempts_ceiling} allowed",
            )
        )
    if request.keep_last is not None and request.keep_last > settings.keep_last_ceiling:
        out.append(
            Violation(
                "checkpoints.keep_last",
                f"is {request.keep_last}; at most {settings.keep_last_ceiling} allowed",
            )
        )
    out.extend(_check_max_runtime(request, settings))
    out.extend(_check_fallback(request, settings))
    out.extend(_check_capacity(request, settings))
    out.extend(_check_locations(request, settings))
    out.extend(_check_deadline(request, settings, now or utcnow()))
    out.extend(check_budget(request, settings))
    if request.attempt is None:
        # A re-queue carries the topic its request was accepted with (the ledger confirms the
        # body); a policy changed since stops its notifications at publish, not its training.
        out.extend(check_notify_topic(request.notify_topic, settings))
    return out


def _check_max_runtime(request: JobRequest, settings: Settings) -> list[Violation]:
    """A request may run (over its continuations after the job timeout) at most the deployment's
    ceiling."""
    if request.max_runtime is None or request.max_runtime <= settings.max_runtime_seconds:
        return []
    return [
        Violation(
            "max_runtime",
            f"is {request.max_runtime:.0f} s; at most {settings.max_runtime_seconds} s "
            f"({settings.max_runtime_seconds / 86400:g} days) allowed",
        )
    ]


def check_notify_topic(topic: str | None, settings: Settings) -> list[Violation]:
    """A request's notification topic must fall under one of the deployment's allowed prefixes;
    with none configured, no topic may be named (fails closed: refused, never silently dropped)."""
    allowed = settings.allowed_notify_topics
    if topic is None or any(topic.startswith(prefix) for prefix in allowed):
        return []
    shown = (
        ", ".join(allowed)
        if allowed
        else "none: this deployment sends no notifications (SPOTJOBS_ALLOWED_NOTIFY_TOPICS)"
    )
    return [Violation("notify.topic", f"is {topic}; allowed topics: {shown}")]


def check_attempt_job(
    custom_job: Mapping[str, Any],
    *,
    request_id: str,
    strategy: str,
    location: str,
    spot_attempts_before: int,
    settings: Settings,
) -> list[Violation]:
    """Every policy violation of the CustomJob about to be created for an attempt, at the point of
    create, whichever path asked for it (attempt 1, a re-queue after a preemption or a failover, a
    pacing hand-over, a deadline switch): what it is built from, judged by today's policy, so no
    attribute, deadline or record written under an older policy creates what a publisher may not
    ask for. `build_job_json` adds only the strategy and location checked here, the training
    account, the request's own output directory (the system's, fixed at its first claim) and the
    system's labels and variables."""
    out = check_custom_job(custom_job, "custom_job", request_id, settings)
    refused = check_strategy(
        strategy,
        spot_attempts_before,
        allowed_fallbacks=settings.allowed_fallback_strategies,
        min_spot_attempts=settings.min_spot_attempts,
    )
    out.extend([refused] if refused else [])
    broken = _flex_start_requirement_broken(custom_job) if strategy == FLEX_START else None
    if broken is not None:
        out.append(Violation("strategy", f"is FLEX_START; Dynamic Workload Scheduler needs {broken}"))
    if settings.allowed_locations and location not in settings.allowed_locations:
        out.append(Violation("location", f"is {location}; allowed regions: {', '.join(settings.allowed_locations)}"))
    return out


def check_strategy(
    strategy: str, spot_attempts_before: int, *, allowed_fallbacks: Sequence[str], min_spot_attempts: int
) -> Violation | None:
    """Whether an attempt may run on `strategy` after `spot_attempts_before` Spot attempts: Spot
    always; anything else only where the deployment allows it as a fallback and once its minimum
    of Spot attempts came first. Asked by every decision that plans an attempt on other capacity
    (a deadline's switch included) and again at its create."""
    if strategy == SPOT:
        return None
    if strategy not in allowed_fallbacks:
        shown = ", ".join(allowed_fallbacks) or "none: Spot only (SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES)"
        return Violation("strategy", f"is {strategy}; allowed fallback strategies: {shown}")
    if spot_attempts_before < min_spot_attempts:
        return Violation(
            "strategy",
            f"is {strategy} after {spot_attempts_before} Spot attempts; at least {min_spot_attempts} come first "
            "(SPOTJOBS_MIN_SPOT_ATTEMPTS)",
        )
    return None


def _check_deadline(request: JobRequest, settings: Settings, now: datetime) -> list[Violation]:
    """A deadline that on-demand from the start could not meet is refused, with the numbers. On
    attempt 1, whatever the message says it is: a re-queue (attempt 2 on) is judged by the
    deadline policy, not refused for being late. Lateness is judged at the publisher's publish
    only: attempt 1 marked as the system's re-publication (a pacing hand-over, reconcile's re-send
    of a claim) is judged against its first publish by the ledger, which holds it, and a forged
    one names no claim and is never claimed (`shared.ledger.claims.claim_attempt`)."""
    deadline = request.deadline
    if deadline is None or (request.attempt or 1) > 1:
        return []
    if ON_DEMAND not in settings.allowed_fallback_strategies:
        # Meeting a deadline may need an on-demand attempt, which this deployment does not allow.
        return [
            Violation(
                "deadline",
                "needs on-demand capacity to be kept: the deployment allows no STANDARD attempt "
                "(SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES)",
            )
        ]
    if request.attempt is not None:
        return []
    left = (deadline.at - now).total_seconds()
    prior = settings.changeover_prior_seconds
    changeover = prior if deadline.changeover_seconds is None else deadline.changeover_seconds
    shown = f"is {iso(deadline.at, timespec='seconds')}, {left:.0f} s after {iso(now, timespec='seconds')}"
    if deadline.total_steps is not None and deadline.expected_step_seconds is not None:
        needed = deadline.total_steps * deadline.expected_step_seconds + changeover
        if left < needed:
            return [
                Violation(
                    "deadline",
                    f"{shown}; even on on-demand from the start the work needs {needed:.0f} s "
                    f"({deadline.total_steps} steps x {deadline.expected_step_seconds:g} s + a changeover of "
                    f"{changeover:.0f} s)",
                )
            ]
    elif left < changeover:
        return [Violation("deadline", f"{shown}; less than one changeover ({changeover:.0f} s) away")]
    return []


def _check_fallback(request: JobRequest, settings: Settings) -> list[Violation]:
    fallback = request.fallback
    if fallback is None:
        return []
    allowed = settings.allowed_fallback_strategies
    if fallback.strategy not in allowed:
        shown = ", ".join(allowed) if allowed else "none: Spot only (SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES)"
        return [Violation("fallback.strategy", f"is {fallback.strategy}; allowed: {shown}")]
    minimum = settings.min_spot_attempts
    if fallback.after_spot_attempts < minimum:
        return [
            Violation(
                "fallback.after_spot_attempts",
                f"is {fallback.after_spot_attempts}; at least {minimum} Spot attempts come first",
            )
        ]
    if fallback.strategy == FLEX_START:
        # Refused now, not when the fallback attempt's create fails with Spot attempts already spent.
        broken = _flex_start_requirement_broken(request.custom_job or {})
        if broken is not None:
            return [Violation("fallback.strategy", f"is FLEX_START; Dynamic Workload Scheduler needs {broken}")]
    return []


# "Schedule training jobs based on resource availability" (Vertex AI,
# https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws): "L4, A100, H100, H200, or B200
# GPUs", "a maximum timeout of 7 days or less", "the same machine configuration for all worker pools".
FLEX_START_ACCELERATORS = frozenset(
    {
        "NVIDIA_L4",
        "NVIDIA_TESLA_A100",
        "NVIDIA_A100_80GB",
        "NVIDIA_H100_80GB",
        "NVIDIA_H100_MEGA_80GB",
        "NVIDIA_H200_141GB",
        "NVIDIA_B200",
    }
)
FLEX_START_MAX_TIMEOUT_SECONDS = 7 * 86400


def _flex_start_requirement_broken(custom_job: Mapping[str, Any]) -> str | None:
    """What the job lacks for FLEX_START (the requirement and where), None when it meets them all."""
    differing = _pool_unlike_the_first(custom_job)
    if differing is not None:
        return (
            "the same machine configuration in every worker pool, and "
            f"workerPoolSpecs[{differing}] differs from workerPoolSpecs[0]"
        )
    spec = custom_job.get("jobSpec") or {}
    for i, pool in enumerate(spec.get("workerPoolSpecs") or []):
        accelerator = str(((pool or {}).get("machineSpec") or {}).get("acceleratorType") or "none")
        if pool and accelerator not in FLEX_START_ACCELERATORS:
            return f"L4, A100, H100, H200 or B200 GPUs, and workerPoolSpecs[{i}] has {accelerator}"
    timeout = (spec.get("scheduling") or {}).get("timeout")
    if timeout is not None and float(str(timeout).rstrip("s") or 0) > FLEX_START_MAX_TIMEOUT_SECONDS:
        return f"a timeout of 7 days or less, and jobSpec.scheduling.timeout is {timeout}"
    return None


def _check_capacity(request: JobRequest, settings: Settings) -> list[Violation]:
    """Each alternative of `capacity` as the policy judges it (module docstring)."""
    out: list[Violation] = []
    if not request.capacity:
        return out
    job = request.custom_job or {}
    own = set(check_custom_job(job, "custom_job", request.request_id, settings)) if job else set()
    for i, alternative in enumerate(request.capacity):
        path = f"capacity[{i}]"
        on_it = job_on_machine(job, alternative.machine) if job else {}
        if on_it:  # only what the machine changes: the job's own violations are reported once
            for found in check_custom_job(on_it, "custom_job", request.request_id, settings):
                if found not in own:
                    out.append(Violation(f"{path}.machine", f"is {alternative.machine}; on it {found}"))
        for j, strategy in enumerate(alternative.strategies):
            if strategy != SPOT and strategy not in settings.allowed_fallback_strategies:
                shown = ", ".join(settings.allowed_fallback_strategies) or "none (SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES)"
                out.append(Violation(f"{path}.strategies[{j}]", f"is {strategy}; allowed besides SPOT: {shown}"))
        broken = _flex_start_requirement_broken(on_it) if FLEX_START in alternative.strategies and on_it else None
        if broken is not None:
            out.append(Violation(f"{path}.strategies", f"lists FLEX_START; Dynamic Workload Scheduler needs {broken}"))
        if request.deadline is not None and ON_DEMAND not in alternative.strategies:
            out.append(
                Violation(f"{path}.strategies", "lacks STANDARD, which a deadline may switch to on this machine")
            )
    if settings.min_spot_attempts > 0 and not any(SPOT in a.strategies for a in request.capacity):
        out.append(
            Violation(
                "capacity",
                f"lists no SPOT; {settings.min_spot_attempts} Spot attempts come first (SPOTJOBS_MIN_SPOT_ATTEMPTS)",
            )
        )
    if request.max_cost_usd is not None:
        # The budget's spend is priced on the request's own machine (shared/fleet/spend.py).
        out.append(Violation("max_cost_usd", "is not supported with capacity alternatives yet"))
    return out


def _pool_unlike_the_first(custom_job: Mapping[str, Any] | None) -> int | None:
    """The first worker pool whose `machineSpec` is not pool 0's (empty placeholders aside)."""
    pools = ((custom_job or {}).get("jobSpec") or {}).get("workerPoolSpecs") or []
    first = (pools[0] or {}).get("machineSpec") if pools else None
    return next((i for i, pool in enumerate(pools) if pool and pool.get("machineSpec") != first), None)


def _check_locations(request: JobRequest, settings: Settings) -> list[Violation]:
    allowed = settings.allowed_locations
    if not allowed:
        return []
    named = [("location", request.location)] if request.location else []
    named += [(f"locations[{i}]", loc) for i, loc in enumerate(request.locations)]
    return [
        Violation(path, f"is {loc}; allowed regions: {', '.join(allowed)}") for path, loc in named if loc not in allowed
    ]


def describe_policy(settings: Settings) -> dict[str, Any]:
    """The effective policy as a publisher meets it: what may be set, and within which limits."""
    env = {f.name: f.metadata["env"] for f in dataclasses.fields(Settings)}
    opt_ins = {}
    for setting in OPT_INS:
        value = getattr(settings, setting)
        opt_ins[env[setting]] = {
            "fields": sorted(path for path, kind in FIELDS.items() if kind == setting),
            "allowed": value if isinstance(value, bool) else list(value),
        }
    return {
        "custom_job": {
            "allowed_fields": sorted(path for path, kind in FIELDS.items() if kind == ALLOWED),
            "opt_in_fields": opt_ins,
            "refused": "every other field; output-only fields: "
            + ", ".join(sorted(p for p, k in FIELDS.items() if k == OUTPUT_ONLY)),
            "machine_families": list(settings.allowed_machine_families),
            "tpus": False,
            "images": list(settings.allowed_image_prefixes) or "ANY (no allowlist configured)",
            "service_accounts": sorted(allowed_service_accounts(settings))
            or "none may be named (no training service account configured)",
            "default_service_account": settings.training_service_account or "(Vertex AI's default)",
            "training_classes": {f"{prefix}*": account for prefix, account in settings.training_class_accounts.items()},
            "output_directory": settings.output_dir_for("<request_id>"),
            "reserved_env": [*RESERVED_ENV_NAMES, *(f"{p}*" for p in RESERVED_ENV_PREFIXES)],
            "scheduling_strategy": "SPOT (set by spotjobs; leave unset or SPOT)",
        },
        "ceilings": {
            "replicas_per_pool": settings.max_replicas_per_pool,
            "accelerators_per_replica": settings.max_accelerators_per_replica,
            "accelerators_per_job": settings.max_accelerators_per_job,
            "replicas_per_job": settings.max_replicas_per_job,
            "pools_per_job": settings.max_pools_per_job,
            "timeout_seconds": settings.max_timeout_seconds,
            "boot_disk_gb": settings.max_boot_disk_gb,
            "max_attempts": settings.max_attempts_ceiling,
            "max_runtime_seconds": settings.max_runtime_seconds,
            "keep_last": settings.keep_last_ceiling,
            "request_bytes": settings.max_request_bytes,
        },
        "fallback_strategies": list(settings.allowed_fallback_strategies) or "none (Spot only)",
        "capacity": "alternatives of machine types (the families above) and strategies (SPOT and the "
        "fallback strategies); FLEX_START where its machine, timeout and pools meet its requirements; "
        "with a deadline, STANDARD on every alternative; not with fallback or max_cost_usd",
        "min_spot_attempts": settings.min_spot_attempts,
        "deadline": {
            "fields": {
                "deadline": "RFC 3339 time the work must be done by",
                "total_steps": "integer >= 1 (else the trainer kit's total_steps)",
                "expected_step_seconds": "number > 0: seconds per step on on-demand (an estimate override)",
                "changeover_seconds": "number >= 0: a move to a new attempt (an estimate override)",
            },
            "refused": "a deadline on-demand from the start could not meet: total_steps x "
            f"expected_step_seconds + changeover_seconds (default {settings.changeover_prior_seconds:.0f} s) "
            "beyond the time left when published; any deadline where STANDARD is not an allowed fallback "
            "strategy (a deadline may need an on-demand attempt)",
            "on_demand": f"only after {settings.min_spot_attempts} Spot attempts, as a fallback (the minimum wins)",
        },
        "max_cost_usd": {
            "field": "number of US dollars > 0: the request is stopped once it spent this (docs/requests.md)",
            "refused": "a budget on a machine type or location the price table does not price (its spend would be "
            "unknown); a deadline whose work costs more than the budget even on Spot",
        },
        "locations": list(settings.allowed_locations) or "any region",
        "notify_topics": [f"{prefix}*" for prefix in settings.allowed_notify_topics] or "none (notify is refused)",
        "default_location": settings.location,
        "system_fields": f"{', '.join(SYSTEM_FIELDS)}: only on the system's re-queue messages",
    }


def warn_if_images_unrestricted(settings: Settings, log: Logger) -> None:
    """Log a loud WARNING, once per process, when any container image is accepted."""
    global _warned_unrestricted_images
    if settings.allowed_image_prefixes or _warned_unrestricted_images:
        return
    _warned_unrestricted_images = True
    log.warning(
        "SPOTJOBS_ALLOWED_IMAGE_PREFIXES is empty: job requests may run ANY container image. "
        "Set it to your registries (e.g. us-docker.pkg.dev/my-project/).",
        event="policy_images_unrestricted",
    )
