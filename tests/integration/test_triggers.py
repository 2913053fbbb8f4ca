"""Retraining triggers on the embedded stack: fake-gcs-server's notifications of the data bucket,
on_trigger behind its push subscription, the tick, submit_job and the Vertex emulator."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from shared.triggers.render import manifest_uri
from tests.support.stack_triggers import apply, at_window_start, cli, definition, jobs_for, tick, trigger_requests

pytestmark = pytest.mark.stack


def fired(stack, name: str) -> list[dict]:
    return [
        line
        for line in stack.function_logs("on_trigger")
        if line.get("event") == "trigger_fired" and line.get("trigger") == name
    ]


def manifest(stack, request_id: str) -> dict:
    uri = manifest_uri(stack.settings, request_id)
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    return json.loads(stack.storage().bucket(bucket).blob(name).download_as_bytes())


def test_fifty_objects_in_one_window_make_one_request_and_one_job(stack) -> None:
    name = f"burst-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}/incoming/"
    apply(stack, definition(name, {"gcs": {"bucket": stack.options.data_bucket, "prefix": prefix}}))
    data = stack.storage().bucket(stack.options.data_bucket)

    at_window_start(20, room=14)
    for i in range(50):
        data.blob(f"{prefix}part-{i:03}.csv").upload_from_string(f"row {i}\n")
    data.blob(f"{name}/elsewhere/x.csv").upload_from_string("not watched")

    def recorded() -> bool:
        lines = [line for line in stack.function_logs("on_trigger") if line.get("trigger") == name]
        return (
            len(lines) >= 0
            and len(list(stack.storage().list_blobs(stack.settings.state_bucket, prefix=f"triggers/{name}/windows/")))
            >= 51
        )

    stack.wait_for(recorded, timeout=60, message="50 notifications recorded")
    time.sleep(max(0.0, 20 - time.time() % 20) + 1.5)  # the window ends, and settles
    tick(stack)
    (request_id,) = stack.wait_for(lambda: trigger_requests(stack, name), timeout=60, message="the request")
    listed = manifest(stack, request_id)
    assert listed["object_count"] == 50
    assert {o["name"] for o in listed["objects"]} == {f"{prefix}part-{i:03}.csv" for i in range(50)}
    record = stack.wait_for(
        lambda: (r := stack.ledger().get(request_id)) and r.latest and r.latest.job and r, timeout=60, message="the job"
    )
    assert len(jobs_for(stack, request_id)) == 1
    env = {
        e["name"]: e["value"]
        for e in record.request["custom_job"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["env"]
    }
    assert env["SPOTJOBS_MANIFEST_URI"] == manifest_uri(stack.settings, request_id)  # where no job may write

    # The object outside the prefix: one DEBUG line, nothing else.
    ignored = [
        l
        for l in stack.function_logs("on_trigger")
        if l.get("event") == "trigger_ignored" and l.get("object", "").endswith(f"{name}/elsewhere/x.csv")
    ]
    assert [l["severity"] for l in ignored] == ["DEBUG"]

    # Every notification redelivered (the same attributes and data), and ticks: nothing more.
    for i in range(50):
        blob = data.get_blob(f"{prefix}part-{i:03}.csv")
        stack.publish(
            "triggers",
            json.dumps(
                {
                    "kind": "storage#object",
                    "bucket": data.name,
                    "name": blob.name,
                    "generation": str(blob.generation),
                    "size": str(blob.size),
                }
            ).encode(),
            eventType="OBJECT_FINALIZE",
            bucketId=data.name,
            objectId=blob.name,
            objectGeneration=str(blob.generation),
            eventTime=blob.time_created.isoformat().replace("+00:00", "Z"),
            payloadFormat="JSON_API_V1",
        )
    stack.publish(
        "triggers",
        b"{}",
        eventType="OBJECT_FINALIZE",
        bucketId="unwatched-bucket",
        objectId=f"{prefix}y.csv",
        objectGeneration="1",
    )
    time.sleep(3)
    tick(stack)
    stack.wait_for(
        lambda: (
            len(
                [
                    l
                    for l in stack.function_logs("on_trigger")
                    if l.get("event") == "trigger_duplicate" and l.get("trigger") == name
                ]
            )
            >= 50
        ),
        timeout=60,
        message="the redeliveries",
    )
    time.sleep(2)
    assert trigger_requests(stack, name) == [request_id]
    assert len(fired(stack, name)) == 1
    assert len(jobs_for(stack, request_id)) == 1
    unwatched = [
        l
        for l in stack.function_logs("on_trigger")
        if l.get("event") == "trigger_ignored" and "unwatched-bucket" in l.get("object", "")
    ]
    assert [l["severity"] for l in unwatched] == ["DEBUG"]


def test_two_windows_make_two_requests(stack) -> None:
    name = f"two-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}/in/"
    apply(stack, definition(name, {"gcs": {"bucket": stack.options.data_bucket, "prefix": prefix}}, coalesce_seconds=5))
    data = stack.storage().bucket(stack.options.data_bucket)
    at_window_start(5, room=3)
    data.blob(f"{prefix}a.csv").upload_from_string("a")
    time.sleep(5)
    data.blob(f"{prefix}b.csv").upload_from_string("b")
    time.sleep(7)
    tick(stack)
    requests = stack.wait_for(
        lambda: len(r := trigger_requests(stack, name)) == 2 and r, timeout=60, message="two requests"
    )
    assert [manifest(stack, r)["object_count"] for r in requests] == [1, 1]


def test_a_pubsub_trigger_fires_only_on_matching_messages(stack) -> None:
    name = f"drift-{uuid.uuid4().hex[:6]}"
    topic = f"monitoring-{name}"
    stack.watch_topic(topic)
    apply(stack, definition(name, {"pubsub": {"topic": topic, "attributes": {"policy": "drift"}}}, coalesce_seconds=5))
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    path = f"projects/{stack.options.project}/topics/{topic}"
    publisher.publish(path, b'{"incident": "latency"}', policy="latency").result(timeout=30)
    stack.wait_for(
        lambda: [
            l
            for l in stack.function_logs("on_trigger")
            if l.get("event") == "trigger_ignored" and l.get("topic") == topic
        ],
        timeout=30,
        message="the ignored message",
    )
    time.sleep(6)
    tick(stack)
    time.sleep(3)
    assert trigger_requests(stack, name) == []
    publisher.publish(path, b'{"incident": "drift"}', policy="drift").result(timeout=30)
    stack.wait_for(
        lambda: list(stack.storage().list_blobs(stack.settings.state_bucket, prefix=f"triggers/{name}/open/")),
        timeout=30,
        message="the matching message recorded",
    )
    time.sleep(7)
    tick(stack)
    (request_id,) = stack.wait_for(lambda: trigger_requests(stack, name), timeout=60, message="the request")
    (entry,) = manifest(stack, request_id)["objects"]
    assert json.loads(entry["attributes"]) == {"policy": "drift"}


def test_apply_with_errors_exits_2_naming_every_violation_and_stores_nothing(stack) -> None:
    name = f"bad-{uuid.uuid4().hex[:6]}"
    bad = definition(name, {"gcs": {"bucket": "", "prefix": 1}}, coalesce_seconds=0, cooldown_seconds=-1)
    bad["request"]["custom_job"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] = "docker.io/x:1"
    good = definition(f"{name}-ok", {"gcs": {"bucket": stack.options.data_bucket, "prefix": "x/"}})
    good["request"]["custom_job"]["displayName"] = "{unknown}"
    result = cli(stack, "apply", "-", stdin=json.dumps([bad, good]))
    assert result.returncode == 2
    for path in (
        "source.gcs.bucket",
        "source.gcs.prefix",
        "coalesce_seconds",
        "cooldown_seconds",
        "request.custom_job.displayName",
    ):
        assert path in result.stderr, path
    listing = json.loads(cli(stack, "list", "--json").stdout)
    assert not [row for row in listing if row["name"].startswith(name)]
    # With the structural errors fixed, the request policy still speaks (the image).
    bad = definition(name, {"gcs": {"bucket": stack.options.data_bucket, "prefix": "x/"}})
    bad["request"]["custom_job"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] = "docker.io/x:1"
    result = cli(stack, "apply", "-", stdin=json.dumps(bad))
    assert result.returncode == 2 and "imageUri" in result.stderr


def test_triggers_test_shows_the_request_offline(stack) -> None:
    name = f"show-{uuid.uuid4().hex[:6]}"
    apply(stack, definition(name, {"gcs": {"bucket": "my-data", "prefix": "incoming/"}}))
    result = cli(
        stack, "test", name, "--object", "gs://my-data/incoming/a.csv", "--object", "gs://my-data/other/b.csv", "--json"
    )
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["objects"] == ["gs://my-data/incoming/a.csv"]
    assert shown["ignored_objects"] == ["gs://my-data/other/b.csv"]
    assert shown["request"]["request_id"] == f"trg-{name}-{shown['window_id']}"
    assert shown["would_publish"] is True
    assert not list(stack.storage().list_blobs(stack.settings.state_bucket, prefix=f"triggers/{name}/windows/"))
