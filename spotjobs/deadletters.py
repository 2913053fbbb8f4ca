"""Dead-lettered messages: list them, say why they failed where known, and redrive them exactly once.

A function that fails a message `max_delivery_attempts` times (shared/topology.json) has Pub/Sub
forward it to the `dead-letter` topic, read through the `dead-letter-reader` pull subscription.
The forwarded copy has a new message id, the original data and attributes, and attributes Pub/Sub
adds (https://cloud.google.com/pubsub/docs/handling-failures, "Track delivery attempts" and
"Dead-letter topics"; the emulator adds the same):

- `CloudPubSubDeadLetterSourceSubscription`: the subscription that gave up (its id; a full path is
  accepted too), hence the function and the topic to send it back to;
- `CloudPubSubDeadLetterSourceSubscriptionProject`;
- `CloudPubSubDeadLetterSourceDeliveryCount`: deliveries attempted;
- `CloudPubSubDeadLetterSourceTopicPublishTime`: when the original was published.

**Why it failed.** Every failed delivery is one log line (`shared/delivery.py`: `event=retry` or
`permanent_failure`, with `error`, `message_id` and `publish_time`). The original message id is
lost in the forwarding, so a dead letter is matched to its lines by function and original publish
time. Locally the lines are the stack's function logs (`SPOTJOBS_LOCAL_LOGS`, which `spotjobs
local up` exports); in the cloud they are in Cloud Logging, read with this filter (also what to
paste into the Logs Explorer):

    resource.type="cloud_run_revision"
    resource.labels.service_name="<function's service>"
    jsonPayload.event=("retry" OR "permanent_failure")
    jsonPayload.publish_time="<CloudPubSubDeadLetterSourceTopicPublishTime>"

**A redriven message is the message it was.** Pub/Sub gives the forwarded copy a new message id,
and the redrive a new publish time; a bare body's request id and a watched message's trigger
member are named by when it was first published. So the redrive adds
`spotjobs_original_publish_time` (from `CloudPubSubDeadLetterSourceTopicPublishTime`, else the
dead letter's own publish time; a second redrive keeps the first), which submit_job and on_trigger
read in place of the publish time. A watched topic's message goes back through on_trigger's own
topic with `spotjobs_source_topic` naming the topic (sent to the watched topic, its other
subscribers would get it twice).

**Redrive, exactly once per id.** Before publishing a dead letter back to its source topic its id is
claimed in the state bucket: `deadletters/redriven/<dead letter id>.json`, written with
`if_generation_match=0` (the ledger's claim pattern, docs/ARCHITECTURE.md). Only the writer of the
claim publishes; anyone else finds the id redriven and does not send it again. The claim records
the new message id once the publish is confirmed, and the dead letter is then acknowledged. A
publish that fails releases the claim (so a later redrive can send it); only a crash between the
publish and its confirmation leaves a claim without a message id, which is reported, not resent.

Over 450 lines and one thing: a dead letter's round trip (pull, why it failed, redrive under its
claim, acknowledge) reads and writes one `DeadLetter` and one claim; the CLI's `dead-letters`
commands are its callers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.clock import now_iso, parse_rfc3339
from shared.requests.envelope import ORIGINAL_PUBLISH_TIME_ATTRIBUTE
from shared.topology import TOPOLOGY
from shared.triggers.definition import SOURCE_TOPIC_ATTRIBUTE

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

READER_SUBSCRIPTION = "dead-letter-reader"
WATCHED_SUBSCRIPTION_PREFIX = "on-trigger-"
REDRIVEN_PREFIX = "deadletters/redriven/"
ATTRIBUTE_PREFIX = "CloudPubSubDeadLetter"
SOURCE_SUBSCRIPTION = "CloudPubSubDeadLetterSourceSubscription"
SOURCE_PROJECT = "CloudPubSubDeadLetterSourceSubscriptionProject"
DELIVERY_COUNT = "CloudPubSubDeadLetterSourceDeliveryCount"
SOURCE_PUBLISH_TIME = "CloudPubSubDeadLetterSourceTopicPublishTime"
FAILURE_EVENTS = ("retry", "permanent_failure")
REDRIVE_PUBLISH_TIMEOUT_SECONDS = 60.0


@dataclass
class DeadLetter:
    """One message on the dead-letter subscription."""

    id: str  # its message id on the dead-letter topic: what `redrive --id` names
    data: bytes
    attributes: dict[str, str]
    publish_time: str | None  # when it was dead-lettered
    ack_id: str = field(default="", repr=False)
    # Filled in by `attach_failures`: the failed deliveries' errors, oldest first.
    failures: list[dict[str, Any]] = field(default_factory=list)
    reason_source: str | None = None  # where the reasons came from ("local logs", "Cloud Logging")

    @property
    def source_subscription(self) -> str | None:
        value = self.attributes.get(SOURCE_SUBSCRIPTION)
        return value.rsplit("/", 1)[-1] if value else None

    @property
    def function(self) -> str | None:
        """The function whose trigger subscription gave up on it."""
        return function_for_subscription(self.source_subscription)

    @property
    def watched_topic(self) -> str | None:
        """The watched topic of a `pubsub` trigger whose subscription (`on-trigger-<topic>`,
        terraform/triggers.tf) gave up on it; None for the functions' own subscriptions."""
        subscription = self.source_subscription or ""
        if self.function is not None or not subscription.startswith(WATCHED_SUBSCRIPTION_PREFIX):
            return None
        return subscription[len(WATCHED_SUBSCRIPTION_PREFIX) :] or None

    @property
    def source_topic_key(self) -> str | None:
        """Where a redrive sends it: its function's topic; a watched topic's message goes through
        on_trigger's own topic (its other subscribers must not get it twice)."""
        function = self.function or ("on_trigger" if self.watched_topic else None)
        return TOPOLOGY.functions[function]["topic"] if function else None

    @property
    def delivery_count(self) -> int | None:
        try:
            return int(self.attributes[DELIVERY_COUNT])
        except (KeyError, ValueError):
            return None

    @property
    def original_publish_time(self) -> str | None:
        return self.attributes.get(SOURCE_PUBLISH_TIME)

    @property
    def original_attributes(self) -> dict[str, str]:
        """The attributes its publisher set (Pub/Sub's CloudPubSubDeadLetter* left out)."""
        return {k: v for k, v in self.attributes.items() if not k.startswith(ATTRIBUTE_PREFIX)}

    @property
    def redrive_attributes(self) -> dict[str, str]:
        """What a redrive publishes with: its publisher's attributes, the time it was first
        published (so the functions name it as they named the original: its identity survives
        the redrive) and, for a watched topic's message, that topic."""
        attributes = self.original_attributes
        first = attributes.get(ORIGINAL_PUBLISH_TIME_ATTRIBUTE) or self.original_publish_time or self.publish_time
        if first:
            attributes[ORIGINAL_PUBLISH_TIME_ATTRIBUTE] = first
        if self.watched_topic:
            attributes[SOURCE_TOPIC_ATTRIBUTE] = self.watched_topic
        return attributes

    @property
    def reason(self) -> str | None:
        return self.failures[-1]["error"] if self.failures else None

    def summary(self) -> str:
        """What the data is, in a few words (a request id, a task, or its start)."""
        try:
            body = json.loads(self.data)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return self.data[:60].decode(errors="replace")
        if isinstance(body, dict):
            for key in ("request_id", "task", "logName"):
                if isinstance(body.get(key), str):
                    return f"{key}={body[key]}"
        return self.data[:60].decode(errors="replace")

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source_subscription": self.source_subscription,
            "function": self.function,
            "source_topic": TOPOLOGY.topic_name(self.source_topic_key) if self.source_topic_key else None,
            "delivery_count": self.delivery_count,
            "original_publish_time": self.original_publish_time,
            "dead_lettered_at": self.publish_time,
            "reason": self.reason,
            "failures": self.failures,
            "reason_source": self.reason_source,
            "attributes": self.original_attributes,
            "summary": self.summary(),
            "data": self.data.decode(errors="replace"),
        }


