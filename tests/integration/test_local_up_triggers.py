"""`spotjobs local up` ticks the retraining triggers on its own, as the deployment's Cloud
Scheduler does: a plain stack with `local up`'s schedule (no hand-made tick) turns data landing
under a watched prefix into one job."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest

from shared.triggers.render import manifest_uri
from spotjobs.cli import build_parser
from spotjobs.cli.local import local_up_schedule
from tests.conftest import isolated_stack
from tests.support.stack_triggers import apply, definition, jobs_for, trigger_requests

pytestmark = pytest.mark.stack

TICK_SECONDS = 6.0  # `--triggers-every`: short, so the test takes seconds, not minutes
COALESCE_SECONDS = 6


def parsed_local_up(*flags: str):
    return build_parser().parse_args(["local", "up", *flags])


def test_local_up_schedules_the_triggers_tick_every_minute_by_default() -> None:
    schedule = local_up_schedule(parsed_local_up())
    assert schedule == {"reconcile": 30.0, "prune": 300.0, "triggers": 60.0}
    assert local_up_schedule(parsed_local_up("--triggers-every", "7"))["triggers"] == 7.0


@pytest.fixture(scope="module")
def local_up_stack() -> Iterator:
    with isolated_stack(schedule=local_up_schedule(parsed_local_up("--triggers-every", str(TICK_SECONDS)))) as stack:
        yield stack


def test_data_under_a_watched_prefix_becomes_one_job_with_no_hand_made_tick(local_up_stack) -> None:
    stack = local_up_stack
    name = f"local-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}/incoming/"
    # min_objects=50: should a notification be recorded after its window was sealed (a loaded
    # machine), it is carried into the next window, which then fires with all 50: one request
    # whatever the timing, as the design guarantees.
    apply(
        stack,
        definition(
            name,
            {"gcs": {"bucket": stack.options.data_bucket, "prefix": prefix}},
            coalesce_seconds=COALESCE_SECONDS,
            min_objects=50,
        ),
    )
    data = stack.storage().bucket(stack.options.data_bucket)
    for i in range(50):
        data.blob(f"{prefix}part-{i:03}.csv").upload_from_string(f"row {i}\n")
    data.blob(f"{name}/elsewhere/x.csv").upload_from_string("not watched")
    uploaded = time.monotonic()

    (request_id,) = stack.wait_for(lambda: trigger_requests(stack, name), timeout=120, message="the request")
    waited = time.monotonic() - uploaded
    record = stack.wait_for(
        lambda: (r := stack.ledger().get(request_id)) and r.latest and r.latest.job and r, timeout=60, message="the job"
    )
    assert record.latest.job
    assert len(jobs_for(stack, request_id)) == 1
    uri = manifest_uri(stack.settings, request_id)
    bucket, _, object_name = uri.removeprefix("gs://").partition("/")
    manifest = json.loads(stack.storage().bucket(bucket).blob(object_name).download_as_bytes())
    assert {o["name"] for o in manifest["objects"]} == {f"{prefix}part-{i:03}.csv" for i in range(50)}

    # Two more ticks: still one request, and the object outside the prefix made none.
    ticks_seen = len(tick_lines(stack))
    stack.wait_for(lambda: len(tick_lines(stack)) >= ticks_seen + 2, timeout=120, message="two more ticks")
    assert trigger_requests(stack, name) == [request_id]
    print(f"request {waited:.1f} s after the upload (tick every {TICK_SECONDS:.0f} s, window {COALESCE_SECONDS} s)")


def tick_lines(stack) -> list[dict]:
    return [line for line in stack.function_logs("on_trigger") if line.get("event") == "triggers_tick"]
