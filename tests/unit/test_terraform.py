"""Structural tests of terraform/: what `terraform apply` would build, checked without a cloud account.

The module is parsed with python-hcl2 (tests/unit/test_terraform_hcl.py) and these tests assert the
properties the design depends on: one topology (shared/topology.json) for the embedded stack and
production, one service account per function, no primitive or public IAM, retry and a dead-letter
path on every trigger, the log sink able to publish, hardened buckets, settings that match
shared/settings.py. `terraform fmt -check` runs when the terraform binary is installed.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from shared.settings import Settings
from shared.topology import TOPOLOGY, TOPOLOGY_FILE
from tests.support.terraform import (
    TERRAFORM_DIR,
    build_config,
    entry_points,
    module_config,
    tf_files,
    topology,
)

IAM_RESOURCE = re.compile(r"^google_.*_iam_(member|binding|policy)$")
PRIMITIVE_ROLES = {"roles/owner", "roles/editor", "roles/viewer"}
PUBLIC_MEMBERS = ("allUsers", "allAuthenticatedUsers")
TOPIC_REF = re.compile(r'(?:local\.topics|google_pubsub_topic\.topics)\["([a-z_]+)"\]')


# ---------------------------------------------------------------------------------------------
# One topology for the embedded stack and Terraform
# ---------------------------------------------------------------------------------------------


def test_terraform_reads_the_same_topology_file_as_the_embedded_stack() -> None:
    config = module_config()
    assert config.locals["topology"] == '${jsondecode(file("${path.module}/../shared/topology.json"))}'
    # path.module is terraform/, so that path is the file shared/topology.py loads.
    assert (TERRAFORM_DIR / ".." / "shared" / "topology.json").resolve() == TOPOLOGY_FILE.resolve()
    assert TOPOLOGY.raw == topology()


def test_embedded_stack_wires_the_same_topology_and_push_path() -> None:
    import devstack.pubsub_wiring as wiring
    import devstack.stack as stack

    # The embedded stack creates its topics and subscriptions from the same TOPOLOGY object...
    assert wiring.TOPOLOGY is TOPOLOGY
    # ...and pushes to <function url>/projects/P/topics/T, the path Terraform's push endpoints use.
    options = stack.StackOptions()
    topic_path = stack.Stack.topic_path(type("S", (), {"options": options})(), "job_requests")
    assert topic_path == f"projects/{options.project}/topics/{topology()['topics']['job_requests']['name']}"
    endpoint = module_config().resource("google_pubsub_subscription", "triggers")["push_config"][0]["push_endpoint"]
    assert endpoint.endswith("/projects/${var.project_id}/topics/${local.topics[each.value.topic].name}")


def test_topology_sections_feed_the_terraform_locals() -> None:
    locals_ = module_config().locals
    assert locals_["topics"] == "${local.topology.topics}"
    assert locals_["routes"] == "${local.topology.functions}"
    assert locals_["trigger"] == "${local.topology.trigger_subscription}"
    assert locals_["readers"] == "${local.topology.pull_subscriptions}"
    assert locals_["dead_letter_topic"] == "${local.trigger.dead_letter_topic}"


def test_pubsub_resources_are_built_from_the_topology_not_from_literals() -> None:
    config = module_config()
    topics = config.resource("google_pubsub_topic", "topics")
    assert topics["for_each"] == "${local.topics}"
    assert topics["name"] == "${each.value.name}"
    assert topics["message_retention_duration"] == "${each.value.message_retention_seconds}s"
    triggers = config.resource("google_pubsub_subscription", "triggers")
    assert triggers["for_each"] == "${local.routes}"
    assert triggers["name"] == "${each.value.subscription}"
    assert triggers["topic"] == "${google_pubsub_topic.topics[each.value.topic].id}"
    readers = config.resource("google_pubsub_subscription", "readers")
    assert readers["for_each"] == "${local.readers}"
    assert readers["name"] == "${each.key}"
    assert readers["ack_deadline_seconds"] == "${each.value.ack_deadline_seconds}"


def test_no_topic_or_subscription_name_is_spelled_in_terraform() -> None:
    topo = topology()
    names = {t["name"] for t in topo["topics"].values()}
    names |= {f["subscription"] for f in topo["functions"].values()}
    names |= set(topo["pull_subscriptions"])
    # A name that is also a key ("maintenance") cannot be told apart from the key Terraform
    # references it by; the key test below covers those.
    names -= set(topo["topics"]) | set(topo["functions"])
    text = module_config().text()
    for name in sorted(names):
        assert f'"{name}"' not in text, f"{name!r} is spelled in terraform/: take it from local.topology"


def test_every_topology_key_terraform_uses_exists_in_the_json() -> None:
    topo = topology()
    text = module_config().text()
    used_topics = set(TOPIC_REF.findall(text))
    assert used_topics, "expected topic references by topology key"
    assert used_topics <= set(topo["topics"]), used_topics - set(topo["topics"])
    used_trigger = set(re.findall(r"local\.trigger\.([a-z_]+)", text))
    assert used_trigger <= set(topo["trigger_subscription"]), used_trigger - set(topo["trigger_subscription"])
    # Attributes read from each route / reader entry.
    for entry in topo["functions"].values():
        assert set(entry) == {"topic", "subscription", "filter"}
        assert entry["topic"] in topo["topics"]
    for entry in topo["pull_subscriptions"].values():
        assert {"topic", "ack_deadline_seconds"} <= set(entry)
        assert entry["topic"] in topo["topics"]
    assert topo["trigger_subscription"]["dead_letter_topic"] in topo["topics"]
    for topic in topo["topics"].values():
        assert {"name", "message_retention_seconds"} <= set(topic)


TASK_FILTER = re.compile(r'^attributes\.task = "([a-z_]+)"$')


def _task_filters() -> dict[str, str]:
    """Entry point -> the `task` its trigger subscription's filter admits (filtered routes only)."""
    found = {}
    for fn, route in topology()["functions"].items():
        if route["filter"] is not None:
            match = TASK_FILTER.match(route["filter"])
            assert match, f'{fn}: filter {route["filter"]!r} is not attributes.task = "..."'
            found[fn] = match.group(1)
    return found


