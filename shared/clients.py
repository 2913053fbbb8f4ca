"""Lazily created, process-wide clients. Each function pays only for the libraries it calls.

The same code targets Google Cloud or the embedded stack: the Pub/Sub and Storage libraries honour
PUBSUB_EMULATOR_HOST / STORAGE_EMULATOR_HOST themselves, and Vertex is redirected by
`Settings.vertex_endpoint` (an http:// URL means the local emulator, reached over REST anonymously).
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING

from shared.settings import Settings, get_settings

if TYPE_CHECKING:
    from google.cloud import pubsub_v1, storage
    from google.cloud.aiplatform_v1 import JobServiceClient

_lock = threading.Lock()


@functools.cache
def storage_client() -> storage.Client:
    from google.cloud import storage

    with _lock:
        client = storage.Client(project=get_settings().project)
        read_environment_once(client)
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
        return pubsub_v1.PublisherClient()


@functools.cache
def job_service(location: str) -> JobServiceClient:
    with _lock:
        return make_job_service(get_settings(), location)


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
