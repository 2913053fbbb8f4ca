"""Request policy: what this deployment lets a job request ask for (configuration, not code).

Every check reports a `Violation(path, message)` naming the field and what is allowed, and all of
them run, so a rejected publisher learns everything wrong with a request at once. The limits come
from `Settings` (see the "Request policy" section there).

Why these rules:
- machine families: Spot training capacity exists for A2/A3 (the Spot docs); the list is a setting;
- no TPUs: TPU pods have their own Spot semantics this system does not manage;
- images: Vertex pulls with its own agent, so IAM cannot stop a publisher naming any image; the
  allowlist has to be enforced here (empty = any image, with a loud warning);
- service accounts: a job acts as its service account; only listed ones (and the deployment's
  training account, which is also the default) may be named;
- baseOutputDirectory: must be unset or exactly the request's own directory
  `gs://<checkpoint bucket>/<prefix>/<request_id>/`. Merely "inside the managed prefix" is not
  enough: a request pointing at another request's directory would resume from, and overwrite,
  that request's checkpoints, and the pruner reasons about one request per directory;
- scheduling.strategy: spotjobs submits SPOT; on-demand capacity is asked for through `fallback`,
  so a request that says STANDARD is told so instead of being silently changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.errors import Violation
from shared.log import Logger
from shared.job_schema import field_path
from shared.request import InvalidJobRequest, JobRequest, read_request
from shared.settings import Settings
from shared.vertex import MAX_LABELS, RESERVED_LABEL_PREFIX, SYSTEM_LABELS

TPU_MACHINE_PREFIXES = ("ct", "tpu")
ACCEPTED_STRATEGIES = ("STRATEGY_UNSPECIFIED", "SPOT")
MAX_LABEL_LENGTH = 63
_warned_unrestricted_images = False


def validate_request(
    data: bytes, *, message_id: str, attributes: Mapping[str, str], settings: Settings
) -> JobRequest:
    """Read and check a message; return the request or raise InvalidJobRequest with every violation."""
    request, violations = read_request(
        data, message_id=message_id, attributes=attributes, max_bytes=settings.max_request_bytes
    )
    violations.extend(check_policy(request, settings))
    if violations:
        raise InvalidJobRequest(violations, request_id=request.request_id, attempt=request.attempt)
    return request


def check_policy(request: JobRequest, settings: Settings) -> list[Violation]:
    """Every policy violation of a (possibly partially read) request."""
    out: list[Violation] = []
    if request.custom_job is not None:
        out.extend(
            check_custom_job(request.custom_job, request.job_path, request.request_id, settings)
        )
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
    return out


def check_custom_job(
    job: Mapping[str, Any], path: str, request_id: str | None, settings: Settings
) -> list[Violation]:
    """Policy over a CustomJob in canonical REST JSON (camelCase, enum names)."""
    out: list[Violation] = []
    spec = job.get("jobSpec") or {}
    spec_path = field_path(path, "jobSpec")
    pools = spec.get("workerPoolSpecs") or []
    if not pools:
        out.append(
            Violation(f"{spec_path}.workerPoolSpecs", "is required (at least worker pool 0)")
        )
    for index, pool in enumerate(pools):
        # Pools after the first may be empty placeholders (the API skips them).
        if pool or index == 0:
            out.extend(_check_pool(pool, f"{spec_path}.workerPoolSpecs[{index}]", settings))
    out.extend(
        _check_service_account(spec.get("serviceAccount"), f"{spec_path}.serviceAccount", settings)
    )
    out.extend(
        _check_output_directory(spec.get("baseOutputDirectory"), spec_path, request_id, settings)
    )
    strategy = (spec.get("scheduling") or {}).get("strategy")
    if strategy is not None and strategy not in ACCEPTED_STRATEGIES:
        out.append(
            Violation(
                f"{spec_path}.scheduling.strategy",
                f"is {strategy}; spotjobs submits SPOT (leave it unset or SPOT) and offers on-demand "
                'capacity through "fallback": {"after_spot_attempts": k, "strategy": "STANDARD"}',
            )
        )
    out.extend(check_labels(job.get("labels") or {}, field_path(path, "labels")))
    return out


def _check_pool(pool: Mapping[str, Any], path: str, settings: Settings) -> list[Violation]:
    out: list[Violation] = []
    machine = pool.get("machineSpec") or {}
    machine_type = str(machine.get("machineType") or "")
    families = ", ".join(settings.allowed_machine_families) or "(none configured)"
    if not machine_type:
        out.append(
            Violation(
                f"{path}.machineSpec.machineType", f"is required; allowed families: {families}"
            )
        )
    elif machine_type.lower().startswith(TPU_MACHINE_PREFIXES):
        out.append(
            Violation(
                f"{path}.machineSpec.machineType",
                f"is {machine_type}; TPU machine types are not allowed",
            )
        )
    elif machine_family(machine_type) not in settings.allowed_machine_families:
        out.append(
            Violation(
                f"{path}.machineSpec.machineType",
                f"is {machine_type} (family {machine_family(machine_type)}); allowed families: {families}",
            )
        )
    if machine.get("tpuTopology"):
        out.append(
            Violation(f"{path}.machineSpec.tpuTopology", "is set; TPU topologies are not allowed")
        )
    accelerator = str(machine.get("acceleratorType") or "")
    if accelerator.startswith("TPU"):
        out.append(
            Violation(
                f"{path}.machineSpec.acceleratorType", f"is {accelerator}; TPUs are not allowed"
            )
        )
    accelerators = int(machine.get("acceleratorCount") or 0)
    if accelerators > settings.max_accelerators_per_replica:
        out.append(
            Violation(
                f"{path}.machineSpec.acceleratorCount",
                f"is {accelerators}; at most {settings.max_accelerators_per_replica} per replica",
            )
        )
    replicas = int(pool.get("replicaCount") or 0)
    if replicas > settings.max_replicas_per_pool:
        out.append(
            Violation(
                f"{path}.replicaCount",
                f"is {replicas}; at most {settings.max_replicas_per_pool} per pool",
            )
        )
    out.extend(_check_images(pool, path, settings))
    return out


def machine_family(machine_type: str) -> str:
    """'a2-highgpu-1g' -> 'a2'."""
    return machine_type.split("-", 1)[0].lower()


def _check_images(pool: Mapping[str, Any], path: str, settings: Settings) -> list[Violation]:
    images = []
    if "containerSpec" in pool:
        images.append(
            (f"{path}.containerSpec.imageUri", (pool["containerSpec"] or {}).get("imageUri"))
        )
    if "pythonPackageSpec" in pool:
        images.append(
            (
                f"{path}.pythonPackageSpec.executorImageUri",
                (pool["pythonPackageSpec"] or {}).get("executorImageUri"),
            )
        )
    if not images:
        return [Violation(path, "needs a containerSpec or a pythonPackageSpec")]
    out = []
    prefixes = settings.allowed_image_prefixes
    for image_path, image in images:
        if not image:
            out.append(Violation(image_path, "is required"))
        elif prefixes and not str(image).startswith(prefixes):
            out.append(
                Violation(image_path, f"is {image}; allowed image prefixes: {', '.join(prefixes)}")
            )
    return out


def _check_service_account(account: object, path: str, settings: Settings) -> list[Violation]:
    allowed = allowed_service_accounts(settings)
    if not account or not settings.allowed_service_accounts or account in allowed:
        return []
    return [
        Violation(path, f"is {account}; allowed service accounts: {', '.join(sorted(allowed))}")
    ]


def allowed_service_accounts(settings: Settings) -> frozenset[str]:
    """The listed accounts plus the deployment's training account (always allowed)."""
    accounts = set(settings.allowed_service_accounts)
    if settings.training_service_account:
        accounts.add(settings.training_service_account)
    return frozenset(accounts)