def test_functions_sharing_a_topic_each_get_only_their_own_task() -> None:
    topo = topology()
    by_topic: dict[str, list[str]] = {}
    for fn, route in topo["functions"].items():
        by_topic.setdefault(route["topic"], []).append(fn)
        # Pub/Sub: a filter is at most 256 bytes.
        assert route["filter"] is None or len(route["filter"].encode()) <= 256, fn
    tasks = _task_filters()
    for topic, functions in by_topic.items():
        if len(functions) > 1:
            # Every subscriber of a shared topic filters, and no message matches two filters.
            assert all(fn in tasks for fn in functions), f"{topic}: {functions} share it unfiltered"
            values = [tasks[fn] for fn in functions]
            assert len(set(values)) == len(values), f"{topic}: overlapping filters {values}"
    assert by_topic["maintenance"] == ["reconcile", "prune_checkpoints"]
    assert tasks == {"reconcile": "reconcile", "prune_checkpoints": "prune"}
    # The tasks the code acts on are the ones the filters admit.
    from shared.reconcile import RECONCILE_TASK

    assert tasks["reconcile"] == RECONCILE_TASK


def test_terraform_trigger_subscriptions_carry_the_topology_filter() -> None:
    config = module_config()
    assert config.resource("google_pubsub_subscription", "triggers")["filter"] == "${each.value.filter}"
    assert "filter" not in config.resource("google_pubsub_subscription", "readers")
    # A changed filter replaces the subscription (same name): its IAM member must follow it.
    subscriber = config.resource("google_pubsub_subscription_iam_member", "dead_letter_source_subscriber")
    assert subscriber["lifecycle"][0]["replace_triggered_by"] == ["${google_pubsub_subscription.triggers[each.key]}"]
    readme = (TERRAFORM_DIR / "README.md").read_text()
    assert "filter" in readme and "replace" in readme


def test_the_scheduler_sets_the_attribute_the_maintenance_filters_match() -> None:
    config = module_config()
    target = config.resource("google_cloud_scheduler_job", "maintenance")["pubsub_target"][0]
    assert target["attributes"] == {"task": "${each.key}"}
    scheduled = set(config.locals["maintenance_tasks"])
    admitted = {task for fn, task in _task_filters().items() if topology()["functions"][fn]["topic"] == "maintenance"}
    assert scheduled == admitted, "every scheduled task must reach exactly one function"


def _maintenance_publishes(package: str) -> list[tuple[str, int, set[str]]]:
    """(file, line, keyword names) of every `.publish(<something naming maintenance>, ...)` call."""
    import ast

    found = []
    for path in sorted((TERRAFORM_DIR.parent / package).rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "publish"
                and node.args
                and "maintenance" in ast.unparse(node.args[0])
            ):
                found.append((str(path.relative_to(TERRAFORM_DIR.parent)), node.lineno, {k.arg for k in node.keywords}))
    return found


def test_every_python_publisher_to_maintenance_sets_the_task_attribute() -> None:
    calls = _maintenance_publishes("shared") + _maintenance_publishes("devstack")
    assert calls, "expected the prune request and the embedded scheduler"
    missing = [f"{file}:{line}" for file, line, keywords in calls if "task" not in keywords]
    assert not missing, f"publish to maintenance without task=...: {missing}"


def test_embedded_stack_creates_the_filtered_subscriptions() -> None:
    import inspect

    import devstack.pubsub_wiring as wiring

    source = inspect.getsource(wiring.create_subscriptions)
    assert '"filter"' in source, "devstack/pubsub_wiring.py must pass the topology's filter to create_subscription"


def test_topology_settings_are_valid_for_pubsub() -> None:
    topo = topology()
    trigger = topo["trigger_subscription"]
    assert 10 <= trigger["ack_deadline_seconds"] <= 600
    assert 0 <= trigger["minimum_backoff_seconds"] <= trigger["maximum_backoff_seconds"] <= 600
    assert 5 <= trigger["max_delivery_attempts"] <= 100
    for topic in topo["topics"].values():
        # Topic retention: 10 minutes to 31 days.
        assert 600 <= topic["message_retention_seconds"] <= 31 * 86400
    required = {"job_requests", "job_events", "ops_alerts", "maintenance", "dead_letter"}
    assert required <= set(topo["topics"])


def test_settings_default_topic_names_come_from_the_topology() -> None:
    defaults = Settings()
    for field_name, key in [
        ("job_requests_topic", "job_requests"),
        ("job_events_topic", "job_events"),
        ("ops_alerts_topic", "ops_alerts"),
        ("maintenance_topic", "maintenance"),
    ]:
        assert getattr(defaults, field_name) == topology()["topics"][key]["name"]


# ---------------------------------------------------------------------------------------------
# Functions and their triggers
# ---------------------------------------------------------------------------------------------


def test_each_function_has_its_own_service_account() -> None:
    config = module_config()
    functions = config.resource("google_cloudfunctions2_function", "functions")
    service = functions["service_config"][0]
    assert service["service_account_email"] == "${google_service_account.functions[each.key].email}"
    accounts = config.resource("google_service_account", "functions")
    assert accounts["for_each"] == functions["for_each"] == "${local.routes}"
    assert "${local.function_short[each.key]}" in accounts["account_id"]
    short = config.locals["short_ids"]
    assert set(short) == set(entry_points()), "every entry point needs a short id for its service accounts"
    assert len(set(short.values())) == len(short), "short ids must be unique"
    # Push identities are separate from runtime identities.
    pushers = config.resource("google_service_account", "pushers")
    assert pushers["for_each"] == "${local.routes}"
    assert pushers["account_id"] != accounts["account_id"]


