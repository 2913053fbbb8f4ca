"""The stack's push subscriptions keep redelivering a failing message (devstack/pubsub_wiring.py).

Google's Pub/Sub emulator stops redelivering a push that keeps failing once its subscription has a
retry policy; the stack's subscriptions have none, so a message is pushed again about once a
second until the dead-letter policy takes it. Here the real emulator and the stack's own
`create_subscriptions`, with submit_job's push endpoint answering 500 to everything: the message
must come back again and again, then reach the dead-letter topic after exactly the attempts set.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from devstack.pubsub_wiring import (
    create_subscriptions,
    create_topics,
    subscription_path,
    topic_path,
)

pytestmark = pytest.mark.stack

PROJECT = "redelivery-test"
ATTEMPTS = 8
MESSAGES = 4


class FailingEndpoint:
    """An HTTP server that answers 500 to every push and notes when each message came."""

    def __init__(self) -> None:
        self.pushes: dict[str, list[float]] = {}
        lock = threading.Lock()
        pushes = self.pushes

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    pushes.setdefault(body["message"]["messageId"], []).append(time.monotonic())
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def pubsub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from devstack.emulators import start_pubsub_emulator

    process, host = start_pubsub_emulator(tmp_path, os.environ)
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", host)
    try:
        yield host
    finally:
        process.stop()


def test_pushes_that_keep_failing_come_back_every_second_until_dead_lettered(pubsub: str) -> None:
    from google.cloud import pubsub_v1

    endpoint = FailingEndpoint()
    create_topics(PROJECT)
    router = create_subscriptions(
        PROJECT, {"submit_job": endpoint.url}, lambda **_: None, max_delivery_attempts=ATTEMPTS
    )
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    try:
        message_ids = set()
        for _ in range(MESSAGES):
            message_ids.add(publisher.publish(topic_path(PROJECT, "job_requests"), b"{}").result())
            time.sleep(0.3)
        dead: dict[str, str] = {}
        deadline = time.monotonic() + 90
        while len(dead) < MESSAGES and time.monotonic() < deadline:
            response = subscriber.pull(
                request={"subscription": subscription_path(PROJECT, "dead-letter-reader"), "max_messages": 10},
                timeout=5,
            )
            for received in response.received_messages:
                attributes = received.message.attributes
                dead[received.message.message_id] = attributes["CloudPubSubDeadLetterSourceDeliveryCount"]
            if response.received_messages:
                subscriber.acknowledge(
                    request={
                        "subscription": subscription_path(PROJECT, "dead-letter-reader"),
                        "ack_ids": [r.ack_id for r in response.received_messages],
                    }
                )
        pushes = {message_id: endpoint.pushes.get(message_id, []) for message_id in message_ids}
    finally:
        if router is not None:
            router.stop()
        endpoint.server.shutdown()

    # With a retry policy, messages stopped after three or four pushes and were not dead-lettered.
    assert {m: len(times) for m, times in pushes.items()} == dict.fromkeys(message_ids, ATTEMPTS)
    assert len(dead) == MESSAGES and set(dead.values()) == {str(ATTEMPTS)}
    gaps = [b - a for times in pushes.values() for a, b in zip(times, times[1:])]
    assert max(gaps) < 3, gaps  # about a second each; a retry policy's backoff grows past that
