"""Jobs found at Vertex that the ledger must hear of: an attempt's own job, found or just created,
is adopted (`adopt_job`), and a job the ledger does not record is cancelled (`sweep_strays`,
`cancel_stray`; what makes a job a stray is `shared.deciding.strays`).

Where the sweep looks: every location this deployment may have a job in, which is the default,
the allowed locations, and every location a create was ever sent to. The last are remembered by
submit before its first create in a location (`shared.job_locations`: one empty marker per location,
`maintenance/locations/<location>`, created if absent, once per instance), so a stray of a
finished request in a failover region is found too; one list of markers and one job list per
location per pass.

A part of the shells (submit, reconcile and on_job_event each use it), not a shell of its own: the
I/O the deciding room may not do (list, cancel) around its decisions. Over 450 lines since it holds
every way a job Vertex has meets the ledger (adopted, swept as a stray, or cancelled for a
deleted record): one question, whose cancels share one note and one alert each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from spotjobs_kit.lines import KEY, KitRecord, is_signed_with, parse_kit_line

from shared.adapters.vertex import cancel_job, canceller, list_unfinished_jobs, parent_path
from shared.alerts import Alert, AlertKind
from shared.clock import iso
from shared.deciding.applying import apply_observation
from shared.deciding.deadline_watch import note_progress
from shared.deciding.decisions import Observation
from shared.deciding.effects import Effects
from shared.deciding.events import Signal
from shared.deciding.outbox import Mine, decided_alert, flush, send_cancels
from shared.deciding.preemptions import note_kept_preemption_lines, note_kit_line
from shared.deciding.strays import decide_stray, is_stray, recordless_stray_alert
from shared.job_locations import LOCATIONS_PREFIX
from shared.jobs import (
    LABEL_ATTEMPT,
    LABEL_REQUEST_ID,
    JobSnapshot,
    JobState,
    is_terminal,
    of_another_claim,
    state_name,
)
from shared.ledger.claims import record_job
from shared.ledger.records import RequestRecord
from shared.ledger.store import JobIndexEntry
from shared.log import Logger
from shared.reconcile_vertex import CallDeferred, CallWindow, read_times
from shared.redeliveries import REJECTION_NOTES, DeletedRecordsJobLive, alert_once
from shared.wiring import Ports

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import CustomJob


@dataclass(frozen=True)
class Adoption:
    """What `adopt_job` did."""

    job: str | None  # the job the attempt records: another one (or none yet) when the job given is not its
    wrote: bool  # this call recorded it (else an earlier delivery had)
    snapshot: JobSnapshot  # the job given, as a decision reads it

    @property
    def adopted(self) -> bool:
        """The job given is the attempt's (recorded now or before), not a second job."""
        return self.job == self.snapshot.name


