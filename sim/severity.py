"""Severity tells the truth (issue 43): no ERROR line whose cause is only a transient fault the
world injected.

The project's rule (shared/errors.py, `is_retryable`; docs/operations.md, "Logging"): a failure a
retry may get past (a 503, a 429, a timeout, a lost reply) is said at WARNING and deferred or
redelivered; ERROR is for what no retry will mend. Reconcile's summary counts an `error` only where
it logs one at ERROR (`shared.reconcile.reconcile_request`), so the lines judge its count too.

The world keeps the functions' lines at ERROR and above (`World.log`; WARNING and above with
`--verbose`), each one JSON object. A line is attributed to an injected fault by its `error` field
(the project's `f"{type(exc).__name__}: {exc}"`): the messages the world gives the exceptions it
raises for a transient fault (`World.io`, `World._hang`) are its own and name the call; a line that
carries one was caused by that fault, whatever exception wrapped it. Not covered: a crash's
aftermath (a claim left behind, a redelivery) carries no such text, and a line without an `error`
field cannot be attributed.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.world import Violation, World

# The messages of the transient faults `World.io` and `World._hang` raise (503, 429, a lost reply, a hang).
INJECTED_TRANSIENT = re.compile(
    r"injected 503 on [\w.]+|injected 429 on [\w.]+|the response of [\w.]+ was lost|no reply to [\w.]+ within its"
)
AT_ERROR_OR_ABOVE = frozenset({"ERROR", "CRITICAL", "ALERT", "EMERGENCY"})


def errors_not_transient(world: World) -> list[Violation]:
    """No line at ERROR or above whose `error` field carries an injected transient fault."""
    from sim.invariants import violation

    found = []
    for text in world.log_stream.getvalue().splitlines():
        if not INJECTED_TRANSIENT.search(text):  # most lines: no parse
            continue
        line = json.loads(text)
        error = str(line.get("error", ""))
        if line.get("severity") in AT_ERROR_OR_ABOVE and (fault := INJECTED_TRANSIENT.search(error)):
            found.append(
                violation(
                    "errors_not_transient",
                    f"{line['severity']} line {line.get('event', line.get('message'))!r} "
                    f"(request {line.get('request_id')}) for a transient fault the world injected "
                    f"({fault.group(0)}): {error[:160]}",
                )
            )
    return found


QUIESCENCE = [errors_not_transient]
RETENTION = [errors_not_transient]