def function_for_subscription(subscription: str | None) -> str | None:
    for name, wiring in TOPOLOGY.functions.items():
        if subscription and wiring["subscription"] == subscription:
            return name
    return None


# Reading the subscription.


# A pull without return_immediately "may wait (for a bounded amount of time) until at least one
# message is available" (PullRequest, google.pubsub.v1): one that waited this long and came back
# empty means the backlog is read. A backlog is answered well within it.
PULL_WAIT_SECONDS = 5.0


def pull_batch(subscriber: Any, subscription_path: str) -> list[Any]:
    """One pull's received messages; none when it waited PULL_WAIT_SECONDS for nothing."""
    from google.api_core.exceptions import DeadlineExceeded

    try:
        response = subscriber.pull(
            request={"subscription": subscription_path, "max_messages": 100}, timeout=PULL_WAIT_SECONDS
        )
    except DeadlineExceeded:
        return []
    return list(response.received_messages)


def pull_all(subscriber: Any, subscription_path: str, *, max_messages: int = 1000) -> list[DeadLetter]:
    """Every message on the subscription now, held (not acknowledged) until `release` or `ack`.

    Pulls until a pull comes back empty; each message stays leased for the subscription's ack
    deadline, so the caller must finish within it (60 s) or release what it does not ack."""
    found: dict[str, DeadLetter] = {}
    while len(found) < max_messages:
        received = pull_batch(subscriber, subscription_path)
        if not received:
            break
        for item in received:
            message = item.message
            if message.message_id in found:  # a redelivery of one we hold: keep the newest lease
                found[message.message_id].ack_id = item.ack_id
                continue
            publish_time = message.publish_time
            found[message.message_id] = DeadLetter(
                id=message.message_id,
                data=bytes(message.data),
                attributes=dict(message.attributes),
                publish_time=publish_time.isoformat() if publish_time else None,
                ack_id=item.ack_id,
            )
    return sorted(found.values(), key=lambda d: (d.publish_time or "", d.id))


