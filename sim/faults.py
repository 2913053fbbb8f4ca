"""Permanent and semantic faults (issue 43, item 2): what production answers for good, and what
people and other versions do to the world behind the code's back. Each kind is drawn per seed
with its own small rate from `random.Random(f"{seed}:faults:permanent")` (and its events from
generators of their own), so a seed without it keeps every other draw it had.

- `forbidden`: a 403 (PermissionDenied) on one call kind (get, list, cancel, create) in one
  location, from a moment on, for good or until an operator grants the permission again;
- `bad_request`: a 400 (InvalidArgument) on every create of one request: a verdict on the job;
- `job_deleted`: someone deletes a job in the console (a live one is cancelled first, and deleted
  once it ended: Vertex deletes no running job); NotFound on every later get and cancel, gone
  from every list;
- `job_cancelled`: someone cancels a live job in the console;
- `document_written`: someone (a person, or an older or newer version) writes a ledger record, a
  trigger's state or a fleet fact in a shape from `SHAPES`;
- `object_deleted`: a person deletes a request's ledger record, or an old checkpoint (older than
  its folder's two newest finished ones: what a run resumes from stays); in `DELETED_AT_A_CREATE_RATE`
  of those seeds (a generator of its own), also once at its worst moment, a record whose create is
  on its way to Vertex while another delivery of the request runs (`delete_record_at_a_create`);
- `republished_after_deletion` (drawn from a generator of its own): a person deletes the record of
  a request whose job is live and publishes the request again under its id (the id is theirs to
  reuse); that job takes its time to end once cancelled (`SLOW_END_SECONDS`: Vertex's cancel is
  asynchronous and best effort, with no bound documented), longer than the message's five
  deliveries, so the message may be dead-lettered and come back by a redrive (seed 10182's gap):
  the request owes a record (`sim.invariants.liveness`) unless a person deleted it again;
- `regional_changeovers`: the wait before RUNNING (and after a preemption) differs per location,
  with rare slow outliers (`sim.vertex.SimVertex.changeover`);
- `two_file_stems`: the torch layout saves two files per stem (`ckpt-000400.pt` and
  `ckpt-000400.optim.pt`), a cut save torn between them (`sim.trainer`);
- `job_duplicated` (drawn from a generator of its own): someone re-runs a live job's create in
  the console, labels and all: a second job of that attempt, queued for good (it never gets a
  machine, so it trains nothing), or running from its create (`DUPLICATE_RUNS_SHARE`: billed by
  Vertex, its container writing nothing before its cancel), which reconcile's stray sweep must
  cancel and alert (`stray_job`) and its request's bill hold (`billed_as_vertex_ran`);
- `absurd_lines`: a job writes lines about its own attempt, signed with its own key, that no run
  could write (`run=999`, `step=10**15`, negative numbers, times far in the future);
- `price_row_dropped` (drawn from a generator of its own): a deployment ships a price table
  without one row (a machine type in a location) that a budgeted request of the workload may run
  on, from a moment on, for good: the functions price with it (`World.deployed_prices`), so a
  budget's spend there is unknown and its watch must fail closed (`budget_unpriced`); the
  invariants price what Vertex ran with the table as shipped (`sim.budgets.shipped_price`);
- `hangs` (a transient fault, drawn from a generator of its own): a Vertex call of a handler
  that never answers (`HANG_CALL_RATE` of them, in the faulty phase): Vertex got it or it never
  arrived, and the client raises DeadlineExceeded once the timeout the code passed ran out, the
  clock moved on by it (`World._hang`); a call without a timeout waits until the function's own
  timeout kills the instance (and `sim.hangs.vertex_calls_bounded` fails the seed);
- `region_stalled` (drawn from a generator of its own): one location's Vertex API stalls for the
  whole faulty phase: every call a handler sends there (a list's every page too) runs out its
  timeout (as a hang: done at Vertex or never arrived) or answers 503, the share of timeouts
  drawn per seed (`STALL_TIMEOUT_SHARES`), each call from a generator of its own (`World._draw_stall`);
  it answers again in the quiet phase;
- `aftershocks` (a transient fault, drawn from a generator of its own): after a call the code
  cannot take back (`IRREVOCABLE`: a Vertex create or cancel, a GCS delete), a handler's next call
  (`next_call`) or its next publish (`next_publish`: an alert, a run's report) fails, once per
  message, in the faulty phase and in every later phase's prune runs: the window where what the
  effect owes (its record, its alert, its report) may be lost.

The world keeps what these did (`Tampering`), so that an invariant excuses exactly the requests
a fault touched, naming the fault, and the alert catalogue expects the alert the fault calls for.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from shared.ledger.records import Attempt
    from sim.trainer import Save
    from sim.workload import Workload
    from sim.world import World

# The share of `object_deleted` seeds whose person also deletes a record while its create is out.
DELETED_AT_A_CREATE_RATE = 0.5
# The share of seeds that draw each kind.
RATES = {
    "forbidden": 0.06,
    "bad_request": 0.06,
    "job_deleted": 0.08,
    "job_cancelled": 0.08,
    "document_written": 0.1,
    "object_deleted": 0.08,
    "regional_changeovers": 0.3,
    "two_file_stems": 0.3,
    "absurd_lines": 0.08,
}
FORBIDDEN_CALLS = ("get", "list", "cancel", "create")
# Calls whose effect stays whatever happens next, and what an aftershock hits after one.
IRREVOCABLE = frozenset({("vertex", "create"), ("vertex", "cancel"), ("gcs", "delete")})
AFTERSHOCK_RATE = 0.4
# Drawn apart from `RATES` (its own generator): every other draw of a seed stays as it was.
JOB_DUPLICATED_RATE = 0.25
DUPLICATE_RUNS_SHARE = 0.5  # of re-runs that get their machines at once (a generator of their own)
PRICE_ROW_DROPPED_RATE = 0.2  # of seeds with a budgeted request (a generator of its own)
AFTERSHOCK_TARGETS = ("next_call", "next_publish")
HANG_RATE = 0.3  # of seeds whose Vertex calls may hang (a generator of its own)
HANG_CALL_RATE = 0.02  # of a hanging seed's Vertex calls in the faulty phase (a generator of its own)
HANG_PERFORMED_SHARE = 0.5  # of hung calls that reached Vertex and were done (the reply lost)
REGION_STALLED_RATE = 0.08  # of seeds (a generator of its own)
STALL_TIMEOUT_SHARES = (0.0, 0.5, 1.0)  # of a stalled region's calls that run out their timeout (the rest: 503)
REPUBLISHED_AFTER_DELETION_RATE = 0.15  # of seeds (a generator of its own)
# How long the republished request's old job stays CANCELLING once cancelled: past the five
# deliveries' backoff (10 s doubling: 150 s) and the claim lease, shorter than the hours
# between the world's redrives (`sim.workload`).
SLOW_END_SECONDS = 1800.0
AFTERSHOCK_KINDS = ("crash_before", "unavailable", "lost")
# How a document may be written in a shape the code does not expect.
SHAPES = ("not_json", "truncated", "list", "field_null", "field_other_type", "future_version", "past_layout")
# Shapes another version of spotjobs writes (through its store, metadata and all); a person
# writes the others by hand (`gcloud storage cp`: no metadata).
BY_ANOTHER_VERSION = ("future_version", "past_layout")
# A ledger record, read by every handler and by every prune run, is the document most often hit.
DOCUMENTS = ("ledger", "ledger", "ledger", "trigger", "fleet")
# A person's hand-written fleet facts name an attempt no job ever had.
HAND_WRITTEN_ATTEMPT = "by-hand"


@dataclass(frozen=True)
class Refusal:
    """A 403 on `operation` calls in `location` from `since`, until `until` (None: for good)."""

    operation: str
    location: str
    since: datetime
    until: datetime | None

    def applies(self, operation: str, location: str, at: datetime) -> bool:
        return (
            operation == self.operation
            and location == self.location
            and self.since <= at
            and (self.until is None or at < self.until)
        )


@dataclass(frozen=True)
class Changeover:
    """A location's waits, in seconds: before RUNNING (PENDING), and after a preemption; a slow
    outlier now and then."""

    pending: tuple[float, ...]
    restart: tuple[float, ...]
    outlier_rate: float
    outlier: float


@dataclass(frozen=True)
class Stall:
    """`location`'s Vertex API stalled through the faulty phase: `timeout_share` of its calls run
    out their timeout, the others answer 503."""

    location: str
    timeout_share: float


@dataclass
class PermanentFaults:
    """What one seed drew."""

    kinds: frozenset[str] = frozenset()
    refusals: list[Refusal] = field(default_factory=list)
    bad_requests: frozenset[str] = frozenset()
    changeovers: dict[str, Changeover] = field(default_factory=dict)
    two_file_stems: bool = False
    aftershock: str | None = None  # one of AFTERSHOCK_TARGETS
    hangs: bool = False  # some Vertex calls never answer (`HANG_CALL_RATE`)
    price_row_dropped: tuple[str, str] | None = None  # (machine type, location) a redeployed price table lacks
    stall: Stall | None = None  # a location whose Vertex API stalls through the faulty phase


@dataclass
class Tampering:
    """What the out-of-band actors did, by request: the excuses the invariants may name."""

    # request id -> why its promises are off (a person changed its record or deleted its job)
    requests: dict[str, str] = field(default_factory=dict)
    deleted_jobs: dict[str, str] = field(default_factory=dict)  # job name -> its request id
    jobs_deleted_at: dict[str, datetime] = field(default_factory=dict)  # job name -> when a person asked
    cancelled_jobs: dict[str, str] = field(default_factory=dict)
    deleted_objects: set[str] = field(default_factory=set)  # checkpoint objects a person deleted
    written: dict[str, str] = field(default_factory=dict)  # state object name -> the shape written
    written_at: dict[str, datetime] = field(default_factory=dict)  # state object name -> its last write by hand
    deleted_records: set[str] = field(default_factory=set)  # request ids whose record a person deleted
    deleted_at_a_create: str | None = None  # the request whose record went while its create was out
    records_deleted_at: dict[str, datetime] = field(default_factory=dict)  # request id -> its first deletion
    # request id -> its record's documents as a person deleted them: what the code had read stays read
    deleted_record_documents: dict[str, list[bytes]] = field(default_factory=dict)
    deleted_record_times: dict[str, list[datetime]] = field(default_factory=dict)  # when each of those went
    # Jobs deleted while their request followed them (a recorded, unfinished attempt's job).
    followed_when_deleted: set[str] = field(default_factory=set)
    absurd_lines: set[str] = field(default_factory=set)  # message ids of a job's absurd lines
    # request id -> its record's deletions counted when a person published it again after one
    # (`republish_after_deletion`): a deletion since frees it from owing a record.
    republished: dict[str, int] = field(default_factory=dict)
    duplicated_jobs: set[str] = field(default_factory=set)  # names of the jobs re-run by hand
    # The price table's row a deployment dropped: (machine type, location, from when).
    price_row_dropped: tuple[str, str, datetime] | None = None


def draw(seed: int, workload: Workload) -> PermanentFaults:
    """The seed's permanent faults (none when `RATES` draws none)."""
    from sim.virtual import EPOCH_OF_SIMULATION as start
    from sim.workload import EAST, HOME, OTHER_REGION

    rng = random.Random(f"{seed}:faults:permanent")
    kinds = frozenset(kind for kind, rate in RATES.items() if rng.random() < rate)
    span = workload.duration.total_seconds()
    plan = PermanentFaults(kinds=kinds, two_file_stems="two_file_stems" in kinds)
    shocks = random.Random(f"{seed}:faults:aftershocks")  # its own: every other draw stays as it was
    if shocks.random() < AFTERSHOCK_RATE:
        plan.aftershock = shocks.choice(AFTERSHOCK_TARGETS)
        plan.kinds = kinds | {"aftershocks"}
    if random.Random(f"{seed}:faults:hangs").random() < HANG_RATE:
        plan.hangs = True
        plan.kinds = plan.kinds | {"hangs"}
    if random.Random(f"{seed}:faults:duplicates").random() < JOB_DUPLICATED_RATE:
        plan.kinds = plan.kinds | {"job_duplicated"}
    if random.Random(f"{seed}:faults:republished").random() < REPUBLISHED_AFTER_DELETION_RATE:
        plan.kinds = plan.kinds | {"republished_after_deletion"}
    stalls = random.Random(f"{seed}:faults:region_stalled")
    if stalls.random() < REGION_STALLED_RATE:
        plan.stall = Stall(stalls.choice((HOME, HOME, EAST, OTHER_REGION)), stalls.choice(STALL_TIMEOUT_SHARES))
        plan.kinds = plan.kinds | {"region_stalled"}
    prices = random.Random(f"{seed}:faults:prices")
    rows = budgeted_rows(workload)
    if prices.random() < PRICE_ROW_DROPPED_RATE and rows:
        plan.price_row_dropped = prices.choice(rows)
        plan.kinds = plan.kinds | {"price_row_dropped"}
    if "forbidden" in kinds:
        since = start + timedelta(seconds=rng.uniform(0, span))
        fixed = rng.choice((None, 600.0, 7200.0))
        plan.refusals.append(
            Refusal(
                rng.choice(FORBIDDEN_CALLS),
                rng.choice((HOME, HOME, EAST)),
                since,
                since + timedelta(seconds=fixed) if fixed else None,
            )
        )
    if "bad_request" in kinds:
        ids = sorted(
            {
                json.loads(a.data).get("request_id")
                for a in workload.arrivals
                if a.topic == "job_requests_topic" and a.own is None and a.data.startswith(b"{")
            }
            - {None}
        )
        if ids:
            plan.bad_requests = frozenset(rng.sample(ids, min(len(ids), rng.choice((1, 2)))))
    if "regional_changeovers" in kinds:
        for location in (HOME, EAST, OTHER_REGION):
            base = rng.choice((5.0, 30.0, 120.0, 600.0))
            plan.changeovers[location] = Changeover(
                pending=(base, base * 2, base * 4),
                restart=(base / 2, base, base * 3),
                outlier_rate=rng.choice((0.0, 0.02, 0.1)),
                outlier=rng.choice((1800.0, 5400.0)),
            )
    return plan


