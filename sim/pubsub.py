"""Pub/Sub in memory: topics, push subscriptions that route them to the functions
(`shared/topology.json`, with the maintenance topic's task filters), at-least-once delivery.

- a publish goes through the world's io hook (a crash, a failed publish, or one whose answer is
  lost after the message was accepted) and returns a future, as `PublisherClient.publish` does;
- each subscription keeps its own copy of a message; any deliverable copy may go next
  (reordering); an acknowledged delivery may still come back (a duplicate); a failed one comes
  back after the subscription's backoff (10 s doubling to 600 s) and after 5 deliveries goes to
  the dead-letter topic (`trigger_subscription` in the topology: max_delivery_attempts);
- topics no function subscribes to (ops-alerts, dead-letter) are kept whole for the invariants.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from shared.clock import iso

DEAD_LETTER_TOPIC = "dead-letter"


@dataclass
class Published:
    topic: str
    data: bytes
    attributes: dict[str, str]
    message_id: str
    publish_time: datetime

    def json(self) -> Any:
        """The body as JSON, None when it is not; parsed once (the checker reads every alert after
        every step), so callers must not change what it returns."""
        return self._body

    @cached_property
    def _body(self) -> Any:
        try:
            return json.loads(self.data)
        except ValueError:
            return None

    def push_body(self, subscription: str) -> dict[str, Any]:
        return {
            "message": {
                "data": base64.b64encode(self.data).decode(),
                "attributes": dict(self.attributes),
                "messageId": self.message_id,
                "publishTime": iso(self.publish_time, timespec="microseconds"),
            },
            "subscription": subscription,
        }


@dataclass(eq=False)  # a copy delivered concurrently is another delivery of the same message
class Delivery:
    subscription: str
    function: str
    message: Published
    not_before: datetime
    attempts: int = 0  # deliveries that failed so far


@dataclass
class Subscription:
    name: str
    topic: str
    function: str
    task: str | None  # the maintenance filter's `task` attribute


def subscriptions() -> list[Subscription]:
    raw = json.loads(TOPOLOGY_PATH.read_text())
    out = []
    for function, spec in raw["functions"].items():
        topic = raw["topics"][spec["topic"]]["name"]
        task = None
        if spec.get("filter"):
            task = spec["filter"].split('"')[1]
        out.append(Subscription(spec["subscription"], topic, function, task))
    return out


from pathlib import Path  # noqa: E402 - next to its one use

TOPOLOGY_PATH = Path(__file__).resolve().parent.parent / "shared" / "topology.json"
MAX_DELIVERY_ATTEMPTS = 5
MIN_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS = 10.0, 600.0


@dataclass
class SimPubSub:
    clock: Callable[[], datetime]
    io: Callable[..., Any]
    rng: Any
    subs: list[Subscription] = field(default_factory=subscriptions)
    topics: dict[str, list[Published]] = field(default_factory=dict)
    pending: list[Delivery] = field(default_factory=list)
    observe: Callable[[Published], None] = lambda message: None  # the world's note of every publish
    # Topics that refuse every publish for good (a requester's notification topic deleted, or its
    # grant revoked: NotFound, PermissionDenied), and each refused publish (topic, when).
    refusing: frozenset[str] = frozenset()
    refused: list[tuple[str, datetime]] = field(default_factory=list)
    _ids: int = 1

    @property
    def next_id(self) -> int:
        """The message id the next accepted message gets."""
        return self._ids

    def publisher(self) -> SimPubSub:
        return self

    def publish(self, topic: str, data: bytes, **attributes: str) -> Future[str]:
        """`PublisherClient.publish(topic_path, data, **attributes)`: a future of the message id."""
        name = topic.rsplit("/", 1)[-1]
        future: Future[str] = Future()

        def perform() -> str:
            if name in self.refusing:
                from google.api_core import exceptions

                self.refused.append((name, self.clock()))
                refusal = exceptions.NotFound if len(name) % 2 else exceptions.PermissionDenied
                raise refusal(f"topic {topic} refuses publishes")
            return self.accept(name, data, {k: str(v) for k, v in attributes.items()})

        try:
            future.set_result(self.io("pubsub", "publish", perform))
        except Exception as exc:  # noqa: BLE001 - the future carries it, as the client's does
            future.set_exception(exc)
        return future

    def accept(self, topic: str, data: bytes, attributes: dict[str, str], *, delay: float = 0.0) -> str:
        message = Published(topic, data, attributes, str(self._ids), self.clock())
        self._ids += 1
        self.topics.setdefault(topic, []).append(message)
        self.observe(message)
        for sub in self.subs:
            if sub.topic == topic and (sub.task is None or attributes.get("task") == sub.task):
                self.pending.append(Delivery(sub.name, sub.function, message, self.clock() + timedelta(seconds=delay)))
        return message.message_id

    def deliverable(self) -> list[Delivery]:
        now = self.clock()
        return [d for d in self.pending if d.not_before <= now]

    def next_due(self) -> datetime | None:
        return min((d.not_before for d in self.pending), default=None)

    def take(self, delivery: Delivery, *, again_meanwhile: bool = False) -> None:
        """A push starts: the delivery is in flight until `settle`. `again_meanwhile`: its ack
        deadline passes while the handler still runs, so Pub/Sub pushes a copy to another instance
        at once (at-least-once allows it; two instances then handle one message concurrently)."""
        self.pending.remove(delivery)
        if again_meanwhile:
            self.pending.append(
                Delivery(delivery.subscription, delivery.function, delivery.message, self.clock(), delivery.attempts)
            )

    def settle(self, delivery: Delivery, acked: bool, duplicate: bool) -> None:
        """After a push (taken before): acknowledged (maybe delivered again anyway) or failed
        (backoff, then the dead-letter topic)."""
        if acked:
            if duplicate:
                delivery.not_before = self.clock() + timedelta(seconds=self.rng.choice((0, 1, 30, 600)))
                self.pending.append(delivery)
            return
        delivery.attempts += 1
        if delivery.attempts >= MAX_DELIVERY_ATTEMPTS:
            message = delivery.message
            self.accept(
                DEAD_LETTER_TOPIC,
                message.data,
                {
                    **message.attributes,
                    "CloudPubSubDeadLetterSourceDeliveryCount": str(delivery.attempts),
                    "CloudPubSubDeadLetterSourceSubscription": delivery.subscription,
                    "CloudPubSubDeadLetterSourceTopicPublishTime": iso(message.publish_time, timespec="microseconds"),
                },
            )
            return
        backoff = min(MAX_BACKOFF_SECONDS, MIN_BACKOFF_SECONDS * 2 ** (delivery.attempts - 1))
        delivery.not_before = self.clock() + timedelta(seconds=backoff)
        self.pending.append(delivery)

    def on(self, topic: str) -> list[Published]:
        return self.topics.get(topic, [])
