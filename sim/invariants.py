"""The invariants the simulator checks: each a small function of the world returning the
violations it sees. Adding one is writing a function and adding it to `STEP`, `QUIESCENCE` or
`RETENTION` (when it is checked: after every step, once the world is quiet, after retention).
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.alerts import AlertKind
from shared.deciding.alert_log import ALERTS_PREFIX
from shared.deciding.alert_log import LOG_DAYS as ALERT_LOG_DAYS
from shared.fleet.store import FLEET_PREFIX
from shared.fleet.store import RETENTION_DAYS as FLEET_RETENTION_DAYS
from shared.found_jobs import RECORDLESS_STRAY_NOTES, REFUSED_LISTING_NOTES
from shared.ledger.store import ACTIVE_PREFIX, REQUESTS_PREFIX
from shared.requests.envelope import MANIFESTS_PREFIX

if TYPE_CHECKING:
    from shared.ledger.records import RequestRecord
    from shared.settings import Settings
    from sim.vertex import SimJob
    from sim.world import Violation, World

ALERT_KINDS = {kind.value for kind in AlertKind}
# What the state bucket may keep of finished requests for good: configuration, the maintenance
# cursors and remembered regions, and the operator's archive of removed records (ledger_archive).
KEPT_FOR_GOOD = ("maintenance/", "archive/", "triggers/_definitions/")
# One per deployment, trigger or region (docs/ARCHITECTURE.md, "What the state bucket keeps"): a
# fixed set of names, which never grows with history.
FIXED_SET = re.compile(r"triggers/_retention\.json|triggers/[^/]+/state\.json|pacing/[^/]+/drainer\.json")
# A region's burst document lives while its waiting line does: the hand-over that finds the line
# empty removes it (docs/ARCHITECTURE.md, "One alert per burst"); requests that wait for good
# (a GPU quota that never frees) keep it, as they keep their entries.
BURST = re.compile(r"pacing/[^/]+/burst\.json")
# Pacing slots are deleted by a lifecycle rule a day after they are written (terraform/storage.tf).
SLOTS_PREFIX = "pacing/slots/"
SLOT_LIFETIME = timedelta(days=2)
# Fleet observations (shared/fleet/store.py) belong to no request: a lifecycle rule deletes them
# RETENTION_DAYS after their creation, and a job still waiting has its open wait written again.
FLEET_LIFETIME = timedelta(days=FLEET_RETENTION_DAYS + 1)
# The alerts log (shared/deciding/alert_log.py) belongs to no request: a lifecycle rule deletes an
# entry LOG_DAYS after its creation (a prune report is alerted after retention, so some are young).
ALERT_LOG_LIFETIME = timedelta(days=ALERT_LOG_DAYS + 1)
# The note of a refused stray sweep listing (shared/found_jobs.py) belongs to no request: its
# lifecycle rule deletes it after 32 days, and the sweep writes it again while the refusal stands.
REFUSED_LISTING_NOTE_LIFETIME = timedelta(days=33)


def violation(invariant: str, detail: str) -> Violation:
    from sim.world import Violation

    return Violation(invariant, detail)


# Reading the world (no faults: the checker is not a function instance).


def records(world: World) -> Iterator[RequestRecord]:
    """Every ledger record that reads; one that does not is `records_readable`'s to judge. Parsed
    once while the state bucket does not change: a check at quiescence reads them a dozen times
    (only to look at them)."""
    objects = world.storage.objects(world.settings.state_bucket)
    kept = world.checked.get("records")
    if kept is None or kept[0] != objects.changes:
        read = (read_record(obj.data) for name, obj in sorted(objects.items()) if _is_record(name))
        kept = world.checked["records"] = (objects.changes, [record for record in read if record is not None])
    yield from kept[1]


def _is_record(name: str) -> bool:
    return name.startswith("requests/") and name.endswith(".json")


def read_record(data: bytes) -> RequestRecord | None:
    """The record a ledger document holds, or None when the code cannot read it (as
    `LedgerStore.read`, which raises `CorruptRecord` for it)."""
    from shared.ledger.records import RequestRecord

    try:
        return RequestRecord.from_json(json.loads(data))
    except Exception:  # noqa: BLE001 - whatever the parser raises, the record is unreadable to the code
        return None


def records_readable(world: World) -> list[Violation]:
    """Every ledger record the code cannot read was written so by a person (`sim.faults`,
    `document_written`): the code itself never writes one."""
    written = world.tampering.written
    return [
        violation("records_readable", f"{name} cannot be read, and nobody wrote it by hand: {obj.data[:80]!r}")
        for name, obj in sorted(world.storage.objects(world.settings.state_bucket).items())
        if name.startswith("requests/")
        and name.endswith(".json")
        and name not in written
        and read_record(obj.data) is None
    ]


def alerts(world: World) -> list[dict[str, Any]]:
    return [m.json() for m in world.pubsub.on(world.settings.ops_alerts_topic) if isinstance(m.json(), dict)]


def unsettled_requests(world: World) -> list[str]:
    return [r.request_id for r in records(world) if not r.is_terminal or r.has_pending_effects]


def excused(world: World, request_id: str, location: str | None = None) -> str | None:
    """Why a permanent fault (`sim.faults`) frees a request from the liveness promises, or None:
    a person changed or deleted its record or its job, Vertex refused one of its calls for good,
    or a permission is missing for good in its location. Such a request must still be alerted:
    `nothing_stuck_silently` and the alert catalogue say how."""
    why = world.tampering.requests.get(request_id)
    if why is not None:
        return why
    refused = next((r for r in world.vertex.refused if r.request_id == request_id), None)
    if refused is not None:
        return f"Vertex refused its {refused.operation} for good ({refused.code})"
    for refusal in world.vertex.refusals:
        if refusal.until is None and refusal.location == location and refusal.since <= world.clock.now():
            return f"the {refusal.operation} permission is missing for good in {location}"
    return None


def waits_for_gpus_forever(world: World, record: RequestRecord) -> bool:
    """A GPU request in a project whose GPU quota never frees: it may wait, it is not stuck."""
    from sim.vertex import _uses_gpus

    pools = record.request.get("custom_job", {})
    return world.workload.gpu_quota_forever and _uses_gpus(pools)


# After every step.


def jobs_moved(world: World) -> tuple[int, int, int]:
    """Changes whenever a job is added or changes state (what `SimJob.live` reads)."""
    vertex = world.vertex
    return len(vertex.jobs), vertex._indexed, vertex.state_changes  # noqa: SLF001


def live_jobs(world: World) -> list[SimJob]:
    """The live jobs, in creation order; found again only once the jobs moved (`jobs_moved`)."""
    moved = jobs_moved(world)
    kept = world.checked.get("live_jobs")
    if kept is None or kept[0] != moved:
        kept = world.checked["live_jobs"] = (moved, [job for job in world.vertex.jobs.values() if job.live])
    return kept[1]


def one_live_job_per_request(world: World) -> list[Violation]:
    """At most one live job per request at any moment, but a person's re-run of a create (the
    sweep's to end) and the job of a claim whose record a person deleted while its create was out
    (`sim.faults.delete_record_at_a_create`): a copy of the message beside it claimed the id afresh,
    and no code can stop both creates; that job carries the deleted claim's kit key, is never
    recorded (`jobs_of_their_own_record`) and is cancelled (`no_unknown_live_job`)."""
    seen = (jobs_moved(world), len(world.tampering.duplicated_jobs))
    if world.checked.get("one_live_job_per_request") == seen:
        return []  # nothing moved since a check that found nothing
    live = collections.defaultdict(list)
    for job in live_jobs(world):
        if job.name not in world.tampering.duplicated_jobs:  # a person's: the sweep's to end
            live[job.request_id].append(job)
    found = [
        violation(
            "one_live_job_per_request",
            f"request {rid} has {len(jobs)} live jobs: "
            + ", ".join(
                f"a{j.attempt} {j.request.get('jobSpec', {}).get('scheduling', {}).get('strategy')} {j.state}"
                for j in jobs
            ),
        )
        for rid, jobs in live.items()
        if len(jobs) > 1 and len(_without_a_deleted_claims(world, rid, jobs)) > 1
    ]
    world.checked["one_live_job_per_request"] = None if found else seen
    return found


def _without_a_deleted_claims(world: World, request_id: str, jobs: list[SimJob]) -> list[SimJob]:
    if world.tampering.deleted_at_a_create != request_id:
        return jobs
    record = next((r for r in records(world) if r.request_id == request_id), None)
    keys = {a.n: a.kit_key for a in record.attempts} if record is not None else {}
    return [job for job in jobs if not (job.kit_key and keys.get(job.attempt) not in (None, job.kit_key))]


def policy_on_every_create(world: World) -> list[Violation]:
    """Every create sent to Vertex, whatever path sent it, is one the deployment allows."""
    settings = world.settings
    out = []
    new = world.vertex.created[world._checked_creates :]  # noqa: SLF001
    world._checked_creates = len(world.vertex.created)  # noqa: SLF001
    for create in new:
        out += [
            violation("policy_on_every_create", f"{_job_name(create.job)}: {p}")
            for p in policy_problems(world, settings, create)
        ]
    return out


def policy_problems(world: World, settings: Settings, create: Any) -> list[str]:
    from shared.jobs import LABEL_ATTEMPT, LABEL_DEPLOYMENT, LABEL_REQUEST_ID

    job = create.job
    spec = job.get("jobSpec") or {}
    labels = job.get("labels") or {}
    strategy = (spec.get("scheduling") or {}).get("strategy", "SPOT")
    problems = []
    if strategy != "SPOT" and strategy not in settings.allowed_fallback_strategies:
        problems.append(
            f"strategy {strategy}, allowed: SPOT, {', '.join(settings.allowed_fallback_strategies) or 'nothing else'}"
        )
    if strategy != "SPOT":
        attempt = int(labels.get(LABEL_ATTEMPT, "0") or 0)
        spot_before = {
            int(c.job.get("labels", {}).get(LABEL_ATTEMPT, "0"))
            for c in world.vertex.created
            if c.accepted
            and c.job.get("labels", {}).get(LABEL_REQUEST_ID) == labels.get(LABEL_REQUEST_ID)
            and (c.job.get("jobSpec", {}).get("scheduling") or {}).get("strategy", "SPOT") == "SPOT"
            and int(c.job.get("labels", {}).get(LABEL_ATTEMPT, "0")) < attempt
        }
        if len(spot_before) < settings.min_spot_attempts:
            problems.append(
                f"attempt {attempt} on {strategy} after {len(spot_before)} Spot attempt(s); "
                f"SPOTJOBS_MIN_SPOT_ATTEMPTS={settings.min_spot_attempts}"
            )
    if settings.allowed_locations and create.location not in settings.allowed_locations:
        problems.append(f"location {create.location} not allowed")
    account = spec.get("serviceAccount")
    if account != settings.training_service_account and account not in settings.allowed_service_accounts:
        problems.append(f"service account {account!r}")
    for pool in spec.get("workerPoolSpecs") or []:
        family = ((pool.get("machineSpec") or {}).get("machineType") or "").split("-")[0]
        if family not in settings.allowed_machine_families:
            problems.append(f"machine family {family!r}")
        image = (pool.get("containerSpec") or {}).get("imageUri", "")
        if settings.allowed_image_prefixes and not image.startswith(settings.allowed_image_prefixes):
            problems.append(f"image {image!r}")
    if labels.get(LABEL_DEPLOYMENT) != settings.deployment_label:
        problems.append("not labelled with the deployment")
    return problems


def _job_name(job: dict[str, Any]) -> str:
    from shared.jobs import LABEL_ATTEMPT, LABEL_REQUEST_ID

    labels = job.get("labels") or {}
    return f"create of {labels.get(LABEL_REQUEST_ID)} a{labels.get(LABEL_ATTEMPT)}"


# A run's report, not a request's decision: published directly by each prune run that deleted
# something or met errors, again by the redelivery of a run that met transient ones
# (shared/pruning/runner.py), so two runs pruning one request report it twice.
RUN_REPORTS = frozenset({"prune_report"})


def alert_key(alert: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two published alerts copies of one decision: what its marker names too (a
    rejection is alerted once per message, a request id conflict once per refused body, a stuck
    job once per wait, whatever states it went through (issue 43), and once after its cancel, seed
    1618, a stray once per stray job)."""
    details = alert.get("details") if isinstance(alert.get("details"), dict) else {}
    stuck = alert.get("kind") == AlertKind.JOB_STUCK
    return (
        alert.get("kind"),
        alert.get("request_id"),
        alert.get("attempt"),
        alert.get("job"),
        details.get("message_id"),
        details.get("refused_digest"),
        details.get("wait_began_at") if stuck else details.get("state"),
        details.get("after_cancel"),
        details.get("stray_job"),
    )


