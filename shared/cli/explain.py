"""`spotjobs explain`: what on_job_event would make of captured log entries, offline.

    spotjobs explain FILE [--job JOB_JSON] [--json]

FILE holds Cloud Logging LogEntries: a JSON array (what `gcloud logging read --format=json`
prints), JSON lines, or a single entry; `-` reads standard input. Entries are explained in time
order (gcloud prints newest first), each with its position in the file, its job and task, the
signal `shared.events.classify` reads (for a trainer kit line: the kit's event, run and step) and
what on_job_event would do with it: ignore it (and why), count it as kit evidence without a
Vertex read, or read the job from Vertex and decide on its state. Two checks need the deployment
and are not made offline: the event's age (on_job_event drops an entry older than
SPOTJOBS_MAX_EVENT_AGE_SECONDS) and whether spotjobs created the job (its job index).

With --job JOB_JSON (what `gcloud ai custom-jobs describe JOB_ID --region R --format=json`
prints), the pure decision (`shared.decisions.decide`) also runs, on a ledger record made up for
that job: request and attempt from its `spotjobs-request-id` / `spotjobs-attempt` labels, earlier
attempts re-queued, max_attempts the deployment's default. The file's kit lines of that job are
fed first, in order (and the insertId of any per-preemption service line), then the job as
described; the outcome printed is the request's status, the attempt's preemptions, the re-queue
or the alerts, and the events of the log lines the decisions would write.

Settings (preemption/stockout patterns, storm threshold, default max attempts) are read from the
SPOTJOBS_* environment, as the functions read them. Exit 0; 2 when FILE or JOB_JSON cannot be read.
See docs/signals.md for every signal and what spotjobs does without it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from shared.cli.common import examples

if TYPE_CHECKING:
    from spotjobs_kit.lines import KitRecord

    from shared.events import JobLogEntry
    from shared.settings import Settings
    from shared.vertex import JobSnapshot

EXIT_OK = 0
EXIT_UNREADABLE = 2
NOT_CHECKED = "not checked offline"
TEXT_WIDTH = 100

# What on_job_event does with an entry.
IGNORED = "ignored"  # not a job log entry: acknowledged
IRRELEVANT = "irrelevant"  # a job's line that says nothing about its state: acknowledged
KIT_EVIDENCE = "kit_evidence"  # counted in the ledger, no Vertex read
VERTEX_READ = "vertex_read"  # a hint: the job is read from Vertex and decided on


class UnreadableInput(ValueError):
    """FILE or JOB_JSON cannot be read; the message is the one line printed."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="offline: what on_job_event would make of captured log entries (and a job's JSON)",
        description=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=examples(
            "spotjobs explain entries.json",
            "spotjobs explain entries.json --job job.json --json",
        ),
    )
    parser.add_argument(
        "file",
        metavar="FILE",
        help="LogEntries: a JSON array (gcloud logging read --format=json), JSON lines, or one "
        "entry; - for standard input",
    )
    parser.add_argument(
        "--job",
        metavar="JOB_JSON",
        help="the job as `gcloud ai custom-jobs describe JOB_ID --region R --format=json` prints "
        "it: also run the decision on it",
    )
    parser.add_argument("--json", action="store_true", help="print the explanation as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from shared.errors import ConfigurationError
    from shared.settings import Settings

    try:
        settings = Settings.from_env()
        entries = read_entries(_read_text(args.file))
        job_json = read_job_json(_read_text(args.job)) if args.job else None
        report = explain(entries, settings, job_json=job_json)
    except (UnreadableInput, ConfigurationError) as exc:
        print(f"spotjobs explain: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    report.source = args.file
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        print_text(report, sys.stdout)
    return EXIT_OK


# Reading.


def _read_text(path: str) -> str:
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UnreadableInput(f"cannot read {path}: {exc}") from None


def read_entries(text: str) -> list[Any]:
    """The entries of a JSON array, of JSON lines, or a single JSON object."""
    stripped = text.strip()
    if not stripped:
        return []
    try:
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        pass
    else:
        if isinstance(value, list):
            return value
        if isinstance(value, dict):
            return [value]
        raise UnreadableInput(
            f"the file holds a JSON {type(value).__name__}, not LogEntries (a JSON array, JSON "
            "lines or one entry)"
        )
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except (ValueError, RecursionError):
            raise UnreadableInput(
                f"line {number} is not JSON: expected a JSON array, JSON lines or one LogEntry"
            ) from None
    return entries


def read_job_json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise UnreadableInput("the job file is not JSON (gcloud ai custom-jobs describe "
                              "JOB_ID --region R --format=json)") from None
    if not isinstance(value, dict):
        raise UnreadableInput("the job file is not a JSON object (a CustomJob)")
    return value


@dataclass(frozen=True)
class DescribedJob:
    snapshot: JobSnapshot
    labels: dict[str, str]
    strategy: str  # jobSpec.scheduling.strategy; unset means STANDARD (custom_job.proto)


def described_job(job_json: Mapping[str, Any]) -> DescribedJob:
    """The job as decisions read it, its labels and strategy, from a CustomJob in REST JSON
    (camelCase); fields newer than the client library are ignored."""
    from google.cloud.aiplatform_v1.types import CustomJob
    from google.protobuf import json_format

    from shared.vertex import JobSnapshot, JobState

    try:
        job = CustomJob.from_json(json.dumps(job_json), ignore_unknown_fields=True)
    except (ValueError, json_format.Error) as exc:
        raise UnreadableInput(f"the job file is not a CustomJob: {exc}") from None
    if not job.name or "/customJobs/" not in job.name:
        raise UnreadableInput("the job file names no CustomJob (its name is missing)")
    snapshot = JobSnapshot.of(job)
    if snapshot.state == JobState.UNSPECIFIED:  # ignore_unknown_fields also drops an unknown enum
        raise UnreadableInput(f"state {job_json.get('state')!r} is not a JobState")
    strategy = job.job_spec.scheduling.strategy
    name = getattr(strategy, "name", "") if strategy else ""
    return DescribedJob(snapshot, dict(job.labels), name or "STANDARD")


# Explaining.


@dataclass
class EntryExplanation:
    position: int  # 1-based, in the file
    timestamp: str | None
    insert_id: str | None
    job_id: str | None
    task: str | None
    severity: str | None
    text: str
    signal: str | None  # shared.events.Signal value; None when the entry is ignored
    action: str
    explanation: str
    kit: dict[str, Any] | None = None  # event, request_id, attempt, run, step
    stale: str | None = None  # the age check: only a relevant entry reaches it


@dataclass
class Replay:
    """The decision on a made-up ledger record for the job of --job."""

    job: str
    request_id: str
    attempt: int
    location: str
    strategy: str
    state: str
    error: dict[str, Any] | None
    max_attempts: int
    kit_lines_fed: int
    preemption_lines_fed: int
    status: str
    outcome: str | None
    preemptions: str
    requeue: dict[str, Any] | None
    alerts: list[str]
    events: list[str]
    prune_requested: bool
    waiting: str | None
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    entries: list[EntryExplanation]
    replay: Replay | None
    source: str = ""
    offline: dict[str, str] = field(
        default_factory=lambda: {"event_age": NOT_CHECKED, "job_index": NOT_CHECKED}
    )

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.source,
            "offline": self.offline,
            "entries": [asdict(e) for e in self.entries],
            "replay": asdict(self.replay) if self.replay else None,
        }


@dataclass(frozen=True)
class _Parsed:
    position: int
    raw: Any
    entry: JobLogEntry | None
    ignored_reason: str | None


def explain(
    entries: Sequence[Any],
    settings: Settings,
    *,
    job_json: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> Report:
    """Every entry explained in time order, and with `job_json` the decision replayed."""
    from shared.events import IgnoredEntry, classify, parse_log_entry, patterns_from

    described = described_job(job_json) if job_json is not None else None
    patterns = patterns_from(settings)
    parsed: list[_Parsed] = []
    for position, raw in enumerate(entries, 1):
        try:
            entry = parse_log_entry(json.dumps(raw).encode())
        except IgnoredEntry as exc:
            parsed.append(_Parsed(position, raw, None, str(exc)))
        else:
            parsed.append(_Parsed(position, raw, entry, None))
    ordered = _in_time_order(parsed)
    explained = []
    for item in ordered:
        signal = classify(item.entry, patterns) if item.entry is not None else None
        explained.append(_explain_one(item, signal))
    replay = None
    if described is not None:
        replay = _replay(ordered, patterns, settings, described, now)
    return Report(explained, replay)


def _in_time_order(parsed: list[_Parsed]) -> list[_Parsed]:
    """Oldest first. A file that runs newest first (gcloud's default order) is reversed before the
    stable sort, so entries with equal timestamps keep their real order too."""
    from shared.clock import EPOCH

    times = [p.entry.timestamp for p in parsed if p.entry is not None and p.entry.timestamp]
    items = list(reversed(parsed)) if len(times) > 1 and times[0] > times[-1] else list(parsed)
    return sorted(items, key=lambda p: (p.entry.timestamp if p.entry and p.entry.timestamp else EPOCH))


def _explain_one(item: _Parsed, signal: Any) -> EntryExplanation:
    from shared.events import Signal

    entry = item.entry
    if entry is None:
        raw = _mapping(item.raw)
        labels = _mapping(_mapping(raw.get("resource")).get("labels"))
        return EntryExplanation(
            position=item.position,
            timestamp=_string(raw.get("timestamp")),
            insert_id=_string(raw.get("insertId")),
            job_id=_string(labels.get("job_id")),
            task=_string(labels.get("task_name")),
            severity=_string(raw.get("severity")),
            text=_shorten(_raw_text(raw)),
            signal=None,
            action=IGNORED,
            explanation=f"ignored: {item.ignored_reason}; acknowledged, nothing read",
        )
    common = {
        "position": item.position,
        "timestamp": entry.timestamp.isoformat().replace("+00:00", "Z") if entry.timestamp else None,
        "insert_id": entry.insert_id,
        "job_id": entry.job_id,
        "task": entry.task_name,
        "severity": entry.severity,
        "text": _shorten(entry.text),
        "signal": signal.value,
    }
    if not signal.is_relevant:
        what = (
            "a service line that names no state"
            if entry.is_service_line
            else "a container line that is no kit line and matches no preemption/stockout pattern"
        )
        return EntryExplanation(
            **common,
            action=IRRELEVANT,
            explanation=f"irrelevant: {what}; acknowledged, no ledger or Vertex read",
        )
    if entry.kit is not None:
        return EntryExplanation(
            **common,
            action=KIT_EVIDENCE,
            explanation=_kit_explanation(entry.kit),
            kit={
                "event": entry.kit.event,
                "request_id": entry.kit.request_id,
                "attempt": entry.kit.attempt,
                "run": entry.kit.run,
                "step": entry.kit.step,
            },
            stale=NOT_CHECKED,
        )
    job = entry.job_id
    if entry.is_service_line:
        explanation = f"service hint: reads job {job} from Vertex and decides on its state"
        if signal is Signal.PREEMPTION:
            explanation += (
                f"; its insertId {entry.identity} counts as one preemption "
                "(a per-preemption service line)"
            )
    else:
        explanation = (
            f"hint (a container line matching the {signal.value} pattern): reads job {job} from "
            "Vertex and decides on its state; the line itself is not counted"
        )
    return EntryExplanation(**common, action=VERTEX_READ, explanation=explanation, stale=NOT_CHECKED)


def _kit_explanation(kit: KitRecord) -> str:
    from spotjobs_kit.lines import CHECKPOINT_COMMITTED, PREEMPTED, RUN_FINISHED, RUN_STARTED

    attempt = "?" if kit.attempt is None else kit.attempt
    request = kit.request_id or "?"
    if kit.run is None:
        return f"kit evidence without a run index (attempt {attempt}, request {request}): nothing counted"
    head = f"kit evidence: counts run {kit.run} of attempt {attempt} (request {request}) — no Vertex read"
    if kit.event == RUN_STARTED:
        if kit.run == 0:
            detail = "the job's first run started"
        elif kit.run == 1:
            detail = "run 0 ended by preemption"
        else:
            detail = f"runs 0..{kit.run - 1} ended by preemption"
    elif kit.event == PREEMPTED:
        detail = f"run {kit.run} got the SIGTERM (one preemption)"
    elif kit.event == CHECKPOINT_COMMITTED:
        detail = (
            f"checkpoint at step {kit.step} committed"
            if kit.step is not None
            else "a checkpoint without a step: not counted"
        )
    elif kit.event == RUN_FINISHED:
        detail = f"run {kit.run} finished its training"
    else:
        detail = f"event {kit.event!r} is not one spotjobs counts"
    return f"{head}: {detail}"


# Replaying the decision.


def _replay(
    ordered: list[_Parsed],
    patterns: Any,
    settings: Settings,
    described: DescribedJob,
    now: datetime | None,
) -> Replay:
    from shared.clock import utcnow
    from shared.decisions import DecisionPolicy, Observation, decide
    from shared.events import Signal, classify
    from shared.ledger import Attempt, RequestRecord
    from shared.preemptions import preemptions_text
    from shared.states import AttemptOutcome, RequestStatus
    from shared.vertex import LABEL_ATTEMPT, LABEL_REQUEST_ID, JobState

    now = now or utcnow()
    snapshot, labels, strategy = described.snapshot, described.labels, described.strategy
    notes: list[str] = []
    request_id = labels.get(LABEL_REQUEST_ID) or ""
    if not request_id:
        notes.append(
            f"the job has no {LABEL_REQUEST_ID} label: spotjobs did not create it, and on_job_event "
            "would ignore its entries (foreign_job); replayed as if it had"
        )
        request_id = "(unlabelled)"
    raw_attempt = labels.get(LABEL_ATTEMPT) or ""
    n = int(raw_attempt) if raw_attempt.isdigit() and int(raw_attempt) > 0 else 1
    if str(n) != raw_attempt:
        notes.append(f"the job's {LABEL_ATTEMPT} label is {raw_attempt or 'missing'}: taken as attempt {n}")
    location = _location(snapshot.name)
    created = snapshot.create_time or now.isoformat()
    attempts = [
        Attempt(k, location, "SPOT", claimed_at=created, outcome=AttemptOutcome.REQUEUED)
        for k in range(1, n)
    ]
    attempts.append(
        Attempt(n, location, strategy, claimed_at=created, job=snapshot.name,
                state=JobState.QUEUED, created_at=snapshot.create_time)
    )
    envelope = {"schema_version": 1, "request_id": request_id, "location": location,
                "locations": [], "fallback": None, "checkpoints": None}
    record = RequestRecord(
        request_id, envelope, "", status=RequestStatus.SUBMITTED, attempts=attempts
    )
    policy = DecisionPolicy.from_settings(settings)
    events: list[str] = []
    alerts: list[str] = []
    kit_fed = lines_fed = other_jobs = 0
    kit_names: dict[tuple[str | None, int | None], int] = {}
    job_id = _job_id(snapshot.name)
    for item in ordered:
        entry = item.entry
        if entry is None:
            continue
        if entry.job_id != job_id:
            other_jobs += 1
            continue
        signal = classify(entry, patterns)
        if entry.kit is not None:
            observation = Observation(n, None, Signal.KIT, kit=entry.kit, job_name=snapshot.name)
            kit_fed += 1
            if entry.kit.attempt not in (None, n) or entry.kit.request_id not in (None, request_id):
                named = (entry.kit.request_id, entry.kit.attempt)
                kit_names[named] = kit_names.get(named, 0) + 1
        elif signal is Signal.PREEMPTION and entry.is_service_line:
            observation = Observation(
                n, None, signal, preemption_evidence=entry.identity, job_name=snapshot.name
            )
            lines_fed += 1
        else:
            continue
        decision = decide(record, observation, policy, now)
        record = decision.record
        events += decision.effects.events
        alerts += [a.kind for a in decision.effects.alerts]
    decision = decide(record, Observation(n, snapshot), policy, now)
    record = decision.record
    events += decision.effects.events
    alerts += [a.kind for a in decision.effects.alerts]
    for (kit_request, kit_attempt), count in kit_names.items():
        notes.append(
            f"{count} kit line(s) name request {kit_request} attempt {kit_attempt}; on_job_event "
            f"counts them for the job's own (request {request_id}, attempt {n}): check "
            "SPOTJOBS_REQUEST_ID/SPOTJOBS_ATTEMPT in the container"
        )
    if other_jobs:
        notes.append(f"{other_jobs} entries of other jobs were not fed to this job's decision")
    attempt = record.attempt(n)
    assert attempt is not None
    requeue = None
    if record.requeue is not None and record.requeue.attempt == n + 1:
        requeue = {
            "attempt": record.requeue.attempt,
            "location": record.requeue.location,
            "strategy": record.requeue.strategy,
            "reason": record.requeue.reason,
        }
    return Replay(
        job=snapshot.name,
        request_id=request_id,
        attempt=n,
        location=location,
        strategy=strategy,
        state=snapshot.state,
        error=snapshot.error,
        max_attempts=policy.default_max_attempts,
        kit_lines_fed=kit_fed,
        preemption_lines_fed=lines_fed,
        status=str(record.status),
        outcome=str(attempt.outcome) if attempt.outcome else None,
        preemptions=preemptions_text(attempt),
        requeue=requeue,
        alerts=alerts,
        events=events,
        prune_requested=decision.effects.prune_requested,
        waiting=decision.waiting,
        notes=notes,
    )


def _job_id(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _location(name: str) -> str:
    parts = name.split("/")
    return parts[parts.index("locations") + 1] if "locations" in parts[:-1] else ""


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _raw_text(raw: Mapping[str, Any]) -> str:
    text = raw.get("textPayload")
    if isinstance(text, str):
        return text
    payload = raw.get("jsonPayload")
    message = payload.get("message") if isinstance(payload, Mapping) else None
    return message if isinstance(message, str) else ""


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TEXT_WIDTH else text[: TEXT_WIDTH - 1] + "…"


# Printing.


def print_text(report: Report, out: TextIO) -> None:
    out.write(
        f"{report.source or 'entries'}: {len(report.entries)} entries, oldest first "
        f"(event age and job index: {NOT_CHECKED})\n"
    )
    for e in report.entries:
        where = f"job {e.job_id or '-'}  {e.task or '-'}"
        signal = (e.signal or "-").upper()
        if e.kit:
            signal += f" {e.kit['event']} run={_dash(e.kit['run'])} step={_dash(e.kit['step'])}"
        out.write(f"#{e.position:<3} {e.timestamp or '-'}  {where}  {e.severity or '-'}  {signal}\n")
        if e.text and not e.kit:  # a kit line's event, run and step are on the line above
            out.write(f"       {e.text}\n")
        stale = f" [stale: {e.stale}]" if e.stale else ""
        out.write(f"     → {e.explanation}{stale}\n")
    replay = report.replay
    if replay is None:
        return
    out.write(
        f"\nReplay: request {replay.request_id}, attempt {replay.attempt}, job {replay.job} "
        f"(assumed: max_attempts {replay.max_attempts}, the deployment default; no fallback, "
        "no other locations)\n"
    )
    out.write(
        f"  fed: {replay.kit_lines_fed} kit lines, {replay.preemption_lines_fed} preemption "
        f"lines, then the job: {replay.state}"
        + (f" error {json.dumps(replay.error, ensure_ascii=False)}" if replay.error else "")
        + "\n"
    )
    out.write(f"  status:       {replay.status}")
    out.write(f" (attempt {replay.attempt}: {replay.outcome})\n" if replay.outcome else "\n")
    out.write(f"  preemptions:  {replay.preemptions}\n")
    if replay.requeue:
        r = replay.requeue
        out.write(
            f"  re-queue:     attempt {r['attempt']} ({r['strategy']} in {r['location']}, "
            f"{r['reason']})\n"
        )
    else:
        out.write("  re-queue:     none\n")
    out.write(f"  alerts:       {', '.join(replay.alerts) or 'none'}\n")
    out.write(f"  log events:   {', '.join(replay.events) or 'none'}\n")
    if replay.prune_requested:
        out.write("  prune:        requested\n")
    if replay.waiting:
        out.write(f"  waiting:      {replay.waiting} (on_job_event would retry)\n")
    for note in replay.notes:
        out.write(f"  note:         {note}\n")


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)