def adopt_job(ports: Ports, request_id: str, n: int, location: str, job: CustomJob, log: Logger) -> Adoption:
    """Make `job`, created or found by its labels for attempt `n`, the attempt's job: index it,
    then record it (once, under compare-and-swap). An attempt that already records another job
    means the claim protocol failed: `job` is cancelled as a stray, with an ERROR line. A caller
    that found the job then decides on its state (`observe_adopted`): its log events may have come while
    it was not indexed and been dropped. A job of a cancelled request is cancelled at once. A job of
    another claim of the id (`of_another_claim`: its kit key, else a create before the record), an
    earlier record's whose create was out when a person deleted it, is never recorded (every line
    it signs would be refused): cancelled as a stray."""
    snapshot = JobSnapshot.of(job)
    read_at = ports.clock()  # the caller read `job` just before: a second job's bill runs to here
    ports.ledger.index_job(JobIndexEntry(request_id, n, location, job.name))
    # Listed after the index: a line kept later finds the job indexed and is redelivered (shared.observe).
    kept, kept_preemptions = ports.ledger.parked_lines(job.name.rsplit("/", 1)[-1])
    kit_lines = [line for line in (parse_kit_line({KEY: fields}) for fields in kept.values()) if line]
    now = ports.clock()
    created_at = snapshot.create_time or iso(now)
    kit_effects: list[Effects] = []  # the last try's (a swap may call its transition again)

    def record(current: RequestRecord | None) -> RequestRecord | None:
        if current is not None and _of_another_record(current, n, job):
            kit_effects.clear()
            return None
        recorded = record_job(
            current,
            n=n,
            job_name=job.name,
            state=snapshot.state,
            created_at=created_at,
            started_at=snapshot.start_time,
            ended_at=snapshot.end_time,
        )
        kit_effects[:] = [note_kept_kit_lines(recorded, n, kit_lines, now)] if recorded and kit_lines else []
        attempt = recorded.attempt(n) if recorded else None
        if attempt is not None and kept_preemptions:
            # Marked here, counted by the next decision on the attempt: a delivery that dies
            # before `observe_adopted` leaves them to reconcile's next read, not uncounted.
            kit_effects.append(Effects())
            note_kept_preemption_lines(recorded, attempt, kept_preemptions.values(), kit_effects[-1])
        return recorded

    swapped = ports.ledger.swap(request_id, record)
    for line in (line for effects in kit_effects for line in effects.lines) if swapped.wrote else ():
        log.log(line.severity, line.message, **line.fields)
    recorded = swapped.value.attempt(n) if swapped.value else None
    if kept and recorded is not None and recorded.job == job.name:
        ports.ledger.forget_parked(kept)  # counted, by this write or by the delivery that recorded the job
    foreign = swapped.value is not None and _of_another_record(swapped.value, n, job)
    if swapped.value is not None and recorded is not None and (foreign or recorded.job not in (None, job.name)):
        log.error(
            "the job was created for an earlier record of the id, which a person deleted"
            if foreign
            else "attempt already records a different job",
            event="job_of_another_record" if foreign else "duplicate_job",
            job=job.name,
            recorded_job=recorded.job,
        )
        _cancel_second_job(ports, swapped.value, job, log, read_at)
        return Adoption(recorded.job, False, snapshot)
    if swapped.wrote and recorded is not None and recorded.cancel_pending:
        # Created by a submit in flight when the request's cancel landed: cancelled when found.
        sender = replace(
            ports,
            cancel_job=ports.cancel_job
            or canceller(ports.job_service, timeout=ports.settings.vertex_call_timeout_seconds),
        )
        send_cancels(sender, swapped.value, log, ours=True, now=ports.clock())
    return Adoption(job.name, swapped.wrote, snapshot)


def _of_another_record(record: RequestRecord, n: int, job: CustomJob) -> bool:
    """Whether `job`, labelled for attempt `n`, was created for an earlier record of the id (as
    `is_stray` tells one), never the attempt's own."""
    attempt = record.attempt(n)
    return of_another_claim(job, record.created_at, attempt.kit_key if attempt is not None else None)


def note_kept_kit_lines(record: RequestRecord, n: int, lines: Iterable[KitRecord], now: datetime) -> Effects:
    """Count on attempt `n`, whose job is being recorded, the kit lines kept while the job was not
    indexed, in the order the kit wrote them; only a line naming the attempt and signed with its
    key counts (checked when kept, and again here: the record is the authority)."""
    effects = Effects()
    attempt = record.attempt(n)
    if attempt is None:
        return effects
    ordered = sorted(lines, key=lambda kit: (kit.run or 0, -1 if kit.step is None else kit.step, kit.time or ""))
    for kit in ordered:
        if kit.request_id != record.request_id or kit.attempt != n or not is_signed_with(kit, attempt.kit_key):
            continue
        if note_kit_line(record, attempt, kit, now, effects):
            note_progress(attempt, kit.total_steps, kit.steps_per_second)
    return effects


