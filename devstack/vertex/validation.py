"""The checks Vertex applies to a CustomJob at create, with its "List of found errors" message.

FLEX_START's requirements are documented (https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws:
L4, A100, H100, H200 or B200 GPUs; a timeout of 7 days or less; the same machine configuration
in every worker pool); how create refuses a job breaking one is not, and is the
`flex_requirements` mode (`devstack.vertex.modes`): by default InvalidArgument naming it.
"""

from __future__ import annotations

import re

from google.cloud import aiplatform_v1

from devstack.vertex.errors import invalid_argument
from devstack.vertex.flex import is_flex_start

_MAX_LABELS = 64
# ASCII only: stricter than Vertex, which also allows international lowercase letters.
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_Accelerator = aiplatform_v1.AcceleratorType
# "L4, A100, H100, H200, or B200 GPUs", as the API's accelerator types name them.
FLEX_START_ACCELERATORS = frozenset(
    {
        _Accelerator.NVIDIA_L4,
        _Accelerator.NVIDIA_TESLA_A100,
        _Accelerator.NVIDIA_A100_80GB,
        _Accelerator.NVIDIA_H100_80GB,
        _Accelerator.NVIDIA_H100_MEGA_80GB,
        _Accelerator.NVIDIA_H200_141GB,
        _Accelerator.NVIDIA_B200,
    }
)
FLEX_START_MAX_TIMEOUT_SECONDS = 7 * 86400


def validate(job: aiplatform_v1.CustomJob, *, refuse_flex_start_violations: bool = True) -> None:
    """Refuses what Vertex refuses, naming every violation in its "List of found errors" form;
    a FLEX_START job's broken requirements too, unless the caller fails the job for them instead."""
    violations: list[tuple[str, str]] = []
    if not job.display_name:
        violations.append(("custom_job.display_name", "Required field is not set."))
    pools = job.job_spec.worker_pool_specs
    if not pools:
        violations.append(("custom_job.job_spec.worker_pool_specs", "Required field is not set."))
    else:
        violations.extend(_primary_pool_violations(pools[0]))
    violations.extend(_label_violations(dict(job.labels)))
    if refuse_flex_start_violations:
        violations.extend(flex_start_violations(job))
    if violations:
        raise invalid_argument(found_errors(violations))


def found_errors(violations: list[tuple[str, str]]) -> str:
    listed = "".join(
        f"{index}.Field: {path}; Message: {message}\t" for index, (path, message) in enumerate(violations, start=1)
    )
    return f"List of found errors:\t{listed}"


def flex_start_violations(job: aiplatform_v1.CustomJob) -> list[tuple[str, str]]:
    """The documented FLEX_START requirements this job breaks (none for any other strategy)."""
    if not is_flex_start(job):
        return []
    violations = []
    # Empty worker pool specs are placeholders that keep the later pools' indexes.
    pools = [
        (index, pool) for index, pool in enumerate(job.job_spec.worker_pool_specs) if pool.machine_spec.machine_type
    ]
    for index, pool in pools:
        if pool.machine_spec.accelerator_type not in FLEX_START_ACCELERATORS:
            violations.append(
                (
                    f"custom_job.job_spec.worker_pool_specs[{index}].machine_spec.accelerator_type",
                    "Strategy FLEX_START requires L4, A100, H100, H200 or B200 GPUs.",
                )
            )
    if pools and any(pool.machine_spec != pools[0][1].machine_spec for _, pool in pools):
        violations.append(
            (
                "custom_job.job_spec.worker_pool_specs",
                "Strategy FLEX_START requires the same machine configuration for all worker pools.",
            )
        )
    timeout = job.job_spec.scheduling.timeout.total_seconds()
    if timeout > FLEX_START_MAX_TIMEOUT_SECONDS:
        violations.append(
            ("custom_job.job_spec.scheduling.timeout", "Strategy FLEX_START requires a timeout of 7 days or less.")
        )
    return violations


def _primary_pool_violations(pool: aiplatform_v1.WorkerPoolSpec) -> list[tuple[str, str]]:
    path = "custom_job.job_spec.worker_pool_specs[0]"
    violations = []
    if not pool.machine_spec.machine_type:
        violations.append((f"{path}.machine_spec.machine_type", "Required field is not set."))
    if "python_package_spec" in pool:
        package = pool.python_package_spec
        if not package.executor_image_uri:
            violations.append((f"{path}.python_package_spec.executor_image_uri", "Required field is not set."))
        if not package.python_module:
            violations.append((f"{path}.python_package_spec.python_module", "Required field is not set."))
    elif not pool.container_spec.image_uri:
        violations.append((f"{path}.container_spec.image_uri", "Required field is not set."))
    return violations


def _label_violations(labels: dict[str, str]) -> list[tuple[str, str]]:
    violations = []
    if len(labels) > _MAX_LABELS:
        violations.append(("custom_job.labels", f"At most {_MAX_LABELS} labels are allowed."))
    for key, value in labels.items():
        if not _LABEL_KEY.match(key):
            violations.append(
                (
                    f"custom_job.labels[{key}]",
                    "Label keys start with a lowercase letter and hold at most 63 lowercase "
                    "letters, digits, underscores or dashes.",
                )
            )
        if not _LABEL_VALUE.match(value):
            violations.append(
                (
                    f"custom_job.labels[{key}]",
                    "Label values hold at most 63 lowercase letters, digits, underscores or dashes.",
                )
            )
    return violations