def alerts_not_per_redelivery(world: World) -> list[Violation]:
    """An alert is published once, plus once more for each delivery that published it and then
    failed before it could confirm the publish in the ledger (at-least-once: a crash, a 503 or a
    lost answer between the two; `World.unconfirmed_alerts` counts them from the run). A clean
    redelivery never publishes it again.

    Counted as alerts arrive (the topic only grows, and the unconfirmed counts only grow): a copy
    too many is seen at the check after its publish, and only a new publish can make one."""
    published = world.pubsub.on(world.settings.ops_alerts_topic)
    kept = world.checked.get("alerts_not_per_redelivery")  # a Counter built only the first time
    seen, counts = kept if kept is not None else (0, collections.Counter())
    grown = set()
    for message in published[seen:]:
        alert = message.json()
        if isinstance(alert, dict) and alert.get("request_id") and alert.get("kind") not in RUN_REPORTS:
            key = alert_key(alert)
            counts[key] += 1
            grown.add(key)
    world.checked["alerts_not_per_redelivery"] = (len(published), counts)
    if not grown:
        return []  # most checks: no alert since the last
    return [
        violation(
            "alerts_once",
            f"alert {key[0]} for {key[1]} attempt {key[2]} published {counts[key]} times "
            f"({world.unconfirmed_alerts[key]} publish(es) left unconfirmed by a fault)",
        )
        for key in counts  # in the order first published, as a count over the whole topic gives
        if key in grown and counts[key] > 1 + world.unconfirmed_alerts[key] + _records_deleted(world, key[1])
    ]


def _records_deleted(world: World, request_id: str) -> int:
    """1 when a person deleted the request's record (`sim.faults`): its markers went with it, so
    the record a redelivery or a redrive writes anew may decide its alerts once more (seed 100)."""
    return int(request_id in world.tampering.deleted_records)


