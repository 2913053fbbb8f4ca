"""The request policy as a hostile publisher meets it: every case of the allowlist issue is refused
with its path named, under an ordinary operator policy; the valid sample requests still pass."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from shared.errors import ConfigurationError, InvalidRequest
from shared.image_ref import BadReference, parse_image, parse_prefix
from shared.requests.envelope import REQUEUE_ATTRIBUTES
from shared.requests.job_policy import resource_allowed
from shared.requests.policy import describe_policy, validate_request
from shared.settings import Settings
from tests.conftest import EVENTS_DIR, load_event

TRAINER = "trainer@corp.iam.gserviceaccount.com"
OPERATOR_ENV = {
    "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": "us-docker.pkg.dev/corp/train/",
    "SPOTJOBS_ALLOWED_SERVICE_ACCOUNTS": TRAINER,
    "SPOTJOBS_TRAINING_SERVICE_ACCOUNT": TRAINER,
}
OPERATOR = Settings.from_env(OPERATOR_ENV)
IMAGE = "us-docker.pkg.dev/corp/train/trainer:1"
POOL = "custom_job.jobSpec.workerPoolSpecs[0]"


def envelope(**extra: Any) -> dict[str, Any]:
    job = json.loads(load_event("requests/bare_docs.json"))
    job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] = IMAGE
    return {"request_id": "r1", "custom_job": job, **extra}


def violations(body: dict[str, Any], settings: Settings = OPERATOR, **attributes: str) -> list[str]:
    try:
        validate_request(json.dumps(body).encode(), attributes=attributes, settings=settings)
    except InvalidRequest as exc:
        return [str(v) for v in exc.violations]
    return []


def spec(body: dict[str, Any]) -> dict[str, Any]:
    return body["custom_job"]["jobSpec"]


def pool0(body: dict[str, Any]) -> dict[str, Any]:
    return spec(body)["workerPoolSpecs"][0]


def four_pools_of_h100(body: dict[str, Any]) -> None:
    template = {
        "machineSpec": {
            "machineType": "a3-highgpu-8g",
            "acceleratorType": "NVIDIA_H100_80GB",
            "acceleratorCount": 8,
        },
        "containerSpec": {"imageUri": IMAGE},
    }
    spec(body)["workerPoolSpecs"] = [{**copy.deepcopy(template), "replicaCount": n} for n in (1, 8, 8, 8)]


# (case, mutation of a valid envelope, the violation path it must name)
HOSTILE: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    ("private VPC", lambda b: spec(b).update(network="projects/1/global/networks/prod"), "custom_job.jobSpec.network"),
    ("reserved ranges", lambda b: spec(b).update(reservedIpRanges=["r"]), "custom_job.jobSpec.reservedIpRanges"),
    (
        "PSC into another project's DNS",
        lambda b: spec(b).update(
            pscInterfaceConfig={
                "networkAttachment": "a",
                "dnsPeeringConfigs": [{"domain": "corp.", "targetProject": "other", "targetNetwork": "n"}],
            }
        ),
        "custom_job.jobSpec.pscInterfaceConfig",
    ),
    ("interactive shell", lambda b: spec(b).update(enableWebAccess=True), "custom_job.jobSpec.enableWebAccess"),
    ("dashboard", lambda b: spec(b).update(enableDashboardAccess=True), "custom_job.jobSpec.enableDashboardAccess"),
    (
        "NFS mount",
        lambda b: pool0(b).update(nfsMounts=[{"server": "10.0.0.2", "path": "/", "mountPoint": "m"}]),
        f"{POOL}.nfsMounts",
    ),
    (
        "Lustre mount",
        lambda b: pool0(b).update(lustreMounts=[{"instanceIp": "10.0.0.3", "filesystem": "f", "mountPoint": "m"}]),
        f"{POOL}.lustreMounts",
    ),
    (
        "another team's cluster",
        lambda b: spec(b).update(persistentResourceId="theirs"),
        "custom_job.jobSpec.persistentResourceId",
    ),
    (
        "another team's reservation",
        lambda b: pool0(b)["machineSpec"].update(
            reservationAffinity={
                "reservationAffinityType": "SPECIFIC_RESERVATION",
                "key": "compute.googleapis.com/reservation-name",
                "values": ["theirs"],
            }
        ),
        f"{POOL}.machineSpec.reservationAffinity",
    ),
    (
        "foreign CMEK",
        lambda b: b["custom_job"].update(
            encryptionSpec={"kmsKeyName": "projects/o/locations/l/keyRings/r/cryptoKeys/k"}
        ),
        "custom_job.encryptionSpec",
    ),
    (
        "foreign TensorBoard",
        lambda b: spec(b).update(tensorboard="projects/o/locations/l/tensorboards/1"),
        "custom_job.jobSpec.tensorboard",
    ),
    (
        "foreign experiment",
        lambda b: spec(b).update(experiment="projects/o/locations/l/metadataStores/d/contexts/e"),
        "custom_job.jobSpec.experiment",
    ),
    (
        "foreign models",
        lambda b: spec(b).update(models=["projects/o/locations/l/models/m"]),
        "custom_job.jobSpec.models",
    ),
    ("four pools of 8 x H100", four_pools_of_h100, "custom_job.jobSpec.workerPoolSpecs"),
    (
        "fallback, not allowed by default",
        lambda b: b.update(fallback={"after_spot_attempts": 1, "strategy": "STANDARD"}),
        "fallback.strategy",
    ),
    (
        "ten thousand years",
        lambda b: spec(b).update(scheduling={"timeout": "315360000000s"}),
        "custom_job.jobSpec.scheduling.timeout",
    ),
    (
        "65536 GB boot disk",
        lambda b: pool0(b).update(diskSpec={"bootDiskSizeGb": 65536}),
        f"{POOL}.diskSpec.bootDiskSizeGb",
    ),
    (
        "AIP_CHECKPOINT_DIR to another request's folder",
        lambda b: pool0(b)["containerSpec"].update(
            env=[{"name": "AIP_CHECKPOINT_DIR", "value": "gs://spotjobs-checkpoints/requests/other/"}]
        ),
        f"{POOL}.containerSpec.env[0].name",
    ),
    *[
        (
            f"env {name}",
            lambda b, name=name: pool0(b)["containerSpec"].update(env=[{"name": name, "value": "x"}]),
            f"{POOL}.containerSpec.env[0].name",
        )
        for name in (
            "CLOUD_ML_JOB_ID",
            "CLUSTER_SPEC",
            "TF_CONFIG",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "LD_PRELOAD",
            "PYTHONPATH",
            "SPOTJOBS_COMMIT_MARKERS",  # the deployment's list: the kit must judge with the pruner's
            "SPOTJOBS_KIT_KEY",  # the attempt's own: a request choosing it could sign for it
            "A=B",
        )
    ],
    (
        "unknown accelerator number",
        lambda b: pool0(b)["machineSpec"].update(acceleratorType=999),
        f"{POOL}.machineSpec.acceleratorType",
    ),
    (
        "image with ..",
        lambda b: pool0(b)["containerSpec"].update(imageUri="us-docker.pkg.dev/corp/train/../../evil/x:1"),
        f"{POOL}.containerSpec.imageUri",
    ),
    (
        "image next to the allowed repository",
        lambda b: pool0(b)["containerSpec"].update(imageUri="us-docker.pkg.dev/corp/train-evil/x:1"),
        f"{POOL}.containerSpec.imageUri",
    ),
    (
        "unlisted service account",
        lambda b: spec(b).update(serviceAccount="owner@corp.iam.gserviceaccount.com"),
        "custom_job.jobSpec.serviceAccount",
    ),
    ("publisher-set attempt", lambda b: b.update(attempt=2), "attempt"),
    (
        "GPU partitions",
        lambda b: pool0(b)["machineSpec"].update(gpuPartitionSize="1g.10gb"),
        f"{POOL}.machineSpec.gpuPartitionSize",
    ),
    (
        "protected artifacts elsewhere",
        lambda b: spec(b).update(protectedArtifactLocationId="us-east1"),
        "custom_job.jobSpec.protectedArtifactLocationId",
    ),
]


def test_the_valid_envelope_passes_the_operator_policy() -> None:
    assert violations(envelope()) == []


@pytest.mark.parametrize("case, mutate, path", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_a_hostile_request_is_refused_naming_its_path(
    case: str, mutate: Callable[[dict[str, Any]], Any], path: str
) -> None:
    body = envelope()
    mutate(body)
    found = violations(body)
    assert any(v.startswith(f"{path}:") for v in found), found


def test_fallback_once_allowed_still_needs_spot_attempts_first() -> None:
    settings = dataclasses.replace(OPERATOR, allowed_fallback_strategies=("STANDARD",))
    body = envelope(fallback={"after_spot_attempts": 0, "strategy": "STANDARD"})
    assert violations(body, settings) == ["fallback.after_spot_attempts: is 0; at least 1 Spot attempts come first"]
    body["fallback"]["after_spot_attempts"] = 1
    assert violations(body, settings) == []
    body["fallback"]["strategy"] = "FLEX_START"
    assert violations(body, settings) == ["fallback.strategy: is FLEX_START; allowed: STANDARD"]


def test_a_prefix_without_its_trailing_slash_still_matches_whole_components() -> None:
    settings = dataclasses.replace(OPERATOR, allowed_image_prefixes=("us-docker.pkg.dev/corp",))
    body = envelope()
    assert violations(body, settings) == []
    pool0(body)["containerSpec"]["imageUri"] = "us-docker.pkg.dev/corp-evil/x:1"
    assert violations(body, settings) == [
        f"{POOL}.containerSpec.imageUri: is us-docker.pkg.dev/corp-evil/x:1; allowed image "
        "prefixes: us-docker.pkg.dev/corp"
    ]


@pytest.mark.parametrize(
    "image",
    [
        "us-docker.pkg.dev/corp/train/../x:1",
        "us-docker.pkg.dev/corp/train//x",
        "us-docker.pkg.dev/corp/Train/x",
        " us-docker.pkg.dev/corp/train/x",
        "us-docker.pkg.dev/corp/train/x:../y",
    ],
)
def test_malformed_image_references_are_refused(image: str) -> None:
    with pytest.raises(BadReference):
        parse_image(image)


def test_image_prefixes_match_registry_and_whole_components() -> None:
    prefix = parse_prefix("us-docker.pkg.dev/corp/train/")
    assert prefix.allows(parse_image("us-docker.pkg.dev/corp/train/x@sha256:" + "a" * 64))
    assert prefix.allows(parse_image("us-docker.pkg.dev/corp/train/team/x:2"))
    assert not prefix.allows(parse_image("us-docker.pkg.dev/corp/trainer:1"))
    assert not prefix.allows(parse_image("europe-docker.pkg.dev/corp/train/x:1"))
    assert parse_prefix("us-docker.pkg.dev/").allows(parse_image("us-docker.pkg.dev/a/b"))
    with pytest.raises(ConfigurationError):
        Settings.from_env({"SPOTJOBS_ALLOWED_IMAGE_PREFIXES": "corp/train"})


def test_with_no_account_list_only_the_training_account_may_be_named() -> None:
    settings = dataclasses.replace(OPERATOR, allowed_service_accounts=())
    body = envelope()
    spec(body)["serviceAccount"] = TRAINER
    assert violations(body, settings) == []
    spec(body)["serviceAccount"] = "any@x.iam.gserviceaccount.com"
    assert violations(body, settings) == [
        f"custom_job.jobSpec.serviceAccount: is any@x.iam.gserviceaccount.com; allowed service accounts: {TRAINER}"
    ]


def test_a_cloud_deployment_without_a_training_account_does_not_start() -> None:
    with pytest.raises(ConfigurationError, match="SPOTJOBS_TRAINING_SERVICE_ACCOUNT"):
        Settings.from_env({}).check_deployable()
    Settings.from_env({"SPOTJOBS_TRAINING_SERVICE_ACCOUNT": TRAINER}).check_deployable()
    # The embedded stack talks to its emulator, which has no identities.
    Settings.from_env({"SPOTJOBS_VERTEX_ENDPOINT": "http://127.0.0.1:1"}).check_deployable()
    with pytest.raises(ConfigurationError, match="SPOTJOBS_ALLOWED_LOCATIONS"):
        Settings.from_env(
            {"SPOTJOBS_TRAINING_SERVICE_ACCOUNT": TRAINER, "SPOTJOBS_ALLOWED_LOCATIONS": "europe-west4"}
        ).check_deployable()


def test_ceilings_on_pools_accelerators_and_timeout() -> None:
    body = envelope()
    spec(body)["workerPoolSpecs"] *= 3
    assert violations(body) == ["custom_job.jobSpec.workerPoolSpecs: has 3 pools; at most 2"]
    short = dataclasses.replace(OPERATOR, max_timeout_seconds=3600)
    assert violations(envelope(), short) == [
        "custom_job.jobSpec.scheduling.timeout: is unset (Vertex AI then allows 7 days); set at most 3600s"
    ]
    body = envelope()
    spec(body)["scheduling"] = {"timeout": "3600s", "maxWaitDuration": "7200s"}
    assert violations(body, short) == ["custom_job.jobSpec.scheduling.maxWaitDuration: is 7200s; at most 3600s"]


def test_regions_outside_the_allowlist_are_refused() -> None:
    settings = dataclasses.replace(OPERATOR, allowed_locations=("us-central1",))
    assert violations(envelope(locations=["us-central1", "europe-west4"]), settings) == [
        "locations[1]: is europe-west4; allowed regions: us-central1"
    ]
    assert violations(envelope(location="us-central1"), settings) == []


def test_opted_in_fields_are_checked_against_their_settings() -> None:
    network = "projects/123/global/networks/train"
    settings = dataclasses.replace(
        OPERATOR,
        allowed_networks=(network,),
        allow_web_access=True,
        allowed_tensorboards=("projects/corp/locations/us-central1/tensorboards/",),
        allowed_mount_servers=("10.0.0.2",),
    )
    body = envelope()
    spec(body).update(
        network=network,
        enableWebAccess=True,
        tensorboard="projects/corp/locations/us-central1/tensorboards/7",
    )
    pool0(body)["nfsMounts"] = [{"server": "10.0.0.2", "path": "/data", "mountPoint": "data"}]
    assert violations(body, settings) == []
    spec(body).update(
        network="projects/999/global/networks/prod",
        tensorboard="projects/corp/locations/us-central1/tensorboards/../../../other/x",
    )
    pool0(body)["nfsMounts"][0]["server"] = "10.9.9.9"
    assert sorted(v.split(":")[0] for v in violations(body, settings)) == [
        "custom_job.jobSpec.network",
        "custom_job.jobSpec.tensorboard",
        f"{POOL}.nfsMounts[0].server",
    ]


def test_resource_names_match_exactly_or_under_a_slash_prefix() -> None:
    assert resource_allowed("projects/a/x", ["projects/a/"])
    assert not resource_allowed("projects/ab/x", ["projects/a"])
    assert not resource_allowed("projects/a/../b/x", ["projects/a/"])


def test_attempt_is_read_only_from_the_systems_requeue_messages() -> None:
    body = envelope(attempt=2)
    assert violations(body) == [
        "attempt: is set only by spotjobs, on its own re-queue messages; a published request is "
        "attempt 1 (leave it out)"
    ]
    request = validate_request(json.dumps(body).encode(), attributes=REQUEUE_ATTRIBUTES, settings=OPERATOR)
    assert request.attempt == 2


@pytest.mark.parametrize("name", ["bare_docs.json", "bare_quick.json", "envelope_full.json"])
def test_the_valid_sample_requests_are_still_accepted(name: str) -> None:
    """Under a policy that allows what they ask for (their registry, account and fallback)."""
    settings = Settings.from_env(
        {
            "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": "us-docker.pkg.dev/my-project/",
            "SPOTJOBS_ALLOWED_SERVICE_ACCOUNTS": "trainer@my-project.iam.gserviceaccount.com",
            "SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD",
        }
    )
    data = (EVENTS_DIR / "requests" / name).read_bytes()
    validate_request(data, attributes={"request_id": "r1"} if name.startswith("bare") else {}, settings=settings)
    if name.startswith("bare"):  # the bare bodies pass the defaults too
        validate_request(data, attributes={}, settings=Settings.from_env({}))


def test_the_effective_policy_says_what_a_publisher_may_do() -> None:
    shown = describe_policy(OPERATOR)
    assert shown["custom_job"]["images"] == ["us-docker.pkg.dev/corp/train/"]
    assert shown["custom_job"]["service_accounts"] == [TRAINER]
    assert shown["fallback_strategies"] == "none (Spot only)"
    assert shown["ceilings"]["timeout_seconds"] == 7 * 86400
    assert shown["custom_job"]["opt_in_fields"]["SPOTJOBS_ALLOWED_NETWORKS"]["allowed"] == []