def test_service_account_ids_fit_the_30_character_limit() -> None:
    config = module_config()
    longest_prefix = 15  # var.name_prefix validation
    for name in ("functions", "pushers"):
        template = config.resource("google_service_account", name)["account_id"]
        for short in config.locals["short_ids"].values():
            account_id = template.replace("${var.name_prefix}", "x" * longest_prefix).replace(
                "${local.function_short[each.key]}", short
            )
            assert 6 <= len(account_id) <= 30, account_id
    for name in ("training", "build"):
        account_id = config.resource("google_service_account", name)["account_id"]
        assert len(account_id.replace("${var.name_prefix}", "x" * longest_prefix)) <= 30


def test_functions_are_internal_python312_and_sized_by_variables() -> None:
    config = module_config()
    function = config.resource("google_cloudfunctions2_function", "functions")
    build = function["build_config"][0]
    assert build["runtime"] == "${var.runtime}"
    assert config.variables["runtime"]["default"] == "python312"
    assert build["source"][0]["storage_source"][0]["object"] == "${google_storage_bucket_object.source.name}"
    service = function["service_config"][0]
    assert service["ingress_settings"] == "ALLOW_INTERNAL_ONLY"
    for attribute in (
        "available_memory",
        "available_cpu",
        "timeout_seconds",
        "max_instance_request_concurrency",
        "max_instance_count",
        "min_instance_count",
    ):
        assert service[attribute].startswith("${local.function_config[each.key]."), attribute
    assert "event_trigger" not in function, "triggers are push subscriptions (see pubsub.tf)"


def test_source_object_is_named_by_the_zip_hash() -> None:
    config = module_config()
    obj = config.resource("google_storage_bucket_object", "source")
    assert "${data.archive_file.source.output_md5}" in obj["name"]
    assert obj["source"] == "${data.archive_file.source.output_path}"


def test_source_zip_allow_list_leaves_out_development_files() -> None:
    globs = module_config().locals["source_globs"]
    assert "requirements.txt" in globs
    for pattern in globs:
        top = pattern.split("/", 1)[0]
        assert top in {"requirements.txt", "functions", "shared"} or pattern.startswith("kit/src/spotjobs_kit/"), (
            pattern
        )
    for excluded in ("tests", "terraform", "devstack", "bench", ".venv", ".git", "__pycache__", "egg-info"):
        assert not any(excluded in pattern for pattern in globs), excluded


def test_every_trigger_retries_and_has_a_dead_letter_path() -> None:
    config = module_config()
    trigger = config.resource("google_pubsub_subscription", "triggers")
    retry = trigger["retry_policy"][0]
    assert retry["minimum_backoff"] == "${local.trigger.minimum_backoff_seconds}s"
    assert retry["maximum_backoff"] == "${local.trigger.maximum_backoff_seconds}s"
    dead_letter = trigger["dead_letter_policy"][0]
    assert dead_letter["dead_letter_topic"] == "${google_pubsub_topic.topics[local.dead_letter_topic].id}"
    assert dead_letter["max_delivery_attempts"] == "${local.trigger.max_delivery_attempts}"
    assert trigger["expiration_policy"][0]["ttl"] == "", "trigger subscriptions must never expire"
    push = trigger["push_config"][0]
    assert push["push_endpoint"].startswith(
        "${google_cloudfunctions2_function.functions[each.key].service_config[0].uri}"
    )
    assert push["oidc_token"][0]["service_account_email"] == "${google_service_account.pushers[each.key].email}"
    # The dead-letter topic has a subscription, so dead letters are kept.
    topo = topology()
    dead_letter_topic = topo["trigger_subscription"]["dead_letter_topic"]
    assert any(sub["topic"] == dead_letter_topic for sub in topo["pull_subscriptions"].values())
    # Any Eventarc trigger that might be added must retry.
    for name, function in config.of_type("google_cloudfunctions2_function").items():
        for event_trigger in function.get("event_trigger", []):
            assert event_trigger.get("retry_policy") == "RETRY_POLICY_RETRY", name


def test_pubsub_service_agent_can_dead_letter() -> None:
    config = module_config()
    assert config.locals["pubsub_service_agent"] == "serviceAccount:${google_project_service_identity.pubsub.email}"
    identity = config.resource("google_project_service_identity", "pubsub")
    assert identity["service"] == "pubsub.googleapis.com"
    publisher = config.resource("google_pubsub_topic_iam_member", "dead_letter_publisher")
    assert publisher["topic"] == "${google_pubsub_topic.topics[local.dead_letter_topic].name}"
    assert publisher["role"] == "roles/pubsub.publisher"
    assert publisher["member"] == "${local.pubsub_service_agent}"
    subscriber = config.resource("google_pubsub_subscription_iam_member", "dead_letter_source_subscriber")
    assert subscriber["for_each"] == "${google_pubsub_subscription.triggers}"
    assert subscriber["role"] == "roles/pubsub.subscriber"
    assert subscriber["member"] == "${local.pubsub_service_agent}"


def test_only_each_push_identity_may_invoke_its_function() -> None:
    config = module_config()
    invokers = [
        body
        for (rtype, _), body in config.resources.items()
        if IAM_RESOURCE.match(rtype) and body.get("role") in ("roles/run.invoker", "roles/cloudfunctions.invoker")
    ]
    assert len(invokers) == 1
    invoker = invokers[0]
    assert invoker["for_each"] == "${local.routes}"
    assert invoker["name"] == "${google_cloudfunctions2_function.functions[each.key].name}"
    assert invoker["member"] == "serviceAccount:${google_service_account.pushers[each.key].email}"
    tokens = config.resource("google_service_account_iam_member", "pubsub_mints_push_tokens")
    assert tokens["service_account_id"] == "${google_service_account.pushers[each.key].name}"
    assert tokens["role"] == "roles/iam.serviceAccountTokenCreator"


def test_trigger_ack_deadline_covers_the_function_timeout() -> None:
    expr = module_config().locals["trigger_ack_deadline"]
    assert "local.trigger.ack_deadline_seconds" in expr
    assert "local.function_config[fn].timeout_seconds" in expr
    assert "min(600" in expr


