"""`spotjobs alerts | dead-letters`: the ops rotation's view of the ops-alerts and dead-letter topics.

Both read pull subscriptions from shared/topology.json (`ops-alerts-reader`, `dead-letter-reader`),
on the Pub/Sub emulator when PUBSUB_EMULATOR_HOST is set, else on Google Cloud with Application
Default Credentials. What a command does not print or redrive it gives back at once (ack deadline
0), so the next reader sees it. Heavy libraries are imported inside the commands.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spotjobs.cli.common import EXIT_FAILED, EXIT_OK, command, terminal_text

ALERTS_SUBSCRIPTION = "ops-alerts-reader"
DEAD_LETTER_SUBSCRIPTION = "dead-letter-reader"
FOLLOW_IDLE_SECONDS = 1.0


def register(subparsers: argparse._SubParsersAction) -> None:
    alerts = command(
        subparsers,
        "alerts",
        help="print ops alerts (one line each) and acknowledge what was printed",
        description="Reads the ops-alerts-reader subscription: one line per alert (time, severity, "
        "kind, request, message), oldest first. Only the alerts printed are acknowledged; those a "
        "filter leaves out stay on the subscription.",
        examples=[
            "spotjobs alerts",
            "spotjobs alerts --kind attempts_exhausted --json",
            "spotjobs alerts --follow --request-id resnet-nightly-001",
        ],
    )
    alerts.add_argument("--follow", action="store_true", help="keep printing alerts as they arrive (Ctrl-C stops)")
    alerts.add_argument("--kind", action="append", default=[], metavar="K", help="only this kind (repeatable)")
    alerts.add_argument("--request-id", metavar="ID", help="only alerts about this request")
    alerts.add_argument("--json", action="store_true", help="one JSON object per line, as published")
    alerts.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --follow: stop after this many seconds (default: never)",
    )
    alerts.add_argument("--project", help="Google Cloud project (default: GOOGLE_CLOUD_PROJECT)")
    alerts.set_defaults(run=run_alerts)

    dead = command(
        subparsers,
        "dead-letters",
        help="list dead-lettered messages, and redrive them to the topic they came from",
        description="Lists what Pub/Sub dead-lettered after a function failed it "
        "max_delivery_attempts times: its id, source subscription (so function and topic), "
        "delivery count and, where the functions' logs say, why it failed. Listing acknowledges "
        "nothing.",
        examples=[
            "spotjobs dead-letters",
            "spotjobs dead-letters --json",
            "spotjobs dead-letters redrive --all --dry-run",
        ],
    )
    dead.add_argument("--json", action="store_true", help="print a JSON list")
    dead.add_argument("--project", help="Google Cloud project (default: GOOGLE_CLOUD_PROJECT)")
    dead.add_argument(
        "--logs",
        metavar="DIR",
        help="the embedded stack's function logs (default: SPOTJOBS_LOCAL_LOGS; in the cloud, Cloud Logging)",
    )
    dead.set_defaults(run=run_dead_letters)
    commands = dead.add_subparsers(dest="dead_letters_command", metavar="COMMAND")
    redrive = command(
        commands,
        "redrive",
        help="republish dead letters to their source topic, exactly once each",
        description="Republishes each chosen dead letter, with its data and its publisher's "
        "attributes, to the topic of the subscription that dead-lettered it, then acknowledges it. "
        "Each id is claimed in the state bucket first (deadletters/redriven/<id>.json, "
        "if_generation_match=0), so an id already redriven is never sent again.",
        examples=["spotjobs dead-letters redrive --all --dry-run", "spotjobs dead-letters redrive --id 4242 --id 4243"],
    )
    chosen = redrive.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--id", action="append", default=[], metavar="ID", help="a dead letter id (repeatable)")
    chosen.add_argument("--all", action="store_true", help="every dead letter")
    redrive.add_argument("--dry-run", action="store_true", help="say what would be redriven; send nothing")
    redrive.add_argument("--json", action="store_true", help="print a JSON list of results")
    redrive.add_argument("--project", help="Google Cloud project (default: GOOGLE_CLOUD_PROJECT)")
    redrive.set_defaults(run=run_redrive)


def _subscription_path(args: argparse.Namespace, name: str) -> str:
    from shared.settings import get_settings

    return f"projects/{args.project or get_settings().project}/subscriptions/{name}"


# alerts


def alert_line(alert: dict[str, Any]) -> str:
    message = " ".join(str(alert.get("message", "")).split())
    return terminal_text(
        "  ".join(
            (
                str(alert.get("time") or "-"),
                f"{alert.get('severity') or '-':<7}",
                f"{alert.get('kind') or '-':<18}",
                str(alert.get("request_id") or "-"),
                message,
            )
        )
    )


def _matches(alert: dict[str, Any], args: argparse.Namespace) -> bool:
    if args.kind and alert.get("kind") not in args.kind:
        return False
    return not (args.request_id and alert.get("request_id") != args.request_id)


def _decode(data: bytes) -> dict[str, Any]:
    try:
        alert = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        alert = None
    if not isinstance(alert, dict):
        return {"kind": "unreadable", "severity": "WARNING", "message": data[:200].decode(errors="replace")}
    return alert


def run_alerts(args: argparse.Namespace) -> int:
    from google.cloud import pubsub_v1

    from spotjobs import deadletters

    subscriber = pubsub_v1.SubscriberClient()
    path = _subscription_path(args, ALERTS_SUBSCRIPTION)
    held: dict[str, str] = {}  # message id -> ack id of alerts left out by a filter
    stopping = {"now": False}
    if args.follow:

        def stop(signum: int, frame: object) -> None:
            stopping["now"] = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    deadline = time.monotonic() + args.timeout if args.follow and args.timeout else None
    try:
        while not stopping["now"]:
            if deadline is not None and time.monotonic() >= deadline:
                break
            received = deadletters.pull_batch(subscriber, path)
            if not received:
                if not args.follow:
                    break
                time.sleep(FOLLOW_IDLE_SECONDS)
                continue
            batch = []
            for item in received:
                alert = _decode(bytes(item.message.data))
                if _matches(alert, args):
                    batch.append((alert, item.ack_id))
                else:
                    held[item.message.message_id] = item.ack_id
            batch.sort(key=lambda pair: str(pair[0].get("time", "")))
            for alert, _ in batch:
                print(json.dumps(alert, separators=(",", ":")) if args.json else alert_line(alert))
            sys.stdout.flush()
            if batch:  # acknowledged only once printed
                subscriber.acknowledge(request={"subscription": path, "ack_ids": [a for _, a in batch]})
    finally:
        if held:
            ids = list(held.values())
            for start in range(0, len(ids), 1000):
                subscriber.modify_ack_deadline(
                    request={"subscription": path, "ack_ids": ids[start : start + 1000], "ack_deadline_seconds": 0}
                )
        subscriber.close()
    return EXIT_OK


# dead-letters


def _attach_failures(letters: Sequence[Any], args: argparse.Namespace) -> str | None:
    """Attach failure reasons; returns a note when they could not be looked up."""
    from spotjobs import deadletters

    logs = args.logs or os.environ.get("SPOTJOBS_LOCAL_LOGS")
    if logs:
        deadletters.attach_failures(letters, deadletters.local_log_lines(Path(logs)), "local logs")
        return None
    if os.environ.get("PUBSUB_EMULATOR_HOST"):
        return "reasons unknown: no function logs (set SPOTJOBS_LOCAL_LOGS or --logs)"
    from shared.settings import get_settings

    try:
        lines = deadletters.cloud_log_lines(args.project or get_settings().project, letters)
    except Exception as exc:  # noqa: BLE001 - reasons are a courtesy; the listing still stands
        return f"reasons unknown: Cloud Logging could not be read ({type(exc).__name__})"
    deadletters.attach_failures(letters, lines, "Cloud Logging")
    return None


def run_dead_letters(args: argparse.Namespace) -> int:
    from google.cloud import pubsub_v1

    from spotjobs import deadletters

    subscriber = pubsub_v1.SubscriberClient()
    path = _subscription_path(args, DEAD_LETTER_SUBSCRIPTION)
    letters = deadletters.pull_all(subscriber, path)
    try:
        note = _attach_failures(letters, args)
    finally:
        deadletters.release(subscriber, path, letters)
        subscriber.close()
    if args.json:
        json.dump([letter.to_json() for letter in letters], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK
    if not letters:
        print("no dead-lettered messages")
        return EXIT_OK
    for line in dead_letter_table(letters):
        print(line)
    if note:
        print(note, file=sys.stderr)
    return EXIT_OK


def dead_letter_table(letters: Sequence[Any]) -> list[str]:
    """The dead letters as lines of a table; their data and reasons are their writers' text."""
    header = ("ID", "SOURCE SUBSCRIPTION", "DELIVERIES", "PUBLISHED", "MESSAGE", "WHY IT FAILED")
    rows = [
        tuple(
            terminal_text(cell)
            for cell in (
                letter.id,
                letter.source_subscription or "?",
                str(letter.delivery_count if letter.delivery_count is not None else "?"),
                letter.original_publish_time or "-",
                letter.summary(),
                (letter.reason or "unknown")[:120],
            )
        )
        for letter in letters
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header) - 1)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths)) + "  " + row[-1]
        for row in (header, *rows)
    ]


