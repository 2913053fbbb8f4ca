"""What the dashboard's pages show, as data: a row per request, a bar per attempt on a timeline,
the cost so far against the same hours on demand, the trainer's lines as `spotjobs logs` marks
them, and a row per ops alert. Pure: the records and the time are arguments.

Every text a request, a job or a log wrote goes through `shown`: its control characters escaped as
`spotjobs logs` prints them (spotjobs/cli/common.py) and cut to a length a page can hold. The HTML
escaping is Jinja2's (autoescape on every template).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from shared.clock import parse_rfc3339
from shared.deciding.preemptions import preemptions_text, total_preemptions_text
from spotjobs.cli.common import terminal_text

if TYPE_CHECKING:
    from shared.ledger.records import Attempt, RequestRecord
    from spotjobs.trainer_logs import LogLine

# The longest text a cell shows (a job may write a megabyte into an error message).
MAX_SHOWN = 400
# The longest number a cell shows: a count a job's evidence claims may have hundreds of digits.
MAX_NUMBER = 24


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """`value` as text safe to show: controls escaped (`\\x1b`), cut to `limit` characters."""
    text = terminal_text("-" if value is None else value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_state(state: str | None) -> str:
    return state.removeprefix("JOB_STATE_") if state else "-"


def machine_of(record: RequestRecord) -> tuple[str, int]:
    """(machine type of the first worker pool, replicas over every pool), as the report reads them."""
    pools = ((record.request.get("custom_job") or {}).get("jobSpec") or {}).get("workerPoolSpecs") or []
    machine, replicas = "?", 0
    for pool in pools:
        if not isinstance(pool, dict) or not pool:
            continue
        spec = pool.get("machineSpec") or {}
        if machine == "?":
            machine = str(spec.get("machineType") or "?")
        count = str(pool.get("replicaCount") or 1)  # the API's JSON writes int64 as a string
        replicas += int(count) if count.isdigit() and 0 < int(count) < 10_000 else 1
    return machine, max(replicas, 1)


@dataclass(frozen=True)
class Cost:
    """Dollars so far as run, and the same hours on demand; None where the price table has no row."""

    so_far: float | None
    on_demand: float | None

    @property
    def text(self) -> str:
        return "unknown" if self.so_far is None else f"${self.so_far:,.2f}"  # unpriced: never shown as $0

    @property
    def on_demand_text(self) -> str:
        return "unknown" if self.on_demand is None else f"${self.on_demand:,.2f}"


def cost_so_far(record: RequestRecord, now: datetime) -> Cost:
    """The request's bill as `spotjobs status` shows it (`shared.fleet.spend.request_spend`: Vertex's
    run time of each attempt x every replica's price on its capacity), and the same on demand."""
    from shared.fleet.spend import request_spend

    spend = request_spend(record, now)
    return Cost(spend.usd, spend.on_demand_usd)


@dataclass(frozen=True)
class RequestRow:
    request_id: str
    status: str
    attempt: str  # "2/5", the attempt in progress or the last one
    location: str
    strategy: str
    state: str
    preemptions: str
    machine: str
    cost: str
    updated: str


def request_row(record: RequestRecord, now: datetime) -> RequestRow:
    latest = record.latest
    max_attempts = shown(record.request.get("max_attempts", "?"), 12)
    machine, replicas = machine_of(record)
    return RequestRow(
        request_id=shown(record.request_id),
        status=str(record.status),
        attempt=shown(f"{latest.n}/{max_attempts}" if latest else f"-/{max_attempts}", 2 * MAX_NUMBER),
        location=shown(latest.location if latest else "-", 60),
        strategy=shown(latest.strategy if latest else "-", 30),
        state=shown(short_state(latest.state) if latest else "-", 40),
        preemptions=shown(total_preemptions_text(record.attempts), MAX_NUMBER),
        machine=shown(f"{machine} ×{replicas}" if replicas > 1 else machine, 80),
        cost=cost_so_far(record, now).text,
        updated=shown(record.updated_at, 40),
    )


@dataclass(frozen=True)
class AttemptBar:
    """One attempt on the request's timeline: where it starts and how wide, in % of the span."""

    n: str
    location: str
    strategy: str  # the CSS class colours it: SPOT, FLEX_START, STANDARD
    state: str
    outcome: str
    preemptions: str
    preempted: bool
    left: float
    width: float
    start: str
    end: str
    placed: str
    error: str