# ---------------------------------------------------------------------------------------------
# IAM
# ---------------------------------------------------------------------------------------------


def _iam_resources() -> dict[tuple[str, str], dict]:
    configs = [module_config()] + [build_config([p]) for p in tf_files() if p.parent != TERRAFORM_DIR]
    found = {}
    for config in configs:
        for key, body in config.resources.items():
            if IAM_RESOURCE.match(key[0]):
                found[key] = body
    return found


def test_no_primitive_roles_and_no_public_members() -> None:
    resources = _iam_resources()
    assert resources
    for (rtype, name), body in resources.items():
        assert not rtype.endswith(("_iam_binding", "_iam_policy")), (
            f"{rtype}.{name}: authoritative IAM would remove other principals' grants; use *_iam_member"
        )
        assert body["role"] not in PRIMITIVE_ROLES, f"{rtype}.{name} grants {body['role']}"
        members = body.get("members", []) + [body.get("member", "")]
        for member in members:
            assert not any(public in member for public in PUBLIC_MEMBERS), f"{rtype}.{name}: {member}"
    for path in tf_files():
        text = path.read_text()
        for role in PRIMITIVE_ROLES:
            assert f'"{role}"' not in text, f"{path}: {role}"


def test_custom_roles_hold_only_the_permissions_used() -> None:
    config = module_config()
    expected = {
        "job_submitter": {
            "aiplatform.customJobs.create",
            "aiplatform.customJobs.get",
            "aiplatform.customJobs.list",
            "aiplatform.customJobs.cancel",
        },
        "job_controller": {"aiplatform.customJobs.get", "aiplatform.customJobs.list", "aiplatform.customJobs.cancel"},
        "ledger_writer": {
            "storage.objects.create",
            "storage.objects.delete",
            "storage.objects.get",
            "storage.objects.list",
        },
        # A status change (`spotjobs cancel`'s too) is noted on the request's active marker: metadata only.
        "marker_noter": {"storage.objects.update"},
        "checkpoint_pruner": {"storage.objects.delete", "storage.objects.get", "storage.objects.list"},
        # the deciders: a timeout without a commit heard reads its checkpoint folder
        "checkpoint_reader": {"storage.objects.get", "storage.objects.list"},
        # roles/run.builder's one Cloud Storage permission (the source), see iam.tf.
        "build_source_reader": {"storage.objects.get"},
        # on_trigger's window manifests: written once, read back on a resumed close.
        "manifest_writer": {"storage.objects.create", "storage.objects.get"},
        # training jobs read their trigger's manifest (SPOTJOBS_MANIFEST_URI).
        "manifest_reader": {"storage.objects.get"},
    }
    roles = config.of_type("google_project_iam_custom_role")
    assert set(roles) == set(expected)
    for name, permissions in expected.items():
        assert set(roles[name]["permissions"]) == permissions, name


def test_the_ledgers_writers_may_note_a_markers_status_and_the_alerts_log_is_writable_by_its_writers() -> None:
    """A status change patches its active marker's metadata (storage.objects.update), `spotjobs
    cancel` included; every publisher of an outbox alert may write its alerts log entry first."""
    from shared.deciding.alert_log import ALERTS_PREFIX
    from shared.ledger.store import ACTIVE_PREFIX

    config = module_config()
    assert config.locals["active_index_prefix"] == ACTIVE_PREFIX
    assert config.locals["alerts_log_prefix"] == ALERTS_PREFIX
    for grant in ("marker_noter", "cancellers_note_marker_status"):
        noters = config.resource("google_storage_bucket_iam_member", grant)
        assert noters["role"] == "${google_project_iam_custom_role.marker_noter.id}"
        assert noters["condition"][0]["expression"] == (
            'resource.name.startsWith("projects/_/buckets/${google_storage_bucket.state.name}/objects/'
            '${local.active_index_prefix}")'
        )
    assert 'a.ledger == "read_write"' in config.resource("google_storage_bucket_iam_member", "marker_noter")["for_each"]
    log = config.resource("google_storage_bucket_iam_member", "alerts_log_writer")
    assert log["role"] == "${google_project_iam_custom_role.ledger_writer.id}"
    assert "/objects/${local.alerts_log_prefix}" in log["condition"][0]["expression"]
    # Who publishes ops alerts without writing the ledger gets the alerts log, and only it.
    access = config.locals["function_access"]
    chosen = [fn for fn, a in access.items() if a["ledger"] == "read" and "ops_alerts" in a["publishes"]]
    assert chosen == ["prune_checkpoints"]
    assert 'a.ledger == "read" && contains(a.publishes, "ops_alerts")' in log["for_each"]