def adopt_found_job(
    ports: Ports, request_id: str, n: int, location: str, job: CustomJob, log: Logger, *, left: str
) -> tuple[Adoption, tuple[str, ...]]:
    """A claim's job that its delivery left unrecorded (`left`: how) and another found: adopt it
    (`adopt_job`), say so once (WARNING `claim_adopted`), and decide on its state
    (`observe_adopted`); the adoption and the decisions' events."""
    adoption = adopt_job(ports, request_id, n, location, job, log)
    if adoption.wrote:
        log.warning(
            f"attempt {n} {left}; recorded job {job.name}",
            event="claim_adopted",
            attempt=n,
            job=job.name,
            location=location,
        )
    return adoption, observe_adopted(ports, request_id, adoption, n, log) if adoption.adopted else ()


def observe_adopted(ports: Ports, request_id: str, adoption: Adoption, n: int, log: Logger) -> tuple[str, ...]:
    """Decide once on an adopted job's current state, as reconcile would, after counting the
    preemption lines Vertex wrote before it was indexed (kept by on_job_event,
    `LedgerStore.park_preemption`); the decisions' events."""
    events: tuple[str, ...] = ()
    parked = ports.ledger.parked_preemptions(adoption.job.rsplit("/", 1)[-1])
    for identity in sorted(parked.values()):
        counted = Observation(n, adoption.snapshot, Signal.PREEMPTION, preemption_evidence=identity)
        events += apply_observation(ports, request_id, counted, log).events
    events += apply_observation(ports, request_id, Observation(n, adoption.snapshot), log).events
    ports.ledger.forget_parked(parked)  # counted: the record keeps each line's identity
    return events


def _cancel_second_job(ports: Ports, record: RequestRecord, job: CustomJob, log: Logger, read_at: datetime) -> None:
    """Nothing would manage a second job of the attempt, and it would train into the same folder:
    cancel it as a stray (one alert). Should the cancel fail, reconcile's stray sweep retries it."""
    try:
        cancel_stray(ports, record, job, log, read_at)
    except CallDeferred as exc:  # reconcile's own budget or window, as a stray's cancel (stray_cancel_deferred)
        log.info(
            "the pass deferred the cancel of the job the ledger does not record; the next pass's sweep sends it",
            event="duplicate_job_cancel_deferred",
            job=job.name,
            error=f"{type(exc).__name__}: {exc}",
        )
    except Exception as exc:  # noqa: BLE001 - the job is recorded; the sweep will cancel the stray
        log.error(
            "could not cancel the job the ledger does not record; reconcile will retry",
            event="duplicate_job_cancel_failed",
            job=job.name,
            error=f"{type(exc).__name__}: {exc}",
        )


def sweep_strays(
    ports: Ports,
    locations: Iterable[str],
    log: Logger,
    *,
    window: CallWindow | None = None,
    listed: dict[str, set[str]] | None = None,
) -> list[str]:
    """Cancel every stray job of this deployment in `locations`; returns the names of those it
    sent a cancel to (one already CANCELLING is recorded and alerted, not cancelled again).

    One list per location, whatever the number of requests: this deployment's jobs that have not
    ended (a filter on the deployment label and on the state, so the list grows with the running
    work, never with history), grouped by request. Each request's record is read after the list:
    a claim is written before its create, so a job created for a newer attempt finds that attempt
    claimed and is never taken for a stray. A request without a record (deleted by hand) has no job
    that anything will manage: each is cancelled, its alert sent once first (`cancel_recordless`).
    A location or record that cannot be read waits for the next pass (a listing that met a 503 is
    sent once more in a reconcile pass first: `worth_a_second_list`); a location whose listing
    Vertex refuses for good (403, 404) is also alerted, once per error kind (`stray_sweep_refused`).
    `window`: a reconcile pass's, which refuses the reads begun too late (`sweep_read_refused`).
    `listed`: filled with each location listed, and the request ids of its unfinished jobs."""
    by_request: dict[str, list[CustomJob]] = defaultdict(list)
    listed_at: dict[str, datetime] = {}  # job name -> the start of the listing that found it (its bill)
    for location in sorted(set(locations)):
        client = ports.job_service(location)
        started = ports.clock()
        try:
            jobs = list_unfinished_jobs(
                client,
                parent_path(ports.settings.project, location),
                ports.settings.deployment_label,
                timeout=ports.settings.vertex_call_timeout_seconds,
            )
        except CallDeferred as exc:  # the pass's own budget or window (its refusals said by stray_sweep_deferred)
            log.info(
                "the pass deferred the stray sweep's listing of this location to the next pass",
                event="stray_listing_deferred",
                location=location,
                error=f"{type(exc).__name__}: {exc}",
            )
            continue
        except Exception as exc:  # noqa: BLE001 - the next pass lists again
            log.warning(
                "could not list this deployment's jobs for the stray sweep",
                event="stray_sweep_failed",
                location=location,
                error=f"{type(exc).__name__}: {exc}",
            )
            if _refused_for_good(exc):
                _alert_refused_listing(ports, location, exc, log)
            continue
        # A reconcile pass's listing was taken before the sweep: the job ran until it was sent.
        sent = read_times(client, started, ports.clock()).sent
        for job in jobs:
            by_request[job.labels.get(LABEL_REQUEST_ID, "")].append(job)
            listed_at[job.name] = sent
        if listed is not None:
            listed[location] = {job.labels.get(LABEL_REQUEST_ID, "") for job in jobs}
    by_request.pop("", None)  # the filter asks for the label; a job without it names no request

    def check(request_id: str, jobs: list[CustomJob]) -> list[str]:
        if window is not None and window.sweep_read_refused():
            return []  # its strays wait for the next pass (said by stray_sweep_deferred)
        return _cancel_strays_of(ports, request_id, jobs, log, listed_at)

    with ThreadPoolExecutor(STRAY_CHECKERS, thread_name_prefix="strays") as pool:
        found = pool.map(lambda item: check(*item), by_request.items())
        return [name for names in found for name in names]


