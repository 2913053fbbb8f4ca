"""The checks Vertex applies to a CustomJob at create, with its "List of found errors" message."""

from __future__ import annotations

import re

from google.cloud import aiplatform_v1

from devstack.vertex.errors import invalid_argument

_MAX_LABELS = 64
# ASCII only: stricter than Vertex, which also allows international lowercase letters.
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")


def validate(job: aiplatform_v1.CustomJob) -> None:
    """Refuses what Vertex refuses, naming every violation in its "List of found errors" form."""
    violations: list[tuple[str, str]] = []
    if not job.display_name:
        violations.append(("custom_job.display_name", "Required field is not set."))
    pools = job.job_spec.worker_pool_specs
    if not pools:
        violations.append(("custom_job.job_spec.worker_pool_specs", "Required field is not set."))
    else:
        violations.extend(_primary_pool_violations(pools[0]))
    violations.extend(_label_violations(dict(job.labels)))
    if violations:
        listed = "".join(
            f"{index}.Field: {path}; Message: {message}\t" for index, (path, message) in enumerate(violations, start=1)
        )
        raise invalid_argument(f"List of found errors:\t{listed}")


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
