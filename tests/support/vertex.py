"""The one fake Vertex AI JobService of the functional tests: CustomJobs in memory, by name.

What spotjobs calls on `aiplatform_v1.JobServiceClient`, as the client offers it: create (with
scripted faults: an exception, or "lost" / "lost_503": created, then the call fails), get (a copy;
NotFound for an unknown name), list (the filter terms spotjobs writes: `labels.k="v"`,
`labels.k:*`, `state!="S"`; `list_lag` upcoming lists see nothing yet, as a list that lags a
create) and cancel (CANCELLING: Vertex cancels asynchronously). `add` and `set_state` stand in for
Vertex running a job. An instance is also the `Ports.job_service` factory: `vertex(location)` is a
`RegionalClient`, the fake's jobs through that location's endpoint, which refuses a name or parent
of another location as production's client of `{location}-aiplatform.googleapis.com` does; the
instance itself, which tests read and drive, serves every location.
"""

from __future__ import annotations

import itertools
import re
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.jobs import LABEL_ATTEMPT, LABEL_DEPLOYMENT, LABEL_REQUEST_ID, state_name
from sim.regions import wrong_endpoint  # the 400 the simulator's Vertex answers too

PROJECT = "spotjobs-test"
DEPLOYMENT = "test"


class FakeVertex:
    def __init__(self) -> None:
        self.jobs: dict[str, Any] = {}
        # An exception to raise, or "lost" / "lost_503": the job is created, then the call fails.
        self.create_faults: list[Exception | str] = []
        self.list_lag = 0  # this many upcoming lists do not see jobs yet (eventual consistency)
        self.creates = 0
        self.gets = 0
        self.lists = 0
        self.create_timeouts: list[float] = []
        self.cancelled: list[str] = []
        self._ids = itertools.count(7_000_000_000_000_000_001)
        self._lock = threading.Lock()

    def __call__(self, location: str) -> RegionalClient:  # the Ports.job_service factory
        return RegionalClient(self, location)

    def create_custom_job(self, *, parent: str, custom_job: Any, retry: Any, timeout: float) -> Any:
        from google.api_core import exceptions as api
        from google.cloud.aiplatform_v1 import CustomJob, JobState

        assert retry is None, "a create must never be retried by the client"
        with self._lock:
            self.creates += 1
            self.create_timeouts.append(timeout)
            fault = self.create_faults.pop(0) if self.create_faults else None
            if isinstance(fault, Exception):
                raise fault
            job = CustomJob(custom_job)
            job.name = f"{parent}/customJobs/{next(self._ids)}"
            job.state = JobState.JOB_STATE_QUEUED
            job.create_time = job.update_time = datetime.now(UTC)
            self.jobs[job.name] = job
        if fault == "lost":
            raise api.DeadlineExceeded("the response was lost")
        if fault == "lost_503":
            raise api.ServiceUnavailable("UNAVAILABLE after the server accepted the create")
        return CustomJob(job)

    def add(self, request_id: str, attempt: int, location: str = "us-central1", state: int = 1) -> str:
        """A job of attempt `attempt` of `request_id`, as if submit had created it."""
        from google.cloud.aiplatform_v1 import CustomJob

        name = f"projects/{PROJECT}/locations/{location}/customJobs/{next(self._ids)}"
        now = datetime.now(UTC)
        job = CustomJob(
            name=name,
            display_name=f"{request_id}-a{attempt}",
            state=state,
            labels={
                LABEL_REQUEST_ID: request_id,
                LABEL_ATTEMPT: str(attempt),
                LABEL_DEPLOYMENT: DEPLOYMENT,
            },
            create_time=now,
            update_time=now,
        )
        with self._lock:
            self.jobs[name] = job
        return name

    def set_state(self, name: str, state: int, error: dict[str, Any] | None = None) -> None:
        with self._lock:
            job = self.jobs[name]
            now = max(datetime.now(UTC), job.update_time + timedelta(microseconds=1))
            job.state = state
            job.update_time = now
            if state == 3 and not job.start_time:
                job.start_time = now
            if state in (4, 5, 7, 9):
                job.end_time = now
            if error:
                job.error = error

    def cancel_custom_job(self, name: str, **_: Any) -> None:
        with self._lock:
            self.cancelled.append(name)
            self.jobs[name].state = 6  # CANCELLING: Vertex cancels asynchronously

    def forget(self, name: str) -> None:
        """As if the create never reached Vertex."""
        with self._lock:
            del self.jobs[name]

    def get_custom_job(self, name: str, **_: Any) -> Any:
        from google.api_core.exceptions import NotFound
        from google.cloud.aiplatform_v1 import CustomJob

        with self._lock:
            self.gets += 1
            if name not in self.jobs:
                raise NotFound(f"{name} does not exist")
            return CustomJob(self.jobs[name])

    def list_custom_jobs(self, request: dict[str, Any], **_: Any) -> list[Any]:
        from google.cloud.aiplatform_v1 import CustomJob

        query = request.get("filter", "")
        wanted = dict(re.findall(r'labels\.([\w-]+)="([^"]*)"', query))
        present = re.findall(r"labels\.([\w-]+):\*", query)
        excluded = set(re.findall(r'state!="(\w+)"', query))
        with self._lock:
            self.lists += 1
            if self.list_lag:
                self.list_lag -= 1
                return []
            return [
                CustomJob(job)
                for job in self.jobs.values()
                if job.name.startswith(request["parent"] + "/")
                and all(job.labels.get(k) == v for k, v in wanted.items())
                and all(k in job.labels for k in present)
                and state_name(job.state) not in excluded
            ]


class RegionalClient:
    """`FakeVertex` through one location's endpoint: a job or parent of another location is refused
    with Vertex's 400 (`sim.regions.wrong_endpoint`, where its source is cited); everything else is
    the fake's own, read when called (a test's replaced method or a subclass's override included)."""

    def __init__(self, vertex: FakeVertex, location: str) -> None:
        self._vertex = vertex
        self.location = location

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._vertex, attribute)

    def create_custom_job(self, *, parent: str, custom_job: Any, retry: Any, timeout: float) -> Any:
        self._served("parent", parent)
        return self._vertex.create_custom_job(parent=parent, custom_job=custom_job, retry=retry, timeout=timeout)

    def get_custom_job(self, name: str, **kwargs: Any) -> Any:
        self._served("name", name)
        return self._vertex.get_custom_job(name, **kwargs)

    def list_custom_jobs(self, request: dict[str, Any], **kwargs: Any) -> Any:
        self._served("parent", request["parent"])
        return self._vertex.list_custom_jobs(request, **kwargs)

    def cancel_custom_job(self, name: str, **kwargs: Any) -> None:
        self._served("name", name)
        self._vertex.cancel_custom_job(name, **kwargs)

    def _served(self, field: str, resource: str) -> None:
        named = resource.split("/locations/", 1)[1].split("/", 1)[0] if "/locations/" in resource else ""
        if named != self.location:
            raise wrong_endpoint(field, self.location)
