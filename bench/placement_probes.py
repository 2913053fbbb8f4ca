"""Opt-in paid probes for the placement bench (`python -m bench.bench_placement --probes`): the
policy `spotjobs_probes` is spotjobs' placement and rule, its fleet fed also by short Spot jobs
launched where it knows too little, their cost counted in the policy's.

When: at every tick while a request of the fleet is unfinished, a region gets a probe when

- the fleet knows too little of it: nothing seen there for `PROBE_EVERY_HOURS` (the estimate's
  evidence weight `sure` has decayed below `STALE_WEIGHT`; a job waiting or running there keeps it
  fresh), and no probe is live there: at most one probe per region per `PROBE_EVERY_HOURS`;
- it could win: a fresh request's work on Spot there, never waiting nor preempted, would cost less
  than the least expected cost placement finds for it now (`choose_location` on the fleet's
  estimates): where the fleet knows a cheap region no other can beat it, so no probe;
- the fleet has run on Spot somewhere (an estimate with an outlook): before that its first job
  is the first probe;
- the budget allows: the fleet creates at most `PROBES_PER_REQUEST` probes per request started
  (one create, and one probe's minutes, per request); when fewer may go than regions qualify,
  the cheapest Spot goes first.

What: a probe is a Spot job like a request's attempt. It waits for capacity (unbilled) for at
most `PROBE_WAIT_HOURS`, then is cancelled; with capacity it pays the changeover d and runs
`PROBE_RUN_HOURS` more, or until its first preemption, billed at the region's Spot price for
every tick it holds capacity (whole ticks, as the bench bills). It records what an attempt
records: `waiting` at its create, `wait` when it gets capacity, `preempt` and `run` at its end, or
`nocap` when cancelled without capacity. Each probe is one create against Vertex's create quota.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.bench_placement import Attempt, Fleet, Policy, Setup, Spotjobs, at
from shared.fleet.estimate import HALF_LIFE_SECONDS
from shared.fleet.observations import FleetFact, Kind
from shared.fleet.placement import Job, choose_location

PROBE_EVERY_HOURS = 6.0
PROBE_WAIT_HOURS = 1.0
PROBE_RUN_HOURS = 1.0  # after the changeover
PROBES_PER_REQUEST = 1  # the budget: the fleet's probes at most this many per request started
# Nothing seen there for `PROBE_EVERY_HOURS`: the evidence of capacity has decayed below this weight.
STALE_WEIGHT = 0.5 ** (PROBE_EVERY_HOURS * 3600 / HALF_LIFE_SECONDS)


@dataclass
class ProbeLedger:
    """What the probes of one policy's runs cost: creates and billed dollars."""

    probes: int = 0
    cost: float = 0.0


@dataclass
class Probe:
    region: int
    created: int  # trace tick
    key: str
    began: int | None = None  # trace tick it got capacity
    billed: int = 0  # ticks


def probing(ledger: ProbeLedger) -> Callable[[Setup, Fleet], Policy]:
    """The policy `spotjobs_probes`, its probes counted in `ledger`."""

    class SpotjobsProbes(Spotjobs):
        def __init__(self, setup: Setup, fleet: Fleet) -> None:
            super().__init__(setup, fleet)
            self.live: list[Probe] = []
            self.created = 0

        def probe(self, absolute: int, jobs: Sequence[Attempt]) -> None:
            for probe in list(self.live):
                self._step(probe, absolute)
            if all(job.finished for job in jobs):
                return
            s = self.setup
            allowed = PROBES_PER_REQUEST * sum(job.start <= absolute for job in jobs) - self.created
            if allowed < 1:
                return
            candidates = self.candidates(absolute)
            if all(c.estimate.outlook is None for c in candidates):
                return  # the fleet has run on Spot nowhere yet: its first job is the first probe
            probed = {p.region for p in self.live}
            unseen = [i for i, c in enumerate(candidates) if i not in probed and c.estimate.sure < STALE_WEIGHT]
            if not unseen:
                return
            fresh = Job(
                remaining_hours=s.hours(s.work_ticks),
                changeover_hours=s.hours(s.changeover_ticks),
                current_location=None,
                hours_to_deadline=s.hours(s.deadline_ticks),
            )
            least = choose_location(fresh, candidates).costs[0].cost
            # A region's best case: the work and a changeover on Spot, never waiting nor preempted.
            best_case = {i: s.hours(s.work_ticks + s.changeover_ticks) * s.regions[i].spot_per_hour for i in unseen}
            for i in sorted((i for i in unseen if best_case[i] < least), key=best_case.__getitem__)[:allowed]:
                self._create(i, absolute)

        def _create(self, region: int, absolute: int) -> None:
            self.created += 1
            ledger.probes += 1
            probe = Probe(region, absolute, f"probe{ledger.probes}")
            self.live.append(probe)
            self._note(probe, Kind.WAITING, absolute)
            self._step(probe, absolute)

        def _step(self, probe: Probe, absolute: int) -> None:
            """Capacity at this tick: the probe gets it, keeps it and is billed, or ends."""
            s = self.setup
            region = s.regions[probe.region]
            up = region.available[absolute]
            if probe.began is None:
                waited = (absolute - probe.created) * s.gap
                if up:
                    self._note(probe, Kind.WAIT, absolute, waited)
                    probe.began = absolute
                elif waited >= PROBE_WAIT_HOURS * 3600:
                    self._end(probe, Kind.NO_CAPACITY, absolute, waited)
                    return
                else:
                    return
            ran = (absolute - probe.began) * s.gap
            if not up:
                self._note(probe, Kind.PREEMPT, absolute)
                self._end(probe, Kind.RUN, absolute, ran)
            elif probe.billed >= s.changeover_ticks + round(PROBE_RUN_HOURS * 3600 / s.gap):
                self._end(probe, Kind.RUN, absolute, ran)
            else:
                probe.billed += 1
                ledger.cost += region.spot_per_hour * s.hours(1)

        def _end(self, probe: Probe, kind: Kind, absolute: int, seconds: float) -> None:
            self._note(probe, kind, absolute, seconds)
            self.live.remove(probe)

        def _note(self, probe: Probe, kind: Kind, absolute: int, seconds: float = 0.0) -> None:
            region = self.setup.regions[probe.region].name
            self.fleet.note(FleetFact(kind, region, at(absolute, self.setup), seconds, attempt_key=probe.key))

    return SpotjobsProbes