# Requests whose jobs are checked at once (a record read each, mostly waiting).
STRAY_CHECKERS = 8

# The note that a location's refused listing was alerted (`alert_once`), one per location and error
# kind, or a stray's refused cancel, one per job (`...-cancel-<job id>`): its lifecycle rule (32
# days) says it again a month later while the refusal stands.
REFUSED_LISTING_NOTES = f"{REJECTION_NOTES}sweep-refused-"


def _refused_for_good(exc: Exception) -> bool:
    """A listing no later pass will get either: a permission missing in the location (403: gRPC's
    PermissionDenied is a Forbidden), or a location Vertex does not know (404). A 429 or 503 is
    only retried."""
    from google.api_core.exceptions import Forbidden, NotFound

    return isinstance(exc, (Forbidden, NotFound))


def _alert_refused_listing(ports: Ports, location: str, exc: Exception, log: Logger) -> None:
    """Say once (per location and error kind) that the sweep is blind in `location`, and what to do:
    a job there that the ledger does not record (a re-run in the console) would run and cost
    unseen. Never raises: the next pass, refused again, sends what this one could not."""
    error_kind = type(exc).__name__
    alert = Alert.of(
        AlertKind.STRAY_SWEEP_REFUSED,
        f"Vertex AI refused the stray sweep's listing of {location} ({error_kind}: {exc}): a job there that "
        f"the ledger does not record would run uncancelled. Grant aiplatform.customJobs.list in {location} to "
        f"the functions' service account, or, if this deployment has no job there, remove {location} from "
        f"SPOTJOBS_ALLOWED_LOCATIONS and delete {LOCATIONS_PREFIX}{location} from the state bucket",
        details={"location": location, "error_kind": error_kind, "error": str(exc), "call": "list"},
        time=iso(ports.clock()),
    )
    _send_refusal_alert(ports, alert, f"{REFUSED_LISTING_NOTES}{location}-{error_kind}", log)


