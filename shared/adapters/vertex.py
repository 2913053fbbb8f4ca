"""The Vertex AI adapter: building, creating, reading, finding and cancelling CustomJobs.

Used by submit (build/create/find/cancel) and by the events and reconcile functions (get_job,
list). What a job is as plain data (its states, the snapshot decisions read, the label and
environment names) is `shared.jobs`, which the pure layers import instead of this module. `google.cloud.aiplatform_v1` is imported inside the functions that need it:
importing this module is free, so a function pays for the Vertex library only when it calls Vertex.

Clients are passed in (`shared.adapters.clients.job_service(location)` builds them), and every call
names its timeout (`Settings.vertex_call_timeout_seconds`, the create's own): the JobService client
wraps every method with `default_timeout=None` and no retry
(https://github.com/googleapis/python-aiplatform/blob/main/google/cloud/aiplatform_v1/services/job_service/transports/base.py),
so without one a reply that never comes is waited for until the function is killed; a list's pager
fetches each further page with the first call's `timeout` (its `pagers.py`). Every job spotjobs
creates carries two labels, `spotjobs-request-id` and `spotjobs-attempt`: Vertex has no idempotency
key for create, so these labels are how a job whose create response was lost is found again.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from shared.jobs import (
    DEFAULT_FLEX_START_MAX_WAIT_SECONDS,
    ENV_ATTEMPT,
    ENV_KIT_KEY,
    ENV_REQUEST_ID,
    FLEX_START,
    LABEL_ATTEMPT,
    LABEL_DEPLOYMENT,
    LABEL_REQUEST_ID,
    JobSnapshot,
    JobState,
    create_seconds,
    of_another_claim,
)
from shared.settings import COMMIT_MARKERS_ENV, DEFAULT_CREATE_TIMEOUT_SECONDS

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import CustomJob, JobServiceClient


def parent_path(project: str, location: str) -> str:
    return f"projects/{project}/locations/{location}"


def request_labels(request_id: str, deployment: str) -> dict[str, str]:
    return {LABEL_REQUEST_ID: request_id, LABEL_DEPLOYMENT: deployment}


def attempt_labels(request_id: str, attempt: int, deployment: str) -> dict[str, str]:
    return {**request_labels(request_id, deployment), LABEL_ATTEMPT: str(attempt)}


def label_filter(labels: Mapping[str, str]) -> str:
    """A list filter matching every label: `labels.k1="v1" AND labels.k2="v2"`."""
    return " AND ".join(f'labels.{key}="{value}"' for key, value in sorted(labels.items()))


def build_job_json(
    custom_job: Mapping[str, Any],
    *,
    request_id: str,
    attempt: int,
    strategy: str,
    output_dir: str,
    deployment: str,
    commit_markers: Sequence[str],
    service_account: str = "",
    kit_key: str | None = None,
) -> dict[str, Any]:
    """The REST JSON of the CustomJob to create for one attempt of a request.

    From the request's CustomJob (canonical REST JSON): scheduling.strategy set, the request's
    stable output directory (so AIP_CHECKPOINT_DIR is the same on every attempt and a re-queued
    attempt resumes), the spotjobs labels merged over the user's, the request id, the attempt and
    the deployment's commit markers (so the trainer kit judges checkpoints with the pruner's list)
    and the attempt's kit key (which signs the kit's lines) in every container's environment, the
    display name kept or derived, and the training service account when the request names none.
    """
    job = copy.deepcopy(dict(custom_job))
    spec = job.setdefault("jobSpec", {})
    scheduling = spec.setdefault("scheduling", {})
    scheduling["strategy"] = strategy
    if strategy == FLEX_START:
        scheduling.setdefault("maxWaitDuration", f"{DEFAULT_FLEX_START_MAX_WAIT_SECONDS}s")
    spec["baseOutputDirectory"] = {"outputUriPrefix": output_dir}
    if service_account and not spec.get("serviceAccount"):
        spec["serviceAccount"] = service_account
    job["labels"] = {
        **(job.get("labels") or {}),
        **attempt_labels(request_id, attempt, deployment),
    }
    system_env = [
        {"name": ENV_REQUEST_ID, "value": request_id},
        {"name": ENV_ATTEMPT, "value": str(attempt)},
        {"name": COMMIT_MARKERS_ENV, "value": ",".join(commit_markers)},  # the settings' list format
        *([{"name": ENV_KIT_KEY, "value": kit_key}] if kit_key else []),
    ]
    for pool in spec.get("workerPoolSpecs") or []:
        for key in ("containerSpec", "pythonPackageSpec"):
            if isinstance(pool.get(key), dict):
                pool[key]["env"] = [*(pool[key].get("env") or []), *system_env]
    job["displayName"] = job.get("displayName") or f"{request_id}-a{attempt}"
    return job


def to_custom_job(job_json: Mapping[str, Any]) -> CustomJob:
    """The message of a job's REST JSON, a new one at each call. A line waiting for quota builds
    the same job at each try: its JSON is parsed once, each call decodes the binary form (a
    fraction of the JSON parse's cost)."""
    from google.cloud.aiplatform_v1.types import CustomJob

    return CustomJob.deserialize(_serialized_job(json.dumps(job_json)))


def attempt_custom_job(
    custom_job: Mapping[str, Any],
    *,
    request_id: str,
    attempt: int,
    strategy: str,
    output_dir: str,
    deployment: str,
    commit_markers: Sequence[str],
    service_account: str = "",
    kit_key: str | None = None,
) -> CustomJob:
    """`to_custom_job(build_job_json(custom_job, ...))`, a new message at each call. A line waiting
    for quota creates the same attempt again at each try: its job is built and parsed once (keyed
    by the request's smaller JSON), not copied and encoded again first."""
    from google.cloud.aiplatform_v1.types import CustomJob

    fields = (
        ("request_id", request_id),
        ("attempt", attempt),
        ("strategy", strategy),
        ("output_dir", output_dir),
        ("deployment", deployment),
        ("commit_markers", tuple(commit_markers)),
        ("service_account", service_account),
        ("kit_key", kit_key),
    )
    return CustomJob.deserialize(_serialized_job(json.dumps(custom_job), fields))


@functools.lru_cache(maxsize=256)
def _serialized_job(text: str, built_with: tuple[tuple[str, Any], ...] = ()) -> bytes:
    """The binary form of the job whose REST JSON is `text`; with `built_with` (build_job_json's
    arguments), of the job built from the request's CustomJob `text`. One memo for both, which
    a new function instance starts without."""
    from google.cloud.aiplatform_v1.types import CustomJob

    if built_with:
        text = json.dumps(build_job_json(json.loads(text), **dict(built_with)))
    return CustomJob.serialize(CustomJob.from_json(text))


def to_job_json(job: CustomJob) -> dict[str, Any]:
    """REST JSON with enum names, without default values; a new one at each call."""
    from google.cloud.aiplatform_v1.types import CustomJob

    return json.loads(_job_json_text(CustomJob.serialize(job)))


@functools.lru_cache(maxsize=256)
def _job_json_text(serialized: bytes) -> str:
    from google.cloud.aiplatform_v1.types import CustomJob

    return CustomJob.to_json(
        CustomJob.deserialize(serialized),
        use_integers_for_enums=False,
        always_print_fields_with_no_presence=False,
        indent=None,
    )


def create_custom_job(
    client: JobServiceClient,
    parent: str,
    job: CustomJob,
    *,
    timeout: float = DEFAULT_CREATE_TIMEOUT_SECONDS,
) -> CustomJob:
    """One create, never retried by the client: a retry could create a second job."""
    return client.create_custom_job(parent=parent, custom_job=job, retry=None, timeout=timeout)


def cancel_job(client: JobServiceClient, name: str, *, timeout: float) -> None:
    """Ask Vertex to cancel a job (asynchronous: it goes CANCELLING, then CANCELLED)."""
    client.cancel_custom_job(name=name, timeout=timeout)


def canceller(job_service: Callable[[str], JobServiceClient], *, timeout: float) -> Callable[[str, str], None]:
    """(location, job name) -> cancel it: what `Ports.cancel_job` holds in the shells that cancel."""
    return lambda location, name: cancel_job(job_service(location), name, timeout=timeout)


def get_job(client: JobServiceClient, name: str, *, timeout: float) -> CustomJob:
    """The job as Vertex sees it now: the source of truth for its state and error."""
    return client.get_custom_job(name=name, timeout=timeout)


def read_job(client: JobServiceClient, name: str, *, timeout: float) -> JobSnapshot:
    """`get_job`, reduced to what a decision reads."""
    return JobSnapshot.of(get_job(client, name, timeout=timeout))


def find_jobs(client: JobServiceClient, parent: str, labels: Mapping[str, str], *, timeout: float) -> list[CustomJob]:
    """Every job under `parent` carrying all of `labels`, oldest first."""
    pager = client.list_custom_jobs(request={"parent": parent, "filter": label_filter(labels)}, timeout=timeout)
    jobs = list(pager)
    return sorted(jobs, key=lambda job: (create_seconds(job), job.name))


def list_unfinished_jobs(client: JobServiceClient, parent: str, deployment: str, *, timeout: float) -> list[CustomJob]:
    """Every job under `parent` of this deployment, labelled with a request, that has not ended.

    The filter is the one `customJobs.list` documents (`labels.key=value`, `labels.key:*`, `state`
    with `!=`): https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs/list
    """
    return list(client.list_custom_jobs(request=unfinished_jobs_request(parent, deployment), timeout=timeout))


# The jobs a list of the unfinished ones asks a page to hold: ListCustomJobsRequest documents no
# default and no maximum for `page_size` (a page may hold fewer), so it asks for many, and a
# location of many unfinished jobs takes as few list calls (CRUD quota) as Vertex allows.
UNFINISHED_PAGE_SIZE = 1000


def unfinished_jobs_request(parent: str, deployment: str) -> dict[str, object]:
    """The list request of this deployment's unfinished jobs under `parent`: every list of them,
    a reconcile pass's listing and a list sent once more alike, asks for the same pages."""
    return {"parent": parent, "filter": unfinished_jobs_filter(deployment), "page_size": UNFINISHED_PAGE_SIZE}


def unfinished_jobs_filter(deployment: str) -> str:
    """The list filter of this deployment's request jobs that have not ended."""
    ended = " AND ".join(f'state!="{state}"' for state in sorted(JobState.TERMINAL))
    return f'labels.{LABEL_DEPLOYMENT}="{deployment}" AND labels.{LABEL_REQUEST_ID}:* AND {ended}'


def find_attempt_job(
    client: JobServiceClient,
    parent: str,
    request_id: str,
    attempt: int,
    deployment: str,
    *,
    since: str,
    kit_key: str | None = None,
    timeout: float,
) -> CustomJob | None:
    """The job created for attempt `attempt` of `request_id`, if any (the oldest, should there be two).

    A claim's record is written before its create, so a job created before `since` (the record's
    `created_at`) is not this record's, whatever its labels: it is a job of an earlier record of
    the id, which a person deleted and whose job the stray sweep cancelled (simulator seed 1771:
    adopted, its cancel ended the request, and the claim's own job, unnamed, was cancelled). Nor is
    one carrying a kit key other than the attempt's (`kit_key`): that record's create was out when
    it was deleted, and Vertex accepted it after this record was written.
    """
    jobs = find_jobs(client, parent, attempt_labels(request_id, attempt, deployment), timeout=timeout)
    return next((job for job in jobs if not of_another_claim(job, since, kit_key)), None)


def may_have_created(exc: BaseException) -> bool:
    """False only when a failed create is known to have created nothing; then it may be retried.

    Known: Vertex answered with a verdict on the request (a 4xx: invalid, forbidden, not found,
    quota refused...), or the request never left this process (the connection never opened, the
    credentials could not be refreshed). Anything else, a deadline, UNAVAILABLE, UNKNOWN,
    CANCELLED, DATA_LOSS, INTERNAL, a broken connection, an error we do not recognise, may come
    after Vertex accepted the create: the job is looked up by its labels, never created blindly.
    """
    import requests
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    if isinstance(exc, (requests.ConnectTimeout, ConnectionRefusedError, auth.RefreshError)):
        return False  # never sent
    if isinstance(exc, api.Cancelled | api.Conflict):
        return True  # CANCELLED (499) and ABORTED/409 can come after the server did the work
    # A verdict: the server refused the request (4xx, or 501: the method does not exist).
    return not isinstance(exc, api.ClientError | api.MethodNotImplemented)
