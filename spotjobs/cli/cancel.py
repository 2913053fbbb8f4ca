"""`spotjobs cancel REQUEST_ID ... [--reason TEXT]`: stop requests (`spotjobs.cancel`).

The cancel is recorded in the ledger (who, when, why) and from then on nothing creates an attempt
of the request; its live job is cancelled by the functions, and it ends CANCELLED once Vertex
reports that job ended. Exit 0 when every request is cancelled (now or before), 1 when one is
unknown, had already finished or has a ledger record that cannot be read (said on stderr; the
others are still cancelled).
"""

from __future__ import annotations

import argparse
import json
import sys

from spotjobs.cli.common import EXIT_FAILED, EXIT_OK, command, terminal_text


def register(subparsers: argparse._SubParsersAction) -> None:
    cancel = command(
        subparsers,
        "cancel",
        help="cancel requests: no attempt is created after it, and the running job is stopped",
        description="Records the cancel in the ledger (who, when, why), once: from then on no path "
        "creates an attempt of the request (a re-queue, the quota line, a deadline switch, a "
        "failover, a redelivered message, reconcile). Its running job is cancelled by the functions, "
        "and the request ends CANCELLED once Vertex reports the job ended; its checkpoints stay "
        "(`spotjobs resubmit` resumes from them). Cancelling twice is a no-op (exit 0). Exits 1 when "
        "a request is not in the ledger, had already finished or has a record that cannot be read.",
        examples=[
            "spotjobs cancel resnet-nightly-001 --reason 'wrong dataset'",
            "spotjobs cancel req-a req-b --json",
        ],
    )
    cancel.add_argument("request_ids", nargs="+", metavar="REQUEST_ID", help="the requests to cancel")
    cancel.add_argument("--reason", help="why, recorded with the cancel and shown by `spotjobs status`")
    cancel.add_argument("--project", help="Google Cloud project (default: GOOGLE_CLOUD_PROJECT)")
    cancel.add_argument("--json", action="store_true", help="print one {request_id, result, status, cancel} per line")
    cancel.set_defaults(run=run_cancel)


def run_cancel(args: argparse.Namespace) -> int:
    import spotjobs
    from shared.ledger.records import CorruptRecord
    from shared.settings import get_settings

    settings = get_settings()
    who = spotjobs.caller_identity()
    exit_code = EXIT_OK
    for request_id in args.request_ids:
        name = terminal_text(request_id)
        try:
            outcome = spotjobs.cancel(request_id, reason=args.reason, by=who, project=args.project, settings=settings)
        except CorruptRecord as exc:  # hand-edited or another version's shape: nothing is written
            exit_code = EXIT_FAILED
            if args.json:
                print(json.dumps({"request_id": request_id, "result": "unreadable", "error": exc.reason}))
            else:
                print(
                    f"{name}: its ledger record cannot be read ({terminal_text(exc.reason)}); nothing was changed: "
                    "repair or restore it (docs/operations.md, ledger_corrupt)",
                    file=sys.stderr,
                )
            continue
        if outcome.result in ("unknown", "finished"):
            exit_code = EXIT_FAILED
        if args.json:
            print(json.dumps(outcome.__dict__))
            continue
        if outcome.result == "unknown":
            print(f"{name}: no such request in gs://{settings.state_bucket}", file=sys.stderr)
        elif outcome.result == "finished":
            print(f"{name}: already finished ({outcome.status}); nothing to cancel", file=sys.stderr)
        elif outcome.result == "already_cancelled":
            by = (outcome.cancel or {}).get("by")
            print(f"{name}: already cancelled (by {terminal_text(by)}); nothing more to do")
        elif outcome.status == "CANCELLED":
            print(f"{name}: cancelled (no job was running)")
        else:
            print(f"{name}: cancel recorded; its job is being cancelled, then it ends CANCELLED")
    return exit_code
