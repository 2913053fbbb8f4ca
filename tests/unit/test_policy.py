"""Request policy, table-style: each rule accepts what is allowed and names what is not."""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Callable
from typing import Any

import pytest

from shared.errors import ConfigurationError, InvalidRequest
from shared.log import Logger
from shared.requests import policy
from shared.requests.envelope import read_request
from shared.requests.job_policy import check_custom_job, check_labels
from shared.requests.policy import (
    check_attempt_job,
    check_policy,
    check_strategy,
    validate_request,
    warn_if_images_unrestricted,
)
from shared.settings import Settings
from tests.conftest import load_event

POLICY_ENV = {
    "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": "us-docker.pkg.dev/my-project/,gcr.io/my-project/",
    "SPOTJOBS_ALLOWED_SERVICE_ACCOUNTS": "trainer@my-project.iam.gserviceaccount.com",
    "SPOTJOBS_TRAINING_SERVICE_ACCOUNT": "default-trainer@my-project.iam.gserviceaccount.com",
    "SPOTJOBS_MAX_REPLICAS_PER_POOL": "4",
    "SPOTJOBS_MAX_ACCELERATORS_PER_REPLICA": "8",
    "SPOTJOBS_MAX_ATTEMPTS_CEILING": "5",
    "SPOTJOBS_KEEP_LAST_CEILING": "10",
    "SPOTJOBS_CHECKPOINT_BUCKET": "ckpt",
    "SPOTJOBS_CHECKPOINT_PREFIX": "runs",
}
SETTINGS = Settings.from_env(POLICY_ENV)
BASE_JOB: dict[str, Any] = json.loads(load_event("requests/bare_docs.json"))


