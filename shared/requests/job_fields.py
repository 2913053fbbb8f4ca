"""The allowlist of CustomJob field paths: every field of the aiplatform_v1 schema, classified.

- `ALLOWED`: what a training job needs (display name, labels, worker pools' machine, replicas,
  container or Python package, disk, scheduling timeout and restart options, service account,
  output directory); `shared.requests.job_policy` checks their values;
- an opt-in (the name of the `Settings` field that enables it): refused while that setting is
  empty, checked against it when set (networks, PSC, web/dashboard access, mounts, persistent
  resources, reservations, CMEK, TensorBoard, experiments, models);
- `REFUSED`: never (TPU topologies, GPU partitions, protected artifacts), and `OUTPUT_ONLY`.

Any other set field, including one a library upgrade adds, is a violation naming its path until
it is classified here (a unit test walks the proto and fails on an unclassified path).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from shared.errors import Violation
from shared.requests.job_schema import set_fields
from shared.settings import Settings

ALLOWED = "allowed"
REFUSED = "refused"
OUTPUT_ONLY = "output only"
_POOL = "jobSpec.workerPoolSpecs[]"
CODE_SPECS = ("containerSpec", "pythonPackageSpec")
FIELDS: dict[str, str] = {
    "displayName": ALLOWED,
    "labels{}": ALLOWED,
    "jobSpec": ALLOWED,
    _POOL: ALLOWED,
    f"{_POOL}.replicaCount": ALLOWED,
    f"{_POOL}.machineSpec": ALLOWED,
    f"{_POOL}.machineSpec.machineType": ALLOWED,
    f"{_POOL}.machineSpec.acceleratorType": ALLOWED,
    f"{_POOL}.machineSpec.acceleratorCount": ALLOWED,
    f"{_POOL}.machineSpec.tpuTopology": REFUSED,
    f"{_POOL}.machineSpec.gpuPartitionSize": REFUSED,
    f"{_POOL}.containerSpec": ALLOWED,
    f"{_POOL}.containerSpec.imageUri": ALLOWED,
    f"{_POOL}.containerSpec.command[]": ALLOWED,
    f"{_POOL}.pythonPackageSpec": ALLOWED,
    f"{_POOL}.pythonPackageSpec.executorImageUri": ALLOWED,
    f"{_POOL}.pythonPackageSpec.packageUris[]": ALLOWED,
    f"{_POOL}.pythonPackageSpec.pythonModule": ALLOWED,
    **{f"{_POOL}.{code}.args[]": ALLOWED for code in CODE_SPECS},
    **{f"{_POOL}.{code}.env[]": ALLOWED for code in CODE_SPECS},
    **{f"{_POOL}.{code}.env[].{part}": ALLOWED for code in CODE_SPECS for part in ("name", "value")},
    f"{_POOL}.diskSpec": ALLOWED,
    f"{_POOL}.diskSpec.bootDiskType": ALLOWED,
    f"{_POOL}.diskSpec.bootDiskSizeGb": ALLOWED,
    "jobSpec.scheduling": ALLOWED,
    "jobSpec.scheduling.timeout": ALLOWED,
    "jobSpec.scheduling.restartJobOnWorkerRestart": ALLOWED,
    "jobSpec.scheduling.disableRetries": ALLOWED,
    "jobSpec.scheduling.maxWaitDuration": ALLOWED,
    "jobSpec.scheduling.strategy": ALLOWED,  # SPOT or unset: spotjobs sets it
    "jobSpec.serviceAccount": ALLOWED,
    "jobSpec.baseOutputDirectory": ALLOWED,
    "jobSpec.baseOutputDirectory.outputUriPrefix": ALLOWED,
    # Opt-ins: the Settings field that enables each.
    "jobSpec.network": "allowed_networks",
    "jobSpec.reservedIpRanges[]": "allowed_networks",
    "jobSpec.pscInterfaceConfig": "allowed_network_attachments",
    "jobSpec.pscInterfaceConfig.networkAttachment": "allowed_network_attachments",
    "jobSpec.pscInterfaceConfig.dnsPeeringConfigs[]": "allowed_network_attachments",
    **{
        f"jobSpec.pscInterfaceConfig.dnsPeeringConfigs[].{part}": "allowed_network_attachments"
        for part in ("domain", "targetProject", "targetNetwork")
    },
    "jobSpec.enableWebAccess": "allow_web_access",
    "jobSpec.enableDashboardAccess": "allow_web_access",
    f"{_POOL}.nfsMounts[]": "allowed_mount_servers",
    **{f"{_POOL}.nfsMounts[].{p}": "allowed_mount_servers" for p in ("server", "path", "mountPoint")},
    f"{_POOL}.lustreMounts[]": "allowed_mount_servers",
    **{
        f"{_POOL}.lustreMounts[].{part}": "allowed_mount_servers"
        for part in ("instanceIp", "volumeHandle", "filesystem", "mountPoint")
    },
    "jobSpec.persistentResourceId": "allowed_persistent_resources",
    f"{_POOL}.machineSpec.reservationAffinity": "allowed_reservations",
    **{
        f"{_POOL}.machineSpec.reservationAffinity.{part}": "allowed_reservations"
        for part in ("reservationAffinityType", "key", "values[]")
    },
    "encryptionSpec": "allowed_kms_keys",
    "encryptionSpec.kmsKeyName": "allowed_kms_keys",
    "jobSpec.tensorboard": "allowed_tensorboards",
    "jobSpec.experiment": "allowed_experiments",
    "jobSpec.experimentRun": "allowed_experiments",
    "jobSpec.models[]": "allowed_models",
    "jobSpec.protectedArtifactLocationId": REFUSED,
    # Vertex sets these (shared.requests.job_schema refuses them while reading, too).
    **{
        name: OUTPUT_ONLY
        for name in (
            "name",
            "state",
            "createTime",
            "startTime",
            "endTime",
            "updateTime",
            "error",
            "webAccessUris{}",
            "satisfiesPzs",
            "satisfiesPzi",
        )
    },
}
REFUSED_REASONS = {
    f"{_POOL}.machineSpec.tpuTopology": "is set; TPU topologies are not allowed",
    f"{_POOL}.machineSpec.gpuPartitionSize": "is set; GPU partitions are not allowed",
}
OPT_INS = sorted({value for value in FIELDS.values() if value not in (ALLOWED, REFUSED, OUTPUT_ONLY)})


def check_fields(job: Mapping[str, Any], path: str, settings: Settings) -> list[Violation]:
    """The allowlist: each set field outside it (or behind an opt-in left off) by its path."""
    out: list[Violation] = []
    refused: list[str] = []  # a refused field's children are not reported again
    for concrete, schema, _, _ in set_fields(dict(job), path):
        if any(concrete.startswith(parent) for parent in refused):
            continue
        kind = FIELDS.get(schema)
        if kind == ALLOWED or (kind in OPT_INS and getattr(settings, kind)):
            continue
        if kind == OUTPUT_ONLY:
            reason = "is output only; Vertex AI sets it"
        elif kind in OPT_INS:
            reason = f"is not allowed here; an operator opts in with {setting_env(kind)}"
        elif kind == REFUSED:
            reason = REFUSED_REASONS.get(schema, "is not allowed by spotjobs")
        else:
            reason = "is not in the request allowlist (a field spotjobs has not classified)"
        out.append(Violation(concrete, reason))
        refused.extend((f"{concrete}.", f"{concrete}["))
    return out


def setting_env(setting: str) -> str:
    return next(f.metadata["env"] for f in dataclasses.fields(Settings) if f.name == setting)