def test_function_access_is_least_privilege() -> None:
    config = module_config()
    access = config.locals["function_access"]
    assert set(access) == set(entry_points())
    assert access["submit_job"]["publishes"] == ["job_requests", "ops_alerts"]
    assert access["submit_job"]["vertex"] == "submitter"
    assert access["submit_job"]["act_as"] is True
    for fn in ("on_job_event", "reconcile"):
        assert sorted(access[fn]["publishes"]) == ["job_requests", "maintenance", "ops_alerts"]
        assert access[fn]["vertex"] == "controller"
        assert access[fn]["ledger"] == "read_write"
        assert access[fn]["act_as"] is False
    prune = access["prune_checkpoints"]
    assert prune == {
        "ledger": "read",
        "state_prefix": "maintenance/",
        "vertex": None,
        "checkpoint": "prune",
        "manifests": False,
        "publishes": ["ops_alerts"],
        "act_as": False,
    }
    for fn in ("submit_job", "on_job_event", "reconcile"):
        assert access[fn]["state_prefix"] is None
        assert access[fn]["checkpoint"] == "read"  # shared/deciding/folder_progress.py
    # The only object prune_checkpoints writes in the state bucket is its cursor.
    from shared.ledger.cursors import cursor_path
    from shared.pruning.runner import PRUNE_TASK

    assert cursor_path(PRUNE_TASK).startswith(prune["state_prefix"])
    writer = config.resource("google_storage_bucket_iam_member", "state_prefix_writer")
    assert writer["bucket"] == "${google_storage_bucket.state.name}"
    assert "${each.value.state_prefix}" in writer["condition"][0]["expression"]
    for a in access.values():
        assert set(a["publishes"]) <= set(topology()["topics"])
    # Grants are scoped to resources: storage on buckets, Pub/Sub on topics, actAs on one account.
    ledger = config.resource("google_storage_bucket_iam_member", "ledger")
    assert ledger["bucket"] == "${google_storage_bucket.state.name}"
    pruner = config.resource("google_storage_bucket_iam_member", "checkpoint_pruner")
    assert pruner["bucket"] == "${google_storage_bucket.checkpoints.name}"
    reader = config.resource("google_storage_bucket_iam_member", "checkpoint_reader")
    assert reader["bucket"] == "${google_storage_bucket.checkpoints.name}"
    assert reader["role"] == "${google_project_iam_custom_role.checkpoint_reader.id}"
    act_as = config.resource("google_service_account_iam_member", "submit_acts_as_training")
    assert act_as["service_account_id"] == "${google_service_account.training.name}"
    assert act_as["role"] == "roles/iam.serviceAccountUser"
    publishers = config.resource("google_pubsub_topic_iam_member", "function_publishers")
    assert publishers["role"] == "roles/pubsub.publisher"
    project_roles = {name: body["role"] for name, body in config.of_type("google_project_iam_member").items()}
    assert project_roles == {
        "vertex": (
            '${each.value.vertex == "submitter" ? google_project_iam_custom_role.job_submitter.id'
            " : google_project_iam_custom_role.job_controller.id}"
        ),
        "training_log_writer": "roles/logging.logWriter",
        "training_class_log_writer": "roles/logging.logWriter",
        "build_log_writer": "roles/logging.logWriter",
        "build_reads_gcf_sources": "${google_project_iam_custom_role.build_source_reader.id}",
    }
    condition = config.resource("google_project_iam_member", "build_reads_gcf_sources")["condition"][0]
    assert "gcf-v2-sources-" in condition["expression"]


def test_build_service_account_gets_what_googles_page_lists_and_no_more() -> None:
    """https://cloud.google.com/run/docs/configuring/services/build-service-account: roles/run.builder
    (artifact upload/download/delete, logEntries.create, source.repos.get, storage.objects.get).
    Granted as narrower pieces: log writer, writer on the one repository, objects.get on the source."""
    config = module_config()
    grants = sorted(
        (rtype, body["role"])
        for (rtype, _), body in config.resources.items()
        if IAM_RESOURCE.match(rtype) and "google_service_account.build.email" in body.get("member", "")
    )
    reader = "${google_project_iam_custom_role.build_source_reader.id}"
    assert grants == sorted(
        [
            ("google_artifact_registry_repository_iam_member", "roles/artifactregistry.writer"),
            ("google_project_iam_member", "roles/logging.logWriter"),
            ("google_project_iam_member", reader),
            ("google_storage_bucket_iam_member", reader),
        ]
    )
    # The project-level grant is conditioned to Cloud Functions' staging bucket.
    condition = config.resource("google_project_iam_member", "build_reads_gcf_sources")["condition"][0]
    assert "resource.name.startsWith" in condition["expression"]
    assert config.resource("google_storage_bucket_iam_member", "build_reads_source")["bucket"] == (
        "${google_storage_bucket.source.name}"
    )


def test_a_training_class_writes_only_its_own_prefix_and_the_shared_account_not_there() -> None:
    """Issue 32: a request class's jobs run as its own account, which may write only under its
    request id prefix; the shared account is excluded from every class's prefix; submit_job may
    act as each; the functions learn the classes as Settings reads them."""
    from shared.settings import Settings

    config = module_config()
    account = config.resource("google_service_account", "training_class")
    assert account["for_each"] == "${var.training_classes}"
    assert account["account_id"] == "${var.name_prefix}-tc-${each.key}"
    writes = config.resource("google_storage_bucket_iam_member", "training_class_checkpoints")
    assert (writes["for_each"], writes["role"]) == ("${var.training_classes}", "roles/storage.objectAdmin")
    assert writes["member"] == "serviceAccount:${google_service_account.training_class[each.key].email}"
    expression = writes["condition"][0]["expression"]
    assert 'resource.name.startsWith(\\"${local.checkpoint_objects}${each.value}\\")' in expression
    assert '${local.list_prefix}.startsWith(\\"${var.settings.checkpoint_prefix}/${each.value}\\")' in expression
    assert expression.count("startsWith") == 2
    excluded = config.locals["class_exclusions"]
    assert '!resource.name.startsWith(\\"${local.checkpoint_objects}${prefix}\\")' in excluded["objects"]
    assert '!${local.list_prefix}.startsWith(\\"${var.settings.checkpoint_prefix}/${prefix}\\")' in excluded["listing"]
    act_as = config.resource("google_service_account_iam_member", "submit_acts_as_training_class")
    assert act_as["service_account_id"] == "${google_service_account.training_class[each.value.class].name}"
    env = config.locals["infrastructure_env"]["SPOTJOBS_TRAINING_CLASSES"]
    assert (
        env
        == '${join(",", [for c, prefix in var.training_classes : "${prefix}=${google_service_account.training_class[c].email}"])}'
    )
    rendered = "vision-=spotjobs-tc-vision@p.iam.gserviceaccount.com"  # what that join makes of one class
    assert Settings.from_env({"SPOTJOBS_TRAINING_CLASSES": rendered}).training_class_accounts == {
        "vision-": "spotjobs-tc-vision@p.iam.gserviceaccount.com"
    }