def pool(job: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return job["jobSpec"]["workerPoolSpecs"][index]


def use_python_package(job: dict[str, Any], executor_image: str) -> None:
    del pool(job)["containerSpec"]
    pool(job)["pythonPackageSpec"] = {
        "executorImageUri": executor_image,
        "packageUris": ["gs://b/p.tar.gz"],
        "pythonModule": "t.task",
    }


def job_violations(mutate: Callable[[dict[str, Any]], Any], settings: Settings = SETTINGS) -> list[str]:
    job = copy.deepcopy(BASE_JOB)
    mutate(job)
    return [str(v) for v in check_custom_job(job, "custom_job", "r1", settings)]


def test_the_docs_body_passes_the_default_and_a_strict_policy() -> None:
    assert job_violations(lambda job: None) == []
    assert job_violations(lambda job: None, Settings.from_env({})) == []


# (case, mutation, expected violation or None when allowed)
RULES: list[tuple[str, Callable[[dict[str, Any]], Any], str | None]] = [
    ("a3 is allowed", lambda j: pool(j)["machineSpec"].update(machineType="a3-highgpu-8g"), None),
    (
        "n1 is not",
        lambda j: pool(j)["machineSpec"].update(machineType="n1-standard-8"),
        "custom_job.jobSpec.workerPoolSpecs[0].machineSpec.machineType: is n1-standard-8 (family n1); allowed families: a2, a3",
    ),
    (
        "machine type required",
        lambda j: pool(j)["machineSpec"].pop("machineType"),
        "custom_job.jobSpec.workerPoolSpecs[0].machineSpec.machineType: is required; allowed families: a2, a3",
    ),
    (
        "TPU machine (ct*)",
        lambda j: pool(j)["machineSpec"].update(machineType="ct5lp-hightpu-4t"),
        "custom_job.jobSpec.workerPoolSpecs[0].machineSpec.machineType: is ct5lp-hightpu-4t; TPU machine types are not allowed",
    ),
    (
        "TPU machine (tpu*)",
        lambda j: pool(j)["machineSpec"].update(machineType="tpu-v4-podslice"),
        "custom_job.jobSpec.workerPoolSpecs[0].machineSpec.machineType: is tpu-v4-podslice; TPU machine types are not allowed",
    ),
    (
        "TPU topology",
        lambda j: pool(j)["machineSpec"].update(tpuTopology="2x2"),
        "custom_job.jobSpec.workerPoolSpecs[0].machineSpec.tpuTopology: is set; TPU topologies are not allowed",
    ),
    (
        "TPU accelerator",
        lambda j: pool(j)["machineSpec"].update(acceleratorType="TPU_V3"),
        "custom_job.jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType: is TPU_V3; TPUs are not allowed",
    ),
    ("8 accelerators", lambda j: pool(j)["machineSpec"].update(acceleratorCount=8), None),
    (
        "9 accelerators",
        lambda j: pool(j)["machineSpec"].update(acceleratorCount=9),
        "custom_job.jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount: is 9; at most 8 per replica",
    ),
    # Worker pool 0 holds the primary alone (tests/unit/test_multinode_policy.py): pool 1's replicas.
    (
        "4 replicas",
        lambda j: j["jobSpec"]["workerPoolSpecs"].append({**copy.deepcopy(pool(j)), "replicaCount": "4"}),
        None,
    ),
    (
        "image outside the allowlist",
        lambda j: pool(j)["containerSpec"].update(imageUri="docker.io/someone/miner"),
        "custom_job.jobSpec.workerPoolSpecs[0].containerSpec.imageUri: is docker.io/someone/miner; "
        "allowed image prefixes: us-docker.pkg.dev/my-project/, gcr.io/my-project/",
    ),
    (
        "image on the second prefix",
        lambda j: pool(j)["containerSpec"].update(imageUri="gcr.io/my-project/t:1"),
        None,
    ),
    (
        "python package executor image counts as an image",
        lambda j: use_python_package(j, "docker.io/x/y"),
        "custom_job.jobSpec.workerPoolSpecs[0].pythonPackageSpec.executorImageUri: is docker.io/x/y; "
        "allowed image prefixes: us-docker.pkg.dev/my-project/, gcr.io/my-project/",
    ),
    (
        "no container at all",
        lambda j: pool(j).pop("containerSpec"),
        "custom_job.jobSpec.workerPoolSpecs[0]: needs a containerSpec or a pythonPackageSpec",
    ),
    (
        "no worker pools",
        lambda j: j["jobSpec"].update(workerPoolSpecs=[]),
        "custom_job.jobSpec.workerPoolSpecs: is required (at least worker pool 0)",
    ),
    (
        "an empty placeholder pool after the first",
        lambda j: j["jobSpec"]["workerPoolSpecs"].append({}),
        None,
    ),
    (
        "a second pool is checked too",
        lambda j: j["jobSpec"]["workerPoolSpecs"].append({**copy.deepcopy(pool(j)), "replicaCount": "5"}),
        "custom_job.jobSpec.workerPoolSpecs[1].replicaCount: is 5; at most 4 per pool",
    ),
    (
        "listed service account",
        lambda j: j["jobSpec"].update(serviceAccount="trainer@my-project.iam.gserviceaccount.com"),
        None,
    ),
    (
        "the training service account is always allowed",
        lambda j: j["jobSpec"].update(serviceAccount="default-trainer@my-project.iam.gserviceaccount.com"),
        None,
    ),
    (
        "unlisted service account",
        lambda j: j["jobSpec"].update(serviceAccount="owner@other.iam.gserviceaccount.com"),
        "custom_job.jobSpec.serviceAccount: is owner@other.iam.gserviceaccount.com; allowed service accounts: "
        "default-trainer@my-project.iam.gserviceaccount.com, trainer@my-project.iam.gserviceaccount.com",
    ),
    (
        "own output directory",
        lambda j: j["jobSpec"].update(baseOutputDirectory={"outputUriPrefix": "gs://ckpt/runs/r1/"}),
        None,
    ),
    (
        "own output directory without the slash",
        lambda j: j["jobSpec"].update(baseOutputDirectory={"outputUriPrefix": "gs://ckpt/runs/r1"}),
        None,
    ),
    (
        "another request's directory inside the managed prefix",
        lambda j: j["jobSpec"].update(baseOutputDirectory={"outputUriPrefix": "gs://ckpt/runs/r2/"}),
        "custom_job.jobSpec.baseOutputDirectory.outputUriPrefix: is gs://ckpt/runs/r2/; leave baseOutputDirectory "
        "unset or set it to gs://ckpt/runs/r1/, this request's own checkpoint directory",
    ),
    (
        "a directory outside the managed bucket",
        lambda j: j["jobSpec"].update(baseOutputDirectory={"outputUriPrefix": "gs://elsewhere/out/"}),
        "custom_job.jobSpec.baseOutputDirectory.outputUriPrefix: is gs://elsewhere/out/; leave baseOutputDirectory "
        "unset or set it to gs://ckpt/runs/r1/, this request's own checkpoint directory",
    ),
    ("strategy unset", lambda j: j["jobSpec"].pop("scheduling"), None),
    (
        "strategy STANDARD is pointed at fallback",
        lambda j: j["jobSpec"]["scheduling"].update(strategy="STANDARD"),
        "custom_job.jobSpec.scheduling.strategy: is STANDARD; spotjobs submits SPOT (leave it unset or SPOT) and offers "
        'on-demand capacity through "fallback": {"after_spot_attempts": k, "strategy": "STANDARD"}',
    ),
    (
        "user labels",
        lambda j: j.update(labels={"team": "vision", "cost-center": "", "équipe": "ü"}),
        None,
    ),
    (
        "reserved label",
        lambda j: j.update(labels={"spotjobs-attempt": "9"}),
        "custom_job.labels.spotjobs-attempt: the spotjobs-* labels are set by spotjobs",
    ),
]


@pytest.mark.parametrize("case, mutate, expected", RULES, ids=[r[0] for r in RULES])
def test_policy_rule(case: str, mutate: Callable[[dict[str, Any]], Any], expected: str | None) -> None:
    assert job_violations(mutate) == ([] if expected is None else [expected])


@pytest.mark.parametrize(
    "labels, expected_paths",
    [
        ({"team": "a"}, []),
        ({"Team": "a"}, ["labels.Team"]),
        ({"9lives": "a"}, ["labels.9lives"]),
        ({"team": "Vision"}, ["labels.team"]),
        ({"team": "v" * 64}, ["labels.team"]),
        ({"k" * 64: "v"}, [f"labels.{'k' * 64}"]),
        ({"team.name": "a"}, ['labels["team.name"]']),
        (
            {f"l{i}": "v" for i in range(62)},
            ["labels"],
        ),  # 61 user labels fit beside the 3 of spotjobs
        ({f"l{i}": "v" for i in range(61)}, []),
    ],
)
def test_label_rules(labels: dict[str, str], expected_paths: list[str]) -> None:
    assert [v.path for v in check_labels(labels, "labels")] == expected_paths


def test_every_policy_violation_is_reported_at_once_with_envelope_limits() -> None:
    job = copy.deepcopy(BASE_JOB)
    pool(job)["machineSpec"].update(machineType="n1-standard-4", tpuTopology="2x2")
    pool(job).update(replicaCount=99)
    pool(job)["containerSpec"]["imageUri"] = "docker.io/x"
    body = {
        "request_id": "r1",
        "custom_job": job,
        "max_attempts": 6,
        "checkpoints": {"keep_last": 11},
    }
    with pytest.raises(InvalidRequest) as caught:
        validate_request(json.dumps(body).encode(), attributes={}, settings=SETTINGS)
    assert [v.path for v in caught.value.violations] == [
        "custom_job.jobSpec.workerPoolSpecs[0].machineSpec.tpuTopology",
        "custom_job.jobSpec.workerPoolSpecs[0].replicaCount",  # the primary's pool holds one
        "custom_job.jobSpec.workerPoolSpecs[0].machineSpec.machineType",
        "custom_job.jobSpec.workerPoolSpecs[0].replicaCount",
        "custom_job.jobSpec.workerPoolSpecs[0].containerSpec.imageUri",
        "custom_job.jobSpec.workerPoolSpecs",  # 99 replicas in all
        "custom_job.jobSpec.workerPoolSpecs",  # 99 accelerators in all
        "max_attempts",
        "checkpoints.keep_last",
    ]
    assert str(caught.value.violations[-2]) == "max_attempts: is 6; at most 5 allowed"


def test_schema_and_policy_violations_come_together() -> None:
    body = {
        "request_id": "Bad Id",
        "custom_job": {**copy.deepcopy(BASE_JOB), "displayName": 1},
        "max_attempts": 50,
    }
    request, schema = read_request(json.dumps(body).encode(), attributes={}, max_bytes=10_000)
    assert {v.path for v in schema} == {"request_id", "custom_job.displayName"}
    assert [v.path for v in check_policy(request, SETTINGS)] == ["max_attempts"]


def test_an_empty_service_account_list_means_the_training_account_only() -> None:
    settings = Settings.from_env({**POLICY_ENV, "SPOTJOBS_ALLOWED_SERVICE_ACCOUNTS": ""})
    assert job_violations(lambda j: j["jobSpec"].update(serviceAccount="any@x.iam.gserviceaccount.com"), settings) == [
        "custom_job.jobSpec.serviceAccount: is any@x.iam.gserviceaccount.com; allowed service "
        "accounts: default-trainer@my-project.iam.gserviceaccount.com"
    ]
    training = "default-trainer@my-project.iam.gserviceaccount.com"
    assert job_violations(lambda j: j["jobSpec"].update(serviceAccount=training), settings) == []


CLASS_ACCOUNT = "vision-trainer@my-project.iam.gserviceaccount.com"


@pytest.mark.parametrize(
    ("request_id", "named", "violation"),
    [
        ("vision-resnet", None, None),
        ("vision-resnet", CLASS_ACCOUNT, None),
        ("vision-resnet", "trainer@my-project.iam.gserviceaccount.com", "runs as " + CLASS_ACCOUNT),
        ("r1", CLASS_ACCOUNT, "which runs only requests whose id starts with 'vision-'"),
        ("r1", "trainer@my-project.iam.gserviceaccount.com", None),
    ],
)
def test_a_training_class_account_runs_its_class_only(
    request_id: str, named: str | None, violation: str | None
) -> None:
    settings = Settings.from_env(
        {
            **POLICY_ENV,
            "SPOTJOBS_TRAINING_CLASSES": f"vision-={CLASS_ACCOUNT}",
            "SPOTJOBS_ALLOWED_SERVICE_ACCOUNTS": f"trainer@my-project.iam.gserviceaccount.com,{CLASS_ACCOUNT}",
        }
    )
    job = copy.deepcopy(BASE_JOB)
    if named:
        job["jobSpec"]["serviceAccount"] = named
    found = [str(v) for v in check_custom_job(job, "custom_job", request_id, settings)]
    assert found == ([] if violation is None else [found[0]]) and (violation is None or violation in found[0])


@pytest.mark.parametrize(
    "classes",
    [
        "vision",  # no account
        "Vision-=a@p.iam.gserviceaccount.com",
        "req-x=a@p.iam.gserviceaccount.com",  # spotjobs' own ids
        "vision-=a@p.iam.gserviceaccount.com,vision-big-=b@p.iam.gserviceaccount.com",  # nested
    ],
)
def test_training_classes_that_would_overlap_or_cannot_be_read_fail_the_instance(classes: str) -> None:
    with pytest.raises(ConfigurationError, match="SPOTJOBS_TRAINING_CLASSES"):
        Settings.from_env({**POLICY_ENV, "SPOTJOBS_TRAINING_CLASSES": classes})


def test_with_no_accounts_configured_none_may_be_named() -> None:
    settings = Settings.from_env({})
    assert job_violations(lambda j: j["jobSpec"].update(serviceAccount="any@x.iam.gserviceaccount.com"), settings) == [
        "custom_job.jobSpec.serviceAccount: is any@x.iam.gserviceaccount.com; allowed service "
        "accounts: none (leave serviceAccount unset)"
    ]


def test_an_empty_image_allowlist_allows_any_image_and_warns_loudly_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    open_settings = Settings.from_env({})
    assert (
        job_violations(lambda j: pool(j)["containerSpec"].update(imageUri="docker.io/any/thing"), open_settings) == []
    )
    monkeypatch.setattr(policy, "_warned_unrestricted_images", False)
    stream = io.StringIO()
    log = Logger(stream=stream)
    warn_if_images_unrestricted(SETTINGS, log)  # restricted: silent
    warn_if_images_unrestricted(open_settings, log)
    warn_if_images_unrestricted(open_settings, log)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["severity"], line["event"]) for line in lines] == [("WARNING", "policy_images_unrestricted")]