def events(seed: int, plan: PermanentFaults, workload: Workload) -> list[Any]:
    """The out-of-band actors' moments, as operations of the world's scheduler."""
    import functools

    from sim.virtual import EPOCH_OF_SIMULATION as start
    from sim.workload import Operation

    rng = random.Random(f"{seed}:faults:events")
    span = workload.duration.total_seconds()

    def moments(count: int) -> list[datetime]:
        return sorted(start + timedelta(seconds=rng.uniform(60, span * 1.2)) for _ in range(count))

    out = []
    if "job_deleted" in plan.kinds:
        out += [Operation(at, "someone deletes a job in the console", delete_job) for at in moments(rng.choice((1, 2)))]
    if "job_cancelled" in plan.kinds:
        out += [Operation(at, "someone cancels a job in the console", cancel_job) for at in moments(rng.choice((1, 2)))]
    if "document_written" in plan.kinds:
        for at in moments(rng.choice((1, 2, 3))):
            document, shape = rng.choice(DOCUMENTS), rng.choice(SHAPES)
            out.append(
                Operation(
                    at,
                    f"someone writes a {document} document as {shape}",
                    functools.partial(write_document, document=document, shape=shape),
                )
            )
    if "object_deleted" in plan.kinds:
        for at in moments(rng.choice((1, 2))):
            what = rng.choice(("ledger", "checkpoint", "checkpoint"))
            out.append(Operation(at, f"a person deletes a {what} object", functools.partial(delete_object, what=what)))
    if "absurd_lines" in plan.kinds:
        out += [
            Operation(at, "a job writes absurd lines about its own attempt", write_absurd_lines)
            for at in moments(rng.choice((1, 2)))
        ]
    if "job_duplicated" in plan.kinds:  # its own generator: the other actors' moments stay
        again = random.Random(f"{seed}:faults:duplicates:events")
        out += [
            Operation(
                start + timedelta(seconds=again.uniform(60, span)),
                "someone re-runs a job's create in the console",
                duplicate_job,
            )
            for _ in range(again.choice((1, 2, 3)))
        ]
    if "republished_after_deletion" in plan.kinds:  # its own generator: the other actors' moments stay
        at = start + timedelta(seconds=random.Random(f"{seed}:faults:republished:events").uniform(60, span))
        out.append(
            Operation(
                at, "a person deletes a record whose job is live and publishes it again", republish_after_deletion
            )
        )
    if plan.price_row_dropped is not None:  # its own generator: the other actors' moments stay
        machine, location = plan.price_row_dropped
        at = start + timedelta(seconds=random.Random(f"{seed}:faults:prices:events").uniform(60, span))
        out.append(
            Operation(
                at,
                f"a deployment ships the price table without {machine} in {location}",
                functools.partial(drop_price_row, machine=machine, location=location),
            )
        )
    return out


