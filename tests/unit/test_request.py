"""Reading job requests: the two shapes, the aiplatform_v1 schema, every violation with its path."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from shared.errors import InvalidRequest
from shared.requests.envelope import REQUEUE_ATTRIBUTES, JobRequest, canonical_envelope, read_request
from shared.requests.policy import validate_request
from shared.requests.request_ids import derived_request_id, is_valid_request_id
from shared.settings import Settings
from tests.conftest import load_event

SETTINGS = Settings.from_env({})
MAX_BYTES = SETTINGS.max_request_bytes


PUBLISHED = datetime(2026, 11, 30, 21, 5, 42, tzinfo=UTC)


def read(body: Any, *, published_at: datetime | None = PUBLISHED, **attributes: str) -> tuple[JobRequest, list[str]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request, violations = read_request(data, attributes=attributes, max_bytes=MAX_BYTES, published_at=published_at)
    return request, [str(v) for v in violations]


def docs_body() -> dict[str, Any]:
    return json.loads(load_event("requests/bare_docs.json"))


def test_the_bare_body_from_the_vertex_docs_is_read_as_is() -> None:
    request, violations = read(load_event("requests/bare_docs.json"))

    assert violations == []
    assert request.shape == "bare"
    # its content and its minute: a redelivery or a publisher's retry maps to the same request
    assert request.request_id == derived_request_id(docs_body(), PUBLISHED)
    pool = request.custom_job["jobSpec"]["workerPoolSpecs"][0]
    assert pool["machineSpec"] == {
        "machineType": "a2-highgpu-1g",
        "acceleratorType": "NVIDIA_TESLA_A100",
        "acceleratorCount": 1,
    }
    assert pool["replicaCount"] == "1"  # int64 in REST JSON, as the API prints it
    assert request.custom_job["jobSpec"]["scheduling"] == {"strategy": "SPOT"}


def test_a_bare_body_takes_its_request_id_from_the_message_attribute() -> None:
    request, violations = read(docs_body(), request_id="nightly-42")
    assert violations == [] and request.request_id == "nightly-42"


def test_a_bare_body_with_a_bad_request_id_attribute_is_rejected() -> None:
    _, violations = read(docs_body(), request_id="Nightly 42")
    assert len(violations) == 1 and violations[0].startswith("attributes.request_id: is 'Nightly 42'")


def test_a_bare_body_without_an_id_is_named_by_its_content_and_moment_never_its_message() -> None:
    body = docs_body()
    first, _ = read(body, published_at=PUBLISHED.replace(second=5))
    again, _ = read(body, published_at=PUBLISHED.replace(second=5))
    other = {**body, "displayName": "another"}
    assert first.request_id == again.request_id  # the window opening at its moment
    assert first.moment == PUBLISHED.replace(second=5) and first.content_digest == again.content_digest
    assert read(other)[0].content_digest != first.content_digest
    assert is_valid_request_id(first.request_id) and first.request_id.endswith("-20261130210505")
    # Which window a later publish joins is the dedupe store's (tests/unit/test_dedupe.py).
    named, _ = read(body, request_id="nightly-42")
    assert named.content_digest is None  # an explicit id always wins


def test_a_redriven_bare_body_is_named_by_its_original_publish_time() -> None:
    original = "2026-11-30T21:05:05.250Z"
    redriven, _ = read(docs_body(), published_at=PUBLISHED.replace(hour=23), spotjobs_original_publish_time=original)
    assert redriven.moment == datetime(2026, 11, 30, 21, 5, 5, 250000, tzinfo=UTC)


def test_a_scheduler_double_fire_is_one_request_by_its_schedule_time() -> None:
    body = docs_body()
    fire = "2026-11-30T02:00:00Z"  # the scheduled time, whatever minute each copy was published
    first, _ = read(body, published_at=PUBLISHED, schedule_time=fire)
    second, _ = read(body, published_at=PUBLISHED.replace(minute=7), schedule_time=fire)
    assert first.request_id == second.request_id and first.moment == second.moment
    assert first.request_id.endswith("-20261130020000")
    _, violations = read(body, schedule_time="yesterday")
    assert violations == ["attributes.schedule_time: is not an RFC 3339 time"]


def test_snake_case_and_camel_case_read_to_the_same_canonical_custom_job() -> None:
    envelope = json.loads(load_event("requests/envelope_full.json"))
    snake, snake_violations = read(envelope)
    camel_job = {
        "displayName": "resnet-nightly",
        "labels": {"team": "vision", "cost-center": "cc-42"},
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {
                        "machineType": "a3-highgpu-8g",
                        "acceleratorType": "NVIDIA_H100_80GB",
                        "acceleratorCount": 8,
                    },
                    "replicaCount": 1,
                    "containerSpec": {
                        "imageUri": "us-docker.pkg.dev/my-project/training/resnet:1.4",
                        "command": ["true"],
                        "args": ["--epochs", "90"],
                        "env": [{"name": "BATCH_SIZE", "value": "256"}],
                    },
                }
            ],
            "scheduling": {"timeout": "86400s"},
            "serviceAccount": "trainer@my-project.iam.gserviceaccount.com",
        },
    }
    camel, camel_violations = read({**envelope, "custom_job": camel_job})

    assert snake_violations == camel_violations == []
    assert snake.custom_job == camel.custom_job == json.loads(json.dumps(camel.custom_job))
    assert snake.custom_job["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == "1"


def test_the_envelope_fields_are_read() -> None:
    request, violations = read(json.loads(load_event("requests/envelope_full.json")))

    assert violations == []
    assert request.shape == "envelope" and request.request_id == "resnet-nightly-001"
    assert request.locations == ("us-central1", "europe-west4") and request.location is None
    assert request.max_attempts == 4 and request.keep_last == 3 and request.attempt is None
    assert request.fallback is not None and request.fallback.to_json() == {
        "after_spot_attempts": 2,
        "strategy": "STANDARD",
    }


def test_enums_may_be_names_or_numbers_as_rest_clients_send_them() -> None:
    body = docs_body()
    body["jobSpec"]["scheduling"]["strategy"] = 4
    body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = 8
    request, violations = read(body)
    assert violations == []
    assert request.custom_job["jobSpec"]["scheduling"]["strategy"] == "SPOT"
    assert request.custom_job["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] == "NVIDIA_TESLA_A100"


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (
            lambda b: b["jobSpec"]["workerPoolSpecs"][0]["machineSpec"].update(machineTyp="x"),
            "jobSpec.workerPoolSpecs[0].machineSpec.machineTyp: unknown field of MachineSpec",
        ),
        (lambda b: b.update(displayName=7), "displayName: expected a string"),
        (
            lambda b: b["jobSpec"]["workerPoolSpecs"][0].update(replicaCount="many"),
            "jobSpec.workerPoolSpecs[0].replicaCount: expected an integer",
        ),
        (
            lambda b: b["jobSpec"]["workerPoolSpecs"][0].update(replicaCount=True),
            "jobSpec.workerPoolSpecs[0].replicaCount: expected an integer",
        ),
        (
            lambda b: b["jobSpec"]["scheduling"].update(strategy="CHEAP"),
            "jobSpec.scheduling.strategy: expected a Strategy name",
        ),
        (
            lambda b: b["jobSpec"]["scheduling"].update(timeout=60),
            'jobSpec.scheduling.timeout: expected a duration such as "3600s"',
        ),
        (
            lambda b: b["jobSpec"].update(workerPoolSpecs={"0": {}}),
            "jobSpec.workerPoolSpecs: is a JSON object; expected an array",
        ),
        (
            lambda b: b["jobSpec"]["workerPoolSpecs"].append("pool"),
            "jobSpec.workerPoolSpecs[1]: is a JSON string; expected an object",
        ),
        (lambda b: b.update(labels={"team": 1}), "labels: expected a map of a string"),
        (lambda b: b.update(name="projects/p/locations/l/customJobs/1"), "name: is output only"),
        (
            lambda b: b["jobSpec"]["workerPoolSpecs"][0].update(pythonPackageSpec={"executorImageUri": "x"}),
            "jobSpec.workerPoolSpecs[0].pythonPackageSpec: only one of containerSpec and pythonPackageSpec",
        ),
        (lambda b: b.update(display_name="again"), "display_name: repeats displayName"),
    ],
)
def test_schema_errors_name_the_field_path(mutate: Any, expected: str) -> None:
    body = docs_body()
    mutate(body)
    _, violations = read(body)
    assert any(v.startswith(expected) for v in violations), violations


def test_every_schema_error_is_reported_at_once() -> None:
    body = docs_body()
    pool = body["jobSpec"]["workerPoolSpecs"][0]
    pool["machineSpec"]["machineTyp"] = "a2"
    pool["replicaCount"] = "x"
    body["displayName"] = 3
    body["jobSpek"] = {}
    _, violations = read(body)
    paths = sorted(v.split(":", 1)[0] for v in violations)
    assert paths == [
        "displayName",
        "jobSpec.workerPoolSpecs[0].machineSpec.machineTyp",
        "jobSpec.workerPoolSpecs[0].replicaCount",
        "jobSpek",
    ]


def test_envelope_errors_are_all_reported_with_their_paths() -> None:
    body = {
        "request_id": "Bad Id",
        "custom_job": docs_body(),
        "location": "mars",
        "locations": ["us-central1", "us-central1"],
        "max_attempts": 0,
        "fallback": {"after_spot_attempts": -1, "strategy": "SPOT", "when": "now"},
        "checkpoints": {"keep_last": "3"},
        "attempt": "2",
        "schema_version": 2,
        "priority": "high",
    }
    _, violations = read(body)
    paths = {v.split(":", 1)[0] for v in violations}
    assert paths == {
        "request_id",
        "location",
        "locations",
        "max_attempts",
        "fallback.after_spot_attempts",
        "fallback.strategy",
        "fallback.when",
        "checkpoints.keep_last",
        "attempt",
        "schema_version",
        "priority",
    }


def test_an_envelope_needs_a_custom_job_and_a_matching_request_id_attribute() -> None:
    _, violations = read({"request_id": "r1"})
    assert violations == ["custom_job: is required (a CustomJob in Vertex REST JSON)"]
    _, violations = read({"request_id": "r1", "custom_job": docs_body()}, request_id="r2")
    assert violations == ["attributes.request_id: is 'r2' but the body says 'r1'"]


def test_location_must_be_one_of_locations_when_both_are_given() -> None:
    _, violations = read(
        {
            "request_id": "r1",
            "custom_job": docs_body(),
            "location": "us-east4",
            "locations": ["us-central1"],
        }
    )
    assert violations == ["location: is 'us-east4', which is not in locations"]


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"", "body: is empty"),
        (b"  \n", "body: is empty"),
        (b"{not json", "body: is not valid UTF-8 JSON"),
        (b"\xff\xfe{}", "body: is not valid UTF-8 JSON"),
        (b"[1, 2]", "body: is a JSON array; expected an object"),
        (b'"job"', "body: is a JSON string; expected an object"),
        (b"null", "body: is JSON null; expected an object"),
        (b"[" * 100_000, "body: is not valid UTF-8 JSON"),
        (
            b" " * (MAX_BYTES + 1) + b"{}",
            f"body: is {MAX_BYTES + 3} bytes; at most {MAX_BYTES} are accepted",
        ),
    ],
)
def test_unusable_bodies_are_one_clear_violation(data: bytes, expected: str) -> None:
    request, violations = read(data)
    assert len(violations) == 1 and violations[0].startswith(expected), violations
    assert request.custom_job is None


def _padded_envelope(size: int, **fields: Any) -> bytes:
    """An envelope of exactly `size` bytes (padded with whitespace, which JSON ignores)."""
    data = json.dumps({"request_id": "r1", "custom_job": docs_body(), **fields}).encode()
    return data + b" " * (size - len(data))


def test_a_system_requeue_may_exceed_the_request_limit_by_the_envelope_it_gained() -> None:
    # A re-queued attempt carries the canonical envelope, bigger than the request first accepted;
    # attempt 1 too, as the quota line's hand-over re-publishes it.
    for attempt in (1, 2):
        request, violations = read(_padded_envelope(MAX_BYTES + 1000, attempt=attempt), **REQUEUE_ATTRIBUTES)
        assert violations == [] and request.attempt == attempt
    _, violations = read(_padded_envelope(MAX_BYTES + 1000))
    assert violations == [f"body: is {MAX_BYTES + 1000} bytes; at most {MAX_BYTES} are accepted"]
    # A publisher's `attempt` does not buy the allowance: only the system's marked re-queues get it.
    _, violations = read(_padded_envelope(MAX_BYTES + 1000, attempt=2))
    assert violations == [f"body: is {MAX_BYTES + 1000} bytes; at most {MAX_BYTES} are accepted"]


def test_even_a_requeue_is_bounded_at_three_times_the_request_limit() -> None:
    _, violations = read(_padded_envelope(3 * MAX_BYTES + 1, attempt=2), **REQUEUE_ATTRIBUTES)
    assert violations == [f"body: is {3 * MAX_BYTES + 1} bytes; at most {MAX_BYTES} are accepted"]


def test_an_unusable_body_keeps_the_request_id_its_publisher_gave() -> None:
    assert read(b"nope", request_id="r-7")[0].request_id == "r-7"
    assert read(b"nope", request_id="Not Valid")[0].request_id is None


def test_the_canonical_envelope_resolves_defaults_and_keeps_the_job_as_submitted() -> None:
    request, _ = read(json.loads(load_event("requests/envelope_full.json")))
    envelope = canonical_envelope(request, default_location="us-east1", default_max_attempts=3)
    assert envelope == {
        "schema_version": 1,
        "request_id": "resnet-nightly-001",
        "custom_job": request.custom_job,
        "location": "us-central1",  # locations[0], not the deployment default
        "locations": ["us-central1", "europe-west4"],
        "max_attempts": 4,
        "fallback": {"after_spot_attempts": 2, "strategy": "STANDARD"},
        "checkpoints": {"keep_last": 3},
    }
    assert "labels" not in envelope["custom_job"] or "spotjobs-attempt" not in envelope["custom_job"]["labels"]

    bare, _ = read(docs_body())
    defaults = canonical_envelope(bare, default_location="us-east1", default_max_attempts=3)
    assert defaults["location"] == "us-east1" and defaults["max_attempts"] == 3
    assert defaults["fallback"] is None and defaults["checkpoints"] is None


def test_a_republished_canonical_envelope_reads_back_to_the_same_request() -> None:
    """The events function re-queues by publishing the canonical envelope plus attempt and location."""
    request, _ = read(json.loads(load_event("requests/envelope_full.json")))
    envelope = canonical_envelope(request, default_location="us-east1", default_max_attempts=3)
    again, violations = read(
        {**envelope, "attempt": 2, "location": "europe-west4"},
        request_id="resnet-nightly-001",
        **REQUEUE_ATTRIBUTES,
    )
    assert violations == []
    assert again.attempt == 2 and again.location == "europe-west4"
    assert canonical_envelope(again, default_location="x", default_max_attempts=1) == {
        **envelope,
        "location": "europe-west4",
    }


def test_a_canonical_envelope_without_failover_reads_back_as_is() -> None:
    bare, _ = read(docs_body())
    envelope = canonical_envelope(bare, default_location="us-east1", default_max_attempts=3)
    assert envelope["locations"] == [] and envelope["fallback"] is None
    again, violations = read({**envelope, "attempt": 2}, **REQUEUE_ATTRIBUTES)
    assert violations == [] and again.attempt == 2 and again.custom_job == bare.custom_job
    assert canonical_envelope(again, default_location="x", default_max_attempts=1) == envelope


def test_a_publisher_may_not_set_attempt_only_the_systems_requeue_may() -> None:
    envelope = {"request_id": "r1", "custom_job": docs_body()}
    request, violations = read({**envelope, "attempt": 2})
    assert request.attempt is None and violations == [
        "attempt: is set only by spotjobs, on its own re-queue messages; a published request is "
        "attempt 1 (leave it out)"
    ]
    request, violations = read({**envelope, "attempt": 2}, **REQUEUE_ATTRIBUTES)
    assert request.attempt == 2 and violations == []
    request, violations = read(envelope, **REQUEUE_ATTRIBUTES)
    assert violations == ["attempt: is required on a re-queue message"]
    _, violations = read(envelope, spotjobs_origin="me")
    assert violations == ["attributes.spotjobs_origin: is 'me'; only the system sets it, to 'requeue'"]
    _, violations = read(docs_body(), **REQUEUE_ATTRIBUTES)
    assert violations == ["attributes.spotjobs_origin: marks a re-queue, which is an envelope"]
    # Without the marker, `attempt` is never read: a request is attempt 1.
    request, _ = read({**envelope, "attempt": 1})
    assert request.attempt is None


# Property: whatever arrives, reading and validating only ever reject it with InvalidRequest.

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=30,
)
job_keys = st.sampled_from(
    [
        "displayName",
        "jobSpec",
        "workerPoolSpecs",
        "machineSpec",
        "machineType",
        "replicaCount",
        "containerSpec",
        "imageUri",
        "scheduling",
        "strategy",
        "labels",
        "request_id",
        "custom_job",
        "attempt",
        "locations",
        "fallback",
        "baseOutputDirectory",
        "serviceAccount",
        "tpuTopology",
    ]
)
job_shaped = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20) | st.sampled_from(["SPOT", "a2-highgpu-1g", "1"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(job_keys, children, max_size=5),
    max_leaves=40,
)


def _validate_only_rejects_cleanly(data: bytes, attributes: dict[str, str]) -> None:
    try:
        request = validate_request(data, attributes=attributes, settings=SETTINGS)
    except InvalidRequest as exc:
        assert exc.violations and all(v.path and v.message for v in exc.violations)
    else:
        assert request.request_id and request.custom_job is not None


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300), request_id=st.none() | st.text(max_size=70))
def test_arbitrary_bytes_only_ever_raise_invalid_request(data: bytes, request_id: str | None) -> None:
    _validate_only_rejects_cleanly(data, {} if request_id is None else {"request_id": request_id})


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=json_values | job_shaped)
def test_arbitrary_json_only_ever_raises_invalid_request(body: Any) -> None:
    _validate_only_rejects_cleanly(json.dumps(body).encode(), {})


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pool=st.dictionaries(job_keys, job_shaped, max_size=5),
    envelope_extra=st.dictionaries(job_keys, job_shaped, max_size=3),
)
def test_arbitrary_job_parts_inside_a_valid_frame_only_raise_invalid_request(pool: dict, envelope_extra: dict) -> None:
    body = docs_body()
    body["jobSpec"]["workerPoolSpecs"].append(pool)
    envelope = {"request_id": "prop", "custom_job": body, **envelope_extra}
    _validate_only_rejects_cleanly(json.dumps(envelope).encode(), {})