def _alert_refused_cancel(ports: Ports, job: CustomJob, exc: Exception, log: Logger) -> None:
    """Say once per job that Vertex refuses its cancel for good (a 403): its `stray_job` alert
    said it was being cancelled, and it runs (and bills) on until an operator ends it (seed 954).
    Never raises: the next pass, refused again, sends what this one could not."""
    location = job.name.split("/")[3]
    error_kind = type(exc).__name__
    # Of no request, as a refused listing is: said again a month later while the refusal stands.
    alert = Alert.of(
        AlertKind.STRAY_SWEEP_REFUSED,
        f"Vertex AI refused the cancel of stray job {job.name} ({error_kind}: {exc}): it carries the labels "
        f"of {job.labels.get(LABEL_REQUEST_ID)} but the ledger does not record it, and it runs uncancelled. "
        f"Grant aiplatform.customJobs.cancel in {location} to the functions' service account (the next pass "
        "cancels it), or cancel it in the console",
        details={"location": location, "error_kind": error_kind, "error": str(exc), "call": "cancel", "job": job.name},
        time=iso(ports.clock()),
    )
    note = f"{REFUSED_LISTING_NOTES}{location}-cancel-{job.name.rsplit('/', 1)[-1]}"
    _send_refusal_alert(ports, alert, note, log)


def _send_refusal_alert(ports: Ports, alert: Alert, note: str, log: Logger) -> None:
    try:
        alert_once(ports, alert, note)
    except Exception as failure:  # noqa: BLE001 - the next pass, refused again, retries it
        log.warning(
            "could not send the alert of a refused stray sweep call; the next pass retries",
            event="stray_sweep_alert_failed",
            location=alert.details.get("location"),
            error=f"{type(failure).__name__}: {failure}",
        )


def _cancel_strays_of(
    ports: Ports, request_id: str, jobs: list[CustomJob], log: Logger, listed_at: dict[str, datetime]
) -> list[str]:
    """Never raises: one request must not stop the sweep."""
    log = log.bind(request_id=request_id)
    try:
        record, _ = ports.ledger.read(request_id)  # read now, after the list: see sweep_strays
        if record is None:
            if any(not is_terminal(job.state) for job in jobs):
                # A fresh message of the id looks only while its marker is there: renewed each pass
                # while a deleted record's job lives, reconcile never removes it as stale (seed 10178).
                ports.ledger.mark_active(request_id)
            return cancel_recordless(ports, request_id, jobs, log)
        strays = [job for job in jobs if is_stray(record, job)]
        return _cancel_each(strays, lambda job: cancel_stray(ports, record, job, log, listed_at.get(job.name)))
    except CallDeferred as exc:  # the pass's own budget or window: the job is in the next pass's listing
        log.info(
            "the pass deferred a stray's cancel to the next pass",
            event="stray_cancel_deferred",
            error=f"{type(exc).__name__}: {exc}",
        )
        return []
    except Exception as exc:  # noqa: BLE001 - the next pass retries this request
        log.warning(
            "could not check a request's jobs for strays; the next pass retries",
            event="stray_sweep_failed",
            error=f"{type(exc).__name__}: {exc}",
        )
        return []


# The note that a record-less stray's alert is out (`alert_once`), one per job: its lifecycle rule
# (32 days) lets a job whose cancel keeps failing be alerted again a month later.
RECORDLESS_STRAY_NOTES = f"{REJECTION_NOTES}stray-"


def cancel_recordless(ports: Ports, request_id: str, jobs: list[CustomJob], log: Logger) -> list[str]:
    """Cancel the live jobs of a request whose record is gone (the sweep's, and submit's:
    `cancel_deleted_records_jobs`). Each one's alert is sent (once, by its note) before its cancel:
    a cancelled job leaves the sweep's listing, so an alert after the cancel could be lost; a
    cancel that fails is sent again by the next pass, the alert not."""

    def cancel(job: CustomJob) -> bool:
        alert = recordless_stray_alert(request_id, job, ports.clock())
        alert_once(ports, alert, f"{RECORDLESS_STRAY_NOTES}{job.name.rsplit('/', 1)[-1]}")
        fields = {"request_id": request_id, "attempt": alert.attempt, "job": job.name, "record": "missing"}
        if _cancelling(job, log, fields):
            return False
        _send_stray_cancel(ports, job, log)
        log.warning(
            "cancelled a job with this request's labels: the request has no ledger record",
            event="stray_job_cancelled",
            **fields,
        )
        return True

    return _cancel_each([job for job in jobs if not is_terminal(job.state)], cancel)