def test_training_service_account_writes_only_the_checkpoint_prefix_and_reads_only_manifests() -> None:
    """Issue 32: a job writes its requests' folders (under the checkpoint prefix, where
    `output_dir_for` puts every one) and nothing else; it reads a trigger's manifest (where
    `manifest_uri` puts it) and nothing else of the state bucket; it writes logs."""
    from shared.requests.envelope import MANIFESTS_PREFIX
    from shared.settings import Settings
    from shared.triggers.render import manifest_uri

    config = module_config()
    grants = {
        name: body
        for (rtype, name), body in config.resources.items()
        if IAM_RESOURCE.match(rtype) and "google_service_account.training.email" in body.get("member", "")
    }
    assert {name: body["role"] for name, body in grants.items()} == {
        "training_checkpoints": "roles/storage.objectAdmin",
        "training_reads_manifests": "${google_project_iam_custom_role.manifest_reader.id}",
        "training_log_writer": "roles/logging.logWriter",
    }
    writes = grants["training_checkpoints"]
    assert writes["bucket"] == "${google_storage_bucket.checkpoints.name}"
    expression = writes["condition"][0]["expression"]
    # Object names under the prefix, and listings of prefixes under it, outside the training
    # classes' prefixes: nothing else.
    objects = config.locals["checkpoint_objects"]
    assert (
        objects
        == "projects/_/buckets/${google_storage_bucket.checkpoints.name}/objects/${var.settings.checkpoint_prefix}/"
    )
    assert config.locals["list_prefix"] == 'api.getAttribute("storage.googleapis.com/objectListPrefix", "")'
    assert 'resource.name.startsWith(\\"${local.checkpoint_objects}\\")${local.class_exclusions.objects}' in expression
    assert (
        '${local.list_prefix}.startsWith(\\"${var.settings.checkpoint_prefix}/\\")${local.class_exclusions.listing}'
        in expression
    )
    assert expression.count("startsWith") == 2
    settings = Settings()
    assert settings.output_dir_for("r1").startswith(f"gs://{settings.checkpoint_bucket}/{settings.checkpoint_prefix}/")
    reads = grants["training_reads_manifests"]
    assert reads["bucket"] == "${google_storage_bucket.state.name}"
    assert reads["condition"][0]["expression"] == (
        'resource.name.startsWith("projects/_/buckets/${google_storage_bucket.state.name}/objects/'
        '${local.manifests_prefix}")'
    )
    assert config.locals["manifests_prefix"] == MANIFESTS_PREFIX
    assert manifest_uri(settings, "trg-t-w1").startswith(f"gs://{settings.state_bucket}/{MANIFESTS_PREFIX}")


# ---------------------------------------------------------------------------------------------
# Log sink, buckets, schedules, monitoring
# ---------------------------------------------------------------------------------------------


def test_log_sink_writer_can_publish_to_job_events() -> None:
    config = module_config()
    sink = config.resource("google_logging_project_sink", "job_events")
    assert sink["destination"] == 'pubsub.googleapis.com/${google_pubsub_topic.topics["job_events"].id}'
    assert sink["unique_writer_identity"] is True
    assert sink["filter"] == "${trimspace(var.job_event_log_filter)}"
    writer = config.resource("google_pubsub_topic_iam_member", "sink_writer")
    assert writer["topic"] == '${google_pubsub_topic.topics["job_events"].name}'
    assert writer["role"] == "roles/pubsub.publisher"
    assert writer["member"] == "${google_logging_project_sink.job_events.writer_identity}"
    default_filter = config.variables["job_event_log_filter"]["default"]
    assert 'resource.type="ml_job"' in default_filter
    assert 'resource.labels.task_name="service"' in default_filter
    assert "severity>=ERROR" in default_filter
    # The trainer kit's lines, whichever payload Vertex stores a JSON stdout line in.
    from spotjobs_kit.lines import KEY, TAG

    assert f"jsonPayload.{KEY}.event:*" in default_filter
    assert f'textPayload:"{TAG}"' in default_filter


def test_every_bucket_is_uniform_and_not_public() -> None:
    buckets = module_config().of_type("google_storage_bucket")
    assert set(buckets) == {"state", "checkpoints", "source"}
    for name, bucket in buckets.items():
        assert bucket["uniform_bucket_level_access"] is True, name
        assert bucket["public_access_prevention"] == "enforced", name
        assert "versioning" in bucket, f"{name}: versioning must be an explicit choice"


def test_checkpoint_bucket_soft_delete_versioning_and_lifecycle() -> None:
    config = module_config()
    bucket = config.resource("google_storage_bucket", "checkpoints")
    assert (
        bucket["soft_delete_policy"][0]["retention_duration_seconds"]
        == "${var.checkpoint_soft_delete_retention_seconds}"
    )
    assert config.variables["checkpoint_soft_delete_retention_seconds"]["default"] == 0
    assert bucket["versioning"][0]["enabled"] is False
    assert bucket["lifecycle_rule"], "a lifecycle rule is the backstop"
    comments = " ".join(config.resource_comments[("google_storage_bucket", "checkpoints")])
    assert "billed" in comments, "explain why soft delete is off"


def test_scheduler_publishes_the_maintenance_tasks() -> None:
    config = module_config()
    assert config.locals["maintenance_tasks"] == {
        "reconcile": "${var.maintenance_schedules.reconcile}",
        "prune": "${var.maintenance_schedules.prune}",
    }
    maintenance = config.resource("google_cloud_scheduler_job", "maintenance")
    target = maintenance["pubsub_target"][0]
    assert target["topic_name"] == '${google_pubsub_topic.topics["maintenance"].id}'
    assert target["data"] == "${base64encode(jsonencode({task = each.key}))}"
    # Retraining schedules are schedule triggers: each firing goes to on_trigger, named by the
    # attribute on_trigger routes by.
    from shared.triggers.publishing import TRIGGER_ATTRIBUTE
    from shared.triggers.runner import TICK_TASK

    retraining = config.resource("google_cloud_scheduler_job", "retraining")
    assert retraining["for_each"] == "${local.schedule_triggers}"
    target = retraining["pubsub_target"][0]
    assert target["topic_name"] == '${google_pubsub_topic.topics["triggers"].id}'
    assert target["attributes"] == {TRIGGER_ATTRIBUTE: "${each.key}"}
    tick = config.resource("google_cloud_scheduler_job", "triggers_tick")["pubsub_target"][0]
    assert tick["topic_name"] == '${google_pubsub_topic.topics["triggers"].id}'
    assert tick["attributes"] == {"task": TICK_TASK}


