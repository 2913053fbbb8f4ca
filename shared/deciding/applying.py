"""Applying an observation: `apply_observation` runs `decide` under the ledger's compare-and-swap,
then carries out what this call decided (on_job_event, reconcile and submit all use it).

Effects run only after the write that decided them succeeded. Log lines are written by the call
whose write landed; what must reach Pub/Sub was written pending with the decision and is
published by the outbox, so a failed publish or a lost write reply loses nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.deciding.decision_policy import DecisionPolicy
from shared.deciding.decisions import Decision, Observation, decide
from shared.deciding.effects import Effects
from shared.deciding.folder_progress import folder_progress
from shared.deciding.moves import consider_move
from shared.deciding.notices import note_changes
from shared.deciding.outbox import Mine, flush
from shared.deciding.preemptions import kit_runs, unconfirmed_kit_preemptions
from shared.fleet.observations import Reading
from shared.fleet.placing import attempt_placer
from shared.fleet.recording import FleetFacts, fleet_facts, note_fleet
from shared.ledger.records import RequestRecord
from shared.log import Logger
from shared.swap import Decided
from shared.wiring import Ports


@dataclass(frozen=True)
class Applied:
    """What one observation did to its request."""

    record: RequestRecord | None
    events: tuple[str, ...] = ()  # the decisions this call took (event names of their log lines)
    waiting: str | None = None  # why the observation, or a re-queue, must be looked at again
    requeue_message_id: str | None = None


def apply_observation(ports: Ports, request_id: str, observation: Observation, log: Logger) -> Applied:
    """Decide under compare-and-swap, then carry out what this call decided, and what earlier
    decisions left pending once their deciders are presumed dead."""
    policy = DecisionPolicy.from_settings(ports.settings)
    reading = Reading(policy.patterns.is_stockout, kit_runs, unconfirmed_kit_preemptions)
    seen: list[FleetFacts] = []  # the fleet facts of the record the last decision started from
    # A move's placement and the deadline rule's questions: the fleet's facts read once, if asked.
    placer = attempt_placer(ports)
    folder = folder_progress(ports, log)  # a timeout without a commit heard reads the checkpoint folder

    def transition(record: RequestRecord | None) -> Decided[RequestRecord] | None:
        if record is None:
            return None
        seen[:] = [fleet_facts(record, reading)]
        decision = decide(record, observation, policy, ports.clock(), fleet=placer, folder=folder)
        consider_move(decision.record, observation.job, placer, policy, ports.clock(), decision.effects)
        note_changes(decision.record, ports.clock())  # the requester's notifications, in this write
        return Decided(decision.record, decision)

    swapped = ports.ledger.swap(request_id, transition)
    decision: Decision | None = swapped.decided
    if decision is None or swapped.value is None:
        return Applied(None)
    # What this call's write added; without a write, only what is still open (a wait): then the
    # record stored is the one the last decision started from, whose facts `seen` holds.
    before = seen[0]
    note_fleet(ports, before, swapped.value, reading, observation.happened_by(ports.clock()), log)
    # Not written by this call: another delivery decided (or our own write landed before its
    # reply was lost), so only what is still pending in the record is carried out.
    effects = decision.effects if swapped.wrote else Effects()
    for line in effects.lines:
        log.log(line.severity, line.message, **line.fields)
    # Ours to publish at once only if this call's own write made them pending.
    mine = Mine.NONE
    if effects.alerts or effects.prune_requested:
        mine |= Mine.EFFECTS
    if effects.requeue_decided:
        mine |= Mine.REQUEUE
    own_alerts = [alert.to_json() for alert in effects.alerts]  # not another delivery's, decided just before
    message_id, waiting = flush(ports, swapped.value, log, mine=mine, own_alerts=own_alerts)
    return Applied(swapped.value, effects.events, decision.waiting or waiting, message_id)
