"""`spotjobs explain`: what on_job_event would make of captured log entries, offline.

    spotjobs explain FILE [--job JOB_JSON] [--json]

FILE holds Cloud Logging LogEntries: a JSON array (what `gcloud logging read --format=json`
prints), JSON lines, or a single entry; `-` reads standard input. Entries are explained in time
order (gcloud prints newest first), each with its position in the file, its job and task, the
signal `shared.deciding.events.classify` reads (for a trainer kit line: the kit's event, run and step) and
what on_job_event would do with it: ignore it (and why), count it as kit evidence without a
Vertex read, or read the job from Vertex and decide on its state. Two checks need the deployment
and are not made offline: the event's age (on_job_event drops an entry older than
SPOTJOBS_MAX_EVENT_AGE_SECONDS) and whether spotjobs created the job (its job index).

With --job JOB_JSON (what `gcloud ai custom-jobs describe JOB_ID --region R --format=json`
prints), the pure decision (`shared.deciding.decisions.decide`) also runs, on a ledger record made up for
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
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from spotjobs.cli.common import EXIT_OK, command, terminal_text
from spotjobs.explaining.entries import NOT_CHECKED
from spotjobs.explaining.reading import UnreadableInput

if TYPE_CHECKING:
    from spotjobs.explaining.entries import Report

EXIT_UNREADABLE = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = command(
        subparsers,
        "explain",
        help="offline: what on_job_event would make of captured log entries (and a job's JSON)",
        description=__doc__.split("\n\n", 2)[2],
        examples=[
            "spotjobs explain entries.json",
            "spotjobs explain entries.json --job job.json --json",
        ],
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
    parser.set_defaults(run=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    from shared.errors import ConfigurationError
    from shared.settings import Settings
    from spotjobs.explaining.entries import explain
    from spotjobs.explaining.reading import read_entries, read_job_json

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
        json.dump(report.to_json(), sys.stdout, indent=2)  # ASCII: every control and override escaped
        sys.stdout.write("\n")
    else:
        print_explanation(report, sys.stdout)
    return EXIT_OK


def _read_text(path: str) -> str:
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UnreadableInput(f"cannot read {path}: {exc}") from None


# Printing.


def print_explanation(report: Report, out: TextIO) -> None:
    """The report as lines; every value in them may come from a log line a job wrote, so each
    line is shown as text (its own line ending kept)."""
    safe = _TerminalSafe(out)
    safe.write(
        f"{report.source or 'entries'}: {len(report.entries)} entries, oldest first "
        f"(event age and job index: {NOT_CHECKED})\n"
    )
    for e in report.entries:
        where = f"job {e.job_id or '-'}  {e.task or '-'}"
        signal = (e.signal or "-").upper()
        if e.kit:
            signal += f" {e.kit['event']} run={_dash(e.kit['run'])} step={_dash(e.kit['step'])}"
        safe.write(f"#{e.position:<3} {e.timestamp or '-'}  {where}  {e.severity or '-'}  {signal}\n")
        if e.text and not e.kit:  # a kit line's event, run and step are on the line above
            safe.write(f"       {e.text}\n")
        stale = f" [stale: {e.stale}]" if e.stale else ""
        safe.write(f"     → {e.explanation}{stale}\n")
    replay = report.replay
    if replay is None:
        return
    safe.write(
        f"\nReplay: request {replay.request_id}, attempt {replay.attempt}, job {replay.job} "
        f"(assumed: max_attempts {replay.max_attempts}, the deployment default; no fallback, "
        "no other locations)\n"
    )
    safe.write(
        f"  fed: {replay.kit_lines_fed} kit lines, {replay.preemption_lines_fed} preemption "
        f"lines, then the job: {replay.state}"
        + (f" error {json.dumps(replay.error, ensure_ascii=False)}" if replay.error else "")
        + "\n"
    )
    safe.write(f"  status:       {replay.status}")
    safe.write(f" (attempt {replay.attempt}: {replay.outcome})\n" if replay.outcome else "\n")
    safe.write(f"  preemptions:  {replay.preemptions}\n")
    if replay.requeue:
        r = replay.requeue
        safe.write(f"  re-queue:     attempt {r['attempt']} ({r['strategy']} in {r['location']}, {r['reason']})\n")
    else:
        safe.write("  re-queue:     none\n")
    safe.write(f"  alerts:       {', '.join(replay.alerts) or 'none'}\n")
    safe.write(f"  log events:   {', '.join(replay.events) or 'none'}\n")
    if replay.prune_requested:
        safe.write("  prune:        requested\n")
    if replay.waiting:
        safe.write(f"  waiting:      {replay.waiting} (on_job_event would retry)\n")
    for note in replay.notes:
        safe.write(f"  note:         {note}\n")


class _TerminalSafe:
    """Writes each piece with its control characters escaped, but for the newlines around it."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, text: str) -> None:
        body = text.strip("\n")
        if not body:
            self._out.write(text)
            return
        lead = text[: len(text) - len(text.lstrip("\n"))]
        self._out.write(lead + terminal_text(body) + text[len(text.rstrip("\n")) :])


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)
