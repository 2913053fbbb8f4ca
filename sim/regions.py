"""One regional endpoint per JobService client, in the simulated world (issue 43).

Production builds a `JobServiceClient` per location on `{location}-aiplatform.googleapis.com`
(shared/adapters/clients.py); a job or parent of another location sent to it is refused with a 400
(`wrong_endpoint`). `world.vertex(location)` hands the code a `RegionalClient` that answers so (inside
the call, as Vertex would: `SimVertex._served`), keeps each such call (`SimVertex.misaddressed`),
and `calls_through_their_region` fails the seed that sent one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as api

if TYPE_CHECKING:
    from sim.vertex import SimVertex
    from sim.world import Violation, World


class RegionalClient:
    """`SimVertex` through one location's endpoint, what `Ports.job_service(location)` is."""

    def __init__(self, vertex: SimVertex, location: str) -> None:
        self.vertex = vertex
        self.location = location

    def create_custom_job(
        self, *, parent: str, custom_job: Any, retry: Any = None, timeout: float | None = None
    ) -> Any:
        return self.vertex.create_custom_job(
            parent=parent, custom_job=custom_job, retry=retry, timeout=timeout, endpoint=self.location
        )

    def get_custom_job(self, name: str = "", *, request: Any = None, timeout: float | None = None) -> Any:
        return self.vertex.get_custom_job(name, request=request, timeout=timeout, endpoint=self.location)

    def list_custom_jobs(self, request: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any:
        return self.vertex.list_custom_jobs(request, timeout=timeout, endpoint=self.location)

    def cancel_custom_job(self, name: str = "", *, request: Any = None, timeout: float | None = None) -> None:
        self.vertex.cancel_custom_job(name, request=request, timeout=timeout, endpoint=self.location)


def wrong_endpoint(field: str, endpoint_location: str) -> Exception:
    """Vertex's answer to a resource of another location sent to `endpoint_location`'s endpoint,
    as a public capture shows it for a `parent` (googleapis/python-aiplatform#1684; not documented,
    and the same text assumed for a `name`); tests/support/vertex.py's fake answers the same."""
    return api.InvalidArgument(
        f"List of found errors:\t1.Field: {field}; Message: The provided location ID doesn't match the "
        f"endpoint. The valid location ID is `{endpoint_location}`.\t"
    )


def calls_through_their_region(world: World) -> list[Violation]:
    """Every call the code sent reached its resource's own regional endpoint."""
    from sim.invariants import violation

    return [
        violation(
            "calls_through_their_region",
            f"{caller}'s {operation} of {resource} went through {endpoint}'s endpoint at {when}",
        )
        for when, caller, operation, resource, endpoint in world.vertex.misaddressed
    ]


QUIESCENCE = [calls_through_their_region]
