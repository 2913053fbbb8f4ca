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
        return storage.Client(project=get_settings().project)


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