def budgeted_rows(workload: Workload) -> list[tuple[str, str]]:
    """(machine type, location) of every worker pool of every budgeted request of the workload, in
    every location it may run: the rows a price table redeployed without one makes a budget unpriced."""
    rows = set()
    for arrival in workload.arrivals:
        if not arrival.is_plain_request:
            continue
        body = json.loads(arrival.data)
        if "max_cost_usd" not in body:
            continue
        pools = ((body.get("custom_job") or {}).get("jobSpec") or {}).get("workerPoolSpecs") or []
        locations = body.get("locations") or [body.get("location") or workload.settings.location]
        machines = {(pool.get("machineSpec") or {}).get("machineType") for pool in pools if pool}
        rows |= {(m, loc) for m in machines if m for loc in locations}
    return sorted(rows)


# The out-of-band actors (each an operation: a step of its own, drawing no faults).


def drop_price_row(world: World, *, machine: str, location: str) -> None:
    """A deployment ships the price table without the row of `machine` in `location`: every
    function prices with it from now on (a budget the validation priced, then unpriced)."""
    import copy

    prices = copy.deepcopy(world.deployed_prices)
    prices["machine_types"].get(machine, {}).get("locations", {}).pop(location, None)
    world.deployed_prices = prices
    world.tampering.price_row_dropped = (machine, location, world.clock.now())
    world.note(f"out of band: the price table redeployed without {machine} in {location}")


