"""From a Pub/Sub push to a decision to acknowledge (return) or redeliver (raise).

Every function is an HTTP function fed by a push subscription, and its entry point is
`handle_push(request, handler, ...)`: the raw push body (`{"message": {...}, "subscription": ...}`)
is read here, not by functions-framework's CloudEvent conversion, because that conversion rejects
with 400 (before any of our code runs) a message without `data`, which Pub/Sub allows (attributes
only): `event_conversion._is_raw_pubsub_payload` requires `"data" in message`, and the body then
fails as a background event. A 400 is a nack, so such a message was retried and dead-lettered
instead of answered. Here it is a message whose data is empty, handled like any other.

`handle_delivery(body, handler, ...)`: decode the push body once into a `Message`, drop it if it
is older than the configured age (measured from the message's own publish time, which a push
always carries; none means no age), run the handler, and translate the
outcome with `is_retryable`: transient failures raise so Pub/Sub redelivers with backoff; anything
else is logged at ERROR and acknowledged, so a poison message cannot loop forever.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.clock import iso, parse_rfc3339, utcnow
from shared.errors import is_retryable
from shared.log import Logger, logger


@dataclass(frozen=True)
class Message:
    """The Pub/Sub message of a push body."""

    data: bytes
    message_id: str
    attributes: Mapping[str, str] = field(default_factory=dict)
    publish_time: datetime | None = None

    def age_seconds(self, now: datetime | None = None) -> float | None:
        if self.publish_time is None:
            return None
        now = now or utcnow()
        return (now - self.publish_time).total_seconds()


class UndecodableMessage(ValueError):
    """The push body is not a Pub/Sub message at all."""


def is_push_body(body: Any) -> bool:
    """Whether `body` is the JSON a Pub/Sub push subscription sends: a `message` object (its
    `data` may be absent: a message with attributes only)."""
    return isinstance(body, Mapping) and isinstance(body.get("message"), Mapping)


def message_from_push(body: Any) -> Message:
    """Decode a push body (`{"message": {"data"?, "attributes"?, "messageId", "publishTime"},
    "subscription": ...}`) into a Message; absent data is empty data."""
    if not is_push_body(body):
        raise UndecodableMessage("the body carries no Pub/Sub message")
    raw = body["message"]
    try:
        payload = base64.b64decode(raw.get("data") or "", validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise UndecodableMessage("message data is not base64") from None
    attributes = raw.get("attributes") or {}
    if not isinstance(attributes, Mapping):
        attributes = {}
    message_id = str(raw.get("messageId") or raw.get("message_id") or "")
    publish_time = parse_rfc3339(raw.get("publishTime") or raw.get("publish_time"))
    return Message(payload, message_id, dict(attributes), publish_time)


def maintenance_message(data: bytes) -> dict[str, Any]:
    """The JSON object of a `maintenance` message (`{"task": "reconcile"}`, `{"task": "prune",
    "request_id": ...}`); {} for anything else. reconcile and prune share the topic and each
    ignores the tasks that are not its own."""
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    return body if isinstance(body, dict) else {}


def maintenance_task(data: bytes) -> str | None:
    """The `task` of a maintenance message, or None if it has none."""
    task = maintenance_message(data).get("task")
    return task if isinstance(task, str) else None


Handler = Callable[[Message, Logger], None]


def handle_delivery(
    body: Any,
    handler: Handler,
    *,
    function: str,
    max_age_seconds: float,
    log: Logger = logger,
) -> None:
    """Run `handler` for one push body. Returns to acknowledge; raises to have it redelivered."""
    log = log.bind(function=function)
    try:
        message = message_from_push(body)
    except UndecodableMessage as exc:
        log.error("dropped an undecodable delivery", event="undecodable", reason=str(exc))
        return
    log = log.bind(event_id=message.message_id, message_id=message.message_id)
    age = message.age_seconds()
    if age is not None and age > max_age_seconds:
        log.warning(
            "dropped a message older than the maximum event age",
            event="stale_message",
            age_seconds=round(age, 1),
            max_age_seconds=max_age_seconds,
        )
        return
    try:
        handler(message, log)
    except Exception as exc:
        # A dead-lettered copy gets a new message id but keeps the original publish time
        # (attribute CloudPubSubDeadLetterSourceTopicPublishTime): logging it on each failure lets
        # `spotjobs dead-letters` say why a dead-lettered message failed.
        if message.publish_time is not None:
            log = log.bind(publish_time=iso(message.publish_time, timespec="microseconds"))
        if is_retryable(exc):
            log.warning(
                "transient failure; the message will be redelivered",
                event="retry",
                error=f"{type(exc).__name__}: {exc}",
            )
            raise
        log.error(
            "permanent failure; the message is acknowledged",
            event="permanent_failure",
            error=f"{type(exc).__name__}: {exc}",
        )


def handle_push(
    request: Any,
    handler: Handler,
    *,
    function: str,
    max_age_seconds: float,
    log: Logger = logger,
) -> tuple[str, int]:
    """The HTTP entry point's body: `request` is the push request (anything with `get_data()`,
    functions-framework hands a flask.Request). Returns the response (2xx acknowledges); raises to
    have the message redelivered (functions-framework answers 500).

    A body that is not a Pub/Sub push at all cannot come from the subscription: 400, logged."""
    try:
        body = json.loads(request.get_data() or b"null")
    except (ValueError, UnicodeDecodeError, RecursionError):
        body = None
    if not is_push_body(body):
        log.bind(function=function).error(
            "refused a request that is not a Pub/Sub push", event="undecodable", reason="not a push body"
        )
        return "not a Pub/Sub push body", 400
    handle_delivery(body, handler, function=function, max_age_seconds=max_age_seconds, log=log)
    return "", 204
