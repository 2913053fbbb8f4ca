"""Each captured log entry explained as on_job_event would act on it, in time order.

What it does with an entry: ignore it (and why), count it as kit evidence without a Vertex read,
ignore a kit line its attempt's key did not sign, or read the job from Vertex and decide on its
state. Two checks need the deployment and are not made offline: the event's age and whether
spotjobs created the job (its job index). A kit line's signature is checked with the key in the
described job's env (--job); without it, it is not checked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from spotjobs.explaining.reading import ParsedEntry, described_job
from spotjobs.explaining.replay import replay_decision, unsigned_by

if TYPE_CHECKING:
    from spotjobs_kit.lines import KitRecord

    from shared.settings import Settings
    from spotjobs.explaining.reading import DescribedJob
    from spotjobs.explaining.replay import Replay

NOT_CHECKED = "not checked offline"
TEXT_WIDTH = 100

# What on_job_event does with an entry.
IGNORED = "ignored"  # not a job log entry: acknowledged
IRRELEVANT = "irrelevant"  # a job's line that says nothing about its state: acknowledged
KIT_EVIDENCE = "kit_evidence"  # counted in the ledger, no Vertex read
UNTRUSTED = "untrusted"  # a kit line its attempt's key did not sign: acknowledged, nothing read
VERTEX_READ = "vertex_read"  # a hint: the job is read from Vertex and decided on


@dataclass
class EntryExplanation:
    position: int  # 1-based, in the file
    timestamp: str | None
    insert_id: str | None
    job_id: str | None
    task: str | None
    severity: str | None
    text: str
    signal: str | None  # shared.deciding.events.Signal value; None when the entry is ignored
    action: str
    explanation: str
    kit: dict[str, Any] | None = None  # event, request_id, attempt, run, step
    stale: str | None = None  # the age check: only a relevant entry reaches it


@dataclass
class Report:
    entries: list[EntryExplanation]
    replay: Replay | None
    source: str = ""
    offline: dict[str, str] = field(
        default_factory=lambda: {"event_age": NOT_CHECKED, "job_index": NOT_CHECKED, "kit_signature": NOT_CHECKED}
    )

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.source,
            "offline": self.offline,
            "entries": [asdict(e) for e in self.entries],
            "replay": asdict(self.replay) if self.replay else None,
        }


def explain(
    entries: Sequence[Any],
    settings: Settings,
    *,
    job_json: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> Report:
    """Every entry explained in time order, and with `job_json` the decision replayed."""
    from shared.deciding.events import IgnoredEntry, classify, parse_log_entry, patterns_from

    described = described_job(job_json) if job_json is not None else None
    patterns = patterns_from(settings)
    parsed: list[ParsedEntry] = []
    for position, raw in enumerate(entries, 1):
        try:
            entry = parse_log_entry(json.dumps(raw).encode())
        except IgnoredEntry as exc:
            parsed.append(ParsedEntry(position, raw, None, str(exc)))
        else:
            parsed.append(ParsedEntry(position, raw, entry, None))
    ordered = _in_time_order(parsed)
    explained = []
    for item in ordered:
        signal = classify(item.entry, patterns) if item.entry is not None else None
        explained.append(_explain_one(item, signal, described))
    if described is None:
        return Report(explained, None)
    report = Report(explained, replay_decision(ordered, patterns, settings, described, now))
    report.offline["kit_signature"] = "checked with the described job's key, for its own lines"
    return report


def _in_time_order(parsed: list[ParsedEntry]) -> list[ParsedEntry]:
    """Oldest first. A file that runs newest first (gcloud's default order) is reversed before the
    stable sort, so entries with equal timestamps keep their real order too."""
    from shared.clock import EPOCH

    times = [p.entry.timestamp for p in parsed if p.entry is not None and p.entry.timestamp]
    items = list(reversed(parsed)) if len(times) > 1 and times[0] > times[-1] else list(parsed)
    return sorted(items, key=lambda p: p.entry.timestamp if p.entry and p.entry.timestamp else EPOCH)


def _explain_one(item: ParsedEntry, signal: Any, described: DescribedJob | None) -> EntryExplanation:
    from shared.deciding.events import Signal

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
        unsigned = not entry.kit.sig or (described is not None and unsigned_by(described, entry.kit))
        return EntryExplanation(
            **common,
            action=UNTRUSTED if unsigned else KIT_EVIDENCE,
            explanation=(
                "untrusted: a kit line its attempt's key did not sign (or naming another attempt); "
                "acknowledged, nothing counted, no Vertex read"
                if unsigned
                else _kit_explanation(entry.kit)
            ),
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
            explanation += f"; its insertId {entry.identity} counts as one preemption (a per-preemption service line)"
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
    head += ", if signed with its attempt's key (checked with --job)"
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
