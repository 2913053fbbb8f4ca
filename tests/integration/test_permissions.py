"""Permissions, sufficient and least: what each function really calls, against what Terraform
grants its service account.

The session's stack runs its functions with SPOTJOBS_RECORD_API_CALLS (shared/adapters/api_recording.py):
each distinct Google API call a function makes (Storage operation per bucket and object prefix,
Pub/Sub publish per topic, Vertex AI JobService method, the service account a created job runs
as) is a line in <dir>/<function>.jsonl. A small scenario reaches each function's every publish
and Vertex path (a test of its own, handed out early, so its minute of waits overlaps the other
tests); the comparison runs last (`run_last`), so it sees every call the session's stack tests
caused, and drives the scenario itself when run without it.

Each call maps to the IAM permission Google checks for it:
- Storage JSON API: https://cloud.google.com/storage/docs/access-control/iam-json (objects.list ->
  storage.objects.list; objects.get and media download -> storage.objects.get; objects.insert ->
  storage.objects.create, and storage.objects.delete as well when it replaces an existing object;
  objects.delete -> storage.objects.delete; objects.patch/update -> storage.objects.update;
  buckets.get -> storage.buckets.get);
- Pub/Sub: https://cloud.google.com/pubsub/docs/access-control (topics.publish -> pubsub.topics.publish);
- Vertex AI: https://cloud.google.com/vertex-ai/docs/general/access-control
  (projects.locations.customJobs.{create,get,list,cancel} -> aiplatform.customJobs.{...});
- a job that runs as a service account: iam.serviceAccounts.actAs on that account
  (https://cloud.google.com/vertex-ai/docs/general/custom-service-account).

Both directions fail: a call whose permission Terraform does not grant (it would be a 403 in
production), and a grant no call needs, apart from the reasoned exceptions in UNUSED_ALLOWED.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from shared.ledger.states import RequestStatus
from shared.topology import TOPOLOGY
from tests.support.terraform import module_config

pytestmark = pytest.mark.stack

# A requester's notify topic is theirs: they grant roles/pubsub.publisher on it to the functions
# that publish notifications (docs/requests.md, "Notifications"); Terraform cannot.
REQUESTER_TOPIC = "requester"
NOTIFYING = {"submit_job", "on_job_event", "reconcile"}

STORAGE_PERMISSIONS = {
    "objects.list": ["storage.objects.list"],
    "objects.get": ["storage.objects.get"],
    # A read of an object that does not exist (a new request's record, a cursor or lease not yet
    # written) must answer 404, which the code relies on. Object stores commonly answer 403 there
    # to a caller that may not list the bucket (S3 does); that GCS answers 404 with get alone is
    # not something this stack can show, so such a read counts as needing list too.
    "objects.get_missing": ["storage.objects.get", "storage.objects.list"],
    "objects.create": ["storage.objects.create"],
    "objects.overwrite": ["storage.objects.delete"],  # replacing a live object needs delete too
    "objects.delete": ["storage.objects.delete"],
    "objects.update": ["storage.objects.update"],
    "buckets.get": ["storage.buckets.get"],
}
# Predefined roles Terraform grants, by the permissions of theirs that spotjobs could use
# (https://cloud.google.com/iam/docs/understanding-roles).
PREDEFINED = {
    "roles/storage.objectViewer": {"storage.objects.get", "storage.objects.list"},
    "roles/pubsub.publisher": {"pubsub.topics.publish"},
    "roles/iam.serviceAccountUser": {"iam.serviceAccounts.actAs"},
}


# Granted but not called in the tests, each for a reason.
UNUSED_ALLOWED = {
    (
        "submit_job",
        "pubsub.topics.publish",
        "topic:job_requests",
    ): "the drainer of the line waiting for Vertex's submission quota hands over to the head's "
    "message (shared/pacing_drainer.py); only a burst past the quota reaches it: tests/e2e/"
    "test_quota_burst.py (its own stack) and tests/functional/test_pacing.py",
    (
        "on_trigger",
        "storage.objects.get",
        "bucket:state:manifests/",
    ): "reads a window's manifest back when a close that crashed after writing it is resumed "
    "(shared/triggers/); a clean close never needs it",
    (
        "on_trigger",
        "pubsub.topics.publish",
        "topic:ops_alerts",
    ): "trigger_failed alerts, sent only when a window's request cannot render or fails the "
    "policy; this scenario's triggers render valid requests (tests/functional/test_triggers.py "
    "covers the alert)",
    (
        "submit_job",
        "aiplatform.customJobs.cancel",
        "project",
    ): "cancels a second job of one attempt as a stray (shared/submit.py, shared/deciding/strays.py); the "
    "tests make sure no second job exists, so the path is only reached in unit tests with fakes",
    (
        "on_job_event",
        "aiplatform.customJobs.cancel",
        "project",
    ): "cancels a stray job (shared/deciding/strays.py), a job with a request's labels the ledger does not "
    "record; this scenario makes none (tests/integration/test_exactly_once.py does)",
    ("reconcile", "aiplatform.customJobs.cancel", "project"): "as for on_job_event (job_controller role)",
    (
        "on_job_event",
        "aiplatform.customJobs.list",
        "project",
    ): "on_job_event shares the job_controller role with reconcile and calls no list today "
    "(shared/observe.py finds jobs through the ledger's index); left to the lead's stray-job "
    "change, which may list: split the role if it does not",
    (
        "reconcile",
        "aiplatform.customJobs.list",
        "project",
    ): "reconcile looks up the job of a claim left without one past the lease (a submit that "
    "crashed mid-create) to adopt it; reached in tests/e2e/test_chaos.py, not here",
    (
        "submit_job",
        "aiplatform.customJobs.get",
        "project",
    ): "a delivery that takes over a stale claim looks the job up (list) and reads it (get) before "
    "creating; reached in tests/e2e/test_chaos.py (its own stacks), not here",
    ("submit_job", "aiplatform.customJobs.list", "project"): "as customJobs.get",
    (
        "submit_job",
        "iam.serviceAccounts.actAs",
        "sa:training",
    ): "jobs run as the training service account in production (Settings.check_deployable); the "
    "stack's requests name none (its Vertex emulator has no IAM), so no created job shows it",
    **{
        ("prune_checkpoints", permission, "bucket:state:alerts/"): "the alerts log grant is the ledger "
        "writer role, of which prune_checkpoints uses create and overwrite (an entry before each alert "
        "it publishes); it reads the state bucket through its viewer role"
        for permission in ("storage.objects.get", "storage.objects.list")
    },
    (
        "prune_checkpoints",
        "storage.objects.get",
        "bucket:checkpoints",
    ): "reads TensorFlow's `checkpoint` index file when a folder has one (shared/pruning/"
    "checkpoints.py); the stack's trainer writes COMMITTED markers, so only the functional "
    "prune tests reach it",
}


# ---------------------------------------------------------------------------------------------
# What Terraform grants, per function: (permission, resource) with resource one of
# "bucket:state", "bucket:state:<prefix>", "bucket:checkpoints", "topic:<topology key>",
# "project" (Vertex AI has no per-job IAM), "sa:training".
# ---------------------------------------------------------------------------------------------


def terraform_grants() -> dict[str, set[tuple[str, str]]]:
    config = module_config()
    roles = {
        name: set(config.resource("google_project_iam_custom_role", name)["permissions"])
        for name in (
            "job_submitter",
            "job_controller",
            "ledger_writer",
            "checkpoint_pruner",
            "manifest_writer",
            "marker_noter",
        )
    }
    # The shapes this function relies on (iam.tf); a change there should change this test too.
    ledger = config.resource("google_storage_bucket_iam_member", "ledger")
    assert ledger["role"] == (
        '${each.value.ledger == "read_write" ? google_project_iam_custom_role.ledger_writer.id : "roles/storage.objectViewer"}'
    )
    assert config.resource("google_storage_bucket_iam_member", "state_prefix_writer")["role"] == (
        "${google_project_iam_custom_role.ledger_writer.id}"
    )
    assert config.resource("google_project_iam_member", "vertex")["role"] == (
        '${each.value.vertex == "submitter" ? google_project_iam_custom_role.job_submitter.id : '
        "google_project_iam_custom_role.job_controller.id}"
    )
    grants: dict[str, set[tuple[str, str]]] = {}
    for fn, access in config.locals["function_access"].items():
        granted: set[tuple[str, str]] = set()
        if access["ledger"] != "none":
            ledger_perms = (
                roles["ledger_writer"] if access["ledger"] == "read_write" else PREDEFINED["roles/storage.objectViewer"]
            )
            granted |= {(p, "bucket:state") for p in ledger_perms}
        if access["ledger"] != "read_write" and access["state_prefix"]:
            granted |= {(p, f"bucket:state:{access['state_prefix']}") for p in roles["ledger_writer"]}
        if access["ledger"] == "read_write":  # an active marker's status, noted by a metadata patch
            prefix = config.locals["active_index_prefix"]
            granted |= {(p, f"bucket:state:{prefix}") for p in roles["marker_noter"]}
        if access["ledger"] == "read" and "ops_alerts" in access["publishes"]:  # the alerts log
            prefix = config.locals["alerts_log_prefix"]
            granted |= {(p, f"bucket:state:{prefix}") for p in roles["ledger_writer"]}
        if access["manifests"]:
            # the state bucket's manifests/ only (shared/requests/envelope.py manifest_path)
            prefix = config.locals["manifests_prefix"]
            granted |= {(p, f"bucket:state:{prefix}") for p in roles["manifest_writer"]}
        if access["checkpoint"] == "prune":
            granted |= {(p, "bucket:checkpoints") for p in roles["checkpoint_pruner"]}
        if access["vertex"]:
            role = roles["job_submitter" if access["vertex"] == "submitter" else "job_controller"]
            granted |= {(p, "project") for p in role}
        granted |= {("pubsub.topics.publish", f"topic:{topic}") for topic in access["publishes"]}
        if access["act_as"]:
            granted.add(("iam.serviceAccounts.actAs", "sa:training"))
        grants[fn] = granted
    return grants


# ---------------------------------------------------------------------------------------------
# What the functions called.
# ---------------------------------------------------------------------------------------------


def used_permissions(stack, calls: list[dict[str, str]]) -> set[tuple[str, str, str]]:
    """(permission, resource, object prefix) of each recorded call."""
    buckets = {stack.settings.state_bucket: "state", stack.settings.checkpoint_bucket: "checkpoints"}
    topics = {TOPOLOGY.topic_name(key): key for key in TOPOLOGY.topic_keys}
    used: set[tuple[str, str, str]] = set()
    for call in calls:
        if call["service"] == "storage":
            for permission in STORAGE_PERMISSIONS[call["method"]]:
                used.add(
                    (permission, f"bucket:{buckets.get(call['resource'], call['resource'])}", call.get("prefix", ""))
                )
        elif call["service"] == "pubsub":
            # A topic outside the deployment's is a requester's notify topic (docs/requests.md).
            used.add(("pubsub.topics.publish", f"topic:{topics.get(call['resource'], REQUESTER_TOPIC)}", ""))
        elif call["service"] == "aiplatform":
            used.add((f"aiplatform.{call['method']}", "project", ""))
        elif call["service"] == "iam":
            training = stack.settings.training_service_account
            used.add((f"iam.{call['method']}", "sa:training" if call["resource"] == training else call["resource"], ""))
        else:
            raise AssertionError(f"unknown recorded service: {call}")
    return used


def covers(grant: tuple[str, str], use: tuple[str, str, str]) -> bool:
    permission, resource = grant
    used_permission, used_resource, prefix = use
    if permission != used_permission:
        return False
    if resource == used_resource:
        return True
    # A grant conditioned on an object prefix covers the calls on objects under it.
    base, _, condition = resource.partition(":")[2].partition(":")
    return bool(condition) and used_resource == f"bucket:{base}" and prefix.startswith(condition)


def read_calls(directory: Path, function: str) -> list[dict[str, str]]:
    path = directory / f"{function}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# ---------------------------------------------------------------------------------------------
# The scenario: every function's publishes and Vertex paths, once.
# ---------------------------------------------------------------------------------------------


def drive_every_path(stack) -> None:
    from tests.support.reconcile_passes import passes_until
    from tests.support.stack_events import log_entry, new_request_id, set_log_sink, submit

    ledger = stack.ledger()
    # on_job_event decides: a re-queue (publish job-requests), a success (publish the prune
    # request to maintenance; prune_checkpoints prunes one request and alerts), a failure (alert).
    by_events = {
        new_request_id("perm-ev-requeue"): RequestStatus.SUCCEEDED,
        new_request_id("perm-ev-bug"): RequestStatus.FAILED,
    }
    requeue, bug = by_events
    submit(stack, requeue, preemptions=7, after_seconds=0.3, steps=100)
    submit(stack, bug, fail_at_step=5)
    # submit_job rejects (alert on ops-alerts).
    stack.publish("job_requests", b"not a request")
    # on_job_event gets a line of a job spotjobs does not know: its index entry is missing (404).
    foreign = f"projects/{stack.options.project}/locations/{stack.options.location}/customJobs/424242424242"
    stack.publish("job_events", log_entry(foreign, "Job is running.", "perm-foreign-1"))

    def settled(expected: dict[str, RequestStatus]) -> bool:
        done = all((r := ledger.get(rid)) is not None and r.status == status for rid, status in expected.items())
        if not done:
            time.sleep(1.0)
        return done

    stack.wait_for(lambda: settled(by_events), 150, "on_job_event's decisions")
    # reconcile decides the same with the log sink off.
    by_reconcile = {
        new_request_id("perm-rc-requeue"): RequestStatus.SUCCEEDED,
        new_request_id("perm-rc-bug"): RequestStatus.FAILED,
    }
    rc_requeue, rc_bug = by_reconcile
    set_log_sink(stack, False)
    try:
        submit(stack, rc_requeue, preemptions=7, after_seconds=0.3, steps=100)
        submit(stack, rc_bug, fail_at_step=5)
        passes_until(stack, lambda: settled(by_reconcile), "reconcile's decisions", timeout=150)
    finally:
        set_log_sink(stack, True)
    # A prune of every request.
    message_id = stack.publish("maintenance", json.dumps({"task": "prune"}).encode(), task="prune")
    stack.wait_for(
        lambda: [
            line
            for line in stack.function_logs("prune_checkpoints")
            if line.get("message_id") == message_id and line.get("event") in ("prune_summary", "run_in_progress")
        ],
        120,
        "the prune run",
    )
    # The one-request prunes the successes asked for, and their reports.
    stack.wait_for(
        lambda: (
            {requeue, rc_requeue}
            <= {
                line.get("request_id")
                for line in stack.function_logs("prune_checkpoints")
                if line.get("event") == "prune_summary"
            }
        ),
        120,
        "the one-request prunes",
    )
    # on_trigger: a trigger over the data bucket; objects land, a window closes on a tick, the
    # request is published with its manifest.
    drive_a_trigger(stack)
    time.sleep(2)  # let the last publishes land in the records


def drive_a_trigger(stack) -> None:
    from tests.support.stack_triggers import (
        apply,
        at_window_start,
        definition,
        tick,
        trigger_requests,
    )

    name = f"perm-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}/incoming/"
    apply(stack, definition(name, {"gcs": {"bucket": stack.options.data_bucket, "prefix": prefix}}))
    data = stack.storage().bucket(stack.options.data_bucket)
    at_window_start(20, room=14)
    for i in range(3):
        data.blob(f"{prefix}part-{i}.csv").upload_from_string(f"row {i}\n")
    time.sleep(max(0.0, 20 - time.time() % 20) + 1.5)  # the window ends, and settles
    tick(stack)
    stack.wait_for(lambda: trigger_requests(stack, name), 60, "the trigger's request")


def scenario_done(api_calls_dir: Path) -> Path:
    return api_calls_dir / "every-path-driven"


def test_the_scenario_reaches_every_path(stack, api_calls_dir: Path) -> None:
    drive_every_path(stack)
    scenario_done(api_calls_dir).touch()


@pytest.mark.run_last
def test_each_function_calls_what_terraform_grants_and_nothing_more(stack, api_calls_dir: Path) -> None:
    if not scenario_done(api_calls_dir).exists():  # run alone
        drive_every_path(stack)
    grants = terraform_grants()
    assert set(grants) == set(TOPOLOGY.functions)
    problems: list[str] = []
    table: list[str] = []
    for function, granted in sorted(grants.items()):
        used = used_permissions(stack, read_calls(api_calls_dir, function))
        assert used, f"{function} recorded no call: is SPOTJOBS_RECORD_API_CALLS reaching it?"
        for use in sorted(used):
            if use[:2] == ("pubsub.topics.publish", f"topic:{REQUESTER_TOPIC}") and function in NOTIFYING:
                continue  # granted by the requester on their own topic, not by Terraform
            if not any(covers(grant, use) for grant in granted):
                problems.append(f"{function} calls {use[0]} on {use[1]} {use[2]!r} without a grant")
        for grant in sorted(granted):
            hit = any(covers(grant, use) for use in used)
            table.append(f"{function:18} {grant[0]:32} {grant[1]:28} {'used' if hit else 'UNUSED'}")
            if not hit and (function, *grant) not in UNUSED_ALLOWED:
                problems.append(f"{function} is granted {grant[0]} on {grant[1]} and never needs it")
    print("\n".join(table))
    assert not problems, "\n".join(problems)


def test_the_allowlist_holds_only_grants_that_exist() -> None:
    grants = terraform_grants()
    for function, permission, resource in UNUSED_ALLOWED:
        assert (permission, resource) in grants[function], (function, permission, resource)


def test_recording_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Zero cost in production: without the variable the clients are the libraries' own and the
    recording module is not even imported."""
    import subprocess
    import sys

    probe = (
        "import os, sys\n"
        "os.environ.pop('SPOTJOBS_RECORD_API_CALLS', None)\n"
        "os.environ['STORAGE_EMULATOR_HOST'] = 'http://127.0.0.1:9'\n"
        "from shared.adapters import clients\n"
        "client = clients.storage_client()\n"
        "print(type(client).__module__, 'shared.adapters.api_recording' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.stdout.split() == ["google.cloud.storage.client", "False"], result.stderr