def permanent_errors(entry: dict[str, Any]) -> tuple[str, ...]:
    """A prune report's errors for one request that a redelivery would meet again: each is
    `what: ExceptionType: message` (shared/pruning/report.py), and the type says which."""
    from shared.errors import _retryable_api_exceptions  # noqa: PLC2701 - the product's own split

    retryable = {cls.__name__ for cls in _retryable_api_exceptions()} | {"TransientError", "SimCrash"}
    errors = entry.get("errors") if isinstance(entry.get("errors"), list) else []
    return tuple(sorted(e for e in errors if isinstance(e, str) and _error_type(e) not in retryable))


def _error_type(error: str) -> str:
    parts = error.split(": ")
    return parts[1] if len(parts) > 1 else ""


def errors_alerted_once(world: World) -> list[Violation]:
    """One condition raises its ERROR once across runs: a prune run's report names a request's
    permanent errors (ERROR: someone must act), and another run's report (a prune message of its own,
    `World.alert_origins`) naming the same request with the same permanent errors and nothing
    deleted from it says nothing new: every hourly run would say it again. Where the docs say a run
    report repeats, it may: a redelivered run publishes its report again, and what earlier runs
    deleted and could not report comes in a later one's (`unreported_earlier`, not read here)."""
    runs: dict[tuple[str, tuple[str, ...]], set[str]] = collections.defaultdict(set)
    for message in world.pubsub.on(world.settings.ops_alerts_topic):
        alert = message.json()
        if not isinstance(alert, dict) or alert.get("kind") not in RUN_REPORTS or alert.get("severity") != "ERROR":
            continue
        details = alert.get("details") if isinstance(alert.get("details"), dict) else {}
        for entry in details.get("requests") or []:
            if isinstance(entry, dict) and not entry.get("objects_deleted") and (errors := permanent_errors(entry)):
                runs[(str(entry.get("request_id")), errors)].add(world.alert_origins.get(message.message_id, ""))
    return [
        violation(
            "errors_alerted_once",
            f"{len(origins)} prune runs reported the same permanent errors for {request_id}, nothing deleted "
            f"from it: {errors[0][:160]}",
        )
        for (request_id, errors), origins in runs.items()
        if len(origins) > 1
    ]


def resumes_from_newest_complete(world: World) -> list[Violation]:
    """Every run of a job (a new attempt, a restart, a resubmitted request's first) resumes from
    the newest checkpoint that finished whole in its own request's folder, as the simulator wrote
    it (`sim.trainer`): never a torn one, never another request's, never an older one."""
    out = []
    new = world.trainer.resumes[world._checked_resumes :]  # noqa: SLF001
    world._checked_resumes = len(world.trainer.resumes)  # noqa: SLF001
    for resume in new:
        who = f"{resume.request_id} a{resume.attempt}"
        if resume.folder != resume.own_folder:
            out.append(
                violation("resumes_from_newest_complete", f"{who} trains in {resume.folder}, not its own folder")
            )
            continue
        expected = resume.expected
        if expected is not None and not (
            expected.written_by == resume.request_id or expected.written_by.startswith("copy of ")
        ):
            out.append(
                violation(
                    "resumes_from_newest_complete",
                    f"{who}'s folder holds {expected.name}, written by {expected.written_by}",
                )
            )
        wanted = (expected.name, expected.step) if expected else None
        if resume.resumed != wanted:
            torn = world.trainer.saves.get(resume.folder, {}).get(resume.resumed[0]) if resume.resumed else None
            what = f"{resume.resumed[0]} (step {resume.resumed[1]}" if resume.resumed else "nothing (step 0"
            what += ", torn)" if torn is not None and not torn.complete else f", written by {resume.resumed_by})"
            out.append(
                violation(
                    "resumes_from_newest_complete",
                    f"{who} resumed from {what}; the newest complete checkpoint of its folder is "
                    + (f"{expected.name} (step {expected.step})" if expected else "none"),
                )
            )
        finished = resume.newest_finished
        if finished is not None and not resume.newest_finished_whole:
            out.append(
                violation(
                    "newest_complete_kept",
                    f"{who} found {finished.name} (step {finished.step}), its request's newest complete "
                    "checkpoint, no longer whole",
                )
            )
    return out


def newest_complete_kept(world: World) -> list[Violation]:
    """The newest complete checkpoint of a request with a live job is never pruned (or cut).

    What it reads (the requests with a live job, the checkpoint bucket, the trainer's saves) is
    fingerprinted: unchanged since a check that found nothing, there is nothing new to find."""
    fingerprint = (
        world.storage.objects(world.settings.checkpoint_bucket).changes,
        world.trainer.changes,
        jobs_moved(world),  # the live jobs as well: they change only when a job moves
    )
    if world.checked.get("newest_complete_kept") == fingerprint:
        return []
    out = []
    for request_id in sorted({job.request_id for job in live_jobs(world)}):
        out += _newest_kept(world, request_id, "has a live job")
    world.checked["newest_complete_kept"] = None if out else fingerprint
    return out


def newest_complete_kept_while_unfinished(world: World) -> list[Violation]:
    """... nor that of a request that has not ended (its next attempt resumes from it)."""
    out = []
    for record in records(world):
        if not record.is_terminal:
            out += _newest_kept(world, record.request_id, f"is {record.status}")
    return out


def _newest_kept(world: World, request_id: str, why: str) -> list[Violation]:
    from shared.pruning.folders import OutOfScope

    try:
        folder = world.trainer.own_folder(request_id)
    except OutOfScope:
        return []
    newest = world.trainer.newest_finished(folder)
    if newest is None or world.trainer.whole(folder, newest):
        return []
    return [
        violation(
            "newest_complete_kept",
            f"{newest.name} (step {newest.step}), the newest complete checkpoint of {request_id}, which {why}, "
            "is no longer whole",
        )
    ]


def others_state(world: World, own: frozenset[str]) -> dict[str, Any]:
    """What a hostile step must leave alone: every other request's ledger record, its jobs, and
    the objects in its checkpoint folder (by URI: their names begin `requests/` too). Every entry
    but a record's is (its request, what it was)."""
    checkpoint_root = world.trainer.own_folder("x")[: -len("x/checkpoints/")]
    state: dict[str, Any] = {}
    # The quota line's drainer may run in any submit delivery and create the jobs of the requests
    # waiting in line, or clear their entries: the system's own work, whoever's message gave it
    # the turn. They are left out, and their entries kept so that the state after a step knows them.
    state_objects = world.storage.objects(world.settings.state_bucket)
    for name in state_objects:
        if "/waiting/" in name and (rid := _request_of(name, b"")):
            state[name] = (rid, "in line")
    own = own | _in_line(state)
    for name, obj in state_objects.items():
        if name.startswith("requests/") and name.endswith(".json") and name[9:-5] not in own:
            record = _json_or_none(obj.data)
            state[name] = _decisions_of(record) if isinstance(record, dict) else {"unreadable": obj.data}
    for job in world.vertex.jobs.values():
        if job.request_id not in own:
            state[job.name] = (job.request_id, job.state)
    for name, obj in world.storage.objects(world.settings.checkpoint_bucket).items():
        rid = name[len(checkpoint_root) :].split("/", 1)[0]
        if name.startswith(checkpoint_root) and rid not in own:
            state[f"gs://{world.settings.checkpoint_bucket}/{name}"] = (rid, obj.generation)
    return state