def release(subscriber: Any, subscription_path: str, letters: Iterable[DeadLetter]) -> None:
    """Give the messages back at once (ack deadline 0), for the next reader."""
    ack_ids = [letter.ack_id for letter in letters if letter.ack_id]
    for chunk in _chunks(ack_ids, 1000):
        subscriber.modify_ack_deadline(
            request={"subscription": subscription_path, "ack_ids": chunk, "ack_deadline_seconds": 0}
        )


def acknowledge(subscriber: Any, subscription_path: str, letters: Iterable[DeadLetter]) -> None:
    ack_ids = [letter.ack_id for letter in letters if letter.ack_id]
    for chunk in _chunks(ack_ids, 1000):
        subscriber.acknowledge(request={"subscription": subscription_path, "ack_ids": chunk})


def _chunks(items: Sequence[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


# Why they failed.


def attach_failures(letters: Sequence[DeadLetter], lines: Iterable[Mapping[str, Any]], source: str) -> None:
    """Attach to each letter the failure lines of its function for its original publish time."""
    by_key: dict[tuple[str, datetime], list[dict[str, Any]]] = {}
    for line in lines:
        if line.get("event") not in FAILURE_EVENTS:
            continue
        moment = parse_rfc3339(line.get("publish_time"))
        function = line.get("function")
        if moment is None or not isinstance(function, str):
            continue
        by_key.setdefault((function, moment), []).append(
            {
                "time": line.get("time"),
                "event": line.get("event"),
                "error": line.get("error"),
                "message_id": line.get("message_id"),
            }
        )
    for letter in letters:
        moment = parse_rfc3339(letter.original_publish_time)
        if letter.function is None or moment is None:
            continue
        failures = by_key.get((letter.function, moment))
        if failures:
            letter.failures = sorted(failures, key=lambda f: str(f.get("time")))
            letter.reason_source = source


def local_log_lines(logs_dir: Path) -> list[dict[str, Any]]:
    """The functions' structured log lines in the embedded stack's log folder."""
    lines: list[dict[str, Any]] = []
    for name in TOPOLOGY.functions:
        path = logs_dir / f"{name}.log"
        if not path.exists():
            continue
        for raw in path.read_text(errors="replace").splitlines():
            if raw.startswith("{"):
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(line, dict):
                    line.setdefault("function", name)
                    lines.append(line)
    return lines


def cloud_logging_filter(letter: DeadLetter, service_name: str | None = None) -> str:
    """The Cloud Logging filter that finds a dead letter's failed deliveries."""
    parts = ['resource.type="cloud_run_revision"']
    if service_name:
        parts.append(f'resource.labels.service_name="{service_name}"')
    parts.append('jsonPayload.event=("retry" OR "permanent_failure")')
    parts.append(f'jsonPayload.publish_time="{_log_time(letter.original_publish_time)}"')
    return "\n".join(parts)


def _log_time(value: str | None) -> str:
    """The publish time as shared/delivery.py logs it (microseconds, Z)."""
    from shared.clock import iso

    moment = parse_rfc3339(value)
    return iso(moment, timespec="microseconds") if moment else str(value)


def cloud_log_lines(
    project: str, letters: Sequence[DeadLetter], *, session: Any = None, max_letters: int = 50
) -> list[dict[str, Any]]:
    """The failure lines of (at most `max_letters`) dead letters, read from Cloud Logging's
    entries.list with Application Default Credentials; [] when it cannot be read."""
    if session is None:
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/logging.read"])
        session = AuthorizedSession(credentials)
    lines: list[dict[str, Any]] = []
    for letter in letters[:max_letters]:
        if letter.original_publish_time is None:
            continue
        response = session.post(
            "https://logging.googleapis.com/v2/entries:list",
            json={
                "resourceNames": [f"projects/{project}"],
                "filter": cloud_logging_filter(letter),
                "orderBy": "timestamp asc",
                "pageSize": 100,
            },
            timeout=30,
        )
        if response.status_code != 200:
            return lines
        for entry in response.json().get("entries", []):
            payload = dict(entry.get("jsonPayload") or {})
            payload.setdefault("time", entry.get("timestamp"))
            payload.setdefault("function", letter.function)
            lines.append(payload)
    return lines


# Redriving.


@dataclass
class RedriveResult:
    id: str
    outcome: str  # "redriven", "would redrive", "already redriven", "skipped", "failed"
    detail: str = ""
    topic: str | None = None
    message_id: str | None = None  # of the republished message

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class RedriveClaims:
    """`deadletters/redriven/<id>.json` in the state bucket: one claim per dead letter id."""

    def __init__(self, bucket: Bucket) -> None:
        self._bucket = bucket

    def claim(self, letter: DeadLetter, topic: str) -> int | None:
        """The claim's generation if this call claimed `letter`; None if it was claimed before."""
        from google.api_core.exceptions import PreconditionFailed

        blob = self._bucket.blob(f"{REDRIVEN_PREFIX}{letter.id}.json")
        record = {"id": letter.id, "topic": topic, "claimed_at": now_iso(), "message_id": None}
        try:
            blob.upload_from_string(json.dumps(record), content_type="application/json", if_generation_match=0)
        except PreconditionFailed:
            return None
        return int(blob.generation)

    def confirm(self, letter: DeadLetter, generation: int, topic: str, message_id: str) -> None:
        blob = self._bucket.blob(f"{REDRIVEN_PREFIX}{letter.id}.json")
        record = {
            "id": letter.id,
            "topic": topic,
            "message_id": message_id,
            "redriven_at": now_iso(),
        }
        blob.upload_from_string(json.dumps(record), content_type="application/json", if_generation_match=generation)

    def release(self, letter: DeadLetter, generation: int) -> None:
        self._bucket.blob(f"{REDRIVEN_PREFIX}{letter.id}.json").delete(if_generation_match=generation)

    def get(self, letter_id: str) -> dict[str, Any] | None:
        from google.api_core.exceptions import NotFound

        try:
            raw = self._bucket.blob(f"{REDRIVEN_PREFIX}{letter_id}.json").download_as_bytes()
        except NotFound:
            return None
        return json.loads(raw)


def redrive(
    letters: Sequence[DeadLetter],
    *,
    claims: RedriveClaims,
    publish: Callable[[str, bytes, dict[str, str]], str],
    topic_path: Callable[[str], str],
    dry_run: bool = False,
) -> tuple[list[RedriveResult], list[DeadLetter]]:
    """Republish each letter to its source topic once; returns the results and the letters to
    acknowledge (redriven now, or found redriven before)."""
    results: list[RedriveResult] = []
    done: list[DeadLetter] = []
    for letter in letters:
        key = letter.source_topic_key
        if key is None:
            results.append(
                RedriveResult(
                    letter.id,
                    "skipped",
                    f"source subscription {letter.source_subscription!r} is not a spotjobs trigger",
                )
            )
            continue
        topic = topic_path(key)
        previous = claims.get(letter.id)
        if previous is not None:
            detail = (
                f"redriven before as message {previous['message_id']}"
                if previous.get("message_id")
                else "claimed before, publish not confirmed: check the topic before resending by hand"
            )
            results.append(RedriveResult(letter.id, "already redriven", detail, topic, previous.get("message_id")))
            if previous.get("message_id"):
                done.append(letter)
            continue
        if dry_run:
            results.append(RedriveResult(letter.id, "would redrive", "", topic))
            continue
        generation = claims.claim(letter, topic)
        if generation is None:  # a concurrent redrive claimed it between our read and our write
            results.append(RedriveResult(letter.id, "already redriven", "claimed concurrently", topic))
            continue
        try:
            message_id = publish(topic, letter.data, letter.redrive_attributes)
        except Exception as exc:  # noqa: BLE001 - reported per letter; the claim is released
            claims.release(letter, generation)
            results.append(RedriveResult(letter.id, "failed", f"{type(exc).__name__}: {exc}", topic))
            continue
        claims.confirm(letter, generation, topic, message_id)
        results.append(RedriveResult(letter.id, "redriven", "", topic, message_id))
        done.append(letter)
    return results, done


def publisher_function(publisher: Any) -> Callable[[str, bytes, dict[str, str]], str]:
    def publish(topic: str, data: bytes, attributes: dict[str, str]) -> str:
        return publisher.publish(topic, data, **attributes).result(timeout=REDRIVE_PUBLISH_TIMEOUT_SECONDS)

    return publish
