"""Dead letters: which function and topic they came from, and why they failed (matched to the
functions' failure lines by the original publish time, as the forwarded copy has a new id)."""

from __future__ import annotations

from typing import Any

from spotjobs.deadletters import DeadLetter, attach_failures, cloud_log_lines, cloud_logging_filter


def letter(**attributes: str) -> DeadLetter:
    return DeadLetter(id="77", data=b'{"request_id": "r-1"}', attributes=attributes, publish_time=None)


def test_source_function_topic_and_attributes() -> None:
    dead = letter(
        CloudPubSubDeadLetterSourceSubscription="projects/p/subscriptions/on-job-event-push",
        CloudPubSubDeadLetterSourceDeliveryCount="5",
        team="vision",
    )
    assert dead.source_subscription == "on-job-event-push" and dead.function == "on_job_event"
    assert dead.source_topic_key == "job_events" and dead.delivery_count == 5
    assert dead.original_attributes == {"team": "vision"} and dead.summary() == "request_id=r-1"
    assert letter(CloudPubSubDeadLetterSourceSubscription="someone-elses").function is None


def test_a_redrive_carries_the_first_publish_time_so_the_message_keeps_its_identity() -> None:
    dead = letter(
        CloudPubSubDeadLetterSourceSubscription="submit-job-push",
        CloudPubSubDeadLetterSourceTopicPublishTime="2026-11-30T20:43:04.935Z",
        team="vision",
    )
    assert dead.redrive_attributes == {"team": "vision", "spotjobs_original_publish_time": "2026-11-30T20:43:04.935Z"}
    # Redriven twice (it dead-lettered again): the first publish time is kept.
    again = letter(
        CloudPubSubDeadLetterSourceSubscription="submit-job-push",
        CloudPubSubDeadLetterSourceTopicPublishTime="2026-11-30T22:00:00Z",
        spotjobs_original_publish_time="2026-11-30T20:43:04.935Z",
    )
    assert again.redrive_attributes["spotjobs_original_publish_time"] == "2026-11-30T20:43:04.935Z"
    # Without Pub/Sub's attribute, the dead letter's own publish time.
    bare = DeadLetter(id="78", data=b"{}", attributes={}, publish_time="2026-11-30T21:00:00+00:00")
    assert bare.redrive_attributes == {"spotjobs_original_publish_time": "2026-11-30T21:00:00+00:00"}


def test_a_watched_topics_message_is_redriven_through_on_triggers_own_topic() -> None:
    dead = letter(CloudPubSubDeadLetterSourceSubscription="projects/p/subscriptions/on-trigger-model-drift")
    assert dead.watched_topic == "model-drift" and dead.source_topic_key == "triggers"
    assert dead.redrive_attributes["spotjobs_source_topic"] == "model-drift"
    own = letter(CloudPubSubDeadLetterSourceSubscription="on-trigger-push")
    assert own.watched_topic is None and own.function == "on_trigger"
    assert "spotjobs_source_topic" not in own.redrive_attributes


def test_reasons_are_the_failure_lines_of_its_function_for_its_publish_time() -> None:
    dead = letter(
        CloudPubSubDeadLetterSourceSubscription="submit-job-push",
        CloudPubSubDeadLetterSourceTopicPublishTime="2026-11-30T20:43:04.935Z",
    )
    lines: list[dict[str, Any]] = [
        {
            "function": "submit_job",
            "event": "retry",
            "publish_time": "2026-11-30T20:43:04.935000Z",
            "time": "t2",
            "error": "ClaimInProgress: later",
            "message_id": "1",
        },
        {
            "function": "submit_job",
            "event": "retry",
            "publish_time": "2026-11-30T20:43:04.935000Z",
            "time": "t1",
            "error": "ConnectionError: refused",
            "message_id": "1",
        },
        {
            "function": "reconcile",
            "event": "retry",
            "publish_time": "2026-11-30T20:43:04.935000Z",
            "time": "t0",
            "error": "another function's message",
        },
        {"function": "submit_job", "event": "retry", "publish_time": "2026-11-30T20:43:05Z", "error": "other"},
        {"function": "submit_job", "event": "submitted", "publish_time": "2026-11-30T20:43:04.935Z"},
    ]
    attach_failures([dead], lines, "local logs")
    assert [f["error"] for f in dead.failures] == ["ConnectionError: refused", "ClaimInProgress: later"]
    assert dead.reason == "ClaimInProgress: later" and dead.reason_source == "local logs"


def test_in_the_cloud_the_lines_come_from_cloud_logging() -> None:
    dead = letter(
        CloudPubSubDeadLetterSourceSubscription="submit-job-push",
        CloudPubSubDeadLetterSourceTopicPublishTime="2026-11-30T20:43:04.935Z",
    )
    assert 'jsonPayload.publish_time="2026-11-30T20:43:04.935000Z"' in cloud_logging_filter(dead)
    requests: list[dict[str, Any]] = []

    class Response:
        status_code = 200

        def json(self) -> dict[str, Any]:
            return {
                "entries": [
                    {
                        "timestamp": "t1",
                        "jsonPayload": {
                            "event": "retry",
                            "error": "ServiceUnavailable: 503",
                            "publish_time": "2026-11-30T20:43:04.935000Z",
                            "function": "submit_job",
                        },
                    }
                ]
            }

    class Session:
        def post(self, url: str, json: dict[str, Any], timeout: float) -> Response:
            requests.append({"url": url, **json})
            return Response()

    lines = cloud_log_lines("proj", [dead], session=Session())
    assert requests[0]["url"] == "https://logging.googleapis.com/v2/entries:list"
    assert requests[0]["resourceNames"] == ["projects/proj"]
    attach_failures([dead], lines, "Cloud Logging")
    assert dead.reason == "ServiceUnavailable: 503"


class ScriptedSubscriber:
    """Answers each pull with the next scripted batch; an exception in the script is raised."""

    def __init__(self, *answers: list[tuple[str, str]] | Exception) -> None:
        self.answers = list(answers)
        self.timeouts: list[float] = []

    def pull(self, request: dict[str, Any], timeout: float) -> Any:
        from types import SimpleNamespace

        self.timeouts.append(timeout)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        received = [
            SimpleNamespace(
                ack_id=ack,
                message=SimpleNamespace(message_id=mid, data=b"{}", attributes={}, publish_time=None),
            )
            for mid, ack in answer
        ]
        return SimpleNamespace(received_messages=received)


def test_reading_stops_at_the_first_pull_that_waited_for_nothing() -> None:
    from google.api_core.exceptions import DeadlineExceeded

    from spotjobs.deadletters import PULL_WAIT_SECONDS, pull_all

    # Two batches (the second redelivers "1" with a new lease), then a pull that times out.
    subscriber = ScriptedSubscriber([("1", "a"), ("2", "b")], [("1", "c"), ("3", "d")], DeadlineExceeded("idle"), [])
    letters = pull_all(subscriber, "projects/p/subscriptions/dead-letter-reader")
    assert [(d.id, d.ack_id) for d in letters] == [("1", "c"), ("2", "b"), ("3", "d")]
    assert len(subscriber.answers) == 1  # no second empty pull: the wait already said it is empty
    assert subscriber.timeouts == [PULL_WAIT_SECONDS] * 3
    # An empty answer (the server's own bounded wait) ends the read the same way.
    assert pull_all(ScriptedSubscriber([]), "s") == []
