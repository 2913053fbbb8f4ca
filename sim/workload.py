"""The workload of one seed: the deployment's settings, what publishers send and when, how Vertex
treats each job, which operator commands run, and how hostile the world is.

Everything is drawn from the `random.Random` passed in, so a seed names one workload exactly.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from shared.settings import Settings

PROJECT = "sim-project"
NOTIFY_TOPIC_PREFIX = "notify-"
IMAGE = f"us-docker.pkg.dev/{PROJECT}/training/trainer:1"
TRAINER = f"trainer@{PROJECT}.iam.gserviceaccount.com"
HOME = "us-central1"
OTHER_REGION = "europe-west4"
EAST = "us-east4"  # priced for H100 with HOME (shared/price_table.json): placement weighs the two
A100_80GB_SPOT = {"machine": "a2-ultragpu-8g", "strategies": ["SPOT"]}
H100 = {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8}


@dataclass
class Arrival:
    """One publish to job-requests, by a publisher (not the system)."""

    index: int  # what shrinking disables
    at: datetime
    data: bytes
    attributes: dict[str, str]
    label: str
    topic: str = "job_requests_topic"  # the Settings field naming the topic it is published to
    # A hostile publisher's message: the requests it may change (its own, if any). None: not hostile.
    own: frozenset[str] | None = None

    def describe(self) -> str:
        return f"#{self.index} {self.label} ({len(self.data)} bytes{', ' + str(self.attributes) if self.attributes else ''})"

    @property
    def kind(self) -> str:
        """What the workload made it ("envelope", "deadline", ...): a publisher's retry is its first send's."""
        words = self.label.split()
        return words[2] if words[:2] == ["retry", "of"] else words[0]

    @property
    def is_plain_request(self) -> bool:
        """A request on job-requests by an honest publisher: the kind the workload's mixes change."""
        return self.topic == "job_requests_topic" and self.own is None


@dataclass
class Operation:
    at: datetime
    label: str
    run: Callable[[Any], None]
    done: bool = False

    def describe(self) -> str:
        return self.label


@dataclass
class Workload:
    settings: Settings
    env: dict[str, str]
    arrivals: list[Arrival]
    operations: list[Operation]
    seed_text: str
    fault_rate: float
    duplicate_rate: float
    gpu_quota_full: bool
    gpu_quota_forever: bool
    duration: timedelta
    max_steps: int
    triggers: list[dict[str, Any]] = field(default_factory=list)  # definitions, as `triggers apply` stores them
    # Requesters' notification topics that refuse every publish for good (NotFound, 403): their
    # requests' notifications stop, with one `notify_refused` alert (shared/deciding/notices.py).
    refusing_topics: frozenset[str] = frozenset()
    # Per location, when Spot has no capacity there: a Spot job waits PENDING through it.
    spot_outages: dict[str, list[tuple[datetime, datetime]]] = field(default_factory=dict)

    def spot_capacity_back(self, location: str, at: datetime) -> datetime | None:
        """When Spot has capacity again in `location`; None: it has at `at`."""
        return next((end for start, end in self.spot_outages.get(location, ()) if start <= at < end), None)

    def fate_of(self, request_id: str, attempt: int) -> tuple[str, int]:
        """How Vertex treats attempt `attempt` of `request_id`'s job: (fate, preemptions); some
        that would succeed run into their job timeout instead (sim/continuations.py). Drawn for
        the attempt whatever its strategy: Vertex applies the preemptions and stockout to a Spot
        job only (`sim.vertex._on_demand`, `sim.flex.begin`)."""
        from sim.continuations import timeout_fate

        return timeout_fate(self.seed_text, request_id, attempt, self._fate_of(request_id, attempt))

    def _fate_of(self, request_id: str, attempt: int) -> tuple[str, int]:
        rng = random.Random(f"{self.seed_text}:{request_id}:{attempt}")
        roll = rng.random()
        if "deadline" in request_id and attempt == 1:
            return ("hang", 0) if roll < 0.7 else ("succeed", rng.choice((0, 1)))
        if roll < 0.5:
            return "succeed", 0
        if roll < 0.7:  # Vertex restarts a preempted job up to six times (the storm threshold among them)
            return "succeed", rng.randint(1, 6)
        if roll < 0.8:
            return "stockout", 0
        if roll < 0.9:
            return "fail", 0
        return "hang", 0