def _check_output_directory(
    destination: object, spec_path: str, request_id: str | None, settings: Settings
) -> list[Violation]:
    if not destination or request_id is None:
        return []
    prefix = str((destination or {}).get("outputUriPrefix") or "")  # type: ignore[union-attr]
    expected = settings.output_dir_for(request_id)
    if prefix.rstrip("/") + "/" == expected:
        return []
    return [
        Violation(
            f"{spec_path}.baseOutputDirectory.outputUriPrefix",
            f"is {prefix or '(empty)'}; leave baseOutputDirectory unset or set it to {expected}, "
            "this request's own checkpoint directory",
        )
    ]


def check_labels(labels: Mapping[str, str], path: str) -> list[Violation]:
    """Vertex label rules, plus: the spotjobs-* keys are the system's."""
    out: list[Violation] = []
    room = MAX_LABELS - len(SYSTEM_LABELS)
    if len(labels) > room:
        out.append(
            Violation(
                path,
                f"has {len(labels)} labels; at most {room} (spotjobs adds {len(SYSTEM_LABELS)})",
            )
        )
    for key, value in labels.items():
        if key.startswith(RESERVED_LABEL_PREFIX):
            out.append(
                Violation(
                    field_path(path, key),
                    f"the {RESERVED_LABEL_PREFIX}* labels are set by spotjobs",
                )
            )
        elif not _is_label_text(key) or not key[:1].isalpha():
            out.append(
                Violation(
                    field_path(path, key),
                    f"label keys are 1-{MAX_LABEL_LENGTH} lowercase letters, digits, '-' or '_', starting with a letter",
                )
            )
        if not (value == "" or _is_label_text(value)):
            out.append(
                Violation(
                    field_path(path, key),
                    f"value {value!r}: at most {MAX_LABEL_LENGTH} lowercase letters, digits, '-' or '_'",
                )
            )
    return out


def _is_label_text(text: str) -> bool:
    # Vertex allows international lowercase letters too, hence isalpha/isupper rather than [a-z].
    return 0 < len(text) <= MAX_LABEL_LENGTH and all(
        c in "-_" or c.isdigit() or (c.isalpha() and not c.isupper()) for c in text
    )


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
