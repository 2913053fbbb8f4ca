"""What a CustomJob may say in this deployment: the allowlist of field paths (`shared.requests.job_fields`),
then checks on the values of the allowed and opted-in fields.

Checks work on the canonical REST JSON (`shared.requests.job_schema.read_custom_job`): camelCase, enum
names, int64 as strings, no defaults.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from shared.errors import Violation
from shared.image_ref import BadReference, parse_image, parse_prefix
from shared.jobs import ENV_ATTEMPT, ENV_KIT_KEY, ENV_REQUEST_ID, MAX_LABELS, RESERVED_LABEL_PREFIX, SYSTEM_LABELS
from shared.requests.job_fields import CODE_SPECS, check_fields, setting_env
from shared.requests.job_schema import field_path
from shared.settings import COMMIT_MARKERS_ENV, Settings

TPU_MACHINE_PREFIXES = ("ct", "tpu")
ACCEPTED_STRATEGIES = ("STRATEGY_UNSPECIFIED", "SPOT")
VERTEX_DEFAULT_TIMEOUT_SECONDS = 7 * 86400  # Scheduling.timeout: "The default is 7 days."
# "Use the first worker pool specification only for your primary replica, and set its replicaCount
# to 1" (the page's "Configure a distributed training job").
DISTRIBUTED_TRAINING_PAGE = "https://cloud.google.com/vertex-ai/docs/training/distributed-training"
# Environment variables Vertex or the runtime owns: a request setting them could redirect
# AIP_CHECKPOINT_DIR to another request's folder, rewrite the cluster spec, or load other code.
# spotjobs sets the request id, the attempt and the commit markers in every container
# (shared/adapters/vertex.py); the trainer kit trusts them, and a request's own marker list would
# make the kit and the pruner judge its checkpoints differently. The kit key is the attempt's own.
RESERVED_ENV_NAMES = ("CLUSTER_SPEC", "TF_CONFIG", ENV_REQUEST_ID, ENV_ATTEMPT, COMMIT_MARKERS_ENV, ENV_KIT_KEY)
RESERVED_ENV_PREFIXES = ("AIP_", "CLOUD_ML_", "GOOGLE_", "LD_", "PYTHON")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESOURCE = re.compile(r"^[A-Za-z0-9._~@:/-]+$")
MAX_LABEL_LENGTH = 63


def check_custom_job(job: Mapping[str, Any], path: str, request_id: str | None, settings: Settings) -> list[Violation]:
    """Every policy violation of a CustomJob in canonical REST JSON."""
    # Redeliveries, re-queues and each create of a line waiting for quota judge the same job again
    # and again: judged once per distinct job (its JSON text) and settings.
    try:
        text = json.dumps(job)
    except (RecursionError, ValueError, TypeError):
        return _check_custom_job(job, path, request_id, settings)  # not JSON: judged as it is
    return list(_judged(text, path, request_id, settings))


@functools.lru_cache(maxsize=256)
def _judged(text: str, path: str, request_id: str | None, settings: Settings) -> tuple[Violation, ...]:
    return tuple(_check_custom_job(json.loads(text), path, request_id, settings))


def _check_custom_job(job: Mapping[str, Any], path: str, request_id: str | None, settings: Settings) -> list[Violation]:
    out = check_fields(job, path, settings)
    spec = job.get("jobSpec") or {}
    spec_path = field_path(path, "jobSpec")
    out.extend(_check_pools(spec.get("workerPoolSpecs") or [], spec_path, settings))
    out.extend(_check_scheduling(spec.get("scheduling") or {}, spec_path, settings))
    out.extend(_check_service_account(spec.get("serviceAccount"), f"{spec_path}.serviceAccount", request_id, settings))
    out.extend(_check_output_directory(spec.get("baseOutputDirectory"), spec_path, request_id, settings))
    out.extend(_check_opted_in(job, path, settings))
    out.extend(check_labels(job.get("labels") or {}, field_path(path, "labels")))
    return out


def _check_pools(pools: Sequence[Any], spec_path: str, settings: Settings) -> list[Violation]:
    out: list[Violation] = []
    path = f"{spec_path}.workerPoolSpecs"
    if not pools:
        out.append(Violation(path, "is required (at least worker pool 0)"))
    if len(pools) > settings.max_pools_per_job:
        out.append(Violation(path, f"has {len(pools)} pools; at most {settings.max_pools_per_job}"))
    primary_replicas = int((pools[0] or {}).get("replicaCount") or 0) if pools else 0
    if primary_replicas > 1:
        out.append(
            Violation(
                f"{path}[0].replicaCount",
                f"is {primary_replicas}; worker pool 0 holds the primary replica alone (Vertex: "
                f'"set its replicaCount to 1", {DISTRIBUTED_TRAINING_PAGE}): '
                "put the other replicas in worker pool 1",
            )
        )
    total = replicas = 0
    for index, pool in enumerate(pools):
        # Pools after the first may be empty placeholders (the API skips them).
        if pool or index == 0:
            out.extend(_check_pool(pool, f"{path}[{index}]", settings))
            machine = pool.get("machineSpec") or {}
            pool_replicas = max(1, int(pool.get("replicaCount") or 0))
            total += int(machine.get("acceleratorCount") or 0) * pool_replicas
            replicas += pool_replicas
    if replicas > settings.max_replicas_per_job:
        out.append(
            Violation(
                path,
                f"asks for {replicas} replicas in all (every pool); "
                f"at most {settings.max_replicas_per_job} per job (SPOTJOBS_MAX_REPLICAS_PER_JOB)",
            )
        )
    if total > settings.max_accelerators_per_job:
        out.append(
            Violation(
                path,
                f"asks for {total} accelerators in all (replicas x accelerators, every pool); "
                f"at most {settings.max_accelerators_per_job} per job",
            )
        )
    return out


def _check_pool(pool: Mapping[str, Any], path: str, settings: Settings) -> list[Violation]:
    out: list[Violation] = []
    machine = pool.get("machineSpec") or {}
    machine_type = str(machine.get("machineType") or "")
    families = ", ".join(settings.allowed_machine_families) or "(none configured)"
    if not machine_type:
        out.append(Violation(f"{path}.machineSpec.machineType", f"is required; allowed families: {families}"))
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
    accelerator = str(machine.get("acceleratorType") or "")
    if accelerator.startswith("TPU"):
        out.append(Violation(f"{path}.machineSpec.acceleratorType", f"is {accelerator}; TPUs are not allowed"))
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
    disk = int((pool.get("diskSpec") or {}).get("bootDiskSizeGb") or 0)
    if disk > settings.max_boot_disk_gb:
        out.append(
            Violation(
                f"{path}.diskSpec.bootDiskSizeGb",
                f"is {disk}; at most {settings.max_boot_disk_gb} GB",
            )
        )
    out.extend(_check_images(pool, path, settings))
    for code in CODE_SPECS:
        for index, env in enumerate((pool.get(code) or {}).get("env") or []):
            out.extend(_check_env_name(env.get("name"), f"{path}.{code}.env[{index}].name"))
    return out


def machine_family(machine_type: str) -> str:
    """'a2-highgpu-1g' -> 'a2'."""
    return machine_type.split("-", 1)[0].lower()


def _check_images(pool: Mapping[str, Any], path: str, settings: Settings) -> list[Violation]:
    images = [
        (f"{path}.{code}.{key}", (pool[code] or {}).get(key))
        for code, key in (("containerSpec", "imageUri"), ("pythonPackageSpec", "executorImageUri"))
        if code in pool
    ]
    if not images:
        return [Violation(path, "needs a containerSpec or a pythonPackageSpec")]
    out = []
    prefixes = [parse_prefix(entry) for entry in settings.allowed_image_prefixes]
    for image_path, image in images:
        if not image:
            out.append(Violation(image_path, "is required"))
            continue
        try:
            reference = parse_image(str(image))
        except BadReference as exc:
            out.append(Violation(image_path, f"is {image!r}, which {exc}"))
            continue
        if prefixes and not any(prefix.allows(reference) for prefix in prefixes):
            allowed = ", ".join(prefix.text for prefix in prefixes)
            out.append(
                Violation(
                    image_path,
                    f"is {image}; allowed image prefixes: {allowed}",
                )
            )
    return out


def _check_env_name(name: object, path: str) -> list[Violation]:
    text = str(name or "")
    if not _ENV_NAME.fullmatch(text):
        return [Violation(path, f"is {text!r}; a name is letters, digits and '_'")]
    upper = text.upper()
    if upper in RESERVED_ENV_NAMES or upper.startswith(RESERVED_ENV_PREFIXES):
        owned = ", ".join([*RESERVED_ENV_NAMES, *(f"{p}*" for p in RESERVED_ENV_PREFIXES)])
        return [Violation(path, f"is {text}; Vertex AI or the runtime owns {owned}")]
    return []


def _check_scheduling(scheduling: Mapping[str, Any], spec_path: str, settings: Settings) -> list[Violation]:
    out: list[Violation] = []
    path = f"{spec_path}.scheduling"
    strategy = scheduling.get("strategy")
    if strategy is not None and strategy not in ACCEPTED_STRATEGIES:
        out.append(
            Violation(
                f"{path}.strategy",
                f"is {strategy}; spotjobs submits SPOT (leave it unset or SPOT) and offers on-demand "
                'capacity through "fallback": {"after_spot_attempts": k, "strategy": "STANDARD"}',
            )
        )
    ceiling = settings.max_timeout_seconds
    timeout = scheduling.get("timeout")
    if timeout is None and ceiling < VERTEX_DEFAULT_TIMEOUT_SECONDS:
        out.append(
            Violation(
                f"{path}.timeout",
                f"is unset (Vertex AI then allows 7 days); set at most {ceiling}s",
            )
        )
    for key in ("timeout", "maxWaitDuration"):
        value = scheduling.get(key)
        if value is not None and _seconds(value) > ceiling:
            out.append(Violation(f"{path}.{key}", f"is {value}; at most {ceiling}s"))
    return out


def _seconds(duration: object) -> float:
    return float(str(duration).rstrip("s") or 0)


def _check_service_account(account: object, path: str, request_id: str | None, settings: Settings) -> list[Violation]:
    """Fail closed: only the listed accounts and the training account; none listed and no
    training account means no account may be named. A request of a training class runs as its
    class's account only, and a class's account runs that class's requests only: it may write
    only their folders (docs/security.md)."""
    own = training_account_for(settings, request_id)
    classes = settings.training_class_accounts
    if account and own in classes.values() and account != own:
        return [Violation(path, f"is {account}; a request whose id starts like {request_id!r} runs as {own}")]
    if own in classes.values() or not account:
        return []
    if account in classes.values():
        prefix = next(p for p, a in classes.items() if a == account)
        return [Violation(path, f"is {account}, which runs only requests whose id starts with {prefix!r}")]
    allowed = allowed_service_accounts(settings)
    if account in allowed:
        return []
    shown = ", ".join(sorted(allowed)) or "none (leave serviceAccount unset)"
    return [Violation(path, f"is {account}; allowed service accounts: {shown}")]


def allowed_service_accounts(settings: Settings) -> frozenset[str]:
    """The listed accounts plus the deployment's training account (always allowed); a training
    class's account is allowed for its own class's requests only."""
    accounts = set(settings.allowed_service_accounts) - set(settings.training_class_accounts.values())
    if settings.training_service_account:
        accounts.add(settings.training_service_account)
    return frozenset(accounts)


def training_account_for(settings: Settings, request_id: str | None) -> str:
    """The account a request's jobs run as when it names none: its class's, else the training
    account."""
    for prefix, account in settings.training_class_accounts.items():
        if request_id and request_id.startswith(prefix):
            return account
    return settings.training_service_account


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


def _check_opted_in(job: Mapping[str, Any], path: str, settings: Settings) -> list[Violation]:
    """Values of opted-in fields, against their settings (a field left off is refused above)."""
    spec = job.get("jobSpec") or {}
    spec_path = field_path(path, "jobSpec")
    found: list[tuple[str, object, str]] = [  # (path, value, setting)
        (f"{spec_path}.network", spec.get("network"), "allowed_networks"),
        (f"{spec_path}.persistentResourceId", spec.get("persistentResourceId"), "allowed_persistent_resources"),
        (f"{spec_path}.tensorboard", spec.get("tensorboard"), "allowed_tensorboards"),
        (f"{spec_path}.experiment", spec.get("experiment"), "allowed_experiments"),
        (
            field_path(path, "encryptionSpec.kmsKeyName"),
            (job.get("encryptionSpec") or {}).get("kmsKeyName"),
            "allowed_kms_keys",
        ),
    ]
    found += [
        (f"{spec_path}.models[{i}]", str(model).split("@", 1)[0], "allowed_models")
        for i, model in enumerate(spec.get("models") or [])
    ]
    psc = spec.get("pscInterfaceConfig") or {}
    psc_path = f"{spec_path}.pscInterfaceConfig"
    found.append((f"{psc_path}.networkAttachment", psc.get("networkAttachment"), "allowed_network_attachments"))
    # Opted in by the attachments' setting, so check_fields lets them through: they name networks,
    # and an empty network list allows none of them (fails closed), as it does jobSpec.network.
    peered = set()
    for i, peering in enumerate(psc.get("dnsPeeringConfigs") or []):
        network = f"projects/{peering.get('targetProject', '')}/global/networks/{peering.get('targetNetwork', '')}"
        peered.add(f"{psc_path}.dnsPeeringConfigs[{i}]")
        found.append((f"{psc_path}.dnsPeeringConfigs[{i}]", network, "allowed_networks"))
    for p, pool in enumerate(spec.get("workerPoolSpecs") or []):
        pool_path = f"{spec_path}.workerPoolSpecs[{p}]"
        for kind, key in (("nfsMounts", "server"), ("lustreMounts", "instanceIp")):
            for i, mount in enumerate(pool.get(kind) or []):
                found.append((f"{pool_path}.{kind}[{i}].{key}", mount.get(key), "allowed_mount_servers"))
        affinity = (pool.get("machineSpec") or {}).get("reservationAffinity")
        if affinity:
            kind = affinity.get("reservationAffinityType")
            affinity_path = f"{pool_path}.machineSpec.reservationAffinity"
            if kind == "ANY_RESERVATION":
                found.append((f"{affinity_path}.reservationAffinityType", kind, "allowed_reservations"))
            for i, value in enumerate(affinity.get("values") or []):
                found.append((f"{affinity_path}.values[{i}]", value, "allowed_reservations"))
    out = []
    for where, value, setting in found:
        allowed = getattr(settings, setting)
        if value is None or value == "" or (not allowed and where not in peered):
            continue  # unset, or refused by check_fields (its field's opt-in is this empty setting)
        if not resource_allowed(str(value), allowed):
            shown = ", ".join(allowed) or "none (it is empty)"
            out.append(Violation(where, f"is {value}; allowed by {setting_env(setting)}: {shown}"))
    run = spec.get("experimentRun")
    if (
        run
        and settings.allowed_experiments
        and not (spec.get("experiment") and str(run).startswith(f"{spec.get('experiment')}-"))
    ):
        out.append(Violation(f"{spec_path}.experimentRun", "must be a run of jobSpec.experiment"))
    return out


def resource_allowed(value: str, allowed: Sequence[str]) -> bool:
    """Exactly an entry, or under an entry ending in '/' (a path prefix); no '.' or '..' segments."""
    if not _RESOURCE.fullmatch(value) or any(s in (".", "..") for s in value.split("/")):
        return False
    return any(value == entry or (entry.endswith("/") and value.startswith(entry)) for entry in allowed)


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