@pytest.mark.parametrize(
    ("strategy", "spot_before", "allowed", "minimum", "refused"),
    [
        ("SPOT", 0, (), 3, None),
        ("STANDARD", 5, (), 1, "allowed fallback strategies: none"),
        ("STANDARD", 2, ("STANDARD",), 3, "after 2 Spot attempts; at least 3 come first"),
        ("STANDARD", 3, ("STANDARD",), 3, None),
        ("FLEX_START", 1, ("STANDARD",), 1, "allowed fallback strategies: STANDARD"),
    ],
)
def test_an_attempt_runs_on_other_capacity_than_spot_only_as_the_deployment_allows(
    strategy: str, spot_before: int, allowed: tuple[str, ...], minimum: int, refused: str | None
) -> None:
    violation = check_strategy(strategy, spot_before, allowed_fallbacks=allowed, min_spot_attempts=minimum)
    assert violation is None if refused is None else refused in str(violation)


ATTEMPT = {"request_id": "r1", "location": "us-central1"}


@pytest.mark.parametrize(
    ("change", "attempt", "refused"),
    [
        ({}, {"strategy": "SPOT", "spot_attempts_before": 0}, []),
        ({}, {"strategy": "STANDARD", "spot_attempts_before": 1}, ["strategy"]),
        ({"SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD"}, {"strategy": "STANDARD", "spot_attempts_before": 1}, []),
        (
            {"SPOTJOBS_ALLOWED_LOCATIONS": "europe-west4", "SPOTJOBS_LOCATION": "europe-west4"},
            {"strategy": "SPOT", "spot_attempts_before": 0},
            ["location"],
        ),
        (
            {"SPOTJOBS_ALLOWED_MACHINE_FAMILIES": "a3"},
            {"strategy": "SPOT", "spot_attempts_before": 0},
            ["custom_job.jobSpec.workerPoolSpecs[0].machineSpec.machineType"],
        ),
    ],
    ids=["spot", "standard-not-allowed", "standard-allowed", "location", "machine"],
)
def test_the_job_about_to_be_created_is_judged_by_the_policy_of_the_day(
    change: dict[str, str], attempt: dict[str, Any], refused: list[str]
) -> None:
    settings = Settings.from_env({**POLICY_ENV, **change})
    violations = check_attempt_job(copy.deepcopy(BASE_JOB), **ATTEMPT, **attempt, settings=settings)
    assert [v.path for v in violations] == refused