def cancel_deleted_records_jobs(ports: Ports, waiting: DeletedRecordsJobLive, log: Logger) -> None:
    """Cancel the live jobs of an id's deleted record that a message of the id met (submit), as
    the stray sweep would on its next pass, so the message's redeliveries find them ended sooner;
    one already cancelling is not asked again."""
    log.warning(
        "a job of the request's deleted record still lives; cancelled, the claim waits for it to end",
        event="deleted_records_job_live",
        jobs=[job.name for job in waiting.jobs],
    )
    to_cancel = [job for job in waiting.jobs if state_name(job.state) != JobState.CANCELLING]
    cancel_recordless(ports, waiting.request_id, to_cancel, log)


def _cancel_each(strays: list[CustomJob], cancel: Callable[[CustomJob], bool]) -> list[str]:
    """Cancel every stray; the names of those a cancel was sent to (`cancel` says whether it sent
    one). One whose cancel fails does not stop the others (a cancel refused for good would stop
    them for good); the first failure is raised once all were tried, a failure before a deferral by
    the pass (`CallDeferred`), which would say less."""
    failure: Exception | None = None
    sent: list[str] = []
    for job in strays:
        try:
            if cancel(job):
                sent.append(job.name)
        except Exception as exc:  # noqa: BLE001 - raised below, once every stray was tried
            if failure is None or (isinstance(failure, CallDeferred) and not isinstance(exc, CallDeferred)):
                failure = exc
    if failure is not None:
        raise failure
    return sent


def _cancelling(job: CustomJob, log: Logger, fields: dict[str, object]) -> bool:
    """A stray already CANCELLING (Vertex cancels asynchronously: it stays so until it ends, and
    in the sweep's listing) was cancelled by a pass before or by someone else: it is recorded and
    alerted as any stray, and not sent another cancel, which would only spend the pass's CRUD
    budget, nor said or counted cancelled again."""
    if state_name(job.state) != JobState.CANCELLING:
        return False
    log.info("a job the ledger does not record is already cancelling", event="stray_job_cancelling", **fields)
    return True


def cancel_stray(
    ports: Ports, record: RequestRecord, job: CustomJob, log: Logger, read_at: datetime | None = None
) -> bool:
    """Cancel one stray job: the stray noted for its request's bill and its alert decided first
    (pending in the record), then the cancel, then the alert published. A failure before the
    cancel leaves the job running for the next sweep, which decides nothing again; a failure after
    the decision leaves the alert pending for the outbox. The late job of a request a person
    cancelled gets no alert: their cancel asked it to stop (`decide_stray`). One already CANCELLING is noted and alerted, not cancelled
    again (`_cancelling`). `read_at`: the start of the read that found `job` not ended (now, by
    default: the read was just before). Whether a cancel was sent."""
    decided = decide_stray(ports, record, job, read_at or ports.clock(), log)
    fields = {"request_id": record.request_id, "attempt": int(job.labels.get(LABEL_ATTEMPT, "0") or 0), "job": job.name}
    sent = not _cancelling(job, log, fields)
    if sent:
        _send_stray_cancel(ports, job, log)
        log.warning(
            "cancelled a job with this request's labels that the ledger does not record",
            event="stray_job_cancelled",
            **fields,
        )
    if decided.decided is not None and decided.value is not None and decided.value.has_pending_effects:
        flush(ports, decided.value, log, mine=Mine.written(decided), own_alerts=decided_alert(decided))
    return sent


def _send_stray_cancel(ports: Ports, job: CustomJob, log: Logger) -> None:
    """Cancel a stray; a cancel Vertex refuses for good (403) is said once, then raised like any
    failure (the next pass tries again, and finds it said)."""
    from google.api_core.exceptions import Forbidden

    try:
        cancel_job(
            ports.job_service(job.name.split("/")[3]), job.name, timeout=ports.settings.vertex_call_timeout_seconds
        )
    except Forbidden as refused:
        _alert_refused_cancel(ports, job, refused, log)
        raise
