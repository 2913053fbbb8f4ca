"""What submit_job tells the operator when Vertex refuses a create for now (`create_refused`): a
resource quota is left to reconcile's re-publish with backoff (simulator seed 1887), a rate to the
message's redelivery; the line says which, as the outcome does."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from google.api_core import exceptions as api

from shared.delivery import Message
from shared.ledger.store import LedgerStore
from shared.submit import SubmitResult, submit_request
from tests.conftest import load_event
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, make_settings

TRAINER = "trainer@my-project.iam.gserviceaccount.com"
GPUS = (
    "The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"
)


@pytest.fixture
def world(gcs_bucket) -> World:
    settings = make_settings(
        gcs_bucket.name,
        SPOTJOBS_ALLOWED_IMAGE_PREFIXES="us-docker.pkg.dev/my-project/",
        SPOTJOBS_TRAINING_SERVICE_ACCOUNT=TRAINER,
        SPOTJOBS_ALLOWED_SERVICE_ACCOUNTS=TRAINER,
        SPOTJOBS_VERTEX_CREATES_PER_MINUTE="0",  # unpaced: a rate refusal goes to the redelivery
    )
    return World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), settings)


def _refused(world: World, refusal: Exception) -> tuple[SubmitResult | None, str]:
    world.vertex.create_faults.append(refusal)
    log = CapturedLog()
    body = json.dumps({"request_id": "r1", "custom_job": json.loads(load_event("requests/bare_docs.json"))}).encode()
    try:
        result = submit_request(
            Message(body, "m-1", {}, publish_time=datetime.now(UTC)), log.logger, world.ports
        ).result
    except api.TooManyRequests:
        result = None  # nacked: redelivered
    [line] = log.events("create_refused")
    assert line["severity"] == "WARNING"
    return result, line["message"]


def test_a_resource_quota_refusal_says_reconcile_re_publishes_it(world: World) -> None:
    result, message = _refused(world, api.TooManyRequests(GPUS))
    assert result == SubmitResult.WAITING
    assert "reconcile re-publishes it with backoff" in message


def test_a_rate_refusal_says_the_redelivery_takes_it(world: World) -> None:
    result, message = _refused(world, api.TooManyRequests("429 Too Many Requests"))
    assert result is None
    assert "for the redelivery" in message and "reconcile" not in message
