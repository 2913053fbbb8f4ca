"""`spotjobs logs`: what the trainer printed, every attempt and restart of one request, oldest first.

    spotjobs logs REQUEST_ID [--attempt N] [--follow] [--since T] [--json]

The jobs come from the ledger record's attempts; their lines from Cloud Logging, or from the local
Vertex emulator when SPOTJOBS_VERTEX_ENDPOINT points at one (spotjobs/trainer_logs.py). Each line
is marked with its attempt and run (where the kit's lines tell); the kit's event lines (run started,
preempted, checkpoint committed, ...) its attempt signed and Vertex's own lines are marked as such,
a kit line its attempt did not sign as `[unsigned]`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from spotjobs.cli.common import EXIT_FAILED, EXIT_INVALID, EXIT_OK, command, terminal_text

if TYPE_CHECKING:
    from shared.ledger.records import RequestRecord
    from spotjobs.trainer_logs import LogLine, Source


def register(subparsers: argparse._SubParsersAction) -> None:
    logs = command(
        subparsers,
        "logs",
        help="the trainer's output across every attempt and restart of a request",
        description="Prints the trainer's lines of every attempt of the request, oldest first, each "
        "marked with its attempt and run; from Cloud Logging, or the local Vertex emulator when "
        "SPOTJOBS_VERTEX_ENDPOINT points at one. Exits 1 when the request is not in the ledger.",
        examples=[
            "spotjobs logs resnet-nightly-001",
            "spotjobs logs resnet-nightly-001 --attempt 2 --since 2h",
            "spotjobs logs resnet-nightly-001 --follow --json",
        ],
    )
    logs.add_argument("request_id", help="the request")
    logs.add_argument("--attempt", type=int, metavar="N", help="only attempt N")
    logs.add_argument("--follow", action="store_true", help="keep printing new lines until the request ends")
    logs.add_argument(
        "--since", metavar="T", help="only lines from T on: an RFC 3339 time or a duration ago (30m, 2h, 1d)"
    )
    logs.add_argument("--json", action="store_true", help="one JSON object per line")
    logs.add_argument(
        "--interval", type=float, default=5.0, metavar="SECONDS", help="--follow asks this often (default 5)"
    )
    logs.add_argument("--project", help="Google Cloud project (default: GOOGLE_CLOUD_PROJECT)")
    logs.set_defaults(run=run_logs)


def run_logs(args: argparse.Namespace) -> int:
    from google.cloud import storage

    from shared.ledger.store import LedgerStore
    from shared.settings import get_settings
    from spotjobs.trainer_logs import CloudLogging, EmulatorLogs, LogsUnavailable, parse_since

    settings = get_settings()
    try:
        since = parse_since(args.since) if args.since else None
    except ValueError as error:
        print(terminal_text(error), file=sys.stderr)
        return EXIT_INVALID
    project = args.project or settings.project
    ledger = LedgerStore(storage.Client(project=project).bucket(settings.state_bucket))
    record = ledger.get(args.request_id)
    if record is None:
        print(f"no request {args.request_id} in gs://{settings.state_bucket}", file=sys.stderr)
        return EXIT_FAILED
    if args.attempt is not None and record.attempt(args.attempt) is None and not args.follow:
        print(f"{args.request_id} has no attempt {args.attempt}", file=sys.stderr)
        return EXIT_FAILED
    local = settings.vertex_endpoint.startswith("http://")
    source: Source = EmulatorLogs(settings.vertex_endpoint) if local else CloudLogging(project)
    try:
        print_lines(args, source, lambda: ledger.get(args.request_id), since)
    except LogsUnavailable as error:
        print(terminal_text(error), file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def print_lines(
    args: argparse.Namespace, source: Source, read_record: Callable[[], RequestRecord], since: str | None
) -> None:
    from spotjobs.trainer_logs import request_lines

    for line in request_lines(
        read_record, source, attempt=args.attempt, since=since, follow=args.follow, interval=max(0.1, args.interval)
    ):
        sys.stdout.write(json.dumps(line.to_json()) + "\n" if args.json else format_line(line))
        sys.stdout.flush()


def format_line(line: LogLine) -> str:
    """`TIME  attempt N run R [REPLICA]  [KIND]  TEXT`: REPLICA for a replica other than the primary, KIND is `vertex` for the service's lines,
    `kit:<event>` for the kit's lines its attempt signed and `[unsigned]` for a kit line it did not
    (anyone's claim: spotjobs/trainer_logs.py); every field a job wrote is escaped (`terminal_text`)."""
    from spotjobs.trainer_logs import PRIMARY_REPLICA

    run = "?" if line.run is None else str(line.run)
    if line.service:
        kind = "vertex"
    elif line.unsigned:
        kind = "[unsigned]"
    else:
        kind = f"kit:{line.event}" if line.event else ""
    mark = f"attempt {line.attempt} run {run}" if not line.service else f"attempt {line.attempt}"
    if line.replica not in (None, PRIMARY_REPLICA):
        mark += f" {terminal_text(line.replica)}"  # a replica other than the primary wrote it
    text = terminal_text(line.text)
    return f"{terminal_text(line.time or '-')}  {mark:<16} {kind + '  ' if kind else ''}{text}\n"