def test_on_trigger_is_least_privilege() -> None:
    """on_trigger never touches the ledger: triggers/ in the state bucket (listing included, by the
    list-prefix attribute), create/get of manifests under the state bucket's manifests/, publish job-requests
    and ops-alerts. It does not read the watched data buckets."""
    config = module_config()
    access = config.locals["function_access"]["on_trigger"]
    assert access == {
        "ledger": "none",
        "state_prefix": "triggers/",
        "vertex": None,
        "checkpoint": None,
        "manifests": True,
        "publishes": ["job_requests", "ops_alerts"],
        "act_as": False,
    }
    from shared.triggers import store
    from shared.wiring import PUBLISHES

    assert sorted(PUBLISHES["on_trigger"]) == ["job_requests_topic", "ops_alerts_topic"]
    assert store.PREFIX == access["state_prefix"]
    ledger = config.resource("google_storage_bucket_iam_member", "ledger")
    assert 'a.ledger != "none"' in ledger["for_each"]
    writer = config.resource("google_storage_bucket_iam_member", "state_prefix_writer")
    assert 'a.ledger != "read_write"' in writer["for_each"]
    assert "storage.googleapis.com/objectListPrefix" in writer["condition"][0]["expression"]
    manifest = config.resource("google_storage_bucket_iam_member", "manifest_writer")
    assert manifest["bucket"] == "${google_storage_bucket.state.name}"
    assert manifest["role"] == "${google_project_iam_custom_role.manifest_writer.id}"
    assert "/objects/${local.manifests_prefix}" in manifest["condition"][0]["expression"]
    assert [fn for fn, a in config.locals["function_access"].items() if a["manifests"]] == ["on_trigger"]
    from shared.triggers.render import REQUEST_ID_PREFIX

    assert REQUEST_ID_PREFIX == "trg-"


def test_watched_buckets_notify_on_triggers_topic_and_the_gcs_agent_may_publish() -> None:
    config = module_config()
    notification = config.resource("google_storage_notification", "triggers")
    assert notification["topic"] == '${google_pubsub_topic.topics["triggers"].id}'
    assert notification["payload_format"] == "JSON_API_V1"
    assert notification["event_types"] == ["OBJECT_FINALIZE"]
    agent = config.resource("google_pubsub_topic_iam_member", "gcs_notifies_triggers")
    assert agent["topic"] == '${google_pubsub_topic.topics["triggers"].name}'
    assert agent["role"] == "roles/pubsub.publisher"
    assert "data.google_storage_project_service_account.gcs.email_address" in agent["member"]
    assert "${google_pubsub_topic_iam_member.gcs_notifies_triggers}" in notification["depends_on"]
    # Watched topics are pushed to on_trigger with its push identity, retry and dead letters.
    watched = config.resource("google_pubsub_subscription", "watched_topics")
    assert (
        'google_service_account.pushers["on_trigger"].email'
        in watched["push_config"][0]["oidc_token"][0]["service_account_email"]
    )
    assert watched["dead_letter_policy"][0]["max_delivery_attempts"] == "${local.trigger.max_delivery_attempts}"
    assert (
        config.resource("google_pubsub_subscription_iam_member", "watched_topics_dead_letter_subscriber")["member"]
        == "${local.pubsub_service_agent}"
    )
    # Definitions are written where on_trigger reads them.
    from shared.triggers.store import definition_path

    definitions = config.resource("google_storage_bucket_object", "trigger_definitions")
    assert definitions["bucket"] == "${google_storage_bucket.state.name}"
    assert definitions["name"] == definition_path("${each.key}")


def test_log_metrics_count_the_logged_events() -> None:
    config = module_config()
    metrics = config.locals["log_metrics"]
    assert {m["event"] for m in metrics.values()} == {
        "preemption",
        "requeue",
        "attempts_exhausted",
        "invalid_request",
    }
    metric = config.resource("google_logging_metric", "events")
    assert 'jsonPayload.event="${each.value.event}"' in metric["filter"]
    policy = config.resource("google_monitoring_alert_policy", "events")
    assert policy["notification_channels"] == "${var.notification_channels}"


def test_alert_policies_wait_for_their_log_based_metrics() -> None:
    """Monitoring 404s a log-based metric created moments before (provider issue 11102): the
    policies on them are created only after a wait that restarts whenever a metric is new."""
    config = module_config()
    wait = config.resource("time_sleep", "log_metrics_visible_to_monitoring")
    assert wait["create_duration"] == "${var.log_metric_propagation_seconds}s"
    assert "google_logging_metric.events" in wait["triggers"]["metrics"]
    assert config.variables["log_metric_propagation_seconds"]["default"] >= 600  # "up to 10 minutes"
    policy = config.resource("google_monitoring_alert_policy", "events")
    assert policy["depends_on"] == ["${time_sleep.log_metrics_visible_to_monitoring}"]
    # Every policy whose filter names a user (log-based) metric waits.
    for name, body in config.of_type("google_monitoring_alert_policy").items():
        filters = [c["condition_threshold"][0]["filter"] for c in body["conditions"]]
        if any("logging.googleapis.com/user/" in f for f in filters):
            assert "${time_sleep.log_metrics_visible_to_monitoring}" in body.get("depends_on", []), name


def test_required_apis_are_enabled() -> None:
    apis = set(module_config().locals["apis"])
    assert {
        "aiplatform.googleapis.com",
        "cloudfunctions.googleapis.com",
        "run.googleapis.com",
        "cloudbuild.googleapis.com",
        "artifactregistry.googleapis.com",
        "pubsub.googleapis.com",
        "storage.googleapis.com",
        "cloudscheduler.googleapis.com",
        "logging.googleapis.com",
        "monitoring.googleapis.com",
        "iam.googleapis.com",
    } <= apis