def _in_line(state: dict[str, Any]) -> set[str]:
    """The requests `others_state` left out for their place in a quota line."""
    return {value[0] for name, value in state.items() if name.startswith("pacing/")}


def _is_record(name: str) -> bool:
    return name.startswith("requests/") and name.endswith(".json")


def _json_or_none(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _decisions_of(record: dict[str, Any]) -> dict[str, Any]:
    """A record without what a publisher of the same id may legitimately add to it: the
    `request_id_conflict` alert the system keeps in it to tell the operators of a second body
    (it decides nothing for the request), and the write's time."""
    conflict = AlertKind.REQUEST_ID_CONFLICT.value
    kept = {k: v for k, v in record.items() if k != "updated_at"}
    # A record a person rewrote in another layout (sim.faults.reshape) is compared as stored.
    markers, alerts = record.get("markers") or [], record.get("pending_alerts") or []
    if isinstance(markers, list):
        kept["markers"] = [m for m in markers if not (isinstance(m, str) and m.startswith(conflict + ":"))]
    if isinstance(alerts, list):
        kept["pending_alerts"] = [a for a in alerts if not (isinstance(a, dict) and a.get("kind") == conflict)]
    kept.pop("effects_taken_at", None)
    return kept


def _decided_requeues(state: dict[str, Any]) -> dict[str, int]:
    """By request, the attempt its record's re-queue decided (the next one to claim)."""
    out = {}
    for name, record in state.items():
        requeue = record.get("requeue") if name.startswith("requests/") and isinstance(record, dict) else None
        if isinstance(requeue, dict) and isinstance(requeue.get("attempt"), int):
            out[name[9:-5]] = requeue["attempt"]
    return out


def _claims_the_decided_requeue(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """The record changed only by claiming the attempt its re-queue decided: that attempt added
    after the others, unchanged, the re-queue settled, the status CLAIMED (or SUBMITTED, its job
    recorded in the same delivery)."""
    requeue = (old or {}).get("requeue")
    if old is None or new is None or not isinstance(requeue, dict):
        return False
    attempts, claimed = old.get("attempts") or [], new.get("attempts") or []
    unchanged = {k: v for k, v in old.items() if k not in ("attempts", "requeue", "status")} == {
        k: v for k, v in new.items() if k not in ("attempts", "requeue", "status")
    }
    return (
        unchanged
        and new.get("status") in ("CLAIMED", "SUBMITTED")  # claimed, and maybe its job recorded
        and new.get("requeue") is None
        and claimed[:-1] == attempts
        and len(claimed) == len(attempts) + 1
        and isinstance(claimed[-1], dict)
        and claimed[-1].get("n") == requeue.get("attempt")
    )


def _attempt_of_job(world: World, name: str) -> int | None:
    job = world.vertex.jobs.get(name)
    return job.attempt if job is not None else None


def _only_published(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """The record changed only by publishing alerts decided before (any delivery that finds a
    request's effects pending publishes them: the system's own work, not the message's)."""
    if old is None or new is None:
        return False
    # A requester's topic that refuses for good: its notifications dropped, with one alert.
    refused = AlertKind.NOTIFY_REFUSED.value
    remaining = [a for a in new.get("pending_alerts") or [] if a.get("kind") != refused]
    notices = new.get("pending_notices") or []
    published = ("pending_alerts", "pending_notices", "markers")
    # The refusal's marker may be new; one set before (its alert decided earlier, published by
    # this step's takeover: seed 1505) is kept like every other.
    old_markers = old.get("markers") or []
    new_markers = [m for m in new.get("markers") or [] if m in old_markers or not m.startswith(refused + ":")]
    return (
        all(a in (old.get("pending_alerts") or []) for a in remaining)
        and all(n in (old.get("pending_notices") or []) for n in notices)
        and new_markers == old_markers
        and {k: v for k, v in old.items() if k not in published} == {k: v for k, v in new.items() if k not in published}
    )


def records_created(before: dict[str, Any], after: dict[str, Any]) -> frozenset[str]:
    """The records a step created, not counting those of requests it took out of a quota line."""
    in_line = _in_line(before)
    return frozenset(
        name[9:-5] for name in after.keys() - before.keys() if _is_record(name) and name[9:-5] not in in_line
    )


def hostile_step_contained(world: World, before: dict[str, Any], after: dict[str, Any]) -> list[Violation]:
    """Nothing a hostile publisher or its job does changes another request's record, jobs or
    folder: the delivery of its message changed nothing `others_state` saw before it, and
    created no record (or job) of a request that existed, nor one under an id spotjobs derives
    (`req-`, `trg-`). A request id nobody had used yet is the publisher's to take. A forged
    re-queue of the attempt the victim's record has decided is due may claim it, and create its
    job, as the real re-queue would (shared/requests/envelope.py: the attribute marks, the ledger
    decides; the job is built from the record's request, not the message's): the system's own
    work, whichever of the two messages comes first (seed 31)."""
    from shared.jobs import RESERVED_ID_PREFIXES

    existed = {name[9:-5] for name in before if _is_record(name)}
    decided = _decided_requeues(before)
    # A request in line before the step is left to the drainer, which may take it out of the line
    # (seed 871: it then read as "created"); the line's entries are no state of their own.
    in_line = _in_line(before)
    problems = []
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if old == new or name.startswith("pacing/"):
            continue
        if (name[9:-5] if _is_record(name) else (new or old)[0]) in in_line:
            continue
        if _is_record(name):
            rid = name[9:-5]
            if _only_published(old, new) or _claims_the_decided_requeue(old, new):
                continue
            if old is None and rid not in existed and not rid.startswith(RESERVED_ID_PREFIXES):
                continue
            fields = sorted(
                k for k in (old or {}).keys() | (new or {}).keys() if (old or {}).get(k) != (new or {}).get(k)
            )
            problems.append(f"{name} ({'created' if old is None else 'changed: ' + ', '.join(fields)})")
        elif "/customJobs/" in name:
            rid = (new or old)[0]
            if old is None and rid not in existed and not rid.startswith(RESERVED_ID_PREFIXES):
                continue
            if old is None and _attempt_of_job(world, name) == decided.get(rid):
                continue  # the job of the decided re-queue's attempt, from the record's request
            problems.append(f"job {name.rsplit('/', 1)[-1]} of {rid} ({old and old[1]} -> {new and new[1]})")
        else:
            problems.append(f"{name} ({'written' if new is not None else 'deleted'})")
    if not problems:
        return []
    return [
        violation("hostile_step_contained", "a hostile message changed another request's " + "; ".join(problems[:3]))
    ]


def note_lookup(world: World, location: str, request_id: str) -> None:
    """Called as reconcile looks a request's jobs up by its labels: a lookup of a claim whose last
    re-publish is still backing off (and no cancel asks for it) spends a CRUD call whose answer
    the pass throws away (docs/ARCHITECTURE.md: "no lookup while the last re-publish backs off").
    Judged on the record as stored at that moment, read without a call."""
    if world._current is None or world._current.name != "reconcile":
        return
    stored = world.storage.objects(world.settings.state_bucket).get(f"requests/{request_id}.json")
    record = _json_or_none(stored.data) if stored is not None else None
    if not isinstance(record, dict) or record.get("cancel") is not None:
        return
    now = world.clock.now()
    lease = world.settings.claim_lease_seconds
    for claim in record.get("attempts") or ():
        if not isinstance(claim, dict) or claim.get("job") or claim.get("outcome") or not claim.get("republished_at"):
            continue
        if claim.get("location") != location:
            continue
        held_for = (now - datetime.fromisoformat(claim["claimed_at"])).total_seconds()
        since = (now - datetime.fromisoformat(claim["republished_at"])).total_seconds()
        backoff = min(max(lease, 3600.0), lease * 2 ** min(int(claim.get("republished") or 0), 32))
        if held_for >= lease and since < backoff:
            world.wasted_lookups.append(
                f"reconcile looked up {request_id} a{claim.get('n')}'s job at {now:%m-%d %H:%M:%S} while its "
                f"re-publish #{claim.get('republished')} backs off ({since:.0f} s of {backoff:.0f} s)"
            )


def no_lookup_while_backing_off(world: World) -> list[Violation]:
    """No reconcile pass spends a Vertex lookup on a claim whose re-publish backs off
    (`note_lookup`): a burst of such claims would spend the pass's CRUD budget."""
    return [violation("no_lookup_while_backing_off", detail) for detail in world.wasted_lookups]


# Once the world is quiet.


def no_unknown_live_job(world: World) -> list[Violation]:
    """After the last stray pass, every live job is the recorded job of its request's attempt
    (but a job whose record a person left unreadable: nothing is decided on that record until an
    operator repairs it, and `ledger_corrupt` says so; and the job of a claim whose look-up Vertex
    refused for good, a 403 on list: neither the look-up nor the stray sweep can see it until an
    operator grants the permission, and `lookup_failed` says so, seed 84; and a job in a location
    whose stray sweep listing Vertex refuses, once `stray_sweep_refused` names it, seed 10018; and a
    stray whose cancel Vertex refuses, once `stray_sweep_refused` names the job, seed 954)."""
    from sim.promises import never_named_for_a_refused_lookup, said_blind, said_uncancelled

    recorded = {a.job for r in records(world) for a in r.attempts if a.job}
    unreadable = left_unreadable(world)
    unlooked = never_named_for_a_refused_lookup(world)
    blind = said_blind(world)
    uncancelled = said_uncancelled(world)
    return [
        violation(
            "no_unknown_live_job",
            f"live job {job.name.rsplit('/', 1)[-1]} of {job.request_id} a{job.attempt} is not in the ledger",
        )
        for job in world.vertex.jobs.values()
        if job.live
        and job.name not in recorded
        and job.request_id not in unreadable
        and (job.request_id, job.attempt) not in unlooked
        and job.location not in blind
        and job.name not in uncancelled
    ]


def awaiting_redrive(world: World) -> set[str]:
    """Requests named by a job-requests message on the dead-letter topic not redriven yet: the
    dead-letter alert (terraform/monitoring.tf) is their word until an operator redrives them
    (seed 130: a rejection whose note's write lost its answer, dead-lettered before it was alerted)."""
    from sim.pubsub import DEAD_LETTER_TOPIC

    out = set()
    for message in world.pubsub.on(DEAD_LETTER_TOPIC):
        if message.message_id in world.redriven:
            continue
        body = _json_or_none(message.data)
        named = body.get("request_id") if isinstance(body, dict) else None
        out.add(named or message.attributes.get("request_id"))
    return out - {None}


def left_unreadable(world: World) -> set[str]:
    """Requests whose record a person wrote in a shape the code cannot read, and left so: it stays,
    with what names it, until an operator repairs it (CorruptRecord: nothing is decided on it)."""
    state = world.storage.objects(world.settings.state_bucket)
    return {
        name[len("requests/") : -len(".json")]
        for name in world.tampering.written
        if name.startswith("requests/") and name in state and read_record(state[name].data) is None
    }


def liveness(world: World) -> list[Violation]:
    """Every accepted request has a live job or a terminal status (failed ones with an alert);
    every line waiting for the quota is empty; every request a publisher sent is in the ledger
    or was refused with an invalid_request alert."""
    out = []
    published_alerts = alerts(world)
    alerted = {(a.get("request_id")) for a in published_alerts if a.get("severity") == "ERROR"}
    live_jobs = {job.name for job in world.vertex.jobs.values() if job.live}
    known = set()
    for record in records(world):
        known.add(record.request_id)
        if waits_for_gpus_forever(world, record):
            continue
        latest = record.latest
        if not record.is_terminal and excused(world, record.request_id, latest.location if latest else None):
            continue
        if not record.is_terminal:
            if latest is None or latest.job not in live_jobs:
                where = (
                    f"attempt {latest.n} {'waits in line' if latest and latest.waiting_since else 'has no live job'}"
                    if latest
                    else "no attempt"
                )
                out.append(
                    violation("liveness", f"request {record.request_id} is {record.status} after the bound: {where}")
                )
        elif record.status in ("FAILED", "GAVE_UP") and record.request_id not in alerted:
            out.append(violation("liveness", f"request {record.request_id} is {record.status} with no alert"))
    refused = {a.get("request_id") for a in published_alerts if a.get("kind") == "invalid_request"}
    refused |= awaiting_redrive(world)
    for arrival in world.workload.arrivals:
        if arrival.index in world.disabled_arrivals or arrival.topic != "job_requests_topic":
            continue
        body = json.loads(arrival.data)
        rid = body.get("request_id") or arrival.attributes.get("request_id")
        if rid and rid not in known and rid not in refused and not excused(world, rid):
            out.append(
                violation(
                    "liveness",
                    f"request {rid} was published ({arrival.label}) and is neither in the ledger nor refused",
                )
            )
    for rid, deletions in world.tampering.republished.items():  # the id was the person's to reuse
        if rid in known or rid in refused or len(world.tampering.deleted_record_documents[rid]) > deletions:
            continue
        out.append(
            violation(
                "liveness",
                f"request {rid}, published again after a person deleted its record, is neither in the ledger nor refused",
            )
        )
    for name in world.storage.objects(world.settings.state_bucket):
        if name.startswith("pacing/") and "/waiting/" in name:
            rid = name.rsplit("/", 1)[-1].split("~")[1]
            record = next((r for r in records(world) if r.request_id == rid), None)
            if record is not None and excused(world, rid, name.split("/")[1]):
                continue
            if record is None or not waits_for_gpus_forever(world, record):
                out.append(violation("liveness", f"{name} is still in line after the bound ({_standing(record)})"))
    return out


def _standing(record: RequestRecord | None) -> str:
    """Where a waiting entry's request stands: a settled one should have left the line."""
    if record is None:
        return "no record"
    latest = record.latest
    if record.is_terminal or (latest is not None and latest.job):
        return f"its request is settled: {record.status}, job {latest.job_id if latest else None}"
    return f"its request waits: {record.status}"


def alerts_at_least_once(world: World) -> list[Violation]:
    """Every alert a record says was decided was published; none is left pending."""
    published = {(a.get("kind"), a.get("request_id"), a.get("attempt")) for a in alerts(world)}
    out = []
    for record in records(world):
        if record.pending_alerts:
            out.append(
                violation(
                    "alerts_once",
                    f"request {record.request_id} still has {len(record.pending_alerts)} alert(s) pending",
                )
            )
        for marker in record.markers:
            kind, _, rest = marker.partition(":")
            if kind not in ALERT_KINDS:
                continue
            attempt = int(rest.split(":")[0]) if rest.split(":")[0].isdigit() else None
            if (kind, record.request_id, attempt) not in published and not any(
                k == kind and r == record.request_id for k, r, _ in published
            ):
                out.append(
                    violation("alerts_once", f"alert {marker} of {record.request_id} was decided, never published")
                )
    return out


def notifications_at_least_once(world: World) -> list[Violation]:
    """Every notification a record says was decided (its `notice:` markers) was published to the
    request's topic, and none is left pending; unless that topic refused for good, which only a
    refusing topic does (the refusal's one alert: `alerts_once`, and `alert_catalogue`)."""
    from shared.deciding.notices import NOTICE_MARKER, REFUSED_MARKER, event_id, notify_topic

    out = []
    for record in records(world):
        topic = notify_topic(record)
        if topic is None:
            continue
        name = topic.rsplit("/", 1)[-1]
        if record.pending_notices:
            out.append(
                violation(
                    "notifications_at_least_once",
                    f"request {record.request_id} still has {len(record.pending_notices)} notification(s) pending",
                )
            )
        if REFUSED_MARKER in record.markers:
            if name not in world.workload.refusing_topics:
                out.append(
                    violation(
                        "notifications_at_least_once",
                        f"the notifications of {record.request_id} stopped, but its topic {name} accepts publishes",
                    )
                )
            continue
        published = {body.get("event_id") for m in world.pubsub.on(name) if isinstance(body := m.json(), dict)}
        for marker in record.markers:
            parts = marker.split(":")
            if len(parts) != 4 or parts[0] != NOTICE_MARKER:
                continue
            if event_id(record.request_id, int(parts[2]), parts[1], int(parts[3])) not in published:
                out.append(
                    violation(
                        "notifications_at_least_once",
                        f"notification {marker} of {record.request_id} was decided, never published to {name}",
                    )
                )
    return out


def own_notices(world: World, record: RequestRecord) -> list[dict[str, Any]]:
    """The notifications on the request's topic that are its own (a resubmitted request names its
    original's topic), as published; none without a topic."""
    from shared.deciding.notices import notify_topic

    topic = notify_topic(record)
    if topic is None:
        return []
    bodies = (message.json() for message in world.pubsub.on(topic.rsplit("/", 1)[-1]))
    return [body for body in bodies if isinstance(body, dict) and body.get("request_id") == record.request_id]


def preemptions_told_within_reclaimed_vms(world: World) -> list[Violation]:
    """No `preempted` notification tells more preemptions of an attempt than VMs Vertex reclaimed
    of its job (one when the product read its end as "at least one": `preemptions_unknown`): a
    notification cannot be taken back, so the kit's `preempted` line of Vertex's stop at the job
    timeout, which the count drops once the job's end is seen, is never told (docs/requests.md,
    "Notifications")."""
    from shared.deciding.notices import NoticeKind

    jobs = world.vertex.jobs
    out = []
    for record in records(world):
        told: dict[int, int] = {}
        for body in own_notices(world, record):
            if body.get("kind") == NoticeKind.PREEMPTED:
                attempt = int(body.get("attempt") or 0)
                told[attempt] = max(told.get(attempt, 0), int(body.get("preemptions") or 0))
        for n, preemptions in sorted(told.items()):
            attempt = record.attempt(n)
            job = jobs.get(attempt.job or "") if attempt is not None else None
            if attempt is None or job is None:
                continue
            bound = max(job.vms_reclaimed, 1 if attempt.preemptions_unknown else 0)
            if preemptions > bound:
                out.append(
                    violation(
                        "preemptions_told_within_reclaimed_vms",
                        f"{record.request_id} was told {preemptions} preemption(s) of attempt {n}; "
                        f"Vertex reclaimed {job.vms_reclaimed} VMs of its job ({job.fate})",
                    )
                )
    return out


def ending_is_the_last_notification(world: World) -> list[Violation]:
    """On each request's own topic no notification has a `seq` above its ending's (`succeeded`,
    `failed`, `gave_up`, `cancelled`: "the request ended (the last event)", docs/requests.md,
    "Notifications"), and its record decided nothing after the ending (its `notice:` markers
    number the ending's `seq`)."""
    from shared.deciding.notices import ENDINGS, NOTICE_MARKER

    endings = {str(kind) for kind in ENDINGS.values()}
    out = []
    for record in records(world):
        told = {int(body.get("seq") or 0): str(body.get("kind")) for body in own_notices(world, record)}
        ended = min((seq for seq, kind in told.items() if kind in endings), default=None)
        if ended is None:
            continue
        after = sorted((seq, kind) for seq, kind in told.items() if seq > ended)
        if after:
            out.append(
                violation(
                    "ending_is_the_last_notification",
                    f"{record.request_id} was told {after[0][1]} (seq {after[0][0]}) after its end, "
                    f"{told[ended]} (seq {ended})",
                )
            )
        elif (decided := record.count_marks(f"{NOTICE_MARKER}:")) > ended:
            out.append(
                violation(
                    "ending_is_the_last_notification",
                    f"{record.request_id} decided {decided - ended} notification(s) after its end, "
                    f"{told[ended]} (seq {ended})",
                )
            )
    return out


# After retention.


def retention_horizon_seconds(settings: Settings) -> float:
    from shared.ledger.retention import MIN_RETENTION_SECONDS

    return (
        max(
            settings.ledger_retention_seconds,
            MIN_RETENTION_SECONDS,
            settings.finished_retention_seconds + 86400,
            settings.bare_dedupe_seconds,
        )
        + 2 * 86400
    )


def bounded_state(world: World) -> list[Violation]:
    """After retention, nothing of a finished request is left in the state bucket (what belongs
    to a request still running, e.g. a job that never leaves PENDING, may stay)."""
    unfinished = set(unsettled_requests(world)) | left_unreadable(world)
    leftovers = collections.defaultdict(list)
    now = world.clock.now()
    state_objects = world.storage.objects(world.settings.state_bucket)
    undecided = windows_kept_until_repaired(world)
    live_ids = {job.name.rsplit("/", 1)[-1] for job in world.vertex.jobs.values() if job.live}
    live_recordless = _recordless_requests_with_a_live_job(world, state_objects)
    sweep_blind = _stray_sweep_refused_a_listing(world)
    waited_in = {
        name.split("/")[1]
        for name, obj in state_objects.items()
        if name.startswith("pacing/") and "/waiting/" in name and _request_of(name, obj.data) in unfinished
    }
    for name, obj in sorted(state_objects.items()):
        if name.startswith(KEPT_FOR_GOOD) or FIXED_SET.fullmatch(name) or _request_of(name, obj.data) in unfinished:
            continue
        if BURST.fullmatch(name) and name.split("/")[1] in waited_in:
            continue  # its burst ends when its line is empty: someone unfinished still waits in it
        if _window_of(name) in undecided:
            continue
        if name.startswith(SLOTS_PREFIX) and now - obj.time_created < SLOT_LIFETIME:
            continue  # a slot of the last day: its lifecycle rule has not come round yet
        if name.startswith(FLEET_PREFIX) and now - obj.time_created < FLEET_LIFETIME:
            continue  # a fact of the estimate's window: its lifecycle rule has not come round yet
        if name.startswith(ALERTS_PREFIX) and now - obj.time_created < ALERT_LOG_LIFETIME:
            continue  # an alert of the log's window: its lifecycle rule has not come round yet
        if name.startswith(REFUSED_LISTING_NOTES) and now - obj.time_created < REFUSED_LISTING_NOTE_LIFETIME:
            continue  # said again while the refusal stands: its lifecycle rule has not come round yet
        if name.startswith(RECORDLESS_STRAY_NOTES) and name[len(RECORDLESS_STRAY_NOTES) :] in live_ids:
            continue  # a stray that lives on (its cancel refused, seed 954): said again while it does
        if name.startswith(ACTIVE_PREFIX) and name[len(ACTIVE_PREFIX) :] in live_recordless:
            continue  # renewed by each stray sweep while the job lives (its cancel refused, seed 10503)
        if (
            name.startswith(ACTIVE_PREFIX)
            and sweep_blind
            and f"{REQUESTS_PREFIX}{name[len(ACTIVE_PREFIX) :]}.json" not in state_objects
        ):
            continue  # no sweep can say its job ended while a location's listing is refused (seed 118)
        leftovers[_kind_of_state(name)].append(name)
    return [
        violation("bounded_state", f"{len(names)} {kind} object(s) left after retention, e.g. {names[0]}")
        for kind, names in sorted(leftovers.items())
    ]


def _recordless_requests_with_a_live_job(world: World, state_objects: dict[str, Any]) -> set[str]:
    """Ids with no ledger record whose labelled job has not ended: the stray sweep renews each one's
    active marker while the job lives, so a fresh message of the id looks (docs/ARCHITECTURE.md,
    "Exactly once, and what breaks it"; seed 10178)."""
    from shared.jobs import LABEL_REQUEST_ID

    labelled = {job.labels.get(LABEL_REQUEST_ID, "") for job in world.vertex.jobs.values() if job.live}
    return {rid for rid in labelled if rid and f"{REQUESTS_PREFIX}{rid}.json" not in state_objects}


def _stray_sweep_refused_a_listing(world: World) -> bool:
    """Whether Vertex refuses `list` in a location at the world's end (a 403 no one fixed): the stray
    sweep cannot list it, so no pass can say that no job of a record-less id lives there, and the
    id's marker stays until the permission is granted (`remove_recordless_markers`, docs/ARCHITECTURE.md,
    "The active index": removed only when provably stale; `stray_sweep_refused` says the sweep is blind)."""
    now = world.clock.now()
    return any(refusal.applies("list", refusal.location, now) for refusal in world.vertex.refusals)


def windows_kept_until_repaired(world: World) -> set[tuple[str, str]]:
    """(trigger, window) of each trigger whose state a person left unreadable: its windows still
    open (none is decided until the state is repaired: `trigger_corrupt`) and its deferred ones
    (what the state carries is unknown), which shared/triggers/retention.py keeps by design."""
    from shared.triggers.store import unreadable

    state_objects = world.storage.objects(world.settings.state_bucket)
    corrupt = {
        name.split("/")[1]
        for name in world.tampering.written
        if name.startswith("triggers/")
        and name.endswith("/state.json")
        and name in state_objects
        and unreadable(name, state_objects[name].data) is not None
    }
    kept = set()
    for name, obj in state_objects.items():
        window = _window_of(name)
        if window is None or window[0] not in corrupt:
            continue
        if name.startswith(f"triggers/{window[0]}/open/") or (name.endswith(".json") and _deferred(obj.data)):
            kept.add(window)
    return kept


def _window_of(name: str) -> tuple[str, str] | None:
    """(trigger, window id) of a window's object: its open marker, document, members or seal."""
    parts = name.split("/")
    if len(parts) < 4 or parts[0] != "triggers" or parts[2] not in ("open", "windows"):
        return None
    return parts[1], parts[3].removesuffix(".json")


def _deferred(data: bytes) -> bool:
    document = _json_or_none(data)
    return isinstance(document, dict) and document.get("state") == "deferred"


def _request_of(name: str, data: bytes) -> str | None:
    """The request a ledger object belongs to, if it names one."""
    if name.startswith("jobs/"):
        try:
            return json.loads(data).get("request_id")
        except ValueError:
            return None
    if name.startswith("requests/") and name.endswith(".json"):
        return name[len("requests/") : -len(".json")]
    if name.startswith("active/"):
        return name[len("active/") :]
    if name.startswith(MANIFESTS_PREFIX) and name.endswith(".json"):  # a trigger request's manifest
        return name[len(MANIFESTS_PREFIX) : -len(".json")]
    if name.startswith("pacing/") and "/waiting/" in name:
        return name.rsplit("/", 1)[-1].split("~")[1]
    return None


def _kind_of_state(name: str) -> str:
    first = name.split("/", 1)[0]
    return {
        "requests": "ledger",
        "active": "ledger",
        "jobs": "ledger",
        "dedupe": "dedupe",
        "triggers": "triggers",
        "pacing": "pacing",
        "deadletters": "redrive-claim",
    }.get(first, first)


STEP: list[Callable[[World], list[Violation]]] = [
    one_live_job_per_request,
    policy_on_every_create,
    alerts_not_per_redelivery,
    resumes_from_newest_complete,
    newest_complete_kept,
]
QUIESCENCE: list[Callable[[World], list[Violation]]] = [
    records_readable,
    one_live_job_per_request,
    no_unknown_live_job,
    liveness,
    alerts_at_least_once,
    alerts_not_per_redelivery,
    notifications_at_least_once,
    preemptions_told_within_reclaimed_vms,
    ending_is_the_last_notification,
    newest_complete_kept_while_unfinished,
    errors_alerted_once,
    no_lookup_while_backing_off,
]
RETENTION: list[Callable[[World], list[Violation]]] = [bounded_state, errors_alerted_once]
CHECKS = {"step": STEP, "quiescence": QUIESCENCE, "retention": RETENTION}


def check(world: World, which: str) -> list[Violation]:
    out: list[Violation] = []
    for invariant in CHECKS[which]:
        out += invariant(world)
    return out


def nothing_created_after_a_cancel(world: World) -> list[Violation]:
    """No create reaches Vertex for a request after its cancel was recorded, but one already on
    its way (its attempt noted the send before the cancel, and its job is then cancelled)."""
    from shared.clock import parse_iso
    from shared.jobs import LABEL_ATTEMPT, LABEL_REQUEST_ID

    cancels = {r.request_id: r for r in records(world) if r.cancel is not None}
    out = []
    for index, create in enumerate(world.vertex.created):
        labels = create.job.get("labels") or {}
        record = cancels.get(labels.get(LABEL_REQUEST_ID, ""))
        if record is None or not create.accepted:  # a create Vertex refused created nothing
            continue
        before = world.creates_before_cancel.get(record.request_id)
        if index < before if before is not None else create.at <= parse_iso(record.cancel.at):
            continue
        attempt = record.attempt(int(labels.get(LABEL_ATTEMPT, "0") or 0))
        sent = attempt.create_sent_at if attempt is not None else None
        if sent is None or parse_iso(sent) > parse_iso(record.cancel.at):
            out.append(
                violation(
                    "nothing_created_after_a_cancel",
                    f"{record.request_id} attempt {labels.get(LABEL_ATTEMPT)} created at {create.at.isoformat()}, "
                    f"after its cancel at {record.cancel.at} (create sent {sent})",
                )
            )
    return out


def cancelled_requests_end_cancelled(world: World) -> list[Violation]:
    """A cancelled request ends CANCELLED with no live job (or SUCCEEDED: its job finished the
    work before the cancel reached it)."""
    from shared.ledger.states import RequestStatus

    out = []
    for record in records(world):
        if record.cancel is None:
            continue
        live = world.vertex.live_jobs(record.request_id)
        if excused(world, record.request_id, record.latest.location if record.latest else None):
            continue  # e.g. its claim cannot be looked up for good: lookup_failed says so
        done = record.status is RequestStatus.SUCCEEDED and record.latest is not None and not live
        if (record.status is not RequestStatus.CANCELLED or live) and not done:
            out.append(
                violation(
                    "cancelled_requests_end_cancelled",
                    f"{record.request_id} cancelled at {record.cancel.at} is {record.status} with {len(live)} live jobs",
                )
            )
    return out


def jobs_of_their_own_record(world: World) -> list[Violation]:
    """An attempt records only a job created after its record was written: a claim's record
    precedes every create of it, so an older job with the attempt's labels is an earlier record's
    of the id, which a person deleted (seed 1771: adopted, its cancel ended the new request). Nor
    one carrying another claim's kit key: that record's create was out when it was deleted, and
    every line its job signs would be refused. A record a person wrote by hand is left out (its
    `created_at` is theirs)."""
    from shared.clock import parse_iso

    out = []
    for record in records(world):
        if f"requests/{record.request_id}.json" in world.tampering.written:
            continue
        written = parse_iso(record.created_at)
        for attempt in record.attempts:
            job = world.vertex.jobs.get(attempt.job) if attempt.job else None
            if job is not None and job.create_time < written:
                out.append(
                    violation(
                        "jobs_of_their_own_record",
                        f"{record.request_id} attempt {attempt.n} records {job.name}, created "
                        f"at {job.create_time.isoformat()}, before its record ({record.created_at})",
                    )
                )
            elif job is not None and job.kit_key and attempt.kit_key and job.kit_key != attempt.kit_key:
                out.append(
                    violation(
                        "jobs_of_their_own_record",
                        f"{record.request_id} attempt {attempt.n} records {job.name}, created with another "
                        "claim's kit key: every line it signs is refused",
                    )
                )
    return out


def moves_allowed(world: World) -> list[Violation]:
    """A move of a job waiting for Spot (an attempt ended `moved`: shared/deciding/moves.py) goes to
    a location the request and the deployment allow, its next attempt runs elsewhere than the job
    moved out of (another location, machine or strategy: a move that created its job where it
    waited paid a changeover for nothing, seed 2486), and is never decided once the request was
    cancelled or had finished."""
    from shared.clock import parse_iso
    from shared.ledger.states import AttemptOutcome

    allowed_here = world.settings.allowed_locations
    out = []
    for record in records(world):
        allowed = record.request.get("locations") or [record.request.get("location")]
        for attempt in record.attempts:
            if attempt.outcome is not AttemptOutcome.MOVED:
                continue
            moved_at = parse_iso(attempt.cancel_decided_at or attempt.claimed_at)
            following = record.attempt(attempt.n + 1)
            targets = {following.location} if following else set()
            if record.requeue is not None and record.requeue.attempt == attempt.n + 1:
                targets.add(record.requeue.location)
            problems = [f"to {t}, not in the request's locations {allowed}" for t in targets if t not in allowed]
            problems += [
                f"to {t}, which the deployment does not allow"
                for t in targets
                if allowed_here and t not in allowed_here
            ]
            if following and (following.location, following.machine, following.strategy) == (
                attempt.location,
                attempt.machine,
                attempt.strategy,
            ):
                problems.append(f"to {following.location}, where it waited: attempt {following.n} runs there again")
            if record.cancel is not None and parse_iso(record.cancel.at) <= moved_at:
                problems.append(
                    f"decided at {attempt.cancel_decided_at}, after the request's cancel at {record.cancel.at}"
                )
            if record.finished_at and parse_iso(record.finished_at) <= moved_at:
                problems.append(
                    f"decided at {attempt.cancel_decided_at}, after the request finished at {record.finished_at}"
                )
            out += [violation("moves_allowed", f"{record.request_id} attempt {attempt.n} moved {p}") for p in problems]
    return out


def alternatives_kept(world: World) -> list[Violation]:
    """Every job of a request with capacity alternatives runs on one of them: a machine it lists,
    with that machine's accelerators, on a strategy listed for it (shared/fleet/capacity.py)."""
    from shared.jobs import LABEL_REQUEST_ID
    from shared.requests.capacity import alternatives, machine_spec

    listed = {r.request_id: {a.machine: a.strategies for a in alternatives(r.request)} for r in records(world)}
    out = []
    for create in world.vertex.created:
        spec = create.job.get("jobSpec") or {}
        options = listed.get((create.job.get("labels") or {}).get(LABEL_REQUEST_ID, ""))
        if not create.accepted or not options:
            continue
        machine = (spec.get("workerPoolSpecs") or [{}])[0].get("machineSpec") or {}
        name = str(machine.get("machineType"))
        strategy = (spec.get("scheduling") or {}).get("strategy", "SPOT")
        if name not in options or strategy not in options[name]:
            out.append(violation("alternatives_kept", f"{_job_name(create.job)} runs {name} {strategy}: not listed"))
        elif {key: machine.get(key) for key in machine_spec(name)} != machine_spec(name):
            out.append(violation("alternatives_kept", f"{_job_name(create.job)}: {machine} is not {name}'s spec"))
    return out


# Checked with the others (`check` reads the lists when it runs); once quiet is enough for the
# first too: every create is kept with its moment, and the record with its cancel.
QUIESCENCE.extend(
    (
        nothing_created_after_a_cancel,
        cancelled_requests_end_cancelled,
        jobs_of_their_own_record,
        moves_allowed,
        alternatives_kept,
    )
)

# The promises people rely on (sim/promises.py).
from sim import (  # noqa: E402 - they read this module's helpers
    budgets,
    continuations,
    durations,
    flex,
    hangs,
    promises,
    reconcile_budget,
    regions,
    replicas,
    severity,
    shown,
    stuck,
)

QUIESCENCE.extend(promises.QUIESCENCE)
QUIESCENCE.extend(shown.QUIESCENCE)  # what the dashboard and `status` show (sim/shown.py)
QUIESCENCE.extend(replicas.QUIESCENCE)  # multi-replica jobs (sim/replicas.py)
QUIESCENCE.extend(continuations.QUIESCENCE)  # runs past the job timeout (sim/continuations.py)
RETENTION.extend(replicas.RETENTION)
QUIESCENCE.extend(budgets.QUIESCENCE)  # max_cost_usd (sim/budgets.py)
RETENTION.extend(promises.RETENTION)
QUIESCENCE.extend(flex.QUIESCENCE)  # FLEX_START (sim/flex.py)
QUIESCENCE.extend(regions.QUIESCENCE)  # calls through their own region's endpoint (sim/regions.py)
QUIESCENCE.extend(stuck.QUIESCENCE)  # no job_stuck before its time (sim/stuck.py)
QUIESCENCE.extend(hangs.QUIESCENCE)  # every Vertex call names a timeout that fits (sim/hangs.py)
QUIESCENCE.extend(reconcile_budget.QUIESCENCE)  # a pass's CRUD calls within its budget (sim/reconcile_budget.py)
STEP.extend(durations.STEP)  # no run outlasts its function's deployed timeout (sim/durations.py)
QUIESCENCE.extend(durations.QUIESCENCE)
QUIESCENCE.extend(severity.QUIESCENCE)  # no ERROR line for an injected transient fault (sim/severity.py)
RETENTION.extend(severity.RETENTION)
