"""A JobServiceClient talks to one regional endpoint (`{location}-aiplatform.googleapis.com`,
shared/adapters/clients.py): a job or parent of another location addressed through it is refused
with a 400 (observed, not documented: "The provided location ID doesn't match the endpoint. The
valid location ID is `us-central1`.", googleapis/python-aiplatform#1684). The fake and the
simulator's Vertex refuse it as production does, so a product call through the wrong region's
client fails in tests too."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core import exceptions as api
from google.cloud.aiplatform_v1 import CustomJob

from tests.support.vertex import PROJECT, FakeVertex


def _calls(client: Any, name: str, parent: str) -> dict[str, Any]:
    return {
        "get": lambda: client.get_custom_job(name=name),
        "cancel": lambda: client.cancel_custom_job(name=name),
        "list": lambda: client.list_custom_jobs(request={"parent": parent, "filter": ""}),
        "create": lambda: client.create_custom_job(parent=parent, custom_job=CustomJob(), retry=None, timeout=30.0),
    }


@pytest.mark.parametrize("call", ["get", "cancel", "list", "create"])
def test_the_fake_refuses_a_job_of_another_region_through_a_regional_client(call: str) -> None:
    vertex = FakeVertex()
    job = vertex.add("req-1", 1, location="europe-west4")
    parent = f"projects/{PROJECT}/locations/europe-west4"

    with pytest.raises(api.InvalidArgument, match="The valid location ID is `us-central1`"):
        _calls(vertex("us-central1"), job, parent)[call]()

    _calls(vertex("europe-west4"), job, parent)[call]()  # its own region's client serves it


def test_the_fake_itself_still_serves_every_region() -> None:
    """Tests read and drive the fake directly (`vertex.get_custom_job`): only a regional client,
    what `Ports.job_service(location)` hands the product, checks the location."""
    vertex = FakeVertex()
    job = vertex.add("req-1", 1, location="europe-west4")

    assert vertex.get_custom_job(name=job).name == job
    assert vertex("europe-west4").jobs is vertex.jobs
