"""Vertex calls that never answer (the `hangs` fault, `sim.faults`), and the promise that makes
them survivable: every call a handler sends names a timeout that fits it.

The JobService client sets no timeout of its own (aiplatform_v1 wraps each method with
`default_timeout=None`, https://github.com/googleapis/python-aiplatform/blob/main/google/cloud/aiplatform_v1/services/job_service/transports/base.py),
so a call without one waits for a reply that may never come, holding what its handler holds (a
claim, reconcile's run lease, a delivery) until the function's own timeout kills the instance.
With one, the client raises DeadlineExceeded (google.api_core's `timeout`, the whole call's
deadline) and the handler decides on it as on any lost reply. `World._hang` plays the hang; the
calls' timeouts are kept by the stand-in (`SimVertex.call_timeouts`) and judged here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.world import Violation, World

# The push-delivered functions' timeout Terraform deploys by default
# (terraform/variables.tf, `function_defaults.timeout_seconds`).
FUNCTION_TIMEOUT_SECONDS = 60.0


def timeout_bound(world: World) -> float:
    """The longest timeout a handler's Vertex call may name: half the claim lease (a claim holder's
    lookup leaves its create its place, as the settings' check asks of the create) and half the
    function's timeout (the DeadlineExceeded reaches the handler while it can still answer)."""
    return min(world.settings.claim_lease_seconds, FUNCTION_TIMEOUT_SECONDS) / 2


def vertex_calls_bounded(world: World) -> list[Violation]:
    """Every Vertex call a handler sent named a positive timeout within `timeout_bound`."""
    from sim.invariants import violation

    bound = timeout_bound(world)
    return [
        violation(
            "vertex_calls_bounded",
            f"{caller} sent {count} {operation} call(s) with timeout={timeout!r} (the bound: {bound:g} s)",
        )
        for (caller, operation, timeout), count in sorted(world.vertex.call_timeouts.items(), key=str)
        if caller != "world" and (timeout is None or not 0 < timeout <= bound)
    ]


QUIESCENCE = [vertex_calls_bounded]