def custom_job(rng: random.Random, *, gpu: bool, pad: int = 0) -> dict[str, Any]:
    machine = (
        {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
        if gpu
        else {"machineType": "n1-standard-4"}
    )
    container: dict[str, Any] = {"imageUri": IMAGE, "command": ["python", "train.py"]}
    if pad:
        container["args"] = ["--note", "x" * pad]
    return {
        "displayName": f"train-{rng.randrange(1000)}",
        "jobSpec": {"workerPoolSpecs": [{"machineSpec": machine, "replicaCount": 1, "containerSpec": container}]},
    }


def _settings(rng: random.Random) -> dict[str, str]:
    return {
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        "SPOTJOBS_STATE_BUCKET": "sim-state",
        "SPOTJOBS_CHECKPOINT_BUCKET": "sim-checkpoints",
        "SPOTJOBS_LOCATION": HOME,
        "SPOTJOBS_DEPLOYMENT": "sim",
        "SPOTJOBS_TRAINING_SERVICE_ACCOUNT": TRAINER,
        "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": f"us-docker.pkg.dev/{PROJECT}/",
        "SPOTJOBS_ALLOWED_MACHINE_FAMILIES": "a2,a3,n1",
        "SPOTJOBS_ALLOWED_LOCATIONS": rng.choice(("", f"{HOME},{OTHER_REGION},{EAST}")),
        "SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": rng.choice(("STANDARD", "STANDARD", "")),
        "SPOTJOBS_MIN_SPOT_ATTEMPTS": str(rng.choice((1, 1, 3))),
        "SPOTJOBS_VERTEX_CREATES_PER_MINUTE": str(rng.choice((58, 58, 6, 2))),
        "SPOTJOBS_MAX_REQUEST_BYTES": str(rng.choice((256 * 1024, 6000))),
        "SPOTJOBS_LEDGER_RETENTION_SECONDS": str(32 * 86400),
        "SPOTJOBS_BARE_DEDUPE_SECONDS": str(rng.choice((300, 3600))),
        "SPOTJOBS_PACER_RUN_SECONDS": str(rng.choice((10, 40))),
        "SPOTJOBS_LOG_LEVEL": "WARNING",
        "SPOTJOBS_ALLOWED_NOTIFY_TOPICS": f"projects/{PROJECT}/topics/{NOTIFY_TOPIC_PREFIX}",
    }


def generate(rng: random.Random) -> Workload:
    from shared.requests.envelope import REQUEUE_ATTRIBUTES
    from sim.budgets import with_budget
    from sim.virtual import EPOCH_OF_SIMULATION

    env = _settings(rng)
    settings = Settings.from_env(env)
    # Notifications draw from a generator of their own, so every other draw of a seed is as before.
    notify_rng = random.Random(repr(rng.getstate()))
    refusing_topics: set[str] = set()
    start = EPOCH_OF_SIMULATION
    arrivals: list[Arrival] = []
    gpu_quota_full = rng.random() < 0.15
    duration = timedelta(hours=rng.choice((1, 3, 8)))

    def add(at: datetime, body: dict[str, Any] | bytes, attributes: dict[str, str], label: str) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        arrivals.append(Arrival(len(arrivals), at, data, attributes, label))

    def moment() -> datetime:
        return start + timedelta(seconds=rng.uniform(0, duration.total_seconds() * 0.8))

    count = rng.choice((2, 4, 8, 16))
    for i in range(count):
        at = moment()
        gpu = rng.random() < 0.6
        kind = rng.choices(
            ("envelope", "bare", "bare_named", "deadline", "hostile", "near_limit", "invalid", "fallback"),
            weights=(40, 12, 6, 5, 2, 6, 3, 6),
        )[0]
        request_id = f"r{i}-{kind.replace('_', '-')}"
        body: dict[str, Any] = {"request_id": request_id, "custom_job": custom_job(rng, gpu=gpu)}
        if rng.random() < 0.3:
            body["priority"] = rng.choice((1, 5, 100))
        if rng.random() < 0.3:
            body["max_attempts"] = rng.choice((1, 2, 5))
        attributes: dict[str, str] = {}
        if kind in ("deadline", "hostile"):
            request_id = f"r{i}-deadline" if kind == "deadline" else f"r{i}-hostile-deadline"
            body["request_id"] = request_id
            steps = rng.choice((100, 1000))
            step_seconds = rng.choice((1.0, 6.0))
            slack = rng.choice((2.0, 6.0, 20.0))
            body["deadline"] = (
                (at + timedelta(seconds=steps * step_seconds * slack + 1800)).isoformat().replace("+00:00", "Z")
            )
            body["total_steps"] = steps
            body["expected_step_seconds"] = step_seconds
            if kind == "hostile":  # a publisher marking its own message as the system's re-queue
                body["attempt"] = 1
                attributes = dict(REQUEUE_ATTRIBUTES)
        elif kind == "fallback":
            body["fallback"] = {"after_spot_attempts": rng.choice((0, 1, 2)), "strategy": "STANDARD"}
        elif kind == "near_limit":
            size = len(json.dumps(body, separators=(",", ":")))
            body["custom_job"] = custom_job(
                rng, gpu=gpu, pad=max(0, settings.max_request_bytes - size - rng.randint(40, 400))
            )
        elif kind == "invalid":
            body["custom_job"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] = "docker.io/evil:1"
        elif kind in ("bare", "bare_named"):
            body = body["custom_job"]
            if kind == "bare_named":
                attributes = {"request_id": request_id}
        elif kind == "envelope" and gpu:
            with_budget(body, request_id, at)  # some carry a max_cost_usd (sim/budgets.py)
        # Not near the size limit (the topic would push it over) nor a hostile one.
        told = kind in ("envelope", "deadline", "fallback", "invalid")
        if told and notify_rng.random() < 0.4:
            body["notify"] = {"topic": _notify_topic(notify_rng, request_id, kind, refusing_topics)}
        add(at, body, attributes, f"{kind} {request_id}")
        if rng.random() < 0.1:  # the publisher retries: the same message again
            add(
                at + timedelta(seconds=rng.choice((0, 5, 120))),
                arrivals[-1].data,
                dict(attributes),
                f"retry of {kind} {request_id}",
            )
    if rng.random() < 0.35:  # a burst beyond the pace
        at = moment()
        for j in range(rng.choice((8, 20, 50))):
            body = {
                "request_id": f"burst{j}",
                "custom_job": custom_job(rng, gpu=rng.random() < 0.5),
                **({"priority": 5} if rng.random() < 0.2 else {}),
            }
            if rng.random() < 0.1:  # one near the size limit, waiting in line with the others
                body["request_id"] = f"burst{j}-near-limit"
                size = len(json.dumps(body, separators=(",", ":")))
                pad = max(0, settings.max_request_bytes - size - rng.randint(40, 400))
                body["custom_job"] = custom_job(rng, gpu=False, pad=pad)
            add(at, body, {}, f"burst {body['request_id']}")
    if rng.random() < 0.3:
        for k in range(rng.choice((2, 4, 8))):
            body, attributes, label, own = hostile_message(rng, k, [a for a in arrivals if a.own is None])
            data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
            arrivals.append(Arrival(len(arrivals), moment(), data, attributes, f"hostile {label}", own=own))
    triggers = []
    if rng.random() < 0.3:  # a retraining trigger on data landing, with late members
        coalesce = rng.choice((300, 1800))
        triggers.append(
            {
                "schema_version": 1,
                "name": "daily-data",
                "source": {"gcs": {"bucket": "sim-data", "prefix": "incoming/"}},
                "coalesce_seconds": coalesce,
                "request": {"custom_job": custom_job(rng, gpu=False), "max_attempts": 2},
            }
        )
        for k in range(rng.choice((3, 10, 30))):
            at = moment()
            late = rng.random() < 0.2
            event_time = at - timedelta(seconds=coalesce * 2 if late else rng.uniform(0, 5))
            name = f"incoming/part-{k}.parquet"
            arrivals.append(
                Arrival(
                    len(arrivals),
                    at,
                    json.dumps(
                        {"kind": "storage#object", "bucket": "sim-data", "name": name, "generation": "1"}
                    ).encode(),
                    {
                        "eventType": "OBJECT_FINALIZE",
                        "bucketId": "sim-data",
                        "objectId": name,
                        "objectGeneration": "1",
                        "eventTime": event_time.isoformat().replace("+00:00", "Z"),
                        "payloadFormat": "JSON_API_V1",
                    },
                    f"notification {name}{' (late)' if late else ''}",
                    topic="triggers_topic",
                )
            )
    operations = [
        Operation(start + timedelta(hours=h), "redrive the dead letters", redrive_dead_letters) for h in (2, 9, 20, 40)
    ]
    for _ in range(rng.choice((0, 1, 2, 3))):  # `spotjobs resubmit` of a request that ended badly
        cut = rng.choice((None, None, 1, 2, 3))  # the command dies at its n-th copy call
        operations.append(
            Operation(
                start
                + timedelta(seconds=rng.uniform(duration.total_seconds() / 2, duration.total_seconds() + 6 * 3600)),
                "resubmit a request that ended without succeeding" + (f" (dies at copy call {cut})" if cut else ""),
                functools.partial(resubmit, cut_at_copy=cut),
            )
        )
    for _ in range(rng.choice((0, 0, 1, 3)) if rng.random() < 0.3 else 0):
        operations.append(
            Operation(
                start + timedelta(seconds=rng.uniform(0, duration.total_seconds())),
                "a hostile job forges a kit preempted line for another request's job",
                forge_kit_line,
            )
        )
    fault_rate = rng.choice((0.0, 0.005, 0.02, 0.05))
    return Workload(
        settings=settings,
        env=env,
        arrivals=sorted(arrivals, key=lambda a: (a.at, a.index)),
        operations=operations,
        seed_text=str(rng.random()),
        fault_rate=fault_rate,
        duplicate_rate=rng.choice((0.0, 0.05, 0.2)),
        gpu_quota_full=gpu_quota_full,
        gpu_quota_forever=gpu_quota_full and rng.random() < 0.5,
        duration=duration,
        max_steps=1200,
        triggers=triggers,
        refusing_topics=frozenset(refusing_topics),
    )


def _notify_topic(rng: random.Random, request_id: str, kind: str, refusing: set[str]) -> str:
    """A request's notification topic: its own under the allowed prefix; one in five refuses for
    good; an `invalid` request's may also lie outside the allowlist (one more violation of it)."""
    if kind == "invalid" and rng.random() < 0.5:
        return f"projects/other-{PROJECT}/topics/{NOTIFY_TOPIC_PREFIX}{request_id}"
    name = f"{NOTIFY_TOPIC_PREFIX}{request_id}"
    if rng.random() < 0.2:
        name = f"{NOTIFY_TOPIC_PREFIX}refusing-{request_id}"
        refusing.add(name)
    return f"projects/{PROJECT}/topics/{name}"


def redrive_dead_letters(world: Any) -> None:
    """`spotjobs dead-letters redrive`: every dead letter back to its function's topic, once
    (the CLI's own library: its claims in the state bucket)."""
    from shared.topology import TOPOLOGY
    from sim.pubsub import DEAD_LETTER_TOPIC
    from spotjobs.deadletters import DeadLetter, RedriveClaims, publisher_function, redrive

    letters = [
        DeadLetter(m.message_id, m.data, dict(m.attributes), m.publish_time.isoformat())
        for m in world.pubsub.on(DEAD_LETTER_TOPIC)
        if m.message_id not in world.redriven
    ]
    if not letters:
        return
    bucket = world.storage.client().bucket(world.settings.state_bucket)
    results, done = redrive(
        letters,
        claims=RedriveClaims(bucket),
        publish=publisher_function(world.pubsub),
        topic_path=lambda key: f"projects/{world.settings.project}/topics/{TOPOLOGY.topic_name(key)}",
    )
    world.redriven.update(letter.id for letter in done)
    for result in results:
        world.note(f"operator: dead letter {result.id}: {result.outcome} {result.detail}".rstrip())


def with_cancels(workload: Workload) -> Workload:
    """Operators cancel a request now and then, at a random moment after its publish (drawn from
    a generator of its own, so every other draw of the seed stays as it was)."""
    rng = random.Random(f"{workload.seed_text}:cancel")
    published = {a.label.split()[-1]: a.at for a in workload.arrivals if a.topic == "job_requests_topic"}
    for request_id, published_at in published.items():  # a bare body's label names no id it has
        if rng.random() < 0.25:
            at = published_at + timedelta(seconds=rng.choice((0, 5, 60, 600, rng.uniform(0, 7200))))
            run = functools.partial(cancel_request, request_id=request_id)
            workload.operations.append(Operation(at, f"cancel {request_id}", run))
    return workload


def with_crud_budget(workload: Workload) -> Workload:
    """A deployment that gives reconcile a small share of Vertex's CRUD quota (it shares the quota
    with other tools): a pass's budget of a few calls a minute, which lookups it does not need
    could spend before the requests that need one. Drawn from a generator of its own, so every
    other draw of the seed stays as it was."""
    rng = random.Random(f"{workload.seed_text}:crud")
    if rng.random() < 0.25:
        workload.env["SPOTJOBS_VERTEX_CRUD_PER_MINUTE"] = str(rng.choice((20, 60)))
        workload.env["SPOTJOBS_RECONCILE_CRUD_SHARE"] = str(rng.choice((0.25, 0.5)))
        workload.settings = Settings.from_env(workload.env)
        if workload.gpu_quota_full and rng.random() < 0.3:
            _gpu_burst(workload, rng)
    return workload


def _gpu_burst(workload: Workload, rng: random.Random) -> None:
    """One or two hundred GPU requests at once while the GPU quota is full: each create meets the 429,
    its message dead-letters, and reconcile re-publishes every claim at a growing interval, more
    claims backing off than the pass's CRUD budget has calls (issue 43, defect 4)."""
    from sim.virtual import EPOCH_OF_SIMULATION

    at = EPOCH_OF_SIMULATION + timedelta(minutes=rng.choice((5, 30)))
    for j in range(rng.choice((100, 200))):
        body = {"request_id": f"gpuburst{j}", "custom_job": custom_job(rng, gpu=True)}
        data = json.dumps(body, separators=(",", ":")).encode()
        workload.arrivals.append(Arrival(len(workload.arrivals), at, data, {}, f"gpu burst {body['request_id']}"))


def with_locations(workload: Workload) -> Workload:
    """Placement's world (docs/placement.md): some GPU requests are H100s allowed in two or more
    locations, and Spot has outages per location (a job waits PENDING through one), so attempts
    are placed and waiting jobs moved. Drawn from generators of their own, per request for its
    body (a publisher's retry is changed as its first send), so every other draw stays as it was."""
    rng = random.Random(f"{workload.seed_text}:locations")
    for arrival in workload.arrivals:
        if not arrival.is_plain_request or arrival.kind not in ("envelope", "deadline", "fallback"):
            continue
        body = json.loads(arrival.data)
        pick = random.Random(f"{workload.seed_text}:locations:{body['request_id']}")
        pools = body["custom_job"]["jobSpec"]["workerPoolSpecs"]
        if not pools[0]["machineSpec"].get("acceleratorCount") or pick.random() < 0.4:
            continue
        pools[0]["machineSpec"] = dict(H100)
        body["locations"] = pick.choice(([HOME, EAST], [EAST, HOME], [HOME, EAST, OTHER_REGION]))
        if arrival.kind == "envelope" and "max_cost_usd" not in body and pick.random() < 0.4:
            # Capacity alternatives (shared/fleet/capacity.py): an H100 node, else an A100 80GB one,
            # on Spot (any deployment allows it), in one location or in the failover order.
            body["capacity"] = [{"machine": H100["machineType"], "strategies": ["SPOT"]}, A100_80GB_SPOT]
            if pick.random() < 0.5:
                body["locations"] = [HOME]
        arrival.data = json.dumps(body, separators=(",", ":")).encode()
    placed = sorted(a.at for a in workload.arrivals if H100["machineType"].encode() in a.data)
    for location in (HOME, EAST):  # an outage from about when one of them arrives
        if placed and rng.random() < 0.7:
            begins = rng.choice(placed) - timedelta(seconds=rng.uniform(0, 600))
            workload.spot_outages[location] = [(begins, begins + timedelta(hours=rng.choice((1, 2, 6))))]
    return workload


def cancel_request(world: Any, request_id: str) -> None:
    """`spotjobs cancel REQUEST_ID`: the CLI's own library, on the world's state bucket."""
    import spotjobs
    from shared.ledger.records import CorruptRecord
    from shared.ledger.store import LedgerStore

    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
    first = request_id not in world.creates_before_cancel
    world.creates_before_cancel.setdefault(request_id, len(world.vertex.created))
    try:
        outcome = spotjobs.cancel(request_id, reason="sim", by="operator", ledger=ledger)
    except CorruptRecord as exc:  # the command says so and writes nothing (spotjobs/cli/cancel.py)
        if first:  # no cancel was recorded: the request is not the operator's to stop
            del world.creates_before_cancel[request_id]
        world.note(f"operator: cancel {request_id}: refused, {exc.reason}")
        return
    world.note(f"operator: cancel {request_id}: {outcome.result} ({outcome.status})")


def resubmit(world: Any, *, cut_at_copy: int | None) -> None:
    """`spotjobs resubmit` (spotjobs/cli/requests.py `run_resubmit`, its library on the sim's
    clients): a request that ended FAILED, GAVE_UP or CANCELLED, under the next free `-rN` id,
    its newest complete checkpoint carried over (`spotjobs.resume.CheckpointCarrier`), published
    only once the copy checked whole. `cut_at_copy`: the command dies at that copy call."""
    from shared.ledger.store import LedgerStore
    from shared.requests.envelope import InvalidJobRequest
    from shared.requests.policy import validate_request
    from sim.invariants import records
    from sim.world import SimCrash
    from spotjobs.cli.requests import RESUBMITTABLE, next_resubmit_id
    from spotjobs.resume import CheckpointCarrier, ResumeError

    ended = [r for r in records(world) if r.status in RESUBMITTABLE and r.request_id not in world.resubmitted]
    if not ended:
        world.note("operator: nothing to resubmit")
        return
    record = ended[0]
    client = world.storage.client()
    ledger = LedgerStore(client.bucket(world.settings.state_bucket))
    carrier = CheckpointCarrier(client, world.settings)
    new_id = next_resubmit_id(
        record.request_id, lambda candidate: ledger.get(candidate) is not None or not carrier.folder_empty(candidate)
    )
    if new_id is None:
        world.note(f"operator: no free resubmit id for {record.request_id}")
        return
    data = json.dumps({**record.request, "request_id": new_id}, separators=(",", ":")).encode()
    try:
        validate_request(data, attributes={"request_id": new_id}, settings=world.settings)
    except InvalidJobRequest as exc:
        world.note(f"operator: resubmit of {record.request_id} refused: {exc}")
        return
    world.copy_calls_left = cut_at_copy
    try:
        carried = carrier.carry(record.request_id, new_id)
    except (ResumeError, SimCrash) as exc:
        world.note(f"operator: resubmit {record.request_id} -> {new_id} failed ({exc}); nothing was published")
        return
    finally:
        world.copy_calls_left = None
    if carried is not None:
        world.trainer.copied(record.request_id, new_id, carried.name)
    world.resubmitted.add(record.request_id)
    message_id = world.pubsub.accept(world.settings.job_requests_topic, data, {"request_id": new_id})
    world.note(
        f"operator: resubmitted {record.request_id} as {new_id} (message {message_id}), resuming from "
        + (f"{carried.name} (step {carried.step})" if carried else "step 0")
    )


def hostile_message(
    rng: random.Random, k: int, honest: list[Arrival]
) -> tuple[dict[str, Any] | bytes, dict[str, str], str, frozenset[str]]:
    """One message of a hostile publisher (issue 32): forged re-queue and redrive attributes,
    the ids the system derives, far times, huge numbers, other requests' ids. Returns (body,
    attributes, label, the requests it may change: its own, if it names one of its own)."""
    from shared.requests.envelope import ORIGINAL_PUBLISH_TIME_ATTRIBUTE, REQUEUE_ATTRIBUTES

    victims = [json.loads(a.data).get("request_id") or a.attributes.get("request_id") for a in honest]
    victim = rng.choice([v for v in victims if v] or ["r0-envelope"])
    mine = f"h{k}-hostile"
    body: dict[str, Any] = {"request_id": mine, "custom_job": custom_job(rng, gpu=False)}
    kind = rng.choice(
        (
            "forged_requeue",
            "forged_requeue_full",
            "forged_redrive",
            "derived_id",
            "far_time",
            "huge_number",
            "victim_id",
        )
    )
    if kind == "forged_requeue":  # issue 32 item 3: only an id and an attempt
        return (
            {"request_id": victim, "attempt": rng.choice((1, 2, 3))},
            {**REQUEUE_ATTRIBUTES},
            f"{kind} of {victim}",
            frozenset(),
        )
    if kind == "forged_requeue_full":
        body.update(request_id=victim, attempt=rng.choice((1, 2, 5)))
        return body, {**REQUEUE_ATTRIBUTES, "request_id": victim}, f"{kind} of {victim}", frozenset()
    if kind == "forged_redrive":  # as `spotjobs dead-letters redrive` republishes, with a far first publish
        body.update(request_id=victim, attempt=2)
        attributes = {
            ORIGINAL_PUBLISH_TIME_ATTRIBUTE: rng.choice(("9999-12-31T23:59:59Z", "1970-01-01T00:00:00Z")),
            "CloudPubSubDeadLetterSourceDeliveryCount": "5",
            **(REQUEUE_ATTRIBUTES if rng.random() < 0.5 else {}),
        }
        return body, attributes, f"{kind} of {victim}", frozenset()
    if kind == "derived_id":  # issue 32 item 6: the ids spotjobs derives are reserved
        derived = rng.choice(("trg-daily-data-w20260302t080000z", "req-0123456789abcdef-20260302090000"))
        body["request_id"] = derived
        return body, {}, f"{kind} {derived}", frozenset()
    if kind == "far_time":  # issue 32 items 5 and 9
        body["deadline"] = "9999-12-31T23:59:59Z"
        body["total_steps"], body["expected_step_seconds"] = 100, 1.0
        return body, {ORIGINAL_PUBLISH_TIME_ATTRIBUTE: "9999-12-31T23:59:59Z"}, f"{kind} {mine}", frozenset({mine})
    if kind == "huge_number":  # issue 32 item 9: a 400-digit number
        huge = "1" + "0" * 400
        text = json.dumps({**body, "deadline": "2026-03-03T08:00:00Z", "total_steps": 0, "expected_step_seconds": 0})
        text = text.replace('"total_steps": 0', f'"total_steps": {huge}').replace(
            '"expected_step_seconds": 0', f'"expected_step_seconds": {huge}'
        )
        return text.encode(), {}, f"{kind} {mine}", frozenset({mine})
    body["request_id"] = victim  # another request's id on a body of its own
    body["priority"] = 100
    return body, {"request_id": victim}, f"{kind} {victim}", frozenset()


def forge_kit_line(world: Any) -> None:
    """Issue 32 item 1: a job writes a kit `preempted` line for another request's live job (the
    training account may write any job's log), routed by the sink like the victim's own."""
    from spotjobs_kit.lines import PREEMPTED, format_line

    live = sorted((job for job in world.vertex.jobs.values() if job.live), key=lambda j: j.name)
    if not live:
        world.note("hostile job: no live job to forge a line for")
        return
    victim = live[0]
    line = format_line(
        PREEMPTED,
        {
            "request_id": victim.request_id,
            "attempt": victim.attempt,
            "run": 0,
            "job_id": victim.name.rsplit("/", 1)[-1],
            "step": 100,
            "seconds_since_checkpoint": 1,
        },
        severity="WARNING",
    )
    message_id = world.emit_log_line(victim, line, "WARNING", forged=True)
    world.hostile[message_id] = frozenset()
