"""`spotjobs watch ID`: a request's notifications (docs/requests.md, "Notifications") as they come.

It subscribes to the request's own topic (`notify.topic`) first, then reads the ledger: what was
told before the subscription existed is printed from the record (its notifications' markers, and
those still pending with all their fields), then every event the subscription receives, each
`event_id` once (delivery is at least once). It stops after the request's last notification
(succeeded, failed, gave_up, cancelled), or after `--timeout`, and deletes its subscription.

Why a subscription and not the ledger alone: the ledger keeps a notification only until it is
published (then its marker), so the events themselves, with their cost and time, are on the
topic; the Pub/Sub emulator serves subscriptions exactly as Pub/Sub does. A subscription sees only
what is published after it is created, hence the ledger's part first.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import uuid
from typing import Any

from spotjobs.cli.common import EXIT_FAILED, EXIT_INVALID, EXIT_OK, command, terminal_text

ENDINGS = frozenset({"succeeded", "failed", "gave_up", "cancelled"})
IDLE_SECONDS = 1.0
SUBSCRIPTION_TTL_SECONDS = 86400  # Pub/Sub's minimum expiration: a watch killed hard leaves nothing for long


def register(subparsers: argparse._SubParsersAction) -> None:
    watch = command(
        subparsers,
        "watch",
        help="print a request's notifications as they come (its notify topic)",
        description="Subscribes to the request's notify topic, prints what the ledger says was told "
        "already, then each event as it arrives (one line each, each event_id once), and stops after "
        "the request's last one. Exits 1 when the request is not in the ledger, 2 when it names no "
        "notify topic.",
        examples=["spotjobs watch resnet-nightly-001", "spotjobs watch resnet-nightly-001 --json --timeout 3600"],
    )
    watch.add_argument("request_id", help="the request")
    watch.add_argument("--json", action="store_true", help="one JSON object per line, as published")
    watch.add_argument(
        "--timeout", type=float, default=None, metavar="SECONDS", help="stop after this many seconds (default: never)"
    )
    watch.add_argument("--project", help="Google Cloud project of the ledger (default: GOOGLE_CLOUD_PROJECT)")
    watch.set_defaults(run=run_watch)


def notice_line(notice: dict[str, Any]) -> str:
    """One event for a person: time, kind, attempt, cost, and its kind's fields."""
    known = {"version", "event_id", "request_id", "attempt", "kind", "seq", "at", "cost_usd"}
    extra = " ".join(f"{key}={value}" for key, value in notice.items() if key not in known)
    cost = notice.get("cost_usd")
    return terminal_text(
        "  ".join(
            (
                str(notice.get("at") or "-"),
                f"{notice.get('kind') or '-':<10}",
                f"attempt {notice.get('attempt', '-')}",
                "cost ?" if cost is None else f"cost ${cost:,.2f}",
                extra,
            )
        ).rstrip()
    )


def told_before(record: Any) -> list[dict[str, Any]]:
    """The notifications the record says were decided, in order: pending ones whole, published
    ones as their marker tells them (kind, attempt, id)."""
    from shared.deciding.notices import NOTICE_MARKER, event_id

    pending = {notice["event_id"]: notice for notice in record.pending_notices}
    told = []
    for marker in record.markers:
        parts = marker.split(":")
        if len(parts) != 4 or parts[0] != NOTICE_MARKER:
            continue
        kind, attempt, n = parts[1], int(parts[2]), int(parts[3])
        identity = event_id(record.request_id, attempt, kind, n)
        told.append(pending.get(identity) or {"event_id": identity, "kind": kind, "attempt": attempt})
    return told


def run_watch(args: argparse.Namespace) -> int:
    from google.cloud import pubsub_v1, storage

    from shared.deciding.notices import notify_topic
    from shared.ledger.store import LedgerStore
    from shared.settings import get_settings
    from spotjobs import deadletters

    settings = get_settings()
    project = args.project or settings.project
    ledger = LedgerStore(storage.Client(project=project).bucket(settings.state_bucket))
    record = ledger.get(args.request_id)
    if record is None:
        print(f"spotjobs watch: {args.request_id} is not in the ledger", file=sys.stderr)
        return EXIT_FAILED
    topic = notify_topic(record)
    if topic is None:
        print(f"spotjobs watch: {args.request_id} names no notify topic", file=sys.stderr)
        return EXIT_INVALID
    subscriber = pubsub_v1.SubscriberClient()
    path = f"projects/{project}/subscriptions/spotjobs-watch-{uuid.uuid4().hex[:12]}"
    subscriber.create_subscription(
        request={
            "name": path,
            "topic": topic,
            "ack_deadline_seconds": 60,
            "filter": f'attributes.request_id = "{args.request_id}"',
            "expiration_policy": {"ttl": {"seconds": SUBSCRIPTION_TTL_SECONDS}},
        }
    )
    seen: set[str] = set()
    stopping = {"now": False}

    def stop(signum: int, frame: object) -> None:
        stopping["now"] = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def show(notice: dict[str, Any]) -> bool:
        """Print it unless seen; True once the request's last notification is shown."""
        if notice.get("request_id", args.request_id) != args.request_id or notice.get("event_id") in seen:
            return False
        seen.add(str(notice.get("event_id")))
        print(json.dumps(notice, separators=(",", ":")) if args.json else notice_line(notice), flush=True)
        return notice.get("kind") in ENDINGS

    deadline = time.monotonic() + args.timeout if args.timeout else None
    try:
        # Read after subscribing: whatever is published from now on arrives below.
        record = ledger.get(args.request_id) or record
        ended = any([show(notice) for notice in told_before(record)])
        while not ended and not stopping["now"] and (deadline is None or time.monotonic() < deadline):
            received = deadletters.pull_batch(subscriber, path)
            if not received:
                time.sleep(IDLE_SECONDS)
                continue
            notices = [_decoded(bytes(item.message.data)) for item in received]
            subscriber.acknowledge(request={"subscription": path, "ack_ids": [item.ack_id for item in received]})
            for notice in sorted(filter(None, notices), key=lambda n: int(n.get("seq") or 0)):
                ended = show(notice) or ended
    finally:
        subscriber.delete_subscription(request={"subscription": path})
        subscriber.close()
    return EXIT_OK


def _decoded(data: bytes) -> dict[str, Any] | None:
    try:
        notice = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return notice if isinstance(notice, dict) else None
