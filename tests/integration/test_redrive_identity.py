"""A redriven message is the message it was, on the real stack: a bare body and an envelope whose
deliveries all failed dead-letter, their jobs are then created (reconcile re-publishes the claims),
and `spotjobs dead-letters redrive --all` adds no job; a watched topic's message dead-lettered
while on_trigger was down is recorded once when redriven (and again).

A stack of its own: `dead-letters` acknowledges what it reads on the stack's pull subscription,
and on_trigger is stopped here (no supervisor), which the session stack's tests must not see.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.processes import REPO_ROOT
from devstack.samples import custom_job, job_request
from shared.requests.request_ids import content_digest
from tests.conftest import TEST_FUNCTION_ENV, isolated_stack
from tests.support.stack_triggers import apply, definition, jobs_for

pytestmark = pytest.mark.stack

TIMEOUT = 120.0


@pytest.fixture(scope="module")
def redrive_stack() -> Iterator[Any]:
    # Pacing off: two requests published in one pacing slot put the second in the line, which,
    # while Vertex is down, holds it (acknowledged) or dead-letters it depending on the machine's
    # timing. Every delivery here must fail, as the test says; the line has tests of its own.
    with isolated_stack(
        functions=("submit_job", "reconcile", "on_trigger"),
        max_delivery_attempts=5,
        supervise_functions=False,
        function_env={**TEST_FUNCTION_ENV, "SPOTJOBS_VERTEX_CREATES_PER_MINUTE": "0"},
    ) as stack:
        # One request to a job first: a delivery later than the 5 s claim lease asks Vertex for
        # the request's jobs before claiming (shared/redeliveries.py), so a first delivery slowed
        # by submit_job's cold start on a loaded machine would claim nothing while Vertex is down.
        warm = f"warm-{uuid.uuid4().hex[:6]}"
        stack.publish("job_requests", job_request(warm, ["python", "-c", "pass"]))
        ledger = stack.ledger()
        stack.wait_for(lambda: (r := ledger.get(warm)) and r.latest and r.latest.job, TIMEOUT, "the warm-up job")
        yield stack


def spotjobs(stack: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spotjobs.cli", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **stack.env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def dead_letters(stack: Any) -> list[dict[str, Any]]:
    result = spotjobs(stack, "dead-letters", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def requests_named(stack: Any, prefix: str) -> list[str]:
    bucket = stack.settings.state_bucket
    return [b.name for b in stack.storage().list_blobs(bucket, prefix=f"requests/{prefix}")]


def publish_to(stack: Any, topic: str, data: bytes, **attributes: str) -> str:
    from google.cloud import pubsub_v1

    path = f"projects/{stack.options.project}/topics/{topic}"
    return pubsub_v1.PublisherClient().publish(path, data, **attributes).result(timeout=30)


def redrive_all(stack: Any) -> list[dict[str, Any]]:
    result = spotjobs(stack, "dead-letters", "redrive", "--all", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_a_redriven_bare_body_or_envelope_adds_no_job(redrive_stack: Any) -> None:
    stack = redrive_stack
    tag = uuid.uuid4().hex[:6]
    bare = custom_job(f"bare-{tag}", ["python", "-c", "pass"])
    envelope_id = f"env-{tag}"
    stack.stop_vertex()
    try:
        stack.publish("job_requests", json.dumps(bare).encode())  # no request id: named by content
        stack.publish("job_requests", job_request(envelope_id, ["python", "-c", "pass"]))
        stack.wait_for(lambda: len(dead_letters(stack)) == 2, TIMEOUT, "both dead-lettered")
    finally:
        stack.start_vertex_again()
    bare_prefix = f"req-{content_digest(bare)[:16]}-"
    (bare_record,) = requests_named(stack, bare_prefix)
    bare_id = bare_record.removeprefix("requests/").removesuffix(".json")

    # Reconcile re-publishes both claims, whose messages were dead-lettered: the jobs are created.
    def both_created() -> bool:
        stack.publish("maintenance", b'{"task": "reconcile"}', task="reconcile")
        ledger = stack.ledger()
        return all((r := ledger.get(rid)) and r.latest and r.latest.job for rid in (bare_id, envelope_id))

    stack.wait_for(both_created, TIMEOUT, "both jobs created by reconcile's re-publish")

    results = redrive_all(stack)
    assert sorted(r["outcome"] for r in results) == ["redriven", "redriven"]

    def both_seen_again() -> bool:
        duplicates = [line for line in stack.function_logs("submit_job") if line.get("event") == "duplicate"]
        return {bare_id, envelope_id} <= {line.get("request_id") for line in duplicates}

    stack.wait_for(both_seen_again, 60, "submit_job to handle both redriven messages")
    assert requests_named(stack, bare_prefix) == [bare_record]  # the same request, no second one
    assert len(jobs_for(stack, bare_id)) == 1 and len(jobs_for(stack, envelope_id)) == 1


def test_a_redriven_watched_message_is_recorded_once(redrive_stack: Any) -> None:
    stack = redrive_stack
    name = f"drift-{uuid.uuid4().hex[:6]}"
    topic = f"monitoring-{name}"
    stack.watch_topic(topic)
    apply(stack, definition(name, {"pubsub": {"topic": topic, "attributes": {"policy": "drift"}}}))
    members = f"triggers/{name}/windows/"

    stack.functions.kill("on_trigger")  # on_trigger down: every push of the message fails
    try:
        publish_to(stack, topic, b'{"incident": 1}', policy="drift")
        stack.wait_for(
            lambda: any(d["source_subscription"] == f"on-trigger-{topic}" for d in dead_letters(stack)),
            TIMEOUT,
            "the watched message dead-lettered",
        )
    finally:
        stack.functions.restart("on_trigger")

    (result,) = [r for r in redrive_all(stack) if r["outcome"] == "redriven"]
    assert result["topic"].endswith("/topics/" + stack.settings.triggers_topic.rsplit("/", 1)[-1])

    def recorded() -> list[str]:
        bucket = stack.settings.state_bucket
        return [b.name for b in stack.storage().list_blobs(bucket, prefix=members) if "/objects/" in b.name]

    (member,) = stack.wait_for(recorded, 60, "the redriven message recorded")
    metadata = stack.storage().bucket(stack.settings.state_bucket).get_blob(member).metadata
    assert metadata["topic"] == topic and json.loads(metadata["attributes"]) == {"policy": "drift"}

    # The same dead letter sent back by hand once more (a new message, a new id): still one member.
    original_publish_time = metadata["publish_time"]
    stack.publish(
        "triggers",
        b'{"incident": 1}',
        policy="drift",
        spotjobs_original_publish_time=original_publish_time,
        spotjobs_source_topic=topic,
    )
    stack.wait_for(
        lambda: sum(1 for line in stack.function_logs("on_trigger") if line.get("event") == "trigger_duplicate"),
        60,
        "the second copy seen as a duplicate",
    )
    assert recorded() == [member]