def _pick(world: World, candidates: list[Any]) -> Any:
    return world.fault_rng.choice(candidates) if candidates else None


def delete_job(world: World) -> None:
    """Someone deletes a job in the console: an ended one at once; a live one is cancelled, and
    deleted once it ended (Vertex refuses to delete a running job)."""
    job = _pick(world, sorted(world.vertex.jobs.values(), key=lambda j: j.name))
    if job is None or job.deleted:
        world.note("out of band: no job to delete")
        return
    world.tampering.deleted_jobs[job.name] = job.request_id
    world.tampering.jobs_deleted_at[job.name] = world.clock.now()
    record = _record(world, job.request_id)
    if record is not None and not record.is_terminal and any(_waits_for_its_end(a, job.name) for a in record.attempts):
        world.tampering.followed_when_deleted.add(job.name)
    world.tampering.requests.setdefault(job.request_id, f"its job {job.name.rsplit('/', 1)[-1]} was deleted at Vertex")
    world.vertex.delete(job)
    world.note(
        f"out of band: {job.request_id} a{job.attempt}'s job {job.name.rsplit('/', 1)[-1]} deleted ({job.state})"
    )


def _waits_for_its_end(attempt: Attempt, job_name: str) -> bool:
    """Whether the attempt records `job_name` and the code still reads that job: its end not yet
    recorded (no outcome), or a switch's cancel waiting for it (`ending`). A settled attempt's job
    is never read again, so its deletion owes nothing (seed 2486: a moved attempt's job)."""
    return attempt.job == job_name and (attempt.outcome is None or attempt.ending)


