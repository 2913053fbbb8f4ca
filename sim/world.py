"""The simulated world of one seed: the virtual clock, the stand-ins, the five functions' real
code, and the seeded scheduler that interleaves everything (docs/ARCHITECTURE.md, "The
deterministic simulator").

A run has three phases:
1. **faults**: the workload arrives; every I/O call a handler makes may be hit by a fault (a crash
   before or after it, a 503 before it, a response lost after it, a 429, a lost create);
2. **quiet**: no more faults; the clock runs on for at most `LIVENESS_BOUND` (and the hours Vertex
   held one request's jobs QUEUED) with the reconcile, prune and trigger ticks, until nothing is
   left to do (then liveness is judged);
3. **retention**: the clock jumps on past every retention setting, in six-hour steps with the
   ticks and the state bucket's lifecycle rules (then bounded state is judged).
Invariants (`sim.invariants`) are checked after every step and at the end of phases 2 and 3.

Every handler invocation (a delivery to one of the functions, an operator's command) is a `Task`:
a greenlet that yields to the scheduler before each of its I/O calls, so the scheduler decides at
every call which task goes on, as Cloud Functions' concurrent instances interleave. Each function
has a seeded number of instances, each handling one message at a time.
"""

from __future__ import annotations

import collections
import functools
import io
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from google.api_core import exceptions as api
from greenlet import greenlet

from sim import budgets, durations, flex, replicas, virtual
from sim import faults as permanent
from sim.continuations import with_max_runtimes
from sim.gcs import MemoryStorage
from sim.pubsub import Delivery, SimPubSub
from sim.trainer import CANCEL_SIGTERMS, Trainer, declared_total_steps
from sim.vertex import SimJob, SimVertex, draw_list_page_size, draw_queued_hold, draw_restart_state
from sim.workload import Workload, generate, with_cancels, with_crud_budget, with_locations
from tests.support.lifecycle import Rule, state_bucket_rules

# After faults stop, everything accepted is settled within this (the longest fate of a job is a
# few hours; a line of 100 at 2 creates a minute drains in under one), plus the hours Vertex held
# one request's jobs QUEUED (`queued_hold`: up to 7 h a job, Vertex's time, not the code's; seed
# 5912 needed 9 h more).
LIVENESS_BOUND = timedelta(hours=12)
# A world that is still busy after this many steps of the quiet phase is judged as it stands. A
# step cap, not a time: it must let a hundred requests, some waiting hours through a Spot outage
# (placement's workload), run out their restarts and re-queue within LIVENESS_BOUND (seed 327
# needed about 1,100 quiet steps and was judged, wrongly, mid-re-queue at 1,000).
QUIET_STEPS = 4000
# ... or this many per request the workload brings, if more: a GPU burst of 200 requests, each
# preempted up to six times and re-queued behind a full quota, needs about 6,000 quiet steps to
# settle inside LIVENESS_BOUND (seeds 1486 and 1547 were judged mid-flight at 4,000, an hour in).
QUIET_STEPS_PER_ARRIVAL = 40
RETENTION_STEP = timedelta(hours=12)
KIT_LINES_SHARE = 0.3  # of seeds whose trainer writes the kit's signed lines (sim.trainer)
# Cloud Scheduler's trigger tick (every minute in terraform/scheduler.tf; every five here, which
# only closes windows a little later).
TRIGGER_TICK_SECONDS = 300.0
# Deliveries per retention step and push subscription: the ticks' own and what they publish (a line
# that waits for GPUs for good hands over forever; it is not what retention is about).
RETENTION_DELIVERIES = 60


# The stand-ins' calls that change nothing.
READS = frozenset({"get", "list", "read"})
# How far past the moment something is due the clock moves (`_advance`).
OVERSHOOT_MILLISECONDS = (0, 1, 250)
MAX_OVERSHOOT = timedelta(milliseconds=max(OVERSHOOT_MILLISECONDS))
# The stand-ins whose calls may move what the scheduler waits for (a delivery, a job's change);
# Cloud Storage's never do.
SCHEDULING_SERVICES = frozenset({"pubsub", "vertex"})


class SimCrash(BaseException):  # noqa: N818 - a crash, not an error: nothing may catch it
    """The function instance died: the handler stops where it is, the message is not acknowledged."""


@dataclass(eq=False)
class Task:
    """One handler invocation in flight, as a greenlet. It yields to the scheduler before each I/O
    call (unless `whole`: a hostile delivery runs without a break, because its containment check
    compares the state before and after it; the retention phase's deliveries too)."""

    name: str  # the function, or "operator": what faults and the trace name it by
    body: Callable[[], None]
    faulty: bool  # faults are drawn at its I/O calls (an operator's command draws none)
    whole: bool = False
    wake_at: datetime | None = None  # asleep (a backoff) until then
    lane_at: datetime | None = None  # on a pool's worker (`World.pool`): that worker's own time
    crashed: bool = False
    faults: int = 0  # faults drawn at its calls so far
    faults_before_call: int = 0
    shaken: bool = False  # an irrevocable call of it succeeded: an aftershock is due (sim.faults)
    origin: str = ""  # the message it delivers (a run's redeliveries share it)
    asks: list[tuple[str, datetime]] = field(default_factory=list)  # reconcile's answered asks (`_note_ask`)
    alerts: list[tuple[tuple[Any, ...], int]] = field(default_factory=list)  # (alert, its faults before it)
    refusals: list[tuple[int, int]] = field(default_factory=list)  # (a refusal it met, its faults by then)
    calling: str = ""  # the service of the call it waits to make (its resume makes it)
    started: datetime | None = None  # when it began (`sim.durations`)
    hangs: int = 0  # its Vertex calls that got no reply (`_hang`)
    runner: Any = None  # the greenlet

    def runnable(self, now: datetime) -> bool:
        return self.wake_at is None or self.wake_at <= now


def _note_lookup(world: World, location: str, request_id: str) -> None:
    from sim.invariants import note_lookup

    note_lookup(world, location, request_id)


@dataclass
class Fault:
    ordinal: int  # the n-th fault drawn in this run (what shrinking disables)
    kind: str
    where: str  # service.operation
    at: datetime


@dataclass
class TraceLine:
    at: datetime
    text: str

    def __str__(self) -> str:
        return f"{self.at.strftime('%m-%d %H:%M:%S.%f')[:-3]} {self.text}"


