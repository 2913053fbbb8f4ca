"""A location whose Vertex AI API has stopped answering reconcile (issue 43: nothing stuck without
a word). A region's API that stalls runs every call out of its timeout (DEADLINE_EXCEEDED) or
answers 503 (UNAVAILABLE, "the service is currently unavailable":
https://cloud.google.com/apis/design/errors); there a request can be neither read nor cancelled,
and its creates meet the same API. The pass defers such a request (`reconcile_call_timed_out`,
`reconcile_request_deferred`: WARNING lines that tell nobody) and takes it up again once Vertex
answers, but nobody would know why it stands still.

So each pass counts, from the calls it sent anyway (no call of its own: `CallWindow.answered`,
`CallWindow.unanswered`), the locations where every one of its calls went unanswered, and
`UNANSWERING_PASSES` passes in a row are alerted (`location_unanswering`), once for the run of
them. A pass that got any reply there (an error Vertex answered included) ends the run; a pass
that sent no call there (its window closed) leaves it as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shared.alerts import Alert, AlertKind
from shared.clock import iso
from shared.redeliveries import REJECTION_NOTES, alert_once

if TYPE_CHECKING:
    from shared.log import Logger
    from shared.reconcile_vertex import CallWindow
    from shared.wiring import Ports

# Passes in a row in which a location answered none of the pass's calls before it is alerted: one
# or two may be a blip (at the default interval, ten minutes); a third is an outage to know of.
UNANSWERING_PASSES = 3
UNANSWERING_STATE = "reconcile-unanswering"  # maintenance/reconcile-unanswering.json: location -> its run
UNANSWERING_NOTES = f"{REJECTION_NOTES}unanswering-"  # one note a location's run (`alert_once`)


def count_unanswering_locations(ports: Ports, window: CallWindow, log: Logger) -> None:
    """Count, per location, the passes in a row that got no reply to any of their calls there, in
    the state bucket (`UNANSWERING_STATE`: the passes hold the run lease in turn), and alert once a
    run of them reaches `UNANSWERING_PASSES`: once per run (`alert_once`, its note named by the
    location and the run's first pass); a pass killed before its alert leaves it to the next one.
    Never raises: the next pass counts on."""
    unanswered = {location: how for location, how in window.unanswered.items() if location not in window.answered}
    if not unanswered and not window.answered:
        return  # no call sent: nothing learnt of any location
    try:
        stored = ports.ledger.maintenance_state(UNANSWERING_STATE)
        runs = {location: run for location, run in stored.items() if _is_run(run)}
        counted = {location: run for location, run in runs.items() if location not in window.answered}
        now = iso(ports.clock())
        for location in unanswered:
            before = counted.get(location, {})
            counted[location] = {"passes": before.get("passes", 0) + 1, "since": before.get("since", now)}
        if counted != stored:
            ports.ledger.save_maintenance_state(UNANSWERING_STATE, counted)
        for location, how in sorted(unanswered.items()):
            run = counted[location]
            if run["passes"] >= UNANSWERING_PASSES:
                note = f"{UNANSWERING_NOTES}{location}-{run['since']}"
                alert_once(ports, _unanswering_alert(ports, location, run, how), note)
    except Exception as exc:  # noqa: BLE001 - the next pass counts again; the alert waits for it
        log.warning(
            "could not count or alert the locations whose Vertex AI API answered no call",
            event="location_unanswering_count_failed",
            error=f"{type(exc).__name__}: {exc}",
        )


def _is_run(run: Any) -> bool:
    passes = run.get("passes") if isinstance(run, dict) else None
    return isinstance(passes, int) and not isinstance(passes, bool) and isinstance(run.get("since"), str)


def _unanswering_alert(ports: Ports, location: str, run: dict[str, Any], how: dict[str, int]) -> Alert:
    passes, since = run["passes"], run["since"]
    return Alert.of(
        AlertKind.LOCATION_UNANSWERING,
        f"Vertex AI in {location} answered none of reconcile's calls {passes} passes in a row (since {since}): each "
        "ran out its timeout or met a 503. Its requests can be neither read nor cancelled there, and their creates "
        "meet the same API; they wait, none is failed for it, and are taken up again once it answers. Check Vertex "
        f"AI in {location} on https://status.cloud.google.com/ and the functions' egress to {location}-aiplatform"
        ".googleapis.com",
        details={
            "location": location,
            "passes": passes,
            "since": since,
            "timed_out": how.get("timed_out", 0),
            "unavailable": how.get("unavailable", 0),
        },
        time=iso(ports.clock()),
    )