def duplicate_job(world: World) -> None:
    """Someone re-runs a live job's create in the console (its labels copied): a second job of
    that attempt that stays queued (no machine for it), or, for `DUPLICATE_RUNS_SHARE` of them (a
    generator of their own), gets its machines at once and runs (Vertex bills it from its
    startTime: the bill's promise for strays) until a cancel, its container writing nothing before
    it (an image still pulling: nothing documents when a container first writes). Either way it
    writes nothing anywhere."""
    from sim.vertex import SimJob

    job = _pick(
        world,
        sorted(
            (j for j in world.vertex.jobs.values() if j.live and j.name not in world.tampering.duplicated_jobs),
            key=lambda j: j.name,
        ),
    )
    if job is None:
        world.note("out of band: no live job to re-run")
        return
    now = world.clock.now()
    parent = job.name.rsplit("/customJobs/", 1)[0]
    runs = random.Random(f"{world.seed}:faults:duplicates:runs:{len(world.tampering.duplicated_jobs)}")
    running = runs.random() < DUPLICATE_RUNS_SHARE
    copy = SimJob(
        f"{parent}/customJobs/{job.name.rsplit('/', 1)[-1]}0{len(world.tampering.duplicated_jobs)}",
        job.location,
        json.loads(json.dumps(job.request)),
        dict(job.labels),
        "JOB_STATE_RUNNING" if running else "JOB_STATE_QUEUED",
        now,
        now,
        start_time=now if running else None,
    )
    world.vertex.add_by_hand(copy)
    world.tampering.duplicated_jobs.add(copy.name)
    how = "runs" if running else "waits"
    world.note(f"out of band: {job.request_id} a{job.attempt}'s job re-run in the console as {copy.name[-8:]} ({how})")