@dataclass
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


@functools.cache
def lifecycle_rules() -> tuple[Rule, ...]:
    """The state bucket's lifecycle rules as terraform/storage.tf declares them (one evaluator,
    shared with the retention tests)."""
    return tuple(state_bucket_rules())


HANDLERS = {
    "submit_job": ("functions.submit", "_handle"),
    "on_job_event": ("functions.events", "_handle"),
    "reconcile": ("functions.reconcile", "_handle"),
    "prune_checkpoints": ("functions.prune", "_handle"),
    "on_trigger": ("sim.world", "on_trigger"),
}


def on_trigger(message: Any, log: Any) -> None:
    """functions.triggers' handler for its own topic (the shell builds it per request)."""
    from shared.triggers.runner import handle_message
    from shared.wiring import ports_for

    handle_message(ports_for("on_trigger"), message, None, log)


class Lanes:
    """The `workers` threads of one pool of `task`, in virtual time: each call runs on the worker
    free first (the lowest on a tie), from that worker's own time (`Task.lane_at`), so the workers'
    round trips overlap and the pool takes its longest worker's time, not the sum of its calls'.
    `join`: the caller waits until the last worker is done (a pool's shutdown)."""

    def __init__(self, world: World, task: Task, workers: int) -> None:
        self._world = world
        self._task = task
        self._outer = task.lane_at  # a pool within a pool's call runs on that call's worker
        self._free = [self._outer or world.clock.now()] * workers

    def run(self, call: Callable[[], Any]) -> Any:
        task = self._task
        worker = self._free.index(min(self._free))
        task.lane_at = self._free[worker]
        try:
            return call()
        finally:
            self._free[worker] = task.lane_at
            task.lane_at = self._outer

    def join(self) -> None:
        world, task = self._world, self._task
        done = max(self._free)
        if self._outer is not None:
            task.lane_at = done  # a pool within a pool's call: its worker goes on from there
        elif done > world.clock.now():
            if world.interleave and not task.whole:
                task.wake_at = done
                world._wait(task)  # noqa: SLF001 - the world's scheduler, as a task's own wait
                task.wake_at = None
            else:
                world.clock.advance_to(done)


