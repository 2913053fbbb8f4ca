"""Triggers: a burst of Cloud Storage notifications into one window, through the embedded stack.

N object-finalize notifications (attributes and JSON payload as Cloud Storage sends them, all in
one window), plus a share of them delivered again, are published at once to on_trigger's topic;
then the window is closed by a tick. Reported: notifications recorded per second (first publish
to the last member object written), on_trigger's peak RSS, the close (tick to the request
published, manifest included), requests published (must be 1), manifest entries (must be N) and
jobs created (must be 1).

    python -m bench.bench_triggers [--notifications 10000] [--duplicates 0.1] [--window 60]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import time
from datetime import UTC, datetime

from bench.bench_load import group_peak_rss_mib
from bench.report import Figure, emit
from shared.triggers.render import manifest_uri

TRIGGER = "bench-burst"
PREFIX = "incoming/"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notifications", type=int, default=10_000)
    parser.add_argument("--duplicates", type=float, default=0.1)
    parser.add_argument("--window", type=int, default=60, help="coalesce_seconds of the trigger")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()

    from devstack.samples import job_request
    from devstack.stack import Stack, StackOptions
    from shared.triggers.render import Window, request_id_for

    options = StackOptions(
        function_env={
            "SPOTJOBS_LOG_LEVEL": "WARNING",
            "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": "",
            "SPOTJOBS_TRIGGER_SETTLE_SECONDS": "2",
        },
        max_delivery_attempts=30,  # redelivered about once a second here
        functions=("submit_job", "on_trigger"),
    )
    with Stack(options) as stack:
        from google.cloud import pubsub_v1

        from shared.triggers.store import TriggerStore

        body = json.loads(job_request("unused", ["/bin/sleep", "0.5"]))
        body.pop("request_id", None)
        store = TriggerStore(stack.storage().bucket(stack.settings.state_bucket))
        store.put_definition(
            {
                "schema_version": 1,
                "name": TRIGGER,
                "source": {"gcs": {"bucket": stack.options.data_bucket, "prefix": PREFIX}},
                "coalesce_seconds": args.window,
                "request": body,
            }
        )
        # Start at a window's beginning so the whole burst is recorded while its window is open.
        while time.time() % args.window > 1.0:
            time.sleep(0.2)
        window = Window.containing(datetime.now(UTC), args.window)
        event_time = window.start.isoformat().replace("+00:00", "Z")
        names = [f"{PREFIX}part-{i:06d}.parquet" for i in range(args.notifications)]
        messages = names + names[: int(len(names) * args.duplicates)]

        publisher = pubsub_v1.PublisherClient(
            batch_settings=pubsub_v1.types.BatchSettings(max_messages=500, max_latency=0.01)
        )
        topic = stack.topic_path("triggers")
        started = time.time()
        futures = [
            publisher.publish(
                topic,
                json.dumps(
                    {
                        "kind": "storage#object",
                        "bucket": stack.options.data_bucket,
                        "name": name,
                        "generation": "1",
                        "size": "1048576",
                        "contentType": "application/octet-stream",
                    }
                ).encode(),
                eventType="OBJECT_FINALIZE",
                bucketId=stack.options.data_bucket,
                objectId=name,
                objectGeneration="1",
                eventTime=event_time,
                payloadFormat="JSON_API_V1",
            )
            for name in messages
        ]
        concurrent.futures.wait(futures, timeout=300)
        print(f"published {len(messages)} notifications in {time.time() - started:.1f} s", file=sys.stderr)

        members = f"triggers/{TRIGGER}/windows/{window.id}/objects/"
        client = stack.storage()
        deadline = time.monotonic() + args.timeout
        recorded = 0
        while time.monotonic() < deadline:
            recorded = sum(
                1
                for _ in client.list_blobs(
                    stack.settings.state_bucket, prefix=members, fields="items(name),nextPageToken"
                )
            )
            print(f"  recorded {recorded}/{args.notifications}", file=sys.stderr)
            if recorded >= args.notifications:
                break
            time.sleep(3)
        recorded_at = time.time()
        # Let the redeliveries still queued drain before the close.
        time.sleep(5)
        rss_after_burst = group_peak_rss_mib(stack.processes["function-on_trigger"].pid)

        while time.time() < window.end.timestamp() + 3:
            time.sleep(0.5)
        request_id = request_id_for(TRIGGER, window.id)
        tick_at = time.time()
        stack.publish("triggers", b'{"task": "triggers"}', task="triggers")
        ledger = stack.ledger()
        record = None
        while time.monotonic() < deadline and record is None:
            record = ledger.get(request_id)
            time.sleep(0.2)
        closed_at = time.time()
        while time.monotonic() < deadline and not (record and record.latest and record.latest.job):
            time.sleep(0.5)
            record = ledger.get(request_id)
        uri = manifest_uri(stack.settings, request_id)
        bucket, _, name = uri.removeprefix("gs://").partition("/")
        manifest = json.loads(client.bucket(bucket).blob(name).download_as_bytes())
        requests = [b.name for b in client.list_blobs(stack.settings.state_bucket, prefix=f"requests/trg-{TRIGGER}-")]
        jobs = stack.job_service().list_custom_jobs(
            request={
                "parent": f"projects/{stack.options.project}/locations/{stack.options.location}",
                "filter": f'labels.spotjobs-request-id="{request_id}"',
            }
        )
        job_count = len(list(jobs))
        rss = group_peak_rss_mib(stack.processes["function-on_trigger"].pid)

    figures = [
        Figure("notifications published (unique + redelivered)", len(messages)),
        Figure("notifications recorded per second", round(recorded / max(recorded_at - started, 1e-9), 1), "notif/s"),
        Figure("burst recorded in", round(recorded_at - started, 1), "s"),
        Figure(
            "on_trigger peak RSS after the burst", round(rss_after_burst, 1), "MiB", "<= 200", rss_after_burst <= 200
        ),
        Figure("close: tick to request in the ledger (manifest of N built)", round(closed_at - tick_at, 2), "s"),
        Figure("on_trigger peak RSS after the close", round(rss, 1), "MiB", "<= 200", rss <= 200),
        Figure("requests published", len(requests), "", "== 1", len(requests) == 1),
        Figure(
            "manifest entries",
            manifest["object_count"],
            "",
            f"== {args.notifications}",
            manifest["object_count"] == args.notifications,
        ),
        Figure("jobs created", job_count, "", "== 1", job_count == 1),
    ]
    emit("triggers", figures)
    if not all(f.ok is not False for f in figures):
        sys.exit(1)


if __name__ == "__main__":
    main()