def cancel_job(world: World) -> None:
    """Someone cancels a live job in the console."""
    job = _pick(
        world, sorted((j for j in world.vertex.jobs.values() if j.live and not j.deleted), key=lambda j: j.name)
    )
    if job is None:
        world.note("out of band: no live job to cancel")
        return
    world.tampering.cancelled_jobs[job.name] = job.request_id
    world.tampering.requests.setdefault(job.request_id, f"its job {job.name.rsplit('/', 1)[-1]} was cancelled by hand")
    world.vertex.cancel_by_hand(job)
    world.note(f"out of band: {job.request_id} a{job.attempt}'s job cancelled in the console")


def write_document(world: World, *, document: str, shape: str) -> None:
    """Someone writes a state document in `shape` (`SHAPES`)."""
    objects = world.storage.objects(world.settings.state_bucket)
    bucket = world.storage.client().bucket(world.settings.state_bucket)
    if document == "fleet":
        name = _fleet_name(world, shape)
        bucket.blob(name).upload_from_string(b"")
        world.tampering.written[name] = shape
        world.note(f"out of band: fleet fact {name} written ({shape})")
        return
    prefix, suffix = ("requests/", ".json") if document == "ledger" else ("triggers/", "/state.json")
    names = sorted(n for n in objects if n.startswith(prefix) and n.endswith(suffix) and "/_" not in n)
    name = _pick(world, names)
    if name is None:
        world.note(f"out of band: no {document} document to write")
        return
    data = reshape(objects[name].data, shape, world.fault_rng)
    blob = bucket.blob(name)
    if shape in BY_ANOTHER_VERSION:  # written through that version's store, with its metadata
        blob.metadata = dict(objects[name].metadata or {})
    blob.upload_from_string(data)
    world.tampering.written[name] = shape
    world.tampering.written_at[name] = world.clock.now()
    if document == "ledger":
        request_id = name[len(prefix) : -len(suffix)]
        world.tampering.requests.setdefault(request_id, f"its ledger record was written by hand ({shape})")
    world.note(f"out of band: {name} written ({shape}): {data[:80]!r}")


def delete_object(world: World, *, what: str) -> None:
    """A person deletes a request's ledger record, or an old checkpoint (every object of it)."""
    bucket_name = world.settings.state_bucket if what == "ledger" else world.settings.checkpoint_bucket
    objects = world.storage.objects(bucket_name)
    if what == "ledger":
        names = [[n] for n in sorted(objects) if n.startswith("requests/") and n.endswith(".json")]
    else:  # someone cleans up old checkpoints by hand
        names = [
            sorted(folder + o for o in save.objects if folder + o in objects)
            for folder, saves in sorted(world.trainer.saves.items())
            for save in _older_than_the_two_newest_finished(saves.values())
        ]
        names = [group for group in names if group]
    group = _pick(world, names)
    if not group:
        world.note(f"out of band: no {what} object to delete")
        return
    if what == "ledger":
        [name] = group
        _note_record_deleted(world, name[len("requests/") : -len(".json")], objects[name].data)
    else:
        world.tampering.deleted_objects.update(group)
    for name in group:
        world.storage.client().bucket(bucket_name).blob(name).delete()
    world.note(f"out of band: {', '.join(group)} deleted by a person")


def republish_after_deletion(world: World) -> None:
    """A person deletes the record of a request whose latest attempt's job is live (picked by a
    generator of its own) and publishes its request again: the bytes and attributes it was first
    published with, not the record's form of it (its defaults filled in: seed 10829's near-limit
    body grew past the bytes accepted); that job ends `SLOW_END_SECONDS` after its cancel. An id
    spotjobs derives is not the person's to publish."""
    from shared.jobs import RESERVED_ID_PREFIXES
    from sim.invariants import records

    def live_job(record: Any) -> Any:
        latest = record.latest
        job = world.vertex.jobs.get(latest.job) if latest is not None and latest.job else None
        return job if job is not None and job.live and not job.deleted else None

    first_publish = _first_publish_by_a_person(world)
    candidates = sorted(
        (r.request_id, r)
        for r in records(world)
        if live_job(r) is not None
        and not r.request_id.startswith(RESERVED_ID_PREFIXES)
        and r.request_id in first_publish
    )
    if not candidates:
        world.note("out of band: no record with a live job to delete and publish again")
        return
    request_id, record = random.Random(f"{world.seed}:faults:republished:pick").choice(candidates)
    job = live_job(record)
    job.slow_end_seconds = SLOW_END_SECONDS
    name = f"requests/{request_id}.json"
    _note_record_deleted(world, request_id, world.storage.objects(world.settings.state_bucket)[name].data)
    world.storage.client().bucket(world.settings.state_bucket).blob(name).delete()
    world.tampering.republished[request_id] = len(world.tampering.deleted_record_documents[request_id])
    first = first_publish[request_id]
    message_id = world.pubsub.accept(world.settings.job_requests_topic, first.data, dict(first.attributes))
    world.note(
        f"out of band: {name} deleted by a person while its job {job.name.rsplit('/', 1)[-1]} lives, "
        f"and {request_id} published again (message {message_id})"
    )


