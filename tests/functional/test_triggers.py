"""Retraining triggers against fake-gcs-server, with a controlled clock and an in-memory publisher:
windows, deduplication, coalescing, cooldown, min_objects, attribute matches, trigger_failed."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shared.alerts import Alert
from shared.delivery import Message
from shared.errors import Violation
from shared.ledger.store import LedgerStore
from shared.settings import Settings
from shared.triggers import runner
from shared.triggers.definition import parse_definition, read_definition
from shared.triggers.render import check_request_template
from shared.triggers.store import TriggerStore
from shared.wiring import Ports
from tests.support.decisions import CapturedLog, FakePublisher

BODY = json.loads((Path(__file__).parents[1] / "events" / "requests" / "bare_quick.json").read_text())
T0 = datetime(2026, 11, 29, 17, 0, 0, tzinfo=UTC)


def definition(name: str = "daily-data", **overrides: object) -> dict:
    doc = {
        "schema_version": 1,
        "name": name,
        "source": {"gcs": {"bucket": "data-in", "prefix": "incoming/"}},
        "coalesce_seconds": 300,
        "request": {
            "custom_job": {**json.loads(json.dumps(BODY)), "displayName": "retrain-{trigger}-{window_id}"},
            "max_attempts": 3,
        },
    }
    doc.update(overrides)
    return doc


@dataclass
class Rig:
    ports: Ports
    publisher: FakePublisher
    log: CapturedLog
    store: TriggerStore
    now: list[datetime] = field(default_factory=lambda: [T0])
    ids: list[int] = field(default_factory=lambda: [0])

    def at(self, moment: datetime) -> None:
        self.now[0] = moment

    def notify(
        self,
        name: str,
        *,
        bucket: str = "data-in",
        generation: int = 1,
        at: datetime | None = None,
        event_type: str = "OBJECT_FINALIZE",
    ) -> None:
        attributes = {
            "eventType": event_type,
            "bucketId": bucket,
            "objectId": name,
            "objectGeneration": str(generation),
            "eventTime": (at or self.now[0]).isoformat().replace("+00:00", "Z"),
            "payloadFormat": "JSON_API_V1",
        }
        data = json.dumps(
            {"kind": "storage#object", "bucket": bucket, "name": name, "generation": str(generation), "size": "10"}
        ).encode()
        self.deliver(Message(data, self._id(), attributes, at or self.now[0]), None)

    def deliver(self, message: Message, topic: str | None) -> None:
        runner.handle_message(self.ports, message, topic, self.log.logger)

    def tick(self) -> None:
        self.deliver(Message(b'{"task": "triggers"}', self._id(), {"task": "triggers"}, self.now[0]), None)

    def requests(self) -> list[dict]:
        return [m.data for m in self.publisher.on("job-requests")]

    def alerts(self) -> list[Alert]:
        return [Alert(**m.data) for m in self.publisher.on("ops-alerts")]

    def manifest(self, request: dict) -> dict:
        uri = next(
            e["value"]
            for e in request["custom_job"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["env"]
            if e["name"] == "SPOTJOBS_MANIFEST_URI"
        )
        bucket, _, name = uri.removeprefix("gs://").partition("/")
        return json.loads(self.ports.storage().bucket(bucket).blob(name).download_as_bytes())

    def _id(self) -> str:
        self.ids[0] += 1
        return f"m-{self.ids[0]}"


@pytest.fixture
def rig(gcs_bucket, fake_gcs, monkeypatch) -> Rig:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs)
    client = gcs_bucket.client
    state = client.create_bucket(gcs_bucket.name + "-s")
    settings = Settings(
        state_bucket=state.name,
        checkpoint_bucket=gcs_bucket.name,
        trigger_cache_seconds=0,
        trigger_settle_seconds=10,
        allowed_image_prefixes=("us-docker.pkg.dev/",),
    )
    publisher = FakePublisher()
    now = [T0]
    ports = Ports(
        settings,
        LedgerStore(state),
        publisher=lambda: publisher,
        job_service=lambda location: None,
        storage=lambda: client,
        clock=lambda: now[0],
    )
    runner.clear_caches()
    return Rig(ports, publisher, CapturedLog(), TriggerStore(state), now)


def apply(rig: Rig, doc: dict) -> None:
    parse_definition(doc)
    rig.store.put_definition(doc)


def test_fifty_objects_in_one_window_publish_one_request_listing_them(rig: Rig) -> None:
    apply(rig, definition())
    for i in range(50):
        rig.notify(f"incoming/part-{i:03}.csv", at=T0 + timedelta(seconds=i))
    rig.at(T0 + timedelta(seconds=200))
    rig.tick()
    assert rig.requests() == []  # the window [17:00, 17:05) has not ended

    rig.at(T0 + timedelta(seconds=311))
    rig.tick()
    (request,) = rig.requests()
    assert request["request_id"] == "trg-daily-data-w20261129t170000z"
    assert request["custom_job"]["displayName"] == "retrain-daily-data-w20261129t170000z"
    labels = request["custom_job"]["labels"]
    assert labels == {"retrain-trigger": "daily-data", "retrain-window": "w20261129t170000z"}
    manifest = rig.manifest(request)
    assert manifest["object_count"] == 50
    assert [o["uri"] for o in manifest["objects"]] == [f"gs://data-in/incoming/part-{i:03}.csv" for i in range(50)]
    assert manifest["total_bytes"] == 500

    # Every notification delivered again, and more ticks: nothing more.
    for i in range(50):
        rig.notify(f"incoming/part-{i:03}.csv", at=T0 + timedelta(seconds=i))
    rig.tick()
    rig.tick()
    assert len(rig.requests()) == 1
    assert rig.log.events("trigger_late") == []


def test_two_windows_two_requests_and_a_new_generation_is_new_data(rig: Rig) -> None:
    apply(rig, definition())
    rig.notify("incoming/a.csv", at=T0)
    rig.notify("incoming/a.csv", generation=2, at=T0 + timedelta(seconds=400))
    rig.at(T0 + timedelta(seconds=711))
    rig.tick()
    first, second = rig.requests()
    assert first["request_id"].endswith("w20261129t170000z")
    assert second["request_id"].endswith("w20261129t170500z")
    assert [o["generation"] for o in rig.manifest(second)["objects"]] == ["2"]


def test_cooldown_carries_a_window_forward_and_fires_it_when_over(rig: Rig) -> None:
    apply(rig, definition(cooldown_seconds=900))
    rig.notify("incoming/a.csv", at=T0)
    rig.at(T0 + timedelta(seconds=320))
    rig.tick()
    assert len(rig.requests()) == 1
    rig.notify("incoming/b.csv", at=T0 + timedelta(seconds=330))
    rig.notify("incoming/c.csv", at=T0 + timedelta(seconds=700))
    rig.at(T0 + timedelta(seconds=1000))
    rig.tick()
    assert len(rig.requests()) == 1  # both windows deferred: cooldown runs until 17:20:20
    assert len(rig.log.events("trigger_window_deferred")) == 2
    rig.at(T0 + timedelta(seconds=1221))
    rig.tick()
    rig.tick()
    first, second = rig.requests()
    manifest = rig.manifest(second)
    assert [o["name"] for o in manifest["objects"]] == ["incoming/b.csv", "incoming/c.csv"]
    assert manifest["windows"] == ["w20261129t170500z", "w20261129t171000z"]


def test_min_objects_accumulates_windows_until_enough(rig: Rig) -> None:
    apply(rig, definition(min_objects=3))
    rig.notify("incoming/a.csv", at=T0)
    rig.notify("incoming/b.csv", at=T0 + timedelta(seconds=300))
    rig.at(T0 + timedelta(seconds=700))
    rig.tick()
    assert rig.requests() == []
    rig.notify("incoming/c.csv", at=T0 + timedelta(seconds=700))
    rig.at(T0 + timedelta(seconds=1000))
    rig.tick()
    (request,) = rig.requests()
    assert rig.manifest(request)["object_count"] == 3


def test_objects_outside_the_prefix_or_bucket_are_ignored_with_one_debug_line(rig: Rig) -> None:
    apply(rig, definition())
    rig.notify("other/a.csv")
    rig.notify("incoming/a.csv", bucket="unwatched")
    rig.notify("incoming/a.csv", event_type="OBJECT_DELETE")
    ignored = rig.log.events("trigger_ignored")
    assert [line["severity"] for line in ignored] == ["DEBUG"] * 3
    assert len(rig.log.lines) == 3
    rig.at(T0 + timedelta(seconds=400))
    rig.tick()
    assert rig.requests() == []


def test_suffixes_filter_objects(rig: Rig) -> None:
    apply(rig, definition(source={"gcs": {"bucket": "data-in", "prefix": "incoming/", "suffixes": [".parquet"]}}))
    rig.notify("incoming/_SUCCESS")
    rig.notify("incoming/x.parquet")
    rig.at(T0 + timedelta(seconds=400))
    rig.tick()
    (request,) = rig.requests()
    assert rig.manifest(request)["object_count"] == 1


def test_pubsub_trigger_fires_only_on_matching_attributes(rig: Rig) -> None:
    apply(rig, definition("drift", source={"pubsub": {"topic": "model-monitoring", "attributes": {"policy": "drift"}}}))
    topic = "projects/spotjobs-local/topics/model-monitoring"
    rig.deliver(Message(b'{"incident": 1}', "a-1", {"policy": "latency"}, T0), topic)
    rig.deliver(Message(b'{"incident": 2}', "a-2", {"policy": "drift"}, T0), "projects/p/topics/other-topic")
    rig.at(T0 + timedelta(seconds=400))
    rig.tick()
    assert rig.requests() == []
    rig.deliver(Message(b'{"incident": 3}', "a-3", {"policy": "drift"}, T0 + timedelta(seconds=400)), topic)
    rig.deliver(Message(b'{"incident": 3}', "a-3", {"policy": "drift"}, T0 + timedelta(seconds=400)), topic)
    rig.at(T0 + timedelta(seconds=700))
    rig.tick()
    (request,) = rig.requests()
    (entry,) = rig.manifest(request)["objects"]
    assert entry["message_id"] == "a-3" and base64.b64decode(entry["data"]) == b'{"incident": 3}'


def test_a_redriven_watched_message_is_the_member_it_was(rig: Rig) -> None:
    apply(rig, definition("drift", source={"pubsub": {"topic": "model-monitoring", "attributes": {"policy": "drift"}}}))
    topic = "projects/spotjobs-local/topics/model-monitoring"
    original = Message(b'{"incident": 3}', "a-3", {"policy": "drift"}, T0 + timedelta(seconds=10))
    rig.deliver(original, topic)  # recorded, then (say) its acknowledgement was lost: dead-lettered
    rig.at(T0 + timedelta(seconds=3600))
    # Redriven an hour later through on_trigger's own topic: a new id, a new publish time.
    redriven = Message(
        b'{"incident": 3}',
        "dl-99",
        {
            "policy": "drift",
            "spotjobs_original_publish_time": "2026-11-29T17:00:10.000Z",
            "spotjobs_source_topic": "model-monitoring",
        },
        T0 + timedelta(seconds=3600),
    )
    rig.deliver(redriven, None)
    rig.deliver(redriven, None)  # and the redrive delivered twice
    rig.at(T0 + timedelta(seconds=7200))
    rig.tick()
    rig.tick()
    (request,) = rig.requests()
    (entry,) = rig.manifest(request)["objects"]
    assert entry["message_id"] == "a-3" and json.loads(entry["attributes"]) == {"policy": "drift"}


def test_a_watched_message_recorded_only_by_its_redrive_is_recorded_once(rig: Rig) -> None:
    apply(rig, definition("drift", source={"pubsub": {"topic": "model-monitoring", "attributes": {"policy": "drift"}}}))
    rig.at(T0 + timedelta(seconds=3600))
    redriven = {
        "policy": "drift",
        "spotjobs_original_publish_time": "2026-11-29T17:00:10.000Z",
        "spotjobs_source_topic": "model-monitoring",
    }
    own_topic = f"projects/p/topics/{rig.ports.settings.triggers_topic}"  # pushed on on_trigger's own topic
    for message_id in ("dl-1", "dl-1", "dl-2"):  # redelivered, and redriven again by hand
        rig.deliver(Message(b'{"incident": 4}', message_id, redriven, T0 + timedelta(seconds=3600)), own_topic)
    rig.at(T0 + timedelta(seconds=7200))
    rig.tick()
    rig.tick()
    requests = rig.requests()
    assert sum(len(rig.manifest(r)["objects"]) for r in requests) == 1


def test_a_redriven_schedule_fire_starts_no_second_request(rig: Rig) -> None:
    apply(rig, definition("nightly", source={"schedule": {"cron": "0 3 * * *"}}))
    fire = Message(b'{"trigger": "nightly"}', "s-1", {"spotjobs_trigger": "nightly"}, T0 + timedelta(seconds=3))
    rig.deliver(fire, None)
    rig.at(T0 + timedelta(hours=2))
    redriven = Message(
        b'{"trigger": "nightly"}',
        "dl-7",
        {"spotjobs_trigger": "nightly", "spotjobs_original_publish_time": "2026-11-29T17:00:03.000Z"},
        T0 + timedelta(hours=2),
    )
    rig.deliver(redriven, None)
    assert len(rig.requests()) == 1


def test_schedule_fire_publishes_once_per_window_even_if_fired_twice(rig: Rig) -> None:
    apply(rig, definition("nightly", source={"schedule": {"cron": "0 3 * * *"}}))
    for message_id in ("s-1", "s-2"):
        rig.deliver(
            Message(b'{"trigger": "nightly"}', message_id, {"spotjobs_trigger": "nightly"}, T0 + timedelta(seconds=3)),
            None,
        )
    (request,) = rig.requests()
    assert request["request_id"] == "trg-nightly-w20261129t170000z"
    rig.at(T0 + timedelta(seconds=400))
    rig.tick()
    assert len(rig.requests()) == 1


def test_a_request_that_fails_validation_alerts_once_per_window(rig: Rig) -> None:
    doc = definition()
    apply(rig, doc)
    # Stored behind apply's back (as a hand edit would): the image is outside the allowlist.
    bad = json.loads(json.dumps(doc))
    bad["request"]["custom_job"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] = "docker.io/evil:1"
    rig.store.put_definition(bad)
    rig.notify("incoming/a.csv")
    rig.at(T0 + timedelta(seconds=400))
    rig.tick()
    rig.tick()
    assert rig.requests() == []
    (alert,) = rig.alerts()
    assert alert.kind == "trigger_failed" and alert.details["window_id"] == "w20261129t170000z"
    assert any("imageUri" in v for v in alert.details["violations"])


def test_a_late_notification_is_carried_into_the_open_window(rig: Rig) -> None:
    apply(rig, definition())
    rig.notify("incoming/a.csv", at=T0)
    rig.at(T0 + timedelta(seconds=320))
    rig.tick()
    rig.notify("incoming/late.csv", at=T0 + timedelta(seconds=100))  # delayed delivery
    rig.notify("incoming/late.csv", at=T0 + timedelta(seconds=100))  # and redelivered
    rig.at(T0 + timedelta(seconds=620))
    rig.tick()
    first, second = rig.requests()
    assert [o["name"] for o in rig.manifest(second)["objects"]] == ["incoming/late.csv"]


def test_definition_violations_are_all_named() -> None:
    doc = {
        "schema_version": 2,
        "name": "Bad Name",
        "source": {"gcs": {"bucket": "", "prefix": 3}},
        "coalesce_seconds": 0,
        "extra": True,
        "request": {"request_id": "x", "custom_job": {"displayName": "{nope}"}},
    }
    definition_, violations = read_definition(doc)
    assert definition_ is None
    paths = {v.path for v in violations}
    assert paths >= {
        "schema_version",
        "name",
        "source.gcs.bucket",
        "source.gcs.prefix",
        "coalesce_seconds",
        "extra",
        "request.request_id",
        "request.custom_job.displayName",
    }


def test_request_template_is_checked_with_the_request_policy() -> None:
    doc = definition()
    doc["request"]["custom_job"]["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["machineType"] = "n1-standard-4"
    settings = Settings(allowed_image_prefixes=("us-docker.pkg.dev/",))
    violations = check_request_template(parse_definition(doc), settings, T0)
    assert violations and all(isinstance(v, Violation) for v in violations)
    assert any("machineType" in v.path and v.path.startswith("request.custom_job") for v in violations)
    assert check_request_template(parse_definition(definition()), settings, T0) == []


def _deferred_by_cooldown(rig: Rig) -> None:
    """One request fired; the next window (b.csv) deferred by the cooldown, which is now over."""
    apply(rig, definition(cooldown_seconds=900))
    rig.notify("incoming/a.csv", at=T0)
    rig.at(T0 + timedelta(seconds=320))
    rig.tick()
    rig.notify("incoming/b.csv", at=T0 + timedelta(seconds=330))
    rig.at(T0 + timedelta(seconds=700))
    rig.tick()
    assert len(rig.requests()) == 1 and len(rig.log.events("trigger_window_deferred")) == 1
    rig.at(T0 + timedelta(seconds=1300))


def _deferred_window_requests(rig: Rig) -> list[dict]:
    return [r for r in rig.requests() if r["request_id"] == "trg-daily-data-w20261129t170500z"]


def test_a_failed_publish_while_firing_a_deferred_window_is_followed_by_exactly_one_request(rig: Rig) -> None:
    _deferred_by_cooldown(rig)
    rig.publisher.fail_next = 1  # Pub/Sub refuses the window's request once
    try:
        rig.tick()
    except Exception:  # noqa: BLE001 - a failed tick is redelivered: the next delivery resumes
        pass
    rig.tick()
    rig.tick()
    (request,) = _deferred_window_requests(rig)
    assert [o["name"] for o in rig.manifest(request)["objects"]] == ["incoming/b.csv"]


@pytest.mark.parametrize("crash_at", ["state", "closing", "manifest", "publish"])
def test_a_crash_at_each_step_of_firing_a_deferred_window_is_followed_by_exactly_one_request(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, crash_at: str
) -> None:
    from shared.triggers import publishing, windows

    _deferred_by_cooldown(rig)

    class Crash(BaseException):
        pass

    real_swap, real_manifest, real_publish = windows.TriggerStore.swap, publishing.write_manifest, rig.ports.publish
    crashed: list[bool] = []

    def once(step: str, original):
        def wrapper(*args, **kwargs):
            result = original(*args, **kwargs)
            if not crashed and step == crash_at:
                crashed.append(True)
                raise Crash(step)
            return result

        return wrapper

    def swap(store, path, transition):
        # Every compare-and-swap write goes through TriggerStore.swap: the state's decision, and
        # the window document's moves (deferred -> closing among them).
        step = "state" if path.endswith("state.json") else "closing"
        return once(step, real_swap)(store, path, transition)

    monkeypatch.setattr(windows.TriggerStore, "swap", swap)
    monkeypatch.setattr(publishing, "write_manifest", once("manifest", real_manifest))
    monkeypatch.setattr(type(rig.ports), "publish", lambda self, *a, **k: once("publish", real_publish)(*a, **k))
    with pytest.raises(Crash):
        rig.tick()
    monkeypatch.undo()
    rig.tick()
    rig.tick()
    # One request: a crash after the publish repeats it under the same request id, which
    # submit_job's ledger claim absorbs; the same manifest either way.
    published = _deferred_window_requests(rig)
    assert len(published) == (2 if crash_at == "publish" else 1)
    assert all(r == published[0] for r in published)
    assert [o["name"] for o in rig.manifest(published[0])["objects"]] == ["incoming/b.csv"]


def test_a_member_written_into_a_sealed_window_and_redelivered_later_is_in_exactly_one_manifest(rig: Rig) -> None:
    apply(rig, definition())
    rig.notify("incoming/a.csv", at=T0)
    rig.at(T0 + timedelta(seconds=320))
    rig.tick()  # w17:00 sealed and fired with a.csv
    # An instance whose cache says w17:00 is open writes a late member into it, finds it sealed,
    # and carries it into the open window (w17:05).
    runner_windows = __import__("shared.triggers.windows", fromlist=["_open_windows"])
    runner_windows._open_windows.add(("daily-data", "w20261129t170000z"))
    rig.notify("incoming/late.csv", at=T0 + timedelta(seconds=100))
    rig.at(T0 + timedelta(seconds=620))
    rig.tick()  # w17:05 closes with late.csv
    # Redelivered after w17:05 closed, to a fresh instance (nothing cached).
    runner_windows.forget_open_windows()
    rig.notify("incoming/late.csv", at=T0 + timedelta(seconds=100))
    rig.at(T0 + timedelta(seconds=920))
    rig.tick()
    rig.at(T0 + timedelta(seconds=1220))
    rig.tick()
    listed = [o["name"] for r in rig.requests() for o in rig.manifest(r)["objects"]]
    assert sorted(listed) == ["incoming/a.csv", "incoming/late.csv"]


def test_a_window_that_cannot_be_published_alerts_trigger_failed_once_and_is_retried(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    _deferred_by_cooldown(rig)
    real_publish = type(rig.ports).publish

    def refuse_requests(self, topic: str, data: bytes, **attributes: str) -> str:
        if topic.endswith("job-requests"):
            raise ConnectionError("Pub/Sub unreachable")
        return real_publish(self, topic, data, **attributes)

    monkeypatch.setattr(type(rig.ports), "publish", refuse_requests)
    for _ in range(7):
        rig.tick()
    monkeypatch.undo()
    alerts = [a for a in rig.alerts() if a.kind == "trigger_failed"]
    assert len(alerts) == 1 and alerts[0].details["window_id"] == "w20261129t170500z"
    rig.tick()  # Pub/Sub is back: the window's request is published
    (request,) = _deferred_window_requests(rig)
    assert [o["name"] for o in rig.manifest(request)["objects"]] == ["incoming/b.csv"]


def test_a_window_close_a_transient_failure_stopped_is_a_warning_one_refused_for_good_an_error(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The project's rule (shared/errors.py, `is_retryable`): what a retry may mend is said at WARNING.
    from google.api_core import exceptions as api

    apply(rig, definition())
    rig.notify("incoming/a.csv", at=T0)
    rig.at(T0 + timedelta(seconds=320))  # the window [17:00, 17:05) has ended and settled: the tick closes it
    real_publish = type(rig.ports).publish
    refusal: list[Exception] = [api.ServiceUnavailable("Pub/Sub is busy")]

    def refuse_requests(self, topic: str, data: bytes, **attributes: str) -> str:
        if topic.endswith("job-requests"):
            raise refusal[0]
        return real_publish(self, topic, data, **attributes)

    monkeypatch.setattr(type(rig.ports), "publish", refuse_requests)
    rig.tick()
    refusal[0] = api.PermissionDenied("the topic refuses this service account")
    rig.tick()
    failures = [(line["severity"], line["error"].split(":")[0]) for line in rig.log.events("trigger_close_failed")]
    assert failures == [("WARNING", "ServiceUnavailable"), ("ERROR", "PermissionDenied")]


def test_a_tick_begins_no_close_past_its_closing_time_and_the_next_tick_closes_the_rest(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # on_trigger's 60 s timeout (sim.durations, seeds 23 and 25: a tick closing eight windows ran 108 s).
    from shared.triggers import windows

    apply(rig, definition())
    for minute in (0, 5, 10):
        rig.notify(f"incoming/{minute}.csv", at=T0 + timedelta(minutes=minute))
    rig.at(T0 + timedelta(minutes=15, seconds=20))  # the three windows have ended and settled
    real_close = windows.close_window

    def slow_close(*args: object) -> str:  # each close takes 15 s of storage calls
        outcome = real_close(*args)
        rig.at(rig.now[0] + timedelta(seconds=15))
        return outcome

    monkeypatch.setattr(windows, "close_window", slow_close)
    rig.tick()
    assert len(rig.requests()) == 2  # begun at 0 s and 15 s; the third would begin at 30 s
    rig.tick()
    assert len(rig.requests()) == 3


def test_a_watched_message_cannot_claim_another_topic_by_attribute(rig: Rig) -> None:
    apply(rig, definition("drift", source={"pubsub": {"topic": "model-monitoring", "attributes": {"policy": "drift"}}}))
    # Published on some other watched topic, naming model-monitoring: only on_trigger's own topic
    # (where redrive sends) may say which topic a message came from.
    forged = {"policy": "drift", "spotjobs_source_topic": "model-monitoring"}
    rig.deliver(Message(b'{"incident": 9}', "f-1", forged, T0), "projects/p/topics/someone-elses")
    rig.at(T0 + timedelta(seconds=400))
    rig.tick()
    assert rig.requests() == []


def state_objects(rig: Rig, name: str = "daily-data") -> list[str]:
    bucket = rig.ports.storage().bucket(rig.ports.settings.state_bucket)
    return sorted(b.name for b in rig.ports.storage().list_blobs(bucket, prefix=f"triggers/{name}/"))


def test_a_year_after_150_notifications_only_the_triggers_state_is_left(rig: Rig) -> None:
    apply(rig, definition())
    for i in range(150):  # thirty windows of five notifications, each closed by a tick
        rig.notify(f"incoming/part-{i:03}.csv", at=T0 + timedelta(seconds=60 * i))
        if i % 5 == 4:
            rig.at(T0 + timedelta(seconds=60 * i + 120))
            rig.tick()
    assert len(rig.requests()) == 30
    assert len(state_objects(rig)) > 150  # members, documents, seals, the state

    rig.at(T0 + timedelta(days=365))
    rig.tick()
    assert state_objects(rig) == ["triggers/daily-data/state.json"]
    # A notification of today is recorded as before.
    rig.notify("incoming/new.csv")
    rig.at(rig.now[0] + timedelta(seconds=311))
    rig.tick()
    assert [o["name"] for o in rig.manifest(rig.requests()[-1])["objects"]] == ["incoming/new.csv"]


def test_windows_stay_while_a_notification_may_still_name_them(rig: Rig) -> None:
    apply(rig, definition())
    rig.notify("incoming/a.csv", at=T0)
    rig.at(T0 + timedelta(seconds=311))
    rig.tick()
    rig.at(T0 + timedelta(days=31))
    rig.tick()
    kept = state_objects(rig)
    assert "triggers/daily-data/windows/w20261129t170000z.json" in kept
    # Redelivered a month late: a duplicate of a closed window, not a new request.
    rig.notify("incoming/a.csv", at=T0)
    rig.tick()
    assert len(rig.requests()) == 1


def test_carried_windows_are_kept_until_the_window_carrying_them_is_published(rig: Rig) -> None:
    apply(rig, definition(min_objects=2))
    rig.notify("incoming/a.csv", at=T0)
    rig.at(T0 + timedelta(seconds=311))
    rig.tick()  # w17:00 deferred: one object, fewer than min_objects
    rig.at(T0 + timedelta(days=40))
    rig.tick()
    assert "triggers/daily-data/windows/w20261129t170000z/objects/" in "".join(state_objects(rig))

    rig.notify("incoming/b.csv")
    rig.at(rig.now[0] + timedelta(seconds=311))
    rig.tick()
    (request,) = rig.requests()
    assert [o["name"] for o in rig.manifest(request)["objects"]] == ["incoming/a.csv", "incoming/b.csv"]
    rig.at(rig.now[0] + timedelta(days=40))
    rig.tick()
    assert state_objects(rig) == ["triggers/daily-data/state.json"]


def test_the_sweep_lists_only_the_windows_older_than_its_cutoff(rig: Rig) -> None:
    for window_id in ("w20261129t165500z", "w20261129t170000z", "w20261129t170500z"):
        rig.store.create(f"triggers/t/windows/{window_id}.json", {"window_id": window_id})
        rig.store.touch(f"triggers/t/windows/{window_id}/sealed")
    rig.store.touch("triggers/t/windows/w20261129t165000z/objects/k")  # a removal cut short: no document

    assert rig.store.window_ids_before("t", "w20261129t170500z") == [
        "w20261129t165000z",
        "w20261129t165500z",
        "w20261129t170000z",
    ]


def test_a_deleted_triggers_objects_go_once_none_was_written_for_the_retention(rig: Rig) -> None:
    apply(rig, definition(min_objects=2))
    apply(rig, definition("other"))
    rig.notify("incoming/a.csv")
    rig.at(T0 + timedelta(seconds=311))
    rig.tick()  # deferred: data carried, waiting for more
    rig.store.delete_definition("daily-data")

    rig.at(T0 + timedelta(days=1))
    rig.tick()
    assert state_objects(rig) != []  # applied again soon, it would carry on where it was
    rig.at(T0 + timedelta(days=400))
    rig.tick()
    assert state_objects(rig) == []


def test_a_definition_this_version_cannot_read_keeps_its_triggers_objects(rig: Rig) -> None:
    apply(rig, definition())
    rig.notify("incoming/a.csv")
    rig.at(T0 + timedelta(seconds=311))
    rig.tick()
    rig.store.put_definition({**definition(), "coalesce_seconds": 0})  # say, written by a newer version

    rig.at(T0 + timedelta(days=400))
    rig.tick()
    assert "triggers/daily-data/state.json" in state_objects(rig)


def test_a_sweep_removes_a_bounded_number_of_objects_and_the_next_tick_carries_on(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shared.triggers import retention

    monkeypatch.setattr(retention, "REMOVALS_PER_SWEEP", 3)
    apply(rig, definition())
    for i in range(5):
        rig.notify(f"incoming/part-{i}.csv")
    rig.at(T0 + timedelta(seconds=311))
    rig.tick()
    rig.at(T0 + timedelta(days=400))

    rig.tick()
    assert len(state_objects(rig)) == 1 + 5 + 2 - 3  # the state, 5 members, seal and document
    rig.tick()
    rig.tick()
    assert state_objects(rig) == ["triggers/daily-data/state.json"]


def test_a_watched_topic_message_is_routed_by_its_topic_never_by_its_attributes(rig: Rig) -> None:
    # Issue 32 item 4: a publisher on a watched topic sets the attributes of a storage notification
    # and of a schedule's fire; it reaches on_trigger through that topic's push subscription.
    apply(rig, definition())  # watches gs://data-in/incoming/
    apply(rig, definition("nightly", source={"schedule": {"cron": "0 3 * * *"}}))
    apply(rig, definition("drift", source={"pubsub": {"topic": "model-monitoring", "attributes": {"policy": "x"}}}))
    watched = "projects/p/topics/model-monitoring"
    storage = {
        "eventType": "OBJECT_FINALIZE",
        "bucketId": "data-in",
        "objectId": "incoming/forged.csv",
        "objectGeneration": "1",
        "payloadFormat": "JSON_API_V1",
    }
    rig.deliver(Message(b'{"size": "999", "md5Hash": "forged"}', "f-1", storage, T0), watched)
    rig.deliver(Message(b"{}", "f-2", {"spotjobs_trigger": "nightly"}, T0), watched)
    rig.at(T0 + timedelta(seconds=400))
    rig.tick()
    assert rig.requests() == []
    assert rig.store.list_names("triggers/daily-data/") == rig.store.list_names("triggers/nightly/") == []


def test_a_first_publish_time_counts_only_from_a_redrive_and_only_within_range(rig: Rig) -> None:
    # Issue 32 item 5: a watched publisher's own `spotjobs_original_publish_time` is not a redrive's
    # (a past window that would fire at once), and a redrive's year-9999 time never reaches a window.
    apply(rig, definition("drift", source={"pubsub": {"topic": "model-monitoring", "attributes": {"policy": "x"}}}))
    apply(rig, definition())
    at = T0 + timedelta(hours=3)
    rig.at(at)
    forged = {"policy": "x", "spotjobs_original_publish_time": "2026-11-29T17:00:10.000Z"}
    rig.deliver(Message(b'{"incident": 1}', "w-1", forged, at), "projects/p/topics/model-monitoring")
    far = {"policy": "x", "spotjobs_original_publish_time": "9999-12-31T23:59:59Z"}
    redriven = {**far, "spotjobs_source_topic": "model-monitoring"}
    rig.deliver(Message(b'{"incident": 2}', "dl-1", redriven, at), None)
    rig.tick()  # every later tick still closes windows
    assert rig.requests() == []
    rig.notify("incoming/a.csv", at=at)
    rig.at(at + timedelta(seconds=700))
    rig.tick()
    data, drift = sorted(rig.requests(), key=lambda r: r["request_id"])
    window = "w20261129t200000z"  # the one the messages were published in
    assert drift["request_id"] == f"trg-drift-{window}" and data["request_id"] == f"trg-daily-data-{window}"
    assert sorted(e["publish_time"] for e in rig.manifest(drift)["objects"]) == ["2026-11-29T20:00:00.000Z"] * 2
    assert rig.log.events("trigger_time_refused")


def test_a_window_names_the_request_it_publishes_so_that_only_that_one_takes_its_id(rig: Rig) -> None:
    from shared.triggers.publishing import published_by_window

    apply(rig, definition("nightly", source={"schedule": {"cron": "0 3 * * *"}}))
    rig.deliver(Message(b"{}", "s-1", {"spotjobs_trigger": "nightly"}, T0 + timedelta(seconds=3)), None)
    (request,) = rig.requests()
    assert published_by_window(rig.store, request["request_id"], request)
    assert not published_by_window(rig.store, request["request_id"], {**request, "max_attempts": 9})
    assert not published_by_window(rig.store, "trg-nightly-w20261129t180000z", request)  # no such window


def test_a_manifest_planted_before_the_window_closes_is_never_adopted(rig: Rig) -> None:
    # Issue 32 item 2: any job may write the checkpoint bucket, and the manifest's path is predictable.
    from shared.triggers.render import manifest_uri_for

    apply(rig, definition())
    uri = manifest_uri_for(rig.ports.settings, "daily-data", "w20261129t170000z")
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    planted = {"objects": [{"uri": "gs://attacker/poison.csv"}], "object_count": 1}
    rig.ports.storage().bucket(bucket).blob(name).upload_from_string(json.dumps(planted))
    rig.notify("incoming/a.csv", at=T0)
    rig.at(T0 + timedelta(seconds=320))
    rig.tick()
    assert rig.requests() == []
    (alert,) = rig.alerts()
    assert alert.kind == "trigger_failed" and any("manifest" in v for v in alert.details["violations"])


def test_a_windows_manifest_is_written_where_no_job_may_write(rig: Rig) -> None:
    # Issue 32 item 2: jobs may write the checkpoint bucket (their own prefix of it, terraform/
    # iam.tf); the manifest lives in the state bucket's manifests/, which they may only read.
    apply(rig, definition())
    rig.notify("incoming/a.csv", at=T0)
    rig.at(T0 + timedelta(seconds=320))
    rig.tick()
    (request,) = rig.requests()
    env = {
        e["name"]: e["value"] for e in request["custom_job"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["env"]
    }
    settings = rig.ports.settings
    assert env["SPOTJOBS_MANIFEST_URI"] == f"gs://{settings.state_bucket}/manifests/{request['request_id']}.json"
    assert not env["SPOTJOBS_MANIFEST_URI"].startswith(settings.checkpoint_root)  # the jobs' own prefix
    assert [o["name"] for o in rig.manifest(request)["objects"]] == ["incoming/a.csv"]
