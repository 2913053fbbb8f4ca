"""The stack's topics and subscriptions, from `shared/topology.json` (the file Terraform reads).

Each function gets a push subscription with the topology's retry and dead-letter settings, so
delivery behaves as in production: 2xx acks, anything else redelivers. Pushes pass through
`devstack.push_filter`, which applies subscription filters the emulator does not, and holds a
push while a crashed function restarts (as Cloud Run's front end does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

from devstack.push_filter import PushFilterRouter
from shared.topology import TOPOLOGY


def topic_path(project: str, key: str) -> str:
    return f"projects/{project}/topics/{TOPOLOGY.topic_name(key)}"


def subscription_path(project: str, name: str) -> str:
    return f"projects/{project}/subscriptions/{name}"


def create_topics(project: str) -> None:
    from google.api_core.exceptions import AlreadyExists
    from google.cloud import pubsub_v1
    from google.protobuf import duration_pb2

    publisher = pubsub_v1.PublisherClient()
    for key in TOPOLOGY.topic_keys:
        # The topic's own retention, as Terraform sets it: a subscription can be sought back in
        # time (a replay of job requests), acknowledged messages included.
        retention = TOPOLOGY.raw["topics"][key].get("message_retention_seconds")
        topic: dict[str, object] = {"name": topic_path(project, key)}
        if retention:
            topic["message_retention_duration"] = duration_pb2.Duration(seconds=int(retention))
        with contextlib.suppress(AlreadyExists):
            publisher.create_topic(request=topic)


def create_subscriptions(
    project: str,
    function_urls: Mapping[str, str],
    log_event: Callable[..., None],
    *,
    max_delivery_attempts: int | None = None,
) -> PushFilterRouter | None:
    """A push subscription per running function (through a push router, returned to be stopped
    with the stack), then the pull subscriptions. `max_delivery_attempts` overrides the topology's.

    No retry policy, unlike production (Terraform sets the topology's backoff): Google's emulator
    (cloud-pubsub-emulator 0.8.20) stops redelivering a push that keeps failing once a subscription
    has any retry policy. Measured here: with a retry policy (1-5 s, 1-1 s or 0-1 s alike), each
    failing message was pushed 3 or 4 times in its first 7 s and then not again for the next 90 s,
    ack deadline 60 s; without one, the emulator's push loop retries it every second until the
    dead-letter policy takes it. So a failed delivery here comes back after about a second, and a
    stack that must outlast a wait (a claim lease, a list lag) gives it more attempts."""
    from google.api_core.exceptions import AlreadyExists
    from google.cloud import pubsub_v1

    trigger = TOPOLOGY.trigger_subscription
    attempts = max_delivery_attempts or trigger["max_delivery_attempts"]
    subscriber = pubsub_v1.SubscriberClient()
    push_router: PushFilterRouter | None = None
    for name, wiring in TOPOLOGY.functions.items():
        if name not in function_urls:
            continue
        topic = topic_path(project, wiring["topic"])
        subscription_filter = wiring.get("filter") or ""
        # Pushes go through the stack's router (devstack/push_filter.py), which applies the
        # filter the emulator stores but may not apply (with an emulator that filters, both
        # agree) and, like Cloud Run's front end, holds a push while a crashed function restarts.
        if push_router is None:
            push_router = PushFilterRouter(log_event).start()
        # The topic in the path, as a Pub/Sub push to production's function URL may carry it.
        route = push_router.add(name, function_urls[name], subscription_filter)
        endpoint = f"{route}/{topic}"
        with contextlib.suppress(AlreadyExists):
            subscriber.create_subscription(
                request={
                    "name": subscription_path(project, wiring["subscription"]),
                    "topic": topic,
                    "filter": subscription_filter,
                    "push_config": {"push_endpoint": endpoint},
                    "ack_deadline_seconds": trigger["ack_deadline_seconds"],
                    "dead_letter_policy": {
                        "dead_letter_topic": topic_path(project, trigger["dead_letter_topic"]),
                        "max_delivery_attempts": attempts,
                    },
                }
            )
    for name, wiring in TOPOLOGY.pull_subscriptions.items():
        with contextlib.suppress(AlreadyExists):
            subscriber.create_subscription(
                request={
                    "name": subscription_path(project, name),
                    "topic": topic_path(project, wiring["topic"]),
                    "ack_deadline_seconds": wiring["ack_deadline_seconds"],
                }
            )
    return push_router


def watch_topic(project: str, topic: str, on_trigger_url: str, *, max_delivery_attempts: int | None = None) -> None:
    """A `pubsub` retraining trigger's topic: create it and push it to on_trigger (the endpoint
    path names the topic, and failures dead-letter, as Terraform's watched-topic subscriptions
    do: `on-trigger-<topic>`, the trigger subscriptions' dead-letter policy)."""
    from google.api_core.exceptions import AlreadyExists
    from google.cloud import pubsub_v1

    path = f"projects/{project}/topics/{topic}"
    with contextlib.suppress(AlreadyExists):
        pubsub_v1.PublisherClient().create_topic(name=path)
    with contextlib.suppress(AlreadyExists):
        pubsub_v1.SubscriberClient().create_subscription(
            request={
                "name": subscription_path(project, f"on-trigger-{topic}"),
                "topic": path,
                "push_config": {"push_endpoint": f"{on_trigger_url}/{path}"},
                "ack_deadline_seconds": TOPOLOGY.trigger_subscription["ack_deadline_seconds"],
                "dead_letter_policy": {
                    "dead_letter_topic": topic_path(project, TOPOLOGY.trigger_subscription["dead_letter_topic"]),
                    "max_delivery_attempts": max_delivery_attempts
                    or TOPOLOGY.trigger_subscription["max_delivery_attempts"],
                },
            }
        )