def _first_publish_by_a_person(world: World) -> dict[str, Any]:
    """Each request id's first message on job-requests from a publisher: not a re-queue of
    spotjobs' own (`ORIGIN_ATTRIBUTE`), nor a hostile publisher's."""
    from shared.requests.envelope import ORIGIN_ATTRIBUTE

    first: dict[str, Any] = {}
    for message in world.pubsub.on(world.settings.job_requests_topic):
        if ORIGIN_ATTRIBUTE in message.attributes or message.message_id in world.hostile:
            continue
        body = message.json()
        request_id = (body.get("request_id") if isinstance(body, dict) else None) or message.attributes.get(
            "request_id"
        )
        if isinstance(request_id, str):
            first.setdefault(request_id, message)
    return first


def _note_record_deleted(world: World, request_id: str, document: bytes) -> None:
    world.tampering.deleted_records.add(request_id)
    world.tampering.records_deleted_at.setdefault(request_id, world.clock.now())
    world.tampering.deleted_record_documents.setdefault(request_id, []).append(document)
    world.tampering.deleted_record_times.setdefault(request_id, []).append(world.clock.now())
    world.tampering.requests.setdefault(request_id, "its ledger record was deleted by a person")


def delete_record_at_a_create(world: World, request_id: str) -> None:
    """`object_deleted` at its worst moment (review s10), once a seed: a person deletes the record
    of a request whose create is on its way to Vertex while another delivery of the request runs,
    which may claim the id afresh before that create's answer is back (the stand-in's calls take
    their round trip before they act). Its own generator decides the seed: the others' draws stay."""
    if "object_deleted" not in world.permanent.kinds or world.tampering.deleted_at_a_create is not None:
        return
    if random.Random(f"{world.seed}:faults:deleted-at-a-create").random() >= DELETED_AT_A_CREATE_RATE:
        return
    name = f"requests/{request_id}.json"
    record = world.storage.objects(world.settings.state_bucket).get(name)
    if record is None or not _delivered_meanwhile(world, request_id):
        return
    world.tampering.deleted_at_a_create = request_id
    _note_record_deleted(world, request_id, record.data)
    world.storage.client().bucket(world.settings.state_bucket).blob(name).delete()
    world.note(f"out of band: {name} deleted by a person while its create was out")


def _delivered_meanwhile(world: World, request_id: str) -> bool:
    """Whether another delivery of `request_id`'s messages is in flight beside the current one."""
    current = world._current
    others = {t.origin for t in world.tasks if t is not current and t.name == "submit_job"}
    messages = world.pubsub.on(world.settings.job_requests_topic)
    return any(
        m.message_id in others and isinstance(m.json(), dict) and m.json().get("request_id") == request_id
        for m in messages
    )


def _older_than_the_two_newest_finished(saves: Iterable[Save]) -> list[Save]:
    """What a person may clean up by hand: the saves older than a folder's two newest finished
    ones (what a run resumes from, and the one before it, stay). Torn saves count for nothing: with
    two torn saves counted as the newest, seed 267 deleted the newest finished checkpoint, the one
    a live job had just resumed from."""
    ordered = sorted(saves, key=lambda s: (s.step, s.at))
    finished = [s for s in ordered if s.complete]
    if not finished:
        return []
    return ordered[: ordered.index(finished[-min(2, len(finished))])]