def test_every_create_goes_through_the_one_place_that_asks_the_policy_first() -> None:
    """Whatever path plans an attempt (publish, re-queue, hand-over, deadline switch, failover),
    its job is created in one function, which checks it against the policy before the create."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    creators: dict[str, dict[str, int]] = {}
    for folder in ("shared", "functions", "spotjobs"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.parent.name == "adapters":
                continue  # the adapter's create_custom_job is the client call itself
            for function in ast.walk(ast.parse(path.read_text())):
                if not isinstance(function, ast.FunctionDef):
                    continue
                calls = {
                    getattr(node.func, "id", getattr(node.func, "attr", "")): node.lineno
                    for node in ast.walk(function)
                    if isinstance(node, ast.Call)
                }
                if "create_custom_job" in calls:
                    creators[f"{path.relative_to(root)}:{function.name}"] = calls
    assert list(creators) == ["shared/submit.py:_ensure_job"]
    calls = creators["shared/submit.py:_ensure_job"]
    assert calls.get("check_attempt_job", calls["create_custom_job"]) < calls["create_custom_job"]


def test_a_job_judged_again_gets_the_same_verdict_as_a_list_of_its_own() -> None:
    """The verdict is remembered per distinct job and settings: each call gets its own list, a
    changed job or other settings are judged afresh."""
    job = copy.deepcopy(BASE_JOB)
    pool(job)["containerSpec"]["imageUri"] = "docker.io/evil/miner:latest"

    first = check_custom_job(job, "custom_job", "r1", SETTINGS)
    first.clear()
    again = check_custom_job(job, "custom_job", "r1", SETTINGS)
    pool(job)["containerSpec"]["imageUri"] = "us-docker.pkg.dev/my-project/trainer:1"
    changed = check_custom_job(job, "custom_job", "r1", SETTINGS)
    pool(job)["containerSpec"]["imageUri"] = "docker.io/evil/miner:latest"
    unrestricted = Settings.from_env({**POLICY_ENV, "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": ""})

    assert [v.path for v in again] == ["custom_job.jobSpec.workerPoolSpecs[0].containerSpec.imageUri"]
    assert changed == [] and check_custom_job(job, "custom_job", "r1", unrestricted) == []