# ---------------------------------------------------------------------------------------------
# Settings (environment), variables, versions, examples
# ---------------------------------------------------------------------------------------------


def _settings_env_names() -> set[str]:
    return {f.metadata["env"] for f in dataclasses.fields(Settings)}


def test_function_environment_names_are_settings_names() -> None:
    config = module_config()
    infrastructure = set(config.locals["infrastructure_env"])
    from_variables = set(config.locals["settings_env_names"].values())
    terraform_names = infrastructure | from_variables
    settings_names = _settings_env_names()
    assert terraform_names <= settings_names, f"not read by shared/settings.py: {terraform_names - settings_names}"
    missing = settings_names - terraform_names - {"SPOTJOBS_VERTEX_ENDPOINT"}
    assert not missing, f"settings not deployable from Terraform (add them to var.settings): {sorted(missing)}"
    assert "SPOTJOBS_VERTEX_ENDPOINT" not in terraform_names, "unset means the real Vertex AI endpoint"
    assert not infrastructure & from_variables


def test_settings_variable_matches_the_env_name_table() -> None:
    config = module_config()
    type_expr = config.variables["settings"]["type"]
    attributes = set(re.findall(r"([a-z_]+) = optional\(", type_expr))
    assert attributes == set(config.locals["settings_env_names"])
    # The one default Terraform sets must be the code's default.
    assert 'checkpoint_prefix = optional(string, "requests")' in type_expr
    assert Settings().checkpoint_prefix == "requests"
    field_by_env = {f.metadata["env"]: f.name for f in dataclasses.fields(Settings)}
    for attribute, env_name in config.locals["settings_env_names"].items():
        assert field_by_env[env_name] == attribute, f"{attribute} -> {env_name}"


def test_every_variable_is_typed_and_described() -> None:
    for name, variable in module_config().variables.items():
        assert variable.get("description"), name
        assert variable.get("type"), name


def test_every_output_is_described() -> None:
    outputs = module_config().outputs
    for name, output in outputs.items():
        assert output.get("description"), name
    assert {"topic_ids", "function_names", "state_bucket", "checkpoint_bucket", "source_bucket"} <= set(outputs)
    assert {"function_service_accounts", "training_service_account"} <= set(outputs)


def test_provider_versions_are_pinned() -> None:
    terraform = module_config().terraform[0]
    assert terraform["required_version"].startswith(">=")
    providers = terraform["required_providers"][0]
    for name in ("google", "google-beta", "archive", "time"):
        assert providers[name]["source"] == f"hashicorp/{name}"
        assert "<" in providers[name]["version"], f"{name} needs an upper bound"


@pytest.mark.parametrize("example", sorted(p.name for p in (TERRAFORM_DIR / "examples").iterdir() if p.is_dir()))
def test_examples_are_complete_root_modules(example: str) -> None:
    directory = TERRAFORM_DIR / "examples" / example
    config = build_config(sorted(directory.glob("*.tf")))
    assert config.terraform, f"{example}: needs a terraform block with required_providers"
    assert set(config.terraform[0]["required_providers"][0]) >= {"google", "google-beta", "archive", "time"}
    module = config.modules["spotjobs"]
    assert module["source"] == "../.."
    assert "project_id" in module
    assert config.outputs, f"{example}: expose the useful outputs"
    assert (directory / "README.md").is_file()


def test_checkov_skips_carry_a_reason() -> None:
    pattern = re.compile(r"checkov:skip=([A-Z0-9_]+)(:?)(.*)")
    for path in tf_files():
        for line in path.read_text().splitlines():
            match = pattern.search(line)
            if match:
                check, colon, reason = match.groups()
                assert re.fullmatch(r"CKV2?_[A-Z]+_\d+", check), line
                assert colon and len(reason.strip()) >= 20, f"{path}: skip {check} without a reason"


def test_terraform_fmt_is_clean() -> None:
    terraform = shutil.which("terraform")
    if terraform is None:
        pytest.skip("terraform binary not installed: `terraform fmt -check -recursive terraform/` not run")
    result = subprocess.run(
        [terraform, "fmt", "-check", "-recursive", "-diff", str(TERRAFORM_DIR)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"terraform fmt would change:\n{result.stdout}{result.stderr}"


def test_gitignore_keeps_build_output_and_state_out_of_git() -> None:
    ignored = (TERRAFORM_DIR / ".gitignore").read_text().split()
    assert ".build/" in ignored and "*.tfstate" in ignored


def test_readme_documents_the_design_choices() -> None:
    readme = (TERRAFORM_DIR / "README.md").read_text()
    for topic in ("dead-letter", "push subscription", "soft delete", "requirements.txt", "main.py"):
        assert topic.lower() in readme.lower(), topic
    variables = module_config().variables
    for name in variables:
        assert f"`{name}`" in readme, f"README does not describe variable {name}"


def test_source_root_entry_module_exists() -> None:
    entry = Path(TERRAFORM_DIR / "source_root" / "main.py")
    assert entry.is_file()
    assert module_config().locals["source_entry"] == "${path.module}/source_root/main.py"


def test_the_reconcile_schedule_fires_every_reconcile_interval_the_code_plans_with() -> None:
    """The deadline rule's m and every bound the simulator checks are counted in the reconcile
    interval (`SPOTJOBS_RECONCILE_INTERVAL_SECONDS`: keep it the schedule's interval,
    docs/deadlines.md); the module's default schedule must fire that often, or a default deployment
    plans with passes twice as frequent as it has."""
    variables = (TERRAFORM_DIR / "variables.tf").read_text()
    block = variables.split('variable "maintenance_schedules"', 1)[1]
    schedule = re.search(r'reconcile = optional\(object\(\{\s*schedule\s*=\s*optional\(string, "([^"]+)"\)', block)
    assert schedule is not None
    every = re.fullmatch(r"\*/(\d+) \* \* \* \*", schedule.group(1))
    assert every is not None and int(every.group(1)) * 60 == Settings().reconcile_interval_seconds