@dataclass
class World:
    seed: int
    disabled_faults: frozenset[int] = frozenset()
    disabled_arrivals: frozenset[int] = frozenset()
    no_faults: bool = False  # every fault left out (what shrinking tries first)
    interleave: bool = True  # handlers yield at their I/O calls (shrinking tries whole deliveries)
    max_steps: int | None = None
    verbose: bool = False
    queued_hold: str | None = None  # the `queued_hold` assumption (sim.vertex); None: the seed's draw
    restart_state: str | None = None  # the `restart_state` assumption (sim.vertex); None: the seed's draw
    list_page_size: int | None = None  # the `list_page_size` assumption (sim.vertex); None: the seed's draw
    cancel_sigterm: str = CANCEL_SIGTERMS[0]  # the `cancel_sigterm` assumption (sim.trainer)
    workload: Workload = field(init=False)
    trace: list[TraceLine] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    steps: int = 0
    events: int = 0  # handler invocations and job changes (the benchmark's unit)
    calls_among_others: int = 0  # I/O calls made while another handler was in flight
    # Per request id: when a submit_job instance first took one of its messages (before that it
    # waited for an instance, not for the submission quota).
    first_submitted: dict[str, datetime] = field(default_factory=dict)
    # Per request id, every moment a submit_job instance took one of its messages; per message id,
    # every moment a submit_job delivery of it met the stalled region (`_draw_stall`): a request
    # held there waits for the stall, not the quota, until it is taken again (`quota_bursts`).
    submit_takes: collections.defaultdict[str, list[datetime]] = field(
        default_factory=lambda: collections.defaultdict(list)
    )
    stall_held: collections.defaultdict[str, list[datetime]] = field(
        default_factory=lambda: collections.defaultdict(list)
    )
    changes: int = 0  # writes, job changes, arrivals, ticks and commands so far (see `_check`)
    _changes_checked: int = -1
    phase: str = "faults"
    redriven: set[str] = field(default_factory=set)
    hostile: dict[str, frozenset[str]] = field(default_factory=dict)  # message id -> the requests it may change
    resubmitted: set[str] = field(default_factory=set)  # requests resubmitted (their copy checked)
    copy_calls_left: int | None = None  # a resubmit dies at its copy call when this reaches 0
    # Per request an operator cancelled: how many creates Vertex had received when the cancel ran
    # (the ledger keeps its time to the millisecond; the order of steps is exact).
    creates_before_cancel: dict[str, int] = field(default_factory=dict)
    # Per alert (`invariants.alert_key`): publishes that a fault after them, in the same delivery,
    # may have left unconfirmed, so that a later delivery legitimately publishes it once more.
    unconfirmed_alerts: collections.Counter[tuple[Any, ...]] = field(default_factory=collections.Counter)
    alert_origins: dict[str, str] = field(default_factory=dict)  # alert message id -> the message its task delivered
    # Vertex's refusals (indexes in `SimVertex.refused`: two may be alike) met by a delivery that hit
    # a fault after them: the fault may have cut it short before it said so (`sim.promises.lookups_refused`).
    refusals_cut_short: set[int] = field(default_factory=set)
    # What each invariant read at its last check, where `sim.invariants` checks only what changed.
    checked: dict[str, Any] = field(default_factory=dict)
    # What the out-of-band actors of the permanent faults did (sim.faults): the invariants' excuses.
    tampering: permanent.Tampering = field(default_factory=permanent.Tampering)
    runs: list[Any] = field(default_factory=list)  # the deliveries' runs, as they end (`sim.durations`)
    faults_stopped_at: datetime | None = None  # the quiet phase's start: a stalled region answers again

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self._fault_rng = random.Random(self.seed * 7919 + 1)
        self._aftershock_rng = random.Random(f"{self.seed}:aftershocks:kinds")
        self._hang_rng = random.Random(f"{self.seed}:hangs:calls")  # which Vertex calls hang (`_draw_hang`)
        self._stall_rng = random.Random(f"{self.seed}:stall:calls")  # how a stalled region fails (`_draw_stall`)
        self._shaken: set[str] = set()  # messages an aftershock hit
        self.workload = with_max_runtimes(
            with_crud_budget(with_locations(with_cancels(generate(random.Random(self.seed * 104729 + 2)))))
        )
        self.workload = flex.with_flex_start(self.workload)  # FLEX_START requests (sim/flex.py)
        replicas_drawn = replicas.draw(self.seed)
        self.workload = replicas.with_replicas(self.workload, replicas_drawn)
        self.workload = budgets.with_work_budgets(self.workload)  # beside a deadline or a fallback (sim/budgets.py)
        self.settings = self.workload.settings
        self.clock = virtual.VirtualClock(virtual.EPOCH_OF_SIMULATION)
        self.clock.sleep = self._sleep  # type: ignore[method-assign] # a task's sleep lets others run
        # Cloud Functions' instances per function (max_instance_count), each one message at a time.
        schedule = random.Random(f"{self.seed}:schedule")
        self.instances = {name: schedule.choice((1, 2, 3, 5)) for name in HANDLERS}
        self.concurrent_redelivery_rate = schedule.choice((0.0, 0.02, 0.1))
        # An I/O call's round trip, in seconds: most are quick, some slow.
        self.latencies = schedule.choice(((0.0,), (0.0, 0.02, 0.1), (0.01, 0.05, 0.2, 0.2, 2.0)))
        self._latency = random.Random(f"{self.seed}:latency")
        self.tasks: list[Task] = []  # in flight, suspended at an I/O call or asleep
        self._others: tuple[set[str], datetime | None] | None = None  # `_others_due`, None once moved
        # The running phase's loop, while it steps: its invariants, whether it goes on after a step
        # with the clock at a moment, and the moment it stops at (`_goes_on_alone`).
        self._loop: tuple[Any, Callable[[datetime], bool], Callable[[], datetime | None]] | None = None
        self._current: Task | None = None
        self.storage = MemoryStorage(self.clock.now, io=self.io)
        self.vertex = SimVertex(self.clock.now, self.io, self.rng, self.settings.project)
        self.vertex.emit = self.emit_log_line
        self.vertex.before_create = functools.partial(permanent.delete_record_at_a_create, self)
        self.vertex.replicas = replicas_drawn
        self.vertex.fate = self._draw_fate
        self.vertex.queued_hold = draw_queued_hold(self.seed, self.queued_hold)
        self.vertex.restart_state = draw_restart_state(self.seed, self.restart_state)
        self.vertex.page_size = draw_list_page_size(self.seed, self.list_page_size)
        self.vertex.flex_wait = functools.partial(flex.wait_of, self.workload.seed_text)
        self.vertex.gpu_quota_full = self.workload.gpu_quota_full
        self.vertex.spot_capacity_back = lambda location: self.workload.spot_capacity_back(location, self.clock.now())
        self.trainer = Trainer(
            self.settings,
            self.storage.client,
            lambda: self.storage.objects(self.settings.checkpoint_bucket),
            self.clock.now,
            random.Random(self.seed * 7 + 3),
        )
        self.vertex.runs = self._run_trainer
        self.trainer.emit = functools.partial(self.emit_log_line, task="workerpool0-0")
        self.trainer.kit_lines = random.Random(f"{self.seed}:kit_lines").random() < KIT_LINES_SHARE
        self.trainer.total_steps_of = declared_total_steps(self.workload.arrivals).get
        self.trainer.strides_seed = f"{self.seed}:trainer_strides"
        self.trainer.cancel_sigterm = self.cancel_sigterm
        # Permanent and semantic faults: none when every fault is left out (what shrinking tries first).
        self.permanent = permanent.PermanentFaults() if self.no_faults else permanent.draw(self.seed, self.workload)
        self.fault_rng = random.Random(f"{self.seed}:faults:actors")
        self.vertex.refusals = list(self.permanent.refusals)
        self.vertex.bad_requests = self.permanent.bad_requests
        self.vertex.changeovers = dict(self.permanent.changeovers)
        self.vertex.changeover_rng = random.Random(f"{self.seed}:faults:changeover")
        self.vertex.caller = lambda: self._current.name if self._current else "world"
        self.vertex.sender = lambda: self._current
        self.wasted_lookups: list[str] = []  # sim.invariants.note_lookup
        self.republished: dict[tuple[str, int], list[datetime]] = {}  # sim.promises.note_republish
        self.dead_reconciles: list[datetime] = []  # reconcile deliveries that crashed: sim.budgets
        self.vertex.looked_up = functools.partial(_note_lookup, self)
        self.vertex.met_refusal = self._note_refusal
        self.vertex.noted_ask = self._note_ask
        self.trainer.two_file_stems = self.permanent.two_file_stems
        self.deployed_prices = budgets.shipped_table()  # the functions' price table (`sim.faults.drop_price_row`)
        if not self.no_faults:
            self.workload.operations += permanent.events(self.seed, self.permanent, self.workload)
        self.pubsub = SimPubSub(self.clock.now, self.io, self.rng, refusing=self.workload.refusing_topics)
        self.pubsub.observe = self._observe_publish
        self._ports: dict[str, Any] = {}
        self._fault_count = 0
        self._checked_creates = 0
        self._checked_resumes = 0
        self.log_stream = io.StringIO()
        from shared.log import Logger

        # The functions' lines from ERROR on (`sim.severity` reads them); their warnings too when verbose.
        self.log_level = "WARNING" if self.verbose else "ERROR"
        self.log = Logger(stream=self.log_stream, min_severity=self.log_level)
        self._next_tick = {
            "reconcile": self.clock.now() + timedelta(seconds=self.settings.reconcile_interval_seconds),
            "prune": self.clock.now() + timedelta(hours=1),
        }
        self._arrivals = [a for a in self.workload.arrivals if a.index not in self.disabled_arrivals]
        if self.workload.triggers:  # `spotjobs triggers apply`, before anything arrives
            self._next_tick["triggers"] = self.clock.now() + timedelta(seconds=TRIGGER_TICK_SECONDS)
            bucket = self.storage.client().bucket(self.settings.state_bucket)
            for definition in self.workload.triggers:
                bucket.blob(f"triggers/_definitions/{definition['name']}.json").upload_from_string(
                    json.dumps(definition)
                )

    # Wiring.

    def ports_for(self, function: str) -> Any:
        """`shared.wiring.ports_for` in the sim: one instance per function, as a warm one is."""
        if function not in self._ports:
            from shared.ledger.store import LedgerStore
            from shared.wiring import NOTIFIES, PUBLISHES, Ports

            client = self.storage.client()
            self._ports[function] = Ports(
                settings=self.settings,
                ledger=LedgerStore(client.bucket(self.settings.state_bucket)),
                publisher=self.pubsub.publisher,
                job_service=self.vertex,
                storage=lambda: client,
                clock=self.clock.now,
                topics=frozenset(getattr(self.settings, f) for f in PUBLISHES[function]),
                notifies=function in NOTIFIES,
            )
        return self._ports[function]

    def deployed_price_table(self, path: Any = None) -> dict[str, Any]:
        """`shared.requests.pricing.table` of the functions deployed: as shipped, unless a deployment
        dropped a row (`sim.faults.drop_price_row`)."""
        return self.deployed_prices

    def write_process_line(self, text: str) -> None:
        """What the process-wide logger writes (`shared.log.logger`, any `Logger` without a stream
        of its own; `sim.virtual` points its stderr here): into the world's log, each line bound
        to the function and message of the task that wrote it, as `handle_delivery` binds the
        handlers' own lines."""
        task = self._current
        for line in text.splitlines():
            entry = json.loads(line)
            if task is not None:
                entry.setdefault("function", task.name)
                if task.origin:
                    entry.setdefault("message_id", task.origin)
            self.log_stream.write(json.dumps(entry, default=str, separators=(",", ":")) + "\n")

    def note(self, text: str) -> None:
        self.trace.append(TraceLine(self.clock.now(), text))

    # The io hook every stand-in calls.

    def io(
        self,
        service: str,
        operation: str,
        perform: Callable[[], Any],
        *,
        timeout: float | None = None,
        location: str = "",
    ) -> Any:
        """One I/O call of a stand-in: the scheduler's turn, then the call or its fault. `timeout`:
        the one the code passed (Vertex's calls), which a hang waits out; `location`: a Vertex
        call's, which a stalled region fails (`_draw_stall`)."""
        task = self._current
        if operation not in READS:
            self.changes += 1
        if task is not None:
            self._pause(task, service)
            if task.crashed:
                raise SimCrash("the instance is gone")
            task.faults_before_call = task.faults  # a fault of this very call comes after what it does
        if self.copy_calls_left is not None and (service, operation) == ("gcs", "copy"):
            self.copy_calls_left -= 1
            if self.copy_calls_left == 0:
                self.note("fault: the resubmit command dies at this copy call")
                raise SimCrash("the command died while copying")
        fault = (
            self._draw_stall(task, service, operation, location)
            or self._draw_aftershock(task, service, operation)
            or self._draw_fault(task, service, operation)
            or self._draw_hang(task, service, operation)
        )
        if fault is None:
            result = perform()
            if task is not None and (service, operation) in permanent.IRREVOCABLE and self.permanent.aftershock:
                task.shaken = True
            return result
        if fault.kind == "crash_before":
            self._crash(fault)
        if fault.kind == "hang":
            self._hang(fault, perform, timeout)
        if fault.kind == "unavailable":
            raise api.ServiceUnavailable(f"injected 503 on {fault.where}")
        if fault.kind == "too_many_requests":
            raise api.TooManyRequests(f"injected 429 on {fault.where}: Quota exceeded (CRUD)")
        result = perform()
        if fault.kind == "crash_after":
            self._crash(fault)
        if fault.kind == "lost":
            if service == "vertex":
                raise api.DeadlineExceeded(f"the response of {fault.where} was lost")
            raise api.ServiceUnavailable(f"the response of {fault.where} was lost after it happened")
        return result

    def _crash(self, fault: Fault) -> None:
        assert self._current is not None  # faults are drawn only in a task
        self._current.crashed = True
        raise SimCrash(f"crash {fault.kind} {fault.where}")

    def _draw_aftershock(self, task: Task | None, service: str, operation: str) -> Fault | None:
        """The transient fault due after an irrevocable call (`sim.faults`, `aftershocks`): once per
        message, in the faulty phase, and after it in prune runs only."""
        if task is None or not task.shaken or not task.faulty or self.no_faults or task.origin in self._shaken:
            return None
        if self.phase != "faults" and task.name != "prune_checkpoints":
            return None  # later, only a prune run's: the other handlers' later work is to settle
        if (service, operation) in permanent.IRREVOCABLE:
            return None  # the effect goes on (a run deleting object after object): the window is after it
        if self.permanent.aftershock == "next_publish" and (service, operation) != ("pubsub", "publish"):
            return None
        task.shaken = False
        self._shaken.add(task.origin)  # once per message: its redelivery goes on
        return self._fault(task, self._aftershock_rng.choice(permanent.AFTERSHOCK_KINDS), service, operation)

    def _draw_fault(self, task: Task | None, service: str, operation: str) -> Fault | None:
        if task is None or not task.faulty or self.phase != "faults" or self.no_faults:
            return None
        if self._fault_rng.random() >= self.workload.fault_rate:
            return None
        kinds = ["crash_before", "crash_after", "unavailable", "lost"]
        if service == "vertex" and operation != "create":
            kinds.append("too_many_requests")
        return self._fault(task, self._fault_rng.choice(kinds), service, operation)

    def _draw_hang(self, task: Task | None, service: str, operation: str) -> Fault | None:
        """A Vertex call that never answers (`sim.faults` `hangs`): in a hanging seed's faulty
        phase, from a generator of its own (every other draw of the seed stays)."""
        if service != "vertex" or not self.permanent.hangs or task is None or not task.faulty:
            return None
        if self.phase != "faults" or self.no_faults or self._hang_rng.random() >= permanent.HANG_CALL_RATE:
            return None
        return self._fault(task, "hang", service, operation)

    def _draw_stall(self, task: Task | None, service: str, operation: str, location: str) -> Fault | None:
        """Every Vertex call of a handler to the stalled region (`sim.faults` `region_stalled`) in
        the faulty phase: one that runs out its timeout (a hang) or a 503, from a generator of its own."""
        stall = self.permanent.stall
        if stall is None or service != "vertex" or location != stall.location or task is None or not task.faulty:
            return None
        if self.phase != "faults" or self.no_faults:
            return None
        kind = "hang" if self._stall_rng.random() < stall.timeout_share else "unavailable"
        fault = self._fault(task, kind, service, f"{operation} in stalled {location}")
        if fault is not None and task.name == "submit_job":
            self.stall_held[task.origin].append(fault.at)
        return fault

    def _hang(self, fault: Fault, perform: Callable[[], Any], timeout: float | None) -> None:
        """No reply: the call reached Vertex and was done, or never arrived; the client waits out
        the timeout the code passed (others run, the clock moves on by it) and raises
        DeadlineExceeded. Without a timeout it waits until the function's own timeout kills the
        instance (`sim.hangs.vertex_calls_bounded` fails the seed for the call)."""
        assert self._current is not None  # faults are drawn only in a task
        self._current.hangs += 1
        if self._hang_rng.random() < permanent.HANG_PERFORMED_SHARE:
            answered = len(self._current.asks)
            perform()  # an error Vertex answers with is a reply: it comes back as it is
            # Its listing never reached the pass, which decided on none of it: no ask (seed 20835).
            del self._current.asks[answered:]
        if timeout is None or timeout <= 0:
            self._crash(fault)
        self._sleep(timeout)
        raise api.DeadlineExceeded(f"no reply to {fault.where} within its {timeout:g} s timeout")

    def _fault(self, task: Task, kind: str, service: str, operation: str) -> Fault | None:
        self._fault_count += 1
        task.faults += 1
        if self._fault_count in self.disabled_faults:
            return None
        fault = Fault(self._fault_count, kind, f"{service}.{operation}", self.clock.now())
        self.faults.append(fault)
        self.note(f"fault #{fault.ordinal}: {kind} at {fault.where} in {task.name}")
        return fault

    def _observe_publish(self, message: Any) -> None:
        from sim.invariants import alert_key

        body = message.json()
        task = self._current
        if task and message.topic == self.settings.ops_alerts_topic:
            self.alert_origins[message.message_id] = task.origin
        if task and task.name == "reconcile" and message.topic == self.settings.job_requests_topic:
            from sim.promises import note_republish

            note_republish(self, message)
        if task and task.faulty and message.topic == self.settings.ops_alerts_topic and isinstance(body, dict):
            task.alerts.append((alert_key(body), task.faults_before_call))
            if body.get("kind") == "ledger_corrupt" and len(self.tasks) > 1:
                # Published first and noted after (shared/deciding/outbox.py): a delivery in flight
                # beside this one may have looked before the note, and publishes it too.
                self.unconfirmed_alerts[alert_key(body)] += 1

    def _count_unconfirmed_alerts(self, task: Task) -> None:
        """A delivery that hit a fault after it published an alert may have died (or failed, and
        been acknowledged by a handler that reports per record, as reconcile does) between that
        publish and its confirmation in the ledger: at-least-once lets a later one publish it again."""
        for key, faults_before in task.alerts:
            if task.faults > faults_before:
                self.unconfirmed_alerts[key] += 1
        task.alerts = []

    def _note_ask(self, location: str, at: datetime) -> None:
        """Reconcile's ask answered: kept with its pass until the pass ends (`_handle`)."""
        if self._current is None:
            self.vertex.asked[location].append(at)
        else:
            self._current.asks.append((location, at))

    def _note_refusal(self, index: int) -> None:
        task = self._current
        if task is not None and task.faulty:
            task.refusals.append((index, task.faults))

    def _note_cut_short(self, task: Task) -> None:
        """A delivery that hit a fault after Vertex refused one of its calls may have died (or
        failed, and been acknowledged by a handler that reports per record, as reconcile does)
        before it decided what the refusal owes."""
        self.refusals_cut_short.update(index for index, faults_by_then in task.refusals if task.faults > faults_by_then)
        task.refusals = []

    # Tasks: handler invocations as greenlets, resumed by the scheduler.

    def _pause(self, task: Task, service: str) -> None:
        """Yield to the scheduler before an I/O call; back when the scheduler resumes `task`. The
        call's round trip takes a seeded time, during which others run and the clock moves on."""
        if len(self.tasks) > 1:
            self.calls_among_others += 1
        if self.interleave and not task.whole:
            task.wake_at = self._after(task, self._latency.choice(self.latencies))
            task.calling = service
            self._wait(task)
            task.wake_at = None
            task.calling = ""

    def _sleep(self, seconds: float) -> None:
        """A sleep in a task lets the others run until it wakes; elsewhere it moves the clock."""
        task = self._current
        if seconds > 0 and task is not None and self.interleave and not task.whole:
            task.wake_at = self._after(task, seconds)
            self._wait(task)
            task.wake_at = None
        elif seconds > 0 and task is not None and task.lane_at is not None:
            task.lane_at += timedelta(seconds=seconds)
            self.clock.advance_to(task.lane_at)
        elif seconds > 0:
            self.clock.advance(seconds)

    def _after(self, task: Task, seconds: float) -> datetime | None:
        """When `task` wakes from a wait of `seconds` (a round trip, a sleep), None for at once. On
        a pool's worker the wait runs on that worker's own time (`lane_at`), which the other
        workers' waits do not hold up: it may end before now."""
        if task.lane_at is None:
            return self.clock.now() + timedelta(seconds=seconds) if seconds else None
        task.lane_at += timedelta(seconds=seconds)
        return task.lane_at if task.lane_at > self.clock.now() else None

    def pool(self, workers: int, calls: list[Callable[[], Any]]) -> list[Any]:
        """`calls` as a ThreadPoolExecutor's `workers` threads of one instance run them (the
        functions' pools: `sim.virtual.SyncExecutor`'s `map`): each on the worker free first
        (`Lanes`), and the caller goes on when the last worker is done. The calls still run one
        after another, in order (the same draws on replay): a later call's first reads may see the
        clock an earlier one moved."""
        lanes = self.lanes(workers)
        if lanes is None or not calls:
            return [call() for call in calls]
        results = [lanes.run(call) for call in calls]
        lanes.join()
        return results

    def lanes(self, workers: int) -> Lanes | None:
        """The workers of a pool of the current task (None outside a task, or for one worker: its
        calls run one after another on the task's own time)."""
        task = self._current
        if task is None or workers <= 1:
            return None
        return Lanes(self, task, workers)

    def _wait(self, task: Task) -> None:
        """Back to the scheduler until it resumes `task`, unless it would resume it next anyway."""
        if not self._goes_on_alone(task):
            task.runner.parent.switch()

    def _goes_on_alone(self, task: Task) -> bool:
        """Make here, without a switch, the steps the scheduler would make next when they can only
        lead back to `task`: the phase's loop checks the invariants and goes on; nothing else is
        due before `task` wakes (nor 250 ms after, the most the clock overshoots a wake); the
        clock moves to its wake; `task` is the one task to resume. The same draws, in the same
        order, as those steps: a seed runs as it would with the switch. False (nothing done but
        the check the loop would make first) when anything else might happen."""
        loop = self._loop
        if loop is None:
            return False
        invariants, goes_on, until = loop
        self._current = None  # the check reads as the scheduler does, outside any task
        try:
            self._check(invariants, "step")
        finally:
            self._current = task
        now = self.clock.now()
        if not goes_on(now):
            return False
        if self._others is None:
            self._others = self._others_due()
        others_at = self._others[1]
        wake = task.wake_at
        if wake is None:
            if (others_at is not None and others_at <= now) or any(
                other.runnable(now) for other in self.tasks if other is not task
            ):
                return False
        else:
            latest = wake + MAX_OVERSHOOT
            if (
                (others_at is not None and others_at <= latest)
                or any(other.wake_at is None or other.wake_at <= latest for other in self.tasks if other is not task)
                or ((bound := until()) is not None and wake > bound)
                or not goes_on(latest)
            ):
                return False
            self._move_clock_to(wake)  # the step `_advance` would make (not counted: a round trip)
        self.rng.choice((task,))
        if task.calling in SCHEDULING_SERVICES or task.name == "operator":
            self._schedule_moved()  # as `_resume` would
        return True

    def _start(self, task: Task) -> None:
        task.started = self.clock.now()
        task.runner = greenlet(task.body)
        self.tasks.append(task)
        self._schedule_moved()  # one more busy instance
        self._resume(task)

    def _resume(self, task: Task) -> None:
        """Run `task` until its next I/O call, its sleep or its end."""
        if task.calling in SCHEDULING_SERVICES or task.name == "operator":
            # A publish, a Vertex call (a create draws its job's fate, a cancel its change), or an
            # operator's command, which moves jobs and messages by hand (sim.faults, sim.workload).
            self._schedule_moved()
        outer, self._current = self._current, task
        try:
            task.runner.switch()
        finally:
            self._current = outer
        if task.runner.dead:  # its verdict was settled with Pub/Sub (maybe dead-lettered)
            self.tasks.remove(task)
            self.changes += 1
            self._schedule_moved()

    def _finish_tasks(self) -> None:
        """Run every task in flight to its end, in order (before time jumps on in retention)."""
        while self.tasks:
            task = self.tasks[0]
            task.whole, task.wake_at = True, None
            self._resume(task)

    def _busy(self) -> set[str]:
        """The functions every instance of which is handling a message."""
        in_flight: dict[str, int] = {}  # a plain count: a Counter per step cost more than the step
        for task in self.tasks:
            in_flight[task.name] = in_flight.get(task.name, 0) + 1
        return {name for name, count in in_flight.items() if count >= self.instances.get(name, count + 1)}

    # Vertex running jobs: fates and the log sink.

    def _draw_fate(self, job: SimJob) -> None:
        spec = self.workload.fate_of(job.request_id, job.attempt)
        job.fate, job.preemptions = spec
        job.next_change = self.clock.now() + timedelta(seconds=self.rng.choice((5, 30, 90)))
        self.note(f"vertex: created {job.name.rsplit('/', 1)[-1]} for {job.request_id} a{job.attempt} fate={job.fate}")

    def _run_trainer(self, job: SimJob, what: str) -> None:
        if what == "start":
            self.trainer.start(job)
            resume = self.trainer.resumes[-1]
            self.note(
                f"trainer: {job.request_id} a{job.attempt} resumes from "
                + (f"{resume.resumed[0]} (step {resume.resumed[1]})" if resume.resumed else "nothing: step 0")
            )
        elif what == "stop":
            self.trainer.stop(job)
        elif what == "stall":  # ran into its timeout without a save (sim/continuations.py)
            pass
        elif self.trainer.train(job, ends_in_a_cut=what == "cut") and what == "cut":
            # Its trainer committed the declared total and exited 0 before the preemption or failure.
            job.fate, job.preemptions = "succeed", 0
            self.note(f"trainer: {job.request_id} a{job.attempt} finished its total steps: the job succeeds")

    def emit_log_line(
        self, job: SimJob, text: str, severity: str, *, forged: bool = False, task: str = "service"
    ) -> str:
        """A line of `job`'s logs, routed by the log sink to job-events; its message id."""
        entry = {
            "insertId": f"sim-{self.pubsub.next_id}-{job.name.rsplit('/', 1)[-1][-6:]}",  # one per entry
            "logName": f"projects/{self.settings.project}/logs/ml.googleapis.com%2F{job.name.rsplit('/', 1)[-1]}",
            "resource": {
                "type": "ml_job",
                "labels": {
                    "project_id": self.settings.project,
                    "job_id": job.name.rsplit("/", 1)[-1],
                    "task_name": task,
                },
            },
            "severity": severity,
            "timestamp": self.clock.now().isoformat().replace("+00:00", "Z"),
            "textPayload": text,
        }
        who = "hostile job, as" if forged else "vertex:"
        self.note(f"{who} {job.request_id} a{job.attempt} {job.state}: {text[:160]}")
        return self.pubsub.accept(self.settings.job_events_topic, json.dumps(entry).encode(), {})

    # The scheduler.

    def run(self) -> list[Violation]:
        """The whole run; the violations found (the first one stops it)."""
        from sim import invariants

        virtual.install(self)
        try:
            self._phase_faults(invariants)
            if not self.violations:
                self._phase_quiet(invariants)
            if not self.violations:
                self._phase_retention(invariants)
        finally:
            virtual.uninstall()
        return self.violations

    def _check(self, invariants: Any, which: str) -> None:
        if self.violations:
            return
        if which == "step":
            # The step invariants read only what a write, a job's change, a publish or a save
            # changes, never the clock: a step that only read (most resumed calls) finds nothing new.
            if self.changes == self._changes_checked:
                return
            self._changes_checked = self.changes
        self.violations.extend(invariants.check(self, which))
        for violation in self.violations:
            self.note(f"VIOLATION {violation}")

    def _phase_faults(self, invariants: Any) -> None:
        end = self.workload.duration
        limit = self.max_steps or self.workload.max_steps

        def until() -> datetime | None:
            return self.clock.now() + end if not self._arrivals else None

        def goes_on(at: datetime) -> bool:  # after a step, with the clock at `at`
            ended = not self._arrivals and at - virtual.EPOCH_OF_SIMULATION >= end
            return not ended and not self.violations and self.steps < limit

        self._loop = (invariants, goes_on, until)
        while not self.violations and self.steps < limit:
            if not self._step(until()):
                break
            self._check(invariants, "step")
            if not self._arrivals and self.clock.now() - virtual.EPOCH_OF_SIMULATION >= end:
                break
        self._loop = None

    def _phase_quiet(self, invariants: Any) -> None:
        self.phase = "quiet"
        self.vertex.gpu_quota_full = self.workload.gpu_quota_full and self.workload.gpu_quota_forever
        self.note("faults stop")
        quiet_began = self.faults_stopped_at = self.clock.now()
        budget = self.steps + max(QUIET_STEPS, QUIET_STEPS_PER_ARRIVAL * len(self.workload.arrivals))

        def bound() -> datetime:  # a hold drawn for a job created later moves it on
            return quiet_began + LIVENESS_BOUND + timedelta(seconds=self.vertex.longest_held_queued)

        def goes_on(at: datetime) -> bool:  # after a step, with the clock at `at`
            return not self._settled() and not self.violations and at < bound() and self.steps < budget

        self._loop = (invariants, goes_on, bound)
        while not self.violations and self.clock.now() < bound() and self.steps < budget:
            if not self._step(until=bound()):
                break
            self._check(invariants, "step")
            if self._settled():
                break
        self._loop = None
        self._check(invariants, "quiescence")

    def _phase_retention(self, invariants: Any) -> None:
        self.phase = "retention"
        self.note("retention: the clock runs on past every retention setting")
        horizon = self.clock.now() + timedelta(seconds=invariants.retention_horizon_seconds(self.settings))
        self._finish_tasks()
        while self.clock.now() < horizon and not self.violations:
            self.clock.advance(RETENTION_STEP.total_seconds())
            for task in self._next_tick:
                self._tick(task)
            self._drain(limit=RETENTION_DELIVERIES)
            self._check(invariants, "step")
        self._check(invariants, "retention")

    def _drain(self, limit: int) -> None:
        """Deliver what is due now (and what that publishes), in order, at most `limit` a push
        subscription: each delivers on its own, so a backlog on one (a quota line handing over for
        good) never holds back another's (the reconcile tick's, whose pass runs the ledger sweep)."""
        delivered: collections.Counter[str] = collections.Counter()
        while True:
            due = next((d for d in self.pubsub.deliverable() if delivered[d.subscription] < limit), None)
            if due is None:
                return
            delivered[due.subscription] += 1
            self._deliver(due, whole=True)

    def _settled(self) -> bool:
        if self._arrivals or self.pubsub.pending or self.tasks:
            return False
        if any(job.live for job in self.vertex.jobs.values()):
            return False
        from sim.invariants import unsettled_requests

        return not unsettled_requests(self)

    def _step(self, until: datetime | None) -> bool:
        """One scheduling decision: an arrival, a delivery, a tick or a job change that is due
        now (chosen at random among them), else the clock moves to the next one. False when
        nothing will ever happen again (before `until`)."""
        self.steps += 1
        now = self.clock.now()
        if self._others is None:
            self._others = self._others_due()
        busy, others_at = self._others
        if others_at is None or others_at > now:
            # Only the tasks may go on (most steps: one task between its calls). The draw is the
            # one the whole list below would make, which would hold the same tasks in this order.
            runnable = [task for task in self.tasks if task.runnable(now)]
            if runnable:
                self.steps -= 1  # not a step: a task going on to its next call
                self._resume(self.rng.choice(runnable))
                return True
            wakes = [task.wake_at for task in self.tasks if task.wake_at]
            return self._advance(min([*wakes, others_at] if others_at else wakes, default=None), until)
        arrival = next((a for a in self._arrivals if a.at <= now), None)
        choices: list[tuple[str, Any]] = [("arrival", arrival)] if arrival is not None else []
        choices += [("deliver", d) for d in self.pubsub.deliverable() if d.function not in busy]
        choices += [("resume", task) for task in self.tasks if task.runnable(now)]
        choices += [("tick", task) for task, at in self._next_tick.items() if at <= now]
        choices += [("job", j) for j in self.vertex.jobs.values() if j.next_change and j.next_change <= now]
        choices += [("operator", op) for op in self.workload.operations if op.at <= now and not op.done]
        kind, what = self.rng.choice(choices)
        if kind == "resume":
            self.steps -= 1
            self._resume(what)
            return True
        self.changes += 1  # an arrival, a job's change, a tick, a command: the world moved
        self._others = None
        if kind == "arrival":
            self._arrivals.remove(what)
            topic = getattr(self.settings, what.topic)
            message_id = self.pubsub.accept(topic, what.data, dict(what.attributes))
            if what.own is not None:
                self.hostile[message_id] = what.own
            self.note(f"publisher: {what.describe()} -> message {message_id}")
        elif kind == "deliver":
            self._deliver(what)
        elif kind == "tick":
            self._tick(what)
        elif kind == "job":
            self.events += 1
            self.vertex.advance(what)
        else:
            what.done = True
            self._operate(what)
        return True

    def _others_due(self) -> tuple[set[str], datetime | None]:
        """The functions whose every instance is busy, and the earliest moment anything but a
        task in flight is due: an arrival, a delivery to a function with an instance free, a
        tick, a job's change, an operator's command. Kept in `_others` until one of them may
        have moved (`_schedule_moved`): most steps only resume a task."""
        busy = self._busy() if self.pubsub.pending else set()  # only a delivery waits for an instance
        moments = [a.at for a in self._arrivals]
        moments += [d.not_before for d in self.pubsub.pending if d.function not in busy]
        moments += self._next_tick.values()
        moments += [j.next_change for j in self.vertex.jobs.values() if j.next_change]
        moments += [op.at for op in self.workload.operations if not op.done]
        return busy, min(moments, default=None)

    def _schedule_moved(self) -> None:
        self._others = None

    def _advance(self, nxt: datetime | None, until: datetime | None) -> bool:
        """Move the clock to `nxt`, the next moment anything is due; False when there is none (before `until`)."""
        if nxt is None or (until is not None and nxt > until):
            return False
        if any(task.wake_at == nxt for task in self.tasks):
            self.steps -= 1  # a call's round trip: not a scheduling step of its own
        self._move_clock_to(nxt)
        return True

    def _move_clock_to(self, moment: datetime) -> None:
        # A little past it, so that things due at once interleave with what the clock brings.
        self.clock.advance_to(moment + timedelta(milliseconds=self.rng.choice(OVERSHOOT_MILLISECONDS)))

    def _tick(self, task: str) -> None:
        """Cloud Scheduler publishing a maintenance task (terraform/scheduler.tf). With the hourly
        prune tick, the state bucket's lifecycle rules run (GCS applies them asynchronously)."""
        self._schedule_moved()
        if task == "prune":
            self.storage.apply_lifecycle(self.settings.state_bucket, list(lifecycle_rules()))
        interval = self.settings.reconcile_interval_seconds if task == "reconcile" else 3600.0
        self._next_tick[task] = self.clock.now() + timedelta(seconds=interval)
        # The triggers' tick goes to on_trigger's own topic; reconcile and prune share maintenance.
        topic = self.settings.triggers_topic if task == "triggers" else self.settings.maintenance_topic
        self.pubsub.accept(topic, json.dumps({"task": task}).encode(), {"task": task})

    def _deliver(self, delivery: Delivery, *, whole: bool = False) -> None:
        """Push `delivery` to an instance of its function: a task from here on."""
        from sim import invariants

        self.events += 1
        self._schedule_moved()
        own = self.hostile.get(delivery.message.message_id)
        before = invariants.others_state(self, own) if own is not None else None
        body = delivery.message.json()
        if delivery.function == "submit_job" and isinstance(body, dict) and isinstance(body.get("request_id"), str):
            self.first_submitted.setdefault(body["request_id"], self.clock.now())
            self.submit_takes[body["request_id"]].append(self.clock.now())
        again = self.phase == "faults" and self.rng.random() < self.concurrent_redelivery_rate
        self.pubsub.take(delivery, again_meanwhile=again)
        if again:
            self.note(f"pubsub: message {delivery.message.message_id} pushed again while its delivery runs")
        task = Task(delivery.function, lambda: None, faulty=True, whole=whole or before is not None)
        task.origin = delivery.message.message_id
        task.body = functools.partial(self._handle, task, delivery, own, before)
        self._start(task)

    def _handle(self, task: Task, delivery: Delivery, own: frozenset[str] | None, before: Any) -> None:
        """One delivery, from the push to Pub/Sub's verdict (the body of its task)."""
        from shared.delivery import handle_delivery
        from sim import invariants

        module_name, attribute = HANDLERS[delivery.function]
        handler = getattr(__import__(module_name, fromlist=[attribute]), attribute)
        max_age = float("inf") if delivery.function == "submit_job" else self.settings.max_event_age_seconds
        acked = died = False
        outcome = "acked"
        try:
            handle_delivery(
                delivery.message.push_body(delivery.subscription),
                handler,
                function=delivery.function,
                max_age_seconds=max_age,
                log=self.log,
            )
            acked = True
        except SimCrash as crash:
            outcome = f"crashed ({crash})"
            died = True
            if delivery.function == "reconcile":
                self.dead_reconciles.append(self.clock.now())
        except Exception as exc:  # noqa: BLE001 - a raise is a nack: Pub/Sub redelivers
            outcome = f"nacked ({type(exc).__name__}: {str(exc)[:120]})"
        finally:
            self._count_unconfirmed_alerts(task)
            self._note_cut_short(task)
            durations.note_run(self, task)
        if not died:  # a pass that died decided on nothing it listed
            for location, at in task.asks:
                self.vertex.asked[location].append(at)
        duplicate = acked and self.phase == "faults" and self.rng.random() < self.workload.duplicate_rate
        delivery_number = delivery.attempts + 1
        self.pubsub.settle(delivery, acked, duplicate)
        if self.verbose or delivery.function != "on_job_event" or not acked:
            self.note(
                f"{delivery.function} <- message {delivery.message.message_id} "
                f"{_summary(delivery)} (delivery {delivery_number}): {outcome}"
                + (" [will be delivered again]" if duplicate else "")
            )
        if before is not None and not self.violations:
            after = invariants.others_state(self, own or frozenset())
            self.violations += invariants.hostile_step_contained(self, before, after)
            for violation in self.violations:
                self.note(f"VIOLATION {violation}")
            # A request id nobody had used is the publisher's: its next deliveries may go on with it.
            self.hostile[delivery.message.message_id] = (own or frozenset()) | invariants.records_created(before, after)
        if not acked and delivery not in self.pubsub.pending:
            self.note(f"dead-lettered message {delivery.message.message_id} from {delivery.subscription}")

    def _operate(self, operation: Any) -> None:
        """An operator's command (redrive the dead letters, resubmit, cancel): a task of its own,
        interleaved with the deliveries at its I/O calls, drawing no faults (a resubmit may die at
        a copy call, `copy_calls_left`)."""
        self.note(f"operator: {operation.describe()}")
        task = Task("operator", lambda: None, faulty=False)
        task.body = functools.partial(self._run_operation, operation)
        self._start(task)

    def _run_operation(self, operation: Any) -> None:
        try:
            operation.run(self)
        except SimCrash as crash:
            self.note(f"operator: {operation.describe()} died ({crash})")


def _summary(delivery: Delivery) -> str:
    body = delivery.message.json()
    if isinstance(body, dict):
        if "task" in body:
            return f"task={body['task']}"
        if "request_id" in body:
            extra = f" attempt={body['attempt']}" if "attempt" in body else ""
            return f"request {body['request_id']}{extra}"
        if "textPayload" in body:
            return f"log line '{body['textPayload'][:40]}'"
    return f"{len(delivery.message.data)} bytes"
