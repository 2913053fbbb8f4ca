"""`spotjobs prune`: show or carry out the checkpoint pruning plan.

    spotjobs prune [--request-id ID] [--dry-run] [--json]

Without --request-id every request folder under the managed checkpoint prefix is scanned. The
output is, per request, what is kept and what is (or with --dry-run, would be) deleted, each with
its reason and size (a dry run lists each checkpoint it would delete to measure it); --json
prints it as a list of objects. Works against real GCS, or the emulator when
STORAGE_EMULATOR_HOST is set.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from spotjobs.cli.common import command

if TYPE_CHECKING:
    from shared.pruning.report import PruneResult


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = command(
        subparsers,
        "prune",
        help="delete stale checkpoints (or show the plan with --dry-run)",
        description=__doc__.split("\n\n", 2)[2],
        examples=["spotjobs prune --dry-run", "spotjobs prune --request-id resnet-nightly-001 --json"],
    )
    parser.add_argument("--request-id", help="prune only this request")
    parser.add_argument("--dry-run", action="store_true", help="plan only; delete nothing")
    parser.add_argument("--json", action="store_true", help="print a JSON list, one object per request")
    parser.set_defaults(run=run_prune_command)


def run_prune_command(args: argparse.Namespace) -> int:
    from shared.adapters import clients
    from shared.pruning.folders import is_request_folder_name
    from shared.pruning.runner import run_prune
    from shared.settings import get_settings

    if args.request_id is not None and not is_request_folder_name(args.request_id):
        print(f"spotjobs prune: {args.request_id!r} is not a request id", file=sys.stderr)
        return 2
    result = run_prune(clients.storage_client(), get_settings(), request_id=args.request_id, dry_run=args.dry_run)
    if args.json:
        json.dump([r.to_json() for r in result.reports], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_prune_result(result, sys.stdout)
    return 1 if result.summary["errors"] else 0


def print_prune_result(result: PruneResult, out: TextIO) -> None:
    verb = "would delete" if result.dry_run else "deleted"
    for report in result.reports:
        head = f"{report.request_id}  [{report.lifecycle or '?'}"
        if report.status:
            head += f", {report.status}"
        out.write(f"{head}, keep_last={report.keep_last}]\n")
        for entry in report.kept:
            out.write(f"  keep      {entry['checkpoint']:<32} {entry['reason']}\n")
        for entry in report.deleted:
            out.write(f"  {verb:<9} {entry['checkpoint']:<32} {entry['reason']}{_size(entry)}\n")
        for entry in report.skipped:
            out.write(f"  skipped   {entry['checkpoint']:<32} {entry['reason']}\n")
        for error in report.errors:
            out.write(f"  error     {error}\n")
    summary = result.summary
    if result.dry_run:  # nothing was freed: say what the plan would free
        planned = [entry for report in result.reports for entry in report.deleted]
        objects = sum(entry["objects"] for entry in planned)
        size = sum(entry["bytes"] for entry in planned)
        outcome = f"would be deleted, would free {objects} objects, {size} bytes"
    else:
        freed = f"{summary['objects_deleted']} objects and {summary['bytes_freed']} bytes freed"
        outcome = f"deleted, {freed}"
    out.write(
        f"{summary['requests_scanned']} requests, {summary['checkpoints_deleted']} checkpoints "
        f"{outcome}, {summary['skipped']} skipped, {summary['errors']} errors\n"
    )


def _size(entry: dict[str, Any]) -> str:
    return f" ({entry['objects']} objects, {entry['bytes']} bytes)" if entry.get("objects") else ""
