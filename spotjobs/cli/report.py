"""`spotjobs report [REQUEST_ID ...] --html FILE`: one self-contained HTML page about requests.

Reads the ledger (every request, newest first, or the ones named) and the checkpoints each
request has in the bucket now (a dry-run prune listing: nothing is deleted), and writes
spotjobs/reporting/html.py's page: per request a timeline and its attempts, and totals, with the
bill per request and per team label (spotjobs/reporting/bill.py). Works on the
emulators (STORAGE_EMULATOR_HOST) or Google Cloud (Application Default Credentials).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from spotjobs.cli.common import EXIT_FAILED, EXIT_INVALID, EXIT_OK, command


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = command(
        subparsers,
        "report",
        help="write one self-contained HTML page: a timeline per request and totals",
        description=__doc__.split("\n\n", 1)[1],
        examples=[
            "spotjobs report --html report.html",
            "spotjobs report resnet-nightly-001 resnet-nightly-002 --html two.html",
        ],
    )
    parser.add_argument("request_ids", nargs="*", metavar="REQUEST_ID", help="these requests (default: all)")
    parser.add_argument("--html", required=True, metavar="FILE", help="where to write the page")
    parser.add_argument("--limit", type=int, default=200, help="at most this many requests (default 200)")
    parser.add_argument("--no-checkpoints", action="store_true", help="do not list checkpoint folders")
    parser.add_argument(
        "--team-label",
        default="team",
        metavar="KEY",
        help="the bill's totals per value of this job label (default team)",
    )
    parser.add_argument("--project", help="Google Cloud project (default: GOOGLE_CLOUD_PROJECT)")
    parser.set_defaults(run=run_report)


def run_report(args: argparse.Namespace) -> int:
    from google.cloud import storage

    from shared.ledger.store import LedgerStore
    from shared.settings import get_settings
    from spotjobs.cli.status import recent_records
    from spotjobs.reporting.html import render_report

    settings = get_settings()
    target = Path(args.html)
    if not target.parent.exists():
        print(f"spotjobs report: {target.parent} does not exist", file=sys.stderr)
        return EXIT_INVALID
    client = storage.Client(project=args.project or settings.project)
    ledger = LedgerStore(client.bucket(settings.state_bucket))
    if args.request_ids:
        records = [ledger.get(request_id) for request_id in args.request_ids]
        missing = [rid for rid, record in zip(args.request_ids, records) if record is None]
        if missing:
            print(f"no request {', '.join(missing)} in gs://{settings.state_bucket}", file=sys.stderr)
            return EXIT_FAILED
    else:
        records = recent_records(ledger, args.limit)
    checkpoints = {} if args.no_checkpoints else present_checkpoints(client, settings, [r.request_id for r in records])
    page = render_report(
        [record.to_json() for record in records],
        checkpoints=checkpoints,
        subtitle=f"ledger gs://{settings.state_bucket}, project {args.project or settings.project}",
        team_label=args.team_label,
        notes=[
            "Checkpoints are those in the bucket now; the ledger does not record when each "
            "preemption happened, so preemptions are drawn evenly over their attempt."
        ],
    )
    target.write_text(page, encoding="utf-8")
    print(target.resolve())
    return EXIT_OK


def present_checkpoints(client: Any, settings: Any, request_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each request's checkpoints in the bucket now (kept, or due for pruning), by request id."""
    from shared.log import Logger
    from shared.pruning.runner import run_prune

    quiet = Logger(min_severity="CRITICAL")
    found: dict[str, list[dict[str, Any]]] = {}
    for request_id in request_ids:
        try:
            result = run_prune(client, settings, request_id=request_id, dry_run=True, log=quiet)
        except Exception as exc:  # noqa: BLE001 - a page without checkpoints beats no page
            print(f"spotjobs report: checkpoints of {request_id} not listed: {exc}", file=sys.stderr)
            continue
        for report in result.reports:
            entries = [{**entry, "state": "kept"} for entry in report.kept]
            entries += [{**entry, "state": "due for pruning"} for entry in report.deleted]
            found[report.request_id] = sorted(
                (e for e in entries if isinstance(e.get("step"), int)), key=lambda e: e["step"]
            )
    return found