def write_absurd_lines(world: World) -> None:
    """A running job writes lines about its own attempt that no run could, signed with its key."""
    from spotjobs_kit.lines import CHECKPOINT_COMMITTED, PREEMPTED, RUN_STARTED, format_line

    running = sorted((j for j in world.vertex.jobs.values() if j.state == "JOB_STATE_RUNNING"), key=lambda j: j.name)
    job = _pick(world, running)
    if job is None:
        world.note("a job with absurd lines: none is running")
        return
    key = kit_key_of(job.request)
    far = "9999-12-31T23:59:59Z"
    base = {"request_id": job.request_id, "attempt": job.attempt, "job_id": job.name.rsplit("/", 1)[-1]}
    lines = [
        (RUN_STARTED, {"run": 999, "resumed_step": 10**15, "time": far}),
        (PREEMPTED, {"run": -3, "step": 10**15, "seconds_since_checkpoint": -1e12, "time": far}),
        (CHECKPOINT_COMMITTED, {"run": 2**62, "step": -400, "checkpoint": "ckpt-999999", "time": far}),
    ]
    for event, fields in world.fault_rng.sample(lines, world.fault_rng.choice((1, 2, 3))):
        text = format_line(event, {**base, **fields}, severity="WARNING", key=key)
        world.tampering.absurd_lines.add(world.emit_log_line(job, text, "WARNING"))


def kit_key_of(request: dict[str, Any]) -> str | None:
    from shared.jobs import ENV_KIT_KEY

    for pool in (request.get("jobSpec") or {}).get("workerPoolSpecs") or []:
        for variable in (pool.get("containerSpec") or {}).get("env") or []:
            if variable.get("name") == ENV_KIT_KEY:
                return str(variable.get("value"))
    return None


def _record(world: World, request_id: str) -> Any:
    from shared.ledger.records import RequestRecord

    obj = world.storage.objects(world.settings.state_bucket).get(f"requests/{request_id}.json")
    try:
        return RequestRecord.from_json(json.loads(obj.data)) if obj else None
    except (ValueError, TypeError, KeyError, RecursionError):
        return None


def _fleet_name(world: World, shape: str) -> str:
    """A fleet fact's name (the fact is the name: shared/fleet/store.py) in `shape`."""
    from shared.fleet.observations import MachineClass
    from shared.fleet.store import FLEET_PREFIX

    klass = MachineClass("a3-highgpu-8g", "NVIDIA_H100_80GB", 8).key
    at = int(world.clock.now().timestamp())
    key = f"{HAND_WRITTEN_ATTEMPT}-{len(world.tampering.written)}"
    fact = {
        "not_json": f"preempt~{at}~x~1~{key}~0",
        "truncated": f"preempt~{at}~30",
        "list": f"preempt~{at}~30~1~{key}~0~extra",
        "field_null": f"preempt~-~30~1~{key}~0",
        "field_other_type": f"preempt~{at}~-99999999999~-5~{key}~-1",
        "future_version": f"preempt~{at}~30~1~{key}~0~v2~unknown",
        "past_layout": f"preempt~{at}~{key}",
    }[shape]
    return f"{FLEET_PREFIX}{klass}/us-central1/{fact}"


def reshape(data: bytes, shape: str, rng: random.Random) -> bytes:
    """`data` rewritten in `shape`. `data` is a JSON document, or what someone already wrote in
    its place (seeds 660 and 1066): a text that does not parse reads as no document at all."""
    if shape == "not_json":
        return b"<html><body>edited by hand</body></html>"
    if shape == "truncated":
        return data[: max(1, len(data) // 2)]
    try:
        document = json.loads(data)
    except ValueError:
        document = None
    if shape == "list":
        return json.dumps([document]).encode()
    if not isinstance(document, dict) or not document:
        return json.dumps(None).encode()
    fields = sorted(k for k, v in document.items() if v not in (None, [], {}, ""))
    name = rng.choice(fields or sorted(document))
    if shape == "field_null":
        document[name] = None
    elif shape == "field_other_type":
        value = document[name]
        document[name] = [value] if not isinstance(value, list) else {"0": value}
    elif shape == "future_version":
        version = document.get("schema_version")  # someone may have written it as no number
        document["schema_version"] = (version if isinstance(version, int) and version else 1) + 1
        document["added_in_a_later_version"] = {"what": "a field this version does not know"}
    else:  # a past layout: lists were maps keyed by position, and no version was written
        document.pop("schema_version", None)
        for key, value in list(document.items()):
            if isinstance(value, list):
                document[key] = {str(i): v for i, v in enumerate(value)}
    return json.dumps(document).encode()
