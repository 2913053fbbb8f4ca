"""Lazily created, process-wide clients. Each function pays only for the libraries it calls.

The same code targets Google Cloud or the embedded stack: the Pub/Sub and Storage libraries honour
PUBSUB_EMULATOR_HOST / STORAGE_EMULATOR_HOST themselves, and Vertex is redirected by
`Settings.vertex_endpoint` (an http:// URL means the local emulator, reached over REST anonymously).

With SPOTJOBS_RECORD_API_CALLS set (the embedded stack's least-privilege test only), each client is
wrapped by `shared.adapters.api_recording`; unset, the clients are the libraries' own and that module is
never imported.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import TYPE_CHECKING

from shared.settings import Settings, get_settings

if TYPE_CHECKING:
    from google.cloud import pubsub_v1, storage
    from google.cloud.aiplatform_v1 import JobServiceClient

_lock = threading.Lock()
_RECORD_ENV = "SPOTJOBS_RECORD_API_CALLS"  # shared.adapters.api_recording.ENV, without importing it


@functools.cache
def storage_client() -> storage.Client:
    from google.cloud import storage

    # google-cloud-storage >= 3.x fetches each bucket's metadata in a background thread
    # (storage.buckets.get, for tracing attributes) the first time the client touches it, and
    # again on a 404. The functions have no use for it and no grant for it (a 403 per bucket per
    # instance, tolerated by the library); the variable is the library's own switch.
    os.environ.setdefault("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
    with _lock:
        client = storage.Client(project=get_settings().project)
        read_environment_once(client)
    if os.environ.get(_RECORD_ENV):
        from shared.adapters.api_recording import record_storage

        return record_storage(client)
    return client


def read_environment_once(client: storage.Client) -> None:
    """Stop the storage client's HTTP session from re-reading the environment on every call.

    requests looks up proxy variables (scanning all of os.environ, twice) and ~/.netrc before each
    request: 75 us of CPU per call with 40 variables, 165 us with a deployed function's ~100 (its
    SPOTJOBS_* settings), several calls per message. A function's environment does not change
    while it runs, so when it names no proxy the lookups are switched off (`trust_env`); with a
    proxy configured nothing changes. A CA bundle named by REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE is
    kept, as trust_env would have applied it."""
    import os
    import urllib.request

    if urllib.request.getproxies():
        return
    session = client._http  # noqa: SLF001 - the AuthorizedSession every call goes through
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle and session.verify is True:
        session.verify = bundle
    session.trust_env = False


@functools.cache
def publisher() -> pubsub_v1.PublisherClient:
    from google.cloud import pubsub_v1

    with _lock:
        client = pubsub_v1.PublisherClient()
    if os.environ.get(_RECORD_ENV):
        from shared.adapters.api_recording import RecordingPublisher

        return RecordingPublisher(client)
    return client


@functools.cache
def job_service(location: str) -> JobServiceClient:
    with _lock:
        client = make_job_service(get_settings(), location)
    if os.environ.get(_RECORD_ENV):
        from shared.adapters.api_recording import RecordingJobService

        return RecordingJobService(client)
    return client


def make_job_service(settings: Settings, location: str) -> JobServiceClient:
    """A JobServiceClient for one location: the regional endpoint, or the configured emulator."""
    from google.cloud.aiplatform_v1 import JobServiceClient

    if settings.vertex_endpoint.startswith("http://"):
        from google.auth.credentials import AnonymousCredentials

        return JobServiceClient(
            transport="rest",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": settings.vertex_endpoint},
        )
    endpoint = settings.vertex_endpoint or f"{location}-aiplatform.googleapis.com"
    return JobServiceClient(client_options={"api_endpoint": endpoint})


def topic_path(topic: str) -> str:
    return f"projects/{get_settings().project}/topics/{topic}"