def timeline(record: RequestRecord, now: datetime) -> list[AttemptBar]:
    """A bar per attempt over the span from the first claim to the last end (or now)."""
    times = [(parse_rfc3339(a.claimed_at or ""), parse_rfc3339(a.ended_at or "") or now) for a in record.attempts]
    starts = [start for start, _ in times if start is not None]
    first = min(starts, default=now)
    span = max(((end - first).total_seconds() for _, end in times), default=0.0) or 1.0
    bars = []
    for attempt, (start, end) in zip(record.attempts, times, strict=True):
        begin = start or first
        left = max(0.0, min(100.0, (begin - first).total_seconds() / span * 100))
        width = max(0.5, min(100.0 - left, (end - begin).total_seconds() / span * 100))
        outcome = str(attempt.outcome) if attempt.outcome else "-"
        bars.append(
            AttemptBar(
                n=shown(attempt.n, MAX_NUMBER),
                location=shown(attempt.location, 60),
                strategy=shown(attempt.strategy, 30),
                state=shown(short_state(attempt.state), 40),
                outcome=shown(outcome, 40),
                preemptions=shown(preemptions_text(attempt), MAX_NUMBER),
                preempted=bool(attempt.preemptions or attempt.preemptions_unknown),
                left=round(left, 2),
                width=round(width, 2),
                start=shown(attempt.claimed_at, 40),
                end=shown(attempt.ended_at or "running", 40),
                placed=shown(attempt.placed or "", MAX_SHOWN) if attempt.placed else "",
                error=shown((attempt.error or {}).get("message", "")) if attempt.error else "",
            )
        )
    return bars


@dataclass(frozen=True)
class ShownLine:
    time: str
    mark: str  # attempt N run R
    kind: str  # vertex, kit:<event>, or [unsigned] for a kit line its attempt did not sign
    forged: bool
    text: str


@dataclass(frozen=True)
class CheckpointRow:
    """An attempt's checkpoints as the kit's lines told the ledger, and the one it resumed from."""

    n: str
    committed: str
    last: str  # "run R, step S", or "-" before the first
    last_at: str
    interval: str  # the mean between two commits
    size: str
    resumed_from: str


def size_text(size: int) -> str:
    """Bytes as a reader reads them: 787 B, 12.3 kB, 2.5 MB, 1.2 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def checkpoint_text(attempt: Attempt) -> str:
    if not attempt.last_checkpoint or len(attempt.last_checkpoint) != 2:
        return "-"
    run, step = attempt.last_checkpoint
    return shown(f"run {run}, step {step}", MAX_SHOWN)


def checkpoints(record: RequestRecord) -> list[CheckpointRow]:
    """A row per attempt. An attempt resumes from the newest checkpoint an earlier attempt
    committed (the request's checkpoints carry over; the kit reads the newest complete one), or
    from scratch when none did."""
    rows = []
    resume = "from scratch"
    for attempt in record.attempts:
        interval = attempt.mean_checkpoint_interval
        size = attempt.last_checkpoint_bytes
        rows.append(
            CheckpointRow(
                n=shown(attempt.n, MAX_NUMBER),
                committed=shown(attempt.checkpoints_committed, MAX_NUMBER),
                last=checkpoint_text(attempt),
                last_at=shown(attempt.last_checkpoint_at or "-", 40),
                interval="-" if interval is None else shown(f"{interval:.0f} s", MAX_NUMBER),
                size="-" if size is None else shown(size_text(size), MAX_NUMBER),
                resumed_from=resume,
            )
        )
        if attempt.last_checkpoint and len(attempt.last_checkpoint) == 2:
            run, step = attempt.last_checkpoint
            resume = shown(f"step {step} (attempt {attempt.n}, run {run})")
    return rows


def log_tail(lines: Sequence[LogLine], limit: int) -> list[ShownLine]:
    """The last `limit` lines, marked as `spotjobs logs` marks them (spotjobs/cli/logs.py)."""
    shown_lines = []
    for line in list(lines)[-limit:]:
        if line.service:
            kind = "vertex"
        elif line.unsigned:
            kind = "[unsigned]"
        else:
            kind = f"kit:{line.event}" if line.event else ""
        run = "?" if line.run is None else str(line.run)
        mark = f"attempt {line.attempt}" + ("" if line.service else f" run {run}")
        shown_lines.append(ShownLine(shown(line.time or "-", 40), mark, kind, line.unsigned, shown(line.text, 2000)))
    return shown_lines


@dataclass(frozen=True)
class AlertRow:
    """An ops alert of the alerts log as the Alerts page lists it."""

    time: str
    severity: str  # the CSS class colours it: ERROR, WARNING, INFO
    kind: str
    request_id: str  # shown; "" when the alert names none
    link: str | None  # the request id to link to its page, when it names one
    attempt: str
    message: str
    details: str


def alert_row(alert: Mapping[str, object]) -> AlertRow:
    """One alert as the outbox published it (shared/alerts.py's schema); any field may be what a
    hand edit or a hostile job's text made it: every one is shown, never trusted."""
    request_id = alert.get("request_id")
    severity = str(alert.get("severity") or "-")
    details = alert.get("details")
    return AlertRow(
        time=shown(alert.get("time"), 40),
        severity=severity if severity in ("ERROR", "WARNING", "INFO") else "-",
        kind=shown(alert.get("kind"), 60),
        request_id=shown(request_id) if request_id else "",
        link=request_id if isinstance(request_id, str) and request_id else None,
        attempt=shown(alert.get("attempt") if alert.get("attempt") is not None else "-", MAX_NUMBER),
        message=shown(alert.get("message")),
        details=shown(json.dumps(details, sort_keys=True, default=str)) if details else "",
    )