def run_redrive(args: argparse.Namespace) -> int:
    from google.cloud import pubsub_v1, storage

    from shared.settings import get_settings
    from spotjobs import deadletters

    settings = get_settings()
    project = args.project or settings.project
    subscriber = pubsub_v1.SubscriberClient()
    path = _subscription_path(args, DEAD_LETTER_SUBSCRIPTION)
    letters = deadletters.pull_all(subscriber, path)
    wanted = set(args.id)
    chosen = letters if args.all else [letter for letter in letters if letter.id in wanted]
    missing = sorted(wanted - {letter.id for letter in letters})
    acknowledged: list[Any] = []
    try:
        claims = deadletters.RedriveClaims(storage.Client(project=project).bucket(settings.state_bucket))
        results, acknowledged = deadletters.redrive(
            chosen,
            claims=claims,
            publish=deadletters.publisher_function(pubsub_v1.PublisherClient()),
            topic_path=lambda key: f"projects/{project}/topics/{_topic_name(settings, key)}",
            dry_run=args.dry_run,
        )
        deadletters.acknowledge(subscriber, path, acknowledged)
    finally:
        done = {letter.id for letter in acknowledged}
        deadletters.release(subscriber, path, [letter for letter in letters if letter.id not in done])
        subscriber.close()
    for letter_id in missing:
        # Not on the subscription: redriven (and acknowledged) before, or never a dead letter.
        results.append(deadletters.RedriveResult(letter_id, "not found", "no such dead letter now"))
    if args.json:
        json.dump([result.to_json() for result in results], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for result in results:
            target = f" -> {result.topic}" if result.topic else ""
            new_id = f" as {result.message_id}" if result.message_id and result.outcome == "redriven" else ""
            detail = f" ({result.detail})" if result.detail else ""
            print(terminal_text(f"{result.id}: {result.outcome}{target}{new_id}{detail}"))
        if not results:
            print("no dead-lettered messages")
    if missing:
        return EXIT_FAILED
    return EXIT_FAILED if any(r.outcome == "failed" for r in results) else EXIT_OK


def _topic_name(settings: Any, key: str) -> str:
    """A topic's name in this deployment: its SPOTJOBS_*_TOPIC setting, else the topology's."""
    from shared.topology import TOPOLOGY

    return getattr(settings, f"{key}_topic", None) or TOPOLOGY.topic_name(key)
